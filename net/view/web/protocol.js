// Protocol 2, the client side, as net/wire/PROTOCOL.md specifies it: the messages a browser
// sends (HELLO, INPUT, INPUT_ACK, CAMERA, ACK, PING) and the ones it reads (WELCOME,
// SNAPSHOT, PONG; the terrain messages are recognised and skipped: the viewer draws the terrain from
// /viewer/terrain and names its hash in HELLO, so the server sends none).

// Every offset, type code and flag comes from layout.js, which the Rust side generates.

import { ACK, BOOKMARK, CAMERA, CLIENT_TYPE, HELLO, INPUT, INPUT_ACK, PING, PONG, PROTOCOL_VERSION, SERVER_TYPE, WELCOME, ZONE_KIND } from "./layout.js";

export { PROTOCOL_VERSION };
export const MSG = SERVER_TYPE;
export const ZONE_TOWN = ZONE_KIND.TOWN;
export const ZONE_HUNTING_FIELD = ZONE_KIND.HUNTING_FIELD;
export const NAME_BYTES_MAX = HELLO.NAME_BYTES_MAX;

/** A server message this client cannot read. */
export class ProtocolError extends Error {}

/** HELLO: version 2, a 1-32 byte UTF-8 name, the cached terrain hash when known, and
 * whether to join as a spectator (a camera moved with CAMERA, no avatar). Options:
 * `wantToken` asks for a reconnect token in WELCOME; `reclaim` (16 bytes) takes back the
 * avatar of that token, with `keepsBaselines` when this client kept its decoder. */
export function encodeHello(name, terrainHash = null, spectate = false, { wantToken = false, reclaim = null, keepsBaselines = false } = {}) {
  const n = new TextEncoder().encode(name);
  if (n.length < 1 || n.length > NAME_BYTES_MAX) throw new RangeError(`a name is 1 to ${NAME_BYTES_MAX} bytes of UTF-8`);
  if (reclaim && reclaim.length !== HELLO.TOKEN_BYTES) throw new RangeError(`a reconnect token is ${HELLO.TOKEN_BYTES} bytes`);
  const hashBytes = terrainHash ? HELLO.TERRAIN_HASH_BYTES : 0;
  const out = new Uint8Array(HELLO.NAME + n.length + hashBytes + (reclaim ? HELLO.TOKEN_BYTES : 0));
  out[0] = CLIENT_TYPE.HELLO;
  new DataView(out.buffer).setUint16(HELLO.VERSION, PROTOCOL_VERSION, true);
  out[HELLO.FLAGS] = (terrainHash ? HELLO.FLAG_CACHED_TERRAIN : 0) | (spectate ? HELLO.FLAG_SPECTATE : 0)
    | (wantToken ? HELLO.FLAG_WANT_TOKEN : 0) | (reclaim ? HELLO.FLAG_RECLAIM : 0)
    | (reclaim && keepsBaselines ? HELLO.FLAG_KEEPS_BASELINES : 0);
  out[HELLO.NAME_LEN] = n.length;
  out.set(n, HELLO.NAME);
  if (terrainHash) out.set(terrainHash, HELLO.NAME + n.length);
  if (reclaim) out.set(reclaim, HELLO.NAME + n.length + hashBytes);
  return out;
}

/** INPUT: seq, a direction (any length), throttle 0-100, cast. */
export function encodeInput(seq, dirX, dirY, throttle, cast) {
  const out = new Uint8Array(INPUT.BYTES);
  putInput(out, CLIENT_TYPE.INPUT, seq, dirX, dirY, throttle, cast);
  return out;
}

/** INPUT_ACK: an INPUT and the ACK of `tick` in one message (one TCP segment: a browser
 * cannot put two WebSocket messages in one write). */
export function encodeInputAck(seq, dirX, dirY, throttle, cast, tick) {
  const out = new Uint8Array(INPUT_ACK.BYTES);
  putInput(out, CLIENT_TYPE.INPUT_ACK, seq, dirX, dirY, throttle, cast);
  new DataView(out.buffer).setUint32(INPUT_ACK.ACK_TICK, tick >>> 0, true);
  return out;
}

function putInput(out, type, seq, dirX, dirY, throttle, cast) {
  const dv = new DataView(out.buffer);
  out[0] = type;
  dv.setUint32(INPUT.SEQ, seq >>> 0, true);
  dv.setInt16(INPUT.DIR_X, dirX, true);
  dv.setInt16(INPUT.DIR_Y, dirY, true);
  out[INPUT.THROTTLE] = throttle;
  out[INPUT.FLAGS] = cast ? INPUT.FLAG_CAST : 0;
}

/** BOOKMARK: "something is wrong here", with a note (UTF-8, cut at a character boundary
 * to `BOOKMARK.NOTE_BYTES_MAX` bytes). The server records it with the tick. */
export function encodeBookmark(note) {
  let bytes = new TextEncoder().encode(note);
  if (bytes.length > BOOKMARK.NOTE_BYTES_MAX) {
    let end = BOOKMARK.NOTE_BYTES_MAX;
    while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--; // not inside a character
    bytes = bytes.slice(0, end);
  }
  const out = new Uint8Array(BOOKMARK.HEADER_BYTES + bytes.length);
  out[0] = CLIENT_TYPE.BOOKMARK;
  out[1] = bytes.length;
  out.set(bytes, BOOKMARK.HEADER_BYTES);
  return out;
}

