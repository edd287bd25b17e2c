// The replay viewer: `migratory-replay view REC` serves the page with /replay/* routes
// (net/view/src/replay/mod.rs). A timeline with play, pause, step, speeds and
// seek; markers for joins, leaves, casts and catches; god view or "as client N saw it";
// a click inspects an entity (its fields as `migratory-replay inspect` prints them, and
// its track); with --compare, the first divergent tick and the entities that differ.

import { circle, ctx, drawAvatar, drawBoid, flushEntities, screenTransform, toScreen } from "./draw.js";
import { MARKER } from "./layout.js";
import { Playback, framesOf } from "./playback.js";
import { createTimeline } from "./timeline.js";
import { KIND_AVATAR } from "./snapshot.js";

const $ = (id) => document.getElementById(id);

let lastFrameMs = performance.now();

async function json(url) {
  const resp = await fetch(url);
  if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status} ${await resp.text()}`);
  return resp.json();
}

/** Sets what drawing needs of the world (`state.world`), the one place either mode sets
 * it: from WELCOME live, from /replay/info here. `state.welcome` stays the live
 * session's own. */
export function enterWorld(state, world) {
  state.world = Object.freeze({ ...world });
}

/** Switches the page to replay mode if this server serves a recording. */
export async function startReplay(state) {
  // The live server answers 204: no recording here.
  const resp = await fetch("/replay/info").catch(() => null);
  if (!resp || resp.status !== 200) return false;
  const info = await resp.json();
  const r = {
    info, tick: info.start_tick, shown: null, frame: null, playing: false, speed: 1, inFlight: false,
    playback: new Playback(info),
    /** States shown so far (a new tick drawn counts once), for the playback benchmark. */
    statesShown: 0,
    selected: null, inspected: null, inspectBusy: false,
    client: null, clientView: null, clientBusy: false,
    markers: null, timeline: null, bookmarks: info.bookmarks ?? [],
    /** Pinned fields: {id, field (probe's name), label, series, key, error, busy, svg}. */
    pins: [],
    divergence: null, highlight: new Set(),
    /** Every entity at the tick shown, as objects (for tests and the console). */
    get entities() {
      const f = r.frame;
      return f ? Array.from({ length: f.n }, (_, i) => f.entity(i)) : [];
    },
    /** Where entity `id` is drawn, in CSS pixels (for tests and the console). */
    screenOf(id) {
      const i = r.frame ? r.frame.indexOf(id) : -1;
      return i >= 0 ? toScreen(r.frame.x(i), r.frame.y(i)) : null;
    },
  };
  state.replay = r;
  state.camera.follow = false;
  enterWorld(state, { zones: info.zones, viewRadiusMm: info.view_radius_mm, tickRateHz: info.tick_rate_hz });
  $("join").style.display = "none";
  $("hud").style.display = "none";
  const bar = document.createElement("div");
  bar.id = "replay";
  // The play button keeps one width whatever its label, so the slider beside it stays put.
  bar.innerHTML = `<div id="replay-lanes"></div><button id="replay-back" title="step back (Left)">&#9664;</button><button id="replay-play" style="min-width:4.5em" title="play or pause (Space)">play</button><button id="replay-step" title="step (Right)">&#9654;</button>
    <select id="replay-speed">${[0.25, 0.5, 1, 2, 4, 8, 16].map((v) => `<option value="${v}"${v === 1 ? " selected" : ""}>${v}x</option>`).join("")}</select>
    <div id="replay-timeline">
      <input id="replay-slider" type="range" min="${info.start_tick}" max="${info.last_tick}" value="${info.start_tick}"></div>
    <span>tick <b id="replay-tick">-</b> / ${info.last_tick}</span>
    <select id="replay-view"><option value="">god view</option></select>
    <span id="replay-divergence"></span><button id="replay-link" title="copy a link to this moment">copy link</button><button id="replay-help" title="keyboard shortcuts (?)">?</button>`;
  document.body.appendChild(bar);
  const help = document.createElement("div");
  help.id = "replay-keys";
  help.style.cssText = "display:none;position:fixed;right:12px;bottom:64px;background:#101820e8;color:#dde;padding:10px 14px;border-radius:6px;font:13px sans-serif;z-index:10";
  help.innerHTML = `<b>keys</b><table>${KEYS.map(([k, what]) => `<tr><td><kbd>${k}</kbd></td><td>${what}</td></tr>`).join("")}</table>`;
  document.body.appendChild(help);
  const side = document.createElement("div");
  side.id = "inspector";
  document.body.appendChild(side);
  // A field's name pins it (watched as you step, plotted over the timeline's range); x unpins.
  side.addEventListener("click", (e) => {
    const a = e.target.closest("[data-pin],[data-unpin]");
    if (!a) return;
    e.preventDefault();
    if (a.dataset.unpin !== undefined) r.pins.splice(Number(a.dataset.unpin), 1);
    else {
      const id = r.selected, label = a.dataset.pin;
      const at = r.pins.findIndex((p) => p.id === id && p.label === label);
      if (at >= 0) r.pins.splice(at, 1);
      else r.pins.push({ id, label, field: probeFieldOf(r, label), series: null, key: null, error: null, busy: false, svg: "" });
    }
  });
  r.timeline = createTimeline($("replay-lanes"), r, {
    seek: (tick) => { r.playing = false; r.tick = tick; },
    select: (id) => { r.client = null; $("replay-view").value = ""; r.selected = id; r.inspected = null; state.camera.follow = true; },
    asClient: (client) => { r.client = client; r.clientView = null; $("replay-view").value = String(client); state.camera.follow = true; },
  });
  $("replay-play").onclick = () => togglePlay(r);
  $("replay-step").onclick = () => stepBy(r, 1);
  $("replay-back").onclick = () => stepBy(r, -1);
  $("replay-help").onclick = () => { help.style.display = help.style.display === "none" ? "block" : "none"; };
  window.addEventListener("keydown", (e) => {
    // Keys typed into a control go to it (the slider's own arrows, a select's letters).
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement || e.ctrlKey || e.metaKey || e.altKey) return;
    const second = info.tick_rate_hz;
    const act = {
      " ": () => togglePlay(r),
      ArrowRight: () => stepBy(r, e.shiftKey ? second : 1),
      ArrowLeft: () => stepBy(r, e.shiftKey ? -second : -1),
      Home: () => stepBy(r, -Infinity),
      End: () => stepBy(r, Infinity),
      "]": () => r.timeline.jump(1),
      "[": () => r.timeline.jump(-1),
      "?": () => $("replay-help").click(),
      Escape: () => { help.style.display = "none"; },
    }[e.key];
    if (act) {
      e.preventDefault();
      act();
    }
  });
  $("replay-speed").onchange = (e) => { r.speed = Number(e.target.value); };
  $("replay-slider").oninput = (e) => { r.playing = false; r.tick = Number(e.target.value); };
  $("replay-view").onchange = (e) => {
    r.client = e.target.value === "" ? null : Number(e.target.value);
    // As a client: the camera follows what it saw (a drag frees it, F follows again).
    state.camera.follow = r.client !== null;
    r.clientView = null;
  };
  $("replay-link").onclick = () => {
    const done = (what) => { $("replay-link").textContent = what; setTimeout(() => { $("replay-link").textContent = "copy link"; }, 1500); };
    navigator.clipboard?.writeText(location.href).then(() => done("copied"), () => done("copy the address bar"));
  };
  fromUrl(r, state);
  pollMarkers(r);
  pollDivergence(r, state);
  return true;
}

/** The moment a link names: `?tick=T&sel=ID&client=C&zoom=MM_PER_PX&x=X_MM&y=Y_MM`
 * (each optional; `x`, `y` only when the camera follows nothing). */
function fromUrl(r, state) {
  const q = new URLSearchParams(location.search);
  const num = (k) => (q.has(k) && Number.isFinite(Number(q.get(k))) ? Number(q.get(k)) : null);
  const tick = num("tick");
  if (tick !== null) r.tick = Math.max(r.info.start_tick, Math.min(r.info.last_tick, Math.floor(tick)));
  // Applied once the terrain is in, after the page has fitted the world to the screen.
  r.urlView = { zoom: num("zoom"), x: num("x"), y: num("y") };
  const sel = num("sel");
  if (sel !== null) { r.selected = sel; state.camera.follow = true; }
  const client = num("client");
  if (client !== null) { r.client = client; state.camera.follow = true; }
}

let urlWrittenMs = 0;
/** Keeps the address bar on the moment shown (at most twice a second), so it can be shared. */
function toUrl(r, state) {
  const now = performance.now();
  if (now - urlWrittenMs < 500 || r.shown === null) return;
  urlWrittenMs = now;
  const q = new URLSearchParams();
  q.set("tick", String(r.shown));
  if (r.selected !== null) q.set("sel", String(r.selected));
  if (r.client !== null) q.set("client", String(r.client));
  q.set("zoom", String(Math.round(state.camera.mmPerPx)));
  if (!state.camera.follow) {
    q.set("x", String(Math.round(state.camera.x_mm)));
    q.set("y", String(Math.round(state.camera.y_mm)));
  }
  const search = `?${q}`;
  if (location.search !== search) history.replaceState(null, "", search);
}

/** Fetches the markers as the server's scan finds them: only the new ones each time. */
async function pollMarkers(r) {
  const all = [];
  for (;;) {
    try {
      const m = await json(`/replay/markers?from=${all.length}`);
      if (m.from === all.length) for (const row of m.markers) all.push(row);
      r.markers = { ...m, markers: all };
      const select = $("replay-view");
      for (const c of m.clients) {
        if (![...select.options].some((o) => o.value === String(c.client))) {
          const o = document.createElement("option");
          o.value = String(c.client);
          o.textContent = `as client ${c.client} (${c.name}${c.spectator ? ", spectator" : ""}) saw it`;
          select.appendChild(o);
        }
      }
      // A link's client shows in the menu once the menu has it.
      if (r.client !== null && select.value !== String(r.client)) select.value = String(r.client);
      if (m.complete && all.length === m.total) return;
    } catch (e) {
      console.warn("markers", e);
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

async function pollDivergence(r, state) {
  for (;;) {
    try {
      r.divergence = await json("/replay/divergence");
    } catch (e) {
      console.warn("divergence", e);
    }
    if (r.divergence && r.divergence.status !== "pending") break;
    await new Promise((ok) => setTimeout(ok, 500));
  }
  const d = r.divergence, span = $("replay-divergence");
  if (!d || d.status === "off") return;
  // What was compared: both recordings' common ticks, or (shard counts) all of this one.
  const [from, to] = d.compared ?? [r.info.start_tick + 1, r.info.last_tick];
  const part = from > r.info.start_tick + 1 || to < r.info.last_tick ? ` (the other recording covers only these of ${r.info.start_tick + 1}..${r.info.last_tick})` : "";
  if (d.status === "none") span.textContent = `no divergence in ticks ${from}..${to}${part} (${d.against})`;
  else if (d.status === "error") span.textContent = `compare failed: ${d.error}`;
  else {
    r.highlight = new Set(d.entities.map((e) => e.id));
    const n = r.highlight.size;
    const inputs = d.inputs_differ ? "; the recorded inputs differ" : "";
    span.innerHTML = `<button id="replay-jump">jump to tick ${d.explained_at_tick}</button> diverges at tick ${d.tick} (${d.root.replace("_", " ")} root, ${d.against}, ticks ${from}..${to}${part} compared): ${n} ${n === 1 ? "entity differs" : "entities differ"}${inputs}`;
    $("replay-jump").onclick = () => {
      r.playing = false;
      r.tick = d.explained_at_tick;
      // The investigation starts at the first differing entity: selected, followed, close up.
      if (d.entities.length) {
        r.selected = d.entities[0].id;
        r.inspected = null;
        state.camera.follow = true;
        state.camera.mmPerPx = Math.min(state.camera.mmPerPx, 100);
      }
    };
  }
}

/** The keyboard shortcuts, as the `?` overlay lists them. */
const KEYS = [
  ["Space", "play / pause (at the end: from the start)"],
  ["Right / Left", "one tick forward / back"],
  ["Shift + Right / Left", "one second forward / back"],
  ["Home / End", "first / last tick"],
  ["[ / ]", "previous / next event (of the lane focused by a click on its name)"],
  ["drag on the timeline", "zoom to that range (wheel: zoom; double click: whole recording)"],
  ["?", "this list"],
];

/** Play or pause; playing from the last tick starts again from the first. */
function togglePlay(r) {
  if (!r.playing && Math.floor(r.tick) >= r.info.last_tick) r.tick = r.info.start_tick;
  r.playing = !r.playing;
}

/** Pauses and moves `n` ticks (clamped to the recording). */
function stepBy(r, n) {
  r.playing = false;
  r.tick = Math.max(r.info.start_tick, Math.min(r.info.last_tick, Math.floor(r.tick) + n));
}

/** Draws the recording at the current tick; returns [boids, avatars] drawn. */
export function drawReplay(state) {
  const r = state.replay;
  const now = performance.now();
  const p = r.playback;
  if (r.playing) {
    p.fill(Math.floor(r.tick), r.speed);
    // The clock waits for states not fetched yet rather than skip them.
    const newest = p.newest();
    const until = newest === null ? r.tick : newest >= r.info.last_tick ? r.info.last_tick : newest + p.stride - 1e-6;
    r.tick = Math.min(r.tick + (r.speed * r.info.tick_rate_hz * (now - lastFrameMs)) / 1000, Math.max(until, r.tick), r.info.last_tick);
    const f = p.take(Math.floor(r.tick));
    if (f) show(r, f);
    // At the end (the last tick may lie between two strides: a pause then fetches it).
    if (r.tick >= r.info.last_tick && (p.newest() ?? -Infinity) + p.stride > r.info.last_tick) r.playing = false;
  } else if (p.frames.length || p.inFlight) p.clear();
  lastFrameMs = now;
  const tick = Math.floor(r.tick);
  if (r.urlView && state.terrain) {
    const { zoom, x, y } = r.urlView;
    if (zoom !== null) state.camera.mmPerPx = Math.min(Math.max(zoom, 10), 5000);
    if (x !== null && y !== null) [state.camera.x_mm, state.camera.y_mm] = [x, y];
    r.urlView = null;
  }
  if (state.camera.follow) {
    const i = r.client === null && r.frame && r.selected !== null ? r.frame.indexOf(r.selected) : -1;
    const at = r.client !== null ? r.clientView?.centre : i >= 0 ? [r.frame.x(i), r.frame.y(i)] : null;
    if (at && !(r.clientView?.missing && r.client !== null)) [state.camera.x_mm, state.camera.y_mm] = at;
  }
  if (!r.playing) requestState(r, tick);
  if (r.client !== null) requestClient(r, tick);
  if (r.selected !== null) requestEntity(r);
  let boids = 0, avatars = 0;
  const cv = r.client !== null ? r.clientView : null;
  if (cv) {
    const [cx, cy] = cv.centre;
    circle(cx, cy, r.info.view_radius_mm, "#ffffff60", null, [2, 6]);
    const rings = [];
    for (const [id, qx, qy, qvx, qvy, kind] of cv.view) {
      const [x, y] = toScreen(qx * 64 + 32, qy * 64 + 32);
      if (kind === KIND_AVATAR) { avatars++; drawAvatar(x, y, id === cv.avatar_id); } else { boids++; drawBoid(x, y, qvx, qvy); }
      if (r.highlight.has(id) || id === r.selected) rings.push([x, y, id]);
    }
    flushEntities();
    for (const [x, y, id] of rings) ring(x, y, id === r.selected ? "#40e0ff" : "#ff5050");
  } else {
    const rings = [], f = r.frame, boidCount = r.info.boid_count;
    const [k, ox, oy] = screenTransform();
    const marked = r.highlight.size > 0 || r.selected !== null;
    for (let i = 0; f && i < f.n; i++) {
      const id = f.id(i), x = f.x(i) * k + ox, y = f.y(i) * k + oy;
      if (id < boidCount) { boids++; drawBoid(x, y, f.vx(i), f.vy(i)); } else { avatars++; drawAvatar(x, y); }
      if (marked && (r.highlight.has(id) || id === r.selected)) rings.push([x, y, id]);
    }
    flushEntities();
    for (const [x, y, id] of rings) ring(x, y, id === r.selected ? "#40e0ff" : "#ff5050");
  }
  drawTrack(r);
  r.timeline.draw();
  refreshPins(r);
  inspector(r);
  $("replay-tick").textContent = r.shown ?? "-";
  $("replay-slider").value = String(tick);
  $("replay-play").textContent = r.playing ? "pause" : "play";
  toUrl(r, state);
  return [boids, avatars];
}

function ring(x, y, colour) {
  ctx.beginPath();
  ctx.arc(x, y, 9, 0, Math.PI * 2);
  ctx.strokeStyle = colour;
  ctx.lineWidth = 2;
  ctx.stroke();
}

function drawTrack(r) {
  const track = r.selected !== null && r.inspected?.entity.id === r.selected ? r.inspected.track : null;
  if (!track || track.length < 2) return;
  ctx.beginPath();
  track.forEach(([, x, y], i) => { const [sx, sy] = toScreen(x, y); if (i) ctx.lineTo(sx, sy); else ctx.moveTo(sx, sy); });
  ctx.strokeStyle = "#40e0ffb0";
  ctx.lineWidth = 2;
  ctx.stroke();
}

/** Picks the entity drawn nearest to CSS pixel (px, py), within 12 px; elsewhere clears. */
export function pickAt(state, px, py) {
  const r = state.replay;
  const cv = r.client !== null ? r.clientView : null;
  const points = cv
    ? cv.view.map(([id, qx, qy]) => [id, ...toScreen(qx * 64 + 32, qy * 64 + 32)])
    : r.entities.map((e) => [e.id, ...toScreen(e.x_mm, e.y_mm)]);
  let best = null, bestD = 12;
  for (const [id, x, y] of points) {
    const d = Math.hypot(x - px, y - py);
    if (d < bestD) { best = id; bestD = d; }
  }
  r.selected = best;
  r.inspected = null;
  // The camera follows what was picked (a drag frees it again).
  state.camera.follow = best !== null;
}

/** Shows frame `f` (a new tick counts as a state shown). */
function show(r, f) {
  if (f.tick !== r.shown) r.statesShown++;
  r.frame = f;
  r.shown = f.tick;
}

function requestState(r, tick) {
  if (r.inFlight || tick === r.shown) return;
  r.inFlight = true;
  fetch(`/replay/state?tick=${tick}`)
    .then((resp) => (resp.ok ? resp.arrayBuffer() : Promise.reject(new Error(`HTTP ${resp.status}`))))
    .then((buf) => {
      // A seek answered after playback started is stale: playback shows its own frames.
      if (!r.playing) show(r, framesOf(buf)[0]);
    })
    .catch((e) => console.warn("replay state", e))
    .finally(() => { r.inFlight = false; });
}

function requestClient(r, tick) {
  if (r.clientBusy || (r.clientView?.tick === tick && r.clientView?.client === r.client)) return;
  r.clientBusy = true;
  const client = r.client;
  const missing = (why) => ({ tick, client, view: [], missing: true, why, centre: [0, 0] });
  json(`/replay/client?tick=${tick}&client=${client}`)
    // Before it joined, after it left or before its first snapshot a client has no view:
    // the server says which (an answer, not an error), and the markers say when.
    .then((v) => { if (r.client === client) r.clientView = v.absent ? missing(`${v.absent}${whenPresent(r, client, tick)}`) : v; })
    .catch((e) => { if (r.client === client) r.clientView = missing(String(e.message ?? e)); })
    .finally(() => { r.clientBusy = false; });
}

/** When `client` joined or left around `tick`, from the timeline's markers (or ""). */
function whenPresent(r, client, tick) {
  const mine = (r.markers?.markers ?? []).filter(([, kind, c]) => c === client && (kind === MARKER.JOIN || kind === MARKER.SPECTATE || kind === MARKER.LEAVE));
  const before = mine.filter(([t]) => t <= tick).pop();
  const after = mine.find(([t]) => t > tick);
  if (before && before[1] === MARKER.LEAVE) return ` (it left at tick ${before[0]})`;
  if (!before && after) return ` (it joins at tick ${after[0]})`;
  return "";
}

function requestEntity(r) {
  const tick = r.shown;
  if (r.inspectBusy || tick === null || (r.inspected?.tick === tick && r.inspected?.entity.id === r.selected)) return;
  r.inspectBusy = true;
  const id = r.selected;
  json(`/replay/entity?tick=${tick}&id=${id}`)
    .then((v) => { if (r.selected === id) r.inspected = v; })
    .catch(() => { if (r.selected === id) r.inspected = { tick, entity: { id, kind: "gone" }, track: [] }; })
    .finally(() => { r.inspectBusy = false; });
}

/** The `/replay/probe` field an inspector field is pinned as (the server lists the fields
 * it probes in `info.probe_fields`; one is named differently), or undefined. */
function probeFieldOf(r, name) {
  const field = name === "ack_lag_ticks" ? "ack_lag" : name;
  return r.info.probe_fields.includes(field) ? field : undefined;
}
const PLOT_W = 290, PLOT_H = 46;

/** Fetches each pin's series over the timeline's visible range when the range changed. */
function refreshPins(r) {
  const { from, to } = r.timeline;
  for (const pin of r.pins) {
    const key = `${from}/${to}`;
    if (pin.busy || pin.key === key) continue;
    pin.key = key;
    const rangeMax = r.info.probe_range_ticks_max;
    if (to - from + 1 > rangeMax) {
      pin.series = null;
      pin.error = `zoom the timeline to at most ${rangeMax} ticks to plot`;
      continue;
    }
    pin.busy = true;
    fetch(`/replay/probe?id=${pin.id}&field=${pin.field}&from=${from}&to=${to}`)
      .then((resp) => (resp.ok ? resp.json() : resp.text().then((t) => Promise.reject(new Error(t.trim())))))
      .then((report) => { pin.series = report.series; pin.from = from; pin.to = to; pin.error = null; pin.svg = plot(report.series, from, to); })
      .catch((e) => { pin.series = null; pin.error = String(e.message ?? e); })
      .finally(() => { pin.busy = false; });
  }
}

/** An SVG polyline of `series` ([tick, value|null]) over ticks from..to (at most ~600
 * points: every k-th), with its least and greatest value. */
function plot(series, from, to) {
  const values = series.filter(([, v]) => v !== null).map(([, v]) => v);
  if (!values.length) return `<div class="absent">absent over ${from}..${to}</div>`;
  const lo = Math.min(...values), hi = Math.max(...values);
  const k = Math.max(1, Math.ceil(series.length / 600));
  const x = (t) => ((t - from) / Math.max(1, to - from)) * PLOT_W;
  const y = (v) => PLOT_H - 2 - ((v - lo) / Math.max(1, hi - lo)) * (PLOT_H - 4);
  const runs = [];
  let run = [];
  series.forEach(([t, v], i) => {
    if (v === null) { if (run.length) runs.push(run); run = []; return; }
    if (i % k === 0 || i === series.length - 1) run.push(`${x(t).toFixed(1)},${y(v).toFixed(1)}`);
  });
  if (run.length) runs.push(run);
  const lines = runs.map((pts) => `<polyline points="${pts.join(" ")}" fill="none" stroke="#40e0ff" stroke-width="1.5"/>`).join("");
  return `<svg width="${PLOT_W}" height="${PLOT_H}" style="background:#ffffff10;display:block">${lines}PLAYHEAD</svg><div>${from}..${to}: ${lo} to ${hi}</div>`;
}

/** The pinned fields: each one's value at the tick shown and its plot. */
function pinnedRows(r) {
  if (!r.pins.length) return [];
  const rows = ["<h3>pinned</h3>"];
  r.pins.forEach((pin, i) => {
    const at = pin.series?.find(([t]) => t === r.shown);
    const value = at ? (at[1] ?? "absent") : "-";
    rows.push(`<div>entity ${pin.id} <b>${pin.label}</b> = <b class="pin-value">${value}</b> <a href="#" data-unpin="${i}" title="unpin">x</a></div>`);
    if (pin.error) rows.push(`<div class="absent">${pin.error}</div>`);
    else if (pin.svg) {
      const px = r.shown !== null && r.shown >= pin.from && r.shown <= pin.to ? (((r.shown - pin.from) / Math.max(1, pin.to - pin.from)) * PLOT_W).toFixed(1) : null;
      rows.push(pin.svg.replace("PLAYHEAD", px === null ? "" : `<line x1="${px}" x2="${px}" y1="0" y2="${PLOT_H}" stroke="#fff" stroke-width="1"/>`));
    } else rows.push(`<div>plotting ${pin.label}...</div>`);
  });
  return rows;
}

/** The side panel: pinned fields, the picked entity's fields and differences, and the
 * client's snapshot. */
function inspector(r) {
  const rows = pinnedRows(r);
  const cv = r.client !== null ? r.clientView : null;
  if (cv) {
    const line = r.markers?.clients.find((c) => c.client === r.client);
    rows.push(`<h3>as client ${r.client} saw it</h3>`);
    if (cv.missing) rows.push(`<div class="absent">${cv.why ?? "no snapshot at or before this tick"}</div>`);
    else {
      rows.push(`<div>snapshot of tick <b>${cv.snapshot_tick}</b>, ${cv.snapshot_bytes} B, ${cv.view.length} in view</div>`);
      rows.push(`<div>baseline: ${cv.baseline_tick === null ? "none (full snapshot)" : `tick ${cv.baseline_tick}`}</div>`);
      rows.push(`<div>acked: ${cv.acked_tick === null ? "nothing yet" : `tick ${cv.acked_tick} (ack lag <b>${cv.snapshot_tick - cv.acked_tick}</b> ticks)`}</div>`);
    }
    if (line) rows.push(`<div>not acked: <b>${line.unacked}</b> of ${line.snapshots} snapshots${r.markers.complete ? "" : " so far"}</div>`);
  }
  const e = r.inspected?.entity;
  if (r.selected !== null) {
    rows.push(`<h3>entity ${r.selected}${r.inspected ? ` at tick ${r.inspected.tick}` : ""}</h3>`);
    const pinned = (k) => r.pins.some((p) => p.id === r.selected && p.label === k);
    const name = (k) => (probeFieldOf(r, k) ? `<a href="#" data-pin="${k}" title="${pinned(k) ? "unpin" : "pin: watch it as you step, plot it over the timeline's range"}">${pinned(k) ? "&#9679; " : ""}${k}</a>` : k);
    if (e) rows.push(`<table>${Object.entries(e).map(([k, v]) => `<tr><td>${name(k)}</td><td>${v ?? "-"}</td></tr>`).join("")}</table>`);
    if (r.inspected?.track.length) rows.push(`<div>track: ${r.inspected.track.length} ticks (last ${r.info.track_seconds} s)</div>`);
    const diffs = (r.divergence?.entities ?? []).filter((d) => d.id === r.selected);
    if (diffs.length) rows.push(`<h3>differs at tick ${r.divergence.explained_at_tick}</h3><table class="diff"><tr><th>field</th><th>this</th><th>other</th></tr>${diffs.map((d) => `<tr><td>${d.field}</td><td title="${d.a}">${d.a}</td><td title="${d.b}">${d.b}</td></tr>`).join("")}</table>`);
  }
  const html = rows.join("");
  const panel = $("inspector");
  if (panel.dataset.html !== html) {
    panel.dataset.html = html;
    panel.innerHTML = html;
    panel.style.display = html ? "block" : "none";
  }
}
