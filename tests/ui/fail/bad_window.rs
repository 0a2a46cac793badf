use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1, window = "1x")]
async fn unknown_unit() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = "0s")]
async fn zero() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, window = 60)]
async fn not_a_string() -> Result<(), Error> {
    Ok(())
}

fn main() {}
