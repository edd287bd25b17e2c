//! The world state and `World::step`: inputs in, the next tick's state root and client
//! frames out.
//!
//! A step runs in phases. Serial: apply the tick's inputs in canonical order (joins,
//! steering, casts, acks, leaves), move avatars. Sharded by band of the boid grid: every
//! boid's next state from the previous tick (double-buffered), then the grid re-sorted on
//! the new positions (`UniformGrid::resort_sharded`). Sharded again: hash the changed leaves
//! of the state and build the client frames (each due client's frame claimed by whichever
//! shard is free). Serial: fold the leaf hashes into the state root and collect the frames.
//!
//! The boids live in the grid's slot order (`grid_boids[k]` is boid `grid.order()[k]`), not
//! by id: a shard then reads and writes the boids of its own band of the world, and only
//! boids that cross into another band move between cores. By id the world keeps each
//! boid's anchor record (see `hash`), which changes only when the boid thinks or respawns.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::boids::{self, Avatar, Boid, Neighbourhood};
use crate::config::{ConfigError, WorldConfig};
use crate::grid::UniformGrid;
use crate::hash::{
    self, ChunkId, ChunkKind, TreeLayout, BOIDS_PER_CHUNK, PLAYERS_PER_CHUNK, STREAMS_PER_CHUNK,
};
use crate::input::{name_is_valid, Input, Rejections, TickInputs, NAME_BYTES_MAX, THROTTLE_MAX};
use crate::pool::{PinError, ShardPool, SharedSlice, SHARD_COUNT_MAX};
use crate::rng;
use crate::snapshot::stream::{ClientStream, SnapshotContext, SnapshotScratch, NO_TICK};
use crate::snapshot::ViewEntry;
use crate::terrain::{Terrain, TerrainError};
use crate::zones::Zones;
use crate::KERNEL_RULES_VERSION;
use thiserror::Error;

/// A world that cannot be built.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WorldError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Terrain(#[from] TerrainError),
}

/// One client slot. A free slot is all zeros, so it hashes the same however it was freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Player {
    pub active: bool,
    pub client: u32,
    pub name_len: u8,
    pub name: [u8; NAME_BYTES_MAX],
    pub x_mm: i32,
    pub y_mm: i32,
    pub vx: i32,
    pub vy: i32,
    pub dir_x: i16,
    pub dir_y: i16,
    pub throttle: u8,
    pub score: u32,
    /// The highest steer/cast sequence number applied.
    pub last_seq: u32,
    /// The newest snapshot tick the client acked (`u32::MAX`: none yet).
    pub acked_tick: u32,
    /// The first tick at which the next cast may happen.
    pub cast_ready_tick: u32,
}

impl Player {
    /// The player's name.
    pub fn name(&self) -> &str {
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("")
    }

    /// The canonical 80-byte little-endian record hashed for this slot.
    pub fn to_le_bytes(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0] = self.active as u8;
        b[1] = self.name_len;
        b[4..8].copy_from_slice(&self.client.to_le_bytes());
        b[8..40].copy_from_slice(&self.name);
        for (i, v) in [self.x_mm, self.y_mm, self.vx, self.vy].iter().enumerate() {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[56..58].copy_from_slice(&self.dir_x.to_le_bytes());
        b[58..60].copy_from_slice(&self.dir_y.to_le_bytes());
        b[60] = self.throttle;
        for (i, v) in [self.score, self.last_seq, self.acked_tick, self.cast_ready_tick]
            .iter()
            .enumerate()
        {
            b[64 + 4 * i..68 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// What a cast input came to this tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CastStats {
    /// Casts made inside a hunting field and off cooldown.
    pub made: u32,
    /// Boids caught by them (each respawns elsewhere).
    pub caught: u32,
    /// Casts outside every hunting field (nothing happens).
    pub outside_field: u32,
    /// Casts before the cooldown ran out (nothing happens).
    pub cooling: u32,
}

/// A join that took effect: the client's slot and avatar entity id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    pub client: u32,
    pub slot: u32,
    pub avatar_id: u32,
}

/// Where one client's frame sits in `TickOutput::frame_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef {
    pub client: u32,
    pub slot: u32,
    start: u32,
    len: u32,
}

/// One client's encoded snapshot for this tick.
#[derive(Clone, Copy, Debug)]
pub struct ClientFrame<'a> {
    pub client: u32,
    pub slot: u32,
    pub bytes: &'a [u8],
}

/// Everything one step produces. Reused by the world from tick to tick.
#[derive(Clone, Debug, Default)]
pub struct TickOutput {
    pub tick: u32,
    /// Root over the whole state after this tick.
    pub state_root: [u8; 32],
    /// blake3 over this tick's frames: "MGFR", the tick, then per frame (in slot order) the
    /// client id, the length and the blake3 of the bytes. Ticks without frames hash just the prefix.
    pub frames_root: [u8; 32],
    pub rejected: Rejections,
    pub casts: CastStats,
    pub joined: Vec<Joined>,
    pub left: Vec<u32>,
    frames: Vec<FrameRef>,
    frame_bytes: Vec<u8>,
}

