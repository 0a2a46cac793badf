use ratelimit::{rate_limit, Error};

// A call has one outcome: its limits cannot count different ones.
#[rate_limit(limit = 5, window = "15m", count = "err")]
#[rate_limit(limit = 100, window = "1h", count = "ok")]
async fn login() -> Result<(), Error> {
    Ok(())
}

fn main() {}
