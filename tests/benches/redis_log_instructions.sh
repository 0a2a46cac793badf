#!/usr/bin/env bash
# The sliding log's script, counted: the instructions Redis executes inside EVALSHA per
# admitted call (valgrind's callgrind, `--toggle-collect=evalShaCommand`), for the script as
# this tree has it and as commit BEFORE had it, case by case. Exact and the same on a busy
# machine: each call's time is given (`run_now` set from a sixth argument, which replaces
# Redis' TIME in both alike), one call a `STEP` apart, so every run takes the same path
# (redis-benchmark's calls depend on how fast valgrind runs: entries live or gone by chance).
#
# Usage: bash tests/benches/redis_log_instructions.sh   (redis-server, redis-cli, valgrind, python3)
#   BEFORE=<commit>  the script to compare with (default main; empty: this tree only)
#   CALLS=n          calls per case (default 10000)
# Cases (window, step between calls, ARGV[5]): a key of one window (ARGV[5] 2) every entry
# live, its expiry moved every tenth call (`live`) or every call (`live, every ms`); one entry
# leaving the window on every call (`leaving`); the same on a bare key (ARGV[5] 0), whose
# entries name their window.
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${PORT:-6398}
calls=${CALLS:-10000}
before=${BEFORE-main}
dir=$(mktemp -d)
trap 'redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

# The single-key script as scripts.rs assembles it, with run_now from ARGV[6].
script() { # commit or "" for this tree
  echo 'local run_now = ARGV[6] + 0'
  if [ -z "$1" ]; then
    cat ratelimit-core/lua/prelude.lua ratelimit-core/src/algorithm/sliding_log.lua
  else
    git show "$1:ratelimit-core/lua/prelude.lua" "$1:ratelimit-core/src/algorithm/sliding_log.lua"
  fi
}

count() { # script file, window (µs), step (µs), ARGV[5]
  valgrind --tool=callgrind --toggle-collect=evalShaCommand --callgrind-out-file="$dir/cg" \
    redis-server --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
  local vpid=$!
  for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local sha t0
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$1")")
  t0=$((($(date +%s) + 3600) * 1000000)) # an hour ahead: no key expires during the run
  python3 - "$sha" "$t0" "$3" "$2" "$4" "$calls" >"$dir/cmds" <<'PY'
import sys
sha, t0, step, window, bits, calls = sys.argv[1:]
for i in range(int(calls)):
    args = ['EVALSHA', sha, '1', 'rl:log', window, '1000000000', '1', '1', bits,
            str(int(t0) + i * int(step))]
    sys.stdout.write('*%d\r\n' % len(args) + ''.join('$%d\r\n%s\r\n' % (len(a), a) for a in args))
PY
  redis-cli -p "$port" --pipe <"$dir/cmds" >/dev/null
  local failed
  failed=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha:' |
    sed 's/.*failed_calls=\([0-9]*\).*/\1/')
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$vpid" || true
  [ "$failed" = 0 ] || { echo "$failed calls failed" >&2; exit 1; }
  echo $(($(grep -m1 '^summary:' "$dir/cg" | awk '{print $2}') / calls))
}

script "" >"$dir/after.lua"
[ -n "$before" ] && script "$before" >"$dir/before.lua"
echo "| case | ${before:+before ($before) | }this tree |"
echo "|---|${before:+---:|}---:|"
while read -r name window step bits; do
  row="| ${name//_/ } |"
  [ -n "$before" ] && row="$row $(count "$dir/before.lua" "$window" "$step" "$bits") |"
  echo "$row $(count "$dir/after.lua" "$window" "$step" "$bits") |"
done <<'CASES'
one_window,_live 60000000 100 2
one_window,_live,_every_ms 60000000 1000 2
one_window,_leaving 3500 1000 2
bare_key,_live 60000000 100 0
bare_key,_leaving 3500 1000 0
CASES
