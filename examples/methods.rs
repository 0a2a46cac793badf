//! Rate-limited methods on a service struct: a per-user limit, a tier chosen per call, an
//! impl-wide limit with an override and an exemption, and the declarations printed at start-up.
//!
//! Run with `cargo run -p ratelimit-examples --example methods`.

use std::sync::Arc;

use ratelimit::{rate_limit, throttle, Error, Module, Tier};

/// The application's error type: carries refusals like any other failure.
#[derive(Debug)]
enum AppError {
    RateLimited(Error),
    NotFound,
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::RateLimited(e)
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::RateLimited(e) => write!(f, "refused: {e}"),
            AppError::NotFound => f.write_str("not found"),
        }
    }
}

struct User {
    id: u64,
    plan: &'static str,
}

struct Payments;

impl Payments {
    /// At most 3 charges per user per minute, whatever their plan.
    #[rate_limit(limit = 3, window = "1m", key = user.id)]
    async fn charge(&self, user: &User, cents: u64) -> Result<String, AppError> {
        Ok(format!("charged user {} {cents} cents", user.id))
    }

    /// Limited by the user's plan: the tier is chosen per call.
    #[rate_limit(tier = user.plan, key = user.id, strategy = "token-bucket")]
    async fn export(&self, user: &User) -> Result<String, AppError> {
        Ok(format!("export for user {}", user.id))
    }
}

struct Catalog;

/// Every async method: 5 calls per second, each method its own budget (add
/// `name = "catalog"` to make them share one).
#[throttle(5)]
impl Catalog {
    async fn search(&self, query: &str) -> Result<Vec<String>, AppError> {
        Ok(vec![format!("result for {query:?}")])
    }

    /// A heavier call: its own, lower limit, per caller.
    #[rate_limit(limit = 1, window = "1m", key = caller)]
    async fn reindex(self: Arc<Self>, caller: &str) -> Result<(), AppError> {
        Ok(())
    }

    /// Never limited.
    #[skip_throttle]
    async fn health(&self) -> Result<&'static str, AppError> {
        Ok("ok")
    }

    async fn item(&self, id: u64) -> Result<String, AppError> {
        if id == 0 {
            return Err(AppError::NotFound);
        }
        Ok(format!("item {id}"))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    println!("rate-limited fns in this binary:");
    for d in ratelimit::declarations() {
        println!(
            "  {:<45} {}:{:<4} budget {:?}: {}",
            d.function(),
            d.file(),
            d.line(),
            d.budget(),
            d.spec()
        );
    }

    let ann = User {
        id: 1,
        plan: "free",
    };
    let bob = User { id: 2, plan: "pro" };

    // Before `init`, every annotated call is refused: nothing runs unlimited by accident.
    match Payments.charge(&ann, 100).await {
        Err(e) => println!("\nbefore init: {e}"),
        Ok(r) => unreachable!("admitted without a module: {r}"),
    }

    let module = Module::builder()
        .tier(Tier::new("free", 2).window("1h"))
        .tier(Tier::new("pro", 100).window("1h").burst(20))
        .init()?;

    println!();
    for i in 1..=4 {
        report(
            &format!("charge ann #{i}"),
            Payments.charge(&ann, 500).await,
        );
    }
    report("charge bob", Payments.charge(&bob, 500).await);
    for i in 1..=3 {
        report(
            &format!("export ann (free) #{i}"),
            Payments.export(&ann).await,
        );
    }
    report("export bob (pro)", Payments.export(&bob).await);

    let catalog = Arc::new(Catalog);
    for i in 1..=6 {
        report(&format!("search #{i}"), catalog.search("lamp").await);
    }
    report("item 0", catalog.item(0).await);
    report("health", catalog.health().await);
    report("reindex by ann", catalog.clone().reindex("ann").await);
    report("reindex by ann", catalog.clone().reindex("ann").await);

    println!("\nper-method stats:");
    for (budget, counts) in module.stats().by_method {
        println!(
            "  {budget:<45} allowed {:>2}  denied {:>2}  errors {}",
            counts.allowed, counts.denied, counts.errors
        );
    }
    module.shutdown();
    Ok(())
}

fn report<T: std::fmt::Debug>(what: &str, result: Result<T, AppError>) {
    match result {
        Ok(v) => println!("  {what:<24} ok: {v:?}"),
        Err(e) => println!("  {what:<24} {e}"),
    }
}
