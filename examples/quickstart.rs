//! The in-memory limiter in one screen: a free and a pro tier, calls allowed and refused with
//! `retry_after`, the response headers, and the statistics.
//!
//! Run with `cargo run --example quickstart`.

use ratelimit::{Config, Error, Options, RateLimitService, Strategy, Tier};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let config = Config::builder()
        .strategy(Strategy::SlidingWindow)
        .tier(Tier::new("free", 3).window("10s"))
        .tier(
            Tier::new("pro", 5)
                .window("10s")
                .burst(2)
                .strategy(Strategy::TokenBucket),
        )
        .default_tier("free")
        .build()?;
    let limiter = RateLimitService::new(config)?;

    for (user, tier) in [("alice", "free"), ("bob", "pro")] {
        println!("{user} ({tier} plan):");
        for call in 1..=8 {
            let decision = limiter.consume(user, &Options::new().tier(tier)).await?;
            match decision.retry_after {
                None => println!(
                    "  call {call}: allowed, {} of {} left",
                    decision.remaining, decision.limit
                ),
                Some(wait) => println!("  call {call}: refused, retry after {wait:?}"),
            }
        }
    }

    // `enforce` turns a refusal into an error carrying the decision.
    if let Err(refused) = limiter.enforce("alice", &Options::new()).await {
        println!("\nenforce: {refused}");
        println!("headers for a 429:");
        for (name, value) in refused.decision().map(|d| d.headers()).unwrap_or_default() {
            println!("  {name}: {value}");
        }
    }

    // A tier that is not configured is refused, never waved through.
    let typo = limiter.consume("carol", &Options::new().tier("prp")).await;
    println!("\nunknown tier: {}", typo.unwrap_err());

    let stats = limiter.stats();
    println!(
        "\nstats: {} checks, {} allowed, {} denied, {} errors",
        stats.total.checks, stats.total.allowed, stats.total.denied, stats.total.errors
    );
    for (tier, counts) in &stats.by_tier {
        println!(
            "  {tier}: {} checks, {} allowed, {} denied",
            counts.checks, counts.allowed, counts.denied
        );
    }
    Ok(())
}
