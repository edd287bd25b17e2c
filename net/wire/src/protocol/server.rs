//! The server's side of the protocol: decoding what clients send, encoding WELCOME,
//! SNAPSHOT and PONG.

use super::{
    ack_layout, camera_layout, hello_layout, input_ack_layout, input_layout, ping_layout, pong_layout,
};
use super::{
    client_type, exact, server_type, u16_at, u32_at, u64_at, welcome_bytes, CameraMsg, ClientMessage,
    HelloOptions, InputMsg, ProtocolError, Reclaim, Welcome, ACK_BYTES, BOOKMARK_HEADER_BYTES,
    BOOKMARK_NOTE_BYTES_MAX, CAMERA_BYTES, HELLO_FLAGS_KNOWN, HELLO_FLAG_CACHED_TERRAIN,
    HELLO_FLAG_KEEPS_BASELINES, HELLO_FLAG_RECLAIM, HELLO_FLAG_SPECTATE, HELLO_FLAG_WANT_TOKEN,
    HELLO_HEADER_BYTES, INPUT_ACK_BYTES, INPUT_BYTES, INPUT_FLAG_CAST, PING_BYTES, PONG_BYTES,
    PROTOCOL_VERSION, RECONNECT_TOKEN_BYTES, ZONE_SHAPE_CIRCLE,
};

/// Decodes one client message. Lengths are exact: a short or long message is an error.
pub fn decode_client(msg: &[u8]) -> Result<ClientMessage<'_>, ProtocolError> {
    let Some(&kind) = msg.first() else {
        return Err(ProtocolError::Empty);
    };
    match kind {
        client_type::HELLO => {
            // The version comes first so a later version may change the rest of the layout.
            if msg.len() < 3 {
                return Err(ProtocolError::BadLength {
                    kind: "HELLO",
                    expected: HELLO_HEADER_BYTES,
                    actual: msg.len(),
                });
            }
            let version = u16_at(msg, hello_layout::VERSION);
            if version != PROTOCOL_VERSION {
                return Err(ProtocolError::UnsupportedVersion { found: version });
            }
            if msg.len() < HELLO_HEADER_BYTES {
                return Err(ProtocolError::BadLength {
                    kind: "HELLO",
                    expected: HELLO_HEADER_BYTES,
                    actual: msg.len(),
                });
            }
            let flags = msg[hello_layout::FLAGS];
            if flags & !HELLO_FLAGS_KNOWN != 0 {
                return Err(ProtocolError::ReservedFlags { kind: "HELLO", flags });
            }
            if flags & HELLO_FLAG_KEEPS_BASELINES != 0 && flags & HELLO_FLAG_RECLAIM == 0 {
                return Err(ProtocolError::FlagNeedsFlag {
                    flag: HELLO_FLAG_KEEPS_BASELINES,
                    needs: HELLO_FLAG_RECLAIM,
                });
            }
            let n = msg[hello_layout::NAME_LEN] as usize;
            let cached = flags & HELLO_FLAG_CACHED_TERRAIN != 0;
            let reclaim = flags & HELLO_FLAG_RECLAIM != 0;
            let hash_bytes = if cached { 32 } else { 0 };
            let token_bytes = if reclaim { RECONNECT_TOKEN_BYTES } else { 0 };
            exact("HELLO", msg, HELLO_HEADER_BYTES + n + hash_bytes + token_bytes)?;
            let name_end = HELLO_HEADER_BYTES + n;
            let name = std::str::from_utf8(&msg[HELLO_HEADER_BYTES..name_end])
                .map_err(|_| ProtocolError::NameNotUtf8)?;
            if !super::name_is_acceptable(name) {
                return Err(ProtocolError::NameInvalid);
            }
            let hash_end = name_end + hash_bytes;
            let cached_terrain = cached.then(|| {
                let mut h = [0u8; 32];
                h.copy_from_slice(&msg[name_end..hash_end]);
                h
            });
            let reclaim = reclaim.then(|| {
                let mut token = [0u8; RECONNECT_TOKEN_BYTES];
                token.copy_from_slice(&msg[hash_end..]);
                Reclaim {
                    token,
                    keeps_baselines: flags & HELLO_FLAG_KEEPS_BASELINES != 0,
                }
            });
            Ok(ClientMessage::Hello {
                version,
                name,
                options: HelloOptions {
                    cached_terrain,
                    spectate: flags & HELLO_FLAG_SPECTATE != 0,
                    want_token: flags & HELLO_FLAG_WANT_TOKEN != 0,
                    reclaim,
                },
            })
        }
        client_type::INPUT => {
            exact("INPUT", msg, INPUT_BYTES)?;
            Ok(ClientMessage::Input(input_fields("INPUT", msg)?))
        }
        client_type::INPUT_ACK => {
            exact("INPUT_ACK", msg, INPUT_ACK_BYTES)?;
            Ok(ClientMessage::InputAck {
                input: input_fields("INPUT_ACK", msg)?,
                tick: u32_at(msg, input_ack_layout::ACK_TICK),
            })
        }
        client_type::BOOKMARK => {
            let len = *msg.get(1).ok_or(ProtocolError::BadLength {
                kind: "BOOKMARK",
                expected: BOOKMARK_HEADER_BYTES,
                actual: msg.len(),
            })? as usize;
            exact("BOOKMARK", msg, BOOKMARK_HEADER_BYTES + len)?;
            let note =
                std::str::from_utf8(&msg[BOOKMARK_HEADER_BYTES..]).map_err(|_| ProtocolError::NoteInvalid)?;
            if note.len() > BOOKMARK_NOTE_BYTES_MAX {
                return Err(ProtocolError::NoteInvalid);
            }
            Ok(ClientMessage::Bookmark { note })
        }
        client_type::CAMERA => {
            exact("CAMERA", msg, CAMERA_BYTES)?;
            Ok(ClientMessage::Camera(CameraMsg {
                seq: u32_at(msg, camera_layout::SEQ),
                x_mm: u32_at(msg, camera_layout::X_MM) as i32,
                y_mm: u32_at(msg, camera_layout::Y_MM) as i32,
            }))
        }
        client_type::ACK => {
            exact("ACK", msg, ACK_BYTES)?;
            Ok(ClientMessage::Ack {
                tick: u32_at(msg, ack_layout::TICK),
            })
        }
        client_type::PING => {
            exact("PING", msg, PING_BYTES)?;
            Ok(ClientMessage::Ping {
                nonce: u64_at(msg, ping_layout::NONCE),
            })
        }
        other => Err(ProtocolError::UnknownType(other)),
    }
}

