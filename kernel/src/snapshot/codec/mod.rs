//! Wire encoding of per-client view snapshots (snapshot format version 1): bit-level
//! writer and reader, exp-Golomb codes, exact cost functions for the server-side
//! selector, and the decoder that applies a snapshot to its baseline view.
//!
//! The format is specified bit by bit in `kernel/SNAPSHOT_FORMAT.md`; this file is the
//! reference implementation of that document, and the two must change together.

use crate::snapshot::ViewEntry;

mod bits;
use bits::ue_code;
pub use bits::{BitReader, BitWriter};

/// Snapshot format version written in byte 0 of every snapshot.
pub const SNAPSHOT_FORMAT_VERSION: u8 = 1;
/// Size of the byte-aligned header that precedes the bit stream.
pub const SNAPSHOT_HEADER_BYTES: usize = header_layout::BYTES;
/// Value of the header's baseline tick field meaning "no baseline" (full snapshot).
pub const NO_BASELINE: u32 = u32::MAX;

/// The byte-aligned snapshot header (`SNAPSHOT_FORMAT.md`, "Header"), every field
/// little-endian; the bit stream starts at `BYTES`. The page's `layout.js` carries these
/// offsets, generated from here.
///
/// | offset | size | field                                                  |
/// |--------|------|--------------------------------------------------------|
/// | 0      | 1    | format version (`SNAPSHOT_FORMAT_VERSION`)             |
/// | 1      | 4    | tick                                                   |
/// | 5      | 4    | baseline tick (`NO_BASELINE`: a full snapshot)         |
/// | 9      | 4    | the receiving client's avatar id                       |
/// | 13     | 4    | the receiving client's score                           |
pub mod header_layout {
    pub const VERSION: usize = 0;
    pub const TICK: usize = 1;
    pub const BASELINE_TICK: usize = 5;
    pub const AVATAR_ID: usize = 9;
    pub const SCORE: usize = 13;
    pub const BYTES: usize = 17;
    // The fields tile the header: each starts where the one before ends.
    const _: () = assert!(VERSION + 1 == TICK && TICK + 4 == BASELINE_TICK);
    const _: () = assert!(BASELINE_TICK + 4 == AVATAR_ID && AVATAR_ID + 4 == SCORE && SCORE + 4 == BYTES);
}

/// Whether `snapshot` is a full one (no baseline: it decodes against the empty view),
/// read from its header alone. False for bytes too short to hold the field.
pub fn snapshot_is_full(snapshot: &[u8]) -> bool {
    read_u32_le(snapshot, header_layout::BASELINE_TICK) == Ok(NO_BASELINE)
}
/// Largest removed count and largest update count a snapshot may carry. The decoder
/// rejects larger counts before looping, so garbage input cannot make it spin.
pub const SNAPSHOT_ENTRIES_MAX: usize = 4096;
/// Largest exp-Golomb order the codes support; larger orders are treated as this one.
/// The format itself only uses orders 0, 1, 3 and 4.
pub const EG_ORDER_MAX: u32 = 31;

/// Exp-Golomb order of the removed count and of the update count.
const COUNT_K: u32 = 3;
/// Exp-Golomb order of the id gaps.
const ID_GAP_K: u32 = 4;
/// Exp-Golomb order of the position residuals (qx, qy against the prediction).
const POS_DELTA_K: u32 = 1;
/// Exp-Golomb order of the velocity deltas (qvx, qvy).
const VEL_DELTA_K: u32 = 0;
/// Bits of a new entry's payload after the `is_new` bit: kind, qx, qy, qvx, qvy.
const NEW_PAYLOAD_BITS: u32 = 2 + 16 + 16 + 8 + 8;
/// Largest tick interval [`predict`] extrapolates over; longer intervals are treated as
/// this one, which keeps the prediction within 4096 position units of the baseline.
pub const PREDICTION_DT_MAX: u32 = 1024;

/// Everything in the byte-aligned snapshot header except the version byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Server tick this view belongs to.
    pub tick: u32,
    /// Tick of the view this snapshot is a delta against; `None` means a full snapshot
    /// applied to the empty view. `Some(NO_BASELINE)` cannot be represented.
    pub baseline_tick: Option<u32>,
    /// Entity id of the receiving client's own avatar.
    pub avatar_id: u32,
    /// The receiving client's score.
    pub score: u32,
}

