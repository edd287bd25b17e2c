//! The browser viewer at `/`: its files, embedded in the binary (nothing to build or
//! install), and `/viewer/terrain`, the terrain as the viewer draws it.
//!
//! `/viewer/terrain` layout (little-endian):
//!
//! | offset | size | field                                                        |
//! |--------|------|--------------------------------------------------------------|
//! | 0      | 4    | magic `MGVT`                                                 |
//! | 4      | 4    | version, 1                                                   |
//! | 8      | 4    | n: the image edge in pixels (the grid cell for cell, downsampled past 2,048) |
//! | 12     | 4    | world size in mm (the image covers the whole world)          |
//! | 16     | 32   | the terrain's content hash, as WELCOME names it (HELLO's cache key) |
//! | 48     | n*n  | shade per pixel, row by row: 0 water, 1..=255 land, low to high |

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use migratory_kernel::Terrain;

/// Version of the `/viewer/terrain` layout.
pub const VIEWER_TERRAIN_VERSION: u32 = 1;
/// Largest image edge `/viewer/terrain` sends: a pixel per cell up to 2,048 cells (4 MiB
/// of shades), so zoomed in the page draws the terrain the world steps on (the default
/// world's 1,024 cells were drawn from 512 before, two cells to a pixel).
pub const VIEWER_TERRAIN_EDGE_MAX: u32 = 2048;

/// `/viewer/terrain`'s named offsets (the table above); the page's `layout.js` is
/// generated from these.
pub mod terrain_layout {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const EDGE: usize = 8;
    pub const WORLD_SIZE_MM: usize = 12;
    pub const CONTENT_HASH: usize = 16;
    pub const SHADES: usize = 48;
    const _: () = assert!(MAGIC + 4 == VERSION && VERSION + 4 == EDGE && EDGE + 4 == WORLD_SIZE_MM);
    const _: () = assert!(WORLD_SIZE_MM + 4 == CONTENT_HASH && CONTENT_HASH + 32 == SHADES);
}
const VIEWER_TERRAIN_HEADER_BYTES: usize = terrain_layout::SHADES;

/// The viewer's files: name, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../web/index.html"),
    ),
    (
        "main.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/main.js"),
    ),
    (
        "draw.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/draw.js"),
    ),
    (
        "replay.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/replay.js"),
    ),
    (
        "timeline.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/timeline.js"),
    ),
    (
        "playback.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/playback.js"),
    ),
    (
        "protocol.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/protocol.js"),
    ),
    (
        "snapshot.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/snapshot.js"),
    ),
    (
        "layout.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/layout.js"),
    ),
];

fn file(name: &str) -> Response {
    match FILES.iter().find(|f| f.0 == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such viewer file\n").into_response(),
    }
}

/// The viewer's routes: `/` and `/viewer/{file}` (its files), and `/viewer/terrain`,
/// serving `terrain`, the image [`terrain_image`] made.
pub fn live_routes<S: Clone + Send + Sync + 'static>(terrain: Bytes) -> Router<S> {
    Router::new()
        .route("/", get(|| async { file("index.html") }))
        .route(
            "/viewer/{file}",
            get(|Path(name): Path<String>| async move { file(&name) }),
        )
        .route(
            "/viewer/terrain",
            get(move || async move { ([(header::CONTENT_TYPE, "application/octet-stream")], terrain) }),
        )
}

/// The terrain image `/viewer/terrain` serves, made once at startup.
pub fn terrain_image(
    terrain: &Terrain,
    world_size_mm: u32,
    water_level_mm: i32,
    content_hash: &[u8; 32],
) -> Vec<u8> {
    let cells = terrain.cells();
    let step = cells.div_ceil(VIEWER_TERRAIN_EDGE_MAX).max(1);
    let n = cells.div_ceil(step);
    let heights = terrain.heights_mm();
    let top = heights.iter().copied().max().unwrap_or(0).max(water_level_mm + 1);
    let mut out = Vec::with_capacity(VIEWER_TERRAIN_HEADER_BYTES + (n * n) as usize);
    out.extend_from_slice(b"MGVT");
    out.extend_from_slice(&VIEWER_TERRAIN_VERSION.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&world_size_mm.to_le_bytes());
    out.extend_from_slice(content_hash);
    debug_assert_eq!(out.len(), VIEWER_TERRAIN_HEADER_BYTES);
    for row in 0..n {
        for col in 0..n {
            let (y, x) = ((row * step).min(cells - 1), (col * step).min(cells - 1));
            let h = heights[(y * cells + x) as usize];
            let shade = if h <= water_level_mm {
                0
            } else {
                // Land above the water, scaled to 1..=255.
                (1 + i64::from(h - water_level_mm) * 254 / i64::from(top - water_level_mm)) as u8
            };
            out.push(shade);
        }
    }
    out
}
