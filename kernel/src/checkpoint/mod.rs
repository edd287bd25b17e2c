//! Checkpoints: the whole world state as bytes (rkyv), and back to an identical world.
//!
//! Byte layout (little-endian):
//!
//! | offset | size | field                                             |
//! |--------|------|---------------------------------------------------|
//! | 0      | 4    | magic `MGCK`                                      |
//! | 4      | 4    | checkpoint format version                         |
//! | 8      | 4    | kernel rules version                              |
//! | 12     | 4    | reserved, zero                                    |
//! | 16     | 8    | payload length in bytes                           |
//! | 24     | 32   | blake3 of the payload                             |
//! | 56     | n    | payload                                           |
//!
//! Two formats share the header. Version 2 (`CHECKPOINT_VERSION_RAW`, what
//! [`save_checkpoint`] writes, fast enough for a live tick) has an rkyv archive of
//! `CheckpointState` as its payload. Version 3 (`CHECKPOINT_VERSION_COMPACT`, what
//! [`compact_checkpoint`] makes of one, for storage) has the same state packed, in the
//! `compact` module. Both restore.
//!
//! The terrain is not stored, only its hash: generated terrain is rebuilt from the config,
//! supplied terrain must be passed back in (and must hash the same).

use std::sync::Arc;

use rkyv::rancor;
use thiserror::Error;

use crate::boids::{Boid, BOID_RECORD_BYTES, BOID_VX_OFFSET, BOID_VY_OFFSET, BOID_X_OFFSET, BOID_Y_OFFSET};
use crate::config::WorldConfig;
use crate::player::Player;
use crate::rules_version::rules_version;
use crate::snapshot::stream::{ClientStream, Interest, NO_TICK};
use crate::snapshot::{ViewEntry, VIEW_ENTITIES_MAX};
use crate::terrain::Terrain;
use crate::world::{World, WorldError, WorldState};

mod compact;

/// The format `save_checkpoint` writes: the state as it lies in memory.
pub const CHECKPOINT_VERSION_RAW: u32 = 2;
/// The format `compact_checkpoint` writes: the same state packed for storage.
pub const CHECKPOINT_VERSION_COMPACT: u32 = 3;
/// The newest checkpoint format this build reads.
pub const CHECKPOINT_VERSION: u32 = CHECKPOINT_VERSION_COMPACT;
const MAGIC: &[u8; 4] = b"MGCK";
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = 4;
const RULES_VERSION_OFFSET: usize = 8;
const RESERVED_OFFSET: usize = 12;
const PAYLOAD_LEN_OFFSET: usize = 16;
const CHECKSUM_OFFSET: usize = 24;
const HEADER_BYTES: usize = 56;
const _: () = assert!(MAGIC_OFFSET + MAGIC.len() == VERSION_OFFSET);
const _: () = assert!(RESERVED_OFFSET + 4 == PAYLOAD_LEN_OFFSET);
const _: () = assert!(PAYLOAD_LEN_OFFSET + 8 == CHECKSUM_OFFSET);
const _: () = assert!(CHECKSUM_OFFSET + 32 == HEADER_BYTES);

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
#[derive(Debug, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct RememberedView {
    tick: u32,
    entries: Vec<ViewEntry>,
}

/// A client stream's state.
#[derive(Debug, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct StreamState {
    slot: u32,
    tokens_bytes: u32,
    views: Vec<RememberedView>,
    interest: Vec<Interest>,
}

/// Everything that decides the future of a world.
#[derive(Debug, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct CheckpointState {
    config: WorldConfig,
    terrain_hash: [u8; 32],
    tick: u32,
    /// The boids' canonical records (12 bytes each, by id) split into 12 byte planes:
    /// plane k holds byte k of every boid. Positions and velocities are small integers whose high bytes
    /// repeat, so the planes compress far better than the interleaved records (a zstd
    /// checkpoint of 5,000 boids: 50 KB interleaved, 40 KB as planes).
    boid_planes: Vec<u8>,
    players: Vec<Player>,
    streams: Vec<StreamState>,
}

