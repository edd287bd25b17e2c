//! A client's side of the protocol: encoding HELLO, INPUT, INPUT_ACK, CAMERA, ACK and PING, and decoding
//! what the server sends. Used by the bots and the tests; nothing in the server uses it.

use thiserror::Error;

use super::{
    client_type, server_type, u16_at, u32_at, u64_at, welcome_bytes, CameraMsg, HelloOptions, InputMsg,
    TerrainDelivery, Welcome, WireTerrainDescriptor, WireZone, WorldFacts, ZoneKind, ACK_BYTES,
    BOOKMARK_HEADER_BYTES, BOOKMARK_NOTE_BYTES_MAX, CAMERA_BYTES, HELLO_FLAG_CACHED_TERRAIN,
    HELLO_FLAG_KEEPS_BASELINES, HELLO_FLAG_RECLAIM, HELLO_FLAG_SPECTATE, HELLO_FLAG_WANT_TOKEN,
    HELLO_HEADER_BYTES, INPUT_ACK_BYTES, INPUT_BYTES, INPUT_FLAG_CAST, PING_BYTES, PONG_BYTES,
    RECONNECT_TOKEN_BYTES, ZONE_SHAPE_CIRCLE,
};

/// HELLO, naming the content hash of a terrain the client has cached, if any (the server
/// then skips sending it when it is this world's). `name` must be at most 255 bytes to
/// encode (the server accepts up to 32).
pub fn encode_hello(version: u16, name: &str, cached_terrain: Option<&[u8; 32]>) -> Vec<u8> {
    encode_hello_with(
        version,
        name,
        &HelloOptions {
            cached_terrain: cached_terrain.copied(),
            ..HelloOptions::default()
        },
    )
}

/// HELLO of a spectator: the client gets snapshots around a camera it moves with CAMERA.
pub fn encode_hello_spectating(version: u16, name: &str, cached_terrain: Option<&[u8; 32]>) -> Vec<u8> {
    encode_hello_with(
        version,
        name,
        &HelloOptions {
            cached_terrain: cached_terrain.copied(),
            spectate: true,
            ..HelloOptions::default()
        },
    )
}

/// HELLO with every option: flags from `o`, then the name, the cached terrain hash and
/// the reconnect token, each only when present.
pub fn encode_hello_with(version: u16, name: &str, o: &HelloOptions) -> Vec<u8> {
    let name = &name.as_bytes()[..name.len().min(255)];
    let mut flags = 0;
    for (on, bit) in [
        (o.cached_terrain.is_some(), HELLO_FLAG_CACHED_TERRAIN),
        (o.spectate, HELLO_FLAG_SPECTATE),
        (o.want_token, HELLO_FLAG_WANT_TOKEN),
        (o.reclaim.is_some(), HELLO_FLAG_RECLAIM),
        (
            o.reclaim.is_some_and(|r| r.keeps_baselines),
            HELLO_FLAG_KEEPS_BASELINES,
        ),
    ] {
        if on {
            flags |= bit;
        }
    }
    let mut b = Vec::with_capacity(HELLO_HEADER_BYTES + name.len() + 32 + RECONNECT_TOKEN_BYTES);
    b.push(client_type::HELLO);
    b.extend_from_slice(&version.to_le_bytes());
    b.push(flags);
    b.push(name.len() as u8);
    b.extend_from_slice(name);
    if let Some(hash) = &o.cached_terrain {
        b.extend_from_slice(hash);
    }
    if let Some(r) = &o.reclaim {
        b.extend_from_slice(&r.token);
    }
    b
}

pub fn encode_input(m: &InputMsg) -> Vec<u8> {
    let mut b = Vec::with_capacity(INPUT_BYTES);
    put_input(&mut b, client_type::INPUT, m);
    b
}

/// INPUT_ACK: the INPUT `m` and the ACK of `tick` in one message.
pub fn encode_input_ack(m: &InputMsg, tick: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(INPUT_ACK_BYTES);
    put_input(&mut b, client_type::INPUT_ACK, m);
    b.extend_from_slice(&tick.to_le_bytes());
    b
}

/// The type byte and INPUT's fields, in order.
fn put_input(b: &mut Vec<u8>, kind: u8, m: &InputMsg) {
    b.push(kind);
    b.extend_from_slice(&m.seq.to_le_bytes());
    b.extend_from_slice(&m.dir_x.to_le_bytes());
    b.extend_from_slice(&m.dir_y.to_le_bytes());
    b.push(m.throttle);
    b.push(if m.cast { INPUT_FLAG_CAST } else { 0 });
}

/// BOOKMARK with `note` (at most `BOOKMARK_NOTE_BYTES_MAX` bytes; longer is cut at a
/// character boundary).
pub fn encode_bookmark(note: &str) -> Vec<u8> {
    let mut end = note.len().min(BOOKMARK_NOTE_BYTES_MAX);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    let mut b = Vec::with_capacity(BOOKMARK_HEADER_BYTES + end);
    b.push(client_type::BOOKMARK);
    b.push(end as u8);
    b.extend_from_slice(&note.as_bytes()[..end]);
    b
}

