//! Metrics for operators (feature `metrics`), through the [`metrics`](https://docs.rs/metrics)
//! facade, so any exporter works (Prometheus, StatsD, OpenTelemetry...).
//!
//! | name                                 | kind      | labels               |
//! |--------------------------------------|-----------|----------------------|
//! | `ratelimit_decisions_total`          | counter   | `outcome`            |
//! | `ratelimit_tier_decisions_total`     | counter   | `tier`, `outcome`    |
//! | `ratelimit_budget_decisions_total`   | counter   | `budget`, `outcome`  |
//! | `ratelimit_decision_seconds`         | histogram | `store`              |
//! | `ratelimit_reloads_total`            | counter   |                      |
//! | `ratelimit_generation`               | gauge     |                      |
//! | `ratelimit_queue_depth`              | gauge     |                      |
//! | `ratelimit_queue_queued_total`       | counter   |                      |
//! | `ratelimit_queue_admitted_total`     | counter   |                      |
//! | `ratelimit_queue_timed_out_total`    | counter   |                      |
//! | `ratelimit_queue_full_total`         | counter   |                      |
//! | `ratelimit_queue_cancelled_total`    | counter   |                      |
//!
//! `outcome` is `allowed`, `denied`, `error`, `abandoned`, `shadowed` (a call a shadow limit
//! would have refused, also counted `allowed`) or `refunded` (an admitted spend given back,
//! also counted `allowed`), counted as [`Stats`](crate::Stats) counts
//! (a call that waited counts once, by how it ended); `store` is `memory`, `redis` or
//! `custom`. The latency of every decision of a Redis or custom store is recorded; the
//! memory store's (tens of nanoseconds, where reading the clock twice would cost a third of
//! the decision) one decision in 64 per thread.
//!
//! The decision counters are registered when the service is built (per budget: at its first
//! call), so **install the recorder before building the service or the module**; handles
//! registered before any recorder stay no-ops. Without the feature every function here is
//! an empty inline function and every handle a zero-sized type: no cost.

#[cfg(feature = "metrics")]
mod on {
    use std::cell::Cell;

    /// The decision counters of one scope (total, a tier, a budget).
    #[derive(Debug)]
    pub(crate) struct Handles([metrics::Counter; 6]);

    impl Default for Handles {
        fn default() -> Self {
            Handles::new("ratelimit_decisions_total", None)
        }
    }

