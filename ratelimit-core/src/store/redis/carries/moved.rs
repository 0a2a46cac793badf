//! A bucket moved to another Cluster slot than its old state's: the read after a carried
//! spend, and a call dropped or held at each of its steps.

use super::*;

/// A bucket moved to another Cluster slot than its old state's (a budget without a user key,
/// each key hashed whole): the old state `from` (a token every 6 s, 15 at most) spent 5 (30 s
/// owed), the moved state `into` (the same rate on two minutes) not yet carried into, the
/// scripts loaded on both masters, as after any first call (a script sent without its source
/// to a node that lacks it is sent again only by a caller still there: a dropped call's would
/// never run). Named `name` in its keys.
pub(super) struct Moved {
    pub(super) _cluster: RedisCluster,
    pub(super) store: RedisStore,
    pub(super) from: String,
    pub(super) into: String,
    pub(super) old: Quota,
    pub(super) new: Quota,
    /// The moved state's master, then the old state's.
    pub(super) masters: [redis::Connection; 2],
}

impl Moved {
    pub(super) async fn new(name: &str, timeout: Duration) -> Moved {
        let cluster = RedisCluster::start();
        let options = RedisOptions::cluster(cluster.urls()).timeout(timeout);
        let store = RedisStore::new(options).unwrap();
        let p = prefix(name);
        let tag = (0..)
            .map(|i| format!("o{i}"))
            .find(|tag| node_of(&cluster, tag) != node_of(&cluster, "u"))
            .unwrap();
        let (from, into) = (format!("{p}:{{{tag}}}:old"), format!("{p}:{{u}}:new"));
        let (old, new) = (old_bucket(), tokens(10, 5, 2 * MINUTE, 20));
        let masters = [node_of(&cluster, "u"), node_of(&cluster, &tag)]
            .map(|node| cluster.nodes[node].connection());
        let (warm_from, warm_into) = (format!("{p}:{{{tag}}}:warm"), format!("{p}:{{u}}:warm"));
        assert!(spend(&store, &warm_from, &old, 1).await.allowed);
        let warm = [carry(&warm_from, &old)];
        let warmed = carrying(&store, &warm_into, &new, 1, &warm, Mode::Spend).await;
        assert!(warmed.unwrap().allowed);
        assert!(spend(&store, &from, &old, 5).await.allowed);
        Moved {
            _cluster: cluster,
            store,
            from,
            into,
            old,
            new,
            masters,
        }
    }

    /// A carrying spend of 1 on the moved state, as a task (to drop, or to wait for).
    pub(super) fn spend(&self) -> tokio::task::JoinHandle<Result<Decision, Error>> {
        self.spend_by(self.store.clone())
    }

    /// [`spend`](Self::spend) by `store` (another pod's, on connections of its own).
    pub(super) fn spend_by(
        &self,
        store: RedisStore,
    ) -> tokio::task::JoinHandle<Result<Decision, Error>> {
        let (from, into) = (self.from.clone(), self.into.clone());
        let (old, new) = (self.old, self.new);
        tokio::spawn(async move {
            let carried = [carry(&from, &old)];
            carrying(&store, &into, &new, 1, &carried, Mode::Spend).await
        })
    }

    /// The old state spent 5 more (as a pod still in its old window spends there).
    pub(super) async fn others_spend(&self) {
        assert!(spend(&self.store, &self.from, &self.old, 5).await.allowed);
    }

    /// Until what a carried spend's task adds is written (the mark beside the moved state).
    pub(super) async fn until_added(&mut self, what: &str) {
        let mark = super::super::given::grown_mark(&self.into, &self.from);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !exists(&mut self.masters[0], &mark) {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: nothing was added"
            );
            tokio::task::yield_now().await;
        }
    }

    /// What the moved bucket admits, carrying, until it refuses; and the error that ended
    /// it instead, if one did.
    pub(super) async fn admitted_after(&self) -> (usize, Option<Error>) {
        let carried = [carry(&self.from, &self.old)];
        let mut admitted = 0;
        loop {
            match carrying(&self.store, &self.into, &self.new, 1, &carried, Mode::Spend).await {
                Ok(d) if d.allowed => admitted += 1,
                Ok(_) => return (admitted, None),
                Err(e) => return (admitted, Some(e)),
            }
        }
    }
}

/// What may meet a carried spend's read after its script (`run_checked`), written or done
/// while that read waits on the old state's master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meanwhile {
    /// The mark beside the moved state (`grown_mark`) overwritten with a string no addition
    /// writes.
    GarbageMark,
    /// The call's pending record beside the moved state (`pending_key`) overwritten so.
    GarbagePending,
    /// The old state overwritten so (after the script read it, before the script ran).
    GarbageOld,
    /// The old state reset (by a pod the reload has not reached), at the same point.
    ResetOld,
    /// The old state's master held past the store's timeout: the read after times out.
    Held,
}

