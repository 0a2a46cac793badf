//! Moves chained through three keys, each carried into the next: exactly on both sides.

use super::*;

const THIRD: &str = "rl:{u}:third";

/// Chained moves, as probes_carry_attacks makes them: a bucket of 10 at a token every 20 s,
/// all spent at the start, carried into a second key by a look at +79.999 s and that one into
/// a third by a look at +159.998 s. On both sides each moved bucket is full again at +200 s
/// exactly, when the first one is (a look at a call of 1 puts it 20 s later, after the
/// call), holding what it holds (3, then 7 tokens: 2 and 6 after the call); the third admits
/// its 10 at +200.5 s. In whole tokens the second was full at +219.999 s (7 tokens
/// from +79.999 s) and the third at +239.998 s (4 more from +159.998 s): 8 admitted.
#[test]
fn chained_moves_carry_the_debt_exactly() {
    let q = tokens(10, 0, Duration::from_secs(200));
    let mut both = Both::new();
    assert!(both.same(&[check(OLD, &q, 10)], &[], Mode::Spend)[0].allowed);
    let after_call = (T0 + 220 * S) * 1_000;
    let from = |key| Carry {
        from: StoreKey::composed(key),
        quota: &q,
        into: 0,
        block_only: false,
    };
    for (at, key, carried, remaining) in [
        (79_999_000, NEW, from(OLD), 2),
        (159_998_000, THIRD, from(NEW), 6),
    ] {
        both.advance(T0 + at - both.now_us);
        let look = both.same(&[check(key, &q, 1)], &[carried], Mode::Look);
        assert_eq!(look[0].remaining, remaining, "at {at} us");
        assert_eq!(look[0].full_at(), after_call, "at {at} us");
    }
    both.advance(T0 + 200_500_000 - both.now_us);
    for call in 0..11 {
        let decided = both.same(&[check(THIRD, &q, 1)], &[from(NEW)], Mode::Spend);
        assert_eq!(decided[0].allowed, call < 10, "call {call}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::super::lua_agrees::cases() / 4))]

    /// Carrying never gives more than the old state allows (fail closed), on both sides: a
    /// bucket's history (spends, penalties, looks), then its state carried into a moved one
    /// under any bucket quota, which is full again no sooner than the old one; under the same
    /// quota, the moved state then decides every call as the old state itself would have (a
    /// second key given the same history, decided on with no move): never admitting more,
    /// nor less, to the nanosecond, through chained moves (the moved state carried on again
    /// into a third key).
    #[test]
    fn a_carried_state_never_admits_more_than_the_old_one(
        (o_size, o_window) in ((1..=4u64, 0..=2u64), (1..=250_000u64).prop_map(|w| w * 12)),
        (n_size, n_window) in ((1..=4u64, 0..=2u64), (1..=250_000u64).prop_map(|w| w * 12)),
        same in any::<bool>(),
        before in prop::collection::vec((0..=2_000_000u64, 0..=4u64, any::<bool>()), 1..8),
        after in prop::collection::vec(
            (prop_oneof![0..=2_000u64, 0..=8_000_000u64, 0..=200_000_000u64], 1..=4u64, any::<bool>(), any::<bool>()),
            1..16,
        ),
    ) {
        let old = tokens(o_size.0, o_size.1, Duration::from_micros(o_window));
        let new = match same {
            true => old,
            false => tokens(n_size.0, n_size.1, Duration::from_micros(n_window)),
        };
        const CONTROL: &str = "rl:{u}:control";
        let mut both = Both::new();
        // (A cost of 0: a penalty of one token.)
        for (moved, cost, spend) in before {
            both.advance(moved);
            for key in [OLD, CONTROL] {
                match cost {
                    0 => both.penalty(key, &old, 1),
                    cost => {
                        let mode = if spend { Mode::Spend } else { Mode::Look };
                        both.same(&[check(key, &old, cost.min(old.capacity()))], &[], mode);
                    }
                }
            }
        }
        // When a bucket is full again, from a look at a call of 1 (which an admission puts
        // after the call).
        let full = |d: &Decision, q: &Quota| match d.allowed {
            true => d.full_at() - q.interval_nanos(),
            false => d.full_at(),
        };
        let old_full = full(&both.same(&[check(OLD, &old, 1)], &[], Mode::Look)[0], &old);
        let carried = [carry(&old)];
        let moved = full(&both.same(&[check(NEW, &new, 1)], &carried, Mode::Look)[0], &new);
        prop_assert!(moved >= old_full, "full at {moved}, the old state at {old_full}");
        if same {
            prop_assert_eq!(moved, old_full);
        }
        // The state calls are decided on and the one carried into it (under its quota).
        let mut chain = (NEW, OLD, &old);
        for (step, (moved, cost, spend, onwards)) in after.into_iter().enumerate() {
            both.advance(moved);
            if onwards && chain.0 == NEW {
                // Moved on again: into a third key, from the moved one.
                chain = (THIRD, NEW, &new);
            }
            let cost = cost.min(new.capacity());
            let mode = if spend { Mode::Spend } else { Mode::Look };
            let (key, from, quota) = chain;
            let carried = [Carry { from: StoreKey::composed(from), quota, into: 0, block_only: false }];
            let got = both.same(&[check(key, &new, cost)], &carried, mode);
            if same {
                let control = both.same(&[check(CONTROL, &old, cost)], &[], mode);
                prop_assert_eq!(&got, &control, "step {}", step);
            }
        }
    }
}