impl TickOutput {
    /// This tick's client frames, by slot.
    pub fn frames(&self) -> impl ExactSizeIterator<Item = ClientFrame<'_>> + '_ {
        self.frames.iter().map(|f| ClientFrame {
            client: f.client,
            slot: f.slot,
            bytes: &self.frame_bytes[f.start as usize..(f.start + f.len) as usize],
        })
    }

    /// The frame for one client, if it got one this tick.
    pub fn frame_for(&self, client: u32) -> Option<&[u8]> {
        self.frames().find(|f| f.client == client).map(|f| f.bytes)
    }

    /// The frame for the client in `slot`, if it got one this tick (frames are in slot order).
    pub fn frame_for_slot(&self, slot: u32) -> Option<&[u8]> {
        let i = self.frames.binary_search_by_key(&slot, |f| f.slot).ok()?;
        let f = self.frames[i];
        Some(&self.frame_bytes[f.start as usize..(f.start + f.len) as usize])
    }

    /// Number of frames this tick.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }
}

/// Slots of the boid grid a shard claims at a time in the boid phase (6 KiB of boids).
const BOID_CHUNK_SLOTS: usize = 512;

/// A claim counter on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCounter(AtomicUsize);

/// Scratch one shard owns during a step.
#[derive(Debug, Default)]
struct ShardScratch {
    snapshot: SnapshotScratch,
    /// One boid leaf's anchor records, gathered for hashing.
    anchors: Vec<Boid>,
}

/// The world: state, derived indexes, the shard pool and reusable buffers.
pub struct World {
    pub(crate) config: WorldConfig,
    pub(crate) config_hash: [u8; 32],
    pub(crate) terrain: Arc<Terrain>,
    pub(crate) zones: Zones,
    pub(crate) tick: u32,
    /// Every boid at `tick`, in the slot order of `grid` (built on these positions).
    grid_boids: Vec<Boid>,
    /// Every boid's anchor record at `tick` (`hash::anchor`), by id: what the boid leaves hash.
    anchors: Vec<Boid>,
    pub(crate) players: Vec<Player>,
    /// (client id, slot), ascending by client id.
    pub(crate) clients: Vec<(u32, u32)>,
    pub(crate) streams: Vec<Option<Box<ClientStream>>>,
    // Derived from the state above, never hashed or checkpointed.
    /// The boids' next state, in the slot order of `grid` before it is re-sorted.
    grid_boids_next: Vec<Boid>,
    grid: UniformGrid,
    avatars: Vec<Avatar>,
    avatar_grid: UniformGrid,
    pool: ShardPool,
    scratch: Vec<ShardScratch>,
    input_order: Vec<u32>,
    /// Indexes into `avatars` of the clients due a snapshot this tick.
    due_avatars: Vec<u32>,
    /// (id, slot) of the boids a cast catches.
    caught: Vec<(u32, u32)>,
    layout: TreeLayout,
    leaves: Vec<[u8; 32]>,
    /// Think groups whose boids the serial phase moved (casts): their leaves are rehashed
    /// this tick although they did not think.
    dirty_groups: u32,
    /// Leaves of chunks whose slots are all free, by chunk index (they never change).
    empty_player_leaves: Vec<[u8; 32]>,
    empty_stream_leaves: Vec<[u8; 32]>,
    output: TickOutput,
    #[cfg(feature = "fault-injection")]
    fault: Option<(u32, u32)>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("tick", &self.tick)
            .field("boids", &self.anchors.len())
            .field("clients", &self.clients.len())
            .field("shards", &self.pool.shard_count())
            .finish_non_exhaustive()
    }
}

impl World {
    /// A world at tick 0 with generated terrain, stepping on `shard_count` shards.
    pub fn new(config: WorldConfig, shard_count: usize) -> Result<World, WorldError> {
        config.validate()?;
        let terrain = Arc::new(Terrain::generate(&config)?);
        World::with_terrain(config, terrain, shard_count)
    }

    /// A world at tick 0 on the given terrain (which must match the config's grid).
    pub fn with_terrain(
        config: WorldConfig,
        terrain: Arc<Terrain>,
        shard_count: usize,
    ) -> Result<World, WorldError> {
        let mut world = World::empty(config, terrain, shard_count)?;
        let cfg = &world.config;
        let boids: Vec<Boid> = (0..cfg.boid_count)
            .map(|id| {
                let bits = rng::draw(cfg.seed, 0, id, rng::STREAM_SPAWN);
                spawn_boid(&world.terrain, cfg, bits, id, 0)
            })
            .collect();
        world.rehash(&boids);
        Ok(world)
    }

