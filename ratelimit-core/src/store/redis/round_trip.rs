//! One round trip to Redis: the connection a call uses (its runtime's link to the one server,
//! see `link`, or the cluster's), the call bounded by the store's timeout, a script run on it
//! and its reply or error reply read.

use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

use super::eviction;
use super::link::{Links, Watched, FOREVER};
use super::redaction::store_error;
use super::scripts::{Command, Lua};
use super::RedisStore;
use crate::drivers::{self, Needs};
use crate::error::Error;

/// The code of the error reply a script returns, without writing anything, when the key
/// holds state it did not write (see `lua/prelude.lua`).
const UNEXPECTED_STATE: &str = "RATELIMIT_STATE";

/// The code of the error reply the stacked script returns, without writing anything, for a
/// carry of a state read in another Cluster slot longer ago than the wait of the call that
/// read it (`late` in `lua/carry.lua`): a call stalled between its steps, [`Error::Timeout`].
const LATE: &str = "RATELIMIT_LATE";

/// Redis' answer to `EVALSHA` of a script it does not hold.
const NO_SCRIPT: redis::ErrorKind = redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);

/// What the store talks to.
pub(super) enum Client {
    /// One server, over the store's own connection (`link`).
    Single(Links),
    /// A cluster, over redis-rs' cluster connection, made on first use.
    Cluster(
        Box<redis::cluster::ClusterClient>,
        OnceCell<ClusterConnection>,
    ),
}

/// The connection one call uses.
pub(super) enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

impl RedisStore {
    /// Runs `script` on `keys` with `args` within the timeout from `sent`: `EVALSHA`, or `EVAL`
    /// with the source when `with_source` (a script not sent yet) or when Redis answers
    /// `NOSCRIPT` (restarted, or its scripts flushed), which loads it and runs it in one
    /// round trip. State of an unexpected shape (the scripts' `RATELIMIT_STATE` error reply)
    /// is [`Error::UnexpectedState`]; a carry of a read past its call's wait
    /// (`RATELIMIT_LATE`), [`Error::Timeout`].
    pub(super) async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Lua,
        keys: &[&str],
        args: &[u64],
        mut with_source: bool,
        sent: Instant,
    ) -> Result<T, Error> {
        self.bounded(sent, |mut connection| async move {
            loop {
                let command = script.command(keys, args, with_source);
                let result = command.query_async(&mut connection).await;
                match self.replied(result, with_source) {
                    Ok(value) => return Ok(value),
                    Err(None) => with_source = true,
                    Err(Some(e)) => return Err(e),
                }
            }
        })
        .await
    }

    /// What a script's request sent with its source or not (`with_source`) came to: its
    /// value; `None` when Redis answered `NOSCRIPT` to a script sent without its source (to
    /// be sent again with it); a script's error reply as an [`Error`] (state of an unexpected
    /// shape: [`Error::UnexpectedState`]; a read past its call's wait: [`Error::Timeout`]).
    fn replied<T>(
        &self,
        result: redis::RedisResult<T>,
        with_source: bool,
    ) -> Result<T, Option<Error>> {
        result.map_err(|e| match e.code() {
            _ if !with_source && e.kind() == NO_SCRIPT => None,
            Some(UNEXPECTED_STATE) => Some(Error::UnexpectedState {
                message: e.detail().unwrap_or("").to_owned(),
            }),
            Some(LATE) => Some(Error::Timeout {
                after: self.inner.options.timeout,
            }),
            _ => Some(self.error("the limiter script failed", &e)),
        })
    }

    /// Runs the future `f` makes on a connection within the configured timeout, counted
    /// from `from`. Everything that talks to Redis goes through here.
    ///
    /// - This is where a missing Tokio runtime, or one without its timer or IO driver, is
    ///   caught ([`runtime_ready`]): the timer and the connection would panic ("there is no
    ///   reactor running", "timers are disabled") instead of failing the call.
    /// - On one server's open link (that of the runtime the call runs on), the call is
    ///   bounded by the link's watcher (see `link`), with no timer of its own.
    /// - A call that must connect first, or that started before the link it would use, and
    ///   every call to a cluster, is bounded by a Tokio timer of its own.
    ///
    /// `f` is made here rather than passed in, so that the future is held once in this one's
    /// (an `async fn` keeps its arguments apart from what it awaits: a future passed in would
    /// be held twice).
    pub(super) async fn bounded<T, F>(
        &self,
        from: Instant,
        f: impl FnOnce(Connection) -> F,
    ) -> Result<T, Error>
    where
        F: std::future::Future<Output = Result<T, Error>>,
    {
        let runtime = runtime_ready()?;
        let after = self.inner.options.timeout;
        if let Some(watched) = self.watched(runtime, from)? {
            let answered = f(Connection::Single(watched.connection())).await;
            return answered.map_err(|e| watched.failed(e, after));
        }
        let deadline = from.checked_add(after).unwrap_or_else(|| from + FOREVER);
        tokio::time::timeout_at(deadline.into(), async {
            let connection = self.connection(runtime).await?;
            f(connection).await
        })
        .await
        .unwrap_or_else(|_| Err(Error::Timeout { after }))
    }

    /// A call that started at `from`, counted on `runtime`'s open link to the one server
    /// once that server's eviction policy is known (and checked): what a call can use with no
    /// await before its request, and no timer. `None`: no open link for the runtime, the
    /// policy not known yet, a cluster, or a call that started before the link.
    #[inline]
    fn watched(
        &self,
        runtime: tokio::runtime::Id,
        from: Instant,
    ) -> Result<Option<Watched>, Error> {
        let Client::Single(links) = &self.inner.client else {
            return Ok(None);
        };
        let required = self.options().require_noeviction;
        match (
            links.open(runtime),
            eviction::checked(&self.inner.eviction, required),
        ) {
            (Some(link), Some(checked)) => checked.map(|()| Watched::on(link, from)),
            _ => Ok(None),
        }
    }

    /// [`run`](Self::run)'s request made ready on an open link, for a decision to await in
    /// its own future: no future nested in it but the connection's (which redis-rs' own
    /// callers box on every call, from glibc's large bins). `None` where `run` must
    /// decide how: no open link for this runtime, the eviction policy not known yet, a
    /// cluster, a call that started before its link, a runtime without its drivers (`run`
    /// answers why).
    #[inline]
    pub(super) fn request(
        &self,
        script: &Lua,
        keys: &[&str],
        args: &[u64],
        with_source: bool,
        from: Instant,
    ) -> Option<Request<'_>> {
        let watched = self.watched(runtime_ready().ok()?, from).ok()??;
        Some(Request {
            store: self,
            connection: watched.connection(),
            watched,
            command: script.command(keys, args, with_source),
        })
    }

    /// A connection (made if need be) whose server's eviction policy has been checked.
    async fn connection(&self, runtime: tokio::runtime::Id) -> Result<Connection, Error> {
        let mut connection = match &self.inner.client {
            Client::Single(links) => match links.link(runtime).await {
                Ok(link) => Connection::Single(link.connection()),
                Err(e) => return Err(self.error("could not connect", &e)),
            },
            Client::Cluster(client, connection) => {
                let connection = match connection.get() {
                    Some(connection) => connection,
                    // The first calls only, boxed: every later call's future is the smaller
                    // for it.
                    None => Box::pin(self.connect_cluster(client, connection)).await?,
                };
                Connection::Cluster(connection.clone())
            }
        };
        let required = self.options().require_noeviction;
        eviction::check(&self.inner.eviction, required, &mut connection).await?;
        Ok(connection)
    }

    /// The cluster's connection, made by the first call that asks (the calls meanwhile wait
    /// for it).
    async fn connect_cluster<'a>(
        &self,
        client: &redis::cluster::ClusterClient,
        connection: &'a OnceCell<ClusterConnection>,
    ) -> Result<&'a ClusterConnection, Error> {
        connection
            .get_or_try_init(|| async {
                client
                    .get_async_connection()
                    .await
                    .map_err(|e| self.error("could not connect to the cluster", &e))
            })
            .await
    }

    /// Whether the store holds a connection.
    pub(super) fn connected(&self) -> bool {
        match &self.inner.client {
            Client::Single(links) => links.connected(),
            Client::Cluster(_, connection) => connection.initialized(),
        }
    }

    pub(super) fn error(&self, context: &str, e: &redis::RedisError) -> Error {
        if e.is_timeout() {
            return Error::Timeout {
                after: self.inner.options.timeout,
            };
        }
        store_error(&self.inner.secrets, context, e)
    }
}

