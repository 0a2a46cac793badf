//! Examples live beside this file; run `cargo run --example quickstart`.
