//! Compact checkpoints: the state of a raw checkpoint laid out for storage, an eighth of the
//! bytes after zstd.
//!
//! A raw checkpoint (format version 2) is what the tick thread writes fastest: the client
//! streams' remembered views as they lie in memory. Those views are most of it, and they
//! repeat themselves. A 1,000-client synthetic session checkpointed at tick 1,200 holds
//! 473,391 view entries but only 21,053 distinct (tick, entity) states, because clients in
//! a crowd see the same entities at the same ticks. A stream's views differ from one
//! another by a few entities (over all 3,734 views, 2,477 ids dropped and 2,483 added), and
//! a stream's newest view holds exactly its interest list (999 of 1,000 streams). zstd at level 3
//! makes 1,054,869 bytes of that raw checkpoint, and 130,933 of the compact one.
//!
//! The compact layout (format version 3) keeps each (tick, entity) state once, predicted
//! from the same entity at a newer tick, and each view as the ids it drops from and adds
//! to the next newer view. Restoring one gives the same world, whose raw checkpoint is the
//! raw checkpoint it was made from, byte for byte.
//!
//! Its payload is an rkyv archive of [`CompactState`]: the raw state's config, terrain hash,
//! tick, boids and players as they are, and in `packed` these byte streams, of LEB128
//! varints unless said otherwise. A "gap list" is ascending numbers, each stored as its distance from the one
//! before (the first from 0).
//!
//! | field                 | contents                                                          |
//! |-----------------------|-------------------------------------------------------------------|
//! | `streams`             | per stream: slot, token bucket bytes, view count, each view's age (checkpoint tick minus view tick, oldest view first), interest length |
//! | `interest_ids`        | per stream, its interest ids as a gap list                        |
//! | `interest_priorities` | per stream, its interest priorities                               |
//! | `view_ids`            | per stream, per view newest first: how many ids of the next newer view (of the interest list for the newest) it lacks, their positions there as a gap list, how many ids it adds, those ids as a gap list |
//! | `entity_ids`          | per distinct view tick, newest first: how many entities views hold at that tick, their ids as a gap list |
//! | `entity_positions`    | per (tick, entity) in that order: qx, then qy, minus the prediction (wrapping 16-bit), zigzag |
//! | `entity_velocities`   | per (tick, entity): qvx, then qvy, minus the prediction, one wrapping byte each |
//! | `entity_kinds`        | per (tick, entity): the kind, one byte                            |
//! | `exceptions`          | a count, then per view entry unlike its (tick, entity) state: stream index, view index (oldest first), position, then the entry's 12 bytes |
//!
//! The prediction of an entity's state at a tick is its state at the nearest newer tick
//! that holds it, or else its state in the world at the checkpoint's tick, moved back by
//! its quantized velocity over the ticks between. Exceptions are rare: an avatar seen at
//! one tick by two clients in two states (23 of 473,391 entries above).

use super::{corrupted, from_planes, CheckpointError, CheckpointState, RememberedView, StreamState};
use crate::config::WorldConfig;
use crate::player::Player;
use crate::snapshot::stream::{Interest, BASELINE_RING_LEN};
use crate::snapshot::view::{KIND_AVATAR, KIND_BOID, POS_QUANT_SHIFT, VEL_QUANT_SHIFT};
use crate::snapshot::{ViewEntry, VIEW_ENTITIES_MAX};

/// The most (distinct view tick, entity) cells the table of states may span: a live world
/// spans about 20 ticks of 6,000 entities; this bounds what damaged input can make either
/// side allocate (64 MB).
const TABLE_CELLS_MAX: usize = 1 << 24;

/// Bytes of one view entry in `exceptions` (`ViewEntry::to_le_bytes`).
const ENTRY_BYTES: usize = 12;

/// What a compact checkpoint archives (layout in the module doc).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(super) struct CompactState {
    config: WorldConfig,
    terrain_hash: [u8; 32],
    tick: u32,
    boid_planes: Vec<u8>,
    players: Vec<Player>,
    packed: Packed,
}

