//! In annotated trait impls, constructors returning a `Self` that is no `Result` stay exempt
//! (the compile-time check the expansion adds passes, under strict lints), a blanket impl's
//! one is exempt by its mark, and a macro call marked `#[skip_throttle]` is left alone.
#![deny(
    warnings,
    unused,
    unused_qualifications,
    unused_results,
    non_camel_case_types,
    non_upper_case_globals,
    rust_2018_idioms
)]

use ratelimit::testing::TestModule;
use ratelimit::{throttle, Error, Module};

trait Make: Sized {
    fn make() -> Self;
    fn fetch(&self) -> Result<u8, Error>;
}

struct Plain;

#[throttle(1)]
impl Make for Plain {
    fn make() -> Self {
        Plain
    }

    fn fetch(&self) -> Result<u8, Error> {
        Ok(1)
    }
}

struct Generic<T>(T);

#[throttle(1)]
impl<T: Default> Make for Generic<T> {
    fn make() -> Self {
        Generic(T::default())
    }

    fn fetch(&self) -> Result<u8, Error> {
        Ok(2)
    }
}

#[throttle(1)]
impl<'a> Make for &'a str {
    fn make() -> Self {
        ""
    }

    fn fetch(&self) -> Result<u8, Error> {
        Ok(3)
    }
}

trait Blanket: Sized {
    fn build() -> Self;
}

#[throttle(1)]
impl<T: Default> Blanket for T {
    #[skip_throttle]
    fn build() -> Self {
        T::default()
    }
}

macro_rules! getter {
    () => {
        fn count(&self) -> u8 {
            4
        }
    };
}

#[throttle(1)]
impl Plain {
    #[skip_throttle]
    getter!();
}

fn main() {
    let module = TestModule::new(Module::builder()).unwrap();
    module.run(|| {
        let (plain, generic, text) = (Plain::make(), Generic::<u8>::make(), <&str>::make());
        assert_eq!(plain.fetch().unwrap(), 1);
        assert!(plain.fetch().is_err());
        assert_eq!(generic.fetch().unwrap(), 2);
        assert_eq!(text.fetch().unwrap(), 3);
        assert_eq!(<u8 as Blanket>::build(), 0);
        assert_eq!(plain.count(), 4);
    });
}
