use ratelimit::{rate_limit, Error};

#[async_trait::async_trait]
trait Service {
    async fn call(&self) -> Result<(), Error>;
}

struct S;

// `#[async_trait]` runs first and turns `call` into a plain fn: the limit must go above it.
#[async_trait::async_trait]
impl Service for S {
    #[rate_limit(limit = 1, window = "1s")]
    async fn call(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {}
