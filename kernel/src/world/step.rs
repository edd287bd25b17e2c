//! The phases of a tick, and sealing it: leaf hashes, the state root and the snapshots.
//!
//! Serial: the inputs (`rules`) and the avatars (`avatars`). Sharded by band of the boid
//! grid: every boid's next state from the previous tick (double-buffered), then the grid
//! re-sorted on the new positions (`UniformGrid::resort_sharded`). Sharded again: hash the
//! changed leaves of the state and build the snapshots of the clients due one (each
//! claimed by whichever shard is free). Serial: fold the leaves into the state root and
//! collect the snapshots in slot order.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::World;
use crate::boids::{self, Avatar, Boid, Neighbourhood, ThinkTurn};
use crate::hash::{self, ChunkId, ChunkKind, BOIDS_PER_CHUNK, PLAYERS_PER_CHUNK, STREAMS_PER_CHUNK};
use crate::input::TickInputs;
use crate::output::TickOutput;
use crate::pool::{SharedSlice, SHARD_COUNT_MAX};
use crate::snapshot::stream::{SnapshotContext, SnapshotScratch};
use crate::snapshot::Entities;

/// Slots of the boid grid a shard claims at a time in the boid phase (6 KiB of boids).
const BOID_CHUNK_SLOTS: usize = 512;
const _: () = assert!(
    BOID_CHUNK_SLOTS <= u16::MAX as usize + 1,
    "a chunk's thinkers are listed as u16"
);

/// A claim counter on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCounter(AtomicUsize);

/// Scratch one shard owns during a step.
#[derive(Debug)]
pub(super) struct ShardScratch {
    snapshot: SnapshotScratch,
    /// One boid leaf's anchor records, gathered for hashing.
    anchors: Vec<Boid>,
}

impl ShardScratch {
    pub(super) fn new(shard: u32) -> ShardScratch {
        ShardScratch {
            snapshot: SnapshotScratch::new(shard),
            anchors: vec![Boid::default(); BOIDS_PER_CHUNK],
        }
    }
}

/// Which boid leaves a seal rehashes, and whether it builds snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seal {
    /// After a step: the think group that thought and the groups a cast touched; the
    /// snapshots of the clients due one.
    Step,
    /// After the state was replaced (construction, restore): every leaf, no snapshots.
    Rebuilt,
}

impl World {
    /// Advances one tick with the given inputs. A detached world's streams are stale, so
    /// it seals nothing (as `step_entities_only`).
    pub fn step(&mut self, inputs: &TickInputs) -> &TickOutput {
        let tick = self.tick + 1;
        self.output.begin(tick);
        self.apply_inputs(tick, inputs);
        self.move_avatars();
        self.step_boids(tick);
        #[cfg(feature = "fault-injection")]
        self.apply_fault(tick);
        self.grid.resort_sharded(
            &self.pool,
            &self.grid_boids_next,
            |b| (b.x_mm, b.y_mm),
            &mut self.grid_boids,
        );
        self.tick = tick;
        if self.detached {
            self.dirty_groups = 0;
            self.output.state_root = [0; 32];
            self.output.snapshots_root = [0; 32];
        } else {
            self.seal(Seal::Step);
        }
        &self.output
    }

    /// Advances the entities (boids, avatars, players) one tick exactly as `step` would,
    /// but builds no snapshot and hashes nothing: what a viewer that only draws the world
    /// needs (the replay viewer serves a 1,000-client tick in 1.8 ms this way, 11.5 ms
    /// whole). Nothing the entities do depends on the client streams, so they stay right;
    /// the streams, the snapshots and the roots do not, and the world is detached for good
    /// (`is_detached`): its output has no snapshots and zero roots from then on, and it
    /// cannot be checkpointed.
    pub fn step_entities_only(&mut self, inputs: &TickInputs) -> &TickOutput {
        self.detached = true;
        self.step(inputs)
    }

