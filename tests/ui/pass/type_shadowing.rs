//! Names the expansion uses, shadowed by the user's module and body, do not break it.
#![allow(dead_code, unused_imports, non_camel_case_types)]

use ratelimit::testing::TestModule;
use ratelimit::Module;

// Module-level shadows of prelude names and primitive types (the expansion uses absolute
// paths, `::core::primitive::u64` included).
struct Option;
struct String;
type Some = ();
struct u64;
struct str;
mod core {}
mod std {}

type N = ::core::primitive::u64;

#[ratelimit::rate_limit(limit = 2, window = "1m", key = n)]
async fn shadowed(n: N) -> ::core::result::Result<N, ratelimit::Error> {
    // A `use` in the body shadowing the expansion's names.
    use ::std::fmt::Error as Declaration;
    use ::std::vec::Vec as inventory;
    struct u64;
    struct str;
    let __ratelimit_key = "user's own local";
    let _ = (__ratelimit_key, u64, str);
    ::core::result::Result::Ok(n)
}

// A tier chosen per call (`&str`) and a cost computed per call (`u64`), under the shadows.
#[ratelimit::rate_limit(limit = 5, window = "1m", tier = plan, cost = cost)]
async fn priced(plan: &::core::primitive::str, cost: N) -> ::core::result::Result<N, ratelimit::Error> {
    ::core::result::Result::Ok(cost)
}

fn main() {
    let module = TestModule::new(Module::builder().tier(ratelimit::Tier::new("pro", 5))).unwrap();
    ::futures::executor::block_on(module.scope(async {
        ::core::assert_eq!(shadowed(1).await.unwrap(), 1);
        ::core::assert_eq!(shadowed(1).await.unwrap(), 1);
        ::core::assert!(shadowed(1).await.is_err());
        ::core::assert!(priced("free", 1).await.is_err()); // no tier "free": refused
        ::core::assert_eq!(priced("pro", 2).await.unwrap(), 2);

    }));
}
