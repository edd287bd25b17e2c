//! One client's snapshot stream: its baseline ring, token bucket and priorities, and the
//! per-snapshot build that turns the world into that client's next snapshot.

use super::codec::{self, SnapshotHeader, SNAPSHOT_HEADER_BYTES};
use super::near::{
    scan_near, sort_by_id, Entities, NEAR_AVATAR, NEAR_HINT_TICKS_MAX, NEAR_ID_BITS, NEAR_ID_MASK,
};
use super::view::{ViewEntry, KIND_AVATAR, KIND_BOID};
use crate::boids::Avatar;
use crate::grid::d2_holding;
use xxhash_rust::xxh3::xxh3_128;

mod digest;
pub use digest::STREAM_DIGEST_BYTES;

/// Snapshots remembered per client as possible delta baselines: 0.8 s of ack lag at 20 Hz
/// before a client falls back to full snapshots. With `VIEW_ENTITIES_MAX` it bounds the
/// per-client arena (16 x 128 x 12 B = 24 KiB), which holds only the views still remembered.
pub const BASELINE_RING_LEN: usize = 16;
/// Most entities in one client's view; the nearest are kept when more are in range.
pub const VIEW_ENTITIES_MAX: usize = 128;
/// "No tick": an empty ring slot, or a client that has acked nothing.
pub const NO_TICK: u32 = u32::MAX;
/// A ring slot with no region of the arena (its `ring_tick` is `NO_TICK`).
const NO_REGION: u8 = u8::MAX;
const _: () = assert!(
    BASELINE_RING_LEN <= 32,
    "regions in use are tracked in a u32 mask"
);
/// Arena regions a client gets when it joins: the acked view and the one being built.
const ARENA_REGIONS_INITIAL: usize = 2;
/// Builds over which an arena's need is watched: an arena larger than the most regions
/// its client had in use at any build of the window (rounded up to a power of two)
/// shrinks to that at the window's end. 64 snapshots are 3.2 s at 20 Hz, so a client
/// whose lag comes and goes costs at most a grow and a shrink per window. Without it an
/// arena kept its worst lag for good: snapshots built while a joining client's terrain
/// was on its way are never acked, so 1,000 bots held 12.2 KB of arena each where 3 KB
/// serve a prompt acker.
const ARENA_SHRINK_WINDOW_BUILDS: u16 = 64;
// A sendable key's low 32 bits hold a candidate index (12 bits) over a cost (20 bits).
const _: () = assert!(VIEW_ENTITIES_MAX < 1 << 12);
/// Priority weight of the client's own avatar: it goes first whenever it changed.
const OWN_AVATAR_WEIGHT: u32 = 1 << 16;

/// An entity of the current interest set and the priority it has built up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[repr(C)]
pub struct Interest {
    pub id: u32,
    pub priority: u32,
}

/// The snapshot state of one joined client. Everything here but `snapshot*` is world state:
/// it decides future snapshots, so it is hashed (through `digest`) and checkpointed.
#[derive(Clone, Debug)]
pub(crate) struct ClientStream {
    /// Token bucket, in bytes: refilled by the average budget per snapshot, capped at the
    /// hard cap per snapshot; a snapshot never spends more than is in it.
    pub tokens_bytes: u32,
    pub ring_tick: [u32; BASELINE_RING_LEN],
    pub ring_len: [u16; BASELINE_RING_LEN],
    /// The arena region holding each live ring slot's view (`NO_REGION` when the slot is
    /// empty); two live slots never share a region. Storage only: not hashed, not saved.
    pub ring_region: [u8; BASELINE_RING_LEN],
    /// xxh3-128 of each live slot's view, taken when the view is written: `refresh_digest`
    /// reads it instead of rehashing views that have not changed since (a build writes one
    /// view and a client holds two or three). Storage only: not hashed itself, not saved.
    ring_view_digest: [u128; BASELINE_RING_LEN],
    /// Regions of `VIEW_ENTITIES_MAX` entries. A client only needs the views from its acked
    /// snapshot to its newest (two for a client whose acks come within one snapshot
    /// interval), so the arena starts with `ARENA_REGIONS_INITIAL` and doubles when a build
    /// finds no free region, up to `BASELINE_RING_LEN` regions, and halves or more when a
    /// whole shrink window needed less: it follows the worst ack lag of the last few
    /// seconds. Those doublings and shrinks are the only allocations of a warm tick.
    pub arena: Vec<ViewEntry>,
    /// The most regions in use after any build of the current shrink window, and the
    /// builds the window has seen (`ARENA_SHRINK_WINDOW_BUILDS`). Storage only.
    arena_need_max: u8,
    arena_window_builds: u16,
    /// Where the last build found its `VIEW_ENTITIES_MAX`-th nearest entity (its squared
    /// distance, or `u64::MAX`: it kept all in range), and at which tick: the next build
    /// scans first to that distance widened by what entities can have moved since
    /// (`near_hint_reach2`). Storage only: the choice never depends on it, only where the
    /// scan stops.
    near_hint_d2: u64,
    near_hint_tick: u32,
    /// The last interest set, ascending by id, with accumulated priorities.
    pub interest: Vec<Interest>,
    /// xxh3-128 of all of the above, refreshed by every build (`refresh_digest`).
    pub digest: [u8; STREAM_DIGEST_BYTES],
    /// Where this client's latest snapshot lies in the bytes of the shard that built it
    /// (output, not state): a shard's buffer holds all of its builds of one tick, so no
    /// client keeps a snapshot-sized buffer of its own.
    pub snapshot_at: SnapshotAt,
    pub snapshot_digest: [u8; 32],
}

