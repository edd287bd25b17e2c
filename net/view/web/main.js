// The live viewer: join, steer, cast, and draw the world as this client's snapshots show
// it. Entities are drawn by extrapolation from the values they were last sent with:
// position + velocity x (now - sent tick), where "now" is the newest snapshot's tick plus
// the time since it arrived, in ticks. So carried-over entities (section 5 of
// SNAPSHOT_FORMAT.md) never stand still at a stale position, and motion is smooth at the
// display's frame rate without a delay buffer.
//
// A spectator (HELLO flag "spectate") has no avatar: WASD, the arrows or a drag move a
// free camera, which is sent as CAMERA whenever it moved, and the server's snapshots
// follow it.
//
// The page asks for a reconnect token (PROTOCOL.md section 2). When the connection drops
// (1006) or the world moves (4001), it reconnects by itself and takes its avatar back with
// the token, keeping its decoder, for as long as the server's grace allows. With
// `?fleet=http://HOST:PORT&world=ID[&token=T]` it asks the fleet for the world's server
// before every connection (`POST /api/worlds/{id}/join`), so it follows a moved world.

import { camera, canvas, circle, ctx, drawAvatar, drawBackground, drawBoid, flushEntities, toScreen, toWorld } from "./draw.js";
import { drawReplay, enterWorld, pickAt, startReplay } from "./replay.js";
import { ClientDecoder, KIND_AVATAR } from "./snapshot.js";
import { CLOSE, SNAPSHOT, VIEWER_TERRAIN } from "./layout.js";
import { decodeServer, encodeAck, encodeBookmark, encodeCamera, encodeHello, encodeInput, encodeInputAck, encodePing, ZONE_HUNTING_FIELD, ZONE_TOWN } from "./protocol.js";

const CLOSE_REASONS = {
  1000: "closed normally",
  1001: "the server is shutting down",
  1002: "protocol error",
  1006: "the connection dropped",
  1008: "refused (policy)",
  1009: "message too big",
  1011: "server error",
  1013: "the server is full or this client was too slow; try again later",
  [CLOSE.REJOIN]: "the world moved: joining it again",
  [CLOSE.RECLAIM_REFUSED]: "the avatar could not be taken back: join again",
  [CLOSE.REPLACED]: "another connection took this avatar",
};

/** Delays between reconnect attempts (ms); the last one repeats until the grace is over. */
const RECONNECT_DELAYS_MS = [50, 150, 300, 600, 1000, 2000];
/** How long the page keeps trying to take its avatar back (the server's default grace). */
const RECONNECT_GIVE_UP_MS = 30000;

const params = new URLSearchParams(location.search);
const fleet = params.get("fleet") && params.get("world")
  ? { url: params.get("fleet").replace(/\/$/, ""), world: params.get("world"), token: params.get("token") }
  : null;

const $ = (id) => document.getElementById(id);

/** Everything the page knows; exposed as window.migratory for tests and the console. */
const state = {
  connection: "not connected",
  names: {}, // players' names by avatar id (/viewer/names)
  castFx: null, // the last cast: when, where, the score before, "+N caught" or "missed"
  closeReason: null,
  closeCodes: [], // every close's code, in order (a reconnect's refusals follow a 4001)
  welcome: null, // the live session's WELCOME, as decoded; never set in replay mode
  /** What drawing needs of the world, whichever mode set it: {zones, viewRadiusMm,
   * tickRateHz}, from WELCOME (live) or /replay/info (`enterWorld`). */
  world: null,
  decoder: new ClientDecoder(),
  latest: null, // {header, view, sentTicks, arrivedMs}
  snapshotTimes: [],
  bytesWindow: [],
  dropped: 0,
  rttMs: null,
  drawn: { entities: 0, boids: 0, avatars: 0, terrain: false },
  own: null, // the own avatar's drawn position {x_mm, y_mm}
  camera,
  terrain: null, // {image (canvas), cells, worldSizeMm, hash}
  lastCastTick: null,
  spectating: false,
  /** The newest snapshot tick the next INPUT_ACK acks (null: none waiting). */
  ackDue: null,
  drawMs: [], // how long each of the last 600 frames took to draw
  sentCamera: null, // a spectator's camera as last sent {x_mm, y_mm}: the server's view centre
  reconnectToken: null, // from the newest WELCOME
  reclaims: 0, // avatars taken back after a drop or a move
  reconnecting: null, // {since, attempt} while the page tries to take its avatar back
};
window.migratory = state;