/// Why a snapshot could not be decoded or applied. Every error rejects the whole snapshot.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a field; `bit_offset` is where that field (or, inside an
    /// exp-Golomb code, the bit that was missing) starts, counted from the first bit of
    /// the snapshot.
    #[error("snapshot truncated at bit {bit_offset}")]
    Truncated { bit_offset: u64 },
    /// Byte 0 is not a version this decoder understands.
    #[error("unsupported snapshot version {found}")]
    UnsupportedVersion { found: u8 },
    /// An exp-Golomb code starting at `bit_offset` encodes a value above `u32::MAX`.
    #[error("exp-Golomb code at bit {bit_offset} exceeds u32")]
    CodeOverflow { bit_offset: u64 },
    /// Bytes follow the padded end of the bit stream.
    #[error("{count} trailing bytes after the snapshot")]
    TrailingBytes { count: usize },
    /// A padding bit at the end of the stream, starting at `bit_offset`, is set.
    #[error("non-zero padding at bit {bit_offset}")]
    NonZeroPadding { bit_offset: u64 },
    /// An id gap leads past `u32::MAX`.
    #[error("id gap {gap} after id {prev} overflows u32")]
    IdOverflow { prev: u32, gap: u32 },
    /// The baseline view handed to `apply_snapshot` is not strictly ascending by id at
    /// `index`. Snapshots themselves cannot express unordered ids.
    #[error("baseline view not strictly ascending at index {index}")]
    NotAscending { index: usize },
    /// A removed id is not in the baseline.
    #[error("removed id {id} is not in the baseline")]
    RemovedUnknown { id: u32 },
    /// A new entry's id is already in the baseline (removed in this snapshot or not).
    #[error("new id {id} is already in the baseline")]
    NewAlreadyPresent { id: u32 },
    /// A delta's id is not in the baseline.
    #[error("delta for id {id}, which is not in the baseline")]
    DeltaUnknown { id: u32 },
    /// A delta's id is also removed by the same snapshot.
    #[error("delta for id {id}, which this snapshot removes")]
    DeltaRemoved { id: u32 },
    /// Applying a delta takes `field` of entity `id` outside its type's range.
    #[error("field {field} of id {id} out of range after delta")]
    FieldOutOfRange { id: u32, field: &'static str },
    /// The snapshot's baseline is not among the views the decoder keeps.
    #[error("baseline view for tick {baseline_tick} is not available")]
    BaselineMissing { baseline_tick: u32 },
    /// A removed or update count exceeds `SNAPSHOT_ENTRIES_MAX`.
    #[error("entry count {count} exceeds the snapshot limit")]
    CountTooLarge { count: u32 },
}

/// Maps signed to unsigned so small magnitudes get small codes: 0, -1, 1, -2, 2, ...
/// become 0, 1, 2, 3, 4, .... Computed in i64 so `i32::MIN` does not overflow.
pub fn zigzag(v: i32) -> u32 {
    let v = i64::from(v);
    // The result is always in 0..2^32, so the narrowing keeps every bit.
    ((v << 1) ^ (v >> 63)) as u32
}

/// Inverse of [`zigzag`].
pub fn unzigzag(u: u32) -> i32 {
    let u = i64::from(u);
    // (u >> 1) < 2^31 and the xor with 0 or -1 keeps the value inside i32's range.
    ((u >> 1) ^ -(u & 1)) as i32
}

/// Exact length in bits of `ue(k)` of `v`: with w = v + 2^k of bit length n, the code
/// is (n - k - 1) zeros followed by the n bits of w.
pub fn ue_bits(v: u32, k: u32) -> u32 {
    debug_assert!(k <= EG_ORDER_MAX, "exp-Golomb order {k} too large");
    let k = k.min(EG_ORDER_MAX);
    let w = u64::from(v) + (1u64 << k);
    let n = u64::BITS - w.leading_zeros();
    2 * n - k - 1
}

/// Exact length in bits of `se(k)` of `v` (zigzag, then `ue(k)`).
pub fn se_bits(v: i32, k: u32) -> u32 {
    ue_bits(zigzag(v), k)
}

/// Dead-reckoned position of `base` after `dt_ticks` ticks, in position units (64 mm):
/// velocities are in 2 mm/tick units, so the displacement is `qv * dt / 32`, rounded
/// towards negative infinity (arithmetic shift). `dt_ticks` is clamped to
/// [`PREDICTION_DT_MAX`]; the result is not clamped to the u16 range.
pub fn predict(base: &ViewEntry, dt_ticks: u32) -> (i32, i32) {
    // At most 1024, so the cast is exact and |qv * dt| <= 2^17 cannot overflow.
    let dt = dt_ticks.min(PREDICTION_DT_MAX) as i32;
    (
        i32::from(base.qx) + ((i32::from(base.qvx) * dt) >> 5),
        i32::from(base.qy) + ((i32::from(base.qvy) * dt) >> 5),
    )
}

