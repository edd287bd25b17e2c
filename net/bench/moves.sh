#!/bin/bash
# Move figures, from the repo root, after
# `cargo build --release -p migratory-server -p migratory-fleet -p migratory-bots -p migratory-replay`:
#   net/bench/moves.sh [BOTS] [MOVES] [EVERY_SECONDS] [WORLD_JSON] [OUT]
# Starts a throwaway PostgreSQL (Debian's server binaries, as an unprivileged user when
# run as root) and three fleet nodes on it, creates a world (default: the default world),
# and runs `migratory-bots soak` with BOTS bots (default 100) joined through the fleet,
# moving the world every EVERY_SECONDS (default 3) MOVES times (default 20) during the
# hold. Then it stops the world, verifies the chain of segments at 1 and 2 shards with
# `migratory-replay verify`, and prints: the pause distribution the bots saw (last snapshot
# from the source to the first from the target), each move's hand-over time, the ticks
# lost at each move (a segment's first tick minus the previous one's last: 0 means none),
# reclaims and refusals. The soak's folder (metrics.json, chart.png with the moves marked,
# summary.txt) goes to OUT (default: a temp folder, printed).
set -euo pipefail
BOTS=${1:-100}
MOVES=${2:-20}
EVERY=${3:-3}
WORLD=${4:-'{}'}
BIN=${BIN:-target/release}
W=$(mktemp -d)
OUT=${5:-$W/soak}
chmod 755 "$W"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PG=$W/pg
mkdir "$PG"
RUN=()
if [ "$(id -u)" = 0 ]; then
  U=$(id -u postgres >/dev/null 2>&1 && echo postgres || echo nobody)
  chown "$U" "$PG"
  RUN=(runuser -u "$U" --)
fi
"${RUN[@]}" "$PGBIN/initdb" -D "$PG/data" -U postgres --auth=trust --no-sync -E UTF8 > /dev/null
"${RUN[@]}" "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log" -w start \
  -o "-c listen_addresses='' -k $PG -c fsync=off -c synchronous_commit=off" > /dev/null
DB="postgres://postgres@/postgres?host=$PG"
TOKEN=moves-bench-admin-token-0123456789abcdef
echo "$TOKEN" > "$W/admin-token"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  "${RUN[@]}" "$PGBIN/pg_ctl" -D "$PG/data" -m immediate stop > /dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$W/a" "$W/b" "$W/c" "$PG"
}
trap cleanup EXIT
for n in a b c; do
  "$BIN/migratory-fleet" serve --listen 127.0.0.1:0 --data-dir "$W/$n" --node-id "$n" \
    --database-url "$DB" --admin-token-file "$W/admin-token" --server-bin "$BIN/migratory-server" \
    --lease-seconds 3 > "$W/$n.out" 2> "$W/$n.err" &
  PIDS+=($!)
  for _ in $(seq 200); do grep -q listening "$W/$n.out" && break; sleep 0.05; done
done
URL=$(sed -n 's/^listening on //p' "$W/a.out" | head -1)
AUTH=(-H "Authorization: Bearer $TOKEN")
curl -s -o /dev/null "${AUTH[@]}" -X PUT "$URL/api/worlds/mv" -d "$WORLD"
curl -s -o /dev/null "${AUTH[@]}" -X POST "$URL/api/worlds/mv/join"
HOLD=$((MOVES * EVERY + EVERY - 1))
MIGRATORY_FLEET_ADMIN_TOKEN=$TOKEN "$BIN/migratory-bots" soak --fleet "$URL" --world mv \
  --steps "$BOTS" --step-seconds 5 --hold-seconds "$HOLD" --move-every "$EVERY" --out "$OUT" > /dev/null || true
OWNER=$(curl -s "${AUTH[@]}" -X POST "$URL/api/worlds/mv/join" | python3 -c 'import json,sys; print(json.load(sys.stdin)["node"])')
OWNER_URL=$(sed -n 's/^listening on //p' "$W/$OWNER.out" | head -1)
curl -s -o /dev/null "${AUTH[@]}" -X POST "$OWNER_URL/api/worlds/mv/stop"
curl -s "${AUTH[@]}" "$URL/api/worlds/mv" > "$W/world.json"
# Each segment's file, from the node that wrote it (the largest copy).
mapfile -t SEGS < <(python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
for s in json.load(open(os.path.join(w, "world.json")))["segments"]:
    copies = [os.path.join(w, n, s["recording_path"]) for n in "abc"]
    copies = [p for p in copies if os.path.exists(p)]
    print(max(copies, key=os.path.getsize))
PY
)
"$BIN/migratory-replay" verify "${SEGS[@]}" --shards 1,2 > "$W/verify.txt" 2>&1 && VERIFIED=yes || VERIFIED=NO
python3 - "$OUT/metrics.json" "$W/world.json" "$VERIFIED" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
w = json.load(open(sys.argv[2]))
p, t = m["pause_ms"], m["totals"]
moves = m["moves"]
segs = w["segments"]
lost = [b["first_tick"] - a["last_tick"] for a, b in zip(segs, segs[1:])]
print(f"bots {t['joined']} joined; moves {len(moves)} ({sum(1 for x in moves if x['error'])} failed); "
      f"reclaims {t['reclaims']} (refused {t['reclaims_refused']}); decode errors {t['decode_errors']}")
print(f"pause over {p['samples']} reclaims: p50 {p['p50']:.0f} ms, p95 {p['p95']:.0f} ms, "
      f"p99 {p['p99']:.0f} ms, max {p['max']:.0f} ms")
ho = sorted(x["handed_over_ms"] for x in moves if x["handed_over_ms"] is not None)
if ho:
    print(f"hand-over (stop signal to the target's in the store): p50 {ho[len(ho)//2]} ms, max {ho[-1]} ms")
print(f"segments {len(segs)}; ticks lost at each move: {lost}; chain verifies at 1 and 2 shards: {sys.argv[3]}")
PY
echo "soak folder: $OUT"
