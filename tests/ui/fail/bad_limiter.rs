use ratelimit::{rate_limit, throttle, Error, Limiter};

static LIMITS: Limiter = Limiter::new();
static OTHER: Limiter = Limiter::new();

#[rate_limit(limit = 1, limiter = "LIMITS")]
async fn a_string() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, limiter = LIMITS.clone())]
async fn an_expression() -> Result<(), Error> {
    Ok(())
}

#[throttle(1, limiter = LIMITS)]
#[rate_limit(limit = 1, limiter = OTHER)]
fn two_limiters() -> Result<(), Error> {
    Ok(())
}

#[rate_limit(limit = 1, limiter = LIMITS, limiter = OTHER)]
fn twice() -> Result<(), Error> {
    Ok(())
}

fn main() {}
