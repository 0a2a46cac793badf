//! Stacked limits on keys in different Redis Cluster slots (feature `redis`): the README's
//! `login`, a limit on the user and one on the address, decided as one. Every such call on a
//! Cluster was refused (`InvalidKey`: Redis answers `CROSSSLOT` to one script over two
//! slots), so the example refused every login there. Now decided slot by slot
//! (`store/redis/slots.rs`): the same admissions, refusals and levels as the memory store and
//! one Redis server, each case on all three, a refused call's spend in an earlier slot given
//! back, a block begun by a refusal in a later slot, exact counts under concurrency, and a
//! kept spend given back across slots. Each store reads its own clock (Redis its `TIME`):
//! every case stays within its windows.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::{Config, Options, RateLimitService, Strategy};
use ratelimit_tests::{clock, on_every_store};

/// The limits of the README's `login`, per user and per address, as budgets of their own.
fn per_user(strategy: Strategy) -> Options {
    Options::new()
        .limit(2)
        .window("15m")
        .strategy(strategy)
        .budget("login-user")
}

fn per_ip(strategy: Strategy) -> Options {
    Options::new()
        .limit(100)
        .window("1h")
        .strategy(strategy)
        .budget("login-ip")
}

const STRATEGIES: [Strategy; 4] = [
    Strategy::FixedWindow,
    Strategy::SlidingWindow,
    Strategy::SlidingWindowCounter,
    Strategy::TokenBucket,
];

