//! The single server's connection: a multiplexed connection of the store's own, whose calls
//! are bounded by one deadline per connection rather than a timer per call.
//!
//! Every call to Redis gives up after [`RedisOptions::timeout`](super::RedisOptions::timeout).
//! A Tokio timer per call keeps that bound, but costs two locks on the timer wheel, the
//! runtime's handle cloned and a waker registered, per call (redis-rs' default client, whose
//! manager carries one, costs a peer's script measurably more client CPU per call than a bare
//! connection: BENCHMARKS.md, `redis`).
//!
//! A connection answers in order, so while its oldest unanswered request is within its
//! deadline, so is every later one; when the oldest is past it, the connection is broken for
//! every request behind it too. So a link counts its calls by the time they started, a
//! watcher task sleeps until the deadline of the oldest calls still unanswered, and if they
//! are unanswered then it closes the connection: every call on it fails at once with
//! [`Error::Timeout`], and the next call connects anew.
//!
//! - **The bound**: a call fails no later than `timeout / 16` (1 ms for timeouts under 33 ms)
//!   after its timeout, plus Tokio's timer resolution (1 ms), calls being counted in 64 slots
//!   of time a link. The oldest calls fail no earlier than their timeout; a call behind them
//!   on the same connection fails with them, when the oldest slot's deadline passes (the
//!   connection answers in order, so it is broken for that call too): calls started together
//!   fail together, a call started just past a slot's start up to one slot (`timeout / 32`,
//!   rounded up to a power of two nanoseconds) before its own timeout. A call that started before its link
//!   existed (it waited for the connection) is bounded by a timer of its own, as is every
//!   call to a Redis Cluster.
//! - **A link per runtime**: a link's connection and watcher are tasks on the runtime that
//!   opened it, and a call uses its own runtime's link (see [`Links`]).
//! - **The cost per call**: one more count where the call starts and one where it ends, each
//!   a plain load and store on the thread's own stripe ([`stripe::StripeId`]); the watcher
//!   wakes about once a timeout while calls come, and reads the counts.
//! - **Connecting**: one attempt at a time, in a task of its own bounded by the connect
//!   timeout, so that an attempt slower than a call's timeout still completes for the calls
//!   after it; calls meanwhile wait for it (within their timeout).
//! - **A link ends** when its connection's task does (Redis closed the connection, it failed,
//!   or the runtime it ran on shut down) or when its watcher closes it. Calls in flight then
//!   fail; the next call connects anew.
//! - **Another server**: a link asks the server's `run_id` (`INFO server`) as it connects, and
//!   counts one unlike the last a link of the store found (Redis restarted, or another server
//!   answers at its address: a failover), where no link may have been seen ending (its
//!   runtime shut down first): what the store recorded on the server before may be gone
//!   (`RedisStore`'s `records_lost`). Not in the links lost, which leases read: a grant sent
//!   on the new link, its epoch read before the link was made, was void at once (9 units of
//!   a slice never spent: redis_lease).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::error::Error;
use crate::sync::Mutex;

mod calls;
use calls::{Calls, Due};

/// A timeout too long to add to the clock is as good as none (Tokio's own far future).
pub(super) const FOREVER: Duration = Duration::from_secs(86_400 * 365 * 30);

/// How one attempt to connect ended, shared with every call waiting for it.
type Attempt = Option<Result<Arc<Link>, RedisError>>;

/// The connections to one Redis server: an open link per Tokio runtime that calls, each made
/// anew when it ends.
///
/// A link's connection and watcher are tasks on the runtime that opened it, so a call uses
/// the link of the runtime it runs on: one runtime kept but idle (a current-thread runtime
/// outside `block_on`) would otherwise leave the calls of every other runtime unanswered.
/// An application with one runtime has one connection.
pub(super) struct Links {
    info: ConnectionInfo,
    connect_timeout: Duration,
    timeout: Duration,
    /// The links made, at most one open per runtime; those that have ended are dropped when
    /// the next is added.
    links: Arc<ArcSwap<Vec<Arc<Link>>>>,
    /// Per runtime, the attempt to connect under way or last made.
    attempts: Mutex<Vec<(tokio::runtime::Id, watch::Receiver<Attempt>)>>,
    /// How many links were lost: their connection ended by itself, or timed out (leases are
    /// spent only while it stays the same: a Redis restarted empty closes the connection). A
    /// link dropped with its runtime or its store is not lost.
    ended: Arc<AtomicU64>,
    /// The server the links last connected to.
    server: Arc<Server>,
}

impl Links {
    pub(super) fn new(
        info: ConnectionInfo,
        connect_timeout: Duration,
        timeout: Duration,
        ended: Arc<AtomicU64>,
    ) -> Self {
        Links {
            info,
            connect_timeout,
            timeout,
            links: Arc::default(),
            attempts: Mutex::new(Vec::new()),
            ended,
            server: Arc::default(),
        }
    }

    /// Whether `runtime` has an open link: a call from it is sent at once, on the server a
    /// link found before (else it connects first, and may find another).
    pub(super) fn open_on(&self, runtime: tokio::runtime::Id) -> bool {
        let links = self.links.load();
        links.iter().any(|l| l.runtime == runtime && l.is_open())
    }

