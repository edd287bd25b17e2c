//! `net/view/web/layout.js`, the byte layouts the page reads and writes, generated from
//! the Rust side's named offsets: protocol 2's messages (`migratory-wire`), the replay
//! viewer's `/replay/state` records, the snapshot header and its units (`migratory-kernel`),
//! the terrain messages' headers, the `/viewer/terrain` header and the timeline's
//! marker codes. The JavaScript imports its offsets from that file instead of spelling
//! them, and a test here fails when the committed file is not what the Rust layouts make
//! now (`MIGRATORY_BLESS=1` rewrites it), so a moved offset cannot leave one side behind.

use migratory_wire::protocol::{
    ack_layout, camera_layout, client_type, close_code, hello_layout, input_ack_layout, input_layout,
    ping_layout, pong_layout, server_type, welcome_layout as welcome, TerrainDelivery, ZoneKind, ACK_BYTES,
    CAMERA_BYTES, HELLO_FLAG_CACHED_TERRAIN, HELLO_FLAG_KEEPS_BASELINES, HELLO_FLAG_RECLAIM,
    HELLO_FLAG_SPECTATE, HELLO_FLAG_WANT_TOKEN, INPUT_ACK_BYTES, INPUT_BYTES, INPUT_FLAG_CAST,
    NAME_BYTES_MAX, PING_BYTES, PONG_BYTES, PROTOCOL_VERSION, RECONNECT_TOKEN_BYTES, ZONE_SHAPE_CIRCLE,
};

use migratory_kernel::{
    snapshot_header_layout as snapshot, NO_BASELINE, POS_QUANT_SHIFT, SNAPSHOT_FORMAT_VERSION,
    VEL_QUANT_SHIFT,
};
use migratory_wire::terrain_wire::{
    chunk_layout, grid_layout, MAX_CELLS, WIRE_VERSION as TERRAIN_WIRE_VERSION,
};

use crate::assets::terrain_layout as terrain;
use crate::replay_layout::{marker, state_layout as state};

/// One `export const NAME = Object.freeze({ FIELD: value, ... });`.
fn object(out: &mut String, doc: &str, name: &str, fields: &[(&str, u64)]) {
    out.push_str(&format!(
        "\n/** {doc} */\nexport const {name} = Object.freeze({{\n"
    ));
    for (field, value) in fields {
        out.push_str(&format!("  {field}: {value},\n"));
    }
    out.push_str("});\n");
}

/// An offset or size as a value of `layout.js`.
fn u(v: usize) -> u64 {
    v as u64
}

/// A byte code as a value of `layout.js`.
fn b(v: u8) -> u64 {
    u64::from(v)
}

/// The text of `layout.js`.
pub fn layout_js() -> String {
    let mut o = String::from(
        "// The byte layouts the viewer reads and writes, generated from the Rust side's named\n\
         // offsets by net/view/src/layout_js.rs. Do not edit: after a Rust layout moves,\n\
         // `MIGRATORY_BLESS=1 cargo test -p migratory-view layout_js` rewrites this file.\n",
    );
    o.push_str(&format!(
        "\nexport const PROTOCOL_VERSION = {PROTOCOL_VERSION};\n"
    ));
    protocol_messages(&mut o);
    protocol_messages_after_hello(&mut o);
    welcome(&mut o);
    snapshot_and_terrain(&mut o);
    viewer(&mut o);
    o
}

