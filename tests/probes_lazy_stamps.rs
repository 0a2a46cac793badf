//! Probes of the memory store's lazy stamps, kept as tests: a key's state is stamped only by
//! the first spend kept for a refund (or an adjustment), never by a plain spend, and a refund
//! must still reach only the state its spend was made on. Every way tried to get a refund
//! honoured on another state (after a reset, a sweep, a reward), refused on the same state,
//! to find a key twice (stamped and not) or fresh, to lose or leak a token bucket's refund
//! bookkeeping, or to panic. The memory store only, on hand-driven clocks (never a sleep).

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Mode, Request, Store, StoreKey};
use ratelimit::{
    Clock, Config, Decision, Error, ManualClock, MemoryOptions, MemoryStore, Options, Quota,
    RateLimitService, Spent, Strategy,
};
use ratelimit_tests::{net_bytes, now, CountingAllocator, Rng, START};

const SEC: Duration = Duration::from_secs(1);

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

// ---------------------------------------------------------------------------------------------
// Helpers.

fn service() -> (RateLimitService, ManualClock) {
    ratelimit_tests::service(Config::default())
}

/// `limit` per `window` under `strategy`.
fn per(limit: u64, window: Duration, strategy: Strategy) -> Options {
    Options::new()
        .limit(limit)
        .window(window)
        .strategy(strategy)
}

fn memory(service: &RateLimitService) -> &MemoryStore {
    service.memory_store().expect("the memory store")
}

/// A plain spend ([`Mode::Spend`]): never stamps the key.
fn consume(service: &RateLimitService, key: &str, options: &Options) -> Decision {
    now(service.consume(key, options)).unwrap()
}

/// A spend kept for a refund ([`Mode::Keep`]).
fn spend(service: &RateLimitService, key: &str, options: &Options) -> Spent {
    now(service.spend(key, options)).unwrap()
}

fn refund(spent: Spent) -> bool {
    now(spent.refund()).unwrap()
}

fn remaining(service: &RateLimitService, key: &str, options: &Options) -> u64 {
    now(ratelimit_tests::remaining(service, key, options))
}

fn reset(service: &RateLimitService, key: &str, options: &Options) -> bool {
    now(service.reset_with(key, options)).unwrap()
}

fn sweep(service: &RateLimitService, clock: &ManualClock) -> usize {
    memory(service).sweep(clock.now())
}

/// A decision on the bare memory store, in `mode`.
fn decide(
    store: &MemoryStore,
    key: &str,
    quota: &Quota,
    cost: u64,
    at: u64,
    mode: Mode,
) -> Decision {
    let request = Request::new(StoreKey::new(key).unwrap(), quota, cost, at, mode).unwrap();
    now(Store::decide(store, request)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// One key, plain spends and kept spends.

/// A kept spend after plain spends stamps that same state, and its refund gives back its own spend.
#[test]
fn plain_spends_then_a_kept_spend_share_one_state_and_its_refund_is_honoured() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(5, 10 * SEC, strategy);
        assert!(consume(&service, "k", &options).allowed);
        assert!(consume(&service, "k", &options).allowed);
        let kept = spend(&service, "k", &options);
        assert!(kept.decision().allowed && kept.refundable(), "{strategy}");
        assert_eq!(
            memory(&service).len(),
            1,
            "{strategy}: one state, stamped or not"
        );
        assert_eq!(kept.decision().remaining, 2, "{strategy}");
        // A plain spend on the stamped key, under the read lock.
        assert_eq!(consume(&service, "k", &options).remaining, 1, "{strategy}");
        assert!(refund(kept), "{strategy}: the state the spend was made on");
        assert_eq!(remaining(&service, "k", &options), 2, "{strategy}");
        assert_eq!(memory(&service).len(), 1, "{strategy}");
    }
}

/// Plain spends keep a stamped key's stamp (and carry none: only a kept spend is given
/// back): kept spends before and after them are given back.
#[test]
fn plain_spends_between_kept_spends_never_change_the_keys_stamp() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(6, 10 * SEC, strategy);
        let first = spend(&service, "k", &options);
        let plain = consume(&service, "k", &options);
        let second = spend(&service, "k", &options);
        assert_eq!(
            plain.stamp(),
            0,
            "{strategy}: a plain spend carries a stamp"
        );
        assert_eq!(
            first.decision().stamp(),
            second.decision().stamp(),
            "{strategy}: one state, one stamp"
        );
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        assert!(refund(first), "{strategy}");
        assert!(refund(second), "{strategy}");
        assert_eq!(remaining(&service, "k", &options), 5, "{strategy}");
    }
}

/// A reset state's receipt is refused on the identical state plain spends make again.
#[test]
fn a_refund_after_a_reset_and_plain_respends_is_refused() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(5, 10 * SEC, strategy);
        assert!(consume(&service, "k", &options).allowed);
        let kept = spend(&service, "k", &options);
        assert!(kept.refundable());
        assert!(reset(&service, "k", &options));
        assert!(consume(&service, "k", &options).allowed);
        assert!(consume(&service, "k", &options).allowed);
        assert!(
            !refund(kept),
            "{strategy}: given back to a state made after a reset"
        );
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
    }
}

