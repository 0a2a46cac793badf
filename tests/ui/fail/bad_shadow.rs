use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1, shadow = "yes")]
async fn quoted() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, shadow = true, shadow = false)]
async fn twice() -> Result<(), Error> {
    Ok(())
}

fn main() {}