/// Protocol 2: message types, HELLO and the close codes.
fn protocol_messages(o: &mut String) {
    object(
        o,
        "Client to server message types (byte 0).",
        "CLIENT_TYPE",
        &[
            ("HELLO", b(client_type::HELLO)),
            ("INPUT", b(client_type::INPUT)),
            ("ACK", b(client_type::ACK)),
            ("PING", b(client_type::PING)),
            ("CAMERA", b(client_type::CAMERA)),
            ("BOOKMARK", b(client_type::BOOKMARK)),
            ("INPUT_ACK", b(client_type::INPUT_ACK)),
        ],
    );
    object(
        o,
        "Server to client message types (byte 0).",
        "SERVER_TYPE",
        &[
            ("WELCOME", b(server_type::WELCOME)),
            ("SNAPSHOT", b(server_type::SNAPSHOT)),
            ("TERRAIN", b(server_type::TERRAIN)),
            ("TERRAIN_CHUNK", b(server_type::TERRAIN_CHUNK)),
            ("TERRAIN_HEADER", b(server_type::TERRAIN_HEADER)),
            ("PONG", b(server_type::PONG)),
        ],
    );
    object(
        o,
        "HELLO: offsets, flags and the name limit.",
        "HELLO",
        &[
            ("VERSION", u(hello_layout::VERSION)),
            ("FLAGS", u(hello_layout::FLAGS)),
            ("NAME_LEN", u(hello_layout::NAME_LEN)),
            ("NAME", u(hello_layout::NAME)),
            ("FLAG_CACHED_TERRAIN", b(HELLO_FLAG_CACHED_TERRAIN)),
            ("FLAG_SPECTATE", b(HELLO_FLAG_SPECTATE)),
            ("FLAG_WANT_TOKEN", b(HELLO_FLAG_WANT_TOKEN)),
            ("FLAG_RECLAIM", b(HELLO_FLAG_RECLAIM)),
            ("FLAG_KEEPS_BASELINES", b(HELLO_FLAG_KEEPS_BASELINES)),
            ("NAME_BYTES_MAX", u(NAME_BYTES_MAX)),
            ("TERRAIN_HASH_BYTES", 32),
            ("TOKEN_BYTES", u(RECONNECT_TOKEN_BYTES)),
        ],
    );
    object(
        o,
        "Close codes the server uses beyond RFC 6455's (PROTOCOL.md section 5).",
        "CLOSE",
        &[
            ("GOING_AWAY", u64::from(close_code::GOING_AWAY)),
            ("REJOIN", u64::from(close_code::REJOIN)),
            ("RECLAIM_REFUSED", u64::from(close_code::RECLAIM_REFUSED)),
            ("REPLACED", u64::from(close_code::REPLACED)),
        ],
    );
}

/// Protocol 2's messages after HELLO: INPUT, INPUT_ACK, CAMERA, BOOKMARK, ACK, PING and PONG.
fn protocol_messages_after_hello(o: &mut String) {
    object(
        o,
        "INPUT: offsets, size and the cast flag.",
        "INPUT",
        &[
            ("SEQ", u(input_layout::SEQ)),
            ("DIR_X", u(input_layout::DIR_X)),
            ("DIR_Y", u(input_layout::DIR_Y)),
            ("THROTTLE", u(input_layout::THROTTLE)),
            ("FLAGS", u(input_layout::FLAGS)),
            ("FLAG_CAST", b(INPUT_FLAG_CAST)),
            ("BYTES", u(INPUT_BYTES)),
        ],
    );
    object(
        o,
        "INPUT_ACK: INPUT's fields at INPUT's offsets, then the acked tick.",
        "INPUT_ACK",
        &[
            ("ACK_TICK", u(input_ack_layout::ACK_TICK)),
            ("BYTES", u(INPUT_ACK_BYTES)),
        ],
    );
    object(
        o,
        "CAMERA: offsets and size.",
        "CAMERA",
        &[
            ("SEQ", u(camera_layout::SEQ)),
            ("X_MM", u(camera_layout::X_MM)),
            ("Y_MM", u(camera_layout::Y_MM)),
            ("BYTES", u(CAMERA_BYTES)),
        ],
    );
    object(
        o,
        "BOOKMARK: header size and the longest note.",
        "BOOKMARK",
        &[
            ("HEADER_BYTES", u(migratory_wire::protocol::BOOKMARK_HEADER_BYTES)),
            (
                "NOTE_BYTES_MAX",
                u(migratory_wire::protocol::BOOKMARK_NOTE_BYTES_MAX),
            ),
        ],
    );
    object(
        o,
        "ACK: offsets and size.",
        "ACK",
        &[("TICK", u(ack_layout::TICK)), ("BYTES", u(ACK_BYTES))],
    );
    object(
        o,
        "PING: offsets and size.",
        "PING",
        &[("NONCE", u(ping_layout::NONCE)), ("BYTES", u(PING_BYTES))],
    );
    object(
        o,
        "PONG: offsets and size.",
        "PONG",
        &[
            ("NONCE", u(pong_layout::NONCE)),
            ("SERVER_TICK", u(pong_layout::SERVER_TICK)),
            ("BYTES", u(PONG_BYTES)),
        ],
    );
}

