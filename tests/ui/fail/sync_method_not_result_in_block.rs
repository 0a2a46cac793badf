// In an annotated impl block, a sync method that returns something other than nothing or
// `Self` is limited whatever its return type is called; one that cannot carry the refusal is
// an error saying so, never silently unlimited.
use ratelimit::{throttle, Error};

struct S {
    name: String,
}

// An error type without `From<ratelimit::Error>` (a `std` one's error lists the `From` impls
// of every crate built, which differ by features: the expected text would too).
struct ReadError;

#[throttle(1)]
impl S {
    fn name(&self) -> &str {
        &self.name
    }

    fn count(&self) -> u32 {
        1
    }

    fn read(&self) -> Result<u32, ReadError> {
        Ok(1)
    }

    fn fallible() -> Option<Self> {
        None
    }

    const fn len(&self) -> usize {
        0
    }

    fn fine(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {}
