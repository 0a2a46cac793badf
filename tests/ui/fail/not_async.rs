use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 1)]
fn blocking() -> Result<(), Error> {
    Ok(())
}

fn main() {}