/// `CheckpointState` over the world's own views and interest lists: it archives to the
/// same bytes (`ArchivedCheckpointState`) without copying them into owned vectors first.
/// A 1,000-client checkpoint is thousands of such small blocks, copied and freed again on
/// the tick thread of a live server at every checkpoint.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedCheckpointState, serialize_bounds(__S: rkyv::ser::Writer + rkyv::ser::Allocator))]
struct CheckpointStateRef<'a> {
    #[rkyv(with = rkyv::with::Inline, omit_bounds)]
    config: &'a WorldConfig,
    terrain_hash: [u8; 32],
    tick: u32,
    boid_planes: Vec<u8>,
    players: Vec<Player>,
    #[rkyv(omit_bounds)]
    streams: Vec<StreamStateRef<'a>>,
}

/// `StreamState` over a live stream (see `CheckpointStateRef`).
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedStreamState, serialize_bounds(__S: rkyv::ser::Writer + rkyv::ser::Allocator))]
struct StreamStateRef<'a> {
    slot: u32,
    tokens_bytes: u32,
    #[rkyv(with = SliceAsVec, omit_bounds)]
    views: &'a [RememberedViewRef<'a>],
    #[rkyv(with = SliceAsVec, omit_bounds)]
    interest: &'a [Interest],
}

/// `RememberedView` over a live stream's arena (see `CheckpointStateRef`).
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(as = ArchivedRememberedView, serialize_bounds(__S: rkyv::ser::Writer + rkyv::ser::Allocator))]
struct RememberedViewRef<'a> {
    tick: u32,
    #[rkyv(with = SliceAsVec, omit_bounds)]
    entries: &'a [ViewEntry],
}

/// Archives a borrowed slice as the `ArchivedVec` a `Vec` of it would be, by the same
/// calls a `Vec` makes, so the bytes are the same.
struct SliceAsVec;

impl<T: rkyv::Archive> rkyv::with::ArchiveWith<&[T]> for SliceAsVec {
    type Archived = rkyv::vec::ArchivedVec<T::Archived>;
    type Resolver = rkyv::vec::VecResolver;

    fn resolve_with(field: &&[T], resolver: Self::Resolver, out: rkyv::Place<Self::Archived>) {
        rkyv::vec::ArchivedVec::resolve_from_slice(field, resolver, out);
    }
}

impl<T, S> rkyv::with::SerializeWith<&[T], S> for SliceAsVec
where
    T: rkyv::Serialize<S>,
    S: rancor::Fallible + rkyv::ser::Allocator + rkyv::ser::Writer + ?Sized,
{
    fn serialize_with(field: &&[T], serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        rkyv::vec::ArchivedVec::serialize_from_slice(field, serializer)
    }
}

/// Byte k of record i goes to `out[k * n + i]`.
fn to_planes(records: &[u8]) -> Vec<u8> {
    let n = records.len() / BOID_RECORD_BYTES;
    let mut out = vec![0u8; records.len()];
    for (i, r) in records.chunks_exact(BOID_RECORD_BYTES).enumerate() {
        for (k, &b) in r.iter().enumerate() {
            out[k * n + i] = b;
        }
    }
    out
}

/// The inverse of `to_planes`, straight into boids (the record layout is in `boids`).
fn from_planes(planes: &[u8]) -> Vec<Boid> {
    let n = planes.len() / BOID_RECORD_BYTES;
    let b = |i: usize, k: usize| planes[k * n + i];
    let word = |i: usize, at: usize| i32::from_le_bytes([b(i, at), b(i, at + 1), b(i, at + 2), b(i, at + 3)]);
    let half = |i: usize, at: usize| i16::from_le_bytes([b(i, at), b(i, at + 1)]);
    (0..n)
        .map(|i| Boid {
            x_mm: word(i, BOID_X_OFFSET),
            y_mm: word(i, BOID_Y_OFFSET),
            vx: half(i, BOID_VX_OFFSET),
            vy: half(i, BOID_VY_OFFSET),
        })
        .collect()
}

fn corrupted(reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Corrupted {
        reason: reason.into(),
    }
}

