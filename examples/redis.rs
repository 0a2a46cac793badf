//! Two "pods" sharing one budget through Redis: each has its own service (as separate
//! processes would), both draw from the same key, and together they never pass the limit.
//!
//! Needs a Redis server (`apt-get install -y redis-server`, then `redis-server`); set
//! `REDIS_URL` if it is not at `redis://127.0.0.1:6379`. Run with
//! `cargo run -p ratelimit-examples --features redis --example redis`.

use std::time::Duration;

use ratelimit::{
    Config, Error, FailurePolicy, Options, RateLimitService, RedisOptions, StoreConfig, Strategy,
    Tier,
};

fn pod(url: &str) -> Result<RateLimitService, Error> {
    let redis = RedisOptions::new(url)
        .timeout(Duration::from_millis(100))
        // While Redis is away each of the 2 pods admits half of every limit on its own.
        .on_failure(FailurePolicy::Local { pods: 2 });
    let config = Config::builder()
        .key_prefix("example")
        .strategy(Strategy::SlidingWindow)
        .tier(Tier::new("free", 5).window("1m"))
        .default_tier("free")
        .store(StoreConfig::Redis(redis))
        .build()?;
    RateLimitService::new(config)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let pods = [pod(&url)?, pod(&url)?];
    // Fail at start-up, not on the first request, if Redis is not there.
    for pod in &pods {
        if let Some(store) = pod.redis_store() {
            store.connect().await?;
        }
    }
    pods[0].reset("alice", None).await?;

    for call in 1..=8 {
        let which = call % 2;
        let d = pods[which].consume("alice", &Options::new()).await?;
        match d.retry_after {
            None => println!(
                "pod {which}, call {call}: allowed, {} of {} left",
                d.remaining, d.limit
            ),
            Some(wait) => println!("pod {which}, call {call}: refused, retry after {wait:?}"),
        }
    }
    let status = pods[1].status("alice", &Options::new()).await?;
    println!(
        "status seen by pod 1: {} left, full again in {:?} (at {:?})",
        status.remaining,
        status.reset_after,
        status.reset_at()
    );
    Ok(())
}
