//! Time sources. Every algorithm takes `now` as an argument; the clock only decides where it
//! comes from, so tests drive time by hand instead of sleeping.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch: the one unit of time inside the crate.
pub type Nanos = u64;

/// A source of wall-clock time, in nanoseconds since the Unix epoch.
///
/// Wall time (not a monotonic instant) is deliberate: fixed windows are aligned to multiples of
/// the window since the epoch so that every process agrees on when a window resets, and
/// `reset_at` is reported as an epoch timestamp.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Nanos;

    /// An instant no earlier than any [`now`](Self::now) this clock has returned: what a
    /// refund measures a spend's remaining hold from, so that a clock stepped back never
    /// gives back tokens that had come back before the step (probes_bucket_refunds: a refund
    /// at a clock set back 4.9 s let 11 calls in at one instant against a bucket of 10).
    /// The default, `now`, is right for a clock that never goes back; a clock that may
    /// (the wall clock) says how far it had gone.
    fn latest(&self) -> Nanos {
        self.now()
    }
}

/// The operating system's wall clock, read through the CPU's counter.
///
/// `now` is the wall clock (`CLOCK_REALTIME`, the clock of `SystemTime::now()`) as of the
/// last *anchor*, plus the time elapsed since on a monotonic counter: the TSC on x86-64, the
/// system counter on AArch64, read by [`quanta`] without a fence (cheaper than
/// `clock_gettime`, more so inside the memory store's loop, whose previous loads and atomics
/// the vDSO's fenced read waits for: BENCHMARKS.md, `memory`). Where quanta finds no
/// invariant counter it counts with `CLOCK_MONOTONIC` instead: as correct, not faster.
///
/// Every 100 ms of counter time one caller re-anchors against the wall clock, so:
///
/// - **Bounded drift.** Between anchors `now` runs at the counter's rate while the wall clock
///   runs at NTP's; they differ by quanta's calibration error (tens of ppm) plus NTP's
///   frequency correction (at most 500 ppm, the kernel's limit on slewing). Over 100 ms that
///   is at most about 60 µs, plus the few hundred nanoseconds an anchor's own read is
///   uncertain by. (Measured here: a few µs; `tests::drift_at_anchors_is_small`.)
/// - **Steps are followed.** A wall clock set forward or back (`settimeofday`, an NTP step,
///   a resumed VM) shows within 100 ms of counter time. Across a suspend the counter may not
///   run, so `now` lags the wall clock by the suspension until the next anchor, at most
///   100 ms of counter time after resuming.
/// - **A counter that jumps back** (a host whose TSC is not as invariant as CPUID says)
///   triggers a re-anchor at the next read, rather than leaving `now` behind.
/// - **Monotonic between anchors**, as the counter is; an anchor may move `now` back by the
///   drift (microseconds), or by a step of the wall clock, as the wall clock itself would.
///
/// The first read calibrates the counter against the OS clock (quanta: usually 10–20 ms, at
/// most 200 ms, once per process); [`RateLimitService`](crate::RateLimitService) reads its
/// clock once when it is built, so that is not paid by a decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        anchor().now()
    }

    /// `now`, or after the wall clock was stepped back, the time the previous anchor had
    /// reached when the step was seen, until `now` passes it.
    fn latest(&self) -> Nanos {
        let anchor = anchor();
        anchor
            .now()
            .max(anchor.stepped_from.load(Ordering::Relaxed))
    }
}

/// How often, in counter nanoseconds, [`SystemClock`] re-reads the wall clock: the drift bound
/// is proportional to it (see [`SystemClock`]), the cost of the re-read (a `clock_gettime`,
/// once) inversely.
const REANCHOR_EVERY: Nanos = 100_000_000;

/// An anchor read whose two counter reads lie further apart than this was interrupted (a
/// preemption, a page fault); it is read again, a few times at most.
const TIGHT_READ: Nanos = 20_000;

/// Whether a read at `elapsed` re-anchors, `next` being the deadline: once the deadline has
/// passed, and also when the counter reads more than an interval before the last anchor
/// (`next` is at most one interval past it, plus the skew between two cores' counters),
/// which only a counter that jumped back does. Re-anchoring then keeps `now` on the wall
/// clock rather than behind it until the counter catches up. One comparison either way.
#[inline]
fn due(elapsed: Nanos, next: Nanos) -> bool {
    next.wrapping_sub(elapsed).wrapping_sub(1) >= 2 * REANCHOR_EVERY
}

