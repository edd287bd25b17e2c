// The byte layouts the viewer reads and writes, generated from the Rust side's named
// offsets by net/view/src/layout_js.rs. Do not edit: after a Rust layout moves,
// `MIGRATORY_BLESS=1 cargo test -p migratory-view layout_js` rewrites this file.

export const PROTOCOL_VERSION = 2;

/** Client to server message types (byte 0). */
export const CLIENT_TYPE = Object.freeze({
  HELLO: 16,
  INPUT: 17,
  ACK: 18,
  PING: 19,
  CAMERA: 20,
  BOOKMARK: 21,
  INPUT_ACK: 22,
});

/** Server to client message types (byte 0). */
export const SERVER_TYPE = Object.freeze({
  WELCOME: 1,
  SNAPSHOT: 2,
  TERRAIN: 3,
  TERRAIN_CHUNK: 4,
  TERRAIN_HEADER: 5,
  PONG: 6,
});

/** HELLO: offsets, flags and the name limit. */
export const HELLO = Object.freeze({
  VERSION: 1,
  FLAGS: 3,
  NAME_LEN: 4,
  NAME: 5,
  FLAG_CACHED_TERRAIN: 1,
  FLAG_SPECTATE: 2,
  FLAG_WANT_TOKEN: 4,
  FLAG_RECLAIM: 8,
  FLAG_KEEPS_BASELINES: 16,
  NAME_BYTES_MAX: 32,
  TERRAIN_HASH_BYTES: 32,
  TOKEN_BYTES: 16,
});

/** Close codes the server uses beyond RFC 6455's (PROTOCOL.md section 5). */
export const CLOSE = Object.freeze({
  GOING_AWAY: 1001,
  REJOIN: 4001,
  RECLAIM_REFUSED: 4002,
  REPLACED: 4003,
});

/** INPUT: offsets, size and the cast flag. */
export const INPUT = Object.freeze({
  SEQ: 1,
  DIR_X: 5,
  DIR_Y: 7,
  THROTTLE: 9,
  FLAGS: 10,
  FLAG_CAST: 1,
  BYTES: 11,
});

/** INPUT_ACK: INPUT's fields at INPUT's offsets, then the acked tick. */
export const INPUT_ACK = Object.freeze({
  ACK_TICK: 11,
  BYTES: 15,
});

/** CAMERA: offsets and size. */
export const CAMERA = Object.freeze({
  SEQ: 1,
  X_MM: 5,
  Y_MM: 9,
  BYTES: 13,
});

/** BOOKMARK: header size and the longest note. */
export const BOOKMARK = Object.freeze({
  HEADER_BYTES: 2,
  NOTE_BYTES_MAX: 200,
});

/** ACK: offsets and size. */
export const ACK = Object.freeze({
  TICK: 1,
  BYTES: 5,
});

/** PING: offsets and size. */
export const PING = Object.freeze({
  NONCE: 1,
  BYTES: 9,
});

/** PONG: offsets and size. */
export const PONG = Object.freeze({
  NONCE: 1,
  SERVER_TICK: 9,
  BYTES: 13,
});

/** WELCOME: offsets; zone records of ZONE_BYTES follow at ZONES. */
export const WELCOME = Object.freeze({
  PROTOCOL_VERSION: 1,
  CLIENT_ID: 3,
  AVATAR_ID: 7,
  SLOT: 11,
  JOIN_TICK: 15,
  TICK_RATE_HZ: 19,
  SNAPSHOT_INTERVAL_TICKS: 21,
  WORLD_SIZE_MM: 23,
  TERRAIN_CELLS: 27,
  TERRAIN_CELL_SIZE_MM: 31,
  TERRAIN_DTYPE: 35,
  TERRAIN_COMPRESSION: 36,
  TERRAIN_DELIVERY: 37,
  TERRAIN_CHUNK_COUNT: 38,
  TERRAIN_TOTAL_BYTES: 42,
  TERRAIN_CONTENT_HASH: 50,
  VIEW_RADIUS_MM: 82,
  VIEW_ENTITIES_MAX: 86,
  BASELINE_WINDOW_SNAPSHOTS: 88,
  CAST_RADIUS_MM: 90,
  CAST_COOLDOWN_TICKS: 94,
  AVATAR_SPEED_MAX_MM_PER_TICK: 98,
  ZONE_COUNT: 102,
  ZONES: 103,
  ZONE_BYTES: 14,
  ZONE_KIND: 0,
  ZONE_SHAPE: 1,
  ZONE_X_MM: 2,
  ZONE_Y_MM: 6,
  ZONE_RADIUS_MM: 10,
  ZONE_SHAPE_CIRCLE: 0,
});