/// Serializes the world's state.
pub fn save_checkpoint(world: &World) -> Vec<u8> {
    save_checkpoint_unsealed(world).seal()
}

/// A checkpoint whose checksum is not filled in yet: the copy of the world is taken, the
/// blake3 over it (1.4 of the 2.5 ms a 7 MB checkpoint takes) can be left to another
/// thread. Only `seal` gives bytes.
#[derive(Debug)]
pub struct UnsealedCheckpoint {
    bytes: Vec<u8>,
    /// The bound on the archive its buffer was reserved for (see `buffer_bytes`).
    bound_bytes: usize,
}

impl UnsealedCheckpoint {
    /// The bound on the archive the checkpoint's buffer was reserved for: what a buffer
    /// handed to `save_checkpoint_unsealed_into` for the next checkpoint of the world
    /// should hold, so that it is not reallocated. Not the buffer's capacity: a buffer
    /// handed in larger keeps its capacity, and a server sizing each next buffer an eighth
    /// over the last capacity grew it by an eighth every checkpoint (a 10-minute
    /// 1,000-bot hold: the touching of the buffer took up to 0.6 s of CPU in a second
    /// after 7 minutes, a buffer of some 200 MB).
    pub fn buffer_bytes(&self) -> usize {
        self.bound_bytes
    }

    /// The checkpoint's bytes, exactly as `save_checkpoint` gives them.
    pub fn seal(mut self) -> Vec<u8> {
        let checksum = *blake3::hash(&self.bytes[HEADER_BYTES..]).as_bytes();
        self.bytes[CHECKSUM_OFFSET..HEADER_BYTES].copy_from_slice(&checksum);
        self.bytes
    }
}

/// The players as a checkpoint keeps them (all of every one, unless the planted
/// `checkpoint-field` fault drops their cooldowns).
fn saved_players(world: &World) -> Vec<crate::player::Player> {
    #[allow(unused_mut)]
    let mut players = world.players().to_vec();
    #[cfg(feature = "planted-faults")]
    if world.planted == Some(crate::planted::PlantedFault::CheckpointField) {
        for p in &mut players {
            p.cast_ready_tick = 0;
        }
    }
    players
}

/// `save_checkpoint` without the checksum (see `UnsealedCheckpoint`).
pub fn save_checkpoint_unsealed(world: &World) -> UnsealedCheckpoint {
    save_checkpoint_unsealed_into(world, Vec::new())
}

/// `save_checkpoint_unsealed` into `buffer` (its contents are dropped), whose capacity is
/// used when it is enough. The bytes are the same whatever the buffer. A fresh 7 MB buffer
/// costs the thread that fills it about 1,000 page faults (1,000 clients: 2.2 ms where a
/// warm one takes 0.5), so a live server hands in one whose pages were touched ahead of
/// the checkpoint, off the tick thread.
pub fn save_checkpoint_unsealed_into(world: &World, buffer: Vec<u8>) -> UnsealedCheckpoint {
    assert!(
        !world.is_detached(),
        "a world stepped entities-only has no client streams to checkpoint"
    );
    let (views, ends) = remembered_views(world);
    let state = state_of(world, &views, &ends);
    // The archive goes straight behind a zeroed header in one buffer sized for it up front.
    // Letting it grow copied everything written so far at each doubling and faulted in
    // fresh pages each time, and the payload was then copied once more behind its header:
    // a 7 MB checkpoint of 1,000 clients took 13.4 ms (`headless 600 2 1000`), most of it
    // copies and page faults, on the tick thread of a live server. rkyv positions are
    // relative and its padding follows the position, which the header's 56 bytes (a
    // multiple of every archived alignment) leave unchanged, so the payload bytes are the
    // same as an archive of its own (the golden test holds a checkpoint's hash).
    const _: () = assert!(HEADER_BYTES % 8 == 0);
    let capacity = HEADER_BYTES + archive_bytes_max(&state);
    let mut out = buffer;
    out.clear();
    out.reserve(capacity);
    out.resize(HEADER_BYTES, 0);
    let mut out = rkyv::api::high::to_bytes_in::<_, rancor::Error>(&state, out)
        .expect("serializing plain data into memory cannot fail");
    debug_assert!(
        out.len() <= capacity,
        "archive_bytes_max is {} bytes short",
        out.len() - capacity
    );
    write_header(&mut out, CHECKPOINT_VERSION_RAW, world.rules_version());
    UnsealedCheckpoint {
        bytes: out,
        bound_bytes: capacity,
    }
}

