use std::future::Future;
use std::pin::Pin;

use futures::future::BoxFuture;
use ratelimit::{rate_limit, Error};

struct S;

// Methods that hand back a future without being `async` would run unlimited.
#[rate_limit(limit = 1, window = "1s")]
impl S {
    fn ready(&self) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }

    fn pinned(&self) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + '_>> {
        Box::pin(async { Ok(()) })
    }

    fn aliased(&self) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    // Fine: no future, and returns nothing: not limited.
    fn plain(&self) {}

    // Fine: exempted by hand.
    #[skip_throttle]
    fn exempt(&self) -> impl Future<Output = ()> {
        async {}
    }
}

fn main() {
    let s = S;
    let _ = (s.ready(), s.pinned(), s.aliased(), s.plain(), s.exempt());
}