    /// A world without state (every boid at the origin, not yet indexed): the base for
    /// construction and restore, which fill in the state and call `rehash`.
    pub(crate) fn empty(
        config: WorldConfig,
        terrain: Arc<Terrain>,
        shard_count: usize,
    ) -> Result<World, WorldError> {
        config.validate()?;
        if terrain.cells() != config.terrain_grid_cells
            || terrain.cell_size_mm() != config.terrain_cell_size_mm
        {
            return Err(TerrainError::GridMismatch {
                expected: config.terrain_grid_cells,
                actual: terrain.cells(),
            }
            .into());
        }
        let zones = Zones::place(&config, &terrain);
        let boids = vec![Boid::default(); config.boid_count as usize];
        let slots = config.client_slots_max as usize;
        let f = &config.flocking;
        let pool = ShardPool::new(shard_count);
        let shards = pool.shard_count();
        let layout = TreeLayout::of(&config);
        let counts = layout.counts();
        Ok(World {
            config_hash: config.content_hash(),
            grid: UniformGrid::new(config.world_size_mm, f.neighbour_radius_mm),
            avatar_grid: UniformGrid::new(
                config.world_size_mm,
                f.flee_radius_mm.max(config.view_radius_mm / 4).max(1000),
            ),
            grid_boids_next: boids.clone(),
            anchors: boids.clone(),
            grid_boids: boids,
            players: vec![Player::default(); slots],
            clients: Vec::with_capacity(slots),
            streams: (0..slots).map(|_| None).collect(),
            avatars: Vec::with_capacity(slots),
            pool,
            scratch: (0..shards)
                .map(|_| ShardScratch {
                    snapshot: SnapshotScratch::new(),
                    anchors: vec![Boid::default(); BOIDS_PER_CHUNK],
                })
                .collect(),
            input_order: Vec::with_capacity(1024),
            due_avatars: Vec::with_capacity(slots),
            caught: Vec::with_capacity(64),
            layout,
            leaves: vec![[0; 32]; layout.leaf_count()],
            dirty_groups: 0,
            empty_player_leaves: (0..counts[1])
                .map(|c| {
                    let n = PLAYERS_PER_CHUNK.min(slots - c * PLAYERS_PER_CHUNK);
                    hash::player_chunk(c as u32, &vec![Player::default(); n])
                })
                .collect(),
            empty_stream_leaves: (0..counts[2])
                .map(|c| {
                    let n = STREAMS_PER_CHUNK.min(slots - c * STREAMS_PER_CHUNK);
                    hash::stream_chunk(c as u32, std::iter::repeat_n(None, n))
                })
                .collect(),
            output: TickOutput {
                frames: Vec::with_capacity(slots),
                ..TickOutput::default()
            },
            tick: 0,
            terrain,
            zones,
            config,
            #[cfg(feature = "fault-injection")]
            fault: None,
        })
    }

    /// The config the world was built from.
    pub fn config(&self) -> &WorldConfig {
        &self.config
    }

    /// The terrain.
    pub fn terrain(&self) -> &Arc<Terrain> {
        &self.terrain
    }

    /// The town and hunting fields.
    pub fn zones(&self) -> &Zones {
        &self.zones
    }

    /// The last tick produced (0 before the first step).
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// Pins the shard threads to CPUs, the calling thread to the first (see
    /// `ShardPool::pin_to_cpus`): call it from the thread that steps the world. A live
    /// server wants this; tests and tools that share a process with others do not.
    pub fn pin_shard_threads(&self) -> Result<Vec<usize>, PinError> {
        self.pool.pin_to_cpus()
    }

    /// Shards the step runs on.
    pub fn shard_count(&self) -> usize {
        self.pool.shard_count()
    }

    /// All boids, by id (gathered from the grid order they are kept in).
    pub fn boids(&self) -> Vec<Boid> {
        let mut by_id = vec![Boid::default(); self.grid_boids.len()];
        for (&id, &b) in self.grid.order().iter().zip(&self.grid_boids) {
            by_id[id as usize] = b;
        }
        by_id
    }

    /// Boid `id`, if it exists: its anchor record moved on by the ticks since its group
    /// last thought (motion in between is linear).
    pub fn boid(&self, id: u32) -> Option<Boid> {
        let a = *self.anchors.get(id as usize)?;
        let dt = self.tick.wrapping_add(id) % self.config.flocking.think_interval_ticks;
        Some(hash::unanchor(a, dt))
    }

    /// Every boid's anchor record by id (`hash::anchor`): what the boid leaves hash.
    pub fn anchors(&self) -> &[Boid] {
        &self.anchors
    }

    /// All player slots.
    pub fn players(&self) -> &[Player] {
        &self.players
    }

    /// The slot of a joined client.
    pub fn slot_of(&self, client: u32) -> Option<u32> {
        self.clients
            .binary_search_by_key(&client, |&(c, _)| c)
            .ok()
            .map(|i| self.clients[i].1)
    }

    /// The entity id of a slot's avatar.
    pub fn avatar_id(&self, slot: u32) -> u32 {
        self.config.boid_count + slot
    }

