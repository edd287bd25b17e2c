//! Protocol v2: the binary messages between a client and the server (specified in
//! `net/wire/PROTOCOL.md`), with decoders that never panic and say why a message is bad.
//!
//! Every message is one binary WebSocket message; its first byte is its type. Client
//! and server types use disjoint values so a captured mixed stream reads unambiguously.
//! All integers are little-endian. `server` holds what the server encodes and decodes,
//! `client` what a client does (bots, tests; the browser viewer mirrors it).

use thiserror::Error;

mod client;
mod name;
mod server;

pub use client::{
    decode_server, encode_ack, encode_bookmark, encode_camera, encode_hello, encode_hello_spectating,
    encode_hello_with, encode_input, encode_input_ack, encode_ping, ServerMessage, ServerMessageError,
};
pub use name::name_is_acceptable;
pub use server::{decode_client, encode_pong, encode_snapshot, encode_welcome, SNAPSHOT_HEAD};

use crate::terrain_wire::TerrainDescriptor;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 2;

/// Client → server message types.
pub mod client_type {
    pub const HELLO: u8 = 0x10;
    pub const INPUT: u8 = 0x11;
    pub const ACK: u8 = 0x12;
    pub const PING: u8 = 0x13;
    /// A spectator's camera position.
    pub const CAMERA: u8 = 0x14;
    /// "Something is wrong here": a note the server records with the tick (additive in
    /// protocol 2; a server without it closes with 1002).
    pub const BOOKMARK: u8 = 0x15;
    /// An INPUT and an ACK in one message (additive in protocol 2; a server without it
    /// closes with 1002): one message per snapshot for a client that cannot batch writes.
    pub const INPUT_ACK: u8 = 0x16;
}

/// Server → client message types.
pub mod server_type {
    pub const WELCOME: u8 = 0x01;
    pub const SNAPSHOT: u8 = 0x02;
    /// Single-shot terrain (layout in `net/wire/TERRAIN_WIRE.md`).
    pub const TERRAIN: u8 = crate::terrain_wire::MSG_TERRAIN;
    /// One piece of a chunked terrain (layout in `net/wire/TERRAIN_WIRE.md`).
    pub const TERRAIN_CHUNK: u8 = crate::terrain_wire::MSG_TERRAIN_CHUNK;
    /// Announces a chunked terrain (layout in `net/wire/TERRAIN_WIRE.md`).
    pub const TERRAIN_HEADER: u8 = crate::terrain_wire::MSG_TERRAIN_HEADER;
    pub const PONG: u8 = 0x06;
}

/// Close codes the server uses (RFC 6455 section 7.4.1).
pub mod close_code {
    /// The server is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// A malformed message, an unknown type or an unsupported protocol version.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// A text frame (the protocol is binary only).
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// A message that breaks a rule: wrong state, rate limit, invalid name, no HELLO in time.
    pub const POLICY_VIOLATION: u16 = 1008;
    /// A message larger than the server accepts.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// Evicted as too slow, or the world is full (the default eviction code).
    pub const TRY_AGAIN_LATER: u16 = 1013;
    /// This server no longer serves the world (another fleet node took it over, or the
    /// world moved): join again through the fleet, which answers the world's current
    /// server; a client holding a reconnect token reclaims its avatar there.
    pub const REJOIN: u16 = 4001;
    /// A HELLO's reconnect token is not one this world holds (never issued here, already
    /// used, or its grace ran out): join again without it, as a new avatar.
    pub const RECLAIM_REFUSED: u16 = 4002;
    /// Another connection reclaimed this connection's avatar with its reconnect token.
    pub const REPLACED: u16 = 4003;
}

/// Bit 0 of INPUT's flags: cast this tick.
pub const INPUT_FLAG_CAST: u8 = 1;
/// Longest player name in bytes (the kernel's limit).
pub const NAME_BYTES_MAX: usize = migratory_kernel::NAME_BYTES_MAX;

