#!/bin/bash
# The planted-fault table, from the repo root:
#   replay/bench/planted.sh [TRIALS] [SECONDS]
# Builds migratory-replay with the kernel's planted determinism bugs (feature
# planted-faults, in target/planted so the ordinary builds stay untouched), then for each
# kind runs `sim --plant KIND` TRIALS times (default 10) from fresh seeds, each for at
# most SECONDS (default 60) and stopping at its first failure, and prints one markdown
# row per kind: how many runs found it, how fast (median and slowest), and by which
# oracle. Five kinds run on the release build; debug-wrap (an add that only overflow
# checks catch) runs on the debug build, as CI's sim step does.
set -euo pipefail
TRIALS=${1:-10}
SECONDS_MAX=${2:-60}
T=target/planted
cargo build -q --release -p migratory-replay --features planted-faults --target-dir $T
cargo build -q -p migratory-replay --features planted-faults --target-dir $T
echo "| fault | found within $SECONDS_MAX s | median s | slowest s | found by |"
echo "|---|---|---|---|---|"
# A kind missed by some run exits 1; the row says so, and the table goes on.
for kind in shard-order hash-tie checkpoint-field stale-scratch stale-baseline; do
  $T/release/migratory-replay sim --plant $kind --trials "$TRIALS" --seconds "$SECONDS_MAX" --failures-dir "$T" | tail -1 || true
done
$T/debug/migratory-replay sim --plant debug-wrap --trials "$TRIALS" --seconds "$SECONDS_MAX" --failures-dir "$T" | tail -1 || true