/// A snapshot's place in `SnapshotScratch::bytes` of shard `shard`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SnapshotAt {
    pub shard: u32,
    pub start: u32,
    pub len: u32,
}

/// Borrowed world data a snapshot build reads.
#[derive(Clone, Copy)]
pub(crate) struct SnapshotContext<'a> {
    pub tick: u32,
    pub snapshot_interval_ticks: u32,
    pub view_radius_mm: u32,
    pub budget_avg_bytes: u32,
    pub budget_cap_bytes: u32,
    pub entities: Entities<'a>,
    #[cfg(feature = "planted-faults")]
    pub planted: Option<crate::planted::PlantedFault>,
}

/// Per-shard scratch space, reused every build so warm ticks allocate nothing.
#[derive(Debug, Default)]
pub(crate) struct SnapshotScratch {
    /// Entities in range as `(d2 << NEAR_ID_BITS | id, slot)`; avatars' slots carry
    /// `NEAR_AVATAR`.
    near: Vec<(u64, u32)>,
    /// The chosen entities by id, each with its squared distance.
    candidates: Vec<(u64, ViewEntry)>,
    /// The (id, index into `near`) keys that order `candidates`.
    id_keys: Vec<u64>,
    /// Scratch of `sort_by_id`.
    id_keys_next: Vec<u64>,
    /// Candidates to send as `(!priority) << 32 | index`: ascending is highest priority
    /// first, then lowest index (one integer sort instead of a tuple sort).
    sendable: Vec<u64>,
    /// The worst-case bits of each `sendable` update, in its order.
    cost_bits: Vec<u32>,
    priority: Vec<u32>,
    /// For each candidate, its index in the baseline view (`u32::MAX`: not there).
    base_index: Vec<u32>,
    selected: Vec<bool>,
    removals: Vec<u32>,
    removed: Vec<u32>,
    updates: Vec<(Option<ViewEntry>, ViewEntry)>,
    interest: Vec<Interest>,
    /// This shard's index, and the snapshots it built this tick, one after another
    /// (`ClientStream::snapshot_at` says where): emptied before each tick's builds.
    pub shard: u32,
    pub bytes: Vec<u8>,
    /// The last byte of the snapshot this shard built before (planted `stale-scratch`).
    #[cfg(feature = "planted-faults")]
    stale_byte: u8,
}

impl SnapshotScratch {
    pub fn new(shard: u32) -> Self {
        let n = VIEW_ENTITIES_MAX;
        SnapshotScratch {
            near: Vec::with_capacity(8 * n),
            candidates: Vec::with_capacity(n),
            id_keys: Vec::with_capacity(n),
            id_keys_next: Vec::with_capacity(n),
            sendable: Vec::with_capacity(n),
            cost_bits: Vec::with_capacity(n),
            priority: Vec::with_capacity(n),
            base_index: Vec::with_capacity(n),
            selected: Vec::with_capacity(n),
            removals: Vec::with_capacity(n),
            removed: Vec::with_capacity(n),
            updates: Vec::with_capacity(n),
            interest: Vec::with_capacity(n),
            shard,
            bytes: Vec::new(),
            #[cfg(feature = "planted-faults")]
            stale_byte: 0,
        }
    }
}