    /// Sharded by band: every boid's next state into `grid_boids_next`, reading only the
    /// previous tick. A band is a run of whole rows of grid cells, so a shard's neighbour
    /// scans read the boids it wrote itself (except along the band's edges).
    fn step_boids(&mut self, tick: u32) {
        let hood = Neighbourhood {
            flocking: &self.config.flocking,
            world_size_mm: self.config.world_size_mm as i32,
            seed: self.config.seed,
            tick,
            terrain: &self.terrain,
            grid: &self.grid,
            sorted: &self.grid_boids,
            avatar_grid: &self.avatar_grid,
            avatars: &self.avatars,
            #[cfg(feature = "synthetic-rules")]
            cohesion_extra: if self.rules_version != crate::rules_version::KERNEL_RULES_VERSION {
                crate::rules_version::SYNTHETIC_COHESION_EXTRA
            } else {
                0
            },
            #[cfg(feature = "planted-faults")]
            cell_rotation: match self.planted {
                Some(crate::planted::PlantedFault::ShardOrder) => self.pool.shard_count() - 1,
                _ => 0,
            },
        };
        let grid = &self.grid;
        let turn = ThinkTurn::new(tick, self.config.flocking.think_interval_ticks);
        let shards = self.pool.shard_count();
        let next = SharedSlice::new(&mut self.grid_boids_next);
        let anchors = SharedSlice::new(&mut self.anchors);
        // Each band is cut into chunks claimed from a counter: a shard works through its
        // own band, then helps with the others'. Bands hold equal numbers of boids but
        // not equal work (a crowd of avatars makes its band's boids flee from many), and
        // which shard computes a boid changes nothing in it.
        let claimed: [PaddedCounter; SHARD_COUNT_MAX] = std::array::from_fn(|_| PaddedCounter::default());
        self.pool.run(&|s| {
            for b in (0..shards).map(|i| (s + i) % shards) {
                let band = grid.band(b);
                loop {
                    let first = band.start + claimed[b].0.fetch_add(1, Ordering::Relaxed) * BOID_CHUNK_SLOTS;
                    if first >= band.end {
                        break;
                    }
                    let chunk = first..(first + BOID_CHUNK_SLOTS).min(band.end);
                    // SAFETY: each chunk is claimed once, and chunks are disjoint.
                    let next = unsafe { next.range_mut(chunk.clone()) };
                    let (ids, boids) = (&grid.order()[chunk.clone()], &hood.sorted[chunk]);
                    // Every boid glides, and the thinkers (one in the think interval) are
                    // listed without a branch; then they think over their glide.
                    let mut thinkers = [0u16; BOID_CHUNK_SLOTS];
                    let mut thinker_count = 0;
                    for (k, ((o, &id), &b)) in next.iter_mut().zip(ids).zip(boids).enumerate() {
                        *o = boids::glide(b);
                        thinkers[thinker_count] = k as u16;
                        thinker_count += turn.thinks(id) as usize;
                    }
                    for &k in &thinkers[..thinker_count] {
                        let (k, id) = (k as usize, ids[k as usize]);
                        next[k] = hood.think(id, boids[k]);
                        // A thinker starts a new straight stretch: its anchor is its new state.
                        // SAFETY: each id sits in one slot, so in one chunk.
                        unsafe { *anchors.get_mut(id as usize) = next[k] };
                    }
                }
            }
        });
    }

    /// The deliberate divergence of `inject_fault`, if it is due at `tick`.
    #[cfg(feature = "fault-injection")]
    fn apply_fault(&mut self, tick: u32) {
        let Some((t, e)) = self.fault else {
            return;
        };
        if t != tick {
            return;
        }
        if let Some(k) = self.grid.order().iter().position(|&id| id == e) {
            let b = &mut self.grid_boids_next[k];
            let x = (b.x_mm + 1).min(self.config.world_size_mm as i32 - 1);
            self.anchors[e as usize].x_mm += x - b.x_mm;
            b.x_mm = x;
            self.dirty_groups |= 1 << (e % self.config.flocking.think_interval_ticks);
        }
    }

    /// Sharded: re-sorts the grid after the serial phase moved boids (casts).
    pub(super) fn resort_grid(&mut self) {
        self.grid.resort_sharded(
            &self.pool,
            &self.grid_boids,
            |b| (b.x_mm, b.y_mm),
            &mut self.grid_boids_next,
        );
        std::mem::swap(&mut self.grid_boids, &mut self.grid_boids_next);
    }

    /// Seals a state rebuilt from scratch: every leaf hashed, the root, no snapshots.
    pub(super) fn seal_rebuilt(&mut self) {
        self.seal(Seal::Rebuilt);
    }

