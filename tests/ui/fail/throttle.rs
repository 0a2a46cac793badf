use ratelimit::{throttle, Error};

#[throttle(0)]
async fn zero() -> Result<(), Error> {
    Ok(())
}

#[throttle(5, "fortnight")]
async fn bad_unit() -> Result<(), Error> {
    Ok(())
}

#[throttle]
async fn no_rate() -> Result<(), Error> {
    Ok(())
}

#[throttle(5, window = "1m")]
async fn window_twice() -> Result<(), Error> {
    Ok(())
}

fn main() {}