/// A script's request on an open link (see [`RedisStore::request`]), counted by its watcher
/// until it is dropped.
pub(super) struct Request<'a> {
    store: &'a RedisStore,
    watched: Watched,
    pub(super) connection: MultiplexedConnection,
    pub(super) command: Command,
}

impl Request<'_> {
    /// What the caller makes of Redis' answer `sent`, as [`RedisStore::run`] would: `None`
    /// when Redis answers `NOSCRIPT` to a script sent without its source.
    pub(super) fn answered(
        &self,
        sent: redis::RedisResult<redis::Value>,
        with_source: bool,
    ) -> Result<redis::Value, Option<Error>> {
        // An error reply is a value until asked (`query_async` asks).
        let replied = self
            .store
            .replied(sent.and_then(redis::Value::extract_error), with_source);
        let after = self.store.inner.options.timeout;
        replied.map_err(|e| e.map(|e| self.watched.failed(e, after)))
    }
}

/// The Tokio runtime this thread runs in, if it has the timer and IO drivers that every call
/// to Redis needs; if not, the store's error (so the failure policy decides, as for any store
/// that cannot answer), never Tokio's panic.
pub(super) fn runtime_ready() -> Result<tokio::runtime::Id, Error> {
    drivers::ready(Needs::TimerAndIo).map_err(|missing| Error::Store {
        message: format!(
            "the Redis store needs a Tokio runtime with its time and IO drivers, and \
             {missing}: call it from within one, e.g. under #[tokio::main]"
        ),
    })
}
