// Replay playback: the world at the ticks about to be shown, fetched ahead in windows
// (/replay/states, net/view/src/replay/mod.rs) and kept as views over the answer's bytes,
// so drawing 5,000 boids a frame builds no objects. Playing at speed S shows every
// `strideOf(S)`-th tick, up to 90 states a second (a new one each frame), and the clock waits for
// the next window rather than skip states it has not got.

import { REPLAY_STATE as AT } from "./layout.js";

/** Seconds of playback fetched ahead. */
const AHEAD_SECONDS = 0.6;
/** Most frames one window asks for (the server allows 120). */
const WINDOW_FRAMES_MAX = 60;

/** The world at one tick: `n` entities, read in place. */
export class Frame {
  constructor(buf, offset) {
    const head = new DataView(buf, offset, AT.HEADER_BYTES);
    this.tick = head.getUint32(AT.TICK, true);
    this.n = head.getUint32(AT.COUNT, true);
    this.bytes = AT.HEADER_BYTES + this.n * AT.ENTITY_BYTES;
    if (offset + this.bytes > buf.byteLength) throw new Error(`state of tick ${this.tick} is cut short`);
    this.dv = new DataView(buf, offset + AT.HEADER_BYTES, this.n * AT.ENTITY_BYTES);
  }
  id(i) { return this.dv.getUint32(i * AT.ENTITY_BYTES + AT.ID, true); }
  x(i) { return this.dv.getInt32(i * AT.ENTITY_BYTES + AT.X_MM, true); }
  y(i) { return this.dv.getInt32(i * AT.ENTITY_BYTES + AT.Y_MM, true); }
  vx(i) { return this.dv.getInt16(i * AT.ENTITY_BYTES + AT.VX, true); }
  vy(i) { return this.dv.getInt16(i * AT.ENTITY_BYTES + AT.VY, true); }
  /** The record index of entity `id`, or -1. Boids come first in id order, so a boid's
   * index is its id; avatars follow. */
  indexOf(id) {
    if (id < this.n && this.id(id) === id) return id;
    for (let i = 0; i < this.n; i++) if (this.id(i) === id) return i;
    return -1;
  }
  /** The entity at index `i` as an object (for tests and the console, not for drawing). */
  entity(i) { return { id: this.id(i), x_mm: this.x(i), y_mm: this.y(i), vx: this.vx(i), vy: this.vy(i) }; }
}

/** Every frame in one answer of /replay/state or /replay/states. */
export function framesOf(buf) {
  const frames = [];
  for (let offset = 0; offset < buf.byteLength;) {
    const f = new Frame(buf, offset);
    frames.push(f);
    offset += f.bytes;
  }
  return frames;
}

/** Ticks between the states fetched when playing at `speed`: about 90 a second, more
 * than a 60 Hz display shows, so a frame a little early or late still finds a state it
 * has not shown (at exactly 60 a second, frame-time jitter shows one state twice and
 * skips the next). */
export function strideOf(speed, tickRateHz) {
  return Math.max(1, Math.floor((speed * tickRateHz) / 90));
}

/** The frames fetched ahead of the playing clock. */
export class Playback {
  constructor(info) {
    this.info = info;
    this.frames = []; // ascending ticks, all on one stride
    this.stride = 1;
    this.inFlight = false;
    this.generation = 0; // answers to an older generation (before a seek) are dropped
    this.fetchMs = []; // how long each window took, for the benchmark
    this.retryAtMs = 0; // after a failed window, not before this
  }

  /** Forgets what was fetched (a seek, a pause, a new speed). */
  clear() {
    this.frames.length = 0;
    this.generation++;
    this.inFlight = false;
  }

  /** The newest tick fetched, or null. */
  newest() { return this.frames.length ? this.frames[this.frames.length - 1].tick : null; }

  /** The frame to show at `tick`: the newest at or before it (older ones are dropped). */
  take(tick) {
    let k = -1;
    while (k + 1 < this.frames.length && this.frames[k + 1].tick <= tick) k++;
    if (k < 0) return null;
    const f = this.frames[k];
    this.frames.splice(0, k);
    return f;
  }

  /** Fetches the next window when less than `AHEAD_SECONDS` of playback at `speed` is
   * in hand, starting at `tick` when nothing is. */
  fill(tick, speed) {
    const stride = strideOf(speed, this.info.tick_rate_hz);
    if (stride !== this.stride) { this.clear(); this.stride = stride; }
    const aheadTicks = AHEAD_SECONDS * speed * this.info.tick_rate_hz;
    const newest = this.newest();
    if (this.inFlight || performance.now() < this.retryAtMs || (newest !== null && newest - tick >= aheadTicks)) return;
    const from = newest === null ? tick : newest + stride;
    if (from > this.info.last_tick) return;
    const count = Math.min(WINDOW_FRAMES_MAX, Math.max(4, Math.ceil(aheadTicks / stride)));
    const generation = this.generation;
    this.inFlight = true;
    const t0 = performance.now();
    fetch(`/replay/states?from=${from}&count=${count}&stride=${stride}`)
      .then((resp) => (resp.ok ? resp.arrayBuffer() : resp.text().then((t) => Promise.reject(new Error(`HTTP ${resp.status}: ${t}`)))))
      .then((buf) => {
        if (generation !== this.generation) return;
        this.fetchMs.push(performance.now() - t0);
        if (this.fetchMs.length > 600) this.fetchMs.shift();
        for (const f of framesOf(buf)) this.frames.push(f);
      })
      .catch((e) => { console.warn("replay window", e); this.retryAtMs = performance.now() + 500; })
      .finally(() => { if (generation === this.generation) this.inFlight = false; });
  }
}
