//! helper-57's probes of `Kept::against` under concurrency: threads calling (through
//! `consume`, stacked limits and prepared sites held across reloads) while another thread
//! reloads, on a standing hand-driven clock with windows of 20 days and more, so every
//! configuration a reload replaces holds every later call.
//!
//! The rule probed, exact: every configuration enforces each kind of call (each on a state of
//! its own: a budget per kind) with a capacity no lower than the first configuration's, and
//! every one is enforced (limiting on, no shadow). So no kind ever gets more than the first
//! configuration's capacity (every call is decided on that configuration's state, or on one a
//! reload moved it to while holding it to the first's), and once any call of a kind was refused
//! some state was spent to a capacity at least that: exactly the first capacity, whatever the
//! interleaving of calls and reloads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use ratelimit::{Config, ConfigBuilder, Options, Strategy, Tier};
use ratelimit_tests::{now, service, Rng};

/// Longer than any probe: no window turns.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// The kinds of call, each in a budget of its own, with the first configuration's capacity
/// for it: the default limit's 3, the tier `free`'s 2, an own limit of 3.
fn kinds() -> [(Options, u64); 3] {
    [
        (Options::new().budget("x"), 3),
        (Options::new().budget("y").tier("free"), 2),
        (Options::new().budget("z").limit(3), 3),
    ]
}

/// The first configuration: the tightest for every kind.
fn first() -> ConfigBuilder {
    Config::builder()
        .strategy(Strategy::FixedWindow)
        .default_limit(3)
        .default_window(LONG)
        .key_prefix("rl")
        .tier(Tier::new("free", 2).window(LONG))
        .tier(Tier::new("gold", 7).window(LONG))
}

/// A later configuration: every setting that decides a kind's quota or state drawn anew
/// (prefix, strategy, windows, burst, limits no lower than the first's), and the tier `gold`,
/// which no kind reads (a reload a kept configuration resolves alike).
fn drawn(rng: &mut Rng) -> ConfigBuilder {
    let strategy = |rng: &mut Rng| Strategy::ALL[rng.below(4) as usize];
    let window = |rng: &mut Rng| [LONG, LONG * 2][rng.below(2) as usize];
    let mut free = Tier::new("free", 2 + rng.below(3))
        .window(window(rng))
        .strategy(strategy(rng));
    if rng.below(3) == 0 {
        free = free.burst(rng.below(3));
    }
    Config::builder()
        .strategy(strategy(rng))
        .default_limit(3 + rng.below(3))
        .default_window(window(rng))
        .burst_limit(rng.below(2))
        .key_prefix(["rl", "rl2"][rng.below(2) as usize])
        .tier(free)
        .tier(Tier::new("gold", 1 + rng.below(9)).window(window(rng)))
}

/// `threads` threads each making `rounds` rounds of calls (every kind alone, through
/// `consume` or a prepared site kept from before the reloads, then two kinds stacked) while
/// one more thread makes `reloads` reloads: what each kind admitted.
fn race(seed: u64, threads: usize, rounds: usize, reloads: usize) -> Vec<u64> {
    let (service, _clock) = service(first().build().unwrap());
    let kinds = kinds();
    let admitted: Vec<AtomicU64> = kinds.iter().map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let (service, barrier) = (&service, &barrier);
        scope.spawn(move || {
            let mut rng = Rng(seed | 1);
            barrier.wait();
            for _ in 0..reloads {
                let next = drawn(&mut rng).store(service.config().store().clone());
                service.reload(next.build().unwrap()).unwrap();
                std::thread::yield_now();
            }
        });
        for t in 0..threads {
            let (kinds, admitted) = (&kinds, &admitted);
            scope.spawn(move || {
                let mut rng = Rng((seed + t as u64 * 7_919) | 1);
                let prepared: Vec<_> = (kinds.iter())
                    .map(|(o, _)| Arc::new(service.prepare(o).unwrap()))
                    .collect();
                barrier.wait();
                for _ in 0..rounds {
                    for (i, (options, _)) in kinds.iter().enumerate() {
                        let decided = match rng.below(3) {
                            0 => now(service.consume("k", options)),
                            1 => now(prepared[i].consume("k")),
                            _ => match prepared[i].consume_now("k") {
                                Some(decided) => decided,
                                None => now(prepared[i].consume("k")),
                            },
                        };
                        if decided.is_ok_and(|d| d.allowed) {
                            admitted[i].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let (a, b) = (rng.below(3) as usize, rng.below(3) as usize);
                    if a == b {
                        continue;
                    }
                    let limits = [("k", &kinds[a].0), ("k", &kinds[b].0)];
                    let decided = now(service.consume_all(&limits));
                    if decided.is_ok_and(|d| d.iter().all(|d| d.allowed)) {
                        admitted[a].fetch_add(1, Ordering::SeqCst);
                        admitted[b].fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    admitted.iter().map(|a| a.load(Ordering::SeqCst)).collect()
}

#[test]
fn threads_calling_while_a_thread_reloads_get_exactly_the_first_capacity_of_every_kind() {
    let most: Vec<u64> = kinds().iter().map(|(_, cap)| *cap).collect();
    for seed in 0..40 {
        let got = race(seed * 7_919 + 1, 2, 40, 40);
        assert_eq!(got, most, "seed {seed}: admitted per kind");
    }
}

/// The same with the reloads all made before the calls start: the transitions all in place,
/// three threads per kind racing one another and the other kinds.
#[test]
fn threads_calling_after_forty_reloads_get_exactly_the_first_capacity_of_every_kind() {
    let most: Vec<u64> = kinds().iter().map(|(_, cap)| *cap).collect();
    for seed in 0..20 {
        let (service, _clock) = service(first().build().unwrap());
        let mut rng = Rng(seed * 104_729 + 3);
        for _ in 0..40 {
            let next = drawn(&mut rng).store(service.config().store().clone());
            service.reload(next.build().unwrap()).unwrap();
        }
        let kinds = kinds();
        let got: Vec<u64> = std::thread::scope(|scope| {
            let service = &service;
            let handles: Vec<Vec<_>> = (kinds.iter())
                .map(|(options, _)| {
                    (0..3)
                        .map(|_| {
                            scope.spawn(move || {
                                let admitted = |_: &u32| {
                                    now(service.consume("k", options)).is_ok_and(|d| d.allowed)
                                };
                                (0..20).filter(admitted).count() as u64
                            })
                        })
                        .collect()
                })
                .collect();
            (handles.into_iter())
                .map(|kind| kind.into_iter().map(|h| h.join().unwrap()).sum())
                .collect()
        });
        assert_eq!(got, most, "seed {seed}: admitted per kind");
    }
}