/// `v / d` for `v < 2^63`, given `d_inverse = u64::MAX / d`: the product's high half is the
/// quotient or one less (`d_inverse` is short of `2^64 / d` by less than one, so the
/// product is short of `v / d` by less than `v / 2^64`), and one multiply tells which.
#[inline]
fn quotient(v: u64, d: u64, d_inverse: u64) -> u64 {
    debug_assert!(d > 0 && v < 1 << 63 && d_inverse == u64::MAX / d);
    let q = ((u128::from(v) * u128::from(d_inverse)) >> 64) as u64;
    q + u64::from((q + 1) * d <= v)
}

fn ring_slot(tick: u32, interval: u32) -> usize {
    (tick / interval) as usize % BASELINE_RING_LEN
}

fn region_start(region: u8) -> usize {
    region as usize * VIEW_ENTITIES_MAX
}

fn view_bytes(view: &[ViewEntry]) -> &[u8] {
    const _: () = assert!(std::mem::size_of::<ViewEntry>() == 12);
    // SAFETY: ViewEntry is repr(C) plain old data with no padding (4+2+2+1+1+1+1 bytes).
    unsafe { std::slice::from_raw_parts(view.as_ptr().cast::<u8>(), std::mem::size_of_val(view)) }
}

fn interest_bytes(list: &[Interest]) -> &[u8] {
    // SAFETY: Interest is repr(C) with two u32 and no padding.
    unsafe { std::slice::from_raw_parts(list.as_ptr().cast::<u8>(), std::mem::size_of_val(list)) }
}

impl ClientStream {
    /// A fresh stream for a client that just joined: a full bucket, nothing remembered.
    pub fn new(budget_cap_bytes: u32) -> ClientStream {
        let mut s = ClientStream {
            tokens_bytes: budget_cap_bytes,
            ring_tick: [NO_TICK; BASELINE_RING_LEN],
            ring_len: [0; BASELINE_RING_LEN],
            ring_region: [NO_REGION; BASELINE_RING_LEN],
            ring_view_digest: [0; BASELINE_RING_LEN],
            arena: vec![ViewEntry::default(); ARENA_REGIONS_INITIAL * VIEW_ENTITIES_MAX],
            arena_need_max: 0,
            arena_window_builds: 0,
            near_hint_d2: u64::MAX,
            near_hint_tick: 0,
            interest: Vec::with_capacity(VIEW_ENTITIES_MAX),
            digest: [0; STREAM_DIGEST_BYTES],
            snapshot_at: SnapshotAt::default(),
            snapshot_digest: [0; 32],
        };
        s.refresh_digest();
        s
    }

    /// The remembered view of snapshot `tick`, if it is still in the ring.
    pub fn view(&self, tick: u32, interval: u32) -> Option<&[ViewEntry]> {
        let k = ring_slot(tick, interval);
        (self.ring_tick[k] == tick).then(|| self.slot_view(k))
    }

    /// Regions in the arena: storage, which the state does not decide (a restored stream
    /// has only as many as its remembered views need).
    pub fn arena_regions(&self) -> usize {
        self.arena.len() / VIEW_ENTITIES_MAX
    }

    /// The view of live ring slot `k`.
    fn slot_view(&self, k: usize) -> &[ViewEntry] {
        let start = region_start(self.ring_region[k]);
        &self.arena[start..start + self.ring_len[k] as usize]
    }

    /// Empties ring slot `k` and frees its region.
    fn forget(&mut self, k: usize) {
        self.ring_tick[k] = NO_TICK;
        self.ring_region[k] = NO_REGION;
    }

    /// The region ring slot `k` is written into: the one it has, else the lowest free one,
    /// else one of the regions the arena grows by (it doubles).
    fn claim_region(&mut self, k: usize) -> u8 {
        if self.ring_region[k] != NO_REGION {
            return self.ring_region[k];
        }
        let used = self
            .ring_region
            .iter()
            .filter(|&&r| r != NO_REGION)
            .fold(0u32, |mask, &r| mask | 1 << r);
        // Slot k holds none, so at most BASELINE_RING_LEN - 1 are in use and `free` fits.
        let free = (!used).trailing_zeros() as usize;
        debug_assert!(free < BASELINE_RING_LEN);
        let regions = self.arena.len() / VIEW_ENTITIES_MAX;
        if free >= regions {
            let grown = (regions * 2).clamp(free + 1, BASELINE_RING_LEN);
            self.arena
                .reserve_exact(grown * VIEW_ENTITIES_MAX - self.arena.len());
            self.arena.resize(grown * VIEW_ENTITIES_MAX, ViewEntry::default());
        }
        self.ring_region[k] = free as u8;
        free as u8
    }