/// The packed byte streams of a compact checkpoint (layout in the module doc).
#[derive(Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Packed {
    streams: Vec<u8>,
    interest_ids: Vec<u8>,
    interest_priorities: Vec<u8>,
    view_ids: Vec<u8>,
    entity_ids: Vec<u8>,
    entity_positions: Vec<u8>,
    entity_velocities: Vec<u8>,
    entity_kinds: Vec<u8>,
    exceptions: Vec<u8>,
}

/// The world's own entities at the checkpoint's tick: the prediction of last resort.
struct WorldAtTick<'a> {
    tick: u32,
    boid_count: u32,
    boids: Vec<crate::boids::Boid>,
    players: &'a [Player],
}

impl<'a> WorldAtTick<'a> {
    /// The entities of a state's parts (either form has the same ones); its boid planes
    /// must hold the config's boids.
    fn of(
        cfg: &WorldConfig,
        tick: u32,
        boid_planes: &[u8],
        players: &'a [Player],
    ) -> Result<WorldAtTick<'a>, CheckpointError> {
        if boid_planes.len() != cfg.boid_count as usize * crate::boids::BOID_RECORD_BYTES {
            return Err(corrupted(format!(
                "{} bytes of boids for {} boids",
                boid_planes.len(),
                cfg.boid_count
            )));
        }
        Ok(WorldAtTick {
            tick,
            boid_count: cfg.boid_count,
            boids: from_planes(boid_planes),
            players,
        })
    }

    /// Entity `id` as a view would have held it at the checkpoint's tick (any id: one that
    /// names nothing predicts zeros).
    fn entry(&self, id: u32) -> ViewEntry {
        let q = |id, kind, x: i32, y: i32, vx: i32, vy: i32| ViewEntry {
            id,
            qx: (x >> POS_QUANT_SHIFT) as u16,
            qy: (y >> POS_QUANT_SHIFT) as u16,
            qvx: (vx >> VEL_QUANT_SHIFT).clamp(i8::MIN as i32, i8::MAX as i32) as i8,
            qvy: (vy >> VEL_QUANT_SHIFT).clamp(i8::MIN as i32, i8::MAX as i32) as i8,
            kind,
            pad: 0,
        };
        if let Some(b) = self.boids.get(id as usize) {
            return q(id, KIND_BOID, b.x_mm, b.y_mm, b.vx as i32, b.vy as i32);
        }
        match self.players.get(id.wrapping_sub(self.boid_count) as usize) {
            Some(p) => q(id, KIND_AVATAR, p.x_mm, p.y_mm, p.vx, p.vy),
            None => ViewEntry {
                id,
                ..ViewEntry::default()
            },
        }
    }
}

/// The state predicted for an entity at tick `tick`: `newer` (its state at a newer tick,
/// when one is known) or the world's, moved back by its velocity over the ticks between.
fn predict(world: &WorldAtTick<'_>, id: u32, tick: u32, newer: Option<(u32, ViewEntry)>) -> ViewEntry {
    let (newer_tick, base) = newer.unwrap_or_else(|| (world.tick, world.entry(id)));
    let ticks = i64::from(newer_tick.wrapping_sub(tick));
    let back = |q: u16, qv: i8| {
        let moved_mm = (i64::from(qv) << VEL_QUANT_SHIFT) * ticks;
        (i64::from(q) - (moved_mm >> POS_QUANT_SHIFT)) as u16
    };
    ViewEntry {
        qx: back(base.qx, base.qvx),
        qy: back(base.qy, base.qvy),
        ..base
    }
}