/// Ticks a delta snapshot's positions are predicted over: its tick minus its baseline's,
/// modulo 2^32.
fn snapshot_dt(header: &SnapshotHeader, baseline_tick: u32) -> u32 {
    header.tick.wrapping_sub(baseline_tick)
}

/// Upper bound of the bits one update takes, whatever update precedes it in the snapshot:
/// the id gap is at most `id` and code length never decreases with the value, so the
/// gap is costed as `ue_bits(id, 4)`; the `is_new` bit and the payload are exact.
/// `old` is the baseline entry the client holds for this id, if any, and `dt_ticks` the
/// snapshot's tick minus the baseline's (wrapping; only used when `old` is `Some`).
pub fn update_bits_max(id: u32, old: Option<&ViewEntry>, new: &ViewEntry, dt_ticks: u32) -> u32 {
    ue_bits(id, ID_GAP_K) + 1 + payload_bits(old, new, dt_ticks)
}

/// Upper bound of the bits one removal takes, whatever removal precedes it.
pub fn removal_bits_max(id: u32) -> u32 {
    ue_bits(id, ID_GAP_K)
}

/// Upper bound of the snapshot length in bytes, given the counts and the sum of the
/// per-entry bounds from [`update_bits_max`] and [`removal_bits_max`]: the oracle the
/// encoder's property test checks the selector's budget arithmetic against.
#[cfg(test)]
pub fn snapshot_bytes_max(removed_count: u32, update_count: u32, payload_bits: u64) -> usize {
    let bits = u64::from(ue_bits(removed_count, COUNT_K))
        .saturating_add(u64::from(ue_bits(update_count, COUNT_K)))
        .saturating_add(payload_bits);
    let bytes = usize::try_from(bits.div_ceil(8)).unwrap_or(usize::MAX);
    SNAPSHOT_HEADER_BYTES.saturating_add(bytes)
}

/// Exact bits of an update after its `is_new` bit.
fn payload_bits(old: Option<&ViewEntry>, new: &ViewEntry, dt_ticks: u32) -> u32 {
    match old {
        None => NEW_PAYLOAD_BITS,
        Some(old) => {
            let (pred_x, pred_y) = predict(old, dt_ticks);
            se_bits(i32::from(new.qx) - pred_x, POS_DELTA_K)
                + se_bits(i32::from(new.qy) - pred_y, POS_DELTA_K)
                + se_bits(i32::from(new.qvx) - i32::from(old.qvx), VEL_DELTA_K)
                + se_bits(i32::from(new.qvy) - i32::from(old.qvy), VEL_DELTA_K)
        }
    }
}

/// Gap of `id` after `prev` (`None` before the first id): id - (prev + 1).
fn id_gap(prev: Option<u32>, id: u32) -> u32 {
    match prev {
        None => id,
        // Ascending input keeps this exact; the callers debug-assert ascending order.
        Some(prev) => id.wrapping_sub(prev).wrapping_sub(1),
    }
}

fn count_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn strictly_ascending(ids: impl Iterator<Item = u32>) -> bool {
    let mut prev: Option<u32> = None;
    for id in ids {
        if prev.is_some_and(|p| p >= id) {
            return false;
        }
        prev = Some(id);
    }
    true
}

/// Whether two ascending id lists share no id (merge walk, debug checks only).
fn disjoint_ascending(a: &[u32], b: impl Iterator<Item = u32>) -> bool {
    let mut a = a.iter().peekable();
    for id in b {
        while a.next_if(|&&x| x < id).is_some() {}
        if a.peek() == Some(&&id) {
            return false;
        }
    }
    true
}

/// Encodes one snapshot into `out`, which is cleared first (`append_snapshot` after a
/// clear), for the tests that encode one snapshot at a time. Returns the bits of the
/// payload after the header, padding excluded.
#[cfg(test)]
pub fn encode_snapshot(
    out: &mut Vec<u8>,
    header: &SnapshotHeader,
    removed: &[u32],
    updates: &[(Option<ViewEntry>, ViewEntry)],
) -> u64 {
    out.clear();
    append_snapshot(out, header, removed, updates)
}