/// `calls` stacked calls of `limits` on `service`: whether each was admitted, and each
/// limit's `remaining` as the call's decisions told it.
async fn stacked_calls(
    service: &RateLimitService,
    limits: &[(&str, &Options)],
    calls: usize,
) -> Vec<(bool, Vec<u64>)> {
    let mut out = Vec::new();
    for _ in 0..calls {
        let decided = service.consume_all(limits).await.expect("decided");
        let admitted = decided.iter().all(|d| d.allowed);
        out.push((admitted, decided.iter().map(|d| d.remaining).collect()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_on_two_user_keys_admits_its_limit_on_every_store() {
    let clock = clock();
    let (services, _servers) = on_every_store("stacks-two-keys", Config::builder, &clock);
    for strategy in STRATEGIES {
        let (user, ip) = (per_user(strategy), per_ip(strategy));
        let mut told = Vec::new();
        for (store, service) in &services {
            let (name, address) = (format!("alice-{strategy:?}"), format!("ip-7-{strategy:?}"));
            let limits = [(name.as_str(), &user), (address.as_str(), &ip)];
            let calls = stacked_calls(service, &limits, 3).await;
            let admitted: Vec<bool> = calls.iter().map(|c| c.0).collect();
            assert_eq!(admitted, [true, true, false], "{store} {strategy:?}");
            let left = service.status(&address, &ip).await.unwrap();
            assert_eq!(
                left.remaining, 98,
                "{store} {strategy:?}: the refused call spent"
            );
            told.push((store, calls));
        }
        for (store, calls) in &told[1..] {
            assert_eq!(calls, &told[0].1, "{store} {strategy:?} against memory");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_in_a_later_slot_gets_back_what_an_earlier_slot_spent() {
    // The address's limit first: the third call spends from it, then the user's refuses.
    let clock = clock();
    let (services, _servers) = on_every_store("stacks-give-back", Config::builder, &clock);
    for strategy in STRATEGIES {
        let (user, ip) = (per_user(strategy), per_ip(strategy));
        let mut told = Vec::new();
        for (store, service) in &services {
            let (name, address) = (format!("bob-{strategy:?}"), format!("ip-8-{strategy:?}"));
            let limits = [(address.as_str(), &ip), (name.as_str(), &user)];
            let calls = stacked_calls(service, &limits, 4).await;
            let admitted: Vec<bool> = calls.iter().map(|c| c.0).collect();
            assert_eq!(admitted, [true, true, false, false], "{store} {strategy:?}");
            let left = service.status(&address, &ip).await.unwrap();
            assert_eq!(
                left.remaining, 98,
                "{store} {strategy:?}: kept a refused call's spend"
            );
            told.push((store, calls));
        }
        for (store, calls) in &told[1..] {
            assert_eq!(calls, &told[0].1, "{store} {strategy:?} against memory");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_in_one_slot_begins_a_block_in_another_and_gives_back_an_admission() {
    let clock = clock();
    let (services, _servers) = on_every_store("stacks-blocks", Config::builder, &clock);
    let first = Options::new().limit(1).window("1h").budget("first");
    let full = Options::new()
        .limit(1)
        .window("1h")
        .block_for(Duration::from_secs(600))
        .budget("blocks-full");
    let roomy = Options::new()
        .limit(5)
        .window("1h")
        .block_for(Duration::from_secs(600))
        .budget("blocks-roomy");
    for (store, service) in &services {
        let limits = [("carol", &first), ("10.0.0.1", &full), ("10.0.0.2", &roomy)];
        let calls = stacked_calls(service, &limits, 2).await;
        assert_eq!((calls[0].0, calls[1].0), (true, false), "{store}");
        // The second call: `first` refused it, and `full`, asked to spend as one script
        // asks, refused it too, which began its block; `roomy` admitted it, and got it back.
        let blocked = service.status("10.0.0.1", &full).await.unwrap();
        assert!(!blocked.allowed, "{store}");
        let wait = blocked.retry_after.expect("a refusal's wait");
        assert!(
            wait > Duration::from_secs(599),
            "{store}: not blocked: {wait:?}"
        );
        let roomy_left = service.status("10.0.0.2", &roomy).await.unwrap();
        assert_eq!(roomy_left.remaining, 4, "{store}");
        assert!(roomy_left.allowed, "{store}: blocked by a call it admitted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_stacks_across_slots_admit_exactly_and_give_every_refused_spend_back() {
    let clock = clock();
    let (services, _servers) = on_every_store("stacks-concurrent", Config::builder, &clock);
    let ip = Options::new().limit(10).window("1h").budget("busy-ip");
    let user = Options::new().limit(5).window("1h").budget("busy-user");
    for (store, service) in services {
        let service = Arc::new(service);
        let (ip, user) = (ip.clone(), user.clone());
        let calls: Vec<_> = (0..40)
            .map(|_| {
                let (service, ip, user) = (Arc::clone(&service), ip.clone(), user.clone());
                tokio::spawn(async move {
                    let limits = [("192.0.2.9", &ip), ("dave", &user)];
                    let decided = service.consume_all(&limits).await.expect("decided");
                    decided.iter().all(|d| d.allowed)
                })
            })
            .collect();
        let mut admitted = 0;
        for call in calls {
            admitted += usize::from(call.await.unwrap());
        }
        assert_eq!(admitted, 5, "{store}");
        let ip_left = service.status("192.0.2.9", &ip).await.unwrap();
        assert_eq!(ip_left.remaining, 5, "{store}: a refused call's spend kept");
        let user_left = service.status("dave", &user).await.unwrap();
        assert_eq!(user_left.remaining, 0, "{store}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_spend_across_slots_is_given_back_to_every_limit() {
    let clock = clock();
    let (services, _servers) = on_every_store("stacks-kept", Config::builder, &clock);
    let ip = Options::new().limit(3).window("1h").budget("kept-ip");
    let user = Options::new().limit(3).window("1h").budget("kept-user");
    for (store, service) in &services {
        let limits = [("eve", &user), ("203.0.113.4", &ip)];
        let spent = service.spend_all(&limits).await.expect("spent");
        assert!(spent.decisions().iter().all(|d| d.allowed), "{store}");
        assert!(spent.refund().await.expect("given back"), "{store}");
        for (key, options) in limits {
            let left = service.status(key, options).await.unwrap();
            assert_eq!(left.remaining, 3, "{store}: {key} not given back");
        }
    }
}
