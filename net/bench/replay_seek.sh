#!/bin/bash
# Seek figures of the replay viewer, from the repo root, after
# `cargo build --release -p migratory-server -p migratory-fleet -p migratory-bots -p migratory-replay`:
#   net/bench/replay_seek.sh [REC.mrec]
# Without REC it synthesises one hour of the default world (5,000 boids, 32 scripted
# players, 216,000 ticks, a checkpoint every 600 ticks) into a temp folder first. Then it
# serves the recording with `migratory-replay view` and times 20 seeks to far-apart ticks
# (curl's total time for /replay/state?tick=T, the whole world's entities at T), first
# while the background marker scan is still stepping the recording (both cores busy), then
# 20 more after the scan finished; and the time the marker scan took. Needs curl, python3.
set -euo pipefail
BIN=${BIN:-target/release}
W=$(mktemp -d)
REC=${1:-}
if [ -z "$REC" ]; then
  REC="$W/hour.mrec"
  "$BIN/migratory-replay" synth -o "$REC" --seed 1 --ticks 216000 --clients 32 --boids 5000 >&2
fi
"$BIN/migratory-replay" view "$REC" --listen 127.0.0.1:0 > "$W/out.txt" 2> "$W/err.txt" &
VP=$!
trap 'kill $VP 2>/dev/null; wait $VP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 600); do grep -q viewing "$W/out.txt" && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$W/out.txt" | sed 's:/$::')
START=$(date +%s.%N)
LAST=$(curl -s "$URL/replay/info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["last_tick"])')
seek_ms() { curl -s -o /dev/null -w '%{time_total}' "$URL/replay/state?tick=$1" | awk '{printf "%.0f", $1*1000}'; }
# 20 ticks spread over the recording, in a scrambled order so every seek goes far.
ticks() { python3 -c "import sys; n=int(sys.argv[1]); print(' '.join(str((k*7919 % 20) * n // 20 + 299) for k in range(20)))" "$LAST"; }
stats() { sort -n | awk '{a[NR]=$1} END {printf "median %d ms, max %d ms (n=%d)\n", a[int((NR+1)/2)], a[NR], NR}'; }
echo "recording: $REC ($(stat -c %s "$REC") bytes, last tick $LAST)"
printf 'seeks during the marker scan: '
for t in $(ticks); do seek_ms "$t"; echo; done | stats
for _ in $(seq 3000); do
  curl -s "$URL/replay/markers" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["complete"] else 1)' && break
  sleep 0.5
done
echo "marker scan: $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$START" "$(date +%s.%N)") s to complete"
printf 'seeks after it: '
for t in $(ticks); do seek_ms "$t"; echo; done | stats
