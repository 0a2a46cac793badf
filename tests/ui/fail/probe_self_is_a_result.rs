// In an annotated trait impl, a sync method returning `Self` is exempt as a constructor; but
// `Self` may be a `Result` (the impl's type, or an alias of one), which would leave a `Result`
// by another name unlimited: a compile error on `Self`. Where `Self` is a type parameter (any
// type a caller picks), the method is limited, and `T` cannot carry the refusal.
use ratelimit::{throttle, Error};

trait Make: Sized {
    fn make() -> Self;
}

#[throttle(1)]
impl Make for Result<u8, Error> {
    fn make() -> Self {
        Ok(1)
    }
}

type Answer = Result<u16, Error>;

#[throttle(1)]
impl Make for Answer {
    fn make() -> Self {
        Ok(2)
    }
}

struct Mine;

#[throttle(1)]
impl<T: Default> Make for (T, Mine) {
    fn make() -> Self {
        (T::default(), Mine) // a tuple is no `Result`: exempt, compiles
    }
}

trait Blanket: Sized {
    fn make() -> Self;
}

#[throttle(1)]
impl<T: Default> Blanket for T {
    fn make() -> Self {
        T::default()
    }
}

fn main() {}
