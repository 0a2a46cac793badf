//! What a service knows of its fleet's reload horizon record: what it knows recorded, what
//! it read of other services' penalties, and when a read is due ([`Fleet`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::clock::Nanos;

/// What a service knows of its fleet's record ([`Store::horizon`](crate::store::Store)).
pub(in crate::service) struct Fleet {
    /// Whether the store records one (else nothing here is used).
    pub(in crate::service) records: bool,
    /// What is known to be recorded: raised or read by this service, under every key prefix
    /// the running configuration writes or carries (the least of their records). Forgotten
    /// where a reload brings in a prefix (`horizon_prefixes_moved`): known of one prefix's
    /// record and taken for another's, a quota of a call's own written under the next
    /// prefix raised nothing there, and another pod reading it let a move go (15 admitted
    /// against none: probes_horizon_ids_redis).
    pub(super) recorded_outlasts: AtomicU64,
    pub(super) recorded_window: AtomicU64,
    /// Of the penalty bounds: the least bound another service reads (the largest where it
    /// is this service's own, else the second), which this service's next bound must reach,
    /// or lie under another's own larger one, read by nobody.
    pub(super) recorded_penalized: AtomicU64,
    /// The latest exact penalty end known recorded (this service's clock).
    pub(super) recorded_end: AtomicU64,
    /// This service's id in the record: which penalty ends it raised itself. Never 0.
    pub(super) id: u64,
    /// When a penalty made through another service may leave its latest debt, as read: a
    /// moved bucket's old state is carried until then at least (`Kept::carrying_with`).
    /// Only ends another service raised (the record's ids): its own penalties are noted
    /// exactly (`Inner::penalized_until`), and the bound it raises before one is made is
    /// looser (read back as another's, one service on Redis carried an old state longer
    /// than the memory store, and answered otherwise: probes_carry_redis' histories). Both
    /// the bounds and the exact ends are read: where only the largest bound was, and a
    /// service took it for its own, a smaller bound another raised, whose debt ended later
    /// than its own, was lost under it (15 admitted against none: probes_horizon_record_redis);
    /// and the second bound, the largest of another service than the largest's raiser: with
    /// that other's exact end lost after its penalty, its bound under this one's own was read
    /// by nobody (15 admitted against none: probes_horizon_ids_redis).
    pub(in crate::service) penalized: AtomicU64,
    /// The latest exact penalty end another service raised, as read (this service's
    /// clock): with this service's own exact ends, the debt a penalty may stack on
    /// (`penalty_bound`). Not the bounds: each is raised from the latest end known before it
    /// plus its debt, and raised from the other's bound read back, two services' bounds
    /// climbed with every penalty whatever the keys (1,433 s after 40 penalties of one unit
    /// on 40 keys, against 191 s on one service: probes_horizon_ids_redis), holding every
    /// move until they end.
    pub(in crate::service) ended: AtomicU64,
    /// When the record was last read (this service's clock, taken before the read).
    pub(super) read_at: AtomicU64,
    /// When this service raises the record again before its next write past what the
    /// configuration holds (half the time it asked the store to keep it: `Horizon::keep_nanos`),
    /// whatever is recorded: the record expires, as every key of the store does.
    pub(super) refresh_at: AtomicU64,
    /// The first instant after `read_at` where something this service keeps could let go:
    /// a call at or past it reads the record first. `u64::MAX`: nothing.
    pub(super) due: AtomicU64,
    /// How many reads raised what this service knows (`fold`): a prepared site worked out
    /// before one is no longer current (`Prepared::is_current`).
    pub(super) folds: AtomicU64,
    /// How many reloads brought in a key prefix: an exchange begun before one notes nothing
    /// as recorded (it read the prefixes of before).
    pub(super) prefixes_moved: AtomicU64,
    /// A read found the record lost and its raise again failed: until a raise is made, a read
    /// is due at every call (`set_horizon_due`), not at the next instant something kept could
    /// let go. The read had already moved that instant on, and the record stayed lost to
    /// every service that read it meanwhile: a pod that never knew it let a move go (15
    /// admitted against none:
    /// `a_lost_record_whose_raise_again_fails_is_raised_at_the_next_call`).
    pub(super) unraised: AtomicBool,
    /// The store's count of records lost ([`Store::records_lost`]) as this service last
    /// saw it: where it moved, what is known recorded may be gone with the rest of the store
    /// (`notice_lost`).
    ///
    /// [`Store::records_lost`]: crate::store::Store::records_lost
    pub(super) lost_seen: AtomicU64,
}

impl Fleet {
    /// `lost`: the store's count of records lost now.
    pub(in crate::service) fn new(records: bool, lost: u64) -> Self {
        Fleet {
            records,
            recorded_outlasts: AtomicU64::new(0),
            recorded_window: AtomicU64::new(0),
            recorded_penalized: AtomicU64::new(0),
            recorded_end: AtomicU64::new(0),
            id: service_id(),
            penalized: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            read_at: AtomicU64::new(0),
            refresh_at: AtomicU64::new(0),
            due: AtomicU64::new(u64::MAX),
            folds: AtomicU64::new(0),
            prefixes_moved: AtomicU64::new(0),
            unraised: AtomicBool::new(false),
            lost_seen: AtomicU64::new(lost),
        }
    }

    /// Forgets what is known to be recorded: the next write past nothing raises it.
    pub(super) fn forget_recorded(&self) {
        for known in [
            &self.recorded_outlasts,
            &self.recorded_window,
            &self.recorded_penalized,
            &self.recorded_end,
        ] {
            known.store(0, Ordering::SeqCst);
        }
    }

    /// How many reads raised what this service knows.
    pub(in crate::service) fn folds(&self) -> u64 {
        self.folds.load(Ordering::Relaxed)
    }

    /// When the record was last read.
    pub(in crate::service) fn read_at(&self) -> Nanos {
        self.read_at.load(Ordering::Relaxed)
    }
}

/// An id for a service, never 0, unlike any other's in this process (a counter) and, with
/// overwhelming odds, in any other (std's per-process random hash keys, and the process id).
fn service_id() -> u64 {
    use std::hash::BuildHasher;
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let count = COUNT.fetch_add(1, Ordering::Relaxed);
    let id = std::collections::hash_map::RandomState::new().hash_one((std::process::id(), count));
    id.max(1)
}
