#!/bin/bash
# Fleet figures, from the repo root, after `cargo build --release -p migratory-server -p migratory-fleet -p migratory-bots -p migratory-replay`:
#   net/bench/fleet.sh WORLDS [WORLD_JSON]
# Starts a fleet (SQLite store in a temp folder), then creates and joins worlds one by one
# up to WORLDS, all left running (idle timeout 1 h). For each new world it prints the
# cold join (request to ready, by curl and by the fleet), then 10 joins of already running
# worlds (warm: p50/max), the fleet's RSS, the world servers' RSS and the 1-minute load.
# Then the resume figure: a world whose segment is replaced by a 10-minute recording that
# ends in a crash 540 ticks after its last checkpoint, and joined again.
# Needs curl and python3.
set -euo pipefail
N=$1
WORLD=${2:-'{}'}
BIN=${BIN:-target/release}
W=$(mktemp -d)
"$BIN/migratory-fleet" serve --listen 127.0.0.1:0 --data-dir "$W/data" --idle-timeout-seconds 3600 \
  > "$W/out.txt" 2> "$W/err.txt" &
FP=$!
trap 'kill $FP 2>/dev/null; wait $FP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do grep -q listening "$W/out.txt" && break; sleep 0.05; done
URL=$(sed -n 's/^listening on //p' "$W/out.txt")
# Admin calls carry the fleet's admin token, joins its player token (both made in the
# data folder on first start).
ADMIN=(-H "Authorization: Bearer $(head -1 "$W/data/admin-token")")
PLAYER=(-H "Authorization: Bearer $(head -1 "$W/data/player-token")")
rss_kib() { awk '/VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
servers_rss_kib() {
  local t=0
  for p in $(pgrep -P "$FP" -f migratory-server || true); do t=$((t + $(rss_kib "$p"))); done
  echo $t
}
join_ms() { curl -s "${PLAYER[@]}" -o "$W/join.json" -w '%{time_total}' -X POST "$URL/api/worlds/$1/join" | awk '{printf "%.0f", $1*1000}'; }

echo "worlds cold_join_ms fleet_ready_ms warm_p50_ms warm_max_ms fleet_rss_kib servers_rss_kib load1"
for k in $(seq "$N"); do
  curl -s -o /dev/null "${ADMIN[@]}" -X PUT "$URL/api/worlds/w$k" -d "$WORLD"
  cold=$(join_ms "w$k")
  ready=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ready_ms"])' "$W/join.json")
  warm=()
  for _ in $(seq 10); do warm+=("$(join_ms "w$(( (RANDOM % k) + 1 ))")"); done
  stats=$(printf '%s\n' "${warm[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)], a[NR]}')
  echo "$k $cold $ready $stats $(rss_kib $FP) $(servers_rss_kib) $(cut -d' ' -f1 /proc/loadavg)"
done

# Resume after 10 minutes of play: a default world played for 36,599 ticks by 32 scripted
# players, cut off inside its last block, so its last durable tick is 36,540: 540 ticks
# after the checkpoint of tick 36,000, the most a crash can leave to replay with 60-tick
# blocks and a checkpoint every 600 ticks (a block also ends at every checkpoint).
SEED=$(python3 -c 'import tomllib; print(tomllib.load(open("net/server/config/default.toml","rb"))["world"]["seed"])')
"$BIN/migratory-replay" synth -o "$W/played.mrec" --seed "$SEED" --ticks 36599 --clients 32 > /dev/null
# Drop the end record (32-byte header + 68 bytes) and half of the last block: a torn tail.
python3 - "$W/played.mrec" <<'PY'
import os, sys
p = sys.argv[1]
size = os.path.getsize(p)
os.truncate(p, size - 100 - 200)
PY
curl -s -o /dev/null "${ADMIN[@]}" -X PUT "$URL/api/worlds/played" -d '{}'
join_ms played > /dev/null
curl -s -o /dev/null "${ADMIN[@]}" -X POST "$URL/api/worlds/played/stop"
SEG=$(curl -s "${ADMIN[@]}" "$URL/api/worlds/played" | python3 -c 'import json,sys; print(json.load(sys.stdin)["segments"][-1]["recording_path"])')
cp "$W/played.mrec" "$W/data/$SEG"
resumed=$(join_ms played)
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("resume after 10 min of play (crashed 540 ticks after a checkpoint): join_ms=%s fleet_ready_ms=%s start_tick=%s" % (sys.argv[2], j["ready_ms"], j["start_tick"]))' "$W/join.json" "$resumed"
