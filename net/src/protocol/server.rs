//! The server's side of the protocol: decoding what clients send, encoding WELCOME,
//! SNAPSHOT and PONG.

use super::{
    client_type, exact, server_type, u16_at, u32_at, u64_at, ClientMessage, InputMsg, ProtocolError, Welcome,
    ACK_BYTES, HELLO_HEADER_BYTES, INPUT_BYTES, INPUT_FLAG_CAST, PING_BYTES, PONG_BYTES, PROTOCOL_VERSION,
    WELCOME_BYTES,
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
            let version = u16_at(msg, 1);
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
            let n = msg[3] as usize;
            exact("HELLO", msg, HELLO_HEADER_BYTES + n)?;
            let name = std::str::from_utf8(&msg[4..]).map_err(|_| ProtocolError::NameNotUtf8)?;
            if !migratory_kernel::name_is_valid(name) {
                return Err(ProtocolError::NameInvalid);
            }
            Ok(ClientMessage::Hello { version, name })
        }
        client_type::INPUT => {
            exact("INPUT", msg, INPUT_BYTES)?;
            let flags = msg[10];
            if flags & !INPUT_FLAG_CAST != 0 {
                return Err(ProtocolError::ReservedFlags(flags));
            }
            Ok(ClientMessage::Input(InputMsg {
                seq: u32_at(msg, 1),
                dir_x: u16_at(msg, 5) as i16,
                dir_y: u16_at(msg, 7) as i16,
                throttle: msg[9],
                cast: flags & INPUT_FLAG_CAST != 0,
            }))
        }
        client_type::ACK => {
            exact("ACK", msg, ACK_BYTES)?;
            Ok(ClientMessage::Ack { tick: u32_at(msg, 1) })
        }
        client_type::PING => {
            exact("PING", msg, PING_BYTES)?;
            Ok(ClientMessage::Ping {
                nonce: u64_at(msg, 1),
            })
        }
        other => Err(ProtocolError::UnknownType(other)),
    }
}

/// WELCOME, laid out as `net/PROTOCOL.md` gives it.
pub fn encode_welcome(w: &Welcome) -> Vec<u8> {
    let t = &w.terrain;
    let mut b = Vec::with_capacity(WELCOME_BYTES);
    b.push(server_type::WELCOME);
    b.extend_from_slice(&w.protocol_version.to_le_bytes());
    b.extend_from_slice(&w.client_id.to_le_bytes());
    b.extend_from_slice(&w.avatar_id.to_le_bytes());
    b.extend_from_slice(&w.slot.to_le_bytes());
    b.extend_from_slice(&w.join_tick.to_le_bytes());
    b.extend_from_slice(&w.tick_rate_hz.to_le_bytes());
    b.extend_from_slice(&w.snapshot_interval_ticks.to_le_bytes());
    b.extend_from_slice(&w.world_size_mm.to_le_bytes());
    b.extend_from_slice(&t.cells.to_le_bytes());
    b.extend_from_slice(&t.cell_size_mm.to_le_bytes());
    b.push(t.dtype);
    b.push(t.compression);
    b.push(t.chunked as u8);
    b.extend_from_slice(&t.chunk_count.to_le_bytes());
    b.extend_from_slice(&t.total_bytes.to_le_bytes());
    b.extend_from_slice(&t.content_hash);
    debug_assert_eq!(b.len(), WELCOME_BYTES);
    b
}

/// SNAPSHOT: the type byte, then the kernel's snapshot verbatim.
pub fn encode_snapshot(snapshot: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(1 + snapshot.len());
    b.push(server_type::SNAPSHOT);
    b.extend_from_slice(snapshot);
    b
}

/// PONG: the PING's nonce echoed, and the server's newest tick.
pub fn encode_pong(nonce: u64, server_tick: u32) -> [u8; PONG_BYTES] {
    let mut b = [0u8; PONG_BYTES];
    b[0] = server_type::PONG;
    b[1..9].copy_from_slice(&nonce.to_le_bytes());
    b[9..13].copy_from_slice(&server_tick.to_le_bytes());
    b
}