    /// The open link of `runtime`, if there is one: no await, nothing allocated.
    #[inline]
    pub(super) fn open(&self, runtime: tokio::runtime::Id) -> Option<Arc<Link>> {
        let links = self.links.load();
        let link = links.iter().find(|l| l.runtime == runtime && l.is_open())?;
        Some(Arc::clone(link))
    }

    /// The open link of `runtime` (the current one), or a new one: calls that find none wait
    /// for the one attempt to connect on their runtime (started by the first of them, run in
    /// a task of its own).
    pub(super) async fn link(&self, runtime: tokio::runtime::Id) -> Result<Arc<Link>, RedisError> {
        if let Some(link) = self.open(runtime) {
            return Ok(link);
        }
        let mut attempt = self.attempt(runtime);
        let ended = attempt
            .wait_for(Option::is_some)
            .await
            .map_err(|_| abandoned())?;
        match &*ended {
            Some(result) => result.clone(),
            None => Err(abandoned()),
        }
    }

    /// `runtime`'s attempt under way, or a new one when none is (or the last one failed, or
    /// its link has ended). Attempts of no use any more (their runtime gone, their link
    /// ended) are dropped.
    fn attempt(&self, runtime: tokio::runtime::Id) -> watch::Receiver<Attempt> {
        let usable = |attempt: &watch::Receiver<Attempt>| match &*attempt.borrow() {
            None => attempt.has_changed().is_ok(),
            Some(Ok(link)) => link.is_open(),
            Some(Err(_)) => false,
        };
        let mut attempts = self.attempts.lock();
        attempts.retain(|(_, attempt)| usable(attempt));
        if let Some((_, running)) = attempts.iter().find(|(r, _)| *r == runtime) {
            return running.clone();
        }
        let (tell, told) = watch::channel(None);
        let (info, links) = (self.info.clone(), Arc::clone(&self.links));
        let (connect_timeout, timeout) = (self.connect_timeout, self.timeout);
        let (ended, server) = (Arc::clone(&self.ended), Arc::clone(&self.server));
        tokio::spawn(async move {
            let opened = Link::open(info, timeout, ended, server);
            let opened = tokio::time::timeout(connect_timeout, opened)
                .await
                .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()));
            if let Ok(link) = &opened {
                links.rcu(|links| {
                    let open = links.iter().filter(|l| l.is_open()).cloned();
                    open.chain([Arc::clone(link)]).collect::<Vec<_>>()
                });
            }
            tell.send_replace(Some(opened));
        });
        attempts.push((runtime, told.clone()));
        told
    }

    /// How many links found another server than the last one found ([`Server`]).
    #[inline]
    pub(super) fn servers_changed(&self) -> u64 {
        self.server.others.load(Ordering::Acquire)
    }

    /// Whether a link is open.
    pub(super) fn connected(&self) -> bool {
        self.links.load().iter().any(|l| l.is_open())
    }
}

/// An attempt to connect that ended without an answer: its task was dropped, with the
/// runtime it ran on.
fn abandoned() -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the attempt to connect was dropped with its runtime",
    )
    .into()
}

/// One connection, its task, and the calls on it counted for its watcher.
pub(super) struct Link {
    connection: MultiplexedConnection,
    /// Cleared when the connection's task ends, or when the watcher closes it.
    open: Arc<AtomicBool>,
    /// Set when the watcher closed the connection: the calls that fail with it timed out.
    timed_out: AtomicBool,
    /// The store's count of connections lost (see [`Links`]).
    lost: Arc<AtomicU64>,
    task: AbortHandle,
    /// The runtime the connection's task and the watcher run on.
    runtime: tokio::runtime::Id,
    calls: Calls,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Link {
    /// Connects to the server `info` names, sets the connection up (`AUTH`, `SELECT`, ...),
    /// notes which server it is (`server`), and starts its task and its watcher on the
    /// current runtime.
    async fn open(
        info: ConnectionInfo,
        timeout: Duration,
        ended: Arc<AtomicU64>,
        server: Arc<Server>,
    ) -> Result<Arc<Link>, RedisError> {
        // No response timeout: the watcher bounds every call (see the module's docs).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let settings = info.redis_settings();
        let open = Arc::new(AtomicBool::new(true));
        let (mut connection, task) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let stream = tcp(host, *port).await?;
                let (connection, driver) =
                    MultiplexedConnection::new_with_config(settings, stream, config).await?;
                (connection, run(driver, &open, &ended))
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                let (connection, driver) =
                    MultiplexedConnection::new_with_config(settings, stream, config).await?;
                (connection, run(driver, &open, &ended))
            }
            _ => {
                return Err(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "this build connects over TCP or a Unix socket only (no TLS)",
                )))
            }
        };
        // Before any call runs on it: a call that waited for this link is decided on the
        // server it found, counted as another one if it is.
        server.found(run_id(&mut connection).await);
        let link = Arc::new(Link {
            connection,
            open,
            timed_out: AtomicBool::new(false),
            lost: Arc::clone(&ended),
            task,
            runtime: tokio::runtime::Handle::current().id(),
            calls: Calls::new(timeout),
        });
        tokio::spawn(watch_over(Arc::downgrade(&link)));
        Ok(link)
    }

    #[inline]
    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// A handle on the connection for one call.
    #[inline]
    pub(super) fn connection(&self) -> MultiplexedConnection {
        self.connection.clone()
    }

    /// A call's error, as the caller should see it: [`Error::Timeout`] when the watcher
    /// closed the connection under it.
    fn failed(&self, error: Error, after: Duration) -> Error {
        if self.timed_out.load(Ordering::Acquire) {
            Error::Timeout { after }
        } else {
            error
        }
    }

    /// Closes the connection: every call on it fails at once (and, like a connection lost,
    /// ends every lease granted before: Redis may be another server by the next call).
    fn time_out(&self) {
        self.lost.fetch_add(1, Ordering::AcqRel);
        self.timed_out.store(true, Ordering::Release);
        self.open.store(false, Ordering::Release);
        self.task.abort();
    }
}

