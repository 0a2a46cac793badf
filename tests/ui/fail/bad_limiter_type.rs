// A `limiter` that is not a `static` `Limiter`: spanned on the path.
use ratelimit::{rate_limit, Error, Limiter};

static NOT_A_LIMITER: u32 = 1;
const CONST_LIMITER: Limiter = Limiter::new();

#[rate_limit(limit = 1, limiter = NOT_A_LIMITER)]
async fn not_a_limiter() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, limiter = MISSING)]
async fn missing() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, limiter = CONST_LIMITER)]
fn a_const() -> Result<(), Error> {
    Ok(())
}

fn main() {}
