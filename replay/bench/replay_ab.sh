#!/bin/bash
# Two builds of migratory-replay timed side by side, from the repo root:
#   replay/bench/replay_ab.sh BEFORE AFTER [ROUNDS] [RECORDING] [SHARDS]
# Each round runs `run RECORDING --shards SHARDS` of both binaries at the same time, one
# on each of the first two CPUs, and swaps the CPUs the next round; it prints the median
# ticks/s of each and their ratio (AFTER / BEFORE). Run at the same time, the two see the
# same moments of a shared machine: two identical binaries came out 1.005 apart over 10
# rounds, where runs taken one after the other differed by up to 20 % within minutes.
# Defaults: 12 rounds, corpora/default.mrec, 1 shard. Opt-in; needs two CPUs and taskset.
set -euo pipefail
A=${1:?usage: replay/bench/replay_ab.sh BEFORE AFTER [ROUNDS] [RECORDING] [SHARDS]}
B=${2:?after binary}
ROUNDS=${3:-12}
REC=${4:-corpora/default.mrec}
SHARDS=${5:-1}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ticks_per_s() { grep -o '"ticks_per_s": *[0-9.e+-]*' | sed 's/.*: *//'; }
for i in $(seq "$ROUNDS"); do
  ca=$((i % 2)); cb=$(((i + 1) % 2))
  taskset -c $ca "$A" run "$REC" --shards "$SHARDS" --json | ticks_per_s >> "$OUT/a" &
  taskset -c $cb "$B" run "$REC" --shards "$SHARDS" --json | ticks_per_s >> "$OUT/b" &
  wait
done
median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
MA=$(median "$OUT/a"); MB=$(median "$OUT/b")
awk -v a="$MA" -v b="$MB" -v n="$ROUNDS" 'BEGIN {
  printf "before %.0f ticks/s, after %.0f ticks/s (medians of %d rounds): after / before %.3f\n", a, b, n, b / a
}'