let ws = null;
let seq = 0;
/** The pending answer to the newest snapshot (`replyLater`). */
let replyTimer = null;
const keys = new Set();
let pointer = null; // {x, y} in CSS pixels while held
let castRequested = false;

function setConnection(s, bad = false) {
  state.connection = s;
  $("state").textContent = s;
  $("state").className = bad ? "bad" : "";
}

async function loadTerrain() {
  const resp = await fetch("/viewer/terrain");
  if (!resp.ok) throw new Error(`terrain: HTTP ${resp.status}`);
  const buf = new Uint8Array(await resp.arrayBuffer());
  const dv = new DataView(buf.buffer);
  const T = VIEWER_TERRAIN;
  if (String.fromCharCode(...buf.subarray(T.MAGIC, T.MAGIC + 4)) !== "MGVT") throw new Error("terrain: bad magic");
  const cells = dv.getUint32(T.EDGE, true);
  const worldSizeMm = dv.getUint32(T.WORLD_SIZE_MM, true);
  const hash = buf.slice(T.CONTENT_HASH, T.SHADES);
  const shades = buf.subarray(T.SHADES, T.SHADES + cells * cells);
  const image = document.createElement("canvas");
  image.width = image.height = cells;
  const g = image.getContext("2d");
  const data = g.createImageData(cells, cells);
  for (let i = 0; i < cells * cells; i++) {
    const s = shades[i];
    let r, gr, b;
    if (s === 0) [r, gr, b] = [26, 70, 110]; // water
    else if (s < 120) [r, gr, b] = [60 + s / 3, 110 + s / 2, 60];
    else if (s < 210) [r, gr, b] = [120 + (s - 120) / 2, 120 + (s - 120) / 4, 80];
    else [r, gr, b] = [200 + (s - 210), 200 + (s - 210), 200 + (s - 210)];
    data.data.set([r, gr, b, 255], i * 4);
  }
  g.putImageData(data, 0, 0);
  state.terrain = { image, cells, worldSizeMm, hash };
}

/** The WebSocket URL to use now: this page's server, or the one the fleet answers. */
async function serverUrl() {
  if (!fleet) return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  const headers = fleet.token ? { Authorization: `Bearer ${fleet.token}` } : {};
  const resp = await fetch(`${fleet.url}/api/worlds/${encodeURIComponent(fleet.world)}/join`, { method: "POST", headers });
  if (!resp.ok) throw new Error(`the fleet's join: HTTP ${resp.status}`);
  return (await resp.json()).ws_url;
}

let joined = null; // {name, spectate} once the player asked to join

async function connect(name, spectate = false, reclaim = false) {
  joined = { name, spectate };
  state.spectating = spectate;
  state.ackDue = null;
  setConnection(reclaim ? "reconnecting" : "connecting", reclaim);
  let url;
  try {
    url = await serverUrl();
  } catch (e) {
    if (reclaim) return retry();
    return setConnection(`could not join: ${e.message}`, true);
  }
  ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const token = reclaim ? state.reconnectToken : null;
  ws.onopen = () => {
    setConnection(reclaim ? "reconnecting" : "joining", reclaim);
    // A reclaim keeps the decoder: its views are the baselines the server deltas against.
    ws.send(encodeHello(name, state.terrain?.hash ?? null, spectate, { wantToken: true, reclaim: token, keepsBaselines: token !== null }));
  };
  ws.onmessage = (ev) => onMessage(new Uint8Array(ev.data));
  ws.onclose = (ev) => onClose(ev);
  ws.onerror = () => { if (!state.reconnecting) setConnection("connection error", true); };
}