/// Encodes one snapshot at the end of `out` (a shard's builds of a tick go one after
/// another into one buffer). `removed` holds the ids to remove from the baseline,
/// ascending; `updates` holds (baseline entry if the client has one, new entry),
/// ascending by the new entry's id. A delta's baseline entry must have the same id and
/// kind. Delta positions are coded against [`predict`] over the header's tick minus its
/// baseline tick. Only `out` grows; nothing else is allocated. Returns the bits of the
/// payload after the header, padding excluded.
pub fn append_snapshot(
    out: &mut Vec<u8>,
    header: &SnapshotHeader,
    removed: &[u32],
    updates: &[(Option<ViewEntry>, ViewEntry)],
) -> u64 {
    debug_assert!(header.baseline_tick != Some(NO_BASELINE));
    debug_assert!(removed.len() <= SNAPSHOT_ENTRIES_MAX);
    debug_assert!(updates.len() <= SNAPSHOT_ENTRIES_MAX);
    debug_assert!(strictly_ascending(removed.iter().copied()));
    debug_assert!(strictly_ascending(updates.iter().map(|(_, new)| new.id)));
    debug_assert!(disjoint_ascending(removed, updates.iter().map(|(_, new)| new.id)));
    debug_assert!(updates
        .iter()
        .all(|(old, new)| new.kind <= 3 && old.is_none_or(|old| old.id == new.id && old.kind == new.kind)));
    debug_assert!(
        header.baseline_tick.is_some()
            || (removed.is_empty() && updates.iter().all(|(old, _)| old.is_none())),
        "a full snapshot can only insert"
    );

    // The header's fields in `header_layout`'s order.
    out.push(SNAPSHOT_FORMAT_VERSION);
    out.extend_from_slice(&header.tick.to_le_bytes());
    out.extend_from_slice(&header.baseline_tick.unwrap_or(NO_BASELINE).to_le_bytes());
    out.extend_from_slice(&header.avatar_id.to_le_bytes());
    out.extend_from_slice(&header.score.to_le_bytes());

    // A full snapshot has no deltas, so its dt is never used.
    let dt = header.baseline_tick.map_or(0, |b| snapshot_dt(header, b));
    let mut w = BitWriter::new(out);
    w.write_ue(count_u32(removed.len()), COUNT_K);
    let mut prev = None;
    for &id in removed {
        w.write_ue(id_gap(prev, id), ID_GAP_K);
        prev = Some(id);
    }
    w.write_ue(count_u32(updates.len()), COUNT_K);
    let mut prev = None;
    for (old, new) in updates {
        let gap = ue_code(id_gap(prev, new.id), ID_GAP_K);
        prev = Some(new.id);
        match old {
            None => {
                w.write_codes([gap]);
                w.write_bit(true);
                w.write_bits(u64::from(new.kind & 0b11), 2);
                w.write_bits(u64::from(new.qx), 16);
                w.write_bits(u64::from(new.qy), 16);
                w.write_bits(u64::from(new.qvx.to_le_bytes()[0]), 8);
                w.write_bits(u64::from(new.qvy.to_le_bytes()[0]), 8);
            }
            Some(old) => {
                let (pred_x, pred_y) = predict(old, dt);
                // |prediction| < 2^17, so the residuals cannot overflow.
                // The id gap, `is_new` = 0 (a code of one zero bit), and the residuals.
                let codes = [
                    gap,
                    (0, 1),
                    ue_code(zigzag(i32::from(new.qx) - pred_x), POS_DELTA_K),
                    ue_code(zigzag(i32::from(new.qy) - pred_y), POS_DELTA_K),
                    ue_code(zigzag(i32::from(new.qvx) - i32::from(old.qvx)), VEL_DELTA_K),
                    ue_code(zigzag(i32::from(new.qvy) - i32::from(old.qvy)), VEL_DELTA_K),
                ];
                w.write_codes(codes);
            }
        }
    }
    w.finish()
}

/// Reads the byte-aligned header. The version is checked first, so a snapshot of a later
/// version is reported as such even if its header is laid out differently.
pub fn decode_snapshot_header(bytes: &[u8]) -> Result<SnapshotHeader, DecodeError> {
    let Some(&found) = bytes.first() else {
        return Err(DecodeError::Truncated { bit_offset: 0 });
    };
    if found != SNAPSHOT_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion { found });
    }
    let tick = read_u32_le(bytes, header_layout::TICK)?;
    let baseline = read_u32_le(bytes, header_layout::BASELINE_TICK)?;
    Ok(SnapshotHeader {
        tick,
        baseline_tick: (baseline != NO_BASELINE).then_some(baseline),
        avatar_id: read_u32_le(bytes, header_layout::AVATAR_ID)?,
        score: read_u32_le(bytes, header_layout::SCORE)?,
    })
}