/// The global state behind [`SystemClock`], so that the clock itself stays a zero-sized `Copy`
/// value. On its own cache line pair: it is read by every decision and written only by an
/// anchor, and a neighbour written on every call would make every read a miss.
#[repr(align(128))]
struct Anchor {
    counter: quanta::Clock,
    /// The counter's raw reading when the anchor was created: elapsed nanoseconds count from
    /// here (u128 scaling in quanta, so they do not overflow for centuries).
    base: u64,
    /// The wall clock minus the elapsed counter nanoseconds, as of the last anchor (wrapping:
    /// a wall clock set before the counter started makes it "negative"). One word, so a
    /// reader gets one anchor or the next, never half of each.
    offset: AtomicU64,
    /// Elapsed counter nanoseconds past which the next caller re-anchors; whoever moves it
    /// on by compare-exchange does the anchoring, everyone else keeps the current offset.
    next: AtomicU64,
    /// The largest time an anchor had reached when the next one put `now` behind it (a wall
    /// clock stepped back, or the drift): no `now` returned before was later (the counter
    /// only goes forward). Written by re-anchors only; read by [`Clock::latest`].
    stepped_from: AtomicU64,
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(Anchor::new)
}

impl Anchor {
    fn new() -> Self {
        let counter = quanta::Clock::new();
        let base = counter.raw();
        let anchor = Anchor {
            counter,
            base,
            offset: AtomicU64::new(0),
            next: AtomicU64::new(0),
            stepped_from: AtomicU64::new(0),
        };
        let (wall, elapsed) = anchor.read_wall();
        anchor
            .offset
            .store(wall.wrapping_sub(elapsed), Ordering::Relaxed);
        anchor
            .next
            .store(elapsed.saturating_add(REANCHOR_EVERY), Ordering::Relaxed);
        anchor
    }

    /// Counter nanoseconds since `base`. A counter read below `base` (counters of two cores
    /// apart by more than the process's age) counts as zero rather than wrap.
    #[inline]
    fn elapsed(&self) -> Nanos {
        self.counter.delta_as_nanos(self.base, self.counter.raw())
    }