/// The raw state's views and interest lists, packed (see the module doc).
pub(super) fn compact(state: CheckpointState) -> Result<CompactState, CheckpointError> {
    let cfg = &state.config;
    let entity_count = entity_count(cfg);
    let world = WorldAtTick::of(cfg, state.tick, &state.boid_planes, &state.players)?;
    let mut view_ticks = Vec::new();
    for v in state.streams.iter().flat_map(|s| &s.views) {
        if v.tick > state.tick {
            return Err(corrupted(format!(
                "a view of tick {} is newer than the checkpoint's tick {}",
                v.tick, state.tick
            )));
        }
        view_ticks.push(v.tick);
    }
    let ticks = newest_first(view_ticks);
    // Cell (k, id) holds 1 + the index in `states` of the entity's state at ticks[k], 0
    // while no view has shown it.
    let mut table = table_for(ticks.len(), entity_count)?;
    let mut states: Vec<ViewEntry> = Vec::new();
    let mut out = Packed::default();
    let mut exceptions = Vec::new();
    let mut exception_count = 0u32;
    for (stream_index, s) in state.streams.iter().enumerate() {
        put(&mut out.streams, s.slot);
        put(&mut out.streams, s.tokens_bytes);
        put(&mut out.streams, s.views.len() as u32);
        for v in &s.views {
            put(&mut out.streams, state.tick - v.tick);
        }
        put(&mut out.streams, s.interest.len() as u32);
        let interest: Vec<u32> = s.interest.iter().map(|i| i.id).collect();
        put_gaps(&mut out.interest_ids, &interest)?;
        for i in &s.interest {
            put(&mut out.interest_priorities, i.priority);
        }
        let mut newer_ids = interest;
        for v in s.views.iter().rev() {
            let ids: Vec<u32> = v.entries.iter().map(|e| e.id).collect();
            if !ids.windows(2).all(|w| w[0] < w[1]) {
                return Err(corrupted(format!("slot {}: a view's ids do not ascend", s.slot)));
            }
            put_view_ids(&mut out.view_ids, &newer_ids, &ids)?;
            newer_ids = ids;
        }
        for (view_index, v) in s.views.iter().enumerate() {
            let row = tick_index(&ticks, v.tick) * entity_count;
            for (position, e) in v.entries.iter().enumerate() {
                if e.id as usize >= entity_count || e.pad != 0 {
                    return Err(corrupted(format!(
                        "slot {}: a view holds entity {}",
                        s.slot, e.id
                    )));
                }
                let cell = &mut table[row + e.id as usize];
                if *cell == 0 {
                    states.push(*e);
                    *cell = states.len() as u32;
                } else if states[*cell as usize - 1] != *e {
                    exception_count += 1;
                    put(&mut exceptions, stream_index as u32);
                    put(&mut exceptions, view_index as u32);
                    put(&mut exceptions, position as u32);
                    exceptions.extend_from_slice(&e.to_le_bytes());
                }
            }
        }
    }
    put(&mut out.exceptions, exception_count);
    out.exceptions.extend_from_slice(&exceptions);
    // The table, newest tick first, each state against its prediction.
    let mut newest_known: Vec<Option<(u32, ViewEntry)>> = vec![None; entity_count];
    for (k, &tick) in ticks.iter().enumerate() {
        let row = &table[k * entity_count..(k + 1) * entity_count];
        let ids: Vec<u32> = (0..entity_count as u32)
            .filter(|&id| row[id as usize] != 0)
            .collect();
        put(&mut out.entity_ids, ids.len() as u32);
        put_gaps(&mut out.entity_ids, &ids)?;
        for id in ids {
            let e = states[row[id as usize] as usize - 1];
            let p = predict(&world, id, tick, newest_known[id as usize]);
            put_zigzag(&mut out.entity_positions, e.qx.wrapping_sub(p.qx) as i16);
            put_zigzag(&mut out.entity_positions, e.qy.wrapping_sub(p.qy) as i16);
            out.entity_velocities
                .push((e.qvx as u8).wrapping_sub(p.qvx as u8));
            out.entity_velocities
                .push((e.qvy as u8).wrapping_sub(p.qvy as u8));
            out.entity_kinds.push(e.kind);
            newest_known[id as usize] = Some((tick, e));
        }
    }
    Ok(CompactState {
        config: state.config,
        terrain_hash: state.terrain_hash,
        tick: state.tick,
        boid_planes: state.boid_planes,
        players: state.players,
        packed: out,
    })
}