/// WELCOME and the codes it carries.
fn welcome(o: &mut String) {
    object(
        o,
        "WELCOME: offsets; zone records of ZONE_BYTES follow at ZONES.",
        "WELCOME",
        &[
            ("PROTOCOL_VERSION", u(welcome::PROTOCOL_VERSION)),
            ("CLIENT_ID", u(welcome::CLIENT_ID)),
            ("AVATAR_ID", u(welcome::AVATAR_ID)),
            ("SLOT", u(welcome::SLOT)),
            ("JOIN_TICK", u(welcome::JOIN_TICK)),
            ("TICK_RATE_HZ", u(welcome::TICK_RATE_HZ)),
            ("SNAPSHOT_INTERVAL_TICKS", u(welcome::SNAPSHOT_INTERVAL_TICKS)),
            ("WORLD_SIZE_MM", u(welcome::WORLD_SIZE_MM)),
            ("TERRAIN_CELLS", u(welcome::TERRAIN_CELLS)),
            ("TERRAIN_CELL_SIZE_MM", u(welcome::TERRAIN_CELL_SIZE_MM)),
            ("TERRAIN_DTYPE", u(welcome::TERRAIN_DTYPE)),
            ("TERRAIN_COMPRESSION", u(welcome::TERRAIN_COMPRESSION)),
            ("TERRAIN_DELIVERY", u(welcome::TERRAIN_DELIVERY)),
            ("TERRAIN_CHUNK_COUNT", u(welcome::TERRAIN_CHUNK_COUNT)),
            ("TERRAIN_TOTAL_BYTES", u(welcome::TERRAIN_TOTAL_BYTES)),
            ("TERRAIN_CONTENT_HASH", u(welcome::TERRAIN_CONTENT_HASH)),
            ("VIEW_RADIUS_MM", u(welcome::VIEW_RADIUS_MM)),
            ("VIEW_ENTITIES_MAX", u(welcome::VIEW_ENTITIES_MAX)),
            ("BASELINE_WINDOW_SNAPSHOTS", u(welcome::BASELINE_WINDOW_SNAPSHOTS)),
            ("CAST_RADIUS_MM", u(welcome::CAST_RADIUS_MM)),
            ("CAST_COOLDOWN_TICKS", u(welcome::CAST_COOLDOWN_TICKS)),
            (
                "AVATAR_SPEED_MAX_MM_PER_TICK",
                u(welcome::AVATAR_SPEED_MAX_MM_PER_TICK),
            ),
            ("ZONE_COUNT", u(welcome::ZONE_COUNT)),
            ("ZONES", u(welcome::ZONES)),
            ("ZONE_BYTES", u(welcome::ZONE_BYTES)),
            ("ZONE_KIND", u(welcome::ZONE_KIND)),
            ("ZONE_SHAPE", u(welcome::ZONE_SHAPE)),
            ("ZONE_X_MM", u(welcome::ZONE_X_MM)),
            ("ZONE_Y_MM", u(welcome::ZONE_Y_MM)),
            ("ZONE_RADIUS_MM", u(welcome::ZONE_RADIUS_MM)),
            ("ZONE_SHAPE_CIRCLE", b(ZONE_SHAPE_CIRCLE)),
        ],
    );
    object(
        o,
        "Zone kinds in WELCOME and /replay/info.",
        "ZONE_KIND",
        &[
            ("TOWN", ZoneKind::Town as u64),
            ("HUNTING_FIELD", ZoneKind::HuntingField as u64),
        ],
    );
    object(
        o,
        "How WELCOME says the terrain comes.",
        "TERRAIN_DELIVERY",
        &[
            ("SINGLE", TerrainDelivery::Single as u64),
            ("CHUNKED", TerrainDelivery::Chunked as u64),
            ("CACHED", TerrainDelivery::Cached as u64),
        ],
    );
}

