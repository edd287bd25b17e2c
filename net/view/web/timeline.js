// The replay viewer's event timeline: one lane per kind of event (players joining and
// leaving, casts, catches, snapshots not acknowledged, bookmarks, the divergence) over a
// range of ticks one zooms into by dragging across it (or the wheel; a double click shows
// the whole recording again), with a minimap of the whole recording below. Hovering an
// event names it; clicking it seeks to its tick and selects its avatar (a snapshot not
// acknowledged switches to that client's view); clicking elsewhere seeks there.
// `[` and `]` go to the previous and next event of the focused lane (a click on a lane's
// name focuses it; again, every lane).

import { MARKER } from "./layout.js";

/** Lanes, top to bottom: name, colour, the marker kinds in it. */
export const LANES = [
  { name: "players", colour: "#70e090", kinds: [MARKER.JOIN, MARKER.LEAVE, MARKER.SPECTATE] },
  { name: "casts", colour: "#f0c060", kinds: [MARKER.CAST] },
  { name: "catches", colour: "#ff9040", kinds: [MARKER.CATCH] },
  { name: "not acked", colour: "#ff5050", kinds: [MARKER.UNACKED] },
  { name: "bookmarks", colour: "#c080ff", kinds: [] },
  { name: "divergence", colour: "#ff3030", kinds: [] },
];
const LANE_OF = Object.fromEntries(LANES.flatMap((l, i) => l.kinds.map((k) => [k, i])));
const KIND_WORDS = {
  [MARKER.JOIN]: "joined", [MARKER.LEAVE]: "left", [MARKER.SPECTATE]: "joined as a spectator",
  [MARKER.CAST]: "cast", [MARKER.CATCH]: "caught", [MARKER.UNACKED]: "never acknowledged the snapshot of",
};
const LABEL_PX = 74, LANE_PX = 11, MINIMAP_PX = 10, GAP_PX = 3;
export const TIMELINE_HEIGHT_PX = LANES.length * LANE_PX + GAP_PX + MINIMAP_PX;
/** Fewest ticks a zoomed range spans. */
const RANGE_TICKS_MIN = 20;
/** How near (CSS px) the pointer must be to an event to hover or click it. */
const HIT_PX = 5;

/** Builds the timeline into `container`; `r` is the replay state, `act` the viewer's
 * actions: `seek(tick)`, `select(entityId)`, `asClient(client)`. */
