use ratelimit::{rate_limit, Error};

struct UserId(u64);

#[rate_limit(limit = 1, window = "1s", key = id)]
async fn f(id: UserId) -> Result<u64, Error> {
    Ok(id.0)
}

fn main() {}