/// A spend that carries a bucket's debt from another slot (30 s read), the old state
/// spent 5 more after its read (60 s), its read after made to wait on the old state's
/// master, `meanwhile` done then: the call's answer, and what the moved bucket admits after
/// (carrying, until refused or failed).
async fn met_before_the_read_after(meanwhile: Meanwhile) -> (Result<Decision, Error>, usize) {
    use super::super::redis_server::{pause_writes, unpause, until_waiting};
    let name = format!("met-{meanwhile:?}");
    let mut moved = Moved::new(&name, Duration::from_millis(1500)).await;
    let (into_master, from_master) = (0, 1);
    pause_writes(&mut moved.masters[into_master]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[into_master], 1);
    moved.others_spend().await;
    let garbage = |c: &mut redis::Connection, key: &str| {
        let set = redis::cmd("SET").arg(key).arg("garbage").query::<()>(c);
        set.unwrap();
    };
    // The old state's own master paused, nothing written there would come before the read.
    if meanwhile == Meanwhile::GarbageOld {
        garbage(&mut moved.masters[from_master], &moved.from);
    }
    if meanwhile == Meanwhile::ResetOld {
        assert!(moved.store.reset(&moved.from).await.unwrap());
    }
    pause_writes(&mut moved.masters[from_master]);
    unpause(&mut moved.masters[into_master]);
    until_waiting(&mut moved.masters[from_master], 1);
    if meanwhile == Meanwhile::GarbageMark {
        let mark = super::super::given::grown_mark(&moved.into, &moved.from);
        garbage(&mut moved.masters[into_master], &mark);
    }
    if meanwhile == Meanwhile::GarbagePending {
        let record = moved.record_key();
        garbage(&mut moved.masters[into_master], &record);
    }
    let decided = match meanwhile {
        Meanwhile::Held => {
            let decided = call.await.unwrap();
            unpause(&mut moved.masters[from_master]);
            decided
        }
        _ => {
            unpause(&mut moved.masters[from_master]);
            call.await.unwrap()
        }
    };
    (decided, moved.admitted_after().await.0)
}

/// Garbage in the mark of what was added, before a carried spend's read after adds what the
/// old state grew by: the addition fails, and the call is refused, its spend kept (fail
/// closed). Its pending record stands (`lua/carry.lua`), so the next carried spend adds what
/// the old state grew by since, which reads the mark: each fails (state of an unexpected
/// shape), as after garbage in the old state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_grown_mark_refuses_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::GarbageMark).await;
    assert!(decided.is_ok_and(|d| !d.allowed && d.remaining == 0));
    assert_eq!(admitted, 0);
}

/// Garbage in a carried spend's pending record before its read after adds what the old state
/// grew by: as garbage in the mark, the call is refused, its spend kept, and each carried
/// spend after fails (each reads the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_pending_record_refuses_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::GarbagePending).await;
    assert!(decided.is_ok_and(|d| !d.allowed && d.remaining == 0));
    assert_eq!(admitted, 0);
}

/// Garbage in the old state between a carried spend's script and its read after: the call
/// fails (state of an unexpected shape: for the failure policy, the moved bucket having
/// room), and so does every call after (nothing admitted past the garbage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_old_state_before_the_read_after_fails_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::GarbageOld).await;
    assert!(
        matches!(decided, Err(Error::UnexpectedState { .. })),
        "{decided:?}"
    );
    assert_eq!(admitted, 0);
}

/// The old state's master holding a carried spend's read after past the store's timeout: the
/// call fails (for the failure policy), its spend kept, and its pending record stands
/// (`lua/carry.lua`): the next carried spend adds what the old state grew by since the
/// call's read (its 30 s), so 4 are admitted after, the failed call's spend counted: 15 over
/// the whole history with it, as on one server, whatever the failure policy made of it (where
/// the next carry covered its spend, 5 were admitted after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_held_past_the_timeout_fails_the_call() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::Held).await;
    assert!(
        matches!(decided, Err(Error::Timeout { .. } | Error::Store { .. })),
        "{decided:?}"
    );
    assert_eq!(admitted, 4);
}

/// The old state reset between a carried spend's read (30 s) and its read after, after a pod
/// in the old window spent 5 more (60 s): the read after finds it full, and added nothing
/// (`grown_since` of a full bucket): 9 admitted after, where one server (the call's script
/// after the 5 more) leaves 4. The reset adds what it erased to the time kept beside the old
/// state while it is carried (`lua/reset.lua`, `lua/level.lua`), which the read after reads
/// in its end: the call admitted (its bucket had room), 4 after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_state_reset_before_the_read_after_leaves_what_one_server_leaves() {
    let (decided, admitted) = met_before_the_read_after(Meanwhile::ResetOld).await;
    assert!(decided.as_ref().is_ok_and(|d| d.allowed), "{decided:?}");
    assert_eq!(admitted, 4);
}

