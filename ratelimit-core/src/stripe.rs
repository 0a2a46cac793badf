//! Stripes: a counter written on every call, by every thread, kept as parts that threads
//! write apart and that are summed when read. The first threads to count each own a part,
//! which they alone write; the others share the rest in turn.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How many stripes a thread can own: the first threads to count (and later ones, as owners
/// exit) each own one, which they alone write, so they count with a plain load and store. A
/// locked add costs more than anything else a decision does but its own atomic steps (the
/// two or three of an annotated call were a large share of its time: BENCHMARKS.md,
/// `hot_path`); a counter shared by threads also moves its line between cores on every call,
/// which with two threads on one key cost more than the decision itself.
const OWNED: usize = 16;
/// Stripes that threads without one of their own share in turn, counting with a locked add:
/// with `T` threads counting, `(T - OWNED) / SHARED` to a stripe, always fewer than the
/// `T / 8` of the 8 shared stripes this replaced.
const SHARED: usize = 8;
/// How many stripes there are: a counter striped by [`StripeId`] has this many parts.
pub(crate) const STRIPES: usize = OWNED + SHARED;

/// The stripe this thread counts on now ([`stripe()`]): owned by it when below [`OWNED`].
/// Not kept past the call it was taken for: a thread gives its stripe up when it exits, and
/// whoever then takes it writes it alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StripeId(usize);

impl StripeId {
    /// Which of the [`STRIPES`] parts of a striped counter this thread writes. A stripe is
    /// always one of them ([`claim`] hands out no other, a thread that exits leaves
    /// [`OWNED`]); bounded all the same, by a compare (a remainder by 24 was a multiply and
    /// five more), so that indexing never panics.
    #[inline]
    pub(crate) fn index(self) -> usize {
        self.0.min(STRIPES - 1)
    }

    /// Adds one to `counter`, this stripe's part of a striped counter: with a plain load and
    /// store on an owned stripe (written by this thread alone: no other write can fall
    /// between the two), with a locked add on a shared one.
    #[inline]
    pub(crate) fn add_one(self, counter: &AtomicU64) {
        if self.0 < OWNED {
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        } else {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Bit `i`: owned stripe `i` belongs to a live thread.
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe, `usize::MAX` until it first counts. No destructor, so it is
    /// one load to read and stays readable while the thread's other locals are dropped.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Gives the thread's owned stripe back when the thread exits; touched once, by the
    /// claim, which registers its destructor.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        // Whatever the thread counts from here on (other locals' destructors) is shared.
        let i = STRIPE.with(|s| s.replace(OWNED));
        if i < OWNED {
            // Release: the next owner, claiming with Acquire, reads this thread's last counts.
            CLAIMED.fetch_and(!(1 << i), Ordering::Release);
        }
    }
}

/// This thread's stripe: its own while it has one, else a shared one. One load of the
/// thread's local on every call but its first, which claims one out of line.
#[inline]
pub(crate) fn stripe() -> StripeId {
    match STRIPE.get() {
        usize::MAX => StripeId(first()),
        i => StripeId(i),
    }
}

/// A thread's first stripe, claimed and kept ([`stripe`]).
#[cold]
#[inline(never)]
fn first() -> usize {
    let i = claim();
    STRIPE.set(i);
    i
}

/// An owned stripe no live thread has, or else a shared one, in turn.
#[cold]
fn claim() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut claimed = CLAIMED.load(Ordering::Relaxed);
    loop {
        let free = !claimed & ((1 << OWNED) - 1);
        if free == 0 {
            return OWNED + NEXT.fetch_add(1, Ordering::Relaxed) % SHARED;
        }
        let i = free.trailing_zeros() as usize;
        match CLAIMED.compare_exchange_weak(
            claimed,
            claimed | 1 << i,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            // Owned only with a destructor to give it back: a thread claiming while it
            // exits (its `GIVE_BACK` gone already) would keep it for good.
            Ok(_) => match GIVE_BACK.try_with(|_| ()) {
                Ok(()) => return i,
                Err(_) => {
                    CLAIMED.fetch_and(!(1 << i), Ordering::Release);
                    return OWNED;
                }
            },
            Err(now) => claimed = now,
        }
    }
}