/// HELLO before the name: type, version, flags, name length.
pub const HELLO_HEADER_BYTES: usize = 5;
/// Bit 0 of HELLO's flags: a 32-byte terrain content hash follows the name.
pub const HELLO_FLAG_CACHED_TERRAIN: u8 = 1;
/// Bit 1 of HELLO's flags: join as a spectator (a camera, no avatar).
pub const HELLO_FLAG_SPECTATE: u8 = 2;
/// Bit 2 of HELLO's flags: the client wants a reconnect token (WELCOME then ends with one).
pub const HELLO_FLAG_WANT_TOKEN: u8 = 4;
/// Bit 3 of HELLO's flags: a reconnect token follows (after the cached terrain hash, if
/// any): take back the avatar it was issued for instead of joining a new one.
pub const HELLO_FLAG_RECLAIM: u8 = 8;
/// Bit 4 of HELLO's flags, only with bit 3: the client still holds the snapshots it
/// decoded before the drop, so the server may go on with deltas against them.
pub const HELLO_FLAG_KEEPS_BASELINES: u8 = 16;
/// Every HELLO flag this server knows.
pub const HELLO_FLAGS_KNOWN: u8 = HELLO_FLAG_CACHED_TERRAIN
    | HELLO_FLAG_SPECTATE
    | HELLO_FLAG_WANT_TOKEN
    | HELLO_FLAG_RECLAIM
    | HELLO_FLAG_KEEPS_BASELINES;
/// A reconnect token's length: 128 random bits.
pub const RECONNECT_TOKEN_BYTES: usize = 16;
pub const INPUT_BYTES: usize = 11;
/// INPUT_ACK: INPUT's fields at INPUT's offsets, then the acked tick.
pub const INPUT_ACK_BYTES: usize = 15;
pub const CAMERA_BYTES: usize = 13;
pub const ACK_BYTES: usize = 5;
pub const PING_BYTES: usize = 9;
pub const PONG_BYTES: usize = 13;
/// BOOKMARK: type, note length N, then N bytes of UTF-8.
pub const BOOKMARK_HEADER_BYTES: usize = 2;
/// Longest BOOKMARK note in bytes (a recording keeps up to 280).
pub const BOOKMARK_NOTE_BYTES_MAX: usize = 200;

/// Where each field of the small messages sits (byte 0 is always the type). The server's
/// decoder and PONG's encoder read and write through these (the client encoders write the
/// fields in order, which the compile-time checks below pin to the same offsets), and the
/// browser's `layout.js` is generated from them, so the two sides cannot disagree on an offset.
pub mod hello_layout {
    /// u16, read first so a later version may change the rest.
    pub const VERSION: usize = 1;
    pub const FLAGS: usize = 3;
    pub const NAME_LEN: usize = 4;
    /// The name's bytes, then the 32-byte terrain hash when the flag says so.
    pub const NAME: usize = 5;
    const _: () = assert!(NAME == super::HELLO_HEADER_BYTES);
}

pub mod input_layout {
    pub const SEQ: usize = 1;
    pub const DIR_X: usize = 5;
    pub const DIR_Y: usize = 7;
    pub const THROTTLE: usize = 9;
    pub const FLAGS: usize = 10;
    const _: () = assert!(SEQ + 4 == DIR_X && DIR_X + 2 == DIR_Y && DIR_Y + 2 == THROTTLE);
    const _: () = assert!(THROTTLE + 1 == FLAGS && FLAGS + 1 == super::INPUT_BYTES);
}

/// INPUT_ACK: `input_layout`'s fields at the same offsets, then ACK's tick.
pub mod input_ack_layout {
    pub const ACK_TICK: usize = super::INPUT_BYTES;
    const _: () = assert!(ACK_TICK + 4 == super::INPUT_ACK_BYTES);
}

pub mod camera_layout {
    pub const SEQ: usize = 1;
    pub const X_MM: usize = 5;
    pub const Y_MM: usize = 9;
    const _: () = assert!(SEQ + 4 == X_MM && X_MM + 4 == Y_MM && Y_MM + 4 == super::CAMERA_BYTES);
}

pub mod ack_layout {
    pub const TICK: usize = 1;
    const _: () = assert!(TICK + 4 == super::ACK_BYTES);
}