function onClose(ev) {
  const words = ev.reason || CLOSE_REASONS[ev.code] || "closed";
  state.closeReason = { code: ev.code, reason: words };
  state.closeCodes.push(ev.code);
  const lost = ev.code === 1006 || ev.code === CLOSE.REJOIN;
  if (lost && state.reconnectToken && joined) {
    state.reconnecting ??= { since: performance.now(), attempt: 0 };
    return retry();
  }
  state.reconnecting = null;
  if (ev.code === CLOSE.RECLAIM_REFUSED) {
    state.reconnectToken = null;
    $("join").style.display = "";
  }
  setConnection(`closed (${ev.code}): ${words}`, true);
  showClosed(`The connection closed (${ev.code}): ${words}.`);
}

/** The overlay over a world that stopped: why, and a way back in (with the avatar, when
 * the page still holds its reconnect token and the server is back). */
function showClosed(why) {
  if (!joined || $("join").style.display === "") return;
  $("closed-why").textContent = why;
  $("closed").style.display = "flex";
}

$("closed-reconnect").addEventListener("click", () => {
  $("closed").style.display = "none";
  state.reconnecting = null;
  connect(joined.name, joined.spectate, state.reconnectToken !== null);
});
$("closed-menu").addEventListener("click", () => {
  $("closed").style.display = "none";
  $("join").style.display = "";
});

/** The next attempt to take the avatar back, after a growing delay, until the grace is over. */
function retry() {
  const r = state.reconnecting ?? (state.reconnecting = { since: performance.now(), attempt: 0 });
  if (performance.now() - r.since > RECONNECT_GIVE_UP_MS) {
    state.reconnecting = null;
    setConnection("closed: the server did not come back in time", true);
    showClosed("The connection was lost and the server did not come back within 30 seconds.");
    return;
  }
  const delay = RECONNECT_DELAYS_MS[Math.min(r.attempt, RECONNECT_DELAYS_MS.length - 1)];
  r.attempt += 1;
  setConnection(`reconnecting (attempt ${r.attempt})`, true);
  setTimeout(() => connect(joined.name, joined.spectate, true), delay);
}

function onMessage(bytes) {
  state.bytesWindow.push([performance.now(), bytes.length]);
  let m;
  try {
    m = decodeServer(bytes);
  } catch (e) {
    console.warn("unreadable server message", e);
    return;
  }
  if (m.type === "welcome") {
    const reclaimed = state.reconnecting !== null;
    if (reclaimed) state.reclaims += 1;
    state.reconnecting = null;
    state.reconnectToken = m.reconnectToken;
    state.welcome = m;
    enterWorld(state, { zones: m.zones, viewRadiusMm: m.viewRadiusMm, tickRateHz: m.tickRateHz });
    if (!reclaimed) {
      state.camera.follow = !state.spectating;
      state.camera.mmPerPx = (m.viewRadiusMm * 2.4) / Math.min(innerWidth, innerHeight);
    }
    if (state.spectating && !reclaimed) {
      // The server's camera starts at the town's centre.
      const town = m.zones.find((z) => z.kind === ZONE_TOWN);
      if (town) [state.camera.x_mm, state.camera.y_mm] = [town.x_mm, town.y_mm];
      state.sentCamera = { x_mm: state.camera.x_mm, y_mm: state.camera.y_mm };
    }
    setConnection(state.spectating ? "spectating" : "playing");
    $("join").style.display = "none";
  } else if (m.type === "snapshot") {
    onSnapshot(m.snapshot);
  } else if (m.type === "pong") {
    state.rttMs = performance.now() - m.nonce / 1000;
  }
}

