use ratelimit::{Options, RateLimitService};

// A spend is given back at most once: `refund` takes the `Spent`.
async fn twice(service: &RateLimitService) -> Result<(), ratelimit::Error> {
    let spent = service.spend("user", &Options::new()).await?;
    spent.refund().await?;
    spent.refund().await?;
    Ok(())
}

fn main() {}