/// After a reset and plain then kept spends, the old receipt is refused and the new one honoured.
#[test]
fn a_refund_after_a_reset_and_kept_respends_is_refused_and_the_new_receipt_is_honoured() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(5, 10 * SEC, strategy);
        let old = spend(&service, "k", &options);
        assert!(consume(&service, "k", &options).allowed);
        assert!(reset(&service, "k", &options));
        assert!(consume(&service, "k", &options).allowed);
        let new = spend(&service, "k", &options);
        assert!(new.refundable());
        assert_ne!(old.decision().stamp(), new.decision().stamp(), "{strategy}");
        assert!(
            !refund(old),
            "{strategy}: given back to a state made after a reset"
        );
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        assert!(refund(new), "{strategy}");
        assert_eq!(remaining(&service, "k", &options), 4, "{strategy}");
    }
}

/// Over 50 resets and respends, no earlier state's receipt is ever given back to a later one.
#[test]
fn receipts_of_many_reset_states_are_refused_on_every_later_state() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(4, 10 * SEC, strategy);
        let mut old = Vec::new();
        for round in 0..50 {
            if round % 2 == 0 {
                assert!(consume(&service, "k", &options).allowed);
            }
            old.push(spend(&service, "k", &options));
            assert!(reset(&service, "k", &options));
            assert!(consume(&service, "k", &options).allowed);
            assert!(consume(&service, "k", &options).allowed);
            for receipt in old.drain(..old.len().saturating_sub(3)) {
                assert!(!refund(receipt), "{strategy}, round {round}");
            }
            assert_eq!(remaining(&service, "k", &options), 2, "{strategy}, {round}");
            assert!(reset(&service, "k", &options));
        }
        for receipt in old {
            assert!(!refund(receipt), "{strategy}");
        }
    }
}

/// A swept state's receipt gives nothing to the state a plain spend makes again under the key.
#[test]
fn a_refund_after_a_sweep_and_plain_recreation_is_refused() {
    for strategy in Strategy::ALL {
        let (service, clock) = service();
        let options = per(5, 10 * SEC, strategy);
        assert!(consume(&service, "k", &options).allowed);
        let kept = spend(&service, "k", &options);
        clock.advance(23 * SEC);
        assert_eq!(sweep(&service, &clock), 1, "{strategy}");
        assert!(memory(&service).is_empty());
        assert!(consume(&service, "k", &options).allowed);
        assert!(consume(&service, "k", &options).allowed);
        assert!(
            !refund(kept),
            "{strategy}: given back to a state made after a sweep"
        );
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        assert_eq!(memory(&service).len(), 1);
    }
}

/// A swept state's receipt is refused once a kept spend makes the key again; the new one is not.
#[test]
fn a_refund_after_a_sweep_and_kept_recreation_is_refused() {
    for strategy in Strategy::ALL {
        let (service, clock) = service();
        let options = per(5, 10 * SEC, strategy);
        let kept = spend(&service, "k", &options);
        clock.advance(23 * SEC);
        assert_eq!(sweep(&service, &clock), 1, "{strategy}");
        let new = spend(&service, "k", &options);
        assert!(consume(&service, "k", &options).allowed);
        assert_ne!(kept.decision().stamp(), new.decision().stamp());
        assert!(
            !refund(kept),
            "{strategy}: given back to a state made after a sweep"
        );
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        assert!(refund(new), "{strategy}");
        assert_eq!(remaining(&service, "k", &options), 4, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// Stacked limits, blocks, rewards and penalties.

/// A stacked kept call stamps keys plain spends stored, and its refund gives back to every limit.
#[test]
fn kept_stacked_spends_over_keys_stored_by_plain_spends_are_given_back_together() {
    for a in Strategy::ALL {
        for b in Strategy::ALL {
            let (service, _clock) = service();
            let first = per(5, 10 * SEC, a).budget("first");
            let second = per(4, 20 * SEC, b).budget("second");
            assert!(consume(&service, "u", &first).allowed);
            assert!(consume(&service, "u", &second).allowed);
            let spent = now(service.spend_all(&[("u", &first), ("u", &second)])).unwrap();
            assert!(spent.refundable(), "{a} + {b}");
            assert_eq!(memory(&service).len(), 2);
            assert_eq!(remaining(&service, "u", &first), 3, "{a} + {b}");
            assert_eq!(remaining(&service, "u", &second), 2, "{a} + {b}");
            assert!(now(spent.refund()).unwrap(), "{a} + {b}");
            assert_eq!(remaining(&service, "u", &first), 4, "{a} + {b}");
            assert_eq!(remaining(&service, "u", &second), 3, "{a} + {b}");
            assert_eq!(memory(&service).len(), 2);
        }
    }
}

/// A stacked refund after one key was reset and respent plainly gives back nothing, to either key.
#[test]
fn a_stacked_refund_after_one_key_was_reset_and_respent_plainly_gives_nothing_anywhere() {
    for a in Strategy::ALL {
        for b in Strategy::ALL {
            let (service, _clock) = service();
            let first = per(5, 10 * SEC, a).budget("first");
            let second = per(4, 20 * SEC, b).budget("second");
            assert!(consume(&service, "u", &second).allowed);
            let spent = now(service.spend_all(&[("u", &first), ("u", &second)])).unwrap();
            assert!(spent.refundable());
            assert!(reset(&service, "u", &second));
            assert!(consume(&service, "u", &second).allowed);
            assert!(consume(&service, "u", &second).allowed);
            assert!(!now(spent.refund()).unwrap(), "{a} + {b}");
            assert_eq!(remaining(&service, "u", &first), 4, "{a} + {b}");
            assert_eq!(remaining(&service, "u", &second), 2, "{a} + {b}");
        }
    }
}

/// Stacked kept calls on plainly stored keys all carry the first call's stamps and are given back.
#[test]
fn stacked_kept_calls_on_one_pair_of_keys_all_carry_its_first_stamps() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let first = per(9, 10 * SEC, strategy).budget("first");
        let second = per(9, 10 * SEC, Strategy::TokenBucket).budget("second");
        assert!(consume(&service, "u", &first).allowed);
        let spends: Vec<_> = (0..4)
            .map(|_| now(service.spend_all(&[("u", &first), ("u", &second)])).unwrap())
            .collect();
        let stamps: Vec<Vec<u64>> = spends
            .iter()
            .map(|s| s.decisions().iter().map(Decision::stamp).collect())
            .collect();
        assert!(
            stamps.iter().all(|s| s == &stamps[0]),
            "{strategy}: {stamps:?}"
        );
        assert!(stamps[0].iter().all(|&s| s != 0));
        for spent in spends {
            assert!(now(spent.refund()).unwrap(), "{strategy}");
        }
        assert_eq!(remaining(&service, "u", &first), 8, "{strategy}");
        assert_eq!(remaining(&service, "u", &second), 9, "{strategy}");
    }
}

/// Under a block, a kept spend on a plainly stored key is given back, and refused after a reset.
#[test]
fn a_kept_spend_under_a_block_on_a_plainly_stored_key_is_given_back_and_not_after_a_reset() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(5, 10 * SEC, strategy).block_for(30 * SEC);
        assert!(consume(&service, "k", &options).allowed);
        let kept = spend(&service, "k", &options);
        let other = spend(&service, "k", &options);
        assert!(kept.refundable() && other.refundable(), "{strategy}");
        assert_eq!(kept.decision().stamp(), other.decision().stamp());
        assert!(refund(kept), "{strategy}");
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        assert!(reset(&service, "k", &options));
        assert!(consume(&service, "k", &options).allowed);
        assert!(consume(&service, "k", &options).allowed);
        assert!(
            !refund(other),
            "{strategy}: given back to a state made after a reset"
        );
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        assert_eq!(memory(&service).len(), 1);
    }
}