function onSnapshot(bytes) {
  // A world resumed after a crash starts behind what this page saw: its views of those
  // ticks are of another history.
  const tick = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(SNAPSHOT.TICK, true);
  if (state.latest && tick <= state.latest.header.tick) {
    state.decoder = new ClientDecoder();
    state.latest = null;
  }
  let r;
  try {
    r = state.decoder.decode(bytes);
  } catch (e) {
    console.warn("snapshot rejected", e.kind ?? e);
    return;
  }
  const prev = state.latest?.header.tick;
  const interval = state.welcome?.snapshotIntervalTicks ?? 3;
  if (prev !== undefined && r.header.tick > prev + interval) {
    state.dropped += Math.round((r.header.tick - prev) / interval) - 1;
  }
  if (prev === undefined || r.header.tick > prev) {
    state.latest = { ...r, arrivedMs: performance.now() };
  }
  state.snapshotTimes.push(performance.now());
  // A hidden tab's timers fire about once a second: its replies would ack snapshots
  // later than the server remembers them, so it answers at once.
  if (state.spectating || document.hidden) ws.send(encodeAck(r.header.tick));
  else replyLater(r.header.tick);
}

/** A player answers a snapshot half a snapshot interval later with one INPUT_ACK: its
 * steering and the ACK in one message, so one TCP segment, and early enough before the
 * next snapshot that the server's delayed ACK rides on it (net/wire/PROTOCOL.md, ACK). */
function replyLater(tick) {
  state.ackDue = tick;
  if (replyTimer !== null) return;
  const w = state.welcome;
  const halfIntervalMs = w ? (500 * w.snapshotIntervalTicks) / w.tickRateHz : 25;
  replyTimer = setTimeout(() => {
    replyTimer = null;
    sendInput();
  }, halfIntervalMs);
}

/** The current tick, fractional: the newest snapshot's tick plus time since it came. */
function renderTick() {
  if (!state.latest || !state.welcome) return 0;
  const elapsed = (performance.now() - state.latest.arrivedMs) / 1000;
  // At most one snapshot interval ahead, so a stalled connection freezes instead of drifting.
  const ahead = Math.min(elapsed * state.welcome.tickRateHz, state.welcome.snapshotIntervalTicks * 2);
  return state.latest.header.tick + ahead;
}

function positionOf(e, sentTick, tick) {
  const dt = tick - sentTick;
  const unit = SNAPSHOT.POS_UNIT_MM, v = SNAPSHOT.VEL_UNIT_MM_PER_TICK * dt;
  return { x_mm: e.qx * unit + unit / 2 + e.qvx * v, y_mm: e.qy * unit + unit / 2 + e.qvy * v };
}

function inHuntingField(p) {
  return (state.welcome?.zones ?? []).some((z) => z.kind === ZONE_HUNTING_FIELD && Math.hypot(p.x_mm - z.x_mm, p.y_mm - z.y_mm) <= z.radius_mm);
}

function draw() {
  const started = performance.now();
  const cam = state.camera;
  const w = state.welcome;
  state.drawn.terrain = drawBackground(state.terrain, state.world?.zones) || state.drawn.terrain;
  let boids = 0, avatars = 0;
  if (state.spectating) panWithKeys();
  if (state.replay) {
    [boids, avatars] = drawReplay(state);
  } else if (state.latest && w) {
    const tick = renderTick();
    const { view, sentTicks, header } = state.latest;
    for (let i = 0; i < view.length; i++) {
      const e = view[i];
      const p = positionOf(e, sentTicks[i], tick);
      const [x, y] = toScreen(p.x_mm, p.y_mm);
      if (e.kind === KIND_AVATAR) {
        avatars++;
        const own = e.id === header.avatarId;
        if (own) {
          state.own = p;
          if (cam.follow) { cam.x_mm = p.x_mm; cam.y_mm = p.y_mm; }
        }
        drawAvatar(x, y, own, state.names[e.id] ?? null);
      } else {
        boids++;
        // The boids a cast reached flash for a moment.
        const fx = state.castFx, hot = fx && performance.now() - fx.at < CAST_FLASH_MS && Math.hypot(p.x_mm - fx.x_mm, p.y_mm - fx.y_mm) <= w.castRadiusMm;
        drawBoid(x, y, e.qvx, e.qvy, hot ? "#ffd040" : undefined);
      }
    }
    flushEntities();
    if (state.sentCamera) circle(state.sentCamera.x_mm, state.sentCamera.y_mm, w.viewRadiusMm, "#ffffff40", null, [2, 6]);
    drawCastFx(w);
    if (state.own) {
      circle(state.own.x_mm, state.own.y_mm, w.viewRadiusMm, "#ffffff40", null, [2, 6]);
      const ready = castReady();
      if (inHuntingField(state.own)) circle(state.own.x_mm, state.own.y_mm, w.castRadiusMm, ready ? "#70e090" : "#70e09060");
    }
  }
  state.drawn = { entities: boids + avatars, boids, avatars, terrain: state.drawn.terrain };
  if (!state.replay) hud();
  // The cost of the last frames' drawing, for the frame-time benchmark and the console.
  state.drawMs.push(performance.now() - started);
  if (state.drawMs.length > 600) state.drawMs.shift();
  requestAnimationFrame(draw);
}

