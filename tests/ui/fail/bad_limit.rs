use ratelimit::{rate_limit, Error};

#[rate_limit(limit = -1, window = "1s")]
async fn negative() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1.5, window = "1s")]
async fn fraction() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = "10", window = "1s")]
async fn string() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 10, window = "1s", cost = 0)]
async fn zero_cost() -> Result<(), Error> {
    Ok(())
}

fn main() {}