/// A reward on an unstamped key stamps it, and kept spends after it are given back exactly.
#[test]
fn a_reward_on_a_key_never_kept_leaves_later_kept_spends_refundable() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(5, 10 * SEC, strategy);
        for _ in 0..3 {
            assert!(consume(&service, "k", &options).allowed);
        }
        assert_eq!(now(service.reward("k", &options, 1)).unwrap().remaining, 3);
        let kept = spend(&service, "k", &options);
        assert!(kept.refundable());
        assert_eq!(kept.decision().remaining, 2, "{strategy}");
        assert!(refund(kept), "{strategy}");
        assert_eq!(remaining(&service, "k", &options), 3, "{strategy}");
        // A second reward and a kept spend on the rewarded bucket, given back too.
        assert_eq!(now(service.reward("k", &options, 1)).unwrap().remaining, 4);
        let again = spend(&service, "k", &options);
        assert!(refund(again), "{strategy}");
        assert_eq!(remaining(&service, "k", &options), 4, "{strategy}");
    }
}

/// A reward voids earlier kept spends (but a bucket's), never the kept spends made after it.
#[test]
fn a_reward_voids_earlier_kept_spends_except_in_a_bucket_and_never_later_ones() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(6, 10 * SEC, strategy);
        assert!(consume(&service, "k", &options).allowed);
        let before = spend(&service, "k", &options);
        assert!(consume(&service, "k", &options).allowed);
        assert_eq!(now(service.reward("k", &options, 1)).unwrap().remaining, 4);
        let after = spend(&service, "k", &options);
        let survives = strategy == Strategy::TokenBucket;
        assert_eq!(refund(before), survives, "{strategy}");
        assert!(refund(after), "{strategy}");
        let want = if survives { 5 } else { 4 };
        assert_eq!(remaining(&service, "k", &options), want, "{strategy}");
    }
}

/// Penalties on a new key and on an unstamped key leave later kept spends given back exactly.
#[test]
fn penalties_on_new_and_unstamped_keys_leave_later_kept_spends_refundable() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(6, 10 * SEC, strategy);
        assert_eq!(
            now(service.penalize("new", &options, 2)).unwrap().remaining,
            4
        );
        assert!(consume(&service, "plain", &options).allowed);
        assert_eq!(
            now(service.penalize("plain", &options, 2))
                .unwrap()
                .remaining,
            3
        );
        for key in ["new", "plain"] {
            let before = remaining(&service, key, &options);
            let kept = spend(&service, key, &options);
            assert!(kept.refundable(), "{strategy} {key}");
            assert!(refund(kept), "{strategy} {key}");
            assert_eq!(
                remaining(&service, key, &options),
                before,
                "{strategy} {key}"
            );
        }
    }
}