pub fn encode_camera(m: &CameraMsg) -> Vec<u8> {
    let mut b = Vec::with_capacity(CAMERA_BYTES);
    b.push(client_type::CAMERA);
    b.extend_from_slice(&m.seq.to_le_bytes());
    b.extend_from_slice(&m.x_mm.to_le_bytes());
    b.extend_from_slice(&m.y_mm.to_le_bytes());
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
    #[error("WELCOME field {field} has the unknown value {value}")]
    BadField { field: &'static str, value: u8 },
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
        server_type::WELCOME => decode_welcome(msg).map(ServerMessage::Welcome),
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
                nonce: u64_at(msg, super::pong_layout::NONCE),
                server_tick: u32_at(msg, super::pong_layout::SERVER_TICK),
            })
        }
        other => Err(ServerMessageError::UnknownType(other)),
    }
}

/// WELCOME (offsets in `welcome_layout`). The zone count decides the length, which must
/// be exact; unknown codes are errors, so a client never guesses.
fn decode_welcome(msg: &[u8]) -> Result<Welcome, ServerMessageError> {
    use super::welcome_layout as at;
    let short = || ServerMessageError::BadLength {
        kind: "WELCOME",
        expected: welcome_bytes(0),
        actual: msg.len(),
    };
    let zone_count = *msg.get(at::ZONE_COUNT).ok_or_else(short)? as usize;
    // Exactly the zones, or the zones and a reconnect token (asked for in HELLO).
    let plain = welcome_bytes(zone_count);
    if msg.len() != plain && msg.len() != plain + RECONNECT_TOKEN_BYTES {
        return Err(ServerMessageError::BadLength {
            kind: "WELCOME",
            expected: plain,
            actual: msg.len(),
        });
    }
    let reconnect_token = (msg.len() > plain).then(|| {
        let mut t = [0u8; RECONNECT_TOKEN_BYTES];
        t.copy_from_slice(&msg[plain..]);
        t
    });
    let delivery = match msg[at::TERRAIN_DELIVERY] {
        0 => TerrainDelivery::Single,
        1 => TerrainDelivery::Chunked,
        2 => TerrainDelivery::Cached,
        value => {
            return Err(ServerMessageError::BadField {
                field: "terrain.delivery",
                value,
            })
        }
    };
    let mut zones = Vec::with_capacity(zone_count);
    for i in 0..zone_count {
        let o = at::ZONES + i * at::ZONE_BYTES;
        let kind = match msg[o + at::ZONE_KIND] {
            0 => ZoneKind::Town,
            1 => ZoneKind::HuntingField,
            value => {
                return Err(ServerMessageError::BadField {
                    field: "zone.kind",
                    value,
                })
            }
        };
        if msg[o + at::ZONE_SHAPE] != ZONE_SHAPE_CIRCLE {
            return Err(ServerMessageError::BadField {
                field: "zone.shape",
                value: msg[o + at::ZONE_SHAPE],
            });
        }
        zones.push(WireZone {
            kind,
            x_mm: u32_at(msg, o + at::ZONE_X_MM),
            y_mm: u32_at(msg, o + at::ZONE_Y_MM),
            radius_mm: u32_at(msg, o + at::ZONE_RADIUS_MM),
        });
    }
    let mut content_hash = [0u8; 32];
    content_hash.copy_from_slice(&msg[at::TERRAIN_CONTENT_HASH..at::TERRAIN_CONTENT_HASH + 32]);
    Ok(Welcome {
        protocol_version: u16_at(msg, at::PROTOCOL_VERSION),
        client_id: u32_at(msg, at::CLIENT_ID),
        avatar_id: u32_at(msg, at::AVATAR_ID),
        slot: u32_at(msg, at::SLOT),
        join_tick: u32_at(msg, at::JOIN_TICK),
        tick_rate_hz: u16_at(msg, at::TICK_RATE_HZ),
        snapshot_interval_ticks: u16_at(msg, at::SNAPSHOT_INTERVAL_TICKS),
        world_size_mm: u32_at(msg, at::WORLD_SIZE_MM),
        terrain: WireTerrainDescriptor {
            cells: u32_at(msg, at::TERRAIN_CELLS),
            cell_size_mm: u32_at(msg, at::TERRAIN_CELL_SIZE_MM),
            dtype: msg[at::TERRAIN_DTYPE],
            compression: msg[at::TERRAIN_COMPRESSION],
            delivery,
            chunk_count: u32_at(msg, at::TERRAIN_CHUNK_COUNT),
            total_bytes: u64_at(msg, at::TERRAIN_TOTAL_BYTES),
            content_hash,
        },
        world: WorldFacts {
            view_radius_mm: u32_at(msg, at::VIEW_RADIUS_MM),
            view_entities_max: u16_at(msg, at::VIEW_ENTITIES_MAX),
            baseline_window_snapshots: u16_at(msg, at::BASELINE_WINDOW_SNAPSHOTS),
            cast_radius_mm: u32_at(msg, at::CAST_RADIUS_MM),
            cast_cooldown_ticks: u32_at(msg, at::CAST_COOLDOWN_TICKS),
            avatar_speed_max_mm_per_tick: u32_at(msg, at::AVATAR_SPEED_MAX_MM_PER_TICK),
            zones,
        },
        reconnect_token,
    })
}
