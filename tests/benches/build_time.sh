#!/usr/bin/env bash
# Build time of a user crate with one rate-limited fn, against the same crate limited with
# governor: a clean build of each (its whole dependency tree, in a target dir of its own),
# debug and release, ROUNDS times alternately; prints every run and the medians.
#
#   bash tests/benches/build_time.sh            # ROUNDS=3 by default
#   ROUNDS=5 JOBS=2 bash tests/benches/build_time.sh
#
# Needs the registry's crates already downloaded (run the workspace's build once first).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-2}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

mkdir -p "$WORK/ours/src" "$WORK/governor/src"
cat >"$WORK/ours/Cargo.toml" <<EOF
[package]
name = "one-fn-ratelimit"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
ratelimit = { path = "$ROOT/ratelimit" }
tokio = { version = "1", features = ["rt", "macros"] }

[workspace]
EOF
cat >"$WORK/ours/src/main.rs" <<'EOF'
use ratelimit::{rate_limit, Error, Module};

#[rate_limit(limit = 10, window = "1m", key = user)]
async fn charge(user: &str) -> Result<u64, Error> {
    Ok(user.len() as u64)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let _module = Module::builder().init()?;
    println!("{}", charge("user:1").await?);
    Ok(())
}
EOF
cat >"$WORK/governor/Cargo.toml" <<EOF
[package]
name = "one-fn-governor"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
governor = "0.8"
tokio = { version = "1", features = ["rt", "macros"] }

[workspace]
EOF
cat >"$WORK/governor/src/main.rs" <<'EOF'
use std::num::NonZeroU32;
use std::sync::OnceLock;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

fn limiter() -> &'static DefaultKeyedRateLimiter<String> {
    static LIMITER: OnceLock<DefaultKeyedRateLimiter<String>> = OnceLock::new();
    LIMITER.get_or_init(|| RateLimiter::keyed(Quota::per_minute(NonZeroU32::new(10).unwrap())))
}

async fn charge(user: &str) -> Result<u64, String> {
    limiter()
        .check_key(&user.to_owned())
        .map_err(|_| "rate limited".to_owned())?;
    Ok(user.len() as u64)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    println!("{}", charge("user:1").await?);
    Ok(())
}
EOF

# Seconds of one clean build of crate $1 in profile $2.
build() {
  local dir="$WORK/$1" profile=$2 flag=""
  [ "$profile" = release ] && flag=--release
  rm -rf "$dir/target"
  local start end
  start=$(date +%s.%N)
  (cd "$dir" && CARGO_BUILD_JOBS=$JOBS cargo build --offline -q $flag)
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# A first build of each, not counted: the lock files resolved, the sources unpacked.
build ours debug >/dev/null
build governor debug >/dev/null
for profile in debug release; do
  : >"$WORK/$profile.ours"
  : >"$WORK/$profile.governor"
  for round in $(seq "$ROUNDS"); do
    o=$(build ours "$profile")
    g=$(build governor "$profile")
    echo "$profile round $round: ratelimit ${o}s, governor ${g}s"
    echo "$o" >>"$WORK/$profile.ours"
    echo "$g" >>"$WORK/$profile.governor"
  done
  o=$(median <"$WORK/$profile.ours")
  g=$(median <"$WORK/$profile.governor")
  echo "$profile median: ratelimit ${o}s, governor ${g}s, ratio $(echo "scale=2; $o / $g" | bc)"
done