/// A bucket stamped late (after plain spends and a reward) answers as one stamped from the start.
#[test]
fn a_buckets_rewards_and_refunds_match_whether_it_was_stamped_early_or_late() {
    let (lazy, lazy_clock) = service();
    let (eager, eager_clock) = service();
    let options = per(8, 16 * SEC, Strategy::TokenBucket);
    let step = |by: Duration| {
        lazy_clock.advance(by);
        eager_clock.advance(by);
    };
    for _ in 0..5 {
        assert_eq!(
            consume(&lazy, "b", &options),
            *spend(&eager, "b", &options).decision()
        );
    }
    step(SEC);
    assert_eq!(
        now(lazy.reward("b", &options, 2)).unwrap(),
        now(eager.reward("b", &options, 2)).unwrap()
    );
    let mut kept = Vec::new();
    for i in 0..4 {
        let (l, e) = (spend(&lazy, "b", &options), spend(&eager, "b", &options));
        assert_eq!(l.decision(), e.decision(), "spend {i}");
        kept.push((l, e));
        step(Duration::from_millis(300));
    }
    for (i, (l, e)) in kept.into_iter().rev().enumerate() {
        assert_eq!(refund(l), refund(e), "refund {i}");
        assert_eq!(
            remaining(&lazy, "b", &options),
            remaining(&eager, "b", &options),
            "after refund {i}"
        );
        if i == 1 {
            assert_eq!(
                now(lazy.reward("b", &options, 1)).unwrap(),
                now(eager.reward("b", &options, 1)).unwrap()
            );
        }
    }
    assert_eq!(lazy.stats().total.refunded, eager.stats().total.refunded);
}

/// A kept spend that waited in the queue on a plainly stored key is stamped and given back.
#[tokio::test(start_paused = true)]
async fn a_kept_spend_through_the_queue_on_a_plainly_stored_key_is_given_back() {
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .queue_enabled(true)
            .queue_timeout("1m")
            .build()
            .unwrap();
        let clock = Arc::new(ratelimit::testing::TokioClock::new());
        let service = RateLimitService::with_clock(config, clock).unwrap();
        let options = per(2, SEC, strategy).queue(true);
        assert!(service.consume("q", &options).await.unwrap().allowed);
        assert!(service.consume("q", &options).await.unwrap().allowed);
        let waited = service.spend("q", &options).await.unwrap();
        assert!(waited.decision().allowed, "{strategy}");
        assert!(
            waited.refundable(),
            "{strategy}: a kept spend through the queue"
        );
        let left = service.status("q", &options).await.unwrap().remaining;
        assert!(waited.refund().await.unwrap(), "{strategy}");
        let after = service.status("q", &options).await.unwrap().remaining;
        assert_eq!(after, left + 1, "{strategy}");
        assert_eq!(memory(&service).len(), 1, "{strategy}");
    }
}

/// At the key cap, first kept spends and rewards on stored keys need no room and are given back.
#[test]
fn first_kept_spends_on_a_full_store_stamp_the_stored_keys_without_needing_room() {
    for strategy in Strategy::ALL {
        let store = MemoryStore::with_options(MemoryOptions::default().max_keys(3));
        let clock = ManualClock::new(START);
        let service =
            RateLimitService::with_store(Config::default(), store.clone(), Arc::new(clock))
                .unwrap();
        let one = per(5, 10 * SEC, strategy).budget("one");
        let two = per(5, 10 * SEC, strategy).budget("two");
        let blocked = per(5, 10 * SEC, strategy).budget("three").block_for(SEC);
        for options in [&one, &two, &blocked] {
            assert!(consume(&service, "k", options).allowed);
        }
        assert_eq!(store.len(), 3);
        let refused = now(service.consume("new", &one));
        assert!(
            matches!(refused, Err(Error::StoreFull { .. })),
            "{refused:?}"
        );
        let kept = spend(&service, "k", &one);
        assert!(kept.refundable(), "{strategy}");
        let under_block = spend(&service, "k", &blocked);
        assert!(under_block.refundable(), "{strategy}");
        now(service.reward("k", &two, 1)).unwrap();
        let stacked = now(service.spend_all(&[("k", &one), ("k", &two)])).unwrap();
        assert!(stacked.refundable(), "{strategy}");
        assert!(now(stacked.refund()).unwrap(), "{strategy}");
        assert!(refund(kept), "{strategy}");
        assert!(refund(under_block), "{strategy}");
        assert_eq!(remaining(&service, "k", &one), 4, "{strategy}");
        assert_eq!(remaining(&service, "k", &two), 5, "{strategy}");
        assert_eq!(remaining(&service, "k", &blocked), 4, "{strategy}");
        assert_eq!(store.len(), 3);
    }
}

/// Kept calls with shadow limits over plainly stored keys are stamped on every key and given back.
#[test]
fn kept_spends_with_shadow_limits_on_plainly_stored_keys_are_given_back() {
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let enforced = per(5, 10 * SEC, strategy).budget("enforced");
        let shadow = per(4, 10 * SEC, strategy).budget("shadow").shadow(true);
        assert!(consume(&service, "s", &enforced).allowed);
        assert!(consume(&service, "s", &shadow).allowed);
        let both = now(service.spend_all(&[("s", &enforced), ("s", &shadow)])).unwrap();
        assert!(both.refundable(), "{strategy}");
        let alone = spend(&service, "s", &shadow);
        assert!(alone.refundable(), "{strategy}");
        assert!(now(both.refund()).unwrap(), "{strategy}");
        assert!(refund(alone), "{strategy}");
        assert_eq!(remaining(&service, "s", &enforced), 4, "{strategy}");
        assert_eq!(remaining(&service, "s", &shadow), 3, "{strategy}");
    }
}