/// Fills in the header of `out` (a zeroed header, then the payload) but for its checksum.
fn write_header(out: &mut [u8], version: u32, rules_version: u32) {
    let payload_len = (out.len() - HEADER_BYTES) as u64;
    out[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(MAGIC);
    out[VERSION_OFFSET..RULES_VERSION_OFFSET].copy_from_slice(&version.to_le_bytes());
    out[RULES_VERSION_OFFSET..RESERVED_OFFSET].copy_from_slice(&rules_version.to_le_bytes());
    out[PAYLOAD_LEN_OFFSET..CHECKSUM_OFFSET].copy_from_slice(&payload_len.to_le_bytes());
}

/// The compact form (format version 3) of a checkpoint: the same world, about an eighth of
/// the bytes once compressed (see the `compact` module). A raw checkpoint of 1,000 clients
/// compacts in about 6 ms, so a recorder does it off the tick thread, where it also
/// spares zstd most of its work. The rules version is kept as it is. A compact checkpoint
/// is given back unchanged once its header and checksum hold.
pub fn compact_checkpoint(bytes: &[u8]) -> Result<Vec<u8>, CheckpointError> {
    let (version, rules, payload) = read_header(bytes)?;
    if version == CHECKPOINT_VERSION_COMPACT {
        return Ok(bytes.to_vec());
    }
    compacted(decode_payload(version, payload)?, rules)
}

impl UnsealedCheckpoint {
    /// `compact_checkpoint` of the sealed bytes, without hashing the 7 MB of a 1,000-client
    /// raw checkpoint to seal it and again to check it (1.4 ms each).
    pub fn compact(self) -> Result<Vec<u8>, CheckpointError> {
        let word = |at: usize| u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let (version, rules) = (word(VERSION_OFFSET), word(RULES_VERSION_OFFSET));
        compacted(decode_payload(version, &self.bytes[HEADER_BYTES..])?, rules)
    }
}

/// A sealed compact checkpoint of `state`.
fn compacted(state: CheckpointState, rules: u32) -> Result<Vec<u8>, CheckpointError> {
    let packed = compact::compact(state)?;
    let mut out = rkyv::api::high::to_bytes_in::<_, rancor::Error>(&packed, vec![0; HEADER_BYTES])
        .expect("serializing plain data into memory cannot fail");
    write_header(&mut out, CHECKPOINT_VERSION_COMPACT, rules);
    let bound_bytes = out.len();
    Ok(UnsealedCheckpoint {
        bytes: out,
        bound_bytes,
    }
    .seal())
}

/// Every client stream's remembered views in one vector (slot order, ascending by tick
/// within a stream), and where each joined slot's run of them ends: a checkpoint of 1,000
/// clients allocates this once rather than a small vector per client.
fn remembered_views(world: &World) -> (Vec<RememberedViewRef<'_>>, Vec<(u32, usize)>) {
    let mut views = Vec::new();
    let mut ends = Vec::new();
    for (slot, s) in world.streams().iter().enumerate() {
        let Some(s) = s.as_ref() else {
            continue;
        };
        let start = views.len();
        views.extend(
            s.remembered()
                .map(|(tick, entries)| RememberedViewRef { tick, entries }),
        );
        views[start..].sort_by_key(|v| v.tick);
        ends.push((slot as u32, views.len()));
    }
    (views, ends)
}

/// What a checkpoint of `world` archives, borrowing the client streams' views (through
/// `remembered_views`) and interest lists (`CheckpointStateRef`).
fn state_of<'a>(
    world: &'a World,
    views: &'a [RememberedViewRef<'a>],
    ends: &[(u32, usize)],
) -> CheckpointStateRef<'a> {
    let streams = world.streams();
    let mut start = 0;
    CheckpointStateRef {
        config: world.config(),
        terrain_hash: world.terrain().content_hash(),
        tick: world.tick(),
        boid_planes: to_planes(crate::hash::boid_bytes(&world.boids())),
        players: saved_players(world),
        streams: ends
            .iter()
            .filter_map(|&(slot, end)| {
                let run = &views[start..end];
                start = end;
                let s = streams[slot as usize].as_ref()?;
                Some(StreamStateRef {
                    slot,
                    tokens_bytes: s.tokens_bytes,
                    views: run,
                    interest: &s.interest,
                })
            })
            .collect(),
    }
}