    #[inline]
    fn now(&self) -> Nanos {
        let elapsed = self.elapsed();
        let next = self.next.load(Ordering::Relaxed);
        if due(elapsed, next) {
            return self.reanchor(next, elapsed);
        }
        // Relaxed is enough: `offset` is a whole anchor by itself, and an older one is only
        // older by the drift bound.
        elapsed.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Re-reads the wall clock if this caller is the one to move `next` on.
    ///
    /// The new anchor may put `now` microseconds behind what the previous one gave (the
    /// drift, see [`SystemClock`]). That is safe for the stores: callers already read `now`
    /// before taking a key's lock, so a decision can see a `now` older than the key's state
    /// whatever the clock, and the algorithms decide such a `now` in the key's recorded
    /// window rather than before it (the clamps in `algorithm.rs`).
    #[cold]
    #[inline(never)]
    fn reanchor(&self, seen_next: Nanos, elapsed: Nanos) -> Nanos {
        let won = self
            .next
            .compare_exchange(
                seen_next,
                elapsed.saturating_add(REANCHOR_EVERY),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok();
        if !won {
            return elapsed.wrapping_add(self.offset.load(Ordering::Relaxed));
        }
        let (wall, at) = self.read_wall();
        let reached = at.wrapping_add(self.offset.load(Ordering::Relaxed));
        if reached > wall {
            self.stepped_from.fetch_max(reached, Ordering::Relaxed);
        }
        self.offset.store(wall.wrapping_sub(at), Ordering::Relaxed);
        wall
    }

    /// The wall clock and the elapsed counter nanoseconds at the moment it was read: the
    /// midpoint of two counter reads around it, retried if they are far apart.
    fn read_wall(&self) -> (Nanos, Nanos) {
        let mut best = (0, 0, Nanos::MAX);
        for _ in 0..4 {
            let before = self.elapsed();
            let wall = wall_clock();
            let after = self.elapsed();
            let spread = after.saturating_sub(before);
            if spread < best.2 {
                best = (wall, before + spread / 2, spread);
            }
            if spread <= TIGHT_READ {
                break;
            }
        }
        (best.0, best.1)
    }
}

/// The wall clock, read once per anchor (every [`REANCHOR_EVERY`]), never per decision: its
/// cost does not matter, so it is `SystemTime` on every platform.
fn wall_clock() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as Nanos)
        // A clock set before 1970 is a broken host; treat it as the epoch rather than panic.
        .unwrap_or(0)
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use ratelimit_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(Duration::from_secs(1_000));
/// let other = clock.clone();
/// clock.advance(Duration::from_millis(1_500));
/// assert_eq!(other.now(), 1_001_500_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
    /// The latest time it was set to ([`Clock::latest`]).
    latest: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `since_epoch`.
    pub fn new(since_epoch: Duration) -> Self {
        let at = since_epoch.as_nanos() as Nanos;
        Self {
            now: Arc::new(AtomicU64::new(at)),
            latest: Arc::new(AtomicU64::new(at)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = by.as_nanos() as Nanos;
        let at = self.now.fetch_add(by, Ordering::SeqCst) + by;
        self.latest.fetch_max(at, Ordering::SeqCst);
    }

    /// Sets the clock to `since_epoch` (which may be earlier than now: clocks do go back).
    pub fn set(&self, since_epoch: Duration) {
        let at = since_epoch.as_nanos() as Nanos;
        self.now.store(at, Ordering::SeqCst);
        self.latest.fetch_max(at, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }

    /// The latest time the clock was set or advanced to.
    fn latest(&self) -> Nanos {
        self.latest.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn std_now() -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as Nanos
    }

    /// Agreement with `SystemTime::now()`, the clock `SystemClock` stands for. The bound is
    /// loose (5 ms, against a drift bound of about 60 µs) so that a preempted test thread or
    /// an NTP step on a CI host does not fail it.
    #[test]
    fn system_clock_is_the_wall_clock() {
        const SLACK: Nanos = 5_000_000;
        for _ in 0..1_000 {
            let before = std_now();
            let ours = SystemClock.now();
            let after = std_now();
            assert!(
                before.saturating_sub(SLACK) <= ours && ours <= after + SLACK,
                "{before} <= {ours} <= {after} (± {SLACK} ns)"
            );
        }
    }

    /// Between two anchors `now` never goes back. Other tests read the clock concurrently and
    /// may re-anchor it; a stretch of reads is only checked when the offset was the same
    /// before and after it.
    #[test]
    fn system_clock_is_monotonic_between_anchors() {
        let anchor = anchor();
        let mut checked = 0;
        while checked < 10 {
            let offset = anchor.offset.load(Ordering::Relaxed);
            let reads: Vec<Nanos> = (0..100_000).map(|_| SystemClock.now()).collect();
            if anchor.offset.load(Ordering::Relaxed) != offset {
                continue;
            }
            for pair in reads.windows(2) {
                assert!(pair[0] <= pair[1], "{} then {}", pair[0], pair[1]);
            }
            checked += 1;
        }
    }

    /// `latest` is never before a `now` read earlier, on the system clock (across the
    /// re-anchors other tests cause) and on a manual clock set back.
    #[test]
    fn latest_is_never_before_an_earlier_now() {
        let mut seen = 0;
        for _ in 0..200_000 {
            seen = seen.max(SystemClock.now());
            assert!(SystemClock.latest() >= seen);
        }
        let clock = ManualClock::new(Duration::from_secs(100));
        clock.advance(Duration::from_secs(5));
        clock.set(Duration::from_secs(50));
        assert_eq!(clock.now(), 50_000_000_000);
        assert_eq!(clock.latest(), 105_000_000_000);
        clock.set(Duration::from_secs(200));
        assert_eq!(clock.latest(), 200_000_000_000);
    }

    #[test]
    fn anchors_fall_due_at_the_deadline_or_when_the_counter_goes_back() {
        let next = 10 * REANCHOR_EVERY;
        // Before the deadline, including a counter a little behind the last anchor.
        for elapsed in [
            next - 1,
            next - REANCHOR_EVERY,
            next - 2 * REANCHOR_EVERY + 1,
        ] {
            assert!(!due(elapsed, next), "{elapsed}");
        }
        // At or past the deadline.
        for elapsed in [next, next + 1, next + 1_000 * REANCHOR_EVERY, Nanos::MAX] {
            assert!(due(elapsed, next), "{elapsed}");
        }
        // Far behind it: the counter went back.
        for elapsed in [next - 2 * REANCHOR_EVERY - 1, 0] {
            assert!(due(elapsed, next), "{elapsed}");
        }
        // A counter below its base reads 0; after one re-anchor there it is not due again.
        assert!(!due(0, REANCHOR_EVERY));
    }

    /// What an anchor corrects: the counter's prediction of the wall clock against a fresh
    /// read, after one re-anchoring interval. Far below the documented bound here; the
    /// assertion is the bound with room for a busy host (a preempted read), not the typical
    /// figure.
    #[test]
    fn drift_at_anchors_is_small() {
        let anchor = anchor();
        let (wall, at) = anchor.read_wall();
        let offset = wall.wrapping_sub(at);
        let mut worst = 0;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(2 * REANCHOR_EVERY / 1_000_000) {
            std::thread::sleep(Duration::from_millis(10));
            let (wall, at) = anchor.read_wall();
            let predicted = at.wrapping_add(offset);
            worst = worst.max(predicted.abs_diff(wall));
        }
        eprintln!("largest drift over 200 ms of counter time: {worst} ns");
        // Twice the interval: 120 µs at 500 ppm; 1 ms leaves room for a preempted read.
        assert!(worst < 1_000_000, "drift {worst} ns over 200 ms");
    }
}
