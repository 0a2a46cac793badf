use ratelimit::{throttle, Error};

#[throttle(1)]
const fn constant() -> Result<(), Error> {
    Ok(())
}

fn main() {}
