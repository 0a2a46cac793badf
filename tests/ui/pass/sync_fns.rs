// Sync fns are limited where they return a `Result`: a free fn, a method, an impl block's
// methods (whatever their `Result` is called; those returning nothing or `Self` are left
// alone, a getter says `#[skip_throttle]`), under strict lints; with a library's own limiter
// too.
#![deny(warnings, unused_qualifications)]

use ratelimit::{rate_limit, throttle, Error, Limiter};

pub static LIMITS: Limiter = Limiter::new();

#[rate_limit(limit = 1)]
fn blocking() -> Result<(), Error> {
    Ok(())
}

#[throttle(2, limiter = LIMITS, key = id)]
pub fn owned(id: u32) -> Result<u32, Error> {
    Ok(id)
}

mod fs {
    pub type Result<T> = core::result::Result<T, ratelimit::Error>;
    pub type FsResult<T, E = ratelimit::Error> = core::result::Result<T, E>;
    pub use core::result::Result as Res;
}

struct Files;

#[throttle(5, limiter = crate::LIMITS)]
impl Files {
    fn new() -> Self {
        Files
    }

    fn read(&self, path: &str) -> Result<usize, Error> {
        Ok(path.len())
    }

    fn stat(&self) -> fs::FsResult<u64> {
        Ok(0)
    }

    fn open(&self) -> fs::Res<(), Error> {
        Ok(())
    }

    fn close(&mut self) {}

    #[skip_throttle]
    fn root(&self) -> &'static str {
        "/"
    }

    #[rate_limit(limit = 1, window = "1s")]
    fn remove(&mut self) -> fs::Result<()> {
        Ok(())
    }

    async fn sync_all(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    let mut files = Files::new();
    let _ = (blocking(), owned(1), files.read("a"), files.remove(), files.sync_all());
    let _ = (files.stat(), files.open(), files.root());
    files.close();
}