pub mod ping_layout {
    pub const NONCE: usize = 1;
    const _: () = assert!(NONCE + 8 == super::PING_BYTES);
}

pub mod pong_layout {
    pub const NONCE: usize = 1;
    pub const SERVER_TICK: usize = 9;
    const _: () = assert!(NONCE + 8 == SERVER_TICK && SERVER_TICK + 4 == super::PONG_BYTES);
}

/// WELCOME's byte layout (`net/wire/PROTOCOL.md`): named offsets of every field, checked at
/// compile time to tile the message; the zone records follow at `ZONES`.
pub mod welcome_layout {
    pub const PROTOCOL_VERSION: usize = 1;
    pub const CLIENT_ID: usize = 3;
    pub const AVATAR_ID: usize = 7;
    pub const SLOT: usize = 11;
    pub const JOIN_TICK: usize = 15;
    pub const TICK_RATE_HZ: usize = 19;
    pub const SNAPSHOT_INTERVAL_TICKS: usize = 21;
    pub const WORLD_SIZE_MM: usize = 23;
    pub const TERRAIN_CELLS: usize = 27;
    pub const TERRAIN_CELL_SIZE_MM: usize = 31;
    pub const TERRAIN_DTYPE: usize = 35;
    pub const TERRAIN_COMPRESSION: usize = 36;
    pub const TERRAIN_DELIVERY: usize = 37;
    pub const TERRAIN_CHUNK_COUNT: usize = 38;
    pub const TERRAIN_TOTAL_BYTES: usize = 42;
    pub const TERRAIN_CONTENT_HASH: usize = 50;
    pub const VIEW_RADIUS_MM: usize = 82;
    pub const VIEW_ENTITIES_MAX: usize = 86;
    pub const BASELINE_WINDOW_SNAPSHOTS: usize = 88;
    pub const CAST_RADIUS_MM: usize = 90;
    pub const CAST_COOLDOWN_TICKS: usize = 94;
    pub const AVATAR_SPEED_MAX_MM_PER_TICK: usize = 98;
    pub const ZONE_COUNT: usize = 102;
    pub const ZONES: usize = 103;
    /// One zone record: kind u8, shape u8, x_mm u32, y_mm u32, radius_mm u32.
    pub const ZONE_BYTES: usize = 14;
    /// Offsets inside a zone record.
    pub const ZONE_KIND: usize = 0;
    pub const ZONE_SHAPE: usize = 1;
    pub const ZONE_X_MM: usize = 2;
    pub const ZONE_Y_MM: usize = 6;
    pub const ZONE_RADIUS_MM: usize = 10;
    const _: () = assert!(ZONE_SHAPE + 1 == ZONE_X_MM && ZONE_X_MM + 4 == ZONE_Y_MM);
    const _: () = assert!(ZONE_Y_MM + 4 == ZONE_RADIUS_MM && ZONE_RADIUS_MM + 4 == ZONE_BYTES);
    /// Most zones a WELCOME carries: the town and up to 16 hunting fields.
    pub const ZONE_COUNT_MAX: usize = 1 + migratory_kernel::HUNTING_FIELD_COUNT_MAX as usize;
    const _: () = assert!(TERRAIN_CONTENT_HASH + 32 == VIEW_RADIUS_MM);
    const _: () = assert!(VIEW_RADIUS_MM + 4 == VIEW_ENTITIES_MAX);
    const _: () = assert!(VIEW_ENTITIES_MAX + 2 == BASELINE_WINDOW_SNAPSHOTS);
    const _: () = assert!(BASELINE_WINDOW_SNAPSHOTS + 2 == CAST_RADIUS_MM);
    const _: () = assert!(CAST_RADIUS_MM + 4 == CAST_COOLDOWN_TICKS);
    const _: () = assert!(CAST_COOLDOWN_TICKS + 4 == AVATAR_SPEED_MAX_MM_PER_TICK);
    const _: () = assert!(AVATAR_SPEED_MAX_MM_PER_TICK + 4 == ZONE_COUNT);
    const _: () = assert!(ZONE_COUNT + 1 == ZONES);
    const _: () = assert!(TERRAIN_DELIVERY + 1 == TERRAIN_CHUNK_COUNT);
    const _: () = assert!(TERRAIN_TOTAL_BYTES + 8 == TERRAIN_CONTENT_HASH);
}

