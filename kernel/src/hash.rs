//! The state root: a blake3 Merkle root over fixed-size chunks of the canonical state.
//!
//! Layout of the tree (two levels; chunk sizes never depend on the shard count):
//!
//! | leaf            | covers                                                  | bytes per item |
//! |-----------------|---------------------------------------------------------|----------------|
//! | `Boids(i)`      | up to 4,096 boids of one think group (below)            | 12: the boid's anchor record |
//! | `Players(i)`    | player slots `i*64 .. (i+1)*64`                         | 80 (`Player::to_le_bytes`, layout in `player`) |
//! | `Streams(i)`    | client snapshot streams of slots `i*64 ..`              | 16 (each stream's digest, `STREAM_DIGEST_BYTES`; zeros when empty) |
//!
//! Each leaf is `blake3("MGCH" | kind u8 | index u32 LE | bytes)`. The root is
//! `blake3("MGRT" | rules version u32 | tick u32 | config hash | terrain hash |
//! leaf count u32 | every leaf hash in the order above)`.
//!
//! ## Boid leaves: think groups and anchor records
//!
//! A boid thinks (steers) on the ticks where `(tick + id) % think_interval_ticks == 0`
//! and moves in a straight line in between, so boid `id` belongs to think group
//! `id % think_interval_ticks`. Boid leaves go group by group (group 0 first); inside a
//! group, members ascend by id (`g, g + think, g + 2 * think, ...`), 4,096 to a leaf.
//!
//! A boid's anchor record at tick `T` is `x - vx * dt, y - vy * dt, vx, vy` (i32, i32,
//! i16, i16, little-endian) with `dt = (T + id) % think_interval_ticks`, the ticks since
//! its group last thought. For a fixed tick this is a one-to-one re-encoding of the boid's
//! state, so the root commits to exactly the current state; and because motion between
//! thinks is linear, a group's records do not change until it thinks again. A step
//! therefore rehashes the one group that thought (plus any group whose boids a cast
//! respawned): an eighth of the boid bytes at the default interval.

use crate::boids::Boid;
use crate::config::{WorldConfig, THINK_INTERVAL_TICKS_MAX};
use crate::player::{Player, PLAYER_RECORD_BYTES};
use crate::snapshot::STREAM_DIGEST_BYTES;

/// Boids of one think group per hash leaf (48 KiB of records): large enough for blake3 to
/// hash many 1 KiB chunks at once, small enough that a step's leaves spread over shards.
pub const BOIDS_PER_CHUNK: usize = 4096;
/// Player slots per hash chunk.
pub const PLAYERS_PER_CHUNK: usize = 64;
/// Client streams per hash chunk.
pub const STREAMS_PER_CHUNK: usize = 64;
/// Most think groups (the largest `think_interval_ticks` a config may set).
const THINK_GROUPS_MAX: usize = THINK_INTERVAL_TICKS_MAX as usize;

/// What part of the state a leaf covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChunkKind {
    Boids = 0,
    Players = 1,
    Streams = 2,
}

/// A leaf of the state tree: its kind and its index among the leaves of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkId {
    pub kind: ChunkKind,
    pub index: u32,
}

/// The item ids (boid ids or slots) a leaf covers: `first, first + stride, ...` below `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemIds {
    pub first: u32,
    pub end: u32,
    pub stride: u32,
}

impl ItemIds {
    /// The ids, ascending.
    pub fn iter(&self) -> std::iter::StepBy<std::ops::Range<u32>> {
        (self.first..self.end).step_by(self.stride as usize)
    }

    /// How many ids.
    pub fn len(&self) -> usize {
        (self.end.saturating_sub(self.first) as usize).div_ceil(self.stride as usize)
    }

    /// True when the leaf covers no id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` is one of them.
    pub fn contains(&self, id: u32) -> bool {
        (self.first..self.end).contains(&id) && (id - self.first) % self.stride == 0
    }
}

