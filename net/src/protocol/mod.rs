//! Protocol v1: the binary messages between a client and the server (specified in
//! `net/PROTOCOL.md`), with decoders that never panic and say why a message is bad.
//!
//! Every message is one binary WebSocket message; its first byte is its type. Client
//! and server types use disjoint values so a captured mixed stream reads unambiguously.
//! All integers are little-endian. `server` holds what the server encodes and decodes,
//! `client` what a client does (bots, tests; the browser viewer mirrors it).

use thiserror::Error;

mod client;
mod server;

pub use client::{
    decode_server, encode_ack, encode_hello, encode_input, encode_ping, ServerMessage, ServerMessageError,
};
pub use server::{decode_client, encode_pong, encode_snapshot, encode_welcome};

use crate::terrain_wire::TerrainDescriptor;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// Client → server message types.
pub mod client_type {
    pub const HELLO: u8 = 0x10;
    pub const INPUT: u8 = 0x11;
    pub const ACK: u8 = 0x12;
    pub const PING: u8 = 0x13;
}

/// Server → client message types.
pub mod server_type {
    pub const WELCOME: u8 = 0x01;
    pub const SNAPSHOT: u8 = 0x02;
    /// Single-shot terrain (layout in `net/TERRAIN_WIRE.md`).
    pub const TERRAIN: u8 = crate::terrain_wire::MSG_TERRAIN;
    /// One piece of a chunked terrain (layout in `net/TERRAIN_WIRE.md`).
    pub const TERRAIN_CHUNK: u8 = crate::terrain_wire::MSG_TERRAIN_CHUNK;
    /// Announces a chunked terrain (layout in `net/TERRAIN_WIRE.md`).
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
}

/// Bit 0 of INPUT's flags: cast this tick.
pub const INPUT_FLAG_CAST: u8 = 1;
/// Longest player name in bytes (the kernel's limit).
pub const NAME_BYTES_MAX: usize = migratory_kernel::NAME_BYTES_MAX;

pub const HELLO_HEADER_BYTES: usize = 4;
pub const INPUT_BYTES: usize = 11;
pub const ACK_BYTES: usize = 5;
pub const PING_BYTES: usize = 9;
pub const PONG_BYTES: usize = 13;
pub const WELCOME_BYTES: usize = 82;

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
    #[error("INPUT flags 0x{0:02x} set reserved bits")]
    ReservedFlags(u8),
    #[error("HELLO name is not UTF-8")]
    NameNotUtf8,
    #[error("HELLO name is invalid (1..={NAME_BYTES_MAX} bytes, no control characters)")]
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

/// A decoded client message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    Hello { version: u16, name: &'a str },
    Input(InputMsg),
    Ack { tick: u32 },
    Ping { nonce: u64 },
}

/// WELCOME: who the client is, how the world runs, and what terrain follows.
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
}

/// The terrain descriptor as WELCOME carries it (mirrors `terrain_wire::TerrainDescriptor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireTerrainDescriptor {
    pub cells: u32,
    pub cell_size_mm: u32,
    pub dtype: u8,
    pub compression: u8,
    pub chunked: bool,
    pub chunk_count: u32,
    pub total_bytes: u64,
    pub content_hash: [u8; 32],
}

impl WireTerrainDescriptor {
    pub fn from_descriptor(d: &TerrainDescriptor) -> WireTerrainDescriptor {
        WireTerrainDescriptor {
            cells: d.cells,
            cell_size_mm: d.cell_size_mm,
            dtype: d.dtype.code(),
            compression: d.compression.resolve().code(),
            chunked: d.chunked,
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn client_messages_round_trip() {
        let hello = encode_hello(PROTOCOL_VERSION, "ada");
        assert_eq!(
            decode_client(&hello),
            Ok(ClientMessage::Hello {
                version: 1,
                name: "ada"
            })
        );
        let m = InputMsg {
            seq: 7,
            dir_x: -300,
            dir_y: 12,
            throttle: 100,
            cast: true,
        };
        assert_eq!(decode_client(&encode_input(&m)), Ok(ClientMessage::Input(m)));
        assert_eq!(
            decode_client(&encode_ack(99)),
            Ok(ClientMessage::Ack { tick: 99 })
        );
        assert_eq!(
            decode_client(&encode_ping(u64::MAX - 3)),
            Ok(ClientMessage::Ping { nonce: u64::MAX - 3 })
        );
    }

    #[test]
    fn the_examples_in_protocol_md() {
        assert_eq!(encode_hello(1, "ada"), [0x10, 0x01, 0x00, 0x03, 0x61, 0x64, 0x61]);
        let m = InputMsg {
            seq: 7,
            dir_x: -300,
            dir_y: 12,
            throttle: 100,
            cast: true,
        };
        assert_eq!(
            encode_input(&m),
            [0x11, 0x07, 0x00, 0x00, 0x00, 0xd4, 0xfe, 0x0c, 0x00, 0x64, 0x01]
        );
    }

    #[test]
    fn bad_client_messages_are_named() {
        assert_eq!(decode_client(&[]), Err(ProtocolError::Empty));
        assert_eq!(decode_client(&[0x7f, 1]), Err(ProtocolError::UnknownType(0x7f)));
        assert_eq!(
            decode_client(&encode_hello(2, "x")),
            Err(ProtocolError::UnsupportedVersion { found: 2 })
        );
        assert_eq!(
            decode_client(&encode_hello(1, "")),
            Err(ProtocolError::NameInvalid)
        );
        let mut long = encode_input(&InputMsg::default());
        long.push(0);
        assert!(matches!(
            decode_client(&long),
            Err(ProtocolError::BadLength { kind: "INPUT", .. })
        ));
        let mut flags = encode_input(&InputMsg::default());
        flags[10] = 0x80;
        assert_eq!(decode_client(&flags), Err(ProtocolError::ReservedFlags(0x80)));
        assert_eq!(
            ProtocolError::UnsupportedVersion { found: 9 }.close_code(),
            close_code::PROTOCOL_ERROR
        );
    }

    #[test]
    fn server_messages_round_trip() {
        let w = Welcome {
            protocol_version: 1,
            client_id: 5,
            avatar_id: 5001,
            slot: 1,
            join_tick: 40,
            tick_rate_hz: 60,
            snapshot_interval_ticks: 3,
            world_size_mm: 1_024_000,
            terrain: WireTerrainDescriptor {
                cells: 1024,
                cell_size_mm: 1000,
                dtype: 1,
                compression: 2,
                chunked: true,
                chunk_count: 4,
                total_bytes: 123_456_789_012,
                content_hash: [7; 32],
            },
        };
        let b = encode_welcome(&w);
        assert_eq!(b.len(), WELCOME_BYTES);
        assert_eq!(decode_server(&b), Ok(ServerMessage::Welcome(w)));
        let p = encode_pong(42, 1000);
        assert_eq!(
            decode_server(&p),
            Ok(ServerMessage::Pong {
                nonce: 42,
                server_tick: 1000
            })
        );
        let mut snapshot = vec![1u8; 17];
        snapshot[1..5].copy_from_slice(&77u32.to_le_bytes());
        let s = encode_snapshot(&snapshot);
        assert_eq!(
            decode_server(&s),
            Ok(ServerMessage::Snapshot {
                tick: 77,
                snapshot: &snapshot
            })
        );
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_client(&bytes);
            let _ = decode_server(&bytes);
        }
    }
}
