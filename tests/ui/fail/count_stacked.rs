use ratelimit::{rate_limit, Error};

// A refund would have to give back to every limit or to none: not built yet.
#[rate_limit(limit = 5, window = "15m", count = "err")]
#[rate_limit(limit = 100, window = "1h")]
async fn login() -> Result<(), Error> {
    Ok(())
}

fn main() {}
