// Snapshot format version 1, decoded as kernel/SNAPSHOT_FORMAT.md specifies it: the
// browser's counterpart of kernel/src/snapshot/{codec,decoder}.rs. Checked against test
// vectors the Rust side generates (net/view/web/test/vectors/snapshots.json).

import { SNAPSHOT } from "./layout.js";

export const SNAPSHOT_VERSION = SNAPSHOT.FORMAT_VERSION;
export const HEADER_BYTES = SNAPSHOT.HEADER_BYTES;
export const NO_BASELINE = SNAPSHOT.NO_BASELINE;
export const SNAPSHOT_ENTRIES_MAX = 4096;
export const PREDICTION_DT_MAX = 1024;
export const DECODER_RING_LEN = 32;
export const KIND_BOID = 0;
export const KIND_AVATAR = 1;

/** A rejected snapshot; `kind` names the fault as the format's section 6 does. */
export class SnapshotError extends Error {
  constructor(kind, detail = "") {
    super(detail ? `${kind}: ${detail}` : kind);
    this.kind = kind;
  }
}

/** Reads the header (SNAPSHOT.HEADER_BYTES): {version, tick, baselineTick (null: full), avatarId, score}. */
export function decodeHeader(bytes) {
  if (bytes.length < 1) throw new SnapshotError("Truncated", "empty snapshot");
  if (bytes[0] !== SNAPSHOT_VERSION) throw new SnapshotError("UnsupportedVersion", `version ${bytes[0]}`);
  if (bytes.length < HEADER_BYTES) throw new SnapshotError("Truncated", "inside the header");
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const baseline = dv.getUint32(SNAPSHOT.BASELINE_TICK, true);
  return {
    version: bytes[SNAPSHOT.VERSION],
    tick: dv.getUint32(SNAPSHOT.TICK, true),
    baselineTick: baseline === NO_BASELINE ? null : baseline,
    avatarId: dv.getUint32(SNAPSHOT.AVATAR_ID, true),
    score: dv.getUint32(SNAPSHOT.SCORE, true),
  };
}

/** The LSB-first bit stream of section 2.2. */
class BitReader {
  constructor(bytes, start) {
    this.bytes = bytes;
    this.pos = start * 8;
    this.end = bytes.length * 8;
  }

  bit() {
    if (this.pos >= this.end) throw new SnapshotError("Truncated", "inside a stream field");
    const b = (this.bytes[this.pos >> 3] >> (this.pos & 7)) & 1;
    this.pos += 1;
    return b;
  }

  /** An n-bit fixed-width field, least significant bit first (n <= 16 here). */
  bits(n) {
    let v = 0;
    for (let j = 0; j < n; j++) v |= this.bit() << j;
    return v;
  }

  /** ue(k): plain Number arithmetic, since w can need 33 bits. */
  ue(k) {
    let z = 0;
    while (this.bit() === 0) {
      z += 1;
      if (z > 32 - k) throw new SnapshotError("CodeOverflow");
    }
    let low = 0;
    for (let i = 0; i < z + k; i++) low = low * 2 + this.bit();
    const v = 2 ** (z + k) + low - 2 ** k;
    if (v > 0xffffffff) throw new SnapshotError("CodeOverflow");
    return v;
  }

  se(k) {
    const u = this.ue(k);
    return u % 2 === 0 ? u / 2 : -(u + 1) / 2;
  }
}

function readIds(r, count) {
  const ids = new Array(count);
  let prev = -1;
  for (let i = 0; i < count; i++) {
    const id = prev + 1 + r.ue(4);
    if (id > 0xffffffff) throw new SnapshotError("IdOverflow");
    ids[i] = id;
    prev = id;
  }
  return ids;
}

function count(r) {
  const n = r.ue(3);
  if (n > SNAPSHOT_ENTRIES_MAX) throw new SnapshotError("CountTooLarge", `${n}`);
  return n;
}

function i8(v) {
  return v >= 128 ? v - 256 : v;
}

function inRange(v, lo, hi) {
  if (v < lo || v > hi) throw new SnapshotError("FieldOutOfRange", `${v} not in ${lo}..=${hi}`);
  return v;
}

/**
 * Applies a snapshot to `baseline` (an ascending array of entries
 * {id, kind, qx, qy, qvx, qvy}, or null for a full snapshot) and returns
 * {header, view, sent}: `sent[i]` is true when `view[i]` came in this snapshot (false:
 * carried over from the baseline).
 */