/// The raw state again, exactly as it was compacted. Anything inconsistent is `Corrupted`;
/// what is left unchecked here (token bucket, slots, players) `build` checks for both forms.
pub(super) fn expand(c: CompactState) -> Result<CheckpointState, CheckpointError> {
    let p = &c.packed;
    let cfg = &c.config;
    let entity_count = entity_count(cfg);
    let world = WorldAtTick::of(cfg, c.tick, &c.boid_planes, &c.players)?;
    // Streams' shapes first: they name the view ticks the table covers.
    struct Shape {
        slot: u32,
        tokens_bytes: u32,
        view_ticks: Vec<u32>,
        interest_len: usize,
    }
    let mut shapes = Vec::new();
    let mut r = Reader::new(&p.streams, "streams");
    while !r.is_empty() {
        if shapes.len() >= cfg.client_slots_max as usize {
            return Err(corrupted("more streams than client slots"));
        }
        let slot = r.u32()?;
        let tokens_bytes = r.u32()?;
        let view_count = r.count(BASELINE_RING_LEN)?;
        let view_ticks = (0..view_count)
            .map(|_| {
                let age = r.u32()?;
                c.tick
                    .checked_sub(age)
                    .ok_or_else(|| corrupted(format!("a view {age} ticks older than tick {}", c.tick)))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let interest_len = r.count(VIEW_ENTITIES_MAX)?;
        shapes.push(Shape {
            slot,
            tokens_bytes,
            view_ticks,
            interest_len,
        });
    }
    let ticks = newest_first(shapes.iter().flat_map(|s| s.view_ticks.iter().copied()).collect());
    let mut table = table_for(ticks.len(), entity_count)?;
    let mut states: Vec<ViewEntry> = Vec::new();
    let mut newest_known: Vec<Option<(u32, ViewEntry)>> = vec![None; entity_count];
    let mut ids_r = Reader::new(&p.entity_ids, "entity_ids");
    let mut positions = Reader::new(&p.entity_positions, "entity_positions");
    let mut velocities = Reader::new(&p.entity_velocities, "entity_velocities");
    let mut kinds = Reader::new(&p.entity_kinds, "entity_kinds");
    for (k, &tick) in ticks.iter().enumerate() {
        let n = ids_r.count(entity_count)?;
        for id in ids_r.gaps(n)? {
            if id as usize >= entity_count {
                return Err(corrupted(format!(
                    "entity {id} at tick {tick} is not in the world"
                )));
            }
            let p = predict(&world, id, tick, newest_known[id as usize]);
            let e = ViewEntry {
                id,
                qx: p.qx.wrapping_add(positions.zigzag()? as u16),
                qy: p.qy.wrapping_add(positions.zigzag()? as u16),
                qvx: (p.qvx as u8).wrapping_add(velocities.byte()?) as i8,
                qvy: (p.qvy as u8).wrapping_add(velocities.byte()?) as i8,
                kind: kinds.byte()?,
                pad: 0,
            };
            states.push(e);
            table[k * entity_count + id as usize] = states.len() as u32;
            newest_known[id as usize] = Some((tick, e));
        }
    }
    for r in [&ids_r, &positions, &velocities, &kinds] {
        r.finished()?;
    }
    let mut interest_ids = Reader::new(&p.interest_ids, "interest_ids");
    let mut priorities = Reader::new(&p.interest_priorities, "interest_priorities");
    let mut view_ids = Reader::new(&p.view_ids, "view_ids");
    let mut streams = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let ids = interest_ids.gaps(shape.interest_len)?;
        let interest = ids
            .iter()
            .map(|&id| {
                Ok(Interest {
                    id,
                    priority: priorities.u32()?,
                })
            })
            .collect::<Result<Vec<Interest>, CheckpointError>>()?;
        let mut views = Vec::with_capacity(shape.view_ticks.len());
        let mut newer_ids = ids;
        for &tick in shape.view_ticks.iter().rev() {
            let ids = take_view_ids(&mut view_ids, &newer_ids)?;
            let row = tick_index(&ticks, tick) * entity_count;
            let entries = ids
                .iter()
                .map(|&id| match table.get(row + id as usize) {
                    Some(&cell) if cell != 0 && (id as usize) < entity_count => Ok(states[cell as usize - 1]),
                    _ => Err(corrupted(format!(
                        "a view of tick {tick} holds entity {id}, the table does not"
                    ))),
                })
                .collect::<Result<Vec<ViewEntry>, CheckpointError>>()?;
            views.push(RememberedView { tick, entries });
            newer_ids = ids;
        }
        views.reverse();
        streams.push(StreamState {
            slot: shape.slot,
            tokens_bytes: shape.tokens_bytes,
            views,
            interest,
        });
    }
    for r in [&interest_ids, &priorities, &view_ids] {
        r.finished()?;
    }
    apply_exceptions(&p.exceptions, &mut streams)?;
    Ok(CheckpointState {
        config: c.config,
        terrain_hash: c.terrain_hash,
        tick: c.tick,
        boid_planes: c.boid_planes,
        players: c.players,
        streams,
    })
}

/// Puts back the view entries that differ from their (tick, entity) state.
fn apply_exceptions(bytes: &[u8], streams: &mut [StreamState]) -> Result<(), CheckpointError> {
    let mut r = Reader::new(bytes, "exceptions");
    let count = r.count(bytes.len())?;
    for _ in 0..count {
        let (stream_index, view_index, position) = (r.u32()?, r.u32()?, r.u32()?);
        let e = entry_from_le_bytes(r.bytes(ENTRY_BYTES)?);
        let slot = streams
            .get_mut(stream_index as usize)
            .and_then(|s| s.views.get_mut(view_index as usize))
            .and_then(|v| v.entries.get_mut(position as usize))
            .filter(|slot| slot.id == e.id && e.pad == 0)
            .ok_or_else(|| {
                corrupted(format!(
                    "exception {stream_index}/{view_index}/{position} names no entry"
                ))
            })?;
        *slot = e;
    }
    r.finished()
}

/// Entities a view may hold: boids, then one avatar per client slot.
fn entity_count(cfg: &WorldConfig) -> usize {
    cfg.boid_count as usize + cfg.client_slots_max as usize
}

/// Distinct ticks, newest first.
fn newest_first(mut ticks: Vec<u32>) -> Vec<u32> {
    ticks.sort_unstable_by(|a, b| b.cmp(a));
    ticks.dedup();
    ticks
}

/// Where `tick` is in `ticks` (newest first; it is there by construction).
fn tick_index(ticks: &[u32], tick: u32) -> usize {
    ticks.binary_search_by(|t| tick.cmp(t)).unwrap_or(0)
}

fn table_for(tick_count: usize, entity_count: usize) -> Result<Vec<u32>, CheckpointError> {
    match tick_count.checked_mul(entity_count) {
        Some(cells) if cells <= TABLE_CELLS_MAX => Ok(vec![0; cells]),
        _ => Err(corrupted(format!(
            "views at {tick_count} ticks of {entity_count} entities are more than a checkpoint holds"
        ))),
    }
}

/// A view's ids against the next newer view's (see `view_ids` in the module doc), in one
/// merge of the two ascending lists.
fn put_view_ids(out: &mut Vec<u8>, newer: &[u32], ids: &[u32]) -> Result<(), CheckpointError> {
    let (mut lacks, mut adds) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < newer.len() || j < ids.len() {
        match (newer.get(i), ids.get(j)) {
            (Some(a), Some(b)) if a == b => (i, j) = (i + 1, j + 1),
            (Some(a), b) if b.is_none_or(|b| a < b) => {
                lacks.push(i as u32);
                i += 1;
            }
            (_, b) => {
                adds.extend(b.copied());
                j += 1;
            }
        }
    }
    put(out, lacks.len() as u32);
    put_gaps(out, &lacks)?;
    put(out, adds.len() as u32);
    put_gaps(out, &adds)
}

/// The inverse of `put_view_ids`: the view's ids, ascending.
fn take_view_ids(r: &mut Reader<'_>, newer: &[u32]) -> Result<Vec<u32>, CheckpointError> {
    let lack_count = r.count(newer.len())?;
    let lacks = r.gaps(lack_count)?;
    if lacks.last().is_some_and(|&i| i as usize >= newer.len()) {
        return Err(corrupted("a view lacks an id past the end of the newer view"));
    }
    let add_count = r.count(VIEW_ENTITIES_MAX)?;
    let adds = r.gaps(add_count)?;
    let mut lacks = lacks.iter().peekable();
    let kept = newer.iter().enumerate().filter_map(|(i, &id)| {
        if lacks.peek().is_some_and(|&&l| l as usize == i) {
            lacks.next();
            None
        } else {
            Some(id)
        }
    });
    let mut ids: Vec<u32> = kept.chain(adds).collect();
    ids.sort_unstable();
    if ids.len() > VIEW_ENTITIES_MAX || ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(corrupted("a view adds an id it already holds, or holds too many"));
    }
    Ok(ids)
}