    /// After a build: notes the regions in use, and at the end of a shrink window gives
    /// back the regions no build of the window needed.
    fn settle_arena(&mut self) {
        let live = self.ring_region.iter().filter(|&&r| r != NO_REGION).count();
        self.arena_need_max = self.arena_need_max.max(live as u8);
        self.arena_window_builds += 1;
        if self.arena_window_builds < ARENA_SHRINK_WINDOW_BUILDS {
            return;
        }
        let target = usize::from(self.arena_need_max)
            .next_power_of_two()
            .max(ARENA_REGIONS_INITIAL);
        self.arena_need_max = 0;
        self.arena_window_builds = 0;
        if target < self.arena_regions() {
            self.shrink_arena(target);
        }
    }

    /// Moves the live views into the first `regions` regions and frees the rest.
    fn shrink_arena(&mut self, regions: usize) {
        let mut used = self
            .ring_region
            .iter()
            .filter(|&&r| r != NO_REGION && usize::from(r) < regions)
            .fold(0u32, |mask, &r| mask | 1 << r);
        for k in 0..BASELINE_RING_LEN {
            let r = self.ring_region[k];
            if r == NO_REGION || usize::from(r) < regions {
                continue;
            }
            let free = (!used).trailing_zeros() as usize;
            assert!(free < regions, "a shrink keeps room for every live view");
            let src = region_start(r);
            self.arena
                .copy_within(src..src + usize::from(self.ring_len[k]), region_start(free as u8));
            self.ring_region[k] = free as u8;
            used |= 1 << free;
        }
        // Copied into a new allocation rather than shrunk in place: after a stall every
        // client's arena grew at once and moved to the top of the heap, and a shrink in
        // place leaves it there, so the process kept the stall's pages for good (a 150 ms
        // SIGSTOP at 1,000 bots: +4.5 MB of RSS that stayed). A new allocation of the
        // small size comes from the holes the growth left below, and freeing the large
        // one lets the allocator give the top of the heap back.
        let mut kept = Vec::with_capacity(regions * VIEW_ENTITIES_MAX);
        kept.extend_from_slice(&self.arena[..regions * VIEW_ENTITIES_MAX]);
        self.arena = kept;
    }

    /// Remembered (tick, view) pairs in ring order, for checkpoints.
    pub fn remembered(&self) -> impl Iterator<Item = (u32, &[ViewEntry])> {
        (0..BASELINE_RING_LEN)
            .filter(|&k| self.ring_tick[k] != NO_TICK)
            .map(|k| (self.ring_tick[k], self.slot_view(k)))
    }

    /// Puts a remembered view back (checkpoint restore). Returns false if it does not fit.
    pub fn remember(&mut self, tick: u32, interval: u32, view: &[ViewEntry]) -> bool {
        if view.len() > VIEW_ENTITIES_MAX || tick == NO_TICK {
            return false;
        }
        let k = ring_slot(tick, interval);
        let start = region_start(self.claim_region(k));
        self.arena[start..start + view.len()].copy_from_slice(view);
        self.ring_tick[k] = tick;
        self.ring_len[k] = view.len() as u16;
        self.ring_view_digest[k] = xxh3_128(view_bytes(view));
        true
    }

    /// The squared distance the last build's nearest entities lie within at `tick`, at
    /// most: their distance then, plus twice the farthest anything moves in the ticks
    /// since (the entity and the viewer each). `None` when there is no such build, or it
    /// is more than `NEAR_HINT_TICKS_MAX` ago.
    fn near_hint_reach2(&self, tick: u32) -> Option<u64> {
        let age_ticks = tick.wrapping_sub(self.near_hint_tick);
        if self.near_hint_d2 == u64::MAX || age_ticks > NEAR_HINT_TICKS_MAX {
            return None;
        }
        let moved_mm = 2 * u64::from(crate::config::SPEED_MAX_MM_PER_TICK) * u64::from(age_ticks);
        let reach_mm = self.near_hint_d2.isqrt() + 1 + moved_mm;
        Some(reach_mm * reach_mm)
    }

