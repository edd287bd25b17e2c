#!/bin/bash
# The server's CPU per tick by thread name (tick, shard, flusher, I/O, ...) over 20 s of a
# 1,000-bot hold (opt-in), from the repo root after
# `cargo build --release -p migratory-server -p migratory-bots`:
#   net/bench/thread_cpu.sh SERVER_BINARY BOTS_BINARY
# Prints user and system milliseconds per tick (1,200 ticks at 60 Hz) for each thread name,
# summed over the threads that share it, from /proc/PID/task/*/stat. Run binaries
# alternately, as with hold_cpu.sh: the machine is shared. Environment: SERVER_CONFIG=FILE
# (default net/bench/soak-server.toml); REC_DIR=DIR records the session there.
set -u
SRV=${1:?usage: net/bench/thread_cpu.sh SERVER BOTS}; BOTS=${2:?bots binary}
OUT=$(mktemp -d)
if [ -n "${REC_DIR:-}" ]; then REC=(--record-dir "$REC_DIR"); else REC=(--no-record); fi
$SRV serve --config "${SERVER_CONFIG:-net/bench/soak-server.toml}" --listen 127.0.0.1:0 "${REC[@]}" > $OUT/out.txt 2> $OUT/err.txt &
SP=$!
for i in $(seq 50); do grep -q listening $OUT/out.txt && break; sleep 0.1; done
URL=$(grep -o "ws://[^ ]*" $OUT/out.txt)
$BOTS soak --url "$URL" --out $OUT/soak --steps 1000 --step-seconds 20 --hold-seconds 30 --tasks 2 > $OUT/soak.txt 2>&1 &
BP=$!
sleep 28
# Thread names as the kernel keeps them (15 characters), with user and system ticks summed.
by_thread() {
  for t in /proc/$SP/task/*; do echo "$(tr ' ' '_' < $t/comm) $(awk '{print $14, $15}' $t/stat)"; done |
    awk '{u[$1] += $2; s[$1] += $3} END {for (k in u) print k, u[k], s[k]}' | sort
}
by_thread > $OUT/before
sleep 20
by_thread > $OUT/after
wait $BP
kill -INT $SP; wait $SP
HZ=$(getconf CLK_TCK)
join $OUT/before $OUT/after |
  awk -v hz=$HZ '{u = ($4 - $2) * 1000 / hz / 1200; s = ($5 - $3) * 1000 / hz / 1200; tu += u; ts += s
    printf "%-16s user %.2f sys %.2f ms per tick\n", $1, u, s} END {printf "%-16s user %.2f sys %.2f ms per tick\n", "all", tu, ts}'
rm -rf $OUT
