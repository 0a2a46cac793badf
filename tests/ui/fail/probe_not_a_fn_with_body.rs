// Items the attribute cannot limit are errors, never passed through unlimited: a trait
// method without a body, a module of fns, an `extern` block.
use ratelimit::{rate_limit, throttle, Error};

trait Api {
    #[throttle(1)]
    async fn declared(&self) -> Result<(), Error>;
}

#[rate_limit(limit = 1)]
mod handlers {
    pub async fn get() -> Result<(), ratelimit::Error> {
        Ok(())
    }
}

#[throttle(1)]
extern "C" {
    fn external() -> i32;
}

fn main() {}