export function applySnapshot(bytes, baseline) {
  const header = decodeHeader(bytes);
  const base = header.baselineTick === null ? [] : baseline;
  if (base === null || base === undefined) throw new SnapshotError("BaselineMissing");
  const r = new BitReader(bytes, HEADER_BYTES);
  const removed = readIds(r, count(r));
  const n = count(r);
  let dt = 0;
  if (header.baselineTick !== null) {
    dt = Math.min((header.tick - header.baselineTick) >>> 0, PREDICTION_DT_MAX);
  }
  const byId = new Map();
  for (const e of base) byId.set(e.id, e);
  const removedSet = new Set(removed);
  for (const id of removed) if (!byId.has(id)) throw new SnapshotError("RemovedUnknown", `${id}`);
  const updates = new Map();
  let prev = -1;
  for (let i = 0; i < n; i++) {
    const id = prev + 1 + r.ue(4);
    if (id > 0xffffffff) throw new SnapshotError("IdOverflow");
    prev = id;
    if (r.bit() === 1) {
      const kind = r.bits(2);
      const qx = r.bits(16);
      const qy = r.bits(16);
      const qvx = i8(r.bits(8));
      const qvy = i8(r.bits(8));
      if (byId.has(id)) throw new SnapshotError("NewAlreadyPresent", `${id}`);
      updates.set(id, { id, kind, qx, qy, qvx, qvy });
    } else {
      const dqx = r.se(1);
      const dqy = r.se(1);
      const dqvx = r.se(0);
      const dqvy = r.se(0);
      const b = byId.get(id);
      if (b === undefined) throw new SnapshotError("DeltaUnknown", `${id}`);
      if (removedSet.has(id)) throw new SnapshotError("DeltaRemoved", `${id}`);
      const predX = b.qx + ((b.qvx * dt) >> 5);
      const predY = b.qy + ((b.qvy * dt) >> 5);
      updates.set(id, {
        id,
        kind: b.kind,
        qx: inRange(predX + dqx, 0, 65535),
        qy: inRange(predY + dqy, 0, 65535),
        qvx: inRange(b.qvx + dqvx, -128, 127),
        qvy: inRange(b.qvy + dqvy, -128, 127),
      });
    }
  }
  // Padding: zero bits to the byte boundary, then nothing.
  while (r.pos % 8 !== 0) {
    if (r.bit() !== 0) throw new SnapshotError("NonZeroPadding");
  }
  if (r.pos !== r.end) throw new SnapshotError("TrailingBytes", `${(r.end - r.pos) / 8} bytes`);
  const view = [];
  const sent = [];
  for (const e of base) {
    if (removedSet.has(e.id)) continue;
    const u = updates.get(e.id);
    view.push(u ?? e);
    sent.push(u !== undefined);
  }
  for (const [id, u] of updates) {
    if (!byId.has(id)) {
      view.push(u);
      sent.push(true);
    }
  }
  view.sort((a, b) => a.id - b.id);
  // Re-derive `sent` in id order after the sort.
  const sentIds = new Set(updates.keys());
  return { header, view, sent: view.map((e) => sentIds.has(e.id)) };
}

/**
 * A client's decoded views, by tick, as section 7 keeps them: up to 32, the lowest tick
 * replaced first; each entry remembers the tick its values were sent at.
 */
export class ClientDecoder {
  constructor() {
    this.views = new Map(); // tick -> {view, sentTicks}
  }

  /** Decodes one snapshot; on any error nothing changes and the error is thrown. */
  decode(bytes) {
    const header = decodeHeader(bytes);
    let baseline = null;
    let baseSent = null;
    if (header.baselineTick !== null) {
      const kept = this.views.get(header.baselineTick);
      if (kept === undefined) throw new SnapshotError("BaselineMissing", `tick ${header.baselineTick}`);
      baseline = kept.view;
      baseSent = new Map(kept.view.map((e, i) => [e.id, kept.sentTicks[i]]));
    }
    const { view, sent } = applySnapshot(bytes, baseline);
    const sentTicks = view.map((e, i) => (sent[i] ? header.tick : baseSent.get(e.id)));
    if (!this.views.has(header.tick) && this.views.size >= DECODER_RING_LEN) {
      let lowest = Infinity;
      for (const t of this.views.keys()) lowest = Math.min(lowest, t);
      this.views.delete(lowest);
    }
    this.views.set(header.tick, { view, sentTicks });
    return { header, view, sentTicks };
  }

  view(tick) {
    return this.views.get(tick)?.view ?? null;
  }

  newestTick() {
    let newest = null;
    for (const t of this.views.keys()) if (newest === null || t > newest) newest = t;
    return newest;
  }
}
