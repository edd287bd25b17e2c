//! The world: its state, how it is built (one path, `World::from_state`), and read access.
//!
//! The step itself is split by concern: `rules` applies the tick's inputs (join, steer,
//! cast, ack, leave), `avatars` moves the players' avatars, `step` runs the phases of a
//! tick on the shards and seals it (leaf hashes, state root, snapshots), and `inspect` holds
//! the read-only views tools and tests use to explain a state.
//!
//! The boids live in the grid's slot order (`grid_boids[k]` is boid `grid.order()[k]`), not
//! by id: a shard then reads and writes the boids of its own band of the world, and only
//! boids that cross into another band move between cores. By id the world keeps each
//! boid's anchor record (see `hash`), which changes only when the boid thinks or respawns.

mod avatars;
mod inspect;
mod rules;
mod step;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use thiserror::Error;

use crate::boids::{Avatar, Boid};
use crate::config::{ConfigError, WorldConfig};
use crate::grid::UniformGrid;
use crate::hash::{self, TreeLayout, PLAYERS_PER_CHUNK, STREAMS_PER_CHUNK};
use crate::output::TickOutput;
use crate::player::Player;
use crate::pool::{PinError, ShardPool};
use crate::rng;
use crate::snapshot::stream::ClientStream;
use crate::terrain::{Terrain, TerrainError};
use crate::zones::Zones;

use step::ShardScratch;

/// A world that cannot be built.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WorldError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Terrain(#[from] TerrainError),
}

/// The state a world is built from: everything that decides its future besides its
/// config and terrain. Construction spawns one at tick 0; a checkpoint restores one.
#[derive(Debug)]
pub(crate) struct WorldState {
    pub tick: u32,
    /// Every boid, by id.
    pub boids: Vec<Boid>,
    /// Every client slot.
    pub players: Vec<Player>,
    /// The snapshot stream of every joined slot (`None` for a free slot).
    pub streams: Vec<Option<Box<ClientStream>>>,
}