fn read_u32_le(bytes: &[u8], at: usize) -> Result<u32, DecodeError> {
    let truncated = DecodeError::Truncated {
        bit_offset: at as u64 * 8,
    };
    let field: [u8; 4] = bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .ok_or(truncated)?;
    Ok(u32::from_le_bytes(field))
}

/// Reads a removed or update count and rejects it above `SNAPSHOT_ENTRIES_MAX`.
fn read_count(r: &mut BitReader<'_>) -> Result<u32, DecodeError> {
    let count = r.read_ue(COUNT_K)?;
    if u64::from(count) > SNAPSHOT_ENTRIES_MAX as u64 {
        return Err(DecodeError::CountTooLarge { count });
    }
    Ok(count)
}

/// Reads the next gap-coded id after `prev`, updating `prev`.
fn read_id(r: &mut BitReader<'_>, prev: &mut Option<u32>) -> Result<u32, DecodeError> {
    let gap = r.read_ue(ID_GAP_K)?;
    let id = match *prev {
        None => gap,
        Some(p) => p
            .checked_add(1)
            .and_then(|next| next.checked_add(gap))
            .ok_or(DecodeError::IdOverflow { prev: p, gap })?,
    };
    *prev = Some(id);
    Ok(id)
}

/// Walks the removed-id list a second time, one id ahead, alongside the updates. The
/// list comes before the updates in the stream, so a second reader over it lets the
/// decoder merge the baseline, the removals and the updates in one pass without
/// buffering the removals.
struct RemovedCursor<'a> {
    reader: BitReader<'a>,
    left: u32,
    prev: Option<u32>,
    current: Option<u32>,
}

impl<'a> RemovedCursor<'a> {
    fn new(reader: BitReader<'a>, count: u32) -> Result<Self, DecodeError> {
        let mut cursor = Self {
            reader,
            left: count,
            prev: None,
            current: None,
        };
        cursor.advance()?;
        Ok(cursor)
    }

    fn advance(&mut self) -> Result<(), DecodeError> {
        self.current = if self.left == 0 {
            None
        } else {
            self.left -= 1;
            Some(read_id(&mut self.reader, &mut self.prev)?)
        };
        Ok(())
    }
}

/// Copies the baseline entries with id below `limit` to `out`, dropping the removed
/// ones, and fails on a removed id below `limit` that the baseline lacks.
fn copy_baseline_below(
    limit: u64,
    baseline: &[ViewEntry],
    next: &mut usize,
    removed: &mut RemovedCursor<'_>,
    out: &mut Vec<ViewEntry>,
    sent: &mut Vec<bool>,
) -> Result<(), DecodeError> {
    while let Some(entry) = baseline.get(*next) {
        if u64::from(entry.id) >= limit {
            break;
        }
        // A pending removal below this entry's id names an id the baseline lacks; it is
        // left pending and reported by the check after the loop.
        if removed.current == Some(entry.id) {
            removed.advance()?;
        } else {
            out.push(*entry);
            sent.push(false);
        }
        *next += 1;
    }
    // Every baseline id below `limit` has been matched, and the next one is at least
    // `limit`, so a pending removal below `limit` names an id the baseline lacks.
    match removed.current {
        Some(id) if u64::from(id) < limit => Err(DecodeError::RemovedUnknown { id }),
        _ => Ok(()),
    }
}

/// `pred + residual` as a position; computed in i64 because a malformed snapshot's residual
/// can be any i32.
fn apply_position(pred: i32, residual: i32, id: u32, field: &'static str) -> Result<u16, DecodeError> {
    u16::try_from(i64::from(pred) + i64::from(residual))
        .map_err(|_| DecodeError::FieldOutOfRange { id, field })
}

fn apply_i8(base: i8, diff: i32, id: u32, field: &'static str) -> Result<i8, DecodeError> {
    i8::try_from(i64::from(base) + i64::from(diff)).map_err(|_| DecodeError::FieldOutOfRange { id, field })
}

/// `apply_snapshot_marking` without the marks (the codec's own tests).
#[cfg(test)]
pub fn apply_snapshot(
    bytes: &[u8],
    baseline: &[ViewEntry],
    out: &mut Vec<ViewEntry>,
) -> Result<SnapshotHeader, DecodeError> {
    apply_snapshot_marking(bytes, baseline, out, &mut Vec::new())
}

