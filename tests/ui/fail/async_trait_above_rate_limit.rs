use ratelimit::{rate_limit, Error};

#[async_trait::async_trait]
trait Service {
    async fn call(&self) -> Result<(), Error>;
    async fn other(&self) -> Result<(), Error>;
}

struct S;

// `#[async_trait]` runs first and turns every `async fn` into a plain fn returning a boxed
// future: the limit would see no async fn at all and must not leave them unlimited.
#[async_trait::async_trait]
#[rate_limit(limit = 1, window = "1s")]
impl Service for S {
    async fn call(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn other(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {}