function castReady() {
  const w = state.welcome;
  if (!w || !state.latest) return false;
  return state.lastCastTick === null || state.latest.header.tick - state.lastCastTick >= w.castCooldownTicks;
}

function hud() {
  const now = performance.now();
  state.snapshotTimes = state.snapshotTimes.filter((t) => now - t < 1000);
  state.bytesWindow = state.bytesWindow.filter(([t]) => now - t < 1000);
  const h = state.latest?.header;
  $("tick").textContent = h ? h.tick : "-";
  $("score").textContent = h && !state.spectating ? h.score : "-";
  $("rtt").textContent = state.rttMs === null ? "-" : `${state.rttMs.toFixed(1)} ms`;
  $("rate").textContent = `${state.snapshotTimes.length}/s`;
  $("bytes").textContent = `${state.bytesWindow.reduce((s, [, n]) => s + n, 0)} B/s`;
  $("inview").textContent = state.latest ? state.latest.view.length : "-";
  $("dropped").textContent = state.dropped;
  const w = state.welcome;
  if (state.spectating) $("cast").textContent = "spectating (no avatar)";
  else if (!w || !state.own) $("cast").textContent = "-";
  else if (!inHuntingField(state.own)) $("cast").textContent = "outside a hunting field";
  else if (castReady()) $("cast").textContent = "ready (space)";
  else $("cast").textContent = `cooling down ${((w.castCooldownTicks - (state.latest.header.tick - state.lastCastTick)) / w.tickRateHz).toFixed(1)} s`;
}

/** The direction the keys point, as {dx, dy} in -1..1. */
function keyDirection() {
  let dx = 0, dy = 0;
  if (keys.has("KeyA") || keys.has("ArrowLeft")) dx -= 1;
  if (keys.has("KeyD") || keys.has("ArrowRight")) dx += 1;
  if (keys.has("KeyW") || keys.has("ArrowUp")) dy -= 1;
  if (keys.has("KeyS") || keys.has("ArrowDown")) dy += 1;
  return { dx, dy };
}

let lastPanMs = performance.now();
/** A spectator's keys move the camera at 600 screen pixels a second, inside the world. */
function panWithKeys() {
  const now = performance.now();
  const dt = Math.min(now - lastPanMs, 100) / 1000;
  lastPanMs = now;
  const { dx, dy } = keyDirection();
  const cam = state.camera;
  cam.x_mm += dx * 600 * dt * cam.mmPerPx;
  cam.y_mm += dy * 600 * dt * cam.mmPerPx;
  const size = state.welcome?.worldSizeMm ?? state.terrain?.worldSizeMm;
  if (size) {
    cam.x_mm = Math.min(Math.max(cam.x_mm, 0), size - 1);
    cam.y_mm = Math.min(Math.max(cam.y_mm, 0), size - 1);
  }
}

/** 20 times a second: a spectator's camera when it moved a wire unit or more. */
function sendCamera() {
  const cam = state.camera, sent = state.sentCamera, unit = SNAPSHOT.POS_UNIT_MM;
  if (sent && Math.abs(cam.x_mm - sent.x_mm) < unit && Math.abs(cam.y_mm - sent.y_mm) < unit) return;
  seq += 1;
  state.sentCamera = { x_mm: Math.round(cam.x_mm), y_mm: Math.round(cam.y_mm) };
  ws.send(encodeCamera(seq, state.sentCamera.x_mm, state.sentCamera.y_mm));
}

