use ratelimit::{skip_throttle, Error};

#[skip_throttle]
async fn free() -> Result<(), Error> {
    Ok(())
}

struct S;

impl S {
    #[skip_throttle]
    async fn method(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {}
