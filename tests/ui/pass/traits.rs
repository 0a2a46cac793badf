//! Impls of traits with native `async fn`, and `#[async_trait]` with the limit above it.
use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, throttle, Error, Module};

trait Native {
    async fn call(&self, id: u32) -> Result<u32, Error>;
}

#[async_trait::async_trait]
trait Boxed {
    async fn call(&self, id: u32) -> Result<u32, Error>;
    async fn other(&self) -> Result<(), Error>;
}

struct A;

impl Native for A {
    #[rate_limit(limit = 1, window = "1m", key = id)]
    async fn call(&self, id: u32) -> Result<u32, Error> {
        Ok(id)
    }
}

#[throttle(1)]
#[async_trait::async_trait]
impl Boxed for A {
    async fn call(&self, id: u32) -> Result<u32, Error> {
        Ok(id)
    }

    #[skip_throttle]
    async fn other(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    let module = TestModule::new(Module::builder()).unwrap();
    futures::executor::block_on(module.scope(async {
        assert_eq!(Native::call(&A, 1).await.unwrap(), 1);
        assert!(Native::call(&A, 1).await.is_err());
        let boxed: &(dyn Boxed + Sync) = &A;
        assert_eq!(boxed.call(1).await.unwrap(), 1);
        assert!(boxed.call(2).await.is_err());
        boxed.other().await.unwrap();
        boxed.other().await.unwrap();
    }));
}