/// WELCOME's length with `zones` zone records, without a reconnect token (which adds
/// `RECONNECT_TOKEN_BYTES` at the end).
pub const fn welcome_bytes(zones: usize) -> usize {
    welcome_layout::ZONES + welcome_layout::ZONE_BYTES * zones
}

/// Why a client message was not accepted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("empty message")]
    Empty,
    #[error("unknown message type 0x{0:02x}")]
    UnknownType(u8),
    #[error("{kind} message is {actual} bytes, expected {expected}")]
    BadLength {
        kind: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("unsupported protocol version {found} (this server speaks {PROTOCOL_VERSION})")]
    UnsupportedVersion { found: u16 },
    #[error("{kind} flags 0x{flags:02x} set reserved bits")]
    ReservedFlags { kind: &'static str, flags: u8 },
    #[error("HELLO flag 0x{flag:02x} needs flag 0x{needs:02x}")]
    FlagNeedsFlag { flag: u8, needs: u8 },
    #[error("HELLO name is not UTF-8")]
    NameNotUtf8,
    #[error("BOOKMARK note is not UTF-8 or longer than {BOOKMARK_NOTE_BYTES_MAX} bytes")]
    NoteInvalid,
    #[error(
        "HELLO name is invalid (1..={NAME_BYTES_MAX} bytes; no control, separator or format characters)"
    )]
    NameInvalid,
}

impl ProtocolError {
    /// The close code a connection is closed with for this error.
    pub fn close_code(&self) -> u16 {
        match self {
            ProtocolError::NameInvalid | ProtocolError::NameNotUtf8 => close_code::POLICY_VIOLATION,
            _ => close_code::PROTOCOL_ERROR,
        }
    }
}

/// INPUT: the avatar's steering and whether to cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct InputMsg {
    /// Strictly increasing per connection; an INPUT whose seq is not above the last one is ignored.
    pub seq: u32,
    pub dir_x: i16,
    pub dir_y: i16,
    /// Percent, 0..=100.
    pub throttle: u8,
    pub cast: bool,
}

/// CAMERA: where a spectator looks (the centre of its view), in world millimetres; the
/// server clamps it to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CameraMsg {
    /// Shares INPUT's sequence: strictly increasing per connection.
    pub seq: u32,
    pub x_mm: i32,
    pub y_mm: i32,
}

/// A reconnect token: issued in WELCOME, presented in HELLO to take an avatar back.
pub type ReconnectToken = [u8; RECONNECT_TOKEN_BYTES];

/// What a HELLO asks besides a plain join (flags bits 0..=4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HelloOptions {
    /// The content hash of a terrain the client has cached (bit 0).
    pub cached_terrain: Option<[u8; 32]>,
    /// Join as a spectator (bit 1).
    pub spectate: bool,
    /// Ask for a reconnect token in WELCOME (bit 2).
    pub want_token: bool,
    /// Take back the avatar of this token (bit 3), and whether the client kept its
    /// decoded snapshots (bit 4).
    pub reclaim: Option<Reclaim>,
}

/// A HELLO's reclaim: the token, and whether the client can still decode deltas against
/// the snapshots it acked before the drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reclaim {
    pub token: ReconnectToken,
    pub keeps_baselines: bool,
}

impl HelloOptions {
    /// Whether WELCOME will carry a reconnect token: asked for, or a reclaim (whose
    /// token is used up and replaced).
    pub fn welcome_has_token(&self) -> bool {
        self.want_token || self.reclaim.is_some()
    }
}

/// A decoded client message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    Hello {
        version: u16,
        name: &'a str,
        options: HelloOptions,
    },
    Input(InputMsg),
    /// INPUT_ACK: handled as the INPUT, then the ACK.
    InputAck {
        input: InputMsg,
        tick: u32,
    },
    Camera(CameraMsg),
    Ack {
        tick: u32,
    },
    Ping {
        nonce: u64,
    },
    Bookmark {
        note: &'a str,
    },
}

