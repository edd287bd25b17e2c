// The terrain wire format, version 1 (net/wire/TERRAIN_WIRE.md), client side: TERRAIN, or
// TERRAIN_HEADER then TERRAIN_CHUNKs, checked field by field, decompressed, unfiltered,
// verified against the blake3 checksum and turned into heights in metres.
//
// lz4 (the size-prepended block format) and blake3 are written here from their
// specifications. zstd is not: a zstd frame decoder is passed in (`{ zstd: (bytes,
// expectedLength) => Uint8Array }`, e.g. the `fzstd` package's `decompress`); without one
// a zstd payload is refused with a clear error. The viewer itself never needs this
// module: it draws the terrain from /viewer/terrain and names its hash in HELLO.

import { blake3 } from "./blake3.js";
import { SERVER_TYPE, TERRAIN_CHUNK as CH, TERRAIN_GRID as G } from "./layout.js";

export const TERRAIN = SERVER_TYPE.TERRAIN, TERRAIN_CHUNK = SERVER_TYPE.TERRAIN_CHUNK, TERRAIN_HEADER = SERVER_TYPE.TERRAIN_HEADER;
export const VERSION = G.WIRE_VERSION;
export const GRID_HEADER_BYTES = G.BYTES, HEADER_MESSAGE_BYTES = G.HEADER_MESSAGE_BYTES, CHUNK_HEADER_BYTES = CH.BYTES;
export const CELLS_MAX = G.CELLS_MAX;
const DTYPES = { 0: ["f32", 4], 1: ["uint16", 2], 2: ["f64", 8] };
const COMPRESSIONS = { 0: "none", 1: "zstd", 2: "lz4" };

/** A terrain message that cannot be used; the partial grid, if any, is forgotten. */
export class TerrainDecodeError extends Error {}
const bad = (why) => { throw new TerrainDecodeError(why); };

/** One raw LZ4 block after a u32 size prefix, which must equal `expected`. */
export function lz4Decompress(payload, expected) {
  if (payload.length < 4) bad("lz4 payload shorter than its size prefix");
  const claimed = new DataView(payload.buffer, payload.byteOffset, 4).getUint32(0, true);
  if (claimed !== expected) bad(`lz4 size prefix ${claimed}, expected ${expected}`);
  if (expected > (payload.length - 4) * 256 + 64) bad("lz4 block claims more than it can expand to");
  const out = new Uint8Array(expected);
  let i = 4, o = 0;
  const length = (n) => {
    if (n !== 15) return n;
    for (;;) {
      if (i >= payload.length) bad("lz4 length runs past the block");
      const b = payload[i++];
      n += b;
      if (b !== 255) return n;
    }
  };
  while (i < payload.length) {
    const token = payload[i++];
    const lit = length(token >> 4);
    if (i + lit > payload.length || o + lit > expected) bad("lz4 literals run past the block or the output");
    out.set(payload.subarray(i, i + lit), o);
    i += lit;
    o += lit;
    if (i === payload.length) break; // the last sequence has literals only
    if (i + 2 > payload.length) bad("lz4 match offset cut off");
    const offset = payload[i] | (payload[i + 1] << 8);
    i += 2;
    if (offset === 0 || offset > o) bad(`lz4 match offset ${offset} at output byte ${o}`);
    const len = length(token & 15) + 4;
    if (o + len > expected) bad("lz4 match runs past the output");
    for (let k = 0; k < len; k++, o++) out[o] = out[o - offset];
  }
  if (o !== expected) bad(`lz4 block decodes to ${o} bytes, expected ${expected}`);
  return out;
}

function decompress(code, payload, expected, zstd) {
  if (code === 0) {
    if (payload.length !== expected) bad(`uncompressed payload is ${payload.length} bytes, expected ${expected}`);
    return payload.slice();
  }
  if (code === 2) return lz4Decompress(payload, expected);
  if (!zstd) bad("a zstd payload needs a zstd decoder ({ zstd: decompress })");
  let out;
  try {
    out = zstd(payload, expected);
  } catch (e) {
    bad(`zstd: ${e.message ?? e}`);
  }
  if (!(out instanceof Uint8Array) || out.length !== expected) bad(`zstd payload decodes to ${out?.length} bytes, expected ${expected}`);
  return out;
}

