//! Every receiver, on annotated methods and on an annotated impl block.
use std::pin::Pin;
use std::sync::Arc;

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, throttle, Error, Module};

#[derive(Clone, Default)]
struct Service {
    calls: u32,
}

impl Service {
    #[throttle(10)]
    async fn by_ref(&self) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn by_mut(&mut self) -> Result<u32, Error> {
        self.calls += 1;
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn by_value(self) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn by_mut_value(mut self) -> Result<u32, Error> {
        self.calls += 10;
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn by_arc(self: Arc<Self>) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn by_box(self: Box<Self>) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn by_pin(self: Pin<&mut Self>) -> Result<u32, Error> {
        Ok(self.calls)
    }

    #[throttle(10)]
    async fn associated(n: u32) -> Result<Self, Error> {
        Ok(Service { calls: n })
    }
}

struct Whole;

#[rate_limit(limit = 10, window = "1s", key = id)]
impl Whole {
    async fn by_ref(&self, id: u32) -> Result<u32, Error> {
        Ok(id)
    }
    async fn by_mut(&mut self, id: u32) -> Result<u32, Error> {
        Ok(id)
    }
    async fn by_arc(self: Arc<Self>, id: u32) -> Result<u32, Error> {
        Ok(id)
    }
    async fn by_value(self, id: u32) -> Result<u32, Error> {
        Ok(id)
    }
}

fn main() {
    let module = TestModule::new(Module::builder()).unwrap();
    futures::executor::block_on(module.scope(async {
        let mut s = Service::associated(1).await.unwrap();
        assert_eq!(s.by_ref().await.unwrap(), 1);
        assert_eq!(s.by_mut().await.unwrap(), 2);
        assert_eq!(s.clone().by_value().await.unwrap(), 2);
        assert_eq!(s.clone().by_mut_value().await.unwrap(), 12);
        assert_eq!(Arc::new(s.clone()).by_arc().await.unwrap(), 2);
        assert_eq!(Box::new(s.clone()).by_box().await.unwrap(), 2);
        assert_eq!(Pin::new(&mut s).by_pin().await.unwrap(), 2);
        let mut w = Whole;
        assert_eq!(w.by_ref(1).await.unwrap(), 1);
        assert_eq!(w.by_mut(2).await.unwrap(), 2);
        assert_eq!(Arc::new(Whole).by_arc(3).await.unwrap(), 3);
        assert_eq!(w.by_value(4).await.unwrap(), 4);
    }));
}
