//! Compile-time behaviour of the macros: what must compile (`ui/pass`) and what must not, with
//! each error spanned on the offending token (`ui/fail/*.stderr`; regenerate with
//! `TRYBUILD=overwrite cargo test -p ratelimit-tests --test ui`, then read the diff).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
