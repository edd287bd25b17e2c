//! The browser viewer at `/`: its files, embedded in the binary (nothing to build or
//! install), and `/viewer/terrain`, the terrain as the viewer draws it.
//!
//! `/viewer/terrain` layout (little-endian):
//!
//! | offset | size | field                                                        |
//! |--------|------|--------------------------------------------------------------|
//! | 0      | 4    | magic `MGVT`                                                 |
//! | 4      | 4    | version, 1                                                   |
//! | 8      | 4    | n: the image edge in pixels (the grid, downsampled to at most 512) |
//! | 12     | 4    | world size in mm (the image covers the whole world)          |
//! | 16     | 32   | the terrain's content hash, as WELCOME names it (HELLO's cache key) |
//! | 48     | n*n  | shade per pixel, row by row: 0 water, 1..=255 land, low to high |

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use migratory_kernel::Terrain;

/// Version of the `/viewer/terrain` layout.
pub const VIEWER_TERRAIN_VERSION: u32 = 1;
/// Largest image edge `/viewer/terrain` sends.
pub const VIEWER_TERRAIN_EDGE_MAX: u32 = 512;
const VIEWER_TERRAIN_HEADER_BYTES: usize = 48;

/// The viewer's files: name, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../viewer/index.html"),
    ),
    (
        "main.js",
        "text/javascript; charset=utf-8",
        include_str!("../../viewer/main.js"),
    ),
    (
        "draw.js",
        "text/javascript; charset=utf-8",
        include_str!("../../viewer/draw.js"),
    ),
    (
        "replay.js",
        "text/javascript; charset=utf-8",
        include_str!("../../viewer/replay.js"),
    ),
    (
        "protocol.js",
        "text/javascript; charset=utf-8",
        include_str!("../../viewer/protocol.js"),
    ),
    (
        "snapshot.js",
        "text/javascript; charset=utf-8",
        include_str!("../../viewer/snapshot.js"),
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

pub(super) async fn index() -> Response {
    file("index.html")
}

pub(super) async fn asset(Path(name): Path<String>) -> Response {
    file(&name)
}

pub(super) async fn terrain(State(ctx): State<std::sync::Arc<super::AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        ctx.viewer_terrain.clone(),
    )
        .into_response()
}

/// The terrain image `/viewer/terrain` serves, made once at startup.
pub(super) fn terrain_image(
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
