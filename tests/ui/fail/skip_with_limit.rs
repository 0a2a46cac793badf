use ratelimit::{rate_limit, skip_throttle, throttle, Error};

#[skip_throttle]
#[throttle(1)]
async fn skip_first() -> Result<(), Error> {
    Ok(())
}

#[throttle(1)]
#[skip_throttle]
async fn limit_first() -> Result<(), Error> {
    Ok(())
}

struct S;

#[rate_limit(limit = 1, window = "1s")]
impl S {
    #[skip_throttle]
    #[throttle(2)]
    async fn both(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {}