/// The shape of the state tree of one world: how many leaves of each kind, and which
/// items each covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLayout {
    boid_count: u32,
    think: u32,
    slot_count: u32,
    /// `group_start[g]..group_start[g + 1]`: the boid leaves of think group `g`.
    group_start: [u32; THINK_GROUPS_MAX + 1],
}

impl TreeLayout {
    /// The layout for `boid_count` boids thinking every `think_interval_ticks` (1 ..= 16)
    /// ticks and `slot_count` client slots.
    pub fn new(boid_count: u32, think_interval_ticks: u32, slot_count: u32) -> TreeLayout {
        assert!(
            (1..=THINK_GROUPS_MAX as u32).contains(&think_interval_ticks),
            "think interval {think_interval_ticks} out of 1..={THINK_GROUPS_MAX}"
        );
        let mut group_start = [0u32; THINK_GROUPS_MAX + 1];
        for g in 0..THINK_GROUPS_MAX {
            let members = if g < think_interval_ticks as usize {
                group_len(boid_count, think_interval_ticks, g as u32)
            } else {
                0
            };
            group_start[g + 1] = group_start[g] + members.div_ceil(BOIDS_PER_CHUNK as u32);
        }
        TreeLayout {
            boid_count,
            think: think_interval_ticks,
            slot_count,
            group_start,
        }
    }

    /// The layout of a world built from `config`.
    pub fn of(config: &WorldConfig) -> TreeLayout {
        TreeLayout::new(
            config.boid_count,
            config.flocking.think_interval_ticks,
            config.client_slots_max,
        )
    }

    /// Leaf counts by kind: boids, players, streams.
    pub fn counts(&self) -> [usize; 3] {
        [
            self.group_start[THINK_GROUPS_MAX] as usize,
            (self.slot_count as usize).div_ceil(PLAYERS_PER_CHUNK),
            (self.slot_count as usize).div_ceil(STREAMS_PER_CHUNK),
        ]
    }

    /// All leaves.
    pub fn leaf_count(&self) -> usize {
        self.counts().iter().sum()
    }

    /// The think interval, which is also the number of think groups.
    pub fn think_interval_ticks(&self) -> u32 {
        self.think
    }

    /// The think group that thinks on `tick`.
    pub fn group_thinking_at(&self, tick: u32) -> u32 {
        (self.think - tick % self.think) % self.think
    }

    /// The boid leaves (flat indices, which are also indices among boid leaves) of group `g`.
    pub fn group_leaves(&self, g: u32) -> std::ops::Range<usize> {
        self.group_start[g as usize] as usize..self.group_start[g as usize + 1] as usize
    }

    /// The leaf for flat index `i` of the tree.
    pub fn chunk(&self, i: usize) -> ChunkId {
        let c = self.counts();
        let (kind, index) = if i < c[0] {
            (ChunkKind::Boids, i)
        } else if i < c[0] + c[1] {
            (ChunkKind::Players, i - c[0])
        } else {
            (ChunkKind::Streams, i - c[0] - c[1])
        };
        ChunkId {
            kind,
            index: index as u32,
        }
    }

    /// The boid leaf holding boid `id`.
    pub fn boid_chunk_of(&self, id: u32) -> ChunkId {
        let g = id % self.think;
        let member = id / self.think;
        ChunkId {
            kind: ChunkKind::Boids,
            index: self.group_start[g as usize] + member / BOIDS_PER_CHUNK as u32,
        }
    }

    /// The items a leaf covers.
    pub fn items(&self, chunk: ChunkId) -> ItemIds {
        let i = chunk.index;
        let slots = |per: usize| ItemIds {
            first: (i as usize * per).min(self.slot_count as usize) as u32,
            end: ((i as usize + 1) * per).min(self.slot_count as usize) as u32,
            stride: 1,
        };
        match chunk.kind {
            ChunkKind::Boids => {
                let g = (0..self.think)
                    .find(|&g| i < self.group_start[g as usize + 1])
                    .unwrap_or(self.think - 1);
                let k = i - self.group_start[g as usize];
                let first_member = k * BOIDS_PER_CHUNK as u32;
                let members = group_len(self.boid_count, self.think, g);
                let last_member = (first_member + BOIDS_PER_CHUNK as u32).min(members);
                ItemIds {
                    first: (g + first_member * self.think).min(self.boid_count),
                    end: (g + last_member.saturating_sub(1) * self.think + 1).min(self.boid_count),
                    stride: self.think,
                }
            }
            ChunkKind::Players => slots(PLAYERS_PER_CHUNK),
            ChunkKind::Streams => slots(STREAMS_PER_CHUNK),
        }
    }
}