/// The snapshot header and the terrain messages' headers.
fn snapshot_and_terrain(o: &mut String) {
    object(
        o,
        "The snapshot header (kernel/SNAPSHOT_FORMAT.md): offsets, its size, the no-baseline tick, \
         and the wire units of a position (POS_UNIT_MM: q is mm >> POS_QUANT_SHIFT, an entity is \
         drawn at the middle of its unit) and of a velocity (VEL_UNIT_MM_PER_TICK).",
        "SNAPSHOT",
        &[
            ("FORMAT_VERSION", b(SNAPSHOT_FORMAT_VERSION)),
            ("VERSION", u(snapshot::VERSION)),
            ("TICK", u(snapshot::TICK)),
            ("BASELINE_TICK", u(snapshot::BASELINE_TICK)),
            ("AVATAR_ID", u(snapshot::AVATAR_ID)),
            ("SCORE", u(snapshot::SCORE)),
            ("HEADER_BYTES", u(snapshot::BYTES)),
            ("NO_BASELINE", u64::from(NO_BASELINE)),
            ("POS_QUANT_SHIFT", u64::from(POS_QUANT_SHIFT)),
            ("POS_UNIT_MM", 1u64 << POS_QUANT_SHIFT),
            ("VEL_UNIT_MM_PER_TICK", 1u64 << VEL_QUANT_SHIFT),
        ],
    );
    object(
        o,
        "TERRAIN and TERRAIN_HEADER's grid header (net/wire/TERRAIN_WIRE.md): offsets, its size \
         (TERRAIN's payload follows), TERRAIN_HEADER's two fields and size, the layout version \
         and the widest grid a decoder accepts.",
        "TERRAIN_GRID",
        &[
            ("WIRE_VERSION", b(TERRAIN_WIRE_VERSION)),
            ("CELLS_MAX", u64::from(MAX_CELLS)),
            ("TYPE", u(grid_layout::TYPE)),
            ("VERSION", u(grid_layout::VERSION)),
            ("DTYPE", u(grid_layout::DTYPE)),
            ("COMPRESSION", u(grid_layout::COMPRESSION)),
            ("FILTER", u(grid_layout::FILTER)),
            ("RESERVED", u(grid_layout::RESERVED)),
            ("CELLS", u(grid_layout::CELLS)),
            ("CELL_SIZE_MM", u(grid_layout::CELL_SIZE_MM)),
            ("Q_MIN", u(grid_layout::Q_MIN)),
            ("Q_MAX", u(grid_layout::Q_MAX)),
            ("GRID_BYTES", u(grid_layout::GRID_BYTES)),
            ("CHECKSUM", u(grid_layout::CHECKSUM)),
            ("BYTES", u(grid_layout::BYTES)),
            ("CHUNK_COUNT", u(grid_layout::CHUNK_COUNT)),
            ("ROWS_PER_CHUNK", u(grid_layout::ROWS_PER_CHUNK)),
            ("HEADER_MESSAGE_BYTES", u(grid_layout::HEADER_MESSAGE_BYTES)),
        ],
    );
    object(
        o,
        "TERRAIN_CHUNK's header: offsets and its size (the payload follows).",
        "TERRAIN_CHUNK",
        &[
            ("TYPE", u(chunk_layout::TYPE)),
            ("VERSION", u(chunk_layout::VERSION)),
            ("RESERVED", u(chunk_layout::RESERVED)),
            ("INDEX", u(chunk_layout::INDEX)),
            ("COUNT", u(chunk_layout::COUNT)),
            ("ROW_START", u(chunk_layout::ROW_START)),
            ("ROW_COUNT", u(chunk_layout::ROW_COUNT)),
            ("RAW_BYTES", u(chunk_layout::RAW_BYTES)),
            ("BYTES", u(chunk_layout::BYTES)),
        ],
    );
}

/// The viewer's own routes: `/replay/state`, `/viewer/terrain`, the timeline's markers.
fn viewer(o: &mut String) {
    object(
        o,
        "/replay/state: the header, then COUNT records of ENTITY_BYTES (offsets inside one).",
        "REPLAY_STATE",
        &[
            ("TICK", u(state::TICK)),
            ("COUNT", u(state::COUNT)),
            ("HEADER_BYTES", u(state::HEADER_BYTES)),
            ("ID", u(state::ID)),
            ("X_MM", u(state::X_MM)),
            ("Y_MM", u(state::Y_MM)),
            ("VX", u(state::VX)),
            ("VY", u(state::VY)),
            ("ENTITY_BYTES", u(state::ENTITY_BYTES)),
        ],
    );
    object(
        o,
        "/viewer/terrain: the header; one shade byte per pixel follows at SHADES.",
        "VIEWER_TERRAIN",
        &[
            ("MAGIC", u(terrain::MAGIC)),
            ("VERSION", u(terrain::VERSION)),
            ("EDGE", u(terrain::EDGE)),
            ("WORLD_SIZE_MM", u(terrain::WORLD_SIZE_MM)),
            ("CONTENT_HASH", u(terrain::CONTENT_HASH)),
            ("SHADES", u(terrain::SHADES)),
        ],
    );
    object(
        o,
        "Timeline marker kinds in /replay/markers rows [tick, kind, client, n].",
        "MARKER",
        &[
            ("JOIN", marker::JOIN.into()),
            ("LEAVE", marker::LEAVE.into()),
            ("CAST", marker::CAST.into()),
            ("CATCH", marker::CATCH.into()),
            ("UNACKED", marker::UNACKED.into()),
            ("SPECTATE", marker::SPECTATE.into()),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed `layout.js` is what the Rust layouts make now; under
    /// `MIGRATORY_BLESS=1` it is rewritten first.
    #[test]
    fn layout_js_is_generated_from_the_rust_layouts() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web/layout.js");
        let generated = layout_js();
        if std::env::var("MIGRATORY_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &generated).expect("write layout.js");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != generated {
            let first = committed
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(committed.lines().count().min(generated.lines().count()));
            panic!(
                "{} is not what the Rust layouts make now (first difference at line {}: committed {:?}, Rust {:?}); \
                 rerun with MIGRATORY_BLESS=1 and check the JavaScript that reads the moved field",
                path.display(),
                first + 1,
                committed.lines().nth(first),
                generated.lines().nth(first)
            );
        }
    }

    #[test]
    fn every_exported_name_is_unique() {
        let text = layout_js();
        let mut names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("export const "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
        assert!(count >= 14, "{count}");
    }
}