/// A bound on the archive of `state`: its arrays' bytes, a generous allowance per record
/// for lengths, offsets and padding, and one for the config. Too low only costs a regrow.
fn archive_bytes_max(state: &CheckpointStateRef<'_>) -> usize {
    const RECORD_OVERHEAD_BYTES: usize = 32;
    let streams: usize = state
        .streams
        .iter()
        .map(|s| {
            let views: usize = s
                .views
                .iter()
                .map(|v| RECORD_OVERHEAD_BYTES + std::mem::size_of_val(v.entries))
                .sum();
            RECORD_OVERHEAD_BYTES + views + std::mem::size_of_val(s.interest)
        })
        .sum();
    4096 + state.boid_planes.len() + std::mem::size_of_val(&state.players[..]) * 2 + streams
}

/// Restores a world whose terrain is generated from its config.
pub fn restore_checkpoint(bytes: &[u8], shard_count: usize) -> Result<World, CheckpointError> {
    let state = decode(bytes, SameRules::Required)?;
    let terrain = Arc::new(Terrain::generate(&state.config).map_err(WorldError::from)?);
    build(state, terrain, shard_count)
}

/// Restores a world on a terrain the caller already holds (it must hash as the checkpoint
/// says, else `TerrainMismatch`): generating the default world's terrain takes about 200 ms
/// on this machine, a restore without it under 1 ms, so a reader that restores again and
/// again (the replay viewer's seeks) keeps the terrain once.
pub fn restore_checkpoint_with_terrain(
    bytes: &[u8],
    terrain: Arc<Terrain>,
    shard_count: usize,
) -> Result<World, CheckpointError> {
    build(decode(bytes, SameRules::Required)?, terrain, shard_count)
}

/// Restores the state of a checkpoint made under any kernel rules, as a world that
/// follows this build's: for carrying a world across a rules change (`rerecord`, the
/// fleet's upgrade). From there it evolves as these rules say, so a replay of what
/// followed the checkpoint under the old rules will not reproduce the old roots.
pub fn restore_checkpoint_any_rules(bytes: &[u8], shard_count: usize) -> Result<World, CheckpointError> {
    let state = decode(bytes, SameRules::NotRequired)?;
    let terrain = Arc::new(Terrain::generate(&state.config).map_err(WorldError::from)?);
    build(state, terrain, shard_count)
}

/// Whether a restore refuses a checkpoint of other rules.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SameRules {
    Required,
    NotRequired,
}

/// The header's format version and rules version, and the payload, checked against the
/// header's length and checksum.
fn read_header(bytes: &[u8]) -> Result<(u32, u32, &[u8]), CheckpointError> {
    if bytes.len() < HEADER_BYTES {
        if bytes.len() >= VERSION_OFFSET && &bytes[MAGIC_OFFSET..VERSION_OFFSET] != MAGIC {
            return Err(CheckpointError::BadMagic {
                found: bytes[MAGIC_OFFSET..VERSION_OFFSET].try_into().unwrap_or([0; 4]),
            });
        }
        return Err(corrupted(format!(
            "{} bytes is shorter than the {HEADER_BYTES}-byte header",
            bytes.len()
        )));
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
    let magic: [u8; 4] = bytes[MAGIC_OFFSET..VERSION_OFFSET].try_into().unwrap_or([0; 4]);
    if &magic != MAGIC {
        return Err(CheckpointError::BadMagic { found: magic });
    }
    let version = word(VERSION_OFFSET);
    if version < CHECKPOINT_VERSION_RAW {
        return Err(CheckpointError::UpgradeRequired {
            found: version,
            supported: CHECKPOINT_VERSION_RAW,
        });
    }
    if version > CHECKPOINT_VERSION {
        return Err(CheckpointError::UnsupportedVersion {
            found: version,
            supported: CHECKPOINT_VERSION,
        });
    }
    let len = u64::from_le_bytes(
        bytes[PAYLOAD_LEN_OFFSET..CHECKSUM_OFFSET]
            .try_into()
            .unwrap_or([0; 8]),
    );
    let payload = &bytes[HEADER_BYTES..];
    if payload.len() as u64 != len {
        return Err(corrupted(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        )));
    }
    if blake3::hash(payload).as_bytes() != &bytes[CHECKSUM_OFFSET..HEADER_BYTES] {
        return Err(corrupted("payload checksum mismatch"));
    }
    Ok((version, word(RULES_VERSION_OFFSET), payload))
}