    /// The output of the last step (or of construction: tick 0 with its root).
    pub fn output(&self) -> &TickOutput {
        &self.output
    }

    /// The state root after the last tick.
    pub fn state_root(&self) -> [u8; 32] {
        self.output.state_root
    }

    /// The leaf hashes behind the state root, in tree order (see `hash`).
    pub fn chunk_hashes(&self) -> &[[u8; 32]] {
        &self.leaves
    }

    /// The view a client will hold once it has decoded its snapshot of `tick` (while the
    /// server still remembers it): the reference the decoder property test compares with.
    pub fn client_view(&self, client: u32, tick: u32) -> Option<&[ViewEntry]> {
        let slot = self.slot_of(client)?;
        self.streams[slot as usize]
            .as_ref()?
            .view(tick, self.config.snapshot_interval_ticks)
    }

    /// Makes the next step at `tick` nudge boid `entity` by one millimetre: a deliberate
    /// divergence for testing the tools that find divergences.
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&mut self, tick: u32, entity: u32) {
        self.fault = Some((tick, entity));
    }

    /// Advances one tick with the given inputs.
    pub fn step(&mut self, inputs: &TickInputs) -> &TickOutput {
        let tick = self.tick + 1;
        let out = &mut self.output;
        out.tick = tick;
        out.rejected = Rejections::default();
        out.casts = CastStats::default();
        out.joined.clear();
        out.left.clear();
        out.frames.clear();
        out.frame_bytes.clear();

        self.apply_inputs(tick, inputs);
        self.move_avatars();

        // Sharded by band: every boid's next state, reading only the previous tick. A band
        // is a run of whole rows of grid cells, so a shard's neighbour scans read the boids
        // it wrote itself (except along the band's edges).
        {
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
            };
            let grid = &self.grid;
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
                        let first =
                            band.start + claimed[b].0.fetch_add(1, Ordering::Relaxed) * BOID_CHUNK_SLOTS;
                        if first >= band.end {
                            break;
                        }
                        let chunk = first..(first + BOID_CHUNK_SLOTS).min(band.end);
                        // SAFETY: each chunk is claimed once, and chunks are disjoint.
                        let next = unsafe { next.range_mut(chunk.clone()) };
                        for ((o, &id), &b) in next
                            .iter_mut()
                            .zip(&grid.order()[chunk.clone()])
                            .zip(&hood.sorted[chunk])
                        {
                            *o = hood.next(id, b);
                            // A thinker starts a new straight stretch: its anchor is its new state.
                            if hood.thinks(id) {
                                // SAFETY: each id sits in one slot, so in one chunk.
                                unsafe { *anchors.get_mut(id as usize) = *o };
                            }
                        }
                    }
                }
            });
        }
        #[cfg(feature = "fault-injection")]
        if let Some((t, e)) = self.fault {
            if t == tick {
                if let Some(k) = self.grid.order().iter().position(|&id| id == e) {
                    let b = &mut self.grid_boids_next[k];
                    let x = (b.x_mm + 1).min(self.config.world_size_mm as i32 - 1);
                    self.anchors[e as usize].x_mm += x - b.x_mm;
                    b.x_mm = x;
                    self.dirty_groups |= 1 << (e % self.config.flocking.think_interval_ticks);
                }
            }
        }
        self.grid.resort_sharded(
            &self.pool,
            &self.grid_boids_next,
            |b| (b.x_mm, b.y_mm),
            &mut self.grid_boids,
        );
        self.tick = tick;

        self.hash_and_snapshot(true, false);
        &self.output
    }

    /// Sharded: re-sorts the grid after the serial phase moved boids (casts).
    fn resort_grid(&mut self) {
        self.grid.resort_sharded(
            &self.pool,
            &self.grid_boids,
            |b| (b.x_mm, b.y_mm),
            &mut self.grid_boids_next,
        );
        std::mem::swap(&mut self.grid_boids, &mut self.grid_boids_next);
    }

    fn apply_inputs(&mut self, tick: u32, inputs: &TickInputs) {
        let list = &inputs.inputs;
        self.input_order.clear();
        self.input_order.extend(0..list.len() as u32);
        self.input_order
            .sort_unstable_by(|&a, &b| list[a as usize].canonical_cmp(&list[b as usize]));
        let mut grid_dirty = false;
        for k in 0..self.input_order.len() {
            let input = &list[self.input_order[k] as usize];
            grid_dirty |= self.apply_input(tick, input);
        }
        if grid_dirty {
            self.resort_grid();
        }
    }

    /// Applies one input; returns true when boids moved (a cast caught some).
    fn apply_input(&mut self, tick: u32, input: &Input) -> bool {
        let rejected = &mut self.output.rejected;
        let found = self.clients.binary_search_by_key(&input.client(), |&(c, _)| c);
        if let Input::Join { client, name } = input {
            match found {
                Ok(_) => rejected.duplicate_join += 1,
                Err(_) if !name_is_valid(name) => rejected.name_invalid += 1,
                Err(index) => match self.players.iter().position(|p| !p.active) {
                    Some(slot) => self.join(tick, *client, name, slot as u32, index),
                    None => rejected.slots_full += 1,
                },
            }
            return false;
        }
        let Ok(index) = found else {
            rejected.unknown_client += 1;
            return false;
        };
        let slot = self.clients[index].1 as usize;
        let player = &mut self.players[slot];
        match *input {
            Input::Join { .. } => unreachable!("handled above"),
            Input::Steer {
                seq,
                dir_x,
                dir_y,
                throttle,
                ..
            } => {
                if seq <= player.last_seq {
                    rejected.stale_seq += 1;
                } else if throttle > THROTTLE_MAX || (throttle > 0 && dir_x == 0 && dir_y == 0) {
                    rejected.out_of_range += 1;
                } else {
                    player.last_seq = seq;
                    player.dir_x = dir_x;
                    player.dir_y = dir_y;
                    player.throttle = throttle;
                }
            }
            Input::Cast { seq, .. } => {
                if seq <= player.last_seq {
                    rejected.stale_seq += 1;
                } else {
                    player.last_seq = seq;
                    return self.cast(tick, slot);
                }
            }
            Input::Ack { tick: acked, .. } => {
                // A client can only have received snapshots of ticks already produced.
                if acked >= tick {
                    rejected.ack_from_future += 1;
                } else if player.acked_tick == NO_TICK || acked > player.acked_tick {
                    player.acked_tick = acked;
                }
            }
            Input::Leave { client } => {
                self.players[slot] = Player::default();
                self.streams[slot] = None;
                self.clients.remove(index);
                self.output.left.push(client);
            }
        }
        false
    }

    fn join(&mut self, tick: u32, client: u32, name: &str, slot: u32, index: usize) {
        let cfg = &self.config;
        let town = self.zones.town;
        let bits = rng::draw(cfg.seed, tick, client, rng::STREAM_JOIN);
        let half = (town.radius_mm / 2).max(1);
        let mut x = town.x_mm + rng::symmetric(bits, half);
        let mut y = town.y_mm + rng::symmetric(bits.rotate_left(32), half);
        let limit = cfg.world_size_mm as i32 - 1;
        (x, y) = (x.clamp(0, limit), y.clamp(0, limit));
        if self.terrain.is_water(x, y) {
            (x, y) = (town.x_mm, town.y_mm);
        }
        let mut p = Player {
            active: true,
            client,
            name_len: name.len() as u8,
            x_mm: x,
            y_mm: y,
            acked_tick: NO_TICK,
            ..Player::default()
        };
        p.name[..name.len()].copy_from_slice(name.as_bytes());
        self.players[slot as usize] = p;
        self.streams[slot as usize] = Some(Box::new(ClientStream::new(cfg.snapshot_budget_cap_bytes())));
        self.clients.insert(index, (client, slot));
        self.output.joined.push(Joined {
            client,
            slot,
            avatar_id: cfg.boid_count + slot,
        });
    }

    /// Resolves a cast by the player in `slot`: inside a hunting field and off cooldown,
    /// every boid within the cast radius is caught, scored and respawned.
    fn cast(&mut self, tick: u32, slot: usize) -> bool {
        let cfg = &self.config;
        let p = self.players[slot];
        let casts = &mut self.output.casts;
        if tick < p.cast_ready_tick {
            casts.cooling += 1;
            return false;
        }
        if self.zones.hunting_field_at(p.x_mm, p.y_mm).is_none() {
            casts.outside_field += 1;
            return false;
        }
        casts.made += 1;
        let r = cfg.player.cast_radius_mm as i64;
        self.caught.clear();
        let (boids, order) = (&self.grid_boids, self.grid.order());
        let caught = &mut self.caught;
        self.grid.for_each_slot_near(p.x_mm, p.y_mm, r as i32, |k| {
            let b = boids[k];
            let (dx, dy) = (b.x_mm as i64 - p.x_mm as i64, b.y_mm as i64 - p.y_mm as i64);
            if dx * dx + dy * dy <= r * r {
                caught.push((order[k], k as u32));
            }
        });
        // Grid order is cell by cell; respawn in id order so the result reads naturally.
        self.caught.sort_unstable();
        // The respawned boids stand in the previous tick's state (the boid phase comes next),
        // and so does their anchor: a glider keeps it, a thinker replaces it.
        let think = cfg.flocking.think_interval_ticks;
        for &(id, k) in &self.caught {
            let bits = rng::draw(cfg.seed, tick, id, rng::STREAM_SPAWN);
            let b = spawn_boid(&self.terrain, cfg, bits, id, tick - 1);
            self.grid_boids[k as usize] = b;
            self.anchors[id as usize] = hash::anchor(b, (tick - 1).wrapping_add(id) % think);
            self.dirty_groups |= 1 << (id % think);
        }
        let n = self.caught.len() as u32;
        let player = &mut self.players[slot];
        player.score = player.score.saturating_add(n);
        player.cast_ready_tick = tick.saturating_add(cfg.player.cast_cooldown_ticks);
        self.output.casts.caught += n;
        n > 0
    }

    /// Moves every avatar towards its steering target, then indexes them for this tick.
    fn move_avatars(&mut self) {
        let pc = &self.config.player;
        let size = self.config.world_size_mm as i32;
        self.avatars.clear();
        for (slot, p) in self.players.iter_mut().enumerate() {
            if !p.active {
                continue;
            }
            let smax = pc.speed_max_mm_per_tick as i64;
            let (tx, ty) = if p.throttle == 0 {
                (0, 0)
            } else {
                let (dx, dy) = (p.dir_x as i64, p.dir_y as i64);
                let len = rng::isqrt((dx * dx + dy * dy) as u64).max(1) as i64;
                let s = smax * p.throttle as i64 / THROTTLE_MAX as i64;
                (dx * s / len, dy * s / len)
            };
            let (mut ax, mut ay) = (tx - p.vx as i64, ty - p.vy as i64);
            let a = rng::isqrt((ax * ax + ay * ay) as u64) as i64;
            let amax = pc.accel_mm_per_tick as i64;
            if a > amax {
                (ax, ay) = (ax * amax / a, ay * amax / a);
            }
            let (vx, vy) = ((p.vx as i64 + ax) as i32, (p.vy as i64 + ay) as i32);
            let (x, y) = boids::move_blocked(&self.terrain, size, p.x_mm, p.y_mm, vx, vy);
            // A blocked axis stops the avatar on that axis.
            p.vx = if x == p.x_mm + vx { vx } else { 0 };
            p.vy = if y == p.y_mm + vy { vy } else { 0 };
            (p.x_mm, p.y_mm) = (x, y);
            self.avatars.push(Avatar {
                slot: slot as u32,
                x_mm: x,
                y_mm: y,
                vx: p.vx,
                vy: p.vy,
            });
        }
        let avatars = &self.avatars;
        self.avatar_grid
            .rebuild(avatars.len(), |i| (avatars[i].x_mm, avatars[i].y_mm));
    }

    /// Sharded: leaf hashes of boids and players, and the frames of the clients due a
    /// snapshot (`build`). Serial: stream leaves, the state root, the frames and their root.
    /// Boid leaves are rehashed for the think group that thought this tick and the groups
    /// a cast touched (`all_boid_leaves`: every group); the others have not changed.
    fn hash_and_snapshot(&mut self, build: bool, all_boid_leaves: bool) {
        let shards = self.pool.shard_count();
        let layout = self.layout;
        let counts = layout.counts();
        let dirty = std::mem::take(&mut self.dirty_groups);
        let groups = if all_boid_leaves {
            u32::MAX
        } else {
            (1 << layout.group_thinking_at(self.tick)) | dirty
        };
        let interval = self.config.snapshot_interval_ticks;
        self.due_avatars.clear();
        if build {
            // Clients are staggered over the interval by slot, so each tick builds an equal
            // share of the frames.
            let due = |(_, a): &(usize, &Avatar)| (a.slot + self.tick) % interval == 0;
            let due = self.avatars.iter().enumerate().filter(due).map(|(i, _)| i as u32);
            self.due_avatars.extend(due);
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
                boids: &self.grid_boids,
                grid: &self.grid,
                avatars: &self.avatars,
                avatar_grid: &self.avatar_grid,
                boid_count: cfg.boid_count,
            };
            let anchors = &self.anchors;
            let due_avatars = &self.due_avatars;
            let next_due = AtomicUsize::new(0);
            let players = &self.players;
            let avatars = &self.avatars;
            let empty_player_leaves = &self.empty_player_leaves;
            let boid_leaves = SharedSlice::new(boid_leaves);
            let player_leaves = SharedSlice::new(player_leaves);
            let streams = SharedSlice::new(&mut self.streams);
            let scratch = SharedSlice::new(&mut self.scratch);
            self.pool.run(&|s| {
                // SAFETY: scratch s belongs to shard s alone.
                let sc = unsafe { scratch.get_mut(s) };
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
                // Frames are claimed one at a time: their costs differ widely (a client in a
                // crowd sees far more than one alone), and which shard builds a frame changes
                // nothing in it.
                loop {
                    let i = next_due.fetch_add(1, Ordering::Relaxed);
                    let Some(&a) = due_avatars.get(i) else {
                        break;
                    };
                    let a = &avatars[a as usize];
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
            KERNEL_RULES_VERSION,
            self.tick,
            &self.config_hash,
            &self.terrain.content_hash(),
            &self.leaves,
        );
        let mut fh = blake3::Hasher::new();
        fh.update(b"MGFR");
        fh.update(&self.tick.to_le_bytes());
        for a in self.due_avatars.iter().map(|&i| &self.avatars[i as usize]) {
            let Some(stream) = self.streams[a.slot as usize].as_deref() else {
                continue;
            };
            let client = self.players[a.slot as usize].client;
            out.frames.push(FrameRef {
                client,
                slot: a.slot,
                start: out.frame_bytes.len() as u32,
                len: stream.frame.len() as u32,
            });
            out.frame_bytes.extend_from_slice(&stream.frame);
            fh.update(&client.to_le_bytes());
            fh.update(&(stream.frame.len() as u32).to_le_bytes());
            fh.update(&stream.frame_digest);
        }
        out.frames_root = *fh.finalize().as_bytes();
    }

    /// Takes the boids (by id) as the state at `tick`, and recomputes every index, leaf
    /// and the root from the state (after construction or restore).
    pub(crate) fn rehash(&mut self, boids_by_id: &[Boid]) {
        let shards = self.pool.shard_count();
        self.grid
            .build_gathered(shards, boids_by_id, |b| (b.x_mm, b.y_mm), &mut self.grid_boids);
        let think = self.config.flocking.think_interval_ticks;
        for (id, (a, &b)) in self.anchors.iter_mut().zip(boids_by_id).enumerate() {
            *a = hash::anchor(b, self.tick.wrapping_add(id as u32) % think);
        }
        self.avatars.clear();
        for (slot, p) in self.players.iter().enumerate().filter(|(_, p)| p.active) {
            self.avatars.push(Avatar {
                slot: slot as u32,
                x_mm: p.x_mm,
                y_mm: p.y_mm,
                vx: p.vx,
                vy: p.vy,
            });
        }
        let avatars = &self.avatars;
        self.avatar_grid
            .rebuild(avatars.len(), |i| (avatars[i].x_mm, avatars[i].y_mm));
        self.output.tick = self.tick;
        self.output.frames.clear();
        self.output.frame_bytes.clear();
        self.hash_and_snapshot(false, true);
    }
}

/// Boid `id` at a random land point, moving at the minimum speed in a random direction, as
/// its state at `state_tick`: its velocity is planned (see `boids::plan_path`) for the
/// ticks it glides before it first thinks.
fn spawn_boid(terrain: &Terrain, cfg: &WorldConfig, bits: u64, id: u32, state_tick: u32) -> Boid {
    let (x_mm, y_mm) = terrain.spawn_point(bits);
    let dir = rng::draw(bits, 0, 0, rng::STREAM_SPAWN);
    let s = cfg.flocking.speed_min_mm_per_tick.max(1) as i64;
    let (dx, dy) = (
        rng::symmetric(dir, 1024) as i64,
        rng::symmetric(dir.rotate_left(32), 1024) as i64,
    );
    let len = rng::isqrt((dx * dx + dy * dy) as u64).max(1) as i64;
    let think = cfg.flocking.think_interval_ticks;
    let glides = (think - state_tick.wrapping_add(1).wrapping_add(id) % think) % think;
    let (vx, vy) = boids::plan_path(
        terrain,
        cfg.world_size_mm as i32,
        x_mm,
        y_mm,
        (dx * s / len) as i32,
        (dy * s / len) as i32,
        glides,
    );
    Boid {
        x_mm,
        y_mm,
        vx: vx as i16,
        vy: vy as i16,
    }
}

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
            KERNEL_RULES_VERSION,
            self.tick,
            &self.config_hash,
            &self.terrain.content_hash(),
            &leaves,
        )
    }
}

