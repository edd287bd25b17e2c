#!/bin/bash
# Frame time of the browser viewer drawing 5,000 boids (opt-in), from the repo root, after
# `cargo build --release -p migratory-server -p migratory-bots` and `npm ci --prefix net/view/web`:
#   net/bench/viewer_frames.sh [REC.mrec] [SECONDS]
# Serves the recording (default corpora/default.mrec: the default world, 5,000 boids) with
# `migratory-server view` and runs net/view/web/bench/frames.mjs in Debian's headless
# Chromium (software rendering: no GPU here), whole world on screen, playing at 1x.
set -euo pipefail
BIN=${BIN:-target/release}
REC=${1:-corpora/default.mrec}
SECONDS_=${2:-10}
W=$(mktemp -d)
"$BIN/migratory-server" view "$REC" --listen 127.0.0.1:0 > "$W/out.txt" 2> "$W/err.txt" &
VP=$!
trap 'kill $VP 2>/dev/null; wait $VP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 600); do grep -q viewing "$W/out.txt" && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$W/out.txt")
echo "recording: $REC; chromium $(chromium --version 2>/dev/null | awk '{print $2}'), headless, software rendering"
node net/view/web/bench/frames.mjs "$URL" "$SECONDS_"