/// Members of think group `g`: the ids `g, g + think, ...` below `boid_count`.
fn group_len(boid_count: u32, think: u32, g: u32) -> u32 {
    boid_count.saturating_sub(g).div_ceil(think)
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

/// Boids as their canonical records. `Boid` is `repr(C)` with two i32 and two i16 and no
/// padding (`boids` asserts the layout at compile time), so on a little-endian machine its
/// memory is exactly the canonical encoding.
pub fn boid_bytes(boids: &[Boid]) -> &[u8] {
    // SAFETY: Boid is plain old data without padding; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(boids.as_ptr().cast::<u8>(), std::mem::size_of_val(boids)) }
}

/// The anchor record of `b` at `dt` ticks since its group last thought (see the module doc).
#[inline]
pub fn anchor(b: Boid, dt: u32) -> Boid {
    Boid {
        x_mm: b.x_mm - b.vx as i32 * dt as i32,
        y_mm: b.y_mm - b.vy as i32 * dt as i32,
        vx: b.vx,
        vy: b.vy,
    }
}

/// The boid whose anchor record is `a`, `dt` ticks since its group last thought: the
/// inverse of `anchor`.
#[inline]
pub fn unanchor(a: Boid, dt: u32) -> Boid {
    Boid {
        x_mm: a.x_mm + a.vx as i32 * dt as i32,
        y_mm: a.y_mm + a.vy as i32 * dt as i32,
        ..a
    }
}

/// The leaf hash of boid leaf `chunk` at `tick`, over its members' anchor records, which
/// are gathered into `scratch` (at least `BOIDS_PER_CHUNK` long) first.
pub fn boid_leaf(
    layout: &TreeLayout,
    chunk: ChunkId,
    tick: u32,
    boids: &[Boid],
    scratch: &mut [Boid],
) -> [u8; 32] {
    debug_assert_eq!(chunk.kind, ChunkKind::Boids);
    let items = layout.items(chunk);
    let dt = tick.wrapping_add(items.first) % layout.think;
    let n = items.len();
    for (o, id) in scratch[..n].iter_mut().zip(items.iter()) {
        *o = anchor(boids[id as usize], dt);
    }
    records_leaf(chunk, &scratch[..n])
}

/// The leaf hash of boid leaf `chunk` from anchor records kept by id (`anchors[id]`), as
/// a step keeps them: the same hash `boid_leaf` computes from the boids themselves.
pub fn anchor_leaf(layout: &TreeLayout, chunk: ChunkId, anchors: &[Boid], scratch: &mut [Boid]) -> [u8; 32] {
    debug_assert_eq!(chunk.kind, ChunkKind::Boids);
    let items = layout.items(chunk);
    let n = items.len();
    for (o, id) in scratch[..n].iter_mut().zip(items.iter()) {
        *o = anchors[id as usize];
    }
    records_leaf(chunk, &scratch[..n])
}

fn records_leaf(chunk: ChunkId, records: &[Boid]) -> [u8; 32] {
    let mut h = leaf_hasher(ChunkKind::Boids, chunk.index);
    h.update(boid_bytes(records));
    *h.finalize().as_bytes()
}

/// The leaf hash of player chunk `index`. The records go through one contiguous buffer:
/// blake3 hashes a large update several chunks at a time, 80-byte updates one block at a time.
pub fn player_chunk(index: u32, players: &[Player]) -> [u8; 32] {
    debug_assert!(players.len() <= PLAYERS_PER_CHUNK);
    const R: usize = PLAYER_RECORD_BYTES;
    let mut buf = [0u8; PLAYERS_PER_CHUNK * R];
    for (i, p) in players.iter().enumerate() {
        buf[i * R..(i + 1) * R].copy_from_slice(&p.to_le_bytes());
    }
    let mut h = leaf_hasher(ChunkKind::Players, index);
    h.update(&buf[..players.len() * R]);
    *h.finalize().as_bytes()
}

/// The leaf hash of stream chunk `index` over each slot's stream digest (zeros: no stream).
pub fn stream_chunk<'a>(
    index: u32,
    digests: impl ExactSizeIterator<Item = Option<&'a [u8; STREAM_DIGEST_BYTES]>>,
) -> [u8; 32] {
    debug_assert!(digests.len() <= STREAMS_PER_CHUNK);
    const D: usize = STREAM_DIGEST_BYTES;
    let mut buf = [0u8; STREAMS_PER_CHUNK * D];
    let n = digests.len();
    for (i, d) in digests.enumerate() {
        if let Some(d) = d {
            buf[i * D..(i + 1) * D].copy_from_slice(d);
        }
    }
    let mut h = leaf_hasher(ChunkKind::Streams, index);
    h.update(&buf[..n * D]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boid_leaves_partition_the_boids_group_by_group() {
        for (boids, think) in [
            (0u32, 8u32),
            (3, 8),
            (5_000, 8),
            (50_000, 8),
            (9_000, 1),
            (20_001, 16),
            (4_097 * 3, 3),
        ] {
            let layout = TreeLayout::new(boids, think, 100);
            let mut seen = vec![0u8; boids as usize];
            for c in 0..layout.counts()[0] {
                let chunk = layout.chunk(c);
                assert_eq!(chunk.kind, ChunkKind::Boids);
                let items = layout.items(chunk);
                assert!(
                    !items.is_empty() && items.len() <= BOIDS_PER_CHUNK,
                    "{boids}/{think}: leaf {c}"
                );
                assert_eq!(items.stride, think);
                assert_eq!(items.iter().count(), items.len());
                for id in items.iter() {
                    seen[id as usize] += 1;
                    assert!(items.contains(id));
                    assert_eq!(layout.boid_chunk_of(id), chunk, "{boids}/{think}: boid {id}");
                    // Every member of a leaf thinks on the same ticks.
                    assert_eq!(id % think, items.first % think);
                }
            }
            assert!(
                seen.iter().all(|&n| n == 1),
                "{boids}/{think}: every boid in exactly one leaf"
            );
            for tick in 0..2 * think {
                let g = layout.group_thinking_at(tick);
                for c in layout.group_leaves(g) {
                    let first = layout.items(layout.chunk(c)).first;
                    assert_eq!((tick + first) % think, 0);
                }
            }
        }
    }

    #[test]
    fn player_and_stream_leaves_cover_the_slots() {
        let layout = TreeLayout::new(10, 8, 130);
        assert_eq!(layout.counts(), [8, 3, 3]);
        assert_eq!(layout.leaf_count(), 14);
        let last_players = layout.items(layout.chunk(10));
        assert_eq!(
            (last_players.first, last_players.end, last_players.stride),
            (128, 130, 1)
        );
        assert_eq!(layout.chunk(13).kind, ChunkKind::Streams);
    }

    #[test]
    fn a_gliding_boid_keeps_its_anchor_record() {
        let b = Boid {
            x_mm: 1_000,
            y_mm: 2_000,
            vx: -7,
            vy: 30,
        };
        let later = Boid {
            x_mm: b.x_mm + 3 * b.vx as i32,
            y_mm: b.y_mm + 3 * b.vy as i32,
            ..b
        };
        assert_eq!(anchor(later, 3), anchor(b, 0));
        assert_eq!(unanchor(anchor(later, 3), 3), later);
        assert_ne!(anchor(later, 2), anchor(b, 0));
    }
}