/// A client stream's state in brief, for tools that explain divergences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSummary {
    pub tokens_bytes: u32,
    /// Ticks of the snapshots still remembered as possible baselines, ascending.
    pub remembered_ticks: Vec<u32>,
    /// (entity id, accumulated priority) of the current interest set.
    pub interest: Vec<(u32, u32)>,
    pub digest: [u8; 32],
}

impl World {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zones::Zone;

    /// A world on `shards` shards, stepped once with `client` joined, and that client's
    /// avatar moved to the middle of the first hunting field (which is returned).
    fn hunter_in_field(config: &WorldConfig, shards: usize, client: u32) -> (World, Zone) {
        let mut w = World::new(config.clone(), shards).unwrap();
        let join = Input::Join {
            client,
            name: "hunter".into(),
        };
        w.step(&TickInputs { inputs: vec![join] });
        let field = w.zones.hunting_fields[0];
        let slot = w.slot_of(client).unwrap() as usize;
        (w.players[slot].x_mm, w.players[slot].y_mm) = (field.x_mm, field.y_mm);
        (w, field)
    }

    /// A boid caught in the very tick its think group steers must think from where it
    /// respawned, and alike on every shard count (the cast writes its boids in grid order
    /// and re-sorts the grid on the shards before the boid phase).
    #[test]
    fn a_boid_caught_as_it_thinks_thinks_from_its_respawn_on_every_shard_count() {
        let config = WorldConfig {
            boid_count: 600,
            ..WorldConfig::default()
        };
        let think = config.flocking.think_interval_ticks;
        let shard_counts = [1, 2, 3];
        let mut boids_after: Vec<Vec<Boid>> = Vec::new();
        for shards in shard_counts {
            // Stand the hunter in a field with three boids next to it, one of which thinks
            // in the cast's tick, and the others do not.
            let (mut w, field) = hunter_in_field(&config, shards, 1);
            let tick = w.tick + 1;
            let thinker = (0..w.anchors.len() as u32)
                .find(|id| (tick + id) % think == 0)
                .unwrap();
            let mut boids = w.boids();
            for (k, id) in [thinker, thinker + 1, thinker + 2].into_iter().enumerate() {
                boids[id as usize] = Boid {
                    x_mm: field.x_mm + 300 * k as i32,
                    y_mm: field.y_mm,
                    vx: 40,
                    vy: 0,
                };
            }
            w.rehash(&boids);
            let cast = Input::Cast { client: 1, seq: 1 };
            let out = w.step(&TickInputs { inputs: vec![cast] });
            assert!(
                out.casts.caught >= 3,
                "shards {shards}: caught {}",
                out.casts.caught
            );
            boids_after.push(w.boids());
        }
        for (i, b) in boids_after.iter().enumerate().skip(1) {
            let first = (0..b.len()).find(|&id| b[id] != boids_after[0][id]);
            assert_eq!(
                first, None,
                "{} shards differ from 1 at boid {first:?}",
                shard_counts[i]
            );
        }
    }

