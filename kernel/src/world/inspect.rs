//! Read-only views of a world for tools and tests: a root recomputed from scratch, a
//! client stream in brief, and the view a client holds after decoding a snapshot.

use super::World;
use crate::boids::Boid;
use crate::hash::{self, ChunkId, ChunkKind, BOIDS_PER_CHUNK, PLAYERS_PER_CHUNK, STREAMS_PER_CHUNK};
use crate::output::StreamSummary;
use crate::snapshot::ViewEntry;

impl World {
    /// The state root recomputed serially from the state, without touching the world: a
    /// cross-check of the shortcuts `step` takes (anchor records kept by id, cached empty
    /// leaves, sharded leaves), and what the hashing benchmark times. Stream digests are
    /// taken as stored; that they match their streams is checked by every checkpoint
    /// restore, which recomputes them.
    pub fn recompute_state_root(&self) -> [u8; 32] {
        let layout = self.layout;
        let mut leaves = Vec::with_capacity(layout.leaf_count());
        let mut anchors = vec![Boid::default(); BOIDS_PER_CHUNK];
        let boids = self.boids();
        for c in 0..layout.counts()[0] {
            let chunk = ChunkId {
                kind: ChunkKind::Boids,
                index: c as u32,
            };
            leaves.push(hash::boid_leaf(&layout, chunk, self.tick, &boids, &mut anchors));
        }
        for (c, chunk) in self.players.chunks(PLAYERS_PER_CHUNK).enumerate() {
            leaves.push(hash::player_chunk(c as u32, chunk));
        }
        for (c, chunk) in self.streams.chunks(STREAMS_PER_CHUNK).enumerate() {
            leaves.push(hash::stream_chunk(
                c as u32,
                chunk.iter().map(|s| s.as_ref().map(|s| &s.digest)),
            ));
        }
        hash::root(
            self.rules_version,
            self.tick,
            &self.config_hash,
            &self.terrain.content_hash(),
            &leaves,
        )
    }

    /// The snapshot-stream state of the client in `slot`, if one is joined there.
    pub fn stream_summary(&self, slot: u32) -> Option<StreamSummary> {
        let s = self.streams.get(slot as usize)?.as_deref()?;
        let mut remembered_ticks: Vec<u32> = s.remembered().map(|(t, _)| t).collect();
        remembered_ticks.sort_unstable();
        Some(StreamSummary {
            tokens_bytes: s.tokens_bytes,
            remembered_ticks,
            interest: s.interest.iter().map(|i| (i.id, i.priority)).collect(),
            digest: s.digest,
        })
    }

    /// Regions of `VIEW_ENTITIES_MAX` entries in the view arena of the client in `slot`:
    /// its memory, not its state (the alloc test accounts for the arena's growth with it).
    pub fn view_arena_regions(&self, slot: u32) -> Option<usize> {
        Some(self.streams.get(slot as usize)?.as_deref()?.arena_regions())
    }

    /// The view a client will hold once it has decoded its snapshot of `tick` (while the
    /// server still remembers it): the reference the decoder property test compares with.
    pub fn client_view(&self, client: u32, tick: u32) -> Option<&[ViewEntry]> {
        let slot = self.slot_of(client)?;
        self.streams[slot as usize]
            .as_ref()?
            .view(tick, self.config.snapshot_interval_ticks)
    }
}
