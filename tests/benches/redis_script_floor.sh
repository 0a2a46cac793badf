#!/usr/bin/env bash
# What a limiter script costs inside Redis, against `return 1`, the least any correct limiter
# script must do (read Redis' TIME, read the key, write it back with an expiry) and the peers'
# scripts (tests/benches/peers/, when present). One key, every call admitted, pipelined with
# redis-benchmark so that the client is not the bottleneck.
#
# Usage: bash tests/benches/redis_script_floor.sh   (needs redis-server and redis-benchmark)
#   REPS=n      rounds, interleaved (default 5); each line gives the median and the range
#   CALLS=n     calls per variant and round (default 200000)
#   MODE=instructions   instead of Redis' own `usec_per_call` (INFO commandstats), count the
#               instructions Redis executes inside EVALSHA per call, under valgrind's callgrind
#               (`--toggle-collect=evalShaCommand`): exact, and the same on a busy machine.
#               CALLS defaults to 20000 there; one server per variant and round, with every
#               script below loaded, as a store and the peers would have them.
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${PORT:-6399}
reps=${REPS:-5}
mode=${MODE:-usec}
if [ "$mode" = instructions ]; then calls=${CALLS:-20000}; else calls=${CALLS:-200000}; fi
dir=$(mktemp -d)
trap 'kill "$(cat "$dir/pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT

# As scripts.rs assembles a single-key script: `run_now` (prelude.lua) declared in front.
lua() { echo "local run_now"; cat ratelimit-core/lua/prelude.lua "ratelimit-core/src/algorithm/$1.lua"; }
# The fixed window's hot path as scripts.rs assembles it (Hot::source): its first line names
# the capacity, window (ms) and cost, written in (a quota's own script) or from ARGV (the
# shared one); the second increments the key.
hot() { # quota line, increment line
  printf 'local capacity, window, cost = %s\nlocal count = %s\n' "$1" "$2"
  cat ratelimit-core/lua/fixed_window_hot.lua
  echo "local function fixed_window(KEYS, ARGV, fell)"
  lua fixed_window
  printf '\nend\n'
  echo "return fixed_window(KEYS, {string.format('%d000', window), string.format('%d', capacity), string.format('%d', cost), '0', '1'}, true)"
}

# name, script, then the script's ARGV. Every call admitted: capacity 1e9, window 60 s.
names=() bodies=() argvs=()
variant() { names+=("$1"); bodies+=("$2"); shift 2; argvs+=("$*"); }
variant "return 1" "return 1"
variant "TIME" "local t = redis.call('TIME') return 1"
variant "TIME+GET+SET (floor)" \
  "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'x', 'PX', 60000) return 1"
variant "fixed-window hot, own script, cost 1" \
  "$(hot "1000000000, 60000, 1" "redis.pcall('INCR', KEYS[1])")"
variant "fixed-window hot, own script, cost 5" \
  "$(hot "1000000000, 60000, ARGV[1] + 0" "redis.pcall('INCRBY', KEYS[1], ARGV[1])")" 5
variant "fixed-window hot, shared script, cost 1" \
  "$(hot "ARGV[1] + 0, ARGV[2], 1" "redis.pcall('INCR', KEYS[1])")" 1000000000 60000
variant "fixed-window hot, shared script, cost 5" \
  "$(hot "ARGV[1] + 0, ARGV[2], ARGV[3] + 0" "redis.pcall('INCRBY', KEYS[1], ARGV[3])")" 1000000000 60000 5
variant "fixed-window full" "$(echo 'local fell'; lua fixed_window)" 60000000 1000000000 1 1 1
variant "sliding-window-counter" "$(lua sliding_counter)" 60000000 1000000000 1 1
# interval 1 µs, tolerance 1e9 µs: every call admitted.
variant "token-bucket" "$(lua token_bucket)" 1 1000000000 1 1
# The log keeps one member per hit: a 10 ms window keeps it short, as in the store bench.
variant "sliding-window (log)" "$(lua sliding_log)" 10000 1000000000 1 1
peers=tests/benches/peers
# Called as alisaifee/limits calls it: the expiry in seconds.
[ -f $peers/limits_incr_expire.lua ] && variant "peer: limits incr_expire" "$(cat $peers/limits_incr_expire.lua)" 60

start() { # extra redis-server arguments...
  rm -f "$dir/pid"
  "$@" redis-server --port "$port" --save '' --appendonly no --dir "$dir" --pidfile "$dir/pid" \
    >"$dir/log" 2>&1 &
  for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  for b in "${bodies[@]}"; do redis-cli -p "$port" SCRIPT LOAD "$b" >/dev/null; done
}
bench() { # index
  local sha
  sha=$(redis-cli -p "$port" SCRIPT LOAD "${bodies[$1]}")
  redis-cli -p "$port" DEL rl:floor >/dev/null
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
  # shellcheck disable=SC2086
  redis-benchmark -p "$port" -n "$calls" -c 8 -P 16 -q EVALSHA "$sha" 1 rl:floor ${argvs[$1]} \
    >/dev/null 2>&1
  local failed
  failed=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha:' |
    sed 's/.*failed_calls=\([0-9]*\).*/\1/')
  [ "$failed" = 0 ] || { echo "${names[$1]}: $failed calls failed" >&2; exit 1; }
}
usec() {
  redis-cli -p "$port" INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha:' |
    sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
}

results=()
if [ "$mode" = usec ]; then start; fi
for round in $(seq "$reps"); do
  order=$(seq 0 $((${#names[@]} - 1)))
  [ $((round % 2)) = 0 ] && order=$(echo "$order" | tac)
  for i in $order; do
    if [ "$mode" = instructions ]; then
      start valgrind --tool=callgrind --toggle-collect=evalShaCommand \
        --callgrind-out-file="$dir/callgrind"
      bench "$i"
      redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
      wait
      ir=$(grep -m1 '^summary:' "$dir/callgrind" | awk '{print $2}')
      results+=("$i $((ir / calls))")
    else
      bench "$i"
      results+=("$i $(usec)")
    fi
  done
done
unit=$([ "$mode" = instructions ] && echo "instructions per EVALSHA" || echo "µs per EVALSHA")
echo "| script | median $unit | min | max | rounds |"
echo "|---|---:|---:|---:|---:|"
for i in "${!names[@]}"; do
  printf '%s\n' "${results[@]}" | awk -v i="$i" '$1 == i {print $2}' | sort -g |
    awk -v name="${names[$i]}" '{v[NR] = $1} END {
      printf "| %s | %s | %s | %s | %d |\n", name, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
done
