#!/usr/bin/env bash
# What a limiter script costs inside Redis, against `return 1` and the least any correct
# limiter script must do (read Redis' TIME, read the key, write it back with an expiry).
# Server-side throughput with redis-benchmark, pipelined so the client is not the bottleneck.
# Usage: bash tests/benches/redis_script_floor.sh   (needs redis-server and redis-benchmark)
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${PORT:-6399}
dir=$(mktemp -d)
redis-server --port "$port" --save '' --appendonly no --dir "$dir" --daemonize yes \
  --pidfile "$dir/pid" >/dev/null
trap 'kill "$(cat "$dir/pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

run() { # name, script, then the script's ARGV
  local name=$1 body=$2; shift 2
  local sha
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$body")
  redis-benchmark -p "$port" -n 300000 -c 8 -P 16 -r 64 -q \
    EVALSHA "$sha" 1 "rl:-:{__rand_int__}" "$@" 2>/dev/null |
    tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | sed "s/^/$name: /"
}
lua() { cat ratelimit-core/lua/prelude.lua "ratelimit-core/lua/$1.lua"; }

run "return 1" "return 1"
run "TIME" "local t = redis.call('TIME') return 1"
run "TIME+GET+SET (floor)" \
  "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'x', 'PX', 60000) return 1"
# Every call admitted: window 60 s, capacity 1e9, cost 1, commit.
# The fixed window's hot path runs before the prelude (see scripts.rs).
run "fixed-window" "$(cat ratelimit-core/lua/fixed_window_hot.lua; lua fixed_window)" 60000000 1000000000 1 1
run "sliding-window-counter" "$(lua sliding_counter)" 60000000 1000000000 1 1
# interval 1 µs, tolerance 1e9 µs: every call admitted.
run "token-bucket" "$(lua token_bucket)" 1 1000000000 1 1
# The log keeps one member per hit: a 10 ms window keeps it short, as in the store bench.
run "sliding-window (log)" "$(lua sliding_log)" 10000 1000000000 1 1
