#!/usr/bin/env bash
# The locked instructions (`lock`-prefixed, `xchg` with memory, `mfence`) one call of each
# `hot_path` variant executes: each is a full barrier and an exclusive hold on its cache line,
# the steps of a call that cost more than their instruction count says. Counted exactly, by
# callgrind at instruction level: `RL_CALLS` calls and twice as many (`RL_IR`, the bench's
# one-variant mode), the difference per call, at the addresses `objdump` shows locked.
#
#   bash tests/benches/locked_ops.sh                       # the default variants below
#   VARIANTS="annotated token-bucket" bash tests/benches/locked_ops.sh
#
# Needs valgrind and objdump (binutils). `RL_IR` picks the first variant whose name contains
# the text: name one exactly enough.
set -euo pipefail

CALLS=${CALLS:-20000}
VARIANTS=${VARIANTS:-"governor check_key(String)|store token-bucket, annotated key|prepared.consume_now token-bucket|annotated token-bucket|annotated sync fn token-bucket|service.consume token-bucket"}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

bin=$(cargo bench -p ratelimit-tests --bench hot_path --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*hot_path[^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bin" ] || { echo "hot_path bench binary not found" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Hex to a number, in any awk (mawk has no `strtonum`).
HEX='function hex(s,    i, n) { n = 0; s = tolower(s); sub(/^0x/, "", s)
  for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
  return n }'
# Locked instructions by address: `lock` prefixes, `xchg` on memory (implicitly locked;
# `xchg %ax,%ax` is a no-op), `mfence`.
objdump -d -C --no-show-raw-insn "$bin" |
  awk "$HEX"'
    /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<") + 1); fn = substr(fn, 1, length(fn) - 2) }
    /^ *[0-9a-f]+:/ && (/\tlock / || (/\txchg / && /\(/) || /\tmfence/) {
      a = $1; sub(":", "", a); $1 = ""; sub(/^ +/, "")
      print hex(a) "\t" sprintf("%-28s in %s", $0, substr(fn, 1, 90)) }' >"$work/locked"

# Instructions executed per address in a callgrind file (`--dump-instr=yes`): addresses are
# absolute (0x..), relative (+n, -n) or the same (*); the cost line after `calls=` is the
# call's inclusive cost, not the address's own.
per_address() {
  awk "$HEX"'
    /^calls=/ { skip = 1; next }
    /^(0x[0-9a-f]+|[+-][0-9]+|\*) / {
      a = $1
      if (a ~ /^0x/) addr = hex(a)
      else if (a ~ /^\+/) addr += substr(a, 2) + 0
      else if (a ~ /^-/) addr -= substr(a, 2) + 0
      if (skip) { skip = 0; next }
      cost[addr] += $NF
    }
    END { for (a in cost) printf "%d\t%d\n", a, cost[a] }' "$1"
}

IFS='|' read -r -a variants <<<"$VARIANTS"
for v in "${variants[@]}"; do
  for n in "$CALLS" $((2 * CALLS)); do
    RL_IR="$v" RL_CALLS=$n valgrind --tool=callgrind --dump-instr=yes \
      --callgrind-out-file="$work/cg.$n" "$bin" --bench >/dev/null 2>&1
    per_address "$work/cg.$n" >"$work/ir.$n"
  done
  awk -F'\t' -v calls="$CALLS" -v name="$v" '
    FILENAME == ARGV[1] { locked[$1] = $2; next }
    FILENAME == ARGV[2] { once[$1] = $2; next }
    ($1 in locked) { d = ($2 - once[$1]) / calls; if (d >= 0.5) { n += d; list = list sprintf("\n    %5.2f  %s", d, locked[$1]) } }
    END { printf "%-40s %5.2f locked a call%s\n", name, n, list }
  ' "$work/locked" "$work/ir.$CALLS" "$work/ir.$((2 * CALLS))"
done
