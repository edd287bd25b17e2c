#!/bin/bash
# One short 1,000-bot hold against a given server binary, for side-by-side comparisons
# (opt-in), from the repo root after `cargo build --release -p migratory-server -p migratory-bots`:
#   net/bench/hold_cpu.sh SERVER_BINARY BOTS_BINARY [perf|perf-bots|trace|threads]
# Ramps straight to 1,000 bots, then over 20 s of the hold prints the server's user and
# system CPU per tick (from /proc, 1,200 ticks at 60 Hz), the bots' CPU, and the medians
# of the soak's per-second loop p50/p99 and CPU series. Run binaries alternately (before,
# after, before, after): the machine is shared and runs differ by 10 %.
# Environment: SERVER_CONFIG=FILE (default net/bench/soak-server.toml); REC_DIR=DIR records
# the session there (default: no recording); IO_NICE=N renices the server's I/O threads;
# BOTS_ARGS="..." adds arguments to the bots (e.g. --reply-after-percent 0); FLOOR=1 then
# runs `migratory-bots floor` for 20 s (the same segments with no game: the system CPU no
# server goes under; its defaults match the soak server's 60 Hz and snapshot every 3
# ticks, FLOOR_ARGS="..." changes them) and prints the server's system CPU as a multiple.
# `perf` records the server's profile to hold-cpu-perf.data (`perf-bots` the bots'), `trace`
# counts syscalls into hold-cpu-trace.txt (tracing slows the server: use its counts only),
# `threads` also prints the server's user and system CPU per tick by thread name (from
# /proc/PID/task, threads of one name summed); `mallocs` counts the server's calls to
# malloc, calloc and realloc per tick by thread (perf uprobes on libc; needs root).
set -u
SRV=${1:?usage: net/bench/hold_cpu.sh SERVER BOTS [perf|perf-bots|trace|threads|mallocs]}; BOTS=${2:?bots binary}; MODE=${3:-}
OUT=$(mktemp -d)
if [ -n "${REC_DIR:-}" ]; then REC=(--record-dir "$REC_DIR"); else REC=(--no-record); fi
$SRV serve --config "${SERVER_CONFIG:-net/bench/soak-server.toml}" --listen 127.0.0.1:0 "${REC[@]}" > $OUT/out.txt 2> $OUT/err.txt &
SP=$!
for i in $(seq 50); do grep -q listening $OUT/out.txt && break; sleep 0.1; done
URL=$(grep -o "ws://[^ ]*" $OUT/out.txt)
if [ -n "${IO_NICE:-}" ]; then
  for t in /proc/$SP/task/*; do grep -q migratory-io $t/comm && renice -n $IO_NICE -p $(basename $t) > /dev/null; done
fi
$BOTS soak --url "$URL" --out $OUT/soak --steps 1000 --step-seconds 20 --hold-seconds 30 --tasks 2 ${BOTS_ARGS:-} > $OUT/soak.txt 2>&1 &
BP=$!
sleep 28
read U0 S0 <<< $(awk '{print $14, $15}' /proc/$SP/stat)
read BU0 BS0 <<< $(awk '{print $14, $15}' /proc/$BP/stat)
# The server's threads by name (as the kernel keeps it), user and system ticks summed.
by_thread() {
  for t in /proc/$SP/task/*; do echo "$(tr ' ' '_' < $t/comm) $(awk '{print $14, $15}' $t/stat)"; done |
    awk '{u[$1] += $2; s[$1] += $3} END {for (k in u) print k, u[k], s[k]}' | sort
}
[ "$MODE" = threads ] && by_thread > $OUT/threads-before
if [ "$MODE" = mallocs ]; then
  # The uprobes on the server's libc, made once (they last until reboot).
  LIBC=$(ldd $SRV | awk '/libc\.so/ {print $3}')
  for f in malloc calloc realloc; do
    perf probe -l 2> /dev/null | grep -q "probe_libc:$f " || perf probe -q -x "$LIBC" -a $f
  done
fi
case "$MODE" in
  perf) perf record -F 999 -g -p $SP -o hold-cpu-perf.data -- sleep 20 2> /dev/null ;;
  perf-bots) perf record -F 999 -g -p $BP -o hold-cpu-perf.data -- sleep 20 2> /dev/null ;;
  trace) perf trace -s -p $SP -o hold-cpu-trace.txt -- sleep 20 2> /dev/null ;;
  mallocs)
    perf stat --per-thread -x, -e probe_libc:malloc,probe_libc:calloc,probe_libc:realloc \
      -p $SP -o $OUT/mallocs.csv -- sleep 20 2> /dev/null ;;
  *) sleep 20 ;;
esac
read U1 S1 <<< $(awk '{print $14, $15}' /proc/$SP/stat)
read BU1 BS1 <<< $(awk '{print $14, $15}' /proc/$BP/stat)
[ "$MODE" = threads ] && by_thread > $OUT/threads-after
wait $BP
kill -INT $SP; wait $SP
HZ=$(getconf CLK_TCK)
SERIES=$(python3 -c "
import json, statistics as st
m = json.load(open('$OUT/soak/metrics.json'))
h = [x for x in m['series'] if x['phase'] == 'hold']
med = lambda k: st.median(x[k] for x in h if x.get(k) is not None) if any(x.get(k) is not None for x in h) else float('nan')
print('loop p50 %.2f p99 %.2f cpu %.2f, segments out %.0f (pure ACKs %.0f) in %.0f per tick (medians per second)' % tuple(med(k) for k in ('loop_p50_ms', 'loop_p99_ms', 'cpu_ms_per_tick', 'segments_out_per_tick', 'pure_acks_out_per_tick', 'segments_in_per_tick')))")
python3 -c "print('$(basename $SRV): user %.2f sys %.2f ms per tick, bots %.2f s CPU in 20 s (user %.2f sys %.2f)' % (($U1-$U0)*1000/$HZ/1200, ($S1-$S0)*1000/$HZ/1200, ($BU1+$BS1-$BU0-$BS0)/$HZ, ($BU1-$BU0)/$HZ, ($BS1-$BS0)/$HZ))"
echo "$SERIES | $(grep -h RTT $OUT/soak/summary.txt)"
if [ "$MODE" = threads ]; then
  join $OUT/threads-before $OUT/threads-after |
    awk -v hz=$HZ '{printf "  %-16s user %.2f sys %.2f ms per tick\n", $1, ($4 - $2) * 1000 / hz / 1200, ($5 - $3) * 1000 / hz / 1200}'
fi
if [ "$MODE" = mallocs ]; then
  # Lines "thread-tid,count,,event,...": calls per tick by thread name, the three summed.
  awk -F, 'NF > 3 && $2 ~ /^[0-9]+$/ {sub(/-[0-9]+$/, "", $1); c[$1] += $2}
    END {for (k in c) if (c[k] > 0) printf "  %-16s %.1f allocations per tick\n", k, c[k] / 1200}' $OUT/mallocs.csv | sort
fi
if [ -n "${FLOOR:-}" ]; then
  if $BOTS floor --clients 1000 --seconds 20 ${FLOOR_ARGS:-} > $OUT/floor.json; then
    python3 -c "
import json
f = json.load(open('$OUT/floor.json'))
sys_ms = ($S1 - $S0) * 1000 / $HZ / 1200
floor = f['server_cpu_system_ms_per_tick']
ratio = '%.2fx' % (sys_ms / floor) if floor > 0 else 'n/a'
print('floor (same segments, no game): server sys %.2f ms per tick, clients sys %.2f; server sys is %s the floor' % (floor, f['clients_cpu_system_ms_per_tick'], ratio))"
  else
    echo "floor: migratory-bots floor failed (above)"
  fi
fi
rm -rf $OUT
