use ratelimit::rate_limit;

struct Outcome;

// A refusal cannot travel as this type, and there is no failure to count by.
#[rate_limit(limit = 5, window = "15m", count = "err")]
async fn login() -> Outcome {
    Outcome
}

fn main() {}
