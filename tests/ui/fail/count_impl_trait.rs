use ratelimit::{rate_limit, Error};

#[rate_limit(limit = 5, window = "15m", count = "err")]
fn names() -> Result<impl Iterator<Item = u8>, Error> {
    Ok([1u8].into_iter())
}

fn main() {}