/** Undoes filter 1 (delta per row, then byte planes) on `n` samples of `w` bytes. */
function unfilter(bytes, w, cells) {
  const n = bytes.length / w;
  const out = new Uint8Array(bytes.length);
  const dv = new DataView(out.buffer);
  for (let i = 0; i < n; i++) {
    const x = i % cells;
    if (w === 2) {
      const d = bytes[i] | (bytes[n + i] << 8);
      dv.setUint16(2 * i, x === 0 ? d : (dv.getUint16(2 * i - 2, true) + d) & 0xffff, true);
    } else {
      // f32 bits; f64 never comes filtered from a version 1 server (refused below).
      const d = (bytes[i] | (bytes[n + i] << 8) | (bytes[2 * n + i] << 16) | (bytes[3 * n + i] << 24)) >>> 0;
      dv.setUint32(4 * i, x === 0 ? d : (dv.getUint32(4 * i - 4, true) + d) >>> 0, true);
    }
  }
  return out;
}

function gridHeader(m) {
  if (m.length < GRID_HEADER_BYTES) bad(`message is ${m.length} bytes, shorter than the ${GRID_HEADER_BYTES}-byte grid header`);
  const dv = new DataView(m.buffer, m.byteOffset, m.byteLength);
  const dtype = DTYPES[m[G.DTYPE]] ?? bad(`unknown dtype code ${m[G.DTYPE]}`);
  const compression = m[G.COMPRESSION] in COMPRESSIONS ? m[G.COMPRESSION] : bad(`unknown compression code ${m[G.COMPRESSION]}`);
  const filter = m[G.FILTER];
  if (filter > 1) bad(`unknown filter code ${filter}`);
  if (filter === 1 && dtype[0] === "f64") bad("filter 1 with f64 is never sent");
  if (m.subarray(G.RESERVED, G.CELLS).some((b) => b !== 0)) bad(`reserved bytes ${G.RESERVED}..${G.CELLS} are not zero`);
  const cells = dv.getUint32(G.CELLS, true), cellSizeMm = dv.getUint32(G.CELL_SIZE_MM, true);
  if (cells < 1 || cells > CELLS_MAX) bad(`cells ${cells} outside 1..=${CELLS_MAX}`);
  if (cellSizeMm === 0) bad("cell_size_mm is 0");
  const qmin = dv.getFloat64(G.Q_MIN, true), qmax = dv.getFloat64(G.Q_MAX, true);
  if (dtype[0] === "uint16") {
    if (!Number.isFinite(qmin) || !Number.isFinite(qmax) || qmin > qmax) bad(`uint16 range (${qmin}, ${qmax}) is not finite and ordered`);
  } else if (m.subarray(G.Q_MIN, G.GRID_BYTES).some((b) => b !== 0)) bad("quantization bytes of a float grid are not zero");
  const gridBytes = dv.getBigUint64(G.GRID_BYTES, true);
  if (gridBytes !== BigInt(cells) * BigInt(cells) * BigInt(dtype[1])) bad(`grid_bytes ${gridBytes} is not cells^2 x ${dtype[1]}`);
  return { dtype: dtype[0], sampleBytes: dtype[1], compression, filter, cells, cellSizeMm, qmin, qmax, gridBytes: Number(gridBytes), checksum: m.slice(G.CHECKSUM, G.BYTES) };
}

/** Reassembles terrain deliveries message by message, like the Rust TerrainAssembler. */
export class TerrainAssembler {
  /** `zstd`: `(bytes, expectedLength) => Uint8Array`, a zstd frame decoder. */
  constructor({ zstd = null } = {}) {
    this.zstd = zstd;
    this.pending = null; // a chunked delivery under way
  }

  /** Takes one terrain message: null while a chunked delivery goes on, else the terrain
   * `{cells, cellSizeMm, dtype, heightsM (Float64Array, row-major), quantization}`. */
  push(message) {
    try {
      return this.take(message);
    } catch (e) {
      this.pending = null;
      throw e instanceof TerrainDecodeError ? e : new TerrainDecodeError(String(e));
    }
  }

