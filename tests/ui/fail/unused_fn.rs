#![deny(dead_code)]

use ratelimit::{rate_limit, Error};

// An annotated fn nobody calls is still reported, like any other fn.
#[rate_limit(limit = 1, window = "1s")]
async fn never_called() -> Result<(), Error> {
    Ok(())
}

fn main() {}
