//! Attribute macros for `ratelimit`. The macros arrive with the registry; this crate is the
//! place they will live.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