/// The server the store's links last connected to, by its `run_id`.
#[derive(Default)]
pub(super) struct Server {
    /// `None` before the first link; `Some(None)`: a server whose `run_id` could not be read.
    last: Mutex<Option<Option<String>>>,
    /// How many links found another server than the last one found.
    others: AtomicU64,
}

impl Server {
    /// Notes a link to the server of `run_id`: another than the last one found, or one that
    /// cannot be told from it (either `run_id` unread: fail closed), counts one in `others`,
    /// before any call runs on the link.
    fn found(&self, run_id: Option<String>) {
        let mut last = self.last.lock();
        let other = match (&*last, &run_id) {
            (None, _) => false,
            (Some(Some(was)), Some(is)) => was != is,
            _ => true,
        };
        if other {
            self.others.fetch_add(1, Ordering::AcqRel);
        }
        *last = Some(run_id);
    }
}

/// The `run_id` of the server on `connection` (`INFO server`): new at each start of a
/// server, so that a restarted one, or another at its address, is told from the one before.
/// `None` where it cannot be read (`INFO` denied, a reply without it).
async fn run_id(connection: &mut MultiplexedConnection) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(connection)
        .await
        .ok()?;
    let line = info.lines().find_map(|l| l.strip_prefix("run_id:"))?;
    Some(line.trim().to_owned()).filter(|id| !id.is_empty())
}

/// A TCP connection to `host:port`, to its addresses in turn.
async fn tcp(host: &str, port: u16) -> Result<tokio::net::TcpStream, RedisError> {
    let mut last = None;
    for address in tokio::net::lookup_host((host, port)).await? {
        match tokio::net::TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))
        .into())
}

/// Runs the connection's task; `open` is cleared when it ends, however it ends (dropped with
/// its runtime too), and `lost` counts one more when the connection ended by itself (Redis
/// closed it, or it failed: the server may have restarted).
fn run(
    driver: impl Future<Output = ()> + Send + 'static,
    open: &Arc<AtomicBool>,
    lost: &Arc<AtomicU64>,
) -> AbortHandle {
    struct Ended(Arc<AtomicBool>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    let ended = Ended(Arc::clone(open));
    let lost = Arc::clone(lost);
    tokio::spawn(async move {
        let _ended = ended;
        driver.await;
        lost.fetch_add(1, Ordering::AcqRel);
    })
    .abort_handle()
}

/// The watcher: sleeps until the deadline of the oldest calls unanswered on the link, and
/// closes it if they still are. Ends with the link.
async fn watch_over(link: Weak<Link>) {
    loop {
        let next = {
            let Some(link) = link.upgrade() else { return };
            if !link.is_open() {
                return;
            }
            match link.calls.due(Instant::now()) {
                Due::Now => {
                    link.time_out();
                    return;
                }
                Due::At(at) => at,
            }
        };
        tokio::time::sleep_until(next.into()).await;
    }
}

/// A call on a link, counted for its watcher until dropped (answered, failed, or given up
/// by its caller).
pub(super) struct Watched {
    link: Arc<Link>,
    slot: usize,
}

impl Watched {
    /// Counts a call on `link` that started at `from`; `None` for a call that started before
    /// the link was made, which its watcher could not place in time.
    #[inline]
    pub(super) fn on(link: Arc<Link>, from: Instant) -> Option<Self> {
        let slot = link.calls.start(from)?;
        Some(Watched { link, slot })
    }

    /// A handle on the link's connection for the call.
    #[inline]
    pub(super) fn connection(&self) -> MultiplexedConnection {
        self.link.connection()
    }

    /// The call's error, as its caller should see it: [`Error::Timeout`] when the watcher
    /// closed the connection under it.
    pub(super) fn failed(&self, error: Error, after: Duration) -> Error {
        self.link.failed(error, after)
    }
}

impl Drop for Watched {
    #[inline]
    fn drop(&mut self) {
        self.link.calls.end(self.slot);
    }
}
