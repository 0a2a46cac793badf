//! Generics, where-clauses, lifetimes and `impl Trait` arguments survive the rewrite.
use std::fmt::Display;

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, Error, Module};

#[rate_limit(limit = 10, window = "1m", key = key)]
async fn generic<'a, K, V>(key: &'a K, value: V) -> Result<(&'a K, V), Error>
where
    K: Display + ?Sized + Sync,
    V: Clone + Send,
{
    Ok((key, value))
}

#[rate_limit(limit = 10, window = "1m", key = item)]
async fn with_impl_trait(item: impl Display + Send + Sync, count: usize) -> Result<String, Error> {
    Ok(item.to_string().repeat(count))
}

struct Wrapper<T>(T);

#[rate_limit(limit = 10, window = "1m")]
impl<T: Clone + Send + Sync> Wrapper<T> {
    async fn get(&self) -> Result<T, Error> {
        Ok(self.0.clone())
    }

    async fn map<U, F>(&self, f: F) -> Result<U, Error>
    where
        F: FnOnce(T) -> U + Send,
    {
        Ok(f(self.0.clone()))
    }
}

fn main() {
    let module = TestModule::new(Module::builder()).unwrap();
    futures::executor::block_on(module.scope(async {
        assert_eq!(generic("a", 1u8).await.unwrap(), ("a", 1));
        assert_eq!(generic(&5u32, vec![1]).await.unwrap(), (&5, vec![1]));
        assert_eq!(with_impl_trait('x', 3).await.unwrap(), "xxx");
        let w = Wrapper(String::from("w"));
        assert_eq!(w.get().await.unwrap(), "w");
        assert_eq!(w.map(|s| s.len()).await.unwrap(), 1);
    }));
}
