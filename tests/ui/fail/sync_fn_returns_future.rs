use std::future::Future;

use ratelimit::{rate_limit, Error};

// A sync fn handing back a future would be limited when called, not when awaited.
#[rate_limit(limit = 1)]
fn later() -> impl Future<Output = Result<(), Error>> {
    async { Ok(()) }
}

fn main() {
    let _ = later();
}
