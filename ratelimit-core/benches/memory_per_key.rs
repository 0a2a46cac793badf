//! Bytes of heap per idle key in the memory store, per algorithm, and proof that the memory
//! comes back once the keys' windows have passed and a sweep has run.
//!
//! A counting global allocator tracks the bytes currently allocated (as requested, so the
//! allocator's own rounding and headers are not included). For each strategy: a fresh store,
//! 100,000 keys each called once, the allocation delta divided by the key count; the key's
//! own copy (`Box<str>`, exactly its length) is reported apart. Then the clock moves past
//! every window, `sweep` runs, and what is left above the baseline is printed.
//!
//! A key is stamped only by a spend kept for a refund (`Mode::Keep`): the rows "kept" call
//! each key once in that mode, the others spend plainly.
//!
//! `governor`'s keyed limiter (its default dashmap store) is measured the same way for
//! comparison; it keeps its keys until `retain_recent` is called.
//!
//! ```text
//! cargo bench -p ratelimit-core --bench memory_per_key
//! ```

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota as GQuota, RateLimiter};
use ratelimit_core::store::{Mode, Request, Store, StoreKey};
use ratelimit_core::{MemoryStore, Nanos, Quota, Strategy};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocated;

const KEYS: usize = 100_000;
const SEC: Nanos = 1_000_000_000;

fn main() {
    // Criterion-style arguments (`--bench`, filters) are accepted and ignored.
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
    let key_bytes: usize = keys.iter().map(String::len).sum();
    let key_per = key_bytes as f64 / KEYS as f64;
    let now = 1_000_000 * SEC;

    println!("{KEYS} idle keys, each called once (\"user:0\" .. \"user:99999\", {key_per:.2} B each on average)");
    println!();
    println!("| store | bytes/key total | of which the key | bytes/key without the key | after windows + sweep |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    // The shard locks find each thread's read lock through an index crossbeam registers once
    // per thread, kept for the thread's life: registered here, before any baseline.
    MemoryStore::new()
        .acquire("warm", &Quota::per_second(10).unwrap(), 1, now)
        .unwrap();
    let kept = [Strategy::FixedWindow, Strategy::TokenBucket].map(|s| (s, Mode::Keep));
    for (strategy, mode) in Strategy::ALL
        .map(|s| (s, Mode::Spend))
        .into_iter()
        .chain(kept)
    {
        let quota = Quota::per_second(10).unwrap().with_strategy(strategy);
        let baseline = allocated();
        let store = MemoryStore::new();
        let empty = allocated();
        for key in &keys {
            let request = Request::new(StoreKey::new(key).unwrap(), &quota, 1, now, mode).unwrap();
            let decided = store.decide_now(request).expect("decided at once");
            assert!(decided.unwrap().allowed);
        }
        assert_eq!(store.len(), KEYS);
        let full = allocated();
        let per = (full - empty) as f64 / KEYS as f64;
        // Two windows later every key is back to a fresh state (the sliding counter's
        // previous window is the last to go).
        let removed = store.sweep(now + 3 * SEC);
        assert_eq!(removed, KEYS);
        let after = allocated();
        let kept = if mode == Mode::Keep {
            ", each spend kept"
        } else {
            ""
        };
        println!(
            "| MemoryStore, {strategy}{kept} | {per:.1} | {key_per:.2} | {:.1} | {:+} B over the empty store ({} B) |",
            per - key_per,
            after - empty,
            empty - baseline,
        );
        drop(store);
        assert_eq!(allocated(), baseline, "{strategy}: the store leaked");
    }

    let empty = allocated();
    let governor: DefaultKeyedRateLimiter<String> =
        RateLimiter::keyed(GQuota::per_second(NonZeroU32::new(10).unwrap()));
    let made = allocated();
    for key in &keys {
        assert!(governor.check_key(key).is_ok());
    }
    let full = allocated();
    let per = (full - made) as f64 / KEYS as f64;
    println!(
        "| governor keyed (dashmap), GCRA | {per:.1} | {key_per:.2} | {:.1} | kept until `retain_recent` ({} B empty) |",
        per - key_per,
        made - empty,
    );
}
