#!/bin/bash
# Playback cost of the replay viewer, from the repo root, after
# `cargo build --release -p migratory-replay`:
#   net/bench/replay_states.sh REC.mrec [FROM_TICK ...]
# Serves REC with `migratory-replay view`, waits for the background marker scan to finish,
# then at each FROM tick (default: four spread over the first minute) seeks there and
# times one /replay/states window of the next 120 ticks, one tick apart: what 2 s of 1x
# playback asks. Prints each window's time and its cost per tick (curl's total time:
# stepping, encoding every entity and HTTP). BIN=DIR takes migratory-replay from DIR. Needs
# curl and python3.
set -euo pipefail
REC=${1:?usage: net/bench/replay_states.sh REC.mrec [FROM_TICK ...]}; shift
FROMS=("${@:-700 1500 2300 3100}")
BIN=${BIN:-target/release}
W=$(mktemp -d)
"$BIN/migratory-replay" view "$REC" --listen 127.0.0.1:0 > "$W/out.txt" 2> "$W/err.txt" &
VP=$!
trap 'kill $VP 2>/dev/null; wait $VP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 600); do grep -q viewing "$W/out.txt" && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$W/out.txt" | sed 's:/$::')
for _ in $(seq 3000); do
  curl -s "$URL/replay/markers" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["complete"] else 1)' && break
  sleep 0.5
done
for from in ${FROMS[@]}; do
  curl -s -o /dev/null "$URL/replay/state?tick=$from"
  curl -s -o /dev/null -w "%{time_total}\n" "$URL/replay/states?from=$((from + 1))&count=120&stride=1"
done | awk '{printf "window of 120 ticks: %.1f ms (%.2f ms a tick)\n", $1 * 1000, $1 * 1000 / 120}'
