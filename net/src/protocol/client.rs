//! A client's side of the protocol: encoding HELLO, INPUT, ACK and PING, and decoding
//! what the server sends. Used by the bots and the tests; nothing in the server uses it.

use thiserror::Error;

use super::{
    client_type, server_type, u16_at, u32_at, u64_at, InputMsg, Welcome, WireTerrainDescriptor, ACK_BYTES,
    HELLO_HEADER_BYTES, INPUT_BYTES, INPUT_FLAG_CAST, PING_BYTES, PONG_BYTES, WELCOME_BYTES,
};

/// HELLO. `name` must be at most 255 bytes to encode (the server accepts up to 32).
pub fn encode_hello(version: u16, name: &str) -> Vec<u8> {
    let name = &name.as_bytes()[..name.len().min(255)];
    let mut b = Vec::with_capacity(HELLO_HEADER_BYTES + name.len());
    b.push(client_type::HELLO);
    b.extend_from_slice(&version.to_le_bytes());
    b.push(name.len() as u8);
    b.extend_from_slice(name);
    b
}

pub fn encode_input(m: &InputMsg) -> Vec<u8> {
    let mut b = Vec::with_capacity(INPUT_BYTES);
    b.push(client_type::INPUT);
    b.extend_from_slice(&m.seq.to_le_bytes());
    b.extend_from_slice(&m.dir_x.to_le_bytes());
    b.extend_from_slice(&m.dir_y.to_le_bytes());
    b.push(m.throttle);
    b.push(if m.cast { INPUT_FLAG_CAST } else { 0 });
    b
}

pub fn encode_ack(tick: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(ACK_BYTES);
    b.push(client_type::ACK);
    b.extend_from_slice(&tick.to_le_bytes());
    b
}

pub fn encode_ping(nonce: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(PING_BYTES);
    b.push(client_type::PING);
    b.extend_from_slice(&nonce.to_le_bytes());
    b
}

/// A decoded server message (the client side; terrain messages are passed through whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMessage<'a> {
    Welcome(Welcome),
    /// The kernel snapshot (without the type byte) and its tick (snapshot bytes 1..5).
    Snapshot {
        tick: u32,
        snapshot: &'a [u8],
    },
    /// TERRAIN, TERRAIN_HEADER or TERRAIN_CHUNK: the whole message, for `TerrainAssembler`.
    Terrain(&'a [u8]),
    Pong {
        nonce: u64,
        server_tick: u32,
    },
}

/// Why a server message could not be read (client side).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ServerMessageError {
    #[error("empty message")]
    Empty,
    #[error("unknown server message type 0x{0:02x}")]
    UnknownType(u8),
    #[error("{kind} message is {actual} bytes, expected {expected}")]
    BadLength {
        kind: &'static str,
        expected: usize,
        actual: usize,
    },
}

/// Decodes one server message.
pub fn decode_server(msg: &[u8]) -> Result<ServerMessage<'_>, ServerMessageError> {
    let Some(&kind) = msg.first() else {
        return Err(ServerMessageError::Empty);
    };
    let len = |name, expected: usize| {
        if msg.len() == expected {
            Ok(())
        } else {
            Err(ServerMessageError::BadLength {
                kind: name,
                expected,
                actual: msg.len(),
            })
        }
    };
    match kind {
        server_type::WELCOME => {
            len("WELCOME", WELCOME_BYTES)?;
            let mut hash = [0u8; 32];
            hash.copy_from_slice(&msg[50..82]);
            Ok(ServerMessage::Welcome(Welcome {
                protocol_version: u16_at(msg, 1),
                client_id: u32_at(msg, 3),
                avatar_id: u32_at(msg, 7),
                slot: u32_at(msg, 11),
                join_tick: u32_at(msg, 15),
                tick_rate_hz: u16_at(msg, 19),
                snapshot_interval_ticks: u16_at(msg, 21),
                world_size_mm: u32_at(msg, 23),
                terrain: WireTerrainDescriptor {
                    cells: u32_at(msg, 27),
                    cell_size_mm: u32_at(msg, 31),
                    dtype: msg[35],
                    compression: msg[36],
                    chunked: msg[37] != 0,
                    chunk_count: u32_at(msg, 38),
                    total_bytes: u64_at(msg, 42),
                    content_hash: hash,
                },
            }))
        }
        server_type::SNAPSHOT => {
            // The snapshot's 17-byte header carries the tick at bytes 1..5.
            if msg.len() < 1 + 17 {
                return Err(ServerMessageError::BadLength {
                    kind: "SNAPSHOT",
                    expected: 18,
                    actual: msg.len(),
                });
            }
            Ok(ServerMessage::Snapshot {
                tick: u32_at(msg, 2),
                snapshot: &msg[1..],
            })
        }
        server_type::TERRAIN | server_type::TERRAIN_CHUNK | server_type::TERRAIN_HEADER => {
            Ok(ServerMessage::Terrain(msg))
        }
        server_type::PONG => {
            len("PONG", PONG_BYTES)?;
            Ok(ServerMessage::Pong {
                nonce: u64_at(msg, 1),
                server_tick: u32_at(msg, 9),
            })
        }
        other => Err(ServerMessageError::UnknownType(other)),
    }
}
