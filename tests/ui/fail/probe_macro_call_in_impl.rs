// A macro call among the items of an annotated `impl` block writes its methods after the
// block's attribute has run: the limit would never reach them. An error on the call, unless
// it is marked `#[skip_throttle]`; a limit on the call itself is an error too.
use ratelimit::{throttle, Error};

macro_rules! method {
    ($name:ident) => {
        async fn $name(&self) -> Result<(), Error> {
            Ok(())
        }
    };
}

struct S;

#[throttle(1)]
impl S {
    method!(unseen);

    #[throttle(2)]
    method!(limited_call);

    #[skip_throttle]
    #[skip_throttle]
    method!(skipped_twice);

    #[skip_throttle]
    method!(exempt);

    async fn seen(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {}