    /// Builds this client's snapshot for `ctx.tick`, appends it to `sc.bytes` (where
    /// `self.snapshot_at` finds it), and advances the stream.
    pub fn build(
        &mut self,
        ctx: &SnapshotContext<'_>,
        sc: &mut SnapshotScratch,
        own: &Avatar,
        acked_tick: u32,
        score: u32,
    ) {
        let interval = ctx.snapshot_interval_ticks;
        let own_id = ctx.entities.boid_count + own.slot;

        // 1. Interest: everything within the view radius of the avatar, nearest first when
        // there is too much. Most builds find several hundred entities in range and keep
        // `VIEW_ENTITIES_MAX`, so the scan stops at a distance the two grids' cell counts
        // show to hold that many already (the nearest can lie no farther), candidates are
        // one integer key each (distance, then id) with their slot, so choosing the nearest
        // compares plain integers, and only the chosen are quantized.
        let r = ctx.view_radius_mm as i64;
        let r2 = (r * r) as u64;
        debug_assert!(
            r2 < 1 << (64 - NEAR_ID_BITS),
            "view radius checked by WorldConfig"
        );
        // First as far as the last build's nearest reached, widened by what anyone can
        // have moved since: at 1,000 clients (`synth`) that kept 158 candidates a build
        // where the grids' cell counts bound them at 630, and 995 builds in 1,000 started
        // from it with none redone.
        // When it holds too few (someone left, or was respawned) and the view radius
        // reaches farther, the scan is redone to the cell counts' bound. Either holds at
        // least `VIEW_ENTITIES_MAX` entities or all within the radius, so the nearest are
        // the same whichever scan found them.
        let hinted = self.near_hint_reach2(ctx.tick).map(|h| h.min(r2));
        let mut reach2 = hinted.unwrap_or(r2);
        let mut kept = 0;
        if hinted.is_some() {
            kept = scan_near(&ctx.entities, &mut sc.near, own, own_id, reach2);
        }
        if hinted.is_none() || (kept < VIEW_ENTITIES_MAX && reach2 < r2) {
            reach2 = d2_holding(
                [ctx.entities.grid, ctx.entities.avatar_grid],
                own.x_mm,
                own.y_mm,
                r as i32,
                VIEW_ENTITIES_MAX,
            )
            .map_or(r2, |d2| d2.min(r2));
            kept = scan_near(&ctx.entities, &mut sc.near, own, own_id, reach2);
        }
        // `near` only ever grows (to the most any build kept); this build's are its first
        // `kept`, and the nearest `VIEW_ENTITIES_MAX` of them are chosen.
        let mut near = &mut sc.near[..kept];
        self.near_hint_d2 = u64::MAX;
        if near.len() > VIEW_ENTITIES_MAX {
            near.select_nth_unstable_by_key(VIEW_ENTITIES_MAX, |&(key, _)| key);
            // The first entity past the chosen: no nearer than the last of them.
            self.near_hint_d2 = near[VIEW_ENTITIES_MAX].0 >> NEAR_ID_BITS;
            near = &mut near[..VIEW_ENTITIES_MAX];
        }
        self.near_hint_tick = ctx.tick;
        let near = &*near;
        // Ids are unique, so sorting (id, index) keys as plain integers and gathering by
        // them is the same order, several times faster than sorting the entries.
        sc.id_keys.clear();
        sc.id_keys.extend(
            near.iter()
                .enumerate()
                .map(|(ci, &(key, _))| (key & NEAR_ID_MASK) << 32 | ci as u64),
        );
        sort_by_id(&mut sc.id_keys, &mut sc.id_keys_next);
        sc.candidates.clear();
        sc.candidates.extend(sc.id_keys.iter().map(|&ik| {
            let (key, slot) = near[ik as u32 as usize];
            let id = (key & NEAR_ID_MASK) as u32;
            let e = if slot & NEAR_AVATAR == 0 {
                let b = &ctx.entities.boids[slot as usize];
                ViewEntry::quantize(id, KIND_BOID, b.x_mm, b.y_mm, b.vx.into(), b.vy.into())
            } else {
                let av = &ctx.entities.avatars[(slot & !NEAR_AVATAR) as usize];
                ViewEntry::quantize(id, KIND_AVATAR, av.x_mm, av.y_mm, av.vx, av.vy)
            };
            (key >> NEAR_ID_BITS, e)
        }));

        // 2. Baseline: the acked snapshot if the ring still has it (and it is younger than
        // the ring, so its slot is not the one about to be written), else nothing.
        let new_slot = ring_slot(ctx.tick, interval);
        let age_max = BASELINE_RING_LEN as u32 * interval;
        let baseline_slot = (acked_tick != NO_TICK && ctx.tick - acked_tick < age_max)
            .then(|| ring_slot(acked_tick, interval))
            .filter(|&k| self.ring_tick[k] == acked_tick);
        // Snapshots older than the ack can never be a baseline again: forget them.
        if acked_tick != NO_TICK {
            for k in 0..BASELINE_RING_LEN {
                if self.ring_tick[k] != NO_TICK && self.ring_tick[k] < acked_tick {
                    self.forget(k);
                }
            }
        }
        debug_assert!(baseline_slot != Some(new_slot));
        // Claimed before the baseline's place is read: claiming may grow the arena.
        let new_start = region_start(self.claim_region(new_slot));
        let (base_start, base_len) = match baseline_slot {
            Some(k) => (region_start(self.ring_region[k]), self.ring_len[k] as usize),
            None => (0, 0),
        };

        // 3. Classify by merging interest, baseline and old priorities (all ascending).
        let r2_inverse = u64::MAX / r2;
        sc.sendable.clear();
        sc.removals.clear();
        sc.selected.clear();
        sc.selected.resize(sc.candidates.len(), false);
        sc.priority.clear();
        sc.priority.resize(sc.candidates.len(), 0);
        sc.base_index.clear();
        sc.base_index.resize(sc.candidates.len(), u32::MAX);
        {
            let base = &self.arena[base_start..base_start + base_len];
            let (mut bi, mut pi) = (0usize, 0usize);
            for (ci, &(d2, e)) in sc.candidates.iter().enumerate() {
                while bi < base.len() && base[bi].id < e.id {
                    sc.removals.push(base[bi].id);
                    bi += 1;
                }
                while pi < self.interest.len() && self.interest[pi].id < e.id {
                    pi += 1;
                }
                let old_priority = match self.interest.get(pi) {
                    Some(p) if p.id == e.id => p.priority,
                    _ => 0,
                };
                let in_base = bi < base.len() && base[bi].id == e.id;
                let unchanged = in_base && base[bi] == e;
                if in_base {
                    sc.base_index[ci] = bi as u32;
                    bi += 1;
                }
                if !unchanged {
                    let weight = if e.id == own_id {
                        OWN_AVATAR_WEIGHT
                    } else {
                        // weight = 1 + 15 * (r2 - d2) / r2 (candidates lie within r2), the
                        // quotient by reciprocal: a divide was 2% of the 1,000-client replay,
                        // and counting the multiples of r2 below it, as this did before, made
                        // the 1,000-client `synth` step 5% slower.
                        1 + quotient(15 * (r2 - d2), r2, r2_inverse) as u32
                    };
                    let priority = old_priority.saturating_add(weight);
                    sc.priority[ci] = priority;
                    sc.sendable.push(u64::from(!priority) << 32 | ci as u64);
                }
            }
            sc.removals.extend(base[bi..].iter().map(|b| b.id));
        }

        // 4. Budget: refill the bucket, then take removals (oldest ids first) and updates
        // (highest priority first) while their worst-case size still fits.
        self.tokens_bytes = (self.tokens_bytes + ctx.budget_avg_bytes).min(ctx.budget_cap_bytes);
        let budget_bytes = self.tokens_bytes as u64;
        let fixed_bits = codec::ue_bits(VIEW_ENTITIES_MAX as u32, 3) as u64 * 2;
        let avail_bits =
            (budget_bytes.saturating_sub(SNAPSHOT_HEADER_BYTES as u64) * 8).saturating_sub(fixed_bits);
        let mut used_bits = 0u64;
        sc.removed.clear();
        for &id in &sc.removals {
            let cost = codec::removal_bits_max(id) as u64;
            if used_bits + cost <= avail_bits {
                used_bits += cost;
                sc.removed.push(id);
            }
        }
        {
            let base = &self.arena[base_start..base_start + base_len];
            let dt_ticks = ctx.tick.wrapping_sub(acked_tick);
            sc.cost_bits.clear();
            sc.cost_bits.extend(sc.sendable.iter().map(|&key| {
                let ci = key as u32 as usize;
                let e = &sc.candidates[ci].1;
                let old = base.get(sc.base_index[ci] as usize);
                codec::update_bits_max(e.id, old, e, dt_ticks)
            }));
        }
        let sendable_bits: u64 = sc.cost_bits.iter().map(|&c| u64::from(c)).sum();
        if used_bits + sendable_bits <= avail_bits {
            // Everything fits: the greedy pass below would take every update in any order,
            // so the priority sort is skipped (the common case at the default budget).
            for &key in &sc.sendable {
                sc.selected[key as u32 as usize] = true;
            }
        } else {
            // Costs travel with their keys through the sort, in the low bits under the
            // candidate index: the order stays (priority, index), as it was without them.
            for (key, &cost) in sc.sendable.iter_mut().zip(&sc.cost_bits) {
                debug_assert!((*key as u32 as usize) < 1 << 12 && cost < 1 << 20);
                *key = (*key & !0xffff_ffff) | (*key & 0xfff) << 20 | u64::from(cost);
            }
            sc.sendable.sort_unstable();
            for &key in &sc.sendable {
                let ci = (key as u32 >> 20) as usize;
                let cost = key & 0xf_ffff;
                if used_bits + cost <= avail_bits {
                    used_bits += cost;
                    sc.selected[ci] = true;
                }
            }
        }

        // 5. Encode, ids ascending.
        sc.updates.clear();
        {
            let base = &self.arena[base_start..base_start + base_len];
            for (ci, &(_, e)) in sc.candidates.iter().enumerate() {
                if sc.selected[ci] {
                    let old = base.get(sc.base_index[ci] as usize).copied();
                    sc.updates.push((old, e));
                }
            }
        }
        let header = SnapshotHeader {
            tick: ctx.tick,
            baseline_tick: baseline_slot.map(|_| acked_tick),
            avatar_id: own_id,
            score,
        };
        #[cfg(feature = "planted-faults")]
        let skipped = self.plant_before_encoding(ctx, sc, acked_tick);
        let start = sc.bytes.len();
        #[allow(unused_variables)]
        let payload_bits = codec::append_snapshot(&mut sc.bytes, &header, &sc.removed, &sc.updates);
        #[cfg(feature = "planted-faults")]
        Self::plant_after_encoding(ctx, sc, skipped, payload_bits);
        let snapshot = &sc.bytes[start..];
        let len = snapshot.len();
        assert!(
            len as u64 <= budget_bytes,
            "snapshot of {len} bytes over its budget of {budget_bytes}"
        );
        self.tokens_bytes -= len as u32;
        self.snapshot_digest = *blake3::hash(snapshot).as_bytes();
        self.snapshot_at = SnapshotAt {
            shard: sc.shard,
            start: u32::try_from(start).expect("a shard's snapshots of one tick fit 4 GiB"),
            len: len as u32,
        };

        // 6. Remember what the client will hold after this snapshot: the baseline without the
        // removed ids, with the updates applied.
        let new_len = {
            let (base, new): (&[ViewEntry], &mut [ViewEntry]) = if base_len == 0 {
                (&[], &mut self.arena[new_start..new_start + VIEW_ENTITIES_MAX])
            } else if base_start < new_start {
                let (a, b) = self.arena.split_at_mut(new_start);
                (&a[base_start..base_start + base_len], &mut b[..VIEW_ENTITIES_MAX])
            } else {
                let (a, b) = self.arena.split_at_mut(base_start);
                (&b[..base_len], &mut a[new_start..new_start + VIEW_ENTITIES_MAX])
            };
            let (mut bi, mut ui, mut ri, mut n) = (0, 0, 0, 0);
            while bi < base.len() || ui < sc.updates.len() {
                let bid = base.get(bi).map_or(u32::MAX, |b| b.id);
                let uid = sc.updates.get(ui).map_or(u32::MAX, |u| u.1.id);
                if uid <= bid {
                    new[n] = sc.updates[ui].1;
                    n += 1;
                    ui += 1;
                    if uid == bid {
                        bi += 1;
                    }
                } else {
                    while ri < sc.removed.len() && sc.removed[ri] < bid {
                        ri += 1;
                    }
                    if sc.removed.get(ri) != Some(&bid) {
                        new[n] = base[bi];
                        n += 1;
                    }
                    bi += 1;
                }
            }
            n
        };
        self.ring_tick[new_slot] = ctx.tick;
        self.ring_len[new_slot] = new_len as u16;
        self.ring_view_digest[new_slot] = xxh3_128(view_bytes(&self.arena[new_start..new_start + new_len]));

        // 7. Priorities: what was sent or did not change starts again from zero.
        sc.interest.clear();
        for (ci, &(_, e)) in sc.candidates.iter().enumerate() {
            let priority = if sc.selected[ci] { 0 } else { sc.priority[ci] };
            sc.interest.push(Interest { id: e.id, priority });
        }
        std::mem::swap(&mut self.interest, &mut sc.interest);
        self.refresh_digest();
        self.settle_arena();
    }
}

