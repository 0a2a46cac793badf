//! The expansion passes the strict lints a user's crate may deny: it spells out
//! `::core::option::Option::Some` and the like, which `unused_qualifications` would flag in
//! hand-written code.
#![deny(
    unused_qualifications,
    unused_results,
    unused_lifetimes,
    single_use_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    non_upper_case_globals,
    rust_2018_idioms
)]

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, throttle, Error, Module, Tier};

#[rate_limit(limit = 2, window = "1m", key = user, tier = plan, cost = cost)]
async fn everything(user: &str, plan: &str, cost: u64) -> Result<u64, Error> {
    Ok(cost)
}

struct Api;

#[throttle(1)]
impl Api {
    async fn search(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    let module = TestModule::new(Module::builder().tier(Tier::new("free", 3))).unwrap();
    futures::executor::block_on(module.scope(async {
        assert_eq!(everything("ann", "free", 2).await.unwrap(), 2);
        assert!(everything("ann", "free", 2).await.is_err());
        Api.search().await.unwrap();
        assert!(Api.search().await.is_err());
    }));
}
