//! Options the caller does not keep: built in the call's own expression and dropped before
//! the future is awaited (E0716 while `Options` borrowed its tier), and options built once,
//! stored in a struct and moved into `'static` spawned tasks.
use ratelimit::{Config, Decision, Error, Options, RateLimitService, Tier};

struct Client {
    service: RateLimitService,
    options: Options,
}

impl Client {
    fn call(&self, key: &'static str) -> impl std::future::Future<Output = Result<Decision, Error>> + Send + 'static {
        let (service, options) = (self.service.clone(), self.options.clone());
        async move { service.consume(key, &options).await }
    }
}

fn assert_static<T: Send + Sync + 'static>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let config = Config::builder().tier(Tier::new("pro", 10).window("1m")).build()?;
    let service = RateLimitService::new(config)?;

    let pending = service.consume("k", &Options::new().tier("pro"));
    let _ = pending.await?;
    let pending = service.check("k", &Options::new().tier(String::from("pro")));
    let _ = pending.await?;
    let pending = service.enforce("k", &Options::new().tier("pro").window("1m"));
    let _ = pending.await?;
    let pending = service.status("k", &Options::new().tier("pro"));
    let _ = pending.await?;
    let pending = service.reset_with("k", &Options::new().tier("pro"));
    let _ = pending.await?;

    let client = Client { service, options: Options::new().tier("pro") };
    assert_static(&client.options);
    tokio::spawn(client.call("k")).await.expect("task")?;
    Ok(())
}