/** How long a cast's ring and flash last, and how long to wait for its catch. */
const CAST_FLASH_MS = 500;
const CAST_RESULT_MS = 1500;

/** A cast's feedback: a ring spreading over the cast radius, then "+N caught" or "missed"
 * above the avatar, from the score the snapshots report. */
function drawCastFx(w) {
  const fx = state.castFx;
  if (!fx) return;
  const age = performance.now() - fx.at;
  const score = state.latest?.header.score ?? fx.scoreBefore;
  if (fx.result === null && score > fx.scoreBefore) fx.result = `+${score - fx.scoreBefore} caught`;
  if (fx.result === null && age > CAST_RESULT_MS) fx.result = "missed";
  if (age < CAST_FLASH_MS) {
    const k = age / CAST_FLASH_MS;
    circle(fx.x_mm, fx.y_mm, w.castRadiusMm * (0.3 + 0.7 * k), `rgba(255,208,64,${1 - k})`);
  }
  if (fx.result && age < CAST_RESULT_MS + 1500 && state.own) {
    const [x, y] = toScreen(state.own.x_mm, state.own.y_mm);
    ctx.font = "bold 14px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.fillStyle = fx.result === "missed" ? "#c0c8d0" : "#ffd040";
    ctx.fillText(fx.result, x, y - 26);
    ctx.textAlign = "start";
  }
  state.lastCastResult = fx.result;
}

/** The players' names by avatar id, from the server (every 2 s while connected). */
async function pollNames() {
  for (;;) {
    if (!state.replay && ws?.readyState === WebSocket.OPEN) {
      try {
        const resp = await fetch("/viewer/names");
        if (resp.ok) state.names = await resp.json();
      } catch (e) {
        console.warn("names", e);
      }
    }
    await new Promise((ok) => setTimeout(ok, 2000));
  }
}

function sendInput() {
  if (!ws || ws.readyState !== WebSocket.OPEN || !state.welcome) return;
  if (state.spectating) return sendCamera();
  let { dx, dy } = keyDirection();
  if (pointer && state.own) {
    const [wx, wy] = toWorld(pointer.x, pointer.y);
    dx = wx - state.own.x_mm;
    dy = wy - state.own.y_mm;
  }
  const len = Math.hypot(dx, dy);
  const throttle = len > 0 ? 100 : 0;
  const scale = len > 0 ? 30000 / len : 0;
  const cast = castRequested && castReady() && state.own && inHuntingField(state.own);
  if (cast) {
    state.lastCastTick = state.latest.header.tick;
    state.castFx = { at: performance.now(), x_mm: state.own.x_mm, y_mm: state.own.y_mm, scoreBefore: state.latest.header.score, result: null };
  }
  castRequested = false;
  seq += 1;
  const [x, y] = [Math.round(dx * scale), Math.round(dy * scale)];
  const ack = state.ackDue;
  state.ackDue = null;
  ws.send(ack === null ? encodeInput(seq, x, y, throttle, cast) : encodeInputAck(seq, x, y, throttle, cast, ack));
}