  take(m) {
    if (m.length < 2) bad("empty or one-byte terrain message");
    if (![TERRAIN, TERRAIN_CHUNK, TERRAIN_HEADER].includes(m[0])) bad(`type 0x${m[0].toString(16)} is not a terrain message`);
    if (m[G.VERSION] !== VERSION) bad(`terrain layout version ${m[1]}, this decoder reads ${VERSION}`);
    const dv = new DataView(m.buffer, m.byteOffset, m.byteLength);
    if (m[0] === TERRAIN) {
      if (this.pending) bad("TERRAIN while chunks are still expected");
      const h = gridHeader(m);
      let grid = decompress(h.compression, m.subarray(GRID_HEADER_BYTES), h.gridBytes, this.zstd);
      if (h.filter === 1) grid = unfilter(grid, h.sampleBytes, h.cells);
      return finish(h, grid);
    }
    if (m[0] === TERRAIN_HEADER) {
      if (this.pending) bad("TERRAIN_HEADER while chunks are still expected");
      if (m.length !== HEADER_MESSAGE_BYTES) bad(`TERRAIN_HEADER is ${m.length} bytes, expected ${HEADER_MESSAGE_BYTES}`);
      const h = gridHeader(m);
      const chunkCount = dv.getUint32(G.CHUNK_COUNT, true), rowsPerChunk = dv.getUint32(G.ROWS_PER_CHUNK, true);
      if (rowsPerChunk < 1 || rowsPerChunk > h.cells) bad(`rows_per_chunk ${rowsPerChunk} outside 1..=${h.cells}`);
      if (chunkCount !== Math.ceil(h.cells / rowsPerChunk)) bad(`chunk_count ${chunkCount} is not ceil(${h.cells} / ${rowsPerChunk})`);
      this.pending = { h, chunkCount, rowsPerChunk, next: 0, parts: [] };
      return null;
    }
    const p = this.pending ?? bad("TERRAIN_CHUNK without a TERRAIN_HEADER before it");
    if (m.length < CHUNK_HEADER_BYTES) bad(`TERRAIN_CHUNK shorter than its ${CHUNK_HEADER_BYTES}-byte header`);
    if (m.subarray(CH.RESERVED, CH.INDEX).some((b) => b !== 0)) bad("TERRAIN_CHUNK reserved bytes are not zero");
    const index = dv.getUint32(CH.INDEX, true), count = dv.getUint32(CH.COUNT, true);
    const rowStart = dv.getUint32(CH.ROW_START, true), rowCount = dv.getUint32(CH.ROW_COUNT, true), rawBytes = dv.getUint32(CH.RAW_BYTES, true);
    if (index !== p.next) bad(`chunk ${index} arrived, expected chunk ${p.next}`);
    if (count !== p.chunkCount) bad(`chunk says ${count} chunks, the header ${p.chunkCount}`);
    const start = index * p.rowsPerChunk, rows = Math.min(p.rowsPerChunk, p.h.cells - start);
    if (rowStart !== start || rowCount !== rows || rawBytes !== rows * p.h.cells * p.h.sampleBytes) bad(`chunk ${index}: rows ${rowStart}+${rowCount} (${rawBytes} B), expected ${start}+${rows}`);
    let part = decompress(p.h.compression, m.subarray(CHUNK_HEADER_BYTES), rawBytes, this.zstd);
    if (p.h.filter === 1) part = unfilter(part, p.h.sampleBytes, p.h.cells);
    p.parts.push(part);
    p.next++;
    if (p.next < p.chunkCount) return null;
    this.pending = null;
    const grid = new Uint8Array(p.h.gridBytes);
    let at = 0;
    for (const part of p.parts) { grid.set(part, at); at += part.length; }
    return finish(p.h, grid);
  }
}

/** Checks the checksum and converts the grid bytes to metres. */
function finish(h, grid) {
  const sum = blake3(grid);
  if (sum.some((b, i) => b !== h.checksum[i])) bad("checksum mismatch over the grid bytes");
  const n = h.cells * h.cells;
  const dv = new DataView(grid.buffer, grid.byteOffset, grid.byteLength);
  const heightsM = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let v;
    if (h.dtype === "uint16") v = h.qmin + (dv.getUint16(2 * i, true) * (h.qmax - h.qmin)) / 65535;
    else v = h.dtype === "f32" ? dv.getFloat32(4 * i, true) : dv.getFloat64(8 * i, true);
    if (!Number.isFinite(v)) bad(`sample ${i} is not finite`);
    heightsM[i] = v;
  }
  return { cells: h.cells, cellSizeMm: h.cellSizeMm, dtype: h.dtype, heightsM, quantization: h.dtype === "uint16" ? [h.qmin, h.qmax] : null };
}