/** Zone kinds in WELCOME and /replay/info. */
export const ZONE_KIND = Object.freeze({
  TOWN: 0,
  HUNTING_FIELD: 1,
});

/** How WELCOME says the terrain comes. */
export const TERRAIN_DELIVERY = Object.freeze({
  SINGLE: 0,
  CHUNKED: 1,
  CACHED: 2,
});

/** The snapshot header (kernel/SNAPSHOT_FORMAT.md): offsets, its size, the no-baseline tick, and the wire units of a position (POS_UNIT_MM: q is mm >> POS_QUANT_SHIFT, an entity is drawn at the middle of its unit) and of a velocity (VEL_UNIT_MM_PER_TICK). */
export const SNAPSHOT = Object.freeze({
  FORMAT_VERSION: 1,
  VERSION: 0,
  TICK: 1,
  BASELINE_TICK: 5,
  AVATAR_ID: 9,
  SCORE: 13,
  HEADER_BYTES: 17,
  NO_BASELINE: 4294967295,
  POS_QUANT_SHIFT: 6,
  POS_UNIT_MM: 64,
  VEL_UNIT_MM_PER_TICK: 2,
});

/** TERRAIN and TERRAIN_HEADER's grid header (net/wire/TERRAIN_WIRE.md): offsets, its size (TERRAIN's payload follows), TERRAIN_HEADER's two fields and size, the layout version and the widest grid a decoder accepts. */
export const TERRAIN_GRID = Object.freeze({
  WIRE_VERSION: 1,
  CELLS_MAX: 8192,
  TYPE: 0,
  VERSION: 1,
  DTYPE: 2,
  COMPRESSION: 3,
  FILTER: 4,
  RESERVED: 5,
  CELLS: 8,
  CELL_SIZE_MM: 12,
  Q_MIN: 16,
  Q_MAX: 24,
  GRID_BYTES: 32,
  CHECKSUM: 40,
  BYTES: 72,
  CHUNK_COUNT: 72,
  ROWS_PER_CHUNK: 76,
  HEADER_MESSAGE_BYTES: 80,
});

/** TERRAIN_CHUNK's header: offsets and its size (the payload follows). */
export const TERRAIN_CHUNK = Object.freeze({
  TYPE: 0,
  VERSION: 1,
  RESERVED: 2,
  INDEX: 4,
  COUNT: 8,
  ROW_START: 12,
  ROW_COUNT: 16,
  RAW_BYTES: 20,
  BYTES: 24,
});

/** /replay/state: the header, then COUNT records of ENTITY_BYTES (offsets inside one). */
export const REPLAY_STATE = Object.freeze({
  TICK: 0,
  COUNT: 4,
  HEADER_BYTES: 8,
  ID: 0,
  X_MM: 4,
  Y_MM: 8,
  VX: 12,
  VY: 14,
  ENTITY_BYTES: 16,
});

/** /viewer/terrain: the header; one shade byte per pixel follows at SHADES. */
export const VIEWER_TERRAIN = Object.freeze({
  MAGIC: 0,
  VERSION: 4,
  EDGE: 8,
  WORLD_SIZE_MM: 12,
  CONTENT_HASH: 16,
  SHADES: 48,
});

/** Timeline marker kinds in /replay/markers rows [tick, kind, client, n]. */
export const MARKER = Object.freeze({
  JOIN: 0,
  LEAVE: 1,
  CAST: 2,
  CATCH: 3,
  UNACKED: 4,
  SPECTATE: 5,
});