addEventListener("keydown", (e) => {
  if (e.target instanceof HTMLInputElement) return;
  keys.add(e.code);
  if (e.code === "Space") castRequested = true;
  if (e.code === "KeyF") state.camera.follow = true;
  if (e.code === "KeyB" && !state.replay && ws?.readyState === WebSocket.OPEN && state.welcome) {
    e.preventDefault(); // the B must not land in the note
    keys.delete(e.code);
    $("bookmark").style.display = "flex";
    $("bookmark-note").value = "";
    $("bookmark-note").focus();
  }
});
addEventListener("keyup", (e) => keys.delete(e.code));
let downAt = null;
let panFrom = null; // right or middle button: the camera is dragged, and stops following
canvas.addEventListener("contextmenu", (e) => e.preventDefault());
canvas.addEventListener("pointerdown", (e) => {
  // A spectator or a replay has nothing to steer: any button (or a finger) drags the
  // camera, and in a replay a click picks an entity.
  if (e.button === 1 || e.button === 2 || state.spectating || state.replay) {
    panFrom = { x: e.clientX, y: e.clientY };
    state.camera.follow = false;
    if (state.replay) downAt = { x: e.clientX, y: e.clientY, t: performance.now() };
    return;
  }
  pointer = { x: e.clientX, y: e.clientY };
  downAt = { x: e.clientX, y: e.clientY, t: performance.now() };
});
canvas.addEventListener("pointermove", (e) => {
  if (panFrom) {
    state.camera.x_mm -= (e.clientX - panFrom.x) * state.camera.mmPerPx;
    state.camera.y_mm -= (e.clientY - panFrom.y) * state.camera.mmPerPx;
    panFrom = { x: e.clientX, y: e.clientY };
  } else if (pointer) {
    pointer = { x: e.clientX, y: e.clientY };
  }
});
addEventListener("pointerup", (e) => {
  // A short tap or click without moving casts (live) or picks an entity (replay).
  if (downAt && performance.now() - downAt.t < 250 && Math.hypot(e.clientX - downAt.x, e.clientY - downAt.y) < 6) {
    if (state.replay) pickAt(state, e.clientX, e.clientY);
    else castRequested = true;
  }
  pointer = null;
  downAt = null;
  panFrom = null;
});
canvas.addEventListener("wheel", (e) => {
  e.preventDefault();
  // Zoom about the cursor: the world point under it stays under it.
  const [wx, wy] = toWorld(e.clientX, e.clientY);
  state.camera.mmPerPx = Math.min(Math.max(state.camera.mmPerPx * Math.exp(e.deltaY * 0.001), 10), 5000);
  const [ax, ay] = toWorld(e.clientX, e.clientY);
  state.camera.x_mm += wx - ax;
  state.camera.y_mm += wy - ay;
}, { passive: false });

// B: "something is wrong here". The server records the note with the tick (a bookmark
// the replay viewer's timeline shows); at most one a second is kept.
$("bookmark").addEventListener("submit", (e) => {
  e.preventDefault();
  $("bookmark").style.display = "none";
  if (ws?.readyState !== WebSocket.OPEN) return;
  ws.send(encodeBookmark($("bookmark-note").value.trim()));
  state.bookmarksSent = (state.bookmarksSent ?? 0) + 1;
  $("bookmarked").textContent = `sent near tick ${$("tick").textContent} (${state.bookmarksSent} this session; the server keeps one a second)`;
});
$("bookmark-note").addEventListener("keydown", (e) => {
  if (e.key === "Escape") { $("bookmark").style.display = "none"; e.target.blur(); }
});

$("name").value = `player-${Math.floor(Math.random() * 1000)}`;
$("joinform").addEventListener("submit", (e) => {
  e.preventDefault();
  connect($("name").value.trim() || "player", e.submitter?.id === "spectate");
});

/** Fits the whole world on screen, above the replay's controls when they are there. */
state.fitWorld = () => {
  const t = state.terrain;
  if (!t) return;
  const bar = document.getElementById("replay");
  const below = bar ? Math.max(0, innerHeight - bar.getBoundingClientRect().top) : 0;
  state.camera.mmPerPx = t.worldSizeMm / Math.max(100, Math.min(innerWidth, innerHeight - below));
  state.camera.x_mm = t.worldSizeMm / 2;
  state.camera.y_mm = t.worldSizeMm / 2 + (below / 2) * state.camera.mmPerPx;
};

pollNames();
startReplay(state).then((replaying) => { if (replaying) state.fitWorld(); }).catch((e) => console.error(e));

loadTerrain().then(() => state.fitWorld()).catch((e) => console.error(e));
// A player's INPUT answers each snapshot (replyLater); a spectator's CAMERA goes on a timer.
setInterval(() => { if (state.spectating) sendInput(); }, 50);
setInterval(() => { if (ws?.readyState === WebSocket.OPEN) ws.send(encodePing(performance.now() * 1000)); }, 1000);
requestAnimationFrame(draw);