/// A kept spend under another strategy on an unstamped key is refused and stamps nothing.
#[test]
fn a_kept_spend_under_another_strategy_stamps_nothing_and_is_refused() {
    let at = START.as_nanos() as u64;
    for held in Strategy::ALL {
        for other in Strategy::ALL.into_iter().filter(|&s| s != held) {
            let store = MemoryStore::new();
            let quota = Quota::new(4, 10 * SEC).unwrap();
            let (held_q, other_q) = (quota.with_strategy(held), quota.with_strategy(other));
            assert!(decide(&store, "k", &held_q, 1, at, Mode::Spend).allowed);
            for mode in [Mode::Keep, Mode::Spend, Mode::Look] {
                let request = Request::new(StoreKey::new("k").unwrap(), &other_q, 1, at, mode);
                let refused = now(Store::decide(&store, request.unwrap()));
                assert!(
                    matches!(refused, Err(Error::UnexpectedState { .. })),
                    "{held} then {other}, {mode:?}: {refused:?}"
                );
            }
            assert_eq!(store.len(), 1);
            let plain = decide(&store, "k", &held_q, 1, at, Mode::Spend);
            assert_eq!(plain.stamp(), 0, "{held} then {other}: stamped");
            assert_eq!(plain.remaining, 2, "{held} then {other}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random histories: plain spends against kept ones.

/// What one history does, step by step.
#[derive(Debug, Clone, Copy)]
enum Step {
    Plain(u64),
    Kept(u64),
    Refund(usize),
    Advance(u64),
    Reward(u64),
    Penalty(u64),
    Reset,
    Sweep,
    Status,
    StackedPlain,
    StackedKept,
    StackedRefund(usize),
}

fn step(rng: &mut Rng) -> Step {
    match rng.below(100) {
        0..=29 => Step::Plain(1 + rng.below(2)),
        30..=49 => Step::Kept(1 + rng.below(2)),
        50..=61 => Step::Refund(rng.below(64) as usize),
        62..=71 => Step::Advance(1 + rng.below(3_000)),
        72..=76 => Step::Reward(1 + rng.below(3)),
        77..=79 => Step::Penalty(1 + rng.below(2)),
        80..=82 => Step::Reset,
        83..=85 => Step::Sweep,
        86..=89 => Step::Status,
        90..=93 => Step::StackedPlain,
        94..=97 => Step::StackedKept,
        _ => Step::StackedRefund(rng.below(64) as usize),
    }
}

/// Replays `steps` on two services: `lazy` makes its plain spends as plain spends (never
/// stamping), `eager` makes them as kept spends it never gives back (stamping at once, as
/// every key was stamped before). Each answer must be the same; returns the first that is
/// not.
fn differ(options: &Options, other: &Options, steps: &[Step]) -> Option<String> {
    let (lazy, lazy_clock) = service();
    let (eager, eager_clock) = service();
    let mut kept: Vec<(Spent, Spent)> = Vec::new();
    let mut stacked = Vec::new();
    for (i, &s) in steps.iter().enumerate() {
        let what = format!("step {i} ({s:?})");
        let limits = [("k", options), ("k", other)];
        match s {
            Step::Plain(cost) => {
                let o = options.clone().cost(cost);
                let l = consume(&lazy, "k", &o);
                let e = spend(&eager, "k", &o).into_decision();
                if l != e {
                    return Some(format!("{what}: {l:?} != {e:?}"));
                }
            }
            Step::Kept(cost) => {
                let o = options.clone().cost(cost);
                let (l, e) = (spend(&lazy, "k", &o), spend(&eager, "k", &o));
                if l.decision() != e.decision() || l.refundable() != e.refundable() {
                    return Some(format!("{what}: {l:?} != {e:?}"));
                }
                if l.decision().allowed && !l.refundable() {
                    return Some(format!("{what}: an admitted kept spend is not refundable"));
                }
                kept.push((l, e));
            }
            Step::Refund(i) if !kept.is_empty() => {
                let (l, e) = kept.remove(i % kept.len());
                let (l, e) = (refund(l), refund(e));
                if l != e {
                    return Some(format!("{what}: refund {l} != {e}"));
                }
            }
            Step::StackedRefund(i) if !stacked.is_empty() => {
                let (l, e): (ratelimit::SpentAll, ratelimit::SpentAll) =
                    stacked.remove(i % stacked.len());
                let (l, e) = (now(l.refund()).unwrap(), now(e.refund()).unwrap());
                if l != e {
                    return Some(format!("{what}: stacked refund {l} != {e}"));
                }
            }
            Step::Refund(_) | Step::StackedRefund(_) => {}
            Step::Advance(ms) => {
                lazy_clock.advance(Duration::from_millis(ms));
                eager_clock.advance(Duration::from_millis(ms));
            }
            Step::Reward(units) | Step::Penalty(units) => {
                let penalty = matches!(s, Step::Penalty(_));
                let (l, e) = match penalty {
                    true => (
                        now(lazy.penalize("k", options, units)).unwrap(),
                        now(eager.penalize("k", options, units)).unwrap(),
                    ),
                    false => (
                        now(lazy.reward("k", options, units)).unwrap(),
                        now(eager.reward("k", options, units)).unwrap(),
                    ),
                };
                if l != e {
                    return Some(format!("{what}: {l:?} != {e:?}"));
                }
            }
            Step::Reset => {
                let (l, e) = (reset(&lazy, "k", options), reset(&eager, "k", options));
                if l != e {
                    return Some(format!("{what}: reset {l} != {e}"));
                }
            }
            Step::Sweep => {
                let (l, e) = (sweep(&lazy, &lazy_clock), sweep(&eager, &eager_clock));
                if l != e {
                    return Some(format!("{what}: swept {l} != {e}"));
                }
            }
            Step::Status => {
                for o in [options, other] {
                    let (l, e) = (now(lazy.status("k", o)), now(eager.status("k", o)));
                    let (l, e) = (l.unwrap(), e.unwrap());
                    if l != e {
                        return Some(format!("{what}: {l:?} != {e:?}"));
                    }
                }
            }
            Step::StackedPlain => {
                let l = now(lazy.consume_all(&limits)).unwrap();
                let e = now(eager.spend_all(&limits)).unwrap().into_decisions();
                if l != e {
                    return Some(format!("{what}: {l:?} != {e:?}"));
                }
            }
            Step::StackedKept => {
                let l = now(lazy.spend_all(&limits)).unwrap();
                let e = now(eager.spend_all(&limits)).unwrap();
                if l.decisions() != e.decisions() || l.refundable() != e.refundable() {
                    return Some(format!("{what}: {l:?} != {e:?}"));
                }
                if l.decisions().iter().all(|d| d.allowed) && !l.refundable() {
                    return Some(format!(
                        "{what}: an admitted stacked call is not refundable"
                    ));
                }
                stacked.push((l, e));
            }
        }
        if memory(&lazy).len() != memory(&eager).len() {
            return Some(format!(
                "{what}: {} keys != {}",
                memory(&lazy).len(),
                memory(&eager).len()
            ));
        }
    }
    if lazy.stats().total != eager.stats().total {
        return Some(format!(
            "{:?} != {:?}",
            lazy.stats().total,
            eager.stats().total
        ));
    }
    None
}

/// Random histories with plain spends answer every step as with every spend kept (stamped).
#[test]
fn random_histories_with_plain_spends_answer_as_histories_stamped_from_the_start() {
    for (n, strategy) in Strategy::ALL.into_iter().enumerate() {
        for block in [false, true] {
            let mut options = per(6, 4 * SEC, strategy).budget("one");
            if block {
                options = options.block_for(2 * SEC);
            }
            let other = per(9, 3 * SEC, Strategy::ALL[(n + 1) % 4]).budget("two");
            for seed in 0..40 {
                let mut rng = Rng((seed + 1_000 * n as u64 + 500 * u64::from(block))
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    | 1);
                let steps: Vec<Step> = (0..150).map(|_| step(&mut rng)).collect();
                if let Some(broken) = differ(&options, &other, &steps) {
                    panic!("{strategy}, block {block}, seed {seed}: {broken}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Threads.

/// Threads racing plain and first kept spends admit the limit exactly; one state, one stamp.
#[test]
fn plain_and_first_kept_spends_racing_on_fresh_keys_keep_exact_counts() {
    /// What one thread admitted on each key, and its kept spends with their keys' indices.
    type ThreadSpends = (Vec<u64>, Vec<(usize, Spent)>);
    const KEYS: usize = 60;
    const LIMIT: u64 = 12;
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(LIMIT, 60 * SEC, strategy);
        let keys: Vec<String> = (0..KEYS).map(|i| format!("race-{i}")).collect();
        let per_thread: Vec<ThreadSpends> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (service, options, keys) = (&service, &options, &keys);
                    scope.spawn(move || {
                        let mut admitted = vec![0; KEYS];
                        let mut kept = Vec::new();
                        for (k, key) in keys.iter().enumerate() {
                            for call in 0..6 {
                                if (call + t) % 2 == 0 {
                                    let plain = consume(service, key, options);
                                    admitted[k] += u64::from(plain.allowed);
                                    continue;
                                }
                                let spent = spend(service, key, options);
                                if spent.decision().allowed {
                                    assert!(spent.refundable(), "{strategy}");
                                    admitted[k] += 1;
                                    kept.push((k, spent));
                                }
                            }
                        }
                        (admitted, kept)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            memory(&service).len(),
            KEYS,
            "{strategy}: each key stored once"
        );
        for k in 0..KEYS {
            let admitted: u64 = per_thread.iter().map(|(a, _)| a[k]).sum();
            assert_eq!(admitted, LIMIT, "{strategy}, key {k}");
        }
        let mut stamps = vec![std::collections::HashSet::new(); KEYS];
        let (mut given, mut kept_spends) = (vec![0u64; KEYS], vec![0u64; KEYS]);
        for (_, kept) in per_thread {
            for (k, spent) in kept {
                stamps[k].insert(spent.decision().stamp());
                kept_spends[k] += 1;
                given[k] += u64::from(refund(spent));
            }
        }
        for (k, key) in keys.iter().enumerate() {
            assert!(
                stamps[k].len() <= 1,
                "{strategy}, {key}: stamped twice {:?}",
                stamps[k]
            );
            assert!(!stamps[k].contains(&0), "{strategy}, {key}");
            assert_eq!(
                remaining(&service, key, &options),
                given[k],
                "{strategy}, {key}"
            );
            if strategy != Strategy::TokenBucket {
                // Only the bucket may give back less than every spend (runs of refunds).
                assert_eq!(given[k], kept_spends[k], "{strategy}, {key}");
            } else {
                assert!(given[k] > 0 || kept_spends[k] == 0, "{strategy}, {key}");
            }
        }
    }
}

/// Kept spends and refunds racing plain spends on one unstamped key: one stamp, within the limit.
#[test]
fn kept_spends_and_refunds_racing_plain_spends_on_one_unstamped_key_never_exceed_the_limit() {
    const LIMIT: u64 = 30;
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(LIMIT, 60 * SEC, strategy);
        assert!(consume(&service, "one", &options).allowed);
        let results: Vec<(u64, u64, Vec<u64>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (service, options) = (&service, &options);
                    scope.spawn(move || {
                        let (mut admitted, mut given, mut stamps) = (0, 0, Vec::new());
                        for call in 0..40 {
                            if (call + t) % 3 == 0 {
                                admitted += u64::from(consume(service, "one", options).allowed);
                                continue;
                            }
                            let spent = spend(service, "one", options);
                            if !spent.decision().allowed {
                                continue;
                            }
                            admitted += 1;
                            stamps.push(spent.decision().stamp());
                            if call % 2 == 0 {
                                given += u64::from(refund(spent));
                            }
                        }
                        (admitted, given, stamps)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let admitted: u64 = 1 + results.iter().map(|r| r.0).sum::<u64>();
        let given: u64 = results.iter().map(|r| r.1).sum();
        let stamps: std::collections::HashSet<u64> =
            results.iter().flat_map(|r| r.2.iter().copied()).collect();
        assert_eq!(stamps.len(), 1, "{strategy}: {stamps:?}");
        assert!(!stamps.contains(&0));
        assert!(
            admitted - given <= LIMIT,
            "{strategy}: {admitted} - {given}"
        );
        assert_eq!(
            remaining(&service, "one", &options),
            LIMIT - (admitted - given),
            "{strategy}"
        );
        assert_eq!(memory(&service).len(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Keys.

/// Multibyte and 1,024-byte user keys are one state each, plain or stamped, refunds honoured.
#[test]
fn multibyte_and_longest_user_keys_are_one_state_stamped_or_not() {
    let keys = [
        "ÿ".to_string(),
        "\u{FFFF}".to_string(),
        "\u{10FFFF}".to_string(),
        "\u{FEFF}k".to_string(),
        "😀".repeat(256),
        "ÿ".repeat(512),
        "x".repeat(1_024),
        "x".repeat(1_023),
    ];
    for strategy in Strategy::ALL {
        let (service, _clock) = service();
        let options = per(5, 10 * SEC, strategy);
        for key in &keys {
            assert!(consume(&service, key, &options).allowed);
        }
        for key in &keys {
            let kept = spend(&service, key, &options);
            assert!(kept.refundable(), "{strategy}");
            assert!(consume(&service, key, &options).allowed);
            assert!(refund(kept), "{strategy}, {} bytes", key.len());
        }
        for key in &keys {
            assert_eq!(
                remaining(&service, key, &options),
                3,
                "{strategy}, {} bytes",
                key.len()
            );
        }
        assert_eq!(memory(&service).len(), keys.len(), "{strategy}");
        let too_long = "x".repeat(1_025);
        assert!(matches!(
            now(service.spend(&too_long, &options)),
            Err(Error::InvalidKey { .. })
        ));
    }
}

/// Store keys up to 4,096 bytes, some shaped like a stamp, are one state in every mode.
#[test]
fn store_keys_up_to_the_longest_are_one_state_in_every_mode() {
    let quota = Quota::new(6, 10 * SEC).unwrap();
    let at = START.as_nanos() as u64;
    let keys = [
        "k".to_string(),
        "\u{1}\0\0\0\0\0\0\0k".to_string(),
        "\u{2}\0\0\0\0\0\0\0k".to_string(),
        "é".repeat(2_048),
        "k".repeat(4_096),
        format!("{}k", "\u{10FFFF}".repeat(1_023)),
    ];
    for strategy in Strategy::ALL {
        let store = MemoryStore::new();
        let quota = quota.with_strategy(strategy);
        for key in &keys {
            assert!(key.len() <= 4_096);
            let plain = decide(&store, key, &quota, 1, at, Mode::Spend);
            assert_eq!(
                plain.stamp(),
                0,
                "{strategy}: a plain spend stamped the key"
            );
            let kept = decide(&store, key, &quota, 1, at, Mode::Keep);
            assert_ne!(kept.stamp(), 0, "{strategy}");
            let again = decide(&store, key, &quota, 1, at, Mode::Spend);
            assert_eq!(
                again.stamp(),
                0,
                "{strategy}: a plain spend carries a stamp"
            );
            let kept_again = decide(&store, key, &quota, 2, at, Mode::Keep);
            assert_eq!(kept_again.stamp(), kept.stamp(), "{strategy}");
            assert_eq!(
                kept_again.remaining, 1,
                "{strategy}: one budget in every mode"
            );
            let look = decide(&store, key, &quota, 1, at, Mode::Look);
            assert_eq!(look.remaining, 0, "{strategy}");
        }
        assert_eq!(store.len(), keys.len(), "{strategy}: a key stored twice");
        for key in &keys {
            let kept = decide(&store, key, &quota, 1, at, Mode::Keep);
            assert!(
                kept.allowed && kept.remaining == 0,
                "{strategy}: a key found fresh"
            );
            assert!(!decide(&store, key, &quota, 1, at, Mode::Keep).allowed);
            assert!(store.reset(key));
            let plain = decide(&store, key, &quota, 1, at, Mode::Spend);
            assert_eq!(plain.stamp(), 0, "{strategy}");
            assert!(plain.allowed);
            let stamped = decide(&store, key, &quota, 1, at, Mode::Keep);
            assert_ne!(stamped.stamp(), 0);
            assert_ne!(stamped.stamp(), kept.stamp(), "{strategy}");
            assert_eq!(stamped.remaining, 4, "{strategy}");
        }
        assert_eq!(store.len(), keys.len());
        store.sweep(at + 30 * SEC.as_nanos() as u64);
        assert!(store.is_empty());
    }
}

/// Stamped and plain keys are still found after their tables grow with churn and shrink on a sweep.
#[test]
fn stamped_keys_are_found_after_their_tables_grow_and_shrink() {
    let store = MemoryStore::new();
    let at = START.as_nanos() as u64;
    let short = Quota::new(3, SEC).unwrap();
    let long = Quota::new(3, 1_000 * SEC).unwrap();
    for strategy in Strategy::ALL {
        let (short, long) = (short.with_strategy(strategy), long.with_strategy(strategy));
        let survivors: Vec<String> = (0..200).map(|i| format!("{strategy}-keep-{i}")).collect();
        for (i, key) in survivors.iter().enumerate() {
            let mode = if i % 2 == 0 { Mode::Keep } else { Mode::Spend };
            assert!(decide(&store, key, &long, 1, at, mode).allowed);
        }
        for i in 0..5_000 {
            let key = format!("{strategy}-churn-{i}");
            let mode = if i % 3 == 0 { Mode::Keep } else { Mode::Spend };
            assert!(decide(&store, &key, &short, 1, at, mode).allowed);
        }
        for (i, key) in survivors.iter().enumerate() {
            let mode = if i % 3 == 0 { Mode::Spend } else { Mode::Keep };
            assert_eq!(
                decide(&store, key, &long, 1, at, mode).remaining,
                1,
                "{strategy}"
            );
        }
    }
    store.sweep(at + 10 * SEC.as_nanos() as u64);
    assert_eq!(store.len(), 800);
    for strategy in Strategy::ALL {
        let long = long.with_strategy(strategy);
        for i in 0..200 {
            let key = format!("{strategy}-keep-{i}");
            let kept = decide(
                &store,
                &key,
                &long,
                1,
                at + 10 * SEC.as_nanos() as u64,
                Mode::Keep,
            );
            assert_eq!(kept.remaining, 0, "{strategy}: {key} found fresh");
            assert_ne!(kept.stamp(), 0);
        }
    }
    assert_eq!(store.len(), 800);
}

// ---------------------------------------------------------------------------------------------
// Memory.

/// Buckets stamped early or late, refunded, rewarded, swept: memory back to baseline each round.
#[test]
fn a_buckets_refund_bookkeeping_leaves_with_its_cell_however_it_was_stamped() {
    let (service, clock) = service();
    let options = per(6, 12 * SEC, Strategy::TokenBucket);
    let keys: Vec<String> = (0..300).map(|i| format!("bucket-{i}")).collect();
    let mut held = Vec::with_capacity(5);
    for round in 0..5 {
        for (i, key) in keys.iter().enumerate() {
            match i % 5 {
                0 => {
                    let first = spend(&service, key, &options);
                    let _second = spend(&service, key, &options);
                    assert!(refund(first));
                }
                1 => {
                    assert!(consume(&service, key, &options).allowed);
                    assert!(consume(&service, key, &options).allowed);
                    let kept = spend(&service, key, &options);
                    assert!(refund(kept));
                    assert!(now(service.reward(key, &options, 1)).unwrap().allowed);
                }
                2 => {
                    assert!(consume(&service, key, &options).allowed);
                    assert!(consume(&service, key, &options).allowed);
                    now(service.reward(key, &options, 1)).unwrap();
                    let kept = spend(&service, key, &options);
                    assert!(refund(kept));
                }
                3 => {
                    now(service.penalize(key, &options, 2)).unwrap();
                    let kept = spend(&service, key, &options);
                    let _other = spend(&service, key, &options);
                    assert!(refund(kept));
                    now(service.reward(key, &options, 1)).unwrap();
                }
                _ => {
                    let first = spend(&service, key, &options);
                    assert!(consume(&service, key, &options).allowed);
                    let _second = spend(&service, key, &options);
                    assert!(refund(first));
                    assert!(reset(&service, key, &options));
                }
            }
        }
        assert_eq!(memory(&service).len(), keys.len() * 4 / 5, "round {round}");
        clock.advance(60 * SEC);
        sweep(&service, &clock);
        assert!(memory(&service).is_empty(), "round {round}");
        held.push(net_bytes());
    }
    // The first round grows what later rounds reuse (the tables, the service's counters).
    let settled = held[1];
    for (round, &bytes) in held.iter().enumerate().skip(2) {
        assert!(
            bytes <= settled,
            "round {round}: {} bytes more held after the sweep: {held:?}",
            bytes - settled
        );
    }
}
