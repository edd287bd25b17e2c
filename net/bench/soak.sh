#!/bin/bash
# The soak, server and bots on this machine: net/bench/soak.sh OUT_DIR [soak args...], from
# the repo root, after `cargo build --release -p migratory-server -p migratory-bots`. The server runs with its
# defaults except a bounded send buffer (net/bench/soak-server.toml), so the bots told to
# stall (--stall-percent) are evicted within the hold. Prints the summary; the exit status
# is the soak's (0 pass, 1 a threshold failed, 2 could not run). SERVER_CONFIG=FILE replaces the
# server config (net/bench/soak-server-4096-slots.toml: 4,096 client slots, for a knee search).
set -u
OUT=${1:?usage: net/bench/soak.sh OUT_DIR [soak args...]}; shift
BIN=${BIN:-target/release}
W=$(mktemp -d)
# RECORD_DIR=DIR records the session there, as the server does by default (the soak's
# figures before 2026-12-05's second session were taken without recording).
if [ -n "${RECORD_DIR:-}" ]; then REC=(--record-dir "$RECORD_DIR"); else REC=(--no-record); fi
$BIN/migratory-server serve --config "${SERVER_CONFIG:-net/bench/soak-server.toml}" --listen 127.0.0.1:0 "${REC[@]}" > "$W/out.txt" 2> "$W/err.txt" &
SP=$!
for i in $(seq 50); do grep -q listening "$W/out.txt" && break; sleep 0.1; done
URL=$(grep -o "ws://[^ ]*" "$W/out.txt")
$BIN/migratory-bots soak --url "$URL" --out "$OUT" "$@"
RC=$?
kill -INT $SP; wait $SP
exit $RC