    /// A boid a cast respawns stands, for the rest of that tick, where it respawned: the
    /// boids thinking in that tick see it there as a neighbour, exactly as if it had stood
    /// there all along. The cast has to re-sort the grid for that (the boids are kept in
    /// grid order); without the re-sort this test fails.
    #[test]
    fn a_respawned_boid_is_a_neighbour_where_it_respawned_in_the_same_tick() {
        let config = WorldConfig {
            boid_count: 600,
            ..WorldConfig::default()
        };
        let think = config.flocking.think_interval_ticks;
        for shards in [1, 2, 3] {
            // The victim glides in the cast's tick, the neighbour thinks in it.
            // (The cast comes at tick 2.)
            let (victim, neighbour) = (1 + 2 * think, 4 * think - 2);
            let world_with = |cast: bool| {
                let (mut w, field) = hunter_in_field(&config, shards, 1);
                let tick = w.tick + 1;
                assert_eq!((tick + neighbour) % think, 0, "the neighbour must think");
                let bits = rng::draw(w.config.seed, tick, victim, rng::STREAM_SPAWN);
                let respawn = spawn_boid(&w.terrain, &w.config, bits, victim, tick - 1);
                let mut boids = w.boids();
                // A metre from the respawn point (towards the middle): well within neighbour reach.
                let dx = if respawn.x_mm > 500_000 { -1_000 } else { 1_000 };
                boids[neighbour as usize] = Boid {
                    x_mm: respawn.x_mm + dx,
                    ..respawn
                };
                boids[victim as usize] = if cast {
                    Boid {
                        x_mm: field.x_mm + 300,
                        y_mm: field.y_mm,
                        vx: 40,
                        vy: 0,
                    }
                } else {
                    respawn
                };
                w.rehash(&boids);
                let inputs = if cast {
                    vec![Input::Cast { client: 1, seq: 1 }]
                } else {
                    vec![]
                };
                let caught = w.step(&TickInputs { inputs }).casts.caught;
                (w, caught)
            };
            let ((cast, caught), (placed, _)) = (world_with(true), world_with(false));
            assert_eq!(caught, 1, "shards {shards}: the cast must catch the victim alone");
            for id in [victim, neighbour] {
                assert_eq!(cast.boid(id), placed.boid(id), "shards {shards}, boid {id}");
            }
        }
    }

    /// `boid(id)` reads a boid from its anchor record, `boids()` gathers the grid order:
    /// they must agree at every tick, casts included.
    #[test]
    fn a_boid_read_by_id_equals_the_gathered_boids() {
        let config = WorldConfig {
            boid_count: 700,
            ..WorldConfig::default()
        };
        let (mut w, field) = hunter_in_field(&config, 2, 7);
        let mut boids = w.boids();
        for (k, b) in boids.iter_mut().take(40).enumerate() {
            (b.x_mm, b.y_mm) = (field.x_mm + 100 * k as i32, field.y_mm);
        }
        w.rehash(&boids);
        let mut caught = 0;
        for seq in 1..=30 {
            let inputs = vec![Input::Cast { client: 7, seq }];
            caught += w.step(&TickInputs { inputs }).casts.caught;
            let by_id = w.boids();
            for (id, b) in by_id.iter().enumerate() {
                assert_eq!(w.boid(id as u32), Some(*b), "tick {}, boid {id}", w.tick);
            }
            assert_eq!(w.boid(by_id.len() as u32), None);
        }
        assert!(caught > 0, "no cast caught anything");
    }
}