/// Decodes `bytes` and applies it to `baseline`, writing the new view (ascending by id)
/// to `out`, and for each of its entries to `sent` whether this snapshot sent it (an
/// insert or a delta) or carried it over from the baseline unchanged. Both are cleared
/// first and left empty on error. A full snapshot (no baseline tick) is applied to the
/// empty view whatever `baseline` holds. Runs in O(baseline + snapshot) with no
/// allocation beyond the outputs' growth.
pub fn apply_snapshot_marking(
    bytes: &[u8],
    baseline: &[ViewEntry],
    out: &mut Vec<ViewEntry>,
    sent: &mut Vec<bool>,
) -> Result<SnapshotHeader, DecodeError> {
    out.clear();
    sent.clear();
    let result = apply_snapshot_into(bytes, baseline, out, sent);
    if result.is_err() {
        out.clear();
        sent.clear();
    }
    debug_assert_eq!(out.len(), sent.len());
    result
}

fn apply_snapshot_into(
    bytes: &[u8],
    baseline: &[ViewEntry],
    out: &mut Vec<ViewEntry>,
    sent: &mut Vec<bool>,
) -> Result<SnapshotHeader, DecodeError> {
    let header = decode_snapshot_header(bytes)?;
    // A full snapshot has no deltas, so its dt is never used.
    let dt = header.baseline_tick.map_or(0, |b| snapshot_dt(&header, b));
    let baseline = if header.baseline_tick.is_some() {
        baseline
    } else {
        &[]
    };
    if let Some(i) = baseline.windows(2).position(|w| w[0].id >= w[1].id) {
        return Err(DecodeError::NotAscending { index: i + 1 });
    }

    let mut r = BitReader::starting_at_byte(bytes, SNAPSHOT_HEADER_BYTES);
    let removed_count = read_count(&mut r)?;
    let removed_start = r;
    // First pass over the removals: finds where the updates start and validates the
    // codes, so the second walk in `RemovedCursor` cannot fail midway.
    let mut prev = None;
    for _ in 0..removed_count {
        read_id(&mut r, &mut prev)?;
    }
    let update_count = read_count(&mut r)?;
    let mut removed = RemovedCursor::new(removed_start, removed_count)?;
    out.reserve(baseline.len().saturating_add(update_count as usize));

    let mut next = 0usize;
    let mut prev = None;
    for _ in 0..update_count {
        let id = read_id(&mut r, &mut prev)?;
        let is_new = r.read_bit()?;
        copy_baseline_below(u64::from(id), baseline, &mut next, &mut removed, out, sent)?;
        let base = baseline.get(next).filter(|e| e.id == id);
        if is_new {
            // read_bits(n) returns fewer than 2^n, so the narrowing casts are exact.
            let kind = r.read_bits(2)? as u8;
            let qx = r.read_bits(16)? as u16;
            let qy = r.read_bits(16)? as u16;
            let qvx = i8::from_le_bytes([r.read_bits(8)? as u8]);
            let qvy = i8::from_le_bytes([r.read_bits(8)? as u8]);
            if base.is_some() {
                return Err(DecodeError::NewAlreadyPresent { id });
            }
            out.push(ViewEntry {
                id,
                qx,
                qy,
                qvx,
                qvy,
                kind,
                pad: 0,
            });
            sent.push(true);
        } else {
            let dqx = r.read_se(POS_DELTA_K)?;
            let dqy = r.read_se(POS_DELTA_K)?;
            let dqvx = r.read_se(VEL_DELTA_K)?;
            let dqvy = r.read_se(VEL_DELTA_K)?;
            let Some(base) = base else {
                return Err(DecodeError::DeltaUnknown { id });
            };
            if removed.current == Some(id) {
                return Err(DecodeError::DeltaRemoved { id });
            }
            let (pred_x, pred_y) = predict(base, dt);
            out.push(ViewEntry {
                qx: apply_position(pred_x, dqx, id, "qx")?,
                qy: apply_position(pred_y, dqy, id, "qy")?,
                qvx: apply_i8(base.qvx, dqvx, id, "qvx")?,
                qvy: apply_i8(base.qvy, dqvy, id, "qvy")?,
                ..*base
            });
            sent.push(true);
            next += 1;
        }
    }
    copy_baseline_below(1u64 << 32, baseline, &mut next, &mut removed, out, sent)?;
    r.finish()?;
    Ok(header)
}

#[cfg(test)]
mod bit_tests;
#[cfg(test)]
mod tests;
