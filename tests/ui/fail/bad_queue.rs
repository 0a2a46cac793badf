use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1, queue = "yes")]
async fn quoted() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, queue = 1)]
async fn numeric() -> Result<(), Error> {
    Ok(())
}

fn main() {}