/// WELCOME: who the client is, how the world runs, where casting works, what the client
/// will see, and what terrain follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub protocol_version: u16,
    pub client_id: u32,
    pub avatar_id: u32,
    pub slot: u32,
    /// The tick at which the join took effect.
    pub join_tick: u32,
    pub tick_rate_hz: u16,
    pub snapshot_interval_ticks: u16,
    pub world_size_mm: u32,
    pub terrain: WireTerrainDescriptor,
    pub world: WorldFacts,
    /// The client's reconnect token, when its HELLO asked for one (the last 16 bytes).
    pub reconnect_token: Option<ReconnectToken>,
}

/// What a client needs to draw and play the world (WELCOME bytes 82..).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldFacts {
    /// A client sees the entities within this distance of its avatar.
    pub view_radius_mm: u32,
    /// At most this many entities in one view (the nearest).
    pub view_entities_max: u16,
    /// How many of a client's most recent snapshots the server remembers as baselines: an
    /// ACK of one of them lets the next snapshot be a delta against it.
    pub baseline_window_snapshots: u16,
    /// A cast catches the boids within this distance of the avatar.
    pub cast_radius_mm: u32,
    /// Ticks after a cast before the next one can work.
    pub cast_cooldown_ticks: u32,
    pub avatar_speed_max_mm_per_tick: u32,
    /// The town first, then every hunting field.
    pub zones: Vec<WireZone>,
}

/// What a zone is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneKind {
    /// Where avatars join; casting does nothing here.
    Town = 0,
    /// Where a cast catches boids.
    HuntingField = 1,
}

/// A zone as WELCOME carries it: a circle (shape code 0, the only shape of protocol 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireZone {
    pub kind: ZoneKind,
    pub x_mm: u32,
    pub y_mm: u32,
    pub radius_mm: u32,
}

/// Shape code of a circle, the only zone shape protocol 2 has.
pub const ZONE_SHAPE_CIRCLE: u8 = 0;

/// What follows WELCOME.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerrainDelivery {
    /// One TERRAIN message.
    Single = 0,
    /// TERRAIN_HEADER, then `chunk_count` TERRAIN_CHUNKs.
    Chunked = 1,
    /// Nothing: the terrain whose hash the client's HELLO named is this world's.
    Cached = 2,
}

/// The terrain descriptor as WELCOME carries it (mirrors `terrain_wire::TerrainDescriptor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireTerrainDescriptor {
    pub cells: u32,
    pub cell_size_mm: u32,
    pub dtype: u8,
    pub compression: u8,
    pub delivery: TerrainDelivery,
    /// TERRAIN_CHUNK messages that follow (0 unless `Chunked`).
    pub chunk_count: u32,
    /// Bytes of the terrain messages that follow (0 when `Cached`).
    pub total_bytes: u64,
    pub content_hash: [u8; 32],
}

impl WireTerrainDescriptor {
    /// This descriptor for a client that has the terrain cached: nothing follows WELCOME.
    pub fn cached(self) -> WireTerrainDescriptor {
        WireTerrainDescriptor {
            delivery: TerrainDelivery::Cached,
            chunk_count: 0,
            total_bytes: 0,
            ..self
        }
    }

    pub fn from_descriptor(d: &TerrainDescriptor) -> WireTerrainDescriptor {
        WireTerrainDescriptor {
            cells: d.cells,
            cell_size_mm: d.cell_size_mm,
            dtype: d.dtype.code(),
            compression: d.compression.resolve().code(),
            delivery: if d.chunked {
                TerrainDelivery::Chunked
            } else {
                TerrainDelivery::Single
            },
            chunk_count: d.chunk_count,
            total_bytes: d.total_bytes,
            content_hash: d.content_hash,
        }
    }
}

pub(super) fn exact(kind: &'static str, msg: &[u8], expected: usize) -> Result<(), ProtocolError> {
    if msg.len() != expected {
        return Err(ProtocolError::BadLength {
            kind,
            expected,
            actual: msg.len(),
        });
    }
    Ok(())
}

pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests;
