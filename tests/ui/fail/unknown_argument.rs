use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1, per = "minute")]
async fn f() -> Result<(), Error> {
    Ok(())
}

fn main() {}
