//! Metrics for operators (feature `metrics`), exported as Prometheus text, and the queue at
//! work: calls over their limit wait their turn instead of being refused.
//!
//! ```text
//! cargo run -p ratelimit-examples --features metrics --example metrics
//! ```
//!
//! The recorder is `metrics-exporter-prometheus` without its HTTP listener: the text is
//! rendered once and printed (a server would serve `handle.render()` on `/metrics`). Any
//! other exporter of the `metrics` facade works the same way. Install it before
//! `Module::init`: the limiter registers its counters when it is built.

use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use ratelimit::{rate_limit, Error, Module, Tier};

/// Waits for capacity: `search` is only reachable by signed-in users (never queue calls an
/// anonymous client can make: each one would hold a place and memory until its timeout).
#[rate_limit(tier = "free", key = user, queue = true)]
async fn search(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// Refused at once when over the limit.
#[rate_limit(limit = 1, window = "1m", key = user)]
async fn export(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this program");
    let _module = Module::builder()
        .tier(Tier::new("free", 2).window("1s"))
        .max_queue_size(100)
        .queue_timeout("3s")
        .init()?;

    let started = Instant::now();
    for i in 1..=4 {
        search("alice").await?;
        println!("search #{i} admitted after {:?}", round(started.elapsed()));
    }
    export("alice").await?;
    match export("alice").await {
        Err(Error::Exceeded(e)) => println!("export refused: {e}"),
        other => println!("export: {other:?}"),
    }

    println!("\n{}", prometheus.render());
    Ok(())
}

fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64 / 100 * 100)
}