fn entry_from_le_bytes(b: &[u8]) -> ViewEntry {
    ViewEntry {
        id: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        qx: u16::from_le_bytes([b[4], b[5]]),
        qy: u16::from_le_bytes([b[6], b[7]]),
        qvx: b[8] as i8,
        qvy: b[9] as i8,
        kind: b[10],
        pad: b[11],
    }
}

fn put(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_zigzag(out: &mut Vec<u8>, v: i16) {
    put(out, ((v << 1) ^ (v >> 15)) as u16 as u32);
}

/// Strictly ascending numbers as a gap list.
fn put_gaps(out: &mut Vec<u8>, ascending: &[u32]) -> Result<(), CheckpointError> {
    let mut before = None;
    for &v in ascending {
        match before {
            Some(b) if v <= b => return Err(corrupted("ids are not ascending")),
            _ => put(out, v - before.unwrap_or(0)),
        }
        before = Some(v);
    }
    Ok(())
}

/// Reads one packed byte stream of a compact checkpoint; every misstep is `Corrupted`,
/// naming the stream.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    name: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], name: &'static str) -> Reader<'a> {
        Reader { bytes, at: 0, name }
    }

    fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn short(&self) -> CheckpointError {
        corrupted(format!(
            "{} ends early or holds a bad number at byte {}",
            self.name, self.at
        ))
    }

    fn finished(&self) -> Result<(), CheckpointError> {
        match self.is_empty() {
            true => Ok(()),
            false => Err(corrupted(format!(
                "{} has bytes left over at byte {}",
                self.name, self.at
            ))),
        }
    }

    fn byte(&mut self) -> Result<u8, CheckpointError> {
        let b = *self.bytes.get(self.at).ok_or_else(|| self.short())?;
        self.at += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], CheckpointError> {
        let b = self.bytes.get(self.at..self.at + n).ok_or_else(|| self.short())?;
        self.at += n;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, CheckpointError> {
        let mut v = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return u32::try_from(v).map_err(|_| self.short());
            }
        }
        Err(self.short())
    }

    /// A count that may not pass `max`.
    fn count(&mut self, max: usize) -> Result<usize, CheckpointError> {
        let n = self.u32()? as usize;
        match n <= max {
            true => Ok(n),
            false => Err(corrupted(format!(
                "{} holds a count of {n}, more than {max}",
                self.name
            ))),
        }
    }

    fn zigzag(&mut self) -> Result<i16, CheckpointError> {
        let v = u16::try_from(self.u32()?).map_err(|_| self.short())?;
        Ok((v >> 1) as i16 ^ -((v & 1) as i16))
    }

    /// `n` strictly ascending numbers stored as a gap list.
    fn gaps(&mut self, n: usize) -> Result<Vec<u32>, CheckpointError> {
        let mut out = Vec::with_capacity(n.min(self.bytes.len()));
        let mut before: Option<u32> = None;
        for _ in 0..n {
            let gap = self.u32()?;
            let v = match before {
                None => gap,
                Some(b) if gap > 0 => b.checked_add(gap).ok_or_else(|| self.short())?,
                Some(_) => return Err(corrupted(format!("{} holds ids that do not ascend", self.name))),
            };
            out.push(v);
            before = Some(v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzags_round_trip_at_their_edges() {
        let mut out = Vec::new();
        let numbers = [0, 1, 127, 128, 16_383, 16_384, u32::MAX];
        for v in numbers {
            put(&mut out, v);
        }
        let signed = [0i16, 1, -1, 63, -64, i16::MAX, i16::MIN];
        for v in signed {
            put_zigzag(&mut out, v);
        }
        let mut r = Reader::new(&out, "test");
        for v in numbers {
            assert_eq!(r.u32().unwrap(), v);
        }
        for v in signed {
            assert_eq!(r.zigzag().unwrap(), v);
        }
        assert!(r.finished().is_ok());
        // Six continuation bytes, and a number past u32, are errors, not wraps.
        assert!(Reader::new(&[0x80; 6], "test").u32().is_err());
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x7f], "test")
            .u32()
            .is_err());
    }

    /// A scripted world's raw state after `ticks` ticks, with every stream's views.
    fn crowded_state(ticks: u32) -> CheckpointState {
        let mut world = crate::World::new(crate::testkit::small_config(7, 300), 1).unwrap();
        let mut script = crate::Script::new(crate::ScriptConfig {
            seed: 7,
            clients: 8,
            join_spread_ticks: 10,
            ..crate::ScriptConfig::default()
        });
        let mut inputs = crate::TickInputs::default();
        let mut last = world.output().clone();
        for _ in 0..ticks {
            script.next_inputs(&world, &last, &mut inputs);
            last.clone_from(world.step(&inputs));
        }
        super::super::decode(&crate::save_checkpoint(&world), super::super::SameRules::Required).unwrap()
    }

    /// `state` with stream 0's oldest view copied into stream 1 with two entries changed:
    /// one entity at one tick in two states, which the table cannot hold (as when two
    /// clients see one avatar in two states in one tick).
    fn with_two_exceptions(mut state: CheckpointState) -> CheckpointState {
        let v = &state.streams[0].views[0];
        let mut copied = RememberedView {
            tick: v.tick,
            entries: v.entries.clone(),
        };
        copied.entries[3].qx ^= 0x155;
        copied.entries[4].qvy = -copied.entries[4].qvy - 1;
        state.streams[1].views.insert(0, copied);
        state
    }

    #[test]
    fn a_state_packs_and_unpacks_to_itself_exceptions_and_all() {
        let state = crowded_state(150);
        assert!(state.streams.len() >= 6 && state.streams.iter().all(|s| s.views.len() >= 2));
        for (state, exceptions) in [(state, 0), (with_two_exceptions(crowded_state(150)), 2)] {
            let packed = compact(state_clone(&state)).unwrap();
            assert_eq!(
                Reader::new(&packed.packed.exceptions, "test").u32().unwrap(),
                exceptions
            );
            assert_eq!(expand(packed).unwrap(), state);
        }
    }

    #[test]
    fn views_newer_than_the_checkpoint_or_out_of_order_are_refused() {
        let mut state = crowded_state(60);
        state.streams[0].views[0].tick = state.tick + 1;
        assert!(matches!(compact(state), Err(CheckpointError::Corrupted { .. })));
        let mut state = crowded_state(60);
        state.streams[0].views[0].entries.swap(0, 1);
        assert!(matches!(compact(state), Err(CheckpointError::Corrupted { .. })));
    }

    fn state_clone(s: &CheckpointState) -> CheckpointState {
        CheckpointState {
            config: s.config.clone(),
            terrain_hash: s.terrain_hash,
            tick: s.tick,
            boid_planes: s.boid_planes.clone(),
            players: s.players.clone(),
            streams: s
                .streams
                .iter()
                .map(|t| StreamState {
                    slot: t.slot,
                    tokens_bytes: t.tokens_bytes,
                    views: t
                        .views
                        .iter()
                        .map(|v| RememberedView {
                            tick: v.tick,
                            entries: v.entries.clone(),
                        })
                        .collect(),
                    interest: t.interest.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn view_ids_round_trip_against_the_newer_view() {
        let newer = [3, 5, 9, 12, 40];
        for ids in [vec![], vec![3, 5, 9, 12, 40], vec![1, 5, 12, 41, 50], vec![2]] {
            let mut out = Vec::new();
            put_view_ids(&mut out, &newer, &ids).unwrap();
            let mut r = Reader::new(&out, "test");
            assert_eq!(take_view_ids(&mut r, &newer).unwrap(), ids);
            assert!(r.finished().is_ok());
        }
        // Adding an id the view keeps from the newer one is damage.
        let mut out = Vec::new();
        put_view_ids(&mut out, &newer, &[3, 5, 9, 12, 40]).unwrap();
        out.truncate(1);
        out.extend([1, 5]);
        assert!(take_view_ids(&mut Reader::new(&out, "test"), &newer).is_err());
    }
}
