use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1, window = "1s", limit = 2)]
async fn f() -> Result<(), Error> {
    Ok(())
}

fn main() {}