fn decode(bytes: &[u8], same_rules: SameRules) -> Result<CheckpointState, CheckpointError> {
    let (version, rules, payload) = read_header(bytes)?;
    if same_rules == SameRules::Required && rules != rules_version() {
        return Err(CheckpointError::RulesMismatch {
            found: rules,
            supported: rules_version(),
        });
    }
    decode_payload(version, payload)
}

/// The state in a payload of format `version` (one `read_header` accepts).
fn decode_payload(version: u32, payload: &[u8]) -> Result<CheckpointState, CheckpointError> {
    // rkyv needs its archive aligned; the caller's slice may not be.
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    let invalid = |e: rancor::Error| corrupted(format!("archive invalid: {e}"));
    if version == CHECKPOINT_VERSION_COMPACT {
        let packed = rkyv::from_bytes::<compact::CompactState, rancor::Error>(&aligned).map_err(invalid)?;
        return compact::expand(packed);
    }
    rkyv::from_bytes::<CheckpointState, rancor::Error>(&aligned).map_err(invalid)
}

/// Validates the decoded state (anything inconsistent is `Corrupted`) and builds the
/// world from it.
fn build(
    state: CheckpointState,
    terrain: Arc<Terrain>,
    shard_count: usize,
) -> Result<World, CheckpointError> {
    if terrain.content_hash() != state.terrain_hash {
        return Err(CheckpointError::TerrainMismatch);
    }
    let cfg = state.config;
    cfg.validate().map_err(WorldError::from)?;
    if state.boid_planes.len() != cfg.boid_count as usize * BOID_RECORD_BYTES {
        return Err(corrupted(format!(
            "{} bytes of boids, config says {} boids of {BOID_RECORD_BYTES}",
            state.boid_planes.len(),
            cfg.boid_count
        )));
    }
    let boids = from_planes(&state.boid_planes);
    let slots = cfg.client_slots_max as usize;
    if state.players.len() != slots {
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
    let players = state.players;
    let mut clients = Vec::new();
    for (slot, p) in players.iter().enumerate().filter(|(_, p)| p.active) {
        if !(0..limit).contains(&p.x_mm)
            || !(0..limit).contains(&p.y_mm)
            || p.name_len as usize > p.name.len()
            || (p.spectator && (p.vx, p.vy) != (0, 0))
        {
            return Err(corrupted(format!("player slot {slot} is out of range")));
        }
        clients.push(p.client);
    }
    clients.sort_unstable();
    if clients.windows(2).any(|w| w[0] == w[1]) {
        return Err(corrupted("two slots hold the same client"));
    }
    let mut streams: Vec<Option<Box<ClientStream>>> = (0..slots).map(|_| None).collect();
    for s in state.streams {
        let slot = s.slot as usize;
        if !players.get(slot).is_some_and(|p| p.active) || streams[slot].is_some() {
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
        streams[slot] = Some(Box::new(stream));
    }
    if players.iter().zip(&streams).any(|(p, s)| p.active != s.is_some()) {
        return Err(corrupted("a joined player has no stream"));
    }
    let state = WorldState {
        tick: state.tick,
        boids,
        players,
        streams,
    };
    Ok(World::from_state(cfg, terrain, shard_count, state)?)
}