    /// Sharded: leaf hashes of boids and players, and (after a step) the snapshots of the
    /// clients due a snapshot. Serial: stream leaves, the state root, the snapshots in slot
    /// order and their root.
    fn seal(&mut self, seal: Seal) {
        let shards = self.pool.shard_count();
        let layout = self.layout;
        let counts = layout.counts();
        let dirty = std::mem::take(&mut self.dirty_groups);
        let groups = match seal {
            Seal::Rebuilt => u32::MAX,
            Seal::Step => (1 << layout.group_thinking_at(self.tick)) | dirty,
        };
        self.due_viewers.clear();
        if seal == Seal::Step {
            // Clients are staggered over the interval by slot, so each tick builds an equal
            // share of the snapshots. A player's record holds its avatar as moved this tick.
            let interval = self.config.snapshot_interval_ticks;
            let tick = self.tick;
            let due = self
                .players
                .iter()
                .enumerate()
                .filter(|&(slot, p)| p.active && (slot as u32 + tick) % interval == 0)
                .map(|(slot, p)| Avatar {
                    slot: slot as u32,
                    x_mm: p.x_mm,
                    y_mm: p.y_mm,
                    vx: p.vx,
                    vy: p.vy,
                });
            self.due_viewers.extend(due);
        }
        let (boid_leaves, rest) = self.leaves.split_at_mut(counts[0]);
        let (player_leaves, stream_leaves) = rest.split_at_mut(counts[1]);
        {
            let cfg = &self.config;
            let ctx = SnapshotContext {
                tick: self.tick,
                snapshot_interval_ticks: cfg.snapshot_interval_ticks,
                view_radius_mm: cfg.view_radius_mm,
                budget_avg_bytes: cfg.snapshot_budget_avg_bytes(),
                budget_cap_bytes: cfg.snapshot_budget_cap_bytes(),
                entities: Entities {
                    boids: &self.grid_boids,
                    grid: &self.grid,
                    avatars: &self.grid_avatars,
                    avatar_grid: &self.avatar_grid,
                    boid_count: cfg.boid_count,
                },
                #[cfg(feature = "planted-faults")]
                planted: self.planted,
            };
            let anchors = &self.anchors;
            let due_viewers = &self.due_viewers;
            let next_due = AtomicUsize::new(0);
            let players = &self.players;
            let empty_player_leaves = &self.empty_player_leaves;
            let boid_leaves = SharedSlice::new(boid_leaves);
            let player_leaves = SharedSlice::new(player_leaves);
            let streams = SharedSlice::new(&mut self.streams);
            let scratch = SharedSlice::new(&mut self.scratch);
            self.pool.run(&|s| {
                // SAFETY: scratch s belongs to shard s alone.
                let sc = unsafe { scratch.get_mut(s) };
                sc.snapshot.bytes.clear();
                // Due snapshots are claimed as shards come free, so one shard may build every
                // snapshot of a tick: its buffer is reserved for that (address space; pages
                // are touched only as written), so how the builds happen to spread never
                // grows it in a warm tick. Reserved by the due count alone, it grows only
                // when more clients are due than ever before.
                sc.snapshot
                    .bytes
                    .reserve(due_viewers.len() * ctx.budget_cap_bytes as usize);
                // The leaves to rehash, numbered in order; shard s takes every shards-th.
                let due = (0..layout.think_interval_ticks())
                    .filter(|g| groups & (1 << g) != 0)
                    .flat_map(|g| layout.group_leaves(g));
                for c in due.skip(s).step_by(shards) {
                    let chunk = ChunkId {
                        kind: ChunkKind::Boids,
                        index: c as u32,
                    };
                    let leaf = hash::anchor_leaf(&layout, chunk, anchors, &mut sc.anchors);
                    // SAFETY: each due leaf goes to exactly one shard.
                    unsafe { *boid_leaves.get_mut(c) = leaf };
                }
                for c in (s..counts[1]).step_by(shards) {
                    let chunk =
                        &players[c * PLAYERS_PER_CHUNK..((c + 1) * PLAYERS_PER_CHUNK).min(players.len())];
                    // A chunk of free slots is all zeros, and its leaf was computed once.
                    let leaf = if chunk.iter().any(|p| p.active) {
                        hash::player_chunk(c as u32, chunk)
                    } else {
                        empty_player_leaves[c]
                    };
                    // SAFETY: chunk c belongs to shard c % shards alone.
                    unsafe { *player_leaves.get_mut(c) = leaf };
                }
                // Due snapshots are claimed one at a time: their costs differ widely (a client in a
                // crowd sees far more than one alone), and which shard builds a snapshot changes
                // nothing in it.
                loop {
                    let i = next_due.fetch_add(1, Ordering::Relaxed);
                    let Some(a) = due_viewers.get(i) else {
                        break;
                    };
                    // SAFETY: each due client is claimed by exactly one shard.
                    let stream = unsafe { streams.get_mut(a.slot as usize) };
                    if let Some(stream) = stream.as_deref_mut() {
                        let p = &players[a.slot as usize];
                        stream.build(&ctx, &mut sc.snapshot, a, p.acked_tick, p.score);
                    }
                }
            });
        }
        for (c, leaf) in stream_leaves.iter_mut().enumerate() {
            let end = ((c + 1) * STREAMS_PER_CHUNK).min(self.streams.len());
            let chunk = &self.streams[c * STREAMS_PER_CHUNK..end];
            *leaf = if chunk.iter().any(Option::is_some) {
                hash::stream_chunk(c as u32, chunk.iter().map(|s| s.as_ref().map(|s| &s.digest)))
            } else {
                self.empty_stream_leaves[c]
            };
        }
        let out = &mut self.output;
        out.state_root = hash::root(
            self.rules_version,
            self.tick,
            &self.config_hash,
            &self.terrain.content_hash(),
            &self.leaves,
        );
        let mut fh = blake3::Hasher::new();
        fh.update(b"MGFR");
        fh.update(&self.tick.to_le_bytes());
        for a in &self.due_viewers {
            let Some(stream) = self.streams[a.slot as usize].as_deref() else {
                continue;
            };
            let client = self.players[a.slot as usize].client;
            let at = stream.snapshot_at;
            let bytes = &self.scratch[at.shard as usize].snapshot.bytes;
            out.push_snapshot(
                client,
                a.slot,
                &bytes[at.start as usize..(at.start + at.len) as usize],
            );
            fh.update(&client.to_le_bytes());
            fh.update(&at.len.to_le_bytes());
            fh.update(&stream.snapshot_digest);
        }
        out.snapshots_root = *fh.finalize().as_bytes();
    }
}