/** CAMERA: a spectator's camera position in world mm (the server clamps it). */
export function encodeCamera(seq, xMm, yMm) {
  const out = new Uint8Array(CAMERA.BYTES);
  const dv = new DataView(out.buffer);
  out[0] = CLIENT_TYPE.CAMERA;
  dv.setUint32(CAMERA.SEQ, seq >>> 0, true);
  dv.setInt32(CAMERA.X_MM, xMm | 0, true);
  dv.setInt32(CAMERA.Y_MM, yMm | 0, true);
  return out;
}

export function encodeAck(tick) {
  const out = new Uint8Array(ACK.BYTES);
  out[0] = CLIENT_TYPE.ACK;
  new DataView(out.buffer).setUint32(ACK.TICK, tick >>> 0, true);
  return out;
}

/** PING with a nonce (a timestamp in ms works; it comes back in PONG). */
export function encodePing(nonce) {
  const out = new Uint8Array(PING.BYTES);
  out[0] = CLIENT_TYPE.PING;
  new DataView(out.buffer).setBigUint64(PING.NONCE, BigInt(Math.floor(nonce)), true);
  return out;
}

function need(bytes, n, what) {
  if (bytes.length < n) throw new ProtocolError(`${what}: ${bytes.length} bytes, expected at least ${n}`);
}

/** Decodes a server message: {type, ...fields}. SNAPSHOT keeps its bytes for the decoder. */
export function decodeServer(bytes) {
  need(bytes, 1, "message");
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (bytes[0]) {
    case MSG.WELCOME: {
      const W = WELCOME;
      need(bytes, W.ZONES, "WELCOME");
      const zoneCount = bytes[W.ZONE_COUNT];
      const plain = W.ZONES + W.ZONE_BYTES * zoneCount;
      if (bytes.length !== plain && bytes.length !== plain + HELLO.TOKEN_BYTES) {
        throw new ProtocolError(`WELCOME: ${bytes.length} bytes, expected ${plain} (or ${plain + HELLO.TOKEN_BYTES} with a reconnect token)`);
      }
      const zones = [];
      for (let i = 0; i < zoneCount; i++) {
        const o = W.ZONES + W.ZONE_BYTES * i;
        if (bytes[o + W.ZONE_SHAPE] !== W.ZONE_SHAPE_CIRCLE) throw new ProtocolError(`zone shape ${bytes[o + W.ZONE_SHAPE]}`);
        zones.push({ kind: bytes[o + W.ZONE_KIND], x_mm: dv.getUint32(o + W.ZONE_X_MM, true), y_mm: dv.getUint32(o + W.ZONE_Y_MM, true), radius_mm: dv.getUint32(o + W.ZONE_RADIUS_MM, true) });
      }
      return {
        type: "welcome",
        protocolVersion: dv.getUint16(W.PROTOCOL_VERSION, true),
        clientId: dv.getUint32(W.CLIENT_ID, true),
        avatarId: dv.getUint32(W.AVATAR_ID, true),
        slot: dv.getUint32(W.SLOT, true),
        joinTick: dv.getUint32(W.JOIN_TICK, true),
        tickRateHz: dv.getUint16(W.TICK_RATE_HZ, true),
        snapshotIntervalTicks: dv.getUint16(W.SNAPSHOT_INTERVAL_TICKS, true),
        worldSizeMm: dv.getUint32(W.WORLD_SIZE_MM, true),
        terrain: {
          cells: dv.getUint32(W.TERRAIN_CELLS, true),
          cellSizeMm: dv.getUint32(W.TERRAIN_CELL_SIZE_MM, true),
          dtype: bytes[W.TERRAIN_DTYPE],
          compression: bytes[W.TERRAIN_COMPRESSION],
          delivery: bytes[W.TERRAIN_DELIVERY],
          chunkCount: dv.getUint32(W.TERRAIN_CHUNK_COUNT, true),
          totalBytes: Number(dv.getBigUint64(W.TERRAIN_TOTAL_BYTES, true)),
          contentHash: bytes.slice(W.TERRAIN_CONTENT_HASH, W.TERRAIN_CONTENT_HASH + 32),
        },
        viewRadiusMm: dv.getUint32(W.VIEW_RADIUS_MM, true),
        viewEntitiesMax: dv.getUint16(W.VIEW_ENTITIES_MAX, true),
        baselineWindowSnapshots: dv.getUint16(W.BASELINE_WINDOW_SNAPSHOTS, true),
        castRadiusMm: dv.getUint32(W.CAST_RADIUS_MM, true),
        castCooldownTicks: dv.getUint32(W.CAST_COOLDOWN_TICKS, true),
        avatarSpeedMaxMmPerTick: dv.getUint32(W.AVATAR_SPEED_MAX_MM_PER_TICK, true),
        zones,
        reconnectToken: bytes.length > plain ? bytes.slice(plain) : null,
      };
    }
    case MSG.SNAPSHOT:
      need(bytes, 2, "SNAPSHOT");
      return { type: "snapshot", snapshot: bytes.subarray(1) };
    case MSG.PONG:
      need(bytes, PONG.BYTES, "PONG");
      return { type: "pong", nonce: Number(dv.getBigUint64(PONG.NONCE, true)), serverTick: dv.getUint32(PONG.SERVER_TICK, true) };
    case MSG.TERRAIN:
    case MSG.TERRAIN_CHUNK:
    case MSG.TERRAIN_HEADER:
      return { type: "terrain" };
    default:
      throw new ProtocolError(`unknown server message type 0x${bytes[0].toString(16)}`);
  }
}
