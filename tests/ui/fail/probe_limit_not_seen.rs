// A limit the attribute that ran first could not see (written under a `use .. as` alias, or
// behind `cfg_attr`, on a method of an annotated `impl` or below a fn's limit) would be
// expanded on a fn limited already: two checks one after the other, the method's own limit
// not replacing its block's. A compile error on the limit that came second.
use ratelimit::rate_limit as limit;
use ratelimit::{rate_limit, throttle, Error};

struct S;

#[throttle(1)]
impl S {
    #[limit(limit = 5, window = "1m")]
    async fn aliased(&self) -> Result<(), Error> {
        Ok(())
    }

    #[cfg_attr(all(), rate_limit(limit = 5, window = "1m"))]
    async fn behind_cfg_attr(&self) -> Result<(), Error> {
        Ok(())
    }

    #[cfg_attr(all(), throttle(5))]
    fn sync_behind_cfg_attr(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[throttle(1)]
#[limit(limit = 5, window = "1m")]
async fn below_a_limit() -> Result<(), Error> {
    Ok(())
}

fn main() {}
