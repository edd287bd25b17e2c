//! What a step produces: the roots, the per-client snapshots, and counts of what
//! the inputs came to. Read by the net layer, the recorder and the tools; the world
//! reuses one `TickOutput` from tick to tick so a warm step allocates nothing.

use crate::input::Rejections;

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

/// A join that took effect: the client's slot and avatar entity id. A spectator's
/// snapshots name the id its slot's avatar would have; no entity with it ever exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    pub client: u32,
    pub slot: u32,
    pub avatar_id: u32,
    pub spectator: bool,
}

/// Where one client's snapshot sits in `TickOutput::snapshot_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SnapshotRef {
    client: u32,
    slot: u32,
    start: u32,
    len: u32,
}

/// One client's encoded snapshot for this tick (`kernel/SNAPSHOT_FORMAT.md`).
#[derive(Clone, Copy, Debug)]
pub struct ClientSnapshot<'a> {
    pub client: u32,
    pub slot: u32,
    pub bytes: &'a [u8],
}

impl ClientSnapshot<'_> {
    /// Whether it is a full snapshot (no baseline), as its header says.
    pub fn is_full(&self) -> bool {
        crate::snapshot::codec::snapshot_is_full(self.bytes)
    }
}

/// Everything one step produces. Reused by the world from tick to tick.
#[derive(Clone, Debug, Default)]
pub struct TickOutput {
    pub tick: u32,
    /// Root over the whole state after this tick.
    pub state_root: [u8; 32],
    /// blake3 over this tick's snapshots: "MGFR", the tick, then per snapshot (in slot
    /// order) the client id, the length and the blake3 of the bytes. Ticks without snapshots
    /// hash just the prefix.
    pub snapshots_root: [u8; 32],
    pub rejected: Rejections,
    pub casts: CastStats,
    pub joined: Vec<Joined>,
    pub left: Vec<u32>,
    snapshots: Vec<SnapshotRef>,
    snapshot_bytes: Vec<u8>,
}

impl TickOutput {
    /// An empty output with room for `slots` snapshots.
    pub(crate) fn with_snapshot_capacity(slots: usize) -> TickOutput {
        TickOutput {
            snapshots: Vec::with_capacity(slots),
            ..TickOutput::default()
        }
    }

    /// Starts tick `tick`: everything but the capacity is cleared.
    pub(crate) fn begin(&mut self, tick: u32) {
        self.tick = tick;
        self.rejected = Rejections::default();
        self.casts = CastStats::default();
        self.joined.clear();
        self.left.clear();
        self.snapshots.clear();
        self.snapshot_bytes.clear();
    }

    /// Appends the snapshot of the client in `slot` (snapshots go in ascending slot order).
    pub(crate) fn push_snapshot(&mut self, client: u32, slot: u32, bytes: &[u8]) {
        debug_assert!(self.snapshots.last().is_none_or(|f| f.slot < slot));
        self.snapshots.push(SnapshotRef {
            client,
            slot,
            start: self.snapshot_bytes.len() as u32,
            len: bytes.len() as u32,
        });
        self.snapshot_bytes.extend_from_slice(bytes);
    }

    fn bytes_of(&self, f: &SnapshotRef) -> &[u8] {
        &self.snapshot_bytes[f.start as usize..(f.start + f.len) as usize]
    }

    /// This tick's client snapshots, by slot.
    pub fn snapshots(&self) -> impl ExactSizeIterator<Item = ClientSnapshot<'_>> + '_ {
        self.snapshots.iter().map(|f| ClientSnapshot {
            client: f.client,
            slot: f.slot,
            bytes: self.bytes_of(f),
        })
    }

    /// The snapshot for one client, if it got one this tick.
    pub fn snapshot_for(&self, client: u32) -> Option<&[u8]> {
        self.snapshots().find(|f| f.client == client).map(|f| f.bytes)
    }

    /// The snapshot for the client in `slot`, if it got one this tick (snapshots are in slot order).
    pub fn snapshot_for_slot(&self, slot: u32) -> Option<&[u8]> {
        let i = self.snapshots.binary_search_by_key(&slot, |f| f.slot).ok()?;
        Some(self.bytes_of(&self.snapshots[i]))
    }

    /// Number of snapshots this tick.
    pub fn snapshot_count(&self) -> usize {
        self.snapshots.len()
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
    /// The digest the state root takes the stream in by (`STREAM_DIGEST_BYTES`).
    pub digest: [u8; crate::snapshot::STREAM_DIGEST_BYTES],
}
