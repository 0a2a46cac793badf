#!/usr/bin/env bash
# `hot_path` in several processes: one process can run a path 40% slower than the next, by
# where its address layout put things (BENCHMARKS.md, `hot_path`: "one process is not one
# figure"), so a figure is the median over processes. Runs one group PROCESSES times and
# prints, per variant, the median over processes of its ns/call and of its ratio to governor
# (and to governor keyed by a string, where the group runs it),
# then every process's ratios.
#
#   bash tests/benches/hot_path_processes.sh                  # PROCESSES=5 GROUP=one ROUNDS=8
#   PROCESSES=7 GROUP=threads ROUNDS=6 bash tests/benches/hot_path_processes.sh
#
# Any other `RL_*` variable (`RL_ONLY`, `RL_CALLS`, `RL_KEYS`) is passed on to each process.
# Every group but `tasks` (whose lines are per decision and per second) is read.
set -euo pipefail

PROCESSES=${PROCESSES:-5}
GROUP=${GROUP:-one}
ROUNDS=${ROUNDS:-8}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

bin=$(cargo bench -p ratelimit-tests --bench hot_path --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*hot_path[^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bin" ] || { echo "hot_path bench binary not found" >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for p in $(seq 1 "$PROCESSES"); do
  # A variant's line: its name, then "<ns> ns/call <ratio>x governor [..]", then in the
  # groups that run governor keyed by a string "<ratio>x String" (and more).
  RL_GROUP=$GROUP RL_ROUNDS=$ROUNDS "$bin" --bench |
    sed -n -e 's/^  \(.*[^ ]\) \{2,\}\([0-9.]*\) ns\/call \{2,\}\([0-9.]*\)x governor \[[^]]*\] *\([0-9.]*\)x String.*/\1|\2|\3|\4/p' \
      -e t -e 's/^  \(.*[^ ]\) \{2,\}\([0-9.]*\) ns\/call \{2,\}\([0-9.]*\)x governor.*/\1|\2|\3|/p' |
    sed "s/^/$p|/" >>"$out"
done

echo "$GROUP: $PROCESSES processes of $ROUNDS rounds; median over processes [each process]"
awk -F'|' '
  { if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 }
    ns[$2] = ns[$2] " " $3; ratio[$2] = ratio[$2] " " $4; if ($5 != "") string[$2] = string[$2] " " $5 }
  function median(list,    a, k, i, j, t) {
    k = split(list, a, " ")
    for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return a[int((k + 1) / 2)]
  }
  END {
    for (i = 1; i <= n; i++) {
      v = order[i]
      over = (v in string) ? sprintf("  %5.2fx String", median(string[v])) : ""
      printf "  %-44s %8.1f ns/call  %5.2fx governor%s  [%s ]\n", v, median(ns[v]), median(ratio[v]), over, ratio[v]
    }
  }' "$out"
