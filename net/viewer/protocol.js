// Protocol 2, the client side, as net/PROTOCOL.md specifies it: the messages a browser
// sends (HELLO, INPUT, CAMERA, ACK, PING) and the ones it reads (WELCOME, SNAPSHOT, PONG; the
// terrain messages are recognised and skipped: the viewer draws the terrain from
// /viewer/terrain and names its hash in HELLO, so the server sends none).

export const PROTOCOL_VERSION = 2;
export const MSG = { WELCOME: 0x01, SNAPSHOT: 0x02, TERRAIN: 0x03, TERRAIN_CHUNK: 0x04, TERRAIN_HEADER: 0x05, PONG: 0x06 };
export const ZONE_TOWN = 0;
export const ZONE_HUNTING_FIELD = 1;
export const NAME_BYTES_MAX = 32;

/** A server message this client cannot read. */
export class ProtocolError extends Error {}

/** HELLO: version 2, a 1-32 byte UTF-8 name, the cached terrain hash when known, and
 * whether to join as a spectator (a camera moved with CAMERA, no avatar). */
export function encodeHello(name, terrainHash = null, spectate = false) {
  const n = new TextEncoder().encode(name);
  if (n.length < 1 || n.length > NAME_BYTES_MAX) throw new RangeError("a name is 1 to 32 bytes of UTF-8");
  const out = new Uint8Array(5 + n.length + (terrainHash ? 32 : 0));
  out[0] = 0x10;
  out[1] = PROTOCOL_VERSION & 0xff;
  out[2] = PROTOCOL_VERSION >> 8;
  out[3] = (terrainHash ? 1 : 0) | (spectate ? 2 : 0);
  out[4] = n.length;
  out.set(n, 5);
  if (terrainHash) out.set(terrainHash, 5 + n.length);
  return out;
}

/** INPUT: seq, a direction (any length), throttle 0-100, cast. */
export function encodeInput(seq, dirX, dirY, throttle, cast) {
  const out = new Uint8Array(11);
  const dv = new DataView(out.buffer);
  out[0] = 0x11;
  dv.setUint32(1, seq >>> 0, true);
  dv.setInt16(5, dirX, true);
  dv.setInt16(7, dirY, true);
  out[9] = throttle;
  out[10] = cast ? 1 : 0;
  return out;
}

/** CAMERA: a spectator's camera position in world mm (the server clamps it). */
export function encodeCamera(seq, xMm, yMm) {
  const out = new Uint8Array(13);
  const dv = new DataView(out.buffer);
  out[0] = 0x14;
  dv.setUint32(1, seq >>> 0, true);
  dv.setInt32(5, xMm | 0, true);
  dv.setInt32(9, yMm | 0, true);
  return out;
}

export function encodeAck(tick) {
  const out = new Uint8Array(5);
  out[0] = 0x12;
  new DataView(out.buffer).setUint32(1, tick >>> 0, true);
  return out;
}

/** PING with a nonce (a timestamp in ms works; it comes back in PONG). */
export function encodePing(nonce) {
  const out = new Uint8Array(9);
  out[0] = 0x13;
  new DataView(out.buffer).setBigUint64(1, BigInt(Math.floor(nonce)), true);
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
      need(bytes, 103, "WELCOME");
      const zoneCount = bytes[102];
      need(bytes, 103 + 14 * zoneCount, "WELCOME zones");
      const zones = [];
      for (let i = 0; i < zoneCount; i++) {
        const o = 103 + 14 * i;
        if (bytes[o + 1] !== 0) throw new ProtocolError(`zone shape ${bytes[o + 1]}`);
        zones.push({ kind: bytes[o], x_mm: dv.getUint32(o + 2, true), y_mm: dv.getUint32(o + 6, true), radius_mm: dv.getUint32(o + 10, true) });
      }
      return {
        type: "welcome",
        protocolVersion: dv.getUint16(1, true),
        clientId: dv.getUint32(3, true),
        avatarId: dv.getUint32(7, true),
        slot: dv.getUint32(11, true),
        joinTick: dv.getUint32(15, true),
        tickRateHz: dv.getUint16(19, true),
        snapshotIntervalTicks: dv.getUint16(21, true),
        worldSizeMm: dv.getUint32(23, true),
        terrain: {
          cells: dv.getUint32(27, true),
          cellSizeMm: dv.getUint32(31, true),
          dtype: bytes[35],
          compression: bytes[36],
          delivery: bytes[37],
          chunkCount: dv.getUint32(38, true),
          totalBytes: Number(dv.getBigUint64(42, true)),
          contentHash: bytes.slice(50, 82),
        },
        viewRadiusMm: dv.getUint32(82, true),
        viewEntitiesMax: dv.getUint16(86, true),
        baselineWindowSnapshots: dv.getUint16(88, true),
        castRadiusMm: dv.getUint32(90, true),
        castCooldownTicks: dv.getUint32(94, true),
        avatarSpeedMaxMmPerTick: dv.getUint32(98, true),
        zones,
      };
    }
    case MSG.SNAPSHOT:
      need(bytes, 2, "SNAPSHOT");
      return { type: "snapshot", snapshot: bytes.subarray(1) };
    case MSG.PONG:
      need(bytes, 13, "PONG");
      return { type: "pong", nonce: Number(dv.getBigUint64(1, true)), serverTick: dv.getUint32(9, true) };
    case MSG.TERRAIN:
    case MSG.TERRAIN_CHUNK:
    case MSG.TERRAIN_HEADER:
      return { type: "terrain" };
    default:
      throw new ProtocolError(`unknown server message type 0x${bytes[0].toString(16)}`);
  }
}