/// INPUT's fields (at `input_layout`'s offsets) of an INPUT or INPUT_ACK whose length
/// was checked.
fn input_fields(kind: &'static str, msg: &[u8]) -> Result<InputMsg, ProtocolError> {
    let flags = msg[input_layout::FLAGS];
    if flags & !INPUT_FLAG_CAST != 0 {
        return Err(ProtocolError::ReservedFlags { kind, flags });
    }
    Ok(InputMsg {
        seq: u32_at(msg, input_layout::SEQ),
        dir_x: u16_at(msg, input_layout::DIR_X) as i16,
        dir_y: u16_at(msg, input_layout::DIR_Y) as i16,
        throttle: msg[input_layout::THROTTLE],
        cast: flags & INPUT_FLAG_CAST != 0,
    })
}

/// WELCOME, laid out as `net/wire/PROTOCOL.md` gives it (offsets in `welcome_layout`),
/// with the reconnect token after the zones when there is one.
pub fn encode_welcome(w: &Welcome) -> Vec<u8> {
    use super::welcome_layout as at;
    let (t, f) = (&w.terrain, &w.world);
    assert!(f.zones.len() <= at::ZONE_COUNT_MAX, "{} zones", f.zones.len());
    let token_bytes = w.reconnect_token.map_or(0, |t| t.len());
    let mut b = vec![0u8; welcome_bytes(f.zones.len()) + token_bytes];
    let mut put = |offset: usize, bytes: &[u8]| b[offset..offset + bytes.len()].copy_from_slice(bytes);
    put(0, &[server_type::WELCOME]);
    put(at::PROTOCOL_VERSION, &w.protocol_version.to_le_bytes());
    put(at::CLIENT_ID, &w.client_id.to_le_bytes());
    put(at::AVATAR_ID, &w.avatar_id.to_le_bytes());
    put(at::SLOT, &w.slot.to_le_bytes());
    put(at::JOIN_TICK, &w.join_tick.to_le_bytes());
    put(at::TICK_RATE_HZ, &w.tick_rate_hz.to_le_bytes());
    put(
        at::SNAPSHOT_INTERVAL_TICKS,
        &w.snapshot_interval_ticks.to_le_bytes(),
    );
    put(at::WORLD_SIZE_MM, &w.world_size_mm.to_le_bytes());
    put(at::TERRAIN_CELLS, &t.cells.to_le_bytes());
    put(at::TERRAIN_CELL_SIZE_MM, &t.cell_size_mm.to_le_bytes());
    put(at::TERRAIN_DTYPE, &[t.dtype]);
    put(at::TERRAIN_COMPRESSION, &[t.compression]);
    put(at::TERRAIN_DELIVERY, &[t.delivery as u8]);
    put(at::TERRAIN_CHUNK_COUNT, &t.chunk_count.to_le_bytes());
    put(at::TERRAIN_TOTAL_BYTES, &t.total_bytes.to_le_bytes());
    put(at::TERRAIN_CONTENT_HASH, &t.content_hash);
    put(at::VIEW_RADIUS_MM, &f.view_radius_mm.to_le_bytes());
    put(at::VIEW_ENTITIES_MAX, &f.view_entities_max.to_le_bytes());
    put(
        at::BASELINE_WINDOW_SNAPSHOTS,
        &f.baseline_window_snapshots.to_le_bytes(),
    );
    put(at::CAST_RADIUS_MM, &f.cast_radius_mm.to_le_bytes());
    put(at::CAST_COOLDOWN_TICKS, &f.cast_cooldown_ticks.to_le_bytes());
    put(
        at::AVATAR_SPEED_MAX_MM_PER_TICK,
        &f.avatar_speed_max_mm_per_tick.to_le_bytes(),
    );
    put(at::ZONE_COUNT, &[f.zones.len() as u8]);
    for (i, z) in f.zones.iter().enumerate() {
        let o = at::ZONES + i * at::ZONE_BYTES;
        put(o + at::ZONE_KIND, &[z.kind as u8]);
        put(o + at::ZONE_SHAPE, &[ZONE_SHAPE_CIRCLE]);
        put(o + at::ZONE_X_MM, &z.x_mm.to_le_bytes());
        put(o + at::ZONE_Y_MM, &z.y_mm.to_le_bytes());
        put(o + at::ZONE_RADIUS_MM, &z.radius_mm.to_le_bytes());
    }
    if let Some(token) = &w.reconnect_token {
        put(welcome_bytes(f.zones.len()), token);
    }
    b
}

/// What comes before the kernel's snapshot in a SNAPSHOT message: the type byte. For a
/// writer that frames the message in place (the server's outlet) instead of calling
/// [`encode_snapshot`].
pub const SNAPSHOT_HEAD: [u8; 1] = [server_type::SNAPSHOT];

/// SNAPSHOT: the type byte, then the kernel's snapshot verbatim.
pub fn encode_snapshot(snapshot: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(SNAPSHOT_HEAD.len() + snapshot.len());
    b.extend_from_slice(&SNAPSHOT_HEAD);
    b.extend_from_slice(snapshot);
    b
}

/// PONG: the PING's nonce echoed, and the server's newest tick.
pub fn encode_pong(nonce: u64, server_tick: u32) -> [u8; PONG_BYTES] {
    let mut b = [0u8; PONG_BYTES];
    b[0] = server_type::PONG;
    b[pong_layout::NONCE..pong_layout::SERVER_TICK].copy_from_slice(&nonce.to_le_bytes());
    b[pong_layout::SERVER_TICK..].copy_from_slice(&server_tick.to_le_bytes());
    b
}
