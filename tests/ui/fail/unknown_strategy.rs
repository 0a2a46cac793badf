use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1, strategy = "leaky-bucket")]
async fn f() -> Result<(), Error> {
    Ok(())
}

fn main() {}
