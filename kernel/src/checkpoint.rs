//! Checkpoints: the whole world state as bytes (rkyv), and back to an identical world.
//!
//! Byte layout (little-endian):
//!
//! | offset | size | field                                             |
//! |--------|------|---------------------------------------------------|
//! | 0      | 4    | magic `MGCK`                                      |
//! | 4      | 4    | checkpoint format version (`CHECKPOINT_VERSION`)  |
//! | 8      | 4    | kernel rules version                              |
//! | 12     | 4    | reserved, zero                                    |
//! | 16     | 8    | payload length in bytes                           |
//! | 24     | 32   | blake3 of the payload                             |
//! | 56     | n    | payload: rkyv archive of `CheckpointState`        |
//!
//! The terrain is not stored, only its hash: generated terrain is rebuilt from the config,
//! supplied terrain must be passed back in (and must hash the same).

use std::sync::Arc;

use rkyv::rancor;
use thiserror::Error;

use crate::boids::Boid;
use crate::config::WorldConfig;
use crate::snapshot::stream::{ClientStream, Interest, NO_TICK};
use crate::snapshot::{ViewEntry, VIEW_ENTITIES_MAX};
use crate::terrain::Terrain;
use crate::world::{Player, World, WorldError};
use crate::KERNEL_RULES_VERSION;

/// Current checkpoint format version.
pub const CHECKPOINT_VERSION: u32 = 2;
const MAGIC: &[u8; 4] = b"MGCK";
const HEADER_BYTES: usize = 56;

/// Why a checkpoint could not be restored.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("not a checkpoint (magic {found:02x?}, expected \"MGCK\")")]
    BadMagic { found: [u8; 4] },
    #[error("checkpoint format version {found} needs an upgrade (this build reads version {supported})")]
    UpgradeRequired { found: u32, supported: u32 },
    #[error("checkpoint format version {found} is newer than this build supports ({supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("checkpoint was made by kernel rules version {found}, this build runs {supported}")]
    RulesMismatch { found: u32, supported: u32 },
    #[error("checkpoint is corrupted: {reason}")]
    Corrupted { reason: String },
    #[error("checkpoint terrain hash differs from the terrain supplied")]
    TerrainMismatch,
    #[error(transparent)]
    World(#[from] WorldError),
}

/// One remembered snapshot view of a client stream.
#[derive(Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct RememberedView {
    tick: u32,
    entries: Vec<ViewEntry>,
}

/// A client stream's state.
#[derive(Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct StreamState {
    slot: u32,
    tokens_bytes: u32,
    views: Vec<RememberedView>,
    interest: Vec<Interest>,
}

/// Everything that decides the future of a world.
#[derive(Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct CheckpointState {
    config: WorldConfig,
    terrain_hash: [u8; 32],
    tick: u32,
    /// The boids' canonical bytes (16 per boid) split into 16 byte planes: plane k holds
    /// byte k of every boid. Positions and velocities are small integers whose high bytes
    /// repeat, so the planes compress far better than the interleaved records (a zstd
    /// checkpoint of 5,000 boids: 50 KB interleaved, 40 KB as planes).
    boid_planes: Vec<u8>,
    players: Vec<Player>,
    streams: Vec<StreamState>,
}

const BOID_BYTES: usize = 12;

/// Byte k of record i goes to `out[k * n + i]`.
fn to_planes(records: &[u8]) -> Vec<u8> {
    let n = records.len() / BOID_BYTES;
    let mut out = vec![0u8; records.len()];
    for (i, r) in records.chunks_exact(BOID_BYTES).enumerate() {
        for (k, &b) in r.iter().enumerate() {
            out[k * n + i] = b;
        }
    }
    out
}

/// The inverse of `to_planes`, straight into boids (little-endian fields).
fn from_planes(planes: &[u8]) -> Vec<Boid> {
    let n = planes.len() / BOID_BYTES;
    // Layout of the 12 canonical bytes: x (4), y (4), vx (2), vy (2).
    let b = |i: usize, k: usize| planes[k * n + i];
    let word = |i: usize, at: usize| i32::from_le_bytes([b(i, at), b(i, at + 1), b(i, at + 2), b(i, at + 3)]);
    let half = |i: usize, at: usize| i16::from_le_bytes([b(i, at), b(i, at + 1)]);
    (0..n)
        .map(|i| Boid {
            x_mm: word(i, 0),
            y_mm: word(i, 4),
            vx: half(i, 8),
            vy: half(i, 10),
        })
        .collect()
}

fn corrupted(reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Corrupted {
        reason: reason.into(),
    }
}

