//! The metrics (feature `metrics`), read back through `metrics-util`'s debugging recorder
//! with exact values. One test: the recorder is global to the process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use ratelimit::testing::TokioClock;
use ratelimit::{Config, Error, MemoryStore, Options, RateLimitService, Strategy, Tier};

/// Every metric so far as `name{label=value,...}` (labels sorted). The debugging recorder
/// hands out what changed since its last snapshot, so snapshots are added up here.
#[derive(Default)]
struct Totals {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, usize>,
}

impl Totals {
    fn update(&mut self, snapshotter: &metrics_util::debugging::Snapshotter) -> &Self {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            match value {
                DebugValue::Counter(n) => *self.counters.entry(name).or_default() += n,
                DebugValue::Gauge(v) => *self.gauges.entry(name).or_default() += v.into_inner(),
                DebugValue::Histogram(v) => *self.histograms.entry(name).or_default() += v.len(),
            }
        }
        self
    }
    fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

#[tokio::test(start_paused = true)]
async fn decisions_queue_and_latency_are_counted_exactly() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");

    // Installed before the service is built: its handles register with the recorder.
    let config = Config::builder()
        .strategy(Strategy::FixedWindow)
        .tier(Tier::new("free", 2).window("10s"))
        .queue_enabled(true)
        .max_queue_size(1)
        .queue_timeout("3s")
        .build()
        .unwrap();
    let service =
        RateLimitService::with_clock(config.clone(), Arc::new(TokioClock::new())).unwrap();
    let free = Options::new().tier("free").budget("charge");

    assert!(service.consume("u", &free).await.unwrap().allowed);
    assert!(service.consume("u", &free).await.unwrap().allowed);
    assert!(
        !service
            .consume("u", &free.clone().queue(false))
            .await
            .unwrap()
            .allowed
    );
    // Its turn (the window turns at 10 s) is past its timeout (3 s): timed out at once.
    assert!(matches!(
        service.consume("u", &free).await,
        Err(Error::QueueTimeout { .. })
    ));
    // At 7.5 s one waits (its turn at 10 s is within its timeout); a second finds the queue
    // (of one) full.
    tokio::time::advance(Duration::from_millis(7_500)).await;
    let waiter = {
        let (service, free) = (service.clone(), free.clone());
        tokio::spawn(async move { service.consume("u", &free).await })
    };
    while service.stats().queue.depth == 0 {
        tokio::task::yield_now().await;
    }
    assert!(matches!(
        service.consume("u", &free).await,
        Err(Error::QueueFull { .. })
    ));
    let mut totals = Totals::default();
    assert_eq!(
        totals.update(&snapshotter).gauges["ratelimit_queue_depth{}"],
        1.0
    );
    // The window turns at 10 s: the waiter is admitted then.
    assert!(waiter.await.unwrap().unwrap().allowed);
    // An unknown tier: an error, counted under the budget.
    assert!(service
        .consume("u", &Options::new().tier("gold").budget("charge"))
        .await
        .is_err());
    // A shadow limit of 1: three calls admitted, two of them counted as shadowed.
    let trial = Options::new()
        .limit(1)
        .window("1m")
        .budget("trial")
        .shadow(true);
    for _ in 0..3 {
        assert!(service.consume("u", &trial).await.unwrap().allowed);
    }

    // A reload: counted, and the generation running.
    service.reload(config.clone()).unwrap();

    let m = totals.update(&snapshotter);
    assert_eq!(m.gauges["ratelimit_generation{}"], 1.0);
    let expect = [
        ("ratelimit_reloads_total{}", 1),
        ("ratelimit_decisions_total{outcome=allowed}", 6),
        ("ratelimit_decisions_total{outcome=shadowed}", 2),
        (
            "ratelimit_budget_decisions_total{budget=trial,outcome=allowed}",
            3,
        ),
        (
            "ratelimit_budget_decisions_total{budget=trial,outcome=shadowed}",
            2,
        ),
        ("ratelimit_decisions_total{outcome=denied}", 3),
        ("ratelimit_decisions_total{outcome=error}", 1),
        (
            "ratelimit_tier_decisions_total{outcome=allowed,tier=free}",
            3,
        ),
        (
            "ratelimit_tier_decisions_total{outcome=denied,tier=free}",
            3,
        ),
        (
            "ratelimit_budget_decisions_total{budget=charge,outcome=allowed}",
            3,
        ),
        (
            "ratelimit_budget_decisions_total{budget=charge,outcome=denied}",
            3,
        ),
        (
            "ratelimit_budget_decisions_total{budget=charge,outcome=error}",
            1,
        ),
        ("ratelimit_queue_queued_total{}", 2),
        ("ratelimit_queue_admitted_total{}", 1),
        ("ratelimit_queue_timed_out_total{}", 1),
        ("ratelimit_queue_full_total{}", 1),
        ("ratelimit_queue_cancelled_total{}", 0),
    ];
    for (name, value) in expect {
        assert_eq!(m.counter(name), value, "{name} in {:#?}", m.counters);
    }
    assert_eq!(m.gauges["ratelimit_queue_depth{}"], 0.0);
    // The same figures as `stats()`.
    let stats = service.stats();
    assert_eq!(
        (
            stats.total.allowed,
            stats.total.denied,
            stats.total.errors,
            stats.total.shadowed
        ),
        (6, 3, 1, 2)
    );

    // Latency: every decision of a store other than memory is recorded (the memory store's
    // one in 64 per thread).
    let custom =
        RateLimitService::with_store(config, MemoryStore::new(), Arc::new(TokioClock::new()))
            .unwrap();
    let before = totals
        .histograms
        .get("ratelimit_decision_seconds{store=custom}")
        .copied();
    assert_eq!(before, None);
    for _ in 0..5 {
        custom
            .consume("k", &Options::new().tier("free").queue(false))
            .await
            .unwrap();
    }
    let m = totals.update(&snapshotter);
    assert_eq!(m.histograms["ratelimit_decision_seconds{store=custom}"], 5);
}
