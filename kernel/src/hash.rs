//! The state root: a blake3 Merkle root over fixed-size chunks of the canonical state.
//!
//! Layout of the tree (two levels, chunk size never depends on the shard count):
//!
//! | leaf            | covers                                   | bytes per item |
//! |-----------------|------------------------------------------|----------------|
//! | `Boids(i)`      | boids `i*8192 .. (i+1)*8192`             | 12 (x, y as i32 LE, vx, vy as i16 LE) |
//! | `Players(i)`    | player slots `i*64 .. (i+1)*64`          | 80 (`Player::to_le_bytes`) |
//! | `Streams(i)`    | client snapshot streams of slots `i*64 ..` | 32 (each stream's digest, zeros when empty) |
//!
//! Each leaf is `blake3("MGCH" | kind u8 | index u32 LE | bytes)`. The root is
//! `blake3("MGRT" | rules version u32 | tick u32 | config hash | terrain hash |
//! leaf count u32 | every leaf hash in the order above)`.

use crate::boids::Boid;
use crate::world::Player;

/// Boids per hash chunk. blake3 is several times faster on 100 KB inputs than on 16 KB
/// ones (5,000 boids: 47 us as five 16 KB leaves, 21 us as one), and a divergence is
/// still narrowed to the entity by comparing fields inside the leaf.
pub const BOIDS_PER_CHUNK: usize = 8192;
/// Player slots per hash chunk.
pub const PLAYERS_PER_CHUNK: usize = 64;
/// Client streams per hash chunk.
pub const STREAMS_PER_CHUNK: usize = 64;

/// What part of the state a leaf covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChunkKind {
    Boids = 0,
    Players = 1,
    Streams = 2,
}

/// A leaf of the state tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkId {
    pub kind: ChunkKind,
    pub index: u32,
}

impl ChunkId {
    /// The item range (boid ids or slots) the chunk covers.
    pub fn items(&self) -> std::ops::Range<usize> {
        let per = match self.kind {
            ChunkKind::Boids => BOIDS_PER_CHUNK,
            ChunkKind::Players => PLAYERS_PER_CHUNK,
            ChunkKind::Streams => STREAMS_PER_CHUNK,
        };
        self.index as usize * per..(self.index as usize + 1) * per
    }
}

/// Leaf counts for a world of the given size.
pub fn chunk_counts(boid_count: usize, slot_count: usize) -> [usize; 3] {
    [
        boid_count.div_ceil(BOIDS_PER_CHUNK),
        slot_count.div_ceil(PLAYERS_PER_CHUNK),
        slot_count.div_ceil(STREAMS_PER_CHUNK),
    ]
}

/// The leaf for flat index `i` of the tree.
pub fn chunk_id(counts: [usize; 3], i: usize) -> ChunkId {
    let (kind, index) = if i < counts[0] {
        (ChunkKind::Boids, i)
    } else if i < counts[0] + counts[1] {
        (ChunkKind::Players, i - counts[0])
    } else {
        (ChunkKind::Streams, i - counts[0] - counts[1])
    };
    ChunkId {
        kind,
        index: index as u32,
    }
}

/// A hasher for one leaf, with its domain prefix already written.
pub fn leaf_hasher(kind: ChunkKind, index: u32) -> blake3::Hasher {
    let mut h = blake3::Hasher::new();
    h.update(b"MGCH");
    h.update(&[kind as u8]);
    h.update(&index.to_le_bytes());
    h
}

#[cfg(not(target_endian = "little"))]
compile_error!("the canonical state is little-endian; hashing casts boids to bytes in place");

/// Boids as their canonical bytes. `Boid` is `repr(C)` with four i32 and no padding, so on a
/// little-endian machine its memory is exactly the canonical encoding.
pub fn boid_bytes(boids: &[Boid]) -> &[u8] {
    const _: () = assert!(std::mem::size_of::<Boid>() == 12);
    // SAFETY: Boid is plain old data without padding; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(boids.as_ptr().cast::<u8>(), std::mem::size_of_val(boids)) }
}

/// The leaf hash of boid chunk `index`.
pub fn boid_chunk(index: u32, boids: &[Boid]) -> [u8; 32] {
    let mut h = leaf_hasher(ChunkKind::Boids, index);
    h.update(boid_bytes(boids));
    *h.finalize().as_bytes()
}

/// The leaf hash of player chunk `index`. The records go through one contiguous buffer:
/// blake3 hashes a large update several chunks at a time, 80-byte updates one block at a time.
pub fn player_chunk(index: u32, players: &[Player]) -> [u8; 32] {
    debug_assert!(players.len() <= PLAYERS_PER_CHUNK);
    let mut buf = [0u8; PLAYERS_PER_CHUNK * 80];
    for (i, p) in players.iter().enumerate() {
        buf[i * 80..(i + 1) * 80].copy_from_slice(&p.to_le_bytes());
    }
    let mut h = leaf_hasher(ChunkKind::Players, index);
    h.update(&buf[..players.len() * 80]);
    *h.finalize().as_bytes()
}

/// The leaf hash of stream chunk `index` over each slot's stream digest (zeros: no stream).
pub fn stream_chunk<'a>(
    index: u32,
    digests: impl ExactSizeIterator<Item = Option<&'a [u8; 32]>>,
) -> [u8; 32] {
    debug_assert!(digests.len() <= STREAMS_PER_CHUNK);
    let mut buf = [0u8; STREAMS_PER_CHUNK * 32];
    let n = digests.len();
    for (i, d) in digests.enumerate() {
        if let Some(d) = d {
            buf[i * 32..(i + 1) * 32].copy_from_slice(d);
        }
    }
    let mut h = leaf_hasher(ChunkKind::Streams, index);
    h.update(&buf[..n * 32]);
    *h.finalize().as_bytes()
}

/// The root over all leaves.
pub fn root(
    rules_version: u32,
    tick: u32,
    config_hash: &[u8; 32],
    terrain_hash: &[u8; 32],
    leaves: &[[u8; 32]],
) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"MGRT");
    h.update(&rules_version.to_le_bytes());
    h.update(&tick.to_le_bytes());
    h.update(config_hash);
    h.update(terrain_hash);
    h.update(&(leaves.len() as u32).to_le_bytes());
    for l in leaves {
        h.update(l);
    }
    *h.finalize().as_bytes()
}

/// Lowercase hex of a hash, for messages and golden files.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