/// Serializes the world's state.
pub fn save(world: &World) -> Vec<u8> {
    let state = CheckpointState {
        config: world.config.clone(),
        terrain_hash: world.terrain.content_hash(),
        tick: world.tick,
        boid_planes: to_planes(crate::hash::boid_bytes(&world.boids())),
        players: world.players.clone(),
        streams: world
            .streams
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| {
                let s = s.as_ref()?;
                let mut views: Vec<RememberedView> = s
                    .remembered()
                    .map(|(tick, v)| RememberedView {
                        tick,
                        entries: v.to_vec(),
                    })
                    .collect();
                views.sort_by_key(|v| v.tick);
                Some(StreamState {
                    slot: slot as u32,
                    tokens_bytes: s.tokens_bytes,
                    views,
                    interest: s.interest.clone(),
                })
            })
            .collect(),
    };
    let payload =
        rkyv::to_bytes::<rancor::Error>(&state).expect("serializing plain data into memory cannot fail");
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    out.extend_from_slice(&KERNEL_RULES_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(blake3::hash(&payload).as_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Restores a world whose terrain is generated from its config.
pub fn restore(bytes: &[u8], shard_count: usize) -> Result<World, CheckpointError> {
    let state = decode(bytes)?;
    let terrain = Arc::new(Terrain::generate(&state.config).map_err(WorldError::from)?);
    build(state, terrain, shard_count)
}

/// Restores a world onto caller-supplied terrain, which must be the one it was saved with.
pub fn restore_with_terrain(
    bytes: &[u8],
    terrain: Arc<Terrain>,
    shard_count: usize,
) -> Result<World, CheckpointError> {
    build(decode(bytes)?, terrain, shard_count)
}

/// The config stored in a checkpoint, without restoring it.
pub fn peek_config(bytes: &[u8]) -> Result<WorldConfig, CheckpointError> {
    Ok(decode(bytes)?.config)
}

fn decode(bytes: &[u8]) -> Result<CheckpointState, CheckpointError> {
    if bytes.len() < HEADER_BYTES {
        if bytes.len() >= 4 && &bytes[..4] != MAGIC {
            return Err(CheckpointError::BadMagic {
                found: bytes[..4].try_into().unwrap_or([0; 4]),
            });
        }
        return Err(corrupted(format!(
            "{} bytes is shorter than the {HEADER_BYTES}-byte header",
            bytes.len()
        )));
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
    let magic: [u8; 4] = bytes[..4].try_into().unwrap_or([0; 4]);
    if &magic != MAGIC {
        return Err(CheckpointError::BadMagic { found: magic });
    }
    let version = word(4);
    if version < CHECKPOINT_VERSION {
        return Err(CheckpointError::UpgradeRequired {
            found: version,
            supported: CHECKPOINT_VERSION,
        });
    }
    if version > CHECKPOINT_VERSION {
        return Err(CheckpointError::UnsupportedVersion {
            found: version,
            supported: CHECKPOINT_VERSION,
        });
    }
    let rules = word(8);
    if rules != KERNEL_RULES_VERSION {
        return Err(CheckpointError::RulesMismatch {
            found: rules,
            supported: KERNEL_RULES_VERSION,
        });
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or([0; 8]));
    let payload = &bytes[HEADER_BYTES..];
    if payload.len() as u64 != len {
        return Err(corrupted(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        )));
    }
    if blake3::hash(payload).as_bytes() != &bytes[24..56] {
        return Err(corrupted("payload checksum mismatch"));
    }
    // rkyv needs its archive aligned; the caller's slice may not be.
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    rkyv::from_bytes::<CheckpointState, rancor::Error>(&aligned)
        .map_err(|e| corrupted(format!("archive invalid: {e}")))
}

fn build(
    state: CheckpointState,
    terrain: Arc<Terrain>,
    shard_count: usize,
) -> Result<World, CheckpointError> {
    if terrain.content_hash() != state.terrain_hash {
        return Err(CheckpointError::TerrainMismatch);
    }
    let mut world = World::empty(state.config, terrain, shard_count)?;
    let cfg = world.config.clone();
    if state.boid_planes.len() != cfg.boid_count as usize * BOID_BYTES {
        return Err(corrupted(format!(
            "{} bytes of boids, config says {} boids of {BOID_BYTES}",
            state.boid_planes.len(),
            cfg.boid_count
        )));
    }
    let boids = from_planes(&state.boid_planes);
    if state.players.len() != cfg.client_slots_max as usize {
        return Err(corrupted(format!(
            "{} player slots, config says {}",
            state.players.len(),
            cfg.client_slots_max
        )));
    }
    let limit = cfg.world_size_mm as i32;
    if let Some(b) = boids
        .iter()
        .position(|b| !(0..limit).contains(&b.x_mm) || !(0..limit).contains(&b.y_mm))
    {
        return Err(corrupted(format!("boid {b} lies outside the world")));
    }
    world.tick = state.tick;
    world.players = state.players;
    for (slot, p) in world.players.iter().enumerate() {
        if p.active {
            if !(0..limit).contains(&p.x_mm)
                || !(0..limit).contains(&p.y_mm)
                || p.name_len as usize > p.name.len()
            {
                return Err(corrupted(format!("player slot {slot} is out of range")));
            }
            world.clients.push((p.client, slot as u32));
        }
    }
    world.clients.sort_unstable();
    if world.clients.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(corrupted("two slots hold the same client"));
    }
    for s in state.streams {
        let slot = s.slot as usize;
        if !world.players.get(slot).is_some_and(|p| p.active) || world.streams[slot].is_some() {
            return Err(corrupted(format!(
                "stream for slot {slot} has no player or is duplicated"
            )));
        }
        let mut stream = ClientStream::new(cfg.snapshot_budget_cap_bytes());
        stream.tokens_bytes = s.tokens_bytes.min(cfg.snapshot_budget_cap_bytes());
        for v in &s.views {
            let ascending = v.entries.windows(2).all(|w| w[0].id < w[1].id);
            if v.tick == NO_TICK
                || !ascending
                || !stream.remember(v.tick, cfg.snapshot_interval_ticks, &v.entries)
            {
                return Err(corrupted(format!(
                    "slot {slot}: remembered view of tick {} is invalid",
                    v.tick
                )));
            }
        }
        if s.interest.len() > VIEW_ENTITIES_MAX || !s.interest.windows(2).all(|w| w[0].id < w[1].id) {
            return Err(corrupted(format!("slot {slot}: interest list is invalid")));
        }
        stream.interest.extend_from_slice(&s.interest);
        stream.refresh_digest();
        world.streams[slot] = Some(Box::new(stream));
    }
    if world
        .players
        .iter()
        .enumerate()
        .any(|(i, p)| p.active != world.streams[i].is_some())
    {
        return Err(corrupted("a joined player has no stream"));
    }
    world.rehash(&boids);
    Ok(world)
}