#[cfg(feature = "planted-faults")]
impl ClientStream {
    /// The planted `stale-baseline` fault: against a baseline older than four snapshots,
    /// the first update of an entity the client holds is left out of the encoding.
    fn plant_before_encoding(
        &mut self,
        ctx: &SnapshotContext<'_>,
        sc: &mut SnapshotScratch,
        acked_tick: u32,
    ) -> Option<(usize, (Option<ViewEntry>, ViewEntry))> {
        if ctx.planted != Some(crate::planted::PlantedFault::StaleBaseline)
            || acked_tick == NO_TICK
            || ctx.tick - acked_tick <= 4 * ctx.snapshot_interval_ticks
        {
            return None;
        }
        let k = sc.updates.iter().position(|(old, _)| old.is_some())?;
        Some((k, sc.updates.remove(k)))
    }

    /// `stale-baseline`: the left-out update is remembered as sent all the same.
    /// `stale-scratch`: the padding bits of the last byte come from the shard's scratch.
    fn plant_after_encoding(
        ctx: &SnapshotContext<'_>,
        sc: &mut SnapshotScratch,
        skipped: Option<(usize, (Option<ViewEntry>, ViewEntry))>,
        payload_bits: u64,
    ) {
        if let Some((k, update)) = skipped {
            sc.updates.insert(k, update);
        }
        if ctx.planted == Some(crate::planted::PlantedFault::StaleScratch) {
            let pad_bits = ((8 - payload_bits % 8) % 8) as u32;
            // The snapshot just appended ends the shard's bytes.
            if let Some(last) = sc.bytes.last_mut() {
                if pad_bits > 0 {
                    *last |= sc.stale_byte & (0xffu8 << (8 - pad_bits));
                }
                sc.stale_byte = *last;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of `len` entries with ids from `first_id` on (also the digest's tests').
    pub(super) fn view(first_id: u32, len: u32) -> Vec<ViewEntry> {
        (first_id..first_id + len)
            .map(|id| ViewEntry {
                id,
                qx: id as u16,
                ..ViewEntry::default()
            })
            .collect()
    }

    /// The quotient by reciprocal is the quotient: at and around every multiple of the
    /// divisor, for divisors from 1 to the largest squared view radius.
    #[test]
    fn the_quotient_by_reciprocal_is_exact() {
        let r2_max = (1u64 << (64 - super::NEAR_ID_BITS)) - 1;
        let divisors = [
            1u64,
            2,
            3,
            7,
            1 << 20,
            2_500_000_000,
            (1 << 40) + 1,
            r2_max / 16,
            r2_max,
        ];
        for d in divisors {
            let inverse = u64::MAX / d;
            for q in [0u64, 1, 2, 14, 15, 16, 1_000_003] {
                let m = q.saturating_mul(d);
                for v in [
                    m,
                    m.saturating_sub(1),
                    m.saturating_add(1),
                    m.saturating_add(d - 1),
                ] {
                    if v < 1 << 63 {
                        assert_eq!(quotient(v, d, inverse), v / d, "{v} / {d}");
                    }
                }
            }
        }
        // Every numerator the weight takes, for a 50 m view radius.
        let r2 = 50_000u64 * 50_000;
        for d2 in (0..r2).step_by(9_973).chain(r2 - 100..r2) {
            let v = 15 * (r2 - d2);
            assert_eq!(quotient(v, r2, u64::MAX / r2), v / r2, "d2 {d2}");
        }
    }

    /// A live view in a region past the shrunk size moves down whole, into a new
    /// allocation of the shrunk size. Builds never leave
    /// one there (they claim the lowest free region, and the window outlasts the ring),
    /// so this drives the move directly.
    #[test]
    fn a_shrink_moves_a_live_view_down_whole() {
        let interval = 3;
        let mut s = ClientStream::new(1_600);
        for (tick, first_id) in [(3, 100), (6, 200), (9, 300)] {
            assert!(s.remember(tick, interval, &view(first_id, 50)));
        }
        assert_eq!(s.arena_regions(), 4);
        s.forget(ring_slot(3, interval));
        s.forget(ring_slot(6, interval));
        let grown = s.arena.as_ptr();
        s.shrink_arena(2);
        assert_eq!(s.arena_regions(), 2);
        assert_eq!(s.arena.capacity(), 2 * VIEW_ENTITIES_MAX);
        // A new allocation, not the grown one shrunk in place (see `shrink_arena`).
        assert_ne!(s.arena.as_ptr(), grown);
        assert_eq!(s.view(9, interval), Some(&view(300, 50)[..]));
        assert_eq!(s.view(6, interval), None);
    }
}
