#!/bin/bash
# Server RSS per joined client (opt-in), from the repo root after
# `cargo build --release -p migratory-server -p migratory-bots`:  net/bench/rss_per_client.sh SERVER_BINARY
# Starts the server with its defaults (no recording), reads its RSS, joins 1,000 bots for
# 40 s and reads the RSS again 32 s in. Give two binaries in turn (before, after, before,
# after) for a side-by-side figure. Also prints the server's user/system CPU seconds by then
# (the ramp's terrain and 30 s of play). SRV_ARGS adds serve options (e.g. "--shards 1 --config F").
SRV=$1; W=$(mktemp -d)
$SRV serve --listen 127.0.0.1:0 --no-record ${SRV_ARGS:-} > $W/out 2> $W/err &
SP=$!
for i in $(seq 50); do grep -q listening $W/out && break; sleep 0.1; done
URL=$(grep -o "ws://[^ ]*" $W/out)
sleep 1
R0=$(awk '{print $2*4}' /proc/$SP/statm)
${BOTS:-target/release/migratory-bots} --url $URL --clients 1000 --seconds 40 --tasks 2 --connect-spread-seconds 3 > $W/bots.json &
BP=$!
sleep 32
R1=$(awk '{print $2*4}' /proc/$SP/statm)
CPU=$(awk -v hz=$(getconf CLK_TCK) '{printf "%.2f/%.2f", $14/hz, $15/hz}' /proc/$SP/stat)
wait $BP
kill -INT $SP; wait $SP
J=$(python3 -c "import json;print(json.load(open('$W/bots.json'))['joined'])")
echo "$(basename $SRV) rss_before_kib=$R0 rss_1000_kib=$R1 joined=$J per_client_kib=$(( (R1-R0)/J )) cpu_user_sys_s=$CPU"
rm -rf $W
