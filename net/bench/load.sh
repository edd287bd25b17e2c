#!/bin/bash
# Load run: net/bench/load.sh CLIENTS SECONDS [extra server args], from the repo root.
# Server and bots in separate processes on this machine; build first with
#   cargo build --release -p migratory-server -p migratory-bots
# Needs curl and bc. Prints RSS per connection, CPU per tick, the bots JSON and the loop metrics.
W=$(mktemp -d)
set -u
C=$1; S=$2; shift 2
BIN=${BIN:-target/release}
$BIN/migratory-server serve --listen 127.0.0.1:0 --record-dir ${REC_DIR:-/tmp/migratory-load-rec} "$@" > "$W/out.txt" 2> "$W/err.txt" &
SP=$!
for i in $(seq 50); do grep -q listening "$W/out.txt" && break; sleep 0.1; done
URL=$(grep -o "ws://[^ ]*" "$W/out.txt"); HOST=${URL#ws://}; HOST=${HOST%/ws}
sleep 1
cpu() { awk '{print $14+$15}' /proc/$SP/stat; }
rss() { awk '{print $2*4}' /proc/$SP/statm; }
T0=$(curl -s http://$HOST/metrics | awk '/^migratory_ticks_total/{print $2}')
C0=$(cpu); R0=$(rss)
$BIN/migratory-bots --url $URL --clients $C --seconds $S --tasks 2 --connect-spread-seconds 3 ${BOTS_EXTRA:-} > "$W/bots.json" &
BP=$!
sleep 6; CA=$(cpu); TA=$(curl -s http://$HOST/metrics | awk '/^migratory_ticks_total/{print $2}')
sleep $((S-8)); R1=$(rss); CB=$(cpu); TB=$(curl -s http://$HOST/metrics | awk '/^migratory_ticks_total/{print $2}')
wait $BP
C1=$(cpu)
T1=$(curl -s http://$HOST/metrics | awk '/^migratory_ticks_total/{print $2}')
curl -s http://$HOST/metrics | grep -E "^migratory_(tick_loop|tick_phase)_seconds\{|overruns|skipped|state_updates|evictions_total|^migratory_clients" > "$W/metrics.txt"
kill -INT $SP; wait $SP
HZ=$(getconf CLK_TCK)
echo "rss_before_kib=$R0 rss_with_clients_kib=$R1 per_conn_kib=$(( (R1-R0)/C ))"
echo "steady: ticks=$((TB-TA)) cpu_ms_per_tick=$(echo "scale=3; ($CB-$CA)*1000/$HZ/($TB-$TA)" | bc)"
echo "ticks=$((T1-T0)) cpu_ticks=$((C1-C0)) cpu_ms_per_tick=$(echo "scale=3; ($C1-$C0)*1000/$HZ/($T1-$T0)" | bc)"
cat "$W/bots.json"; cat "$W/metrics.txt"