export function createTimeline(container, r, act) {
  const canvas = document.createElement("canvas");
  canvas.id = "replay-events";
  canvas.style.cssText = `width:100%;height:${TIMELINE_HEIGHT_PX}px;display:block;cursor:crosshair`;
  container.appendChild(canvas);
  // The playhead and the minimap's are elements moved by a transform, so playing redraws
  // no canvas: the strip is drawn only when its events, range, hover or drag change.
  container.style.position = "relative";
  const head = (top, height) => {
    const d = document.createElement("div");
    d.style.cssText = `position:absolute;left:0;top:${top}px;width:1px;height:${height}px;background:#fff;pointer-events:none;will-change:transform`;
    container.appendChild(d);
    return d;
  };
  const playhead = head(0, LANES.length * LANE_PX), minihead = head(LANES.length * LANE_PX + GAP_PX, MINIMAP_PX);
  const tip = document.createElement("div");
  tip.id = "replay-tip";
  tip.style.cssText = "display:none;position:fixed;background:#101820f0;color:#dde;padding:3px 7px;border-radius:4px;font:12px sans-serif;pointer-events:none;z-index:11;white-space:nowrap";
  document.body.appendChild(tip);
  const layer = document.createElement("canvas"); // the events, redrawn only on change
  const t = {
    canvas, from: r.info.start_tick, to: r.info.last_tick, focus: null, hover: null, drag: null,
    lanes: LANES.map(() => []), // per lane: events [tick, kind, client, n, entity], by tick
    key: null, eventsDrawn: 0,
    /** The x (CSS px, in the canvas) of `tick` in the visible range. */
    xOf(tick) { return LABEL_PX + ((tick - t.from) / Math.max(1, t.to - t.from)) * plotWidth(); },
    /** The tick at x (CSS px). */
    tickAt(x) { return Math.round(t.from + ((x - LABEL_PX) / plotWidth()) * (t.to - t.from)); },
    /** The y (CSS px) of the middle of lane `i`. */
    laneY(i) { return i * LANE_PX + LANE_PX / 2; },
    laneOfKind(kind) { return LANE_OF[kind]; },
    /** Shows ticks `a..b` (clamped to the recording, at least `RANGE_TICKS_MIN` wide). */
    zoomTo(a, b) {
      const { start_tick: s, last_tick: e } = r.info;
      let from = Math.max(s, Math.min(a, b)), to = Math.min(e, Math.max(a, b));
      if (to - from < RANGE_TICKS_MIN) {
        const mid = (from + to) / 2;
        from = Math.max(s, Math.round(mid - RANGE_TICKS_MIN / 2));
        to = Math.min(e, from + RANGE_TICKS_MIN);
      }
      t.from = from;
      t.to = to;
    },
    /** The event of the focused lane (or of any lane) after (`dir` 1) or before (-1) the
     * tick shown; seeks to it. */
    jump(dir) {
      const now = r.shown ?? Math.floor(r.tick);
      const lanes = t.focus === null ? t.lanes.map((_, i) => i) : [t.focus];
      let best = null;
      for (const i of lanes) {
        for (const ev of t.lanes[i]) {
          if (dir > 0 ? ev[0] > now && (!best || ev[0] < best[0]) : ev[0] < now && (!best || ev[0] > best[0])) best = ev;
        }
      }
      if (best) pick(best);
      return best;
    },
  };
  const plotWidth = () => Math.max(1, canvas.clientWidth - LABEL_PX - 4);

  /** Rebuilds the lanes from the markers, the client shown, bookmarks and divergence. */
  function refill() {
    t.lanes = LANES.map(() => []);
    for (const m of r.markers?.markers ?? []) {
      const lane = LANE_OF[m[1]];
      if (lane === undefined) continue;
      // Unacknowledged snapshots: the viewed client's, or every client's in god view.
      if (m[1] === MARKER.UNACKED && r.client !== null && m[2] !== r.client) continue;
      t.lanes[lane].push(m);
    }
    for (const b of r.bookmarks ?? []) t.lanes[4].push([b.tick, "bookmark", b.client, 0, avatarOf(b.client, b.tick), b]);
    const d = r.divergence;
    if (d?.status === "found") t.lanes[5].push([d.tick, "divergence", -1, d.entities.length, d.entities[0]?.id ?? -1]);
    for (const lane of t.lanes) lane.sort((a, b) => a[0] - b[0]);
  }

  /** The avatar client `c` had at `tick`, from its last join at or before it (or -1). */
  function avatarOf(c, tick) {
    let id = -1;
    for (const m of r.markers?.markers ?? []) if (m[2] === c && m[0] <= tick && (m[1] === MARKER.JOIN || m[1] === MARKER.SPECTATE)) id = m[4];
    return id;
  }

  function describe(ev) {
    const who = (c) => {
      const line = r.markers?.clients.find((l) => l.client === c);
      return `client ${c}${line ? ` (${line.name})` : ""}`;
    };
    if (ev[1] === "bookmark") return `tick ${ev[0]}: bookmark by ${who(ev[2])}${ev[5]?.note ? `: "${ev[5].note}"` : ""}`;
    if (ev[1] === "divergence") return `tick ${ev[0]}: first divergence, ${ev[3]} ${ev[3] === 1 ? "entity differs" : "entities differ"}`;
    const what = ev[1] === MARKER.CATCH ? `caught ${ev[3]} ${ev[3] === 1 ? "boid" : "boids"}` : ev[1] === MARKER.UNACKED ? `never acknowledged this snapshot` : KIND_WORDS[ev[1]];
    return `tick ${ev[0]}: ${who(ev[2])} ${what}`;
  }

  /** The event nearest (x, y) within `HIT_PX`, or null. */
  function eventAt(x, y) {
    const lane = Math.floor(y / LANE_PX);
    if (lane < 0 || lane >= LANES.length) return null;
    let best = null, bestD = HIT_PX;
    for (const ev of t.lanes[lane]) {
      if (ev[0] < t.from || ev[0] > t.to) continue;
      const d = Math.abs(t.xOf(ev[0]) - x);
      if (d <= bestD) { best = ev; bestD = d; }
    }
    return best;
  }

  /** Seeks to an event and selects what it is about: a snapshot not acknowledged or a
   * spectator is a client's view; anything else, the avatar (if it has one). */
  function pick(ev) {
    act.seek(ev[0]);
    if (ev[1] === MARKER.UNACKED || ev[1] === MARKER.SPECTATE) act.asClient(ev[2]);
    else if (ev[4] >= 0 && ev[4] !== 0xffffffff) act.select(ev[4]);
  }

  /** The lane an event is drawn in. */
  const laneOf = (ev) => (ev[1] === "bookmark" ? 4 : ev[1] === "divergence" ? 5 : LANE_OF[ev[1]]);

  const local = (e) => { const b = canvas.getBoundingClientRect(); return [e.clientX - b.left, e.clientY - b.top]; };
  const onMinimap = (y) => y >= LANES.length * LANE_PX + GAP_PX;
  canvas.addEventListener("mousedown", (e) => {
    const [x, y] = local(e);
    if (x < LABEL_PX) {
      const lane = Math.floor(y / LANE_PX);
      if (lane >= 0 && lane < LANES.length) t.focus = t.focus === lane ? null : lane;
      t.key = null;
      return;
    }
    t.drag = { x0: x, x1: x, minimap: onMinimap(y) };
    if (t.drag.minimap) centreOn(x);
    e.preventDefault();
  });
  window.addEventListener("mousemove", (e) => {
    const [x, y] = local(e);
    if (t.drag) {
      t.drag.x1 = x;
      if (t.drag.minimap) centreOn(x);
      return;
    }
    const inside = x >= 0 && y >= 0 && x <= canvas.clientWidth && y <= TIMELINE_HEIGHT_PX;
    t.hover = inside ? eventAt(x, y) : null;
    if (t.hover) {
      tip.textContent = describe(t.hover);
      tip.style.display = "block";
      tip.style.left = `${Math.min(e.clientX + 10, innerWidth - tip.offsetWidth - 4)}px`;
      tip.style.top = `${e.clientY - 28}px`;
    } else tip.style.display = "none";
  });
  window.addEventListener("mouseup", (e) => {
    const d = t.drag;
    if (!d) return;
    t.drag = null;
    if (d.minimap) return;
    const [x, y] = local(e);
    if (Math.abs(d.x1 - d.x0) > 4) t.zoomTo(t.tickAt(d.x0), t.tickAt(d.x1));
    else {
      const ev = eventAt(x, y);
      if (ev) pick(ev);
      else act.seek(Math.max(r.info.start_tick, Math.min(r.info.last_tick, t.tickAt(x))));
    }
  });
  canvas.addEventListener("dblclick", () => t.zoomTo(r.info.start_tick, r.info.last_tick));
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const [x] = local(e);
    const at = t.tickAt(Math.max(LABEL_PX, x));
    const f = Math.exp(e.deltaY * 0.002);
    t.zoomTo(Math.round(at - (at - t.from) * f), Math.round(at + (t.to - at) * f));
  }, { passive: false });

  /** Minimap: centres the visible range on the tick under x. */
  function centreOn(x) {
    const { start_tick: s, last_tick: e } = r.info;
    const tick = s + ((x - LABEL_PX) / plotWidth()) * (e - s);
    const half = (t.to - t.from) / 2;
    const from = Math.round(Math.max(s, Math.min(e - 2 * half, tick - half)));
    t.from = from;
    t.to = Math.round(from + 2 * half);
  }

  let drawnFor = null;
  /** Moves the playheads; redraws the strip (the cached event layer, hover and drag) when
   * any of them changed. */
  t.draw = () => {
    const dpr = devicePixelRatio || 1;
    const w = canvas.clientWidth, h = TIMELINE_HEIGHT_PX;
    if (canvas.width !== Math.round(w * dpr)) { canvas.width = layer.width = Math.round(w * dpr); canvas.height = layer.height = Math.round(h * dpr); t.key = null; }
    const key = `${r.markers?.markers.length}/${r.client}/${w}/${t.from}/${t.to}/${t.focus}/${r.bookmarks.length}/${r.divergence?.status}`;
    if (key !== t.key) {
      t.key = key;
      refill();
      drawLayer(layer.getContext("2d"), dpr, w);
    }
    const shown = r.shown ?? r.tick;
    const { start_tick: s, last_tick: e } = r.info;
    const inRange = shown >= t.from && shown <= t.to;
    playhead.style.display = inRange ? "block" : "none";
    if (inRange) playhead.style.transform = `translateX(${Math.round(t.xOf(shown))}px)`;
    minihead.style.transform = `translateX(${Math.round(LABEL_PX + ((shown - s) / Math.max(1, e - s)) * plotWidth())}px)`;
    const drag = t.drag && !t.drag.minimap ? `${t.drag.x0}/${t.drag.x1}` : "";
    const now = `${t.key}/${t.hover?.[0]}/${t.hover?.[1]}/${t.hover?.[2]}/${drag}`;
    if (now === drawnFor) return;
    drawnFor = now;
    const g = canvas.getContext("2d");
    g.setTransform(1, 0, 0, 1, 0, 0);
    g.clearRect(0, 0, canvas.width, canvas.height);
    g.drawImage(layer, 0, 0);
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    if (t.hover) {
      g.strokeStyle = "#ffffff";
      g.strokeRect(Math.round(t.xOf(t.hover[0])) - 2.5, laneOf(t.hover) * LANE_PX + 0.5, 5, LANE_PX - 1);
    }
    if (t.drag && !t.drag.minimap && Math.abs(t.drag.x1 - t.drag.x0) > 4) {
      g.fillStyle = "#40e0ff40";
      g.fillRect(Math.min(t.drag.x0, t.drag.x1), 0, Math.abs(t.drag.x1 - t.drag.x0), LANES.length * LANE_PX);
    }
  };

  function drawLayer(g, dpr, w) {
    g.setTransform(1, 0, 0, 1, 0, 0);
    g.clearRect(0, 0, g.canvas.width, g.canvas.height);
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.font = "10px sans-serif";
    g.textBaseline = "middle";
    let drawn = 0;
    LANES.forEach((lane, i) => {
      const y = i * LANE_PX;
      g.fillStyle = i % 2 ? "#ffffff08" : "#ffffff10";
      g.fillRect(LABEL_PX, y, w - LABEL_PX, LANE_PX);
      g.fillStyle = t.focus === i ? "#ffffff" : lane.colour;
      const label = lane.name === "not acked" && r.client !== null ? `not acked ${r.client}` : lane.name;
      g.fillText(`${t.focus === i ? "▸ " : ""}${label}`, 2, y + LANE_PX / 2 + 0.5);
      g.fillStyle = lane.colour;
      let lastX = -1;
      for (const ev of t.lanes[i]) {
        if (ev[0] < t.from || ev[0] > t.to) continue;
        const x = Math.round(t.xOf(ev[0]));
        // Zoomed in, an event is a mark wider than a pixel; many on one pixel draw once.
        const width = Math.max(1, Math.min(5, plotWidth() / Math.max(1, t.to - t.from)));
        if (x === lastX && width <= 1) continue;
        g.fillRect(x - Math.floor(width / 2), y + 1, width, LANE_PX - 2);
        lastX = x;
        drawn++;
      }
    });
    // Minimap: every event of the whole recording, faint, and the visible range.
    const my = LANES.length * LANE_PX + GAP_PX;
    const { start_tick: s, last_tick: e } = r.info;
    const mx = (tick) => LABEL_PX + ((tick - s) / Math.max(1, e - s)) * plotWidth();
    g.fillStyle = "#ffffff14";
    g.fillRect(LABEL_PX, my, w - LABEL_PX, MINIMAP_PX);
    LANES.forEach((lane, i) => {
      g.fillStyle = `${lane.colour}90`;
      for (const ev of t.lanes[i]) g.fillRect(Math.round(mx(ev[0])), my + 1 + (i % 3) * 3, 1, 2);
    });
    g.strokeStyle = "#40e0ff";
    g.lineWidth = 1;
    g.strokeRect(Math.round(mx(t.from)) + 0.5, my + 0.5, Math.max(2, Math.round(mx(t.to) - mx(t.from))), MINIMAP_PX - 1);
    g.fillStyle = "#9fb8c4";
    g.fillText(t.from === s && t.to === e ? "whole" : `${t.from}..${t.to}`, 2, my + MINIMAP_PX / 2);
    t.eventsDrawn = drawn;
  }
  return t;
}
