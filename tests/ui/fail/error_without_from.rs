use ratelimit::rate_limit;

#[derive(Debug)]
struct AppError;

#[rate_limit(limit = 1, window = "1s")]
async fn f() -> Result<(), AppError> {
    Ok(())
}

fn main() {}