/// The world: state, derived indexes, the shard pool and reusable buffers.
pub struct World {
    config: WorldConfig,
    config_hash: [u8; 32],
    terrain: Arc<Terrain>,
    zones: Zones,
    tick: u32,
    /// Every boid at `tick`, in the slot order of `grid` (built on these positions).
    grid_boids: Vec<Boid>,
    /// Every boid's anchor record at `tick` (`hash::anchor`), by id: what the boid leaves hash.
    anchors: Vec<Boid>,
    players: Vec<Player>,
    /// (client id, slot), ascending by client id.
    clients: Vec<(u32, u32)>,
    streams: Vec<Option<Box<ClientStream>>>,
    // Derived from the state above, never hashed or checkpointed.
    /// The boids' next state, in the slot order of `grid` before it is re-sorted.
    grid_boids_next: Vec<Boid>,
    grid: UniformGrid,
    avatars: Vec<Avatar>,
    /// `avatars` in the slot order of `avatar_grid` (`grid_avatars[k]` is avatar
    /// `avatar_grid.order()[k]`), for the snapshot builds.
    grid_avatars: Vec<Avatar>,
    avatar_grid: UniformGrid,
    pool: ShardPool,
    scratch: Vec<ShardScratch>,
    input_order: Vec<u32>,
    /// The clients due a snapshot this tick, as the centre of their interest: a player's
    /// avatar, or a spectator's camera (at rest), in slot order.
    due_viewers: Vec<Avatar>,
    /// (id, slot) of the boids a cast catches.
    caught: Vec<(u32, u32)>,
    layout: TreeLayout,
    leaves: Vec<[u8; 32]>,
    /// Think groups whose boids the serial phase moved (casts): their leaves are rehashed
    /// this tick although they did not think.
    dirty_groups: u32,
    /// A `step_entities_only` has run: the entities are right, the client streams, leaves
    /// and roots are not, for good.
    detached: bool,
    /// Leaves of chunks whose slots are all free, by chunk index (they never change).
    empty_player_leaves: Vec<[u8; 32]>,
    empty_stream_leaves: Vec<[u8; 32]>,
    output: TickOutput,
    #[cfg(feature = "fault-injection")]
    fault: Option<(u32, u32)>,
    /// The rules this world follows (`rules_version()` when it was built): stamped into
    /// its roots and checkpoints.
    rules_version: u32,
    #[cfg(feature = "planted-faults")]
    pub(crate) planted: Option<crate::planted::PlantedFault>,
    /// Orders clients for the `hash-tie` fault: a hasher of this world's own keys.
    #[cfg(feature = "planted-faults")]
    pub(crate) planted_hasher: std::collections::hash_map::RandomState,
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
        check_terrain(&config, &terrain)?;
        let boids = (0..config.boid_count)
            .map(|id| {
                let bits = rng::draw(config.seed, 0, id, rng::STREAM_SPAWN);
                rules::spawn_boid(&terrain, &config, bits, id, 0)
            })
            .collect();
        let slots = config.client_slots_max as usize;
        let state = WorldState {
            tick: 0,
            boids,
            players: vec![Player::default(); slots],
            streams: (0..slots).map(|_| None).collect(),
        };
        World::from_state(config, terrain, shard_count, state)
    }

    /// The world holding `state`, with every index, leaf hash and the root computed from
    /// it. The one way a world is built: construction and checkpoint restore both come
    /// here. The state must be consistent (a checkpoint validates it first): one player
    /// and one stream per joined slot, distinct client ids, every position in the world.
    pub(crate) fn from_state(
        config: WorldConfig,
        terrain: Arc<Terrain>,
        shard_count: usize,
        state: WorldState,
    ) -> Result<World, WorldError> {
        config.validate()?;
        check_terrain(&config, &terrain)?;
        let slots = config.client_slots_max as usize;
        assert_eq!(state.boids.len(), config.boid_count as usize, "one boid per id");
        assert_eq!(state.players.len(), slots, "one player record per slot");
        assert_eq!(state.streams.len(), slots, "one stream per slot");
        let mut clients: Vec<(u32, u32)> = Vec::with_capacity(slots);
        for (slot, p) in state.players.iter().enumerate() {
            assert_eq!(
                p.active,
                state.streams[slot].is_some(),
                "slot {slot}: player without stream"
            );
            if p.active {
                clients.push((p.client, slot as u32));
            }
        }
        clients.sort_unstable();
        assert!(
            clients.windows(2).all(|w| w[0].0 < w[1].0),
            "a client holds two slots"
        );

        let zones = Zones::place(&config, &terrain);
        let f = &config.flocking;
        let pool = ShardPool::new(shard_count);
        let shards = pool.shard_count();
        let layout = TreeLayout::of(&config);
        let counts = layout.counts();
        let placeholder = vec![Boid::default(); config.boid_count as usize];
        let mut world = World {
            config_hash: config.content_hash(),
            grid: UniformGrid::new(config.world_size_mm, f.neighbour_radius_mm),
            avatar_grid: UniformGrid::new(
                config.world_size_mm,
                f.flee_radius_mm.max(config.view_radius_mm / 4).max(1000),
            ),
            grid_boids_next: placeholder.clone(),
            anchors: placeholder.clone(),
            grid_boids: placeholder,
            players: state.players,
            clients,
            streams: state.streams,
            avatars: Vec::with_capacity(slots),
            grid_avatars: Vec::with_capacity(slots),
            pool,
            scratch: (0..shards).map(|s| ShardScratch::new(s as u32)).collect(),
            input_order: Vec::with_capacity(1024),
            due_viewers: Vec::with_capacity(slots),
            caught: Vec::with_capacity(64),
            layout,
            leaves: vec![[0; 32]; layout.leaf_count()],
            dirty_groups: 0,
            detached: false,
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
            output: TickOutput::with_snapshot_capacity(slots),
            tick: state.tick,
            terrain,
            zones,
            config,
            #[cfg(feature = "fault-injection")]
            fault: None,
            rules_version: crate::rules_version::rules_version(),
            #[cfg(feature = "planted-faults")]
            planted: crate::planted::planted(),
            #[cfg(feature = "planted-faults")]
            #[allow(
                clippy::disallowed_methods,
                reason = "the hash-tie fault is randomised on purpose"
            )]
            planted_hasher: std::collections::hash_map::RandomState::new(),
        };
        world.replace_boids(&state.boids);
        Ok(world)
    }

    /// The version of the rules this world follows (`KERNEL_RULES_VERSION` in every
    /// shipped build).
    pub fn rules_version(&self) -> u32 {
        self.rules_version
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

    /// Tells the shard threads no step comes soon, so they park at once instead of
    /// spinning for one (see `ShardPool::rest`): for a caller that paces its steps, as a
    /// live server does between ticks. The next step wakes them. Scheduling only.
    pub fn rest_shards(&self) {
        self.pool.rest();
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
    #[cfg(feature = "bench-hooks")]
    pub fn anchors(&self) -> &[Boid] {
        &self.anchors
    }

    /// All player slots.
    pub fn players(&self) -> &[Player] {
        &self.players
    }

    /// The snapshot streams, by slot (for checkpoints).
    pub(crate) fn streams(&self) -> &[Option<Box<ClientStream>>] {
        &self.streams
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

    /// Whether a `step_entities_only` has left this world's client streams, snapshots
    /// and roots behind (its entities are right). Such a world is for drawing; it cannot
    /// be checkpointed, and its roots mean nothing.
    pub fn is_detached(&self) -> bool {
        self.detached
    }

    /// The state root after the last tick.
    pub fn state_root(&self) -> [u8; 32] {
        self.output.state_root
    }

    /// The leaf hashes behind the state root, in tree order (see `hash`).
    pub fn chunk_hashes(&self) -> &[[u8; 32]] {
        &self.leaves
    }

    /// Makes the next step at `tick` nudge boid `entity` by one millimetre: a deliberate
    /// divergence for testing the tools that find divergences.
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&mut self, tick: u32, entity: u32) {
        self.fault = Some((tick, entity));
    }

    /// Takes `boids_by_id` as the boids at the current tick and recomputes every index,
    /// leaf and the root from the state (after construction or restore, and in tests that
    /// place boids by hand).
    pub(crate) fn replace_boids(&mut self, boids_by_id: &[Boid]) {
        let shards = self.pool.shard_count();
        self.grid
            .build_gathered(shards, boids_by_id, |b| (b.x_mm, b.y_mm), &mut self.grid_boids);
        let think = self.config.flocking.think_interval_ticks;
        for (id, (a, &b)) in self.anchors.iter_mut().zip(boids_by_id).enumerate() {
            *a = hash::anchor(b, self.tick.wrapping_add(id as u32) % think);
        }
        self.index_avatars();
        self.output.begin(self.tick);
        self.seal_rebuilt();
    }
}

/// The terrain must have the config's grid.
fn check_terrain(config: &WorldConfig, terrain: &Terrain) -> Result<(), TerrainError> {
    if terrain.cells() != config.terrain_grid_cells || terrain.cell_size_mm() != config.terrain_cell_size_mm {
        return Err(TerrainError::GridMismatch {
            expected: config.terrain_grid_cells,
            actual: terrain.cells(),
        });
    }
    Ok(())
}
