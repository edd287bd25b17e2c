#!/bin/bash
# Replay viewer playback and seeks (opt-in benchmark), from the repo root, after
# `cargo build --release -p migratory-replay` and `npm ci --prefix net/view/web`:
#   net/bench/replay_playback.sh [REC.mrec] [SECONDS] [SEEKS]
# Serves the recording (default corpora/default.mrec: 5,000 boids, 32 players, 1,800
# ticks at 60 Hz) with `migratory-replay view` and runs net/view/web/bench/playback.mjs in
# Debian's headless Chromium (software rendering) on the same machine: seek p50/p95 once
# the marker scan is done, and distinct states per second at 1x, 4x and 16x with the whole
# world on screen.
set -euo pipefail
BIN=${BIN:-target/release}
REC=${1:-corpora/default.mrec}
SECONDS_=${2:-8}
SEEKS=${3:-40}
W=$(mktemp -d)
"$BIN/migratory-replay" view "$REC" --listen 127.0.0.1:0 > "$W/out.txt" 2> "$W/err.txt" &
VP=$!
trap 'kill $VP 2>/dev/null; wait $VP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 600); do grep -q viewing "$W/out.txt" && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$W/out.txt")
echo "chromium $(chromium --version 2>/dev/null | awk '{print $2}'), headless, software rendering; $(nproc) cores"
node net/view/web/bench/playback.mjs "$URL" "$SECONDS_" "$SEEKS"
