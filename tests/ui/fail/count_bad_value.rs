use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 5, window = "15m", count = "errors")]
async fn login() -> Result<(), Error> {
    Ok(())
}

fn main() {}
