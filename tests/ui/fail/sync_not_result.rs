use ratelimit::{rate_limit, throttle};

#[rate_limit(limit = 1, window = "1s")]
fn returns_a_number() -> u32 {
    1
}

#[throttle(1)]
fn returns_nothing() {}

fn main() {}
