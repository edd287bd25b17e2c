//! Terrain on the wire: the static heightfield as one TERRAIN message or as TERRAIN_HEADER plus
//! TERRAIN_CHUNK messages, and the client-side reassembly of them.
//!
//! The server encodes once at startup ([`encode`]) and sends the same bytes to every client after
//! WELCOME. The byte layouts are specified in `net/wire/TERRAIN_WIRE.md`, which browser clients code
//! against: a change to a layout here must change that document and [`WIRE_VERSION`] with it.
//!
//! Decoding ([`TerrainAssembler`]) treats its input as untrusted: every code, length and count is
//! checked before it is used, and what it allocates only grows with the data actually received, so
//! a short hostile header cannot make a client reserve the largest grid the format allows.

mod assemble;
mod compression;
mod config;
mod encode;
mod filter;
mod layout;
#[cfg(test)]
mod tests;

use thiserror::Error;

pub use assemble::TerrainAssembler;
pub use config::{Compression, Dtype, QuantizationRange, TerrainConfigError, TerrainWireConfig};
pub use encode::encode;
pub use layout::{chunk_layout, grid_layout};

/// A whole grid in one message.
pub const MSG_TERRAIN: u8 = 0x03;
/// One run of whole rows of a chunked grid.
pub const MSG_TERRAIN_CHUNK: u8 = 0x04;
/// Announces a chunked grid; the chunks follow in order.
pub const MSG_TERRAIN_HEADER: u8 = 0x05;

/// Layout version, byte 1 of every terrain message.
pub const WIRE_VERSION: u8 = 1;

/// Widest grid a decoder accepts. It is the kernel's own limit, so no real world is refused,
/// and it bounds what a hostile header can make a client decompress.
pub const MAX_CELLS: u32 = migratory_kernel::TERRAIN_GRID_CELLS_MAX;

/// A terrain message a client cannot use: every field is checked before it is used.
#[derive(Debug, Error, PartialEq)]
pub enum TerrainDecodeError {
    #[error("terrain message malformed: {0}")]
    Malformed(String),
}

fn malformed(reason: impl Into<String>) -> TerrainDecodeError {
    TerrainDecodeError::Malformed(reason.into())
}

/// What the WELCOME message announces about the terrain (the server serialises it).
#[derive(Clone, Debug, PartialEq)]
pub struct TerrainDescriptor {
    pub cells: u32,
    pub cell_size_mm: u32,
    pub dtype: Dtype,
    /// Resolved: never `Auto`.
    pub compression: Compression,
    pub chunked: bool,
    /// Number of TERRAIN_CHUNK messages; 0 when the grid goes as one TERRAIN message.
    pub chunk_count: u32,
    /// Sum of the lengths of all messages.
    pub total_bytes: u64,
    /// `Terrain::content_hash()`.
    pub content_hash: [u8; 32],
}

/// The encoded messages, each a complete binary WebSocket message starting with its type byte:
/// either `[TERRAIN]` or `[TERRAIN_HEADER, TERRAIN_CHUNK 0, TERRAIN_CHUNK 1, ...]`.
#[derive(Clone, Debug)]
pub struct TerrainMessages {
    pub descriptor: TerrainDescriptor,
    pub messages: Vec<Vec<u8>>,
}

/// A grid as a client reassembled it.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedTerrain {
    pub cells: u32,
    pub cell_size_mm: u32,
    pub dtype: Dtype,
    /// Row-major (`y * cells + x`), in metres, as decoded from the wire dtype.
    pub heights_m: Vec<f64>,
    /// The uint16 range (min, max) in metres; `None` for f32 / f64.
    pub quantization: Option<(f64, f64)>,
}