    impl Handles {
        fn new(name: &'static str, label: Option<(&'static str, &str)>) -> Self {
            let counter = |outcome: &'static str| match label {
                Some((k, v)) => {
                    metrics::counter!(name, k => v.to_owned(), "outcome" => outcome)
                }
                None => metrics::counter!(name, "outcome" => outcome),
            };
            Handles([
                counter("allowed"),
                counter("denied"),
                counter("error"),
                counter("abandoned"),
                counter("shadowed"),
                counter("refunded"),
            ])
        }
        pub(crate) fn tier(name: &str) -> Self {
            Handles::new("ratelimit_tier_decisions_total", Some(("tier", name)))
        }
        pub(crate) fn budget(name: &str) -> Self {
            Handles::new("ratelimit_budget_decisions_total", Some(("budget", name)))
        }
        #[inline]
        pub(crate) fn allowed(&self) {
            self.0[0].increment(1);
        }
        #[inline]
        pub(crate) fn denied(&self) {
            self.0[1].increment(1);
        }
        #[inline]
        pub(crate) fn error(&self) {
            self.0[2].increment(1);
        }
        #[inline]
        pub(crate) fn abandoned(&self) {
            self.0[3].increment(1);
        }
        #[inline]
        pub(crate) fn shadowed(&self) {
            self.0[4].increment(1);
        }
        #[inline]
        pub(crate) fn refunded(&self) {
            self.0[5].increment(1);
        }
    }

    /// The decision-latency histogram of one service's store.
    #[derive(Debug)]
    pub(crate) struct Latency {
        histogram: metrics::Histogram,
        sampled: bool,
    }

    thread_local! {
        static TICK: Cell<u8> = const { Cell::new(0) };
    }

    impl Latency {
        pub(crate) fn new(store: &'static str) -> Self {
            Latency {
                histogram: metrics::histogram!("ratelimit_decision_seconds", "store" => store),
                sampled: store == "memory",
            }
        }
        #[inline]
        pub(crate) fn start(&self) -> Option<quanta::Instant> {
            if self.sampled {
                let tick = TICK.with(|t| {
                    let n = t.get().wrapping_add(1);
                    t.set(n);
                    n
                });
                if tick % 64 != 0 {
                    return None;
                }
            }
            Some(quanta::Instant::now())
        }
        #[inline]
        pub(crate) fn finish(&self, started: Option<quanta::Instant>) {
            if let Some(started) = started {
                self.histogram
                    .record(quanta::Instant::now().duration_since(started).as_secs_f64());
            }
        }
    }

    /// A reload installed `generation`.
    pub(crate) fn reloaded(generation: u64) {
        metrics::counter!("ratelimit_reloads_total").increment(1);
        metrics::gauge!("ratelimit_generation").set(generation as f64);
    }

    pub(crate) fn queued() {
        metrics::gauge!("ratelimit_queue_depth").increment(1.0);
        metrics::counter!("ratelimit_queue_queued_total").increment(1);
    }

    /// A place given back (when its waiter leaves, or is displaced).
    pub(crate) fn freed() {
        metrics::gauge!("ratelimit_queue_depth").decrement(1.0);
    }

    /// A wait that ended admitted.
    pub(crate) fn admitted() {
        metrics::counter!("ratelimit_queue_admitted_total").increment(1);
    }

    /// A wait that timed out.
    pub(crate) fn timed_out() {
        metrics::counter!("ratelimit_queue_timed_out_total").increment(1);
    }

    /// A call refused for a full queue: on arrival, or displaced from its place.
    pub(crate) fn full() {
        metrics::counter!("ratelimit_queue_full_total").increment(1);
    }

    /// A wait given up by its caller.
    pub(crate) fn cancelled() {
        metrics::counter!("ratelimit_queue_cancelled_total").increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    #[derive(Debug, Default)]
    pub(crate) struct Handles;

    impl Handles {
        #[inline(always)]
        pub(crate) fn tier(_: &str) -> Self {
            Handles
        }
        #[inline(always)]
        pub(crate) fn budget(_: &str) -> Self {
            Handles
        }
        #[inline(always)]
        pub(crate) fn allowed(&self) {}
        #[inline(always)]
        pub(crate) fn denied(&self) {}
        #[inline(always)]
        pub(crate) fn error(&self) {}
        #[inline(always)]
        pub(crate) fn abandoned(&self) {}
        #[inline(always)]
        pub(crate) fn shadowed(&self) {}
        #[inline(always)]
        pub(crate) fn refunded(&self) {}
    }

    #[derive(Debug)]
    pub(crate) struct Latency;

    /// Nothing: no time is read without the feature.
    pub(crate) struct Started;

    impl Latency {
        #[inline(always)]
        pub(crate) fn new(_: &'static str) -> Self {
            Latency
        }
        #[inline(always)]
        pub(crate) fn start(&self) -> Started {
            Started
        }
        #[inline(always)]
        pub(crate) fn finish(&self, _: Started) {}
    }

    #[inline(always)]
    pub(crate) fn reloaded(_: u64) {}
    #[inline(always)]
    pub(crate) fn queued() {}
    #[inline(always)]
    pub(crate) fn freed() {}
    #[inline(always)]
    pub(crate) fn admitted() {}
    #[inline(always)]
    pub(crate) fn timed_out() {}
    #[inline(always)]
    pub(crate) fn full() {}
    #[inline(always)]
    pub(crate) fn cancelled() {}
}

pub(crate) use on::{
    admitted, cancelled, freed, full, queued, reloaded, timed_out, Handles, Latency,
};
