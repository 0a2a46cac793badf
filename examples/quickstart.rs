//! The product in one screen: annotated async fns on a service struct, `Module::init` refusing
//! to start when a limit cannot be enforced, refused calls coming back through the fns' own
//! `Result`, the statistics, and the service API underneath.
//!
//! Run with `cargo run --example quickstart`.

use ratelimit::{rate_limit, throttle, Error, Module, Options, Tier};

struct Payments;

impl Payments {
    /// 3 a minute per user: a refusal is this fn's own `Err`.
    #[rate_limit(limit = 3, window = "1m", key = user_id)]
    async fn charge(&self, user_id: &str, cents: u64) -> Result<String, Error> {
        Ok(format!("charged {user_id} {cents} cents"))
    }
}

struct Reports;

/// Every async method gets the `pro` tier's limit, one budget per method.
#[rate_limit(tier = "pro")]
impl Reports {
    async fn daily(&self) -> Result<&'static str, Error> {
        Ok("daily report")
    }

    #[ratelimit::skip_throttle] // exempt from the impl's limit
    async fn health(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// 2 a second, one budget for the whole fn.
#[throttle(2)]
async fn search(query: &str) -> Result<Vec<String>, Error> {
    Ok(vec![format!("hit for {query}")])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // 1. A limit that cannot be enforced never runs: `Reports` names a tier `pro` that this
    //    configuration does not have, so `init` refuses to start and says where.
    match Module::builder().init() {
        Err(e) => println!("init refused:\n{e}\n"),
        Ok(_) => unreachable!("the tier `pro` is missing"),
    }
    // Before a module runs, annotated fns are refused, not waved through.
    println!("before init: {}\n", search("rust").await.unwrap_err());

    // 2. With the tier configured, the module starts.
    let module = Module::builder()
        .tier(Tier::new("pro", 2).window("1m"))
        .init()?;

    let payments = Payments;
    for call in 1..=4 {
        match payments.charge("alice", 500).await {
            Ok(receipt) => println!("alice, call {call}: {receipt}"),
            Err(refused) => println!(
                "alice, call {call}: refused, retry after {:?}",
                refused.retry_after().unwrap_or_default()
            ),
        }
    }
    println!("bob: {}", payments.charge("bob", 100).await?); // another key, another budget

    let reports = Reports;
    for _ in 0..3 {
        println!(
            "daily: {:?}",
            reports.daily().await.map_err(|e| e.to_string())
        );
        reports.health().await?; // exempt
    }
    for _ in 0..3 {
        println!(
            "search: {:?}",
            search("rust").await.map_err(|e| e.to_string())
        );
    }

    // 3. What happened, per fn (budgets are named after the fn's path).
    println!("\nstats by fn:");
    for (budget, counts) in &module.stats().by_method {
        println!(
            "  {budget}: {} allowed, {} denied",
            counts.allowed, counts.denied
        );
    }

    // 4. The service underneath, usable directly (here with the module's configuration).
    let service = module.service();
    let pro = Options::new().tier("pro");
    let decision = service.consume("api-key:42", &pro).await?;
    println!(
        "\nservice: allowed = {}, {} of {} left",
        decision.allowed, decision.remaining, decision.limit
    );
    let level = service.status("api-key:42", &pro).await?;
    println!(
        "status (spends nothing): {} left, full again in {:?}",
        level.remaining, level.reset_after
    );

    // 5. Dropping the module shuts it down: annotated fns are refused again.
    drop(module);
    println!("\nafter shutdown: {}", search("rust").await.unwrap_err());
    Ok(())
}