/// Where a carried spend's caller is dropped (its task aborted), each step waiting on its
/// node (`CLIENT PAUSE WRITE`) while it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhileItsWaiting {
    /// Its read of the old state, on the old state's master: nothing is sent after it.
    Read,
    /// Its script, sent, on the moved state's master.
    Script,
    /// Its read after the script, on the old state's master.
    ReadAfter,
    /// What that read found added, on the moved state's master.
    Addition,
}

/// A spend carrying a bucket's debt from another slot (30 s read before the old state is
/// spent 5 more, to 60 s, where a pod still in its old window spends), dropped at `point`:
/// what the moved bucket of 15 admits after, carrying, until refused. What was added is
/// waited for (its mark) where the call's script ran.
async fn dropped_at(point: WhileItsWaiting) -> usize {
    use super::super::redis_server::{pause_writes, unpause, until_waiting};
    let mut moved = Moved::new(&format!("dropped-at-{point:?}"), Duration::from_secs(2)).await;
    // The step the call is dropped at: its read (on the old state's master), its script (on
    // the moved state's), its read after, its addition; the steps after the read alternate.
    let (first, steps) = match point {
        WhileItsWaiting::Read => (1, 0),
        WhileItsWaiting::Script => (0, 0),
        WhileItsWaiting::ReadAfter => (0, 1),
        WhileItsWaiting::Addition => (0, 2),
    };
    pause_writes(&mut moved.masters[first]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[first], 1);
    if point != WhileItsWaiting::Read {
        moved.others_spend().await; // owes 60 s
    }
    // Each step's node paused before the one it waits on is let go.
    let mut waiting = first;
    for _ in 0..steps {
        let next = 1 - waiting;
        pause_writes(&mut moved.masters[next]);
        unpause(&mut moved.masters[waiting]);
        until_waiting(&mut moved.masters[next], 1);
        waiting = next;
    }
    call.abort();
    assert!(call.await.is_err_and(|e| e.is_cancelled()));
    unpause(&mut moved.masters[waiting]);
    if point == WhileItsWaiting::Read {
        until_waiting(&mut moved.masters[1], 0);
        moved.others_spend().await; // owes 60 s
    } else {
        moved.until_added(&format!("{point:?}")).await;
    }
    let (admitted, error) = moved.admitted_after().await;
    assert!(error.is_none(), "{point:?}: {error:?}");
    admitted
}

/// A carried spend dropped at each of its steps, the old state spent meanwhile: once its
/// script is sent, its spend lands and what the old state grew by is added (its task): 4
/// left of the bucket of 15 (10 spent on the old state, 1 by the dropped call), as one
/// server leaves; dropped before, nothing of it is spent: 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_spend_dropped_at_each_step_leaves_what_one_server_leaves() {
    let points = [
        WhileItsWaiting::Read,
        WhileItsWaiting::Script,
        WhileItsWaiting::ReadAfter,
        WhileItsWaiting::Addition,
    ];
    let mut left = Vec::new();
    for point in points {
        left.push(dropped_at(point).await);
    }
    assert_eq!(left, [5, 4, 4, 4]);
}

/// helper-79's probes of the pending record (`lua/carry.lua`): a spend carrying the old
/// state's debt (30 s) whose read after is held past the store's timeout, after a pod in
/// the old window spent 5 more (60 s): the call fails, its record (30 s, its id) stands.
pub(super) async fn held_past_the_read_after(moved: &mut Moved) {
    use super::super::redis_server::{pause_writes, unpause, until_waiting};
    pause_writes(&mut moved.masters[0]);
    let call = moved.spend();
    until_waiting(&mut moved.masters[0], 1);
    moved.others_spend().await;
    pause_writes(&mut moved.masters[1]);
    unpause(&mut moved.masters[0]);
    until_waiting(&mut moved.masters[1], 1);
    let decided = call.await.unwrap();
    unpause(&mut moved.masters[1]);
    assert!(
        matches!(decided, Err(Error::Timeout { .. } | Error::Store { .. })),
        "{decided:?}"
    );
}

impl Moved {
    /// The key of the pending record beside the moved state.
    pub(super) fn record_key(&self) -> String {
        super::super::given::pending_key(&self.into, &self.from)
    }

    /// Writes `value` where the pending record stands, as no script would.
    pub(super) fn set_record(&mut self, value: &str) {
        let key = self.record_key();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(value)
            .query(&mut self.masters[0])
            .unwrap();
    }
}

/// The record beside `moved`'s moved state, or None.
pub(super) fn record_of(moved: &mut Moved) -> Option<String> {
    let key = moved.record_key();
    redis::cmd("GET")
        .arg(&key)
        .query(&mut moved.masters[0])
        .unwrap()
}
