//! Wire encoding of per-client view snapshots (snapshot format version 1): bit-level
//! writer and reader, exp-Golomb codes, exact cost functions for the server-side
//! selector, and the decoder that applies a snapshot to its baseline view.
//!
//! The format is specified bit by bit in `kernel/SNAPSHOT_FORMAT.md`; this file is the
//! reference implementation of that document, and the two must change together.

use crate::snapshot::ViewEntry;

/// Snapshot format version written in byte 0 of every snapshot.
pub const SNAPSHOT_FORMAT_VERSION: u8 = 1;
/// Size of the byte-aligned header that precedes the bit stream.
pub const SNAPSHOT_HEADER_BYTES: usize = 17;
/// Value of the header's baseline tick field meaning "no baseline" (full snapshot).
pub const NO_BASELINE: u32 = u32::MAX;
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

/// Appends a bit stream to a byte vector: bit i of the stream is bit (i % 8) of the
/// i / 8-th appended byte. It allocates only when the vector runs out of capacity.
/// Bits still pending in a partial byte are written by [`BitWriter::finish`]; dropping
/// the writer without calling it loses them.
#[derive(Debug)]
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Pending bits, least significant first; fewer than 8 between calls.
    acc: u64,
    acc_bits: u32,
    start_len: usize,
}

impl<'a> BitWriter<'a> {
    /// Starts a stream at the end of `out`, at a byte boundary.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        let start_len = out.len();
        Self {
            out,
            acc: 0,
            acc_bits: 0,
            start_len,
        }
    }

    /// Bits written so far by this writer, padding excluded.
    pub fn bit_len(&self) -> u64 {
        (self.out.len() - self.start_len) as u64 * 8 + u64::from(self.acc_bits)
    }

    /// Writes one bit.
    pub fn write_bit(&mut self, bit: bool) {
        self.write_bits(u64::from(bit), 1);
    }

    /// Writes the low `count` bits of `value` (at most 64), least significant first.
    pub fn write_bits(&mut self, value: u64, count: u32) {
        debug_assert!(count <= 64, "write_bits count {count} too large");
        let mut value = value;
        let mut count = count.min(64);
        // Chunks of at most 32 bits keep the accumulator (under 8 pending bits) below
        // 40 bits, so it can never overflow.
        while count > 0 {
            let take = count.min(32);
            let chunk = value & ((1u64 << take) - 1);
            self.acc |= chunk << self.acc_bits;
            self.acc_bits += take;
            while self.acc_bits >= 8 {
                self.out.push((self.acc & 0xFF) as u8);
                self.acc >>= 8;
                self.acc_bits -= 8;
            }
            value >>= take;
            count -= take;
        }
    }

    /// Writes `ue(k)` of `v`: (n - k - 1) zero bits, then the n bits of w = v + 2^k
    /// from the most significant to the least.
    pub fn write_ue(&mut self, v: u32, k: u32) {
        debug_assert!(k <= EG_ORDER_MAX, "exp-Golomb order {k} too large");
        let k = k.min(EG_ORDER_MAX);
        let w = u64::from(v) + (1u64 << k);
        let n = u64::BITS - w.leading_zeros();
        let zeros = n - k - 1;
        // The stream is LSB-first, so reversing w's n bits makes its most significant
        // bit the first one written.
        let code = w.reverse_bits() >> (u64::BITS - n);
        if zeros + n <= 32 {
            // The common short code: zeros and value in one write.
            self.write_bits(code << zeros, zeros + n);
        } else {
            self.write_bits(0, zeros);
            self.write_bits(code, n);
        }
    }

    /// Writes `se(k)` of `v`: zigzag, then `ue(k)`.
    pub fn write_se(&mut self, v: i32, k: u32) {
        self.write_ue(zigzag(v), k);
    }

    /// Pads with zero bits to the next byte boundary and flushes. Returns the number of
    /// bits written, padding excluded.
    pub fn finish(self) -> u64 {
        let bits = self.bit_len();
        if self.acc_bits > 0 {
            self.out.push((self.acc & 0xFF) as u8);
        }
        bits
    }
}

/// Reads a bit stream laid out as [`BitWriter`] writes it. Every read checks the
/// remaining input first and returns [`DecodeError::Truncated`] instead of panicking.
/// Offsets in errors count from the first bit of the slice.
#[derive(Clone, Copy, Debug)]
pub struct BitReader<'a> {
    bytes: &'a [u8],
    pos: u64,
}

impl<'a> BitReader<'a> {
    /// Reads `bytes` from its first bit.
    #[cfg(test)]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Reads `bytes` from the first bit of byte `byte` (or from the end, if shorter).
    pub fn starting_at_byte(bytes: &'a [u8], byte: usize) -> Self {
        let pos = byte.min(bytes.len()) as u64 * 8;
        Self { bytes, pos }
    }

    fn len_bits(&self) -> u64 {
        self.bytes.len() as u64 * 8
    }

    /// Reads one bit.
    pub fn read_bit(&mut self) -> Result<bool, DecodeError> {
        Ok(self.read_bits(1)? == 1)
    }

    /// Reads `count` bits (at most 64) into the low bits of the result, the first bit
    /// read being the least significant.
    pub fn read_bits(&mut self, count: u32) -> Result<u64, DecodeError> {
        debug_assert!(count <= 64, "read_bits count {count} too large");
        let count = count.min(64);
        let start = self.pos;
        let truncated = move || DecodeError::Truncated { bit_offset: start };
        if start + u64::from(count) > self.len_bits() {
            return Err(truncated());
        }
        let mut value = 0u64;
        let mut got = 0u32;
        while got < count {
            let index = usize::try_from(self.pos / 8).map_err(|_| truncated())?;
            let byte = *self.bytes.get(index).ok_or_else(truncated)?;
            let shift = (self.pos % 8) as u32;
            let take = (8 - shift).min(count - got);
            let bits = (u64::from(byte) >> shift) & ((1u64 << take) - 1);
            value |= bits << got;
            got += take;
            self.pos += u64::from(take);
        }
        Ok(value)
    }

    /// Reads `ue(k)`. A code whose value would exceed `u32::MAX` is rejected as soon as
    /// its zero prefix is too long, so a run of zero bytes cannot make this loop long.
    pub fn read_ue(&mut self, k: u32) -> Result<u32, DecodeError> {
        debug_assert!(k <= EG_ORDER_MAX, "exp-Golomb order {k} too large");
        let k = k.min(EG_ORDER_MAX);
        let start = self.pos;
        let overflow = DecodeError::CodeOverflow { bit_offset: start };
        // A u32 value has w = v + 2^k of at most 33 bits, so at most 32 - k zeros.
        let zeros_max = 32 - k;
        let mut zeros = 0u32;
        while !self.read_bit()? {
            zeros += 1;
            if zeros > zeros_max {
                return Err(overflow);
            }
        }
        let low_bits = zeros + k;
        let mut low = 0u64;
        // The low bits of w are stored most significant first.
        for _ in 0..low_bits {
            low = (low << 1) | u64::from(self.read_bit()?);
        }
        let w = (1u64 << low_bits) | low;
        u32::try_from(w - (1u64 << k)).map_err(|_| overflow)
    }

    /// Reads `se(k)`.
    pub fn read_se(&mut self, k: u32) -> Result<i32, DecodeError> {
        Ok(unzigzag(self.read_ue(k)?))
    }

    /// Ends the stream: the rest of the current byte must be zero padding, and no byte
    /// may follow it.
    pub fn finish(mut self) -> Result<(), DecodeError> {
        let pad_bits = ((8 - self.pos % 8) % 8) as u32;
        let pad_start = self.pos;
        if self.read_bits(pad_bits)? != 0 {
            return Err(DecodeError::NonZeroPadding {
                bit_offset: pad_start,
            });
        }
        let consumed = usize::try_from(self.pos / 8).unwrap_or(usize::MAX);
        match self.bytes.len().saturating_sub(consumed) {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { count }),
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

/// Encodes one snapshot into `out`, which is cleared first. `removed` holds the ids to
/// remove from the baseline, ascending; `updates` holds (baseline entry if the client
/// has one, new entry), ascending by the new entry's id. A delta's baseline entry must
/// have the same id and kind. Delta positions are coded against [`predict`] over the
/// header's tick minus its baseline tick. Only `out` grows; nothing else is allocated.
pub fn encode_snapshot(
    out: &mut Vec<u8>,
    header: &SnapshotHeader,
    removed: &[u32],
    updates: &[(Option<ViewEntry>, ViewEntry)],
) {
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

    out.clear();
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
        w.write_ue(id_gap(prev, new.id), ID_GAP_K);
        prev = Some(new.id);
        match old {
            None => {
                w.write_bit(true);
                w.write_bits(u64::from(new.kind & 0b11), 2);
                w.write_bits(u64::from(new.qx), 16);
                w.write_bits(u64::from(new.qy), 16);
                w.write_bits(u64::from(new.qvx.to_le_bytes()[0]), 8);
                w.write_bits(u64::from(new.qvy.to_le_bytes()[0]), 8);
            }
            Some(old) => {
                w.write_bit(false);
                let (pred_x, pred_y) = predict(old, dt);
                // |prediction| < 2^17, so the residuals cannot overflow.
                w.write_se(i32::from(new.qx) - pred_x, POS_DELTA_K);
                w.write_se(i32::from(new.qy) - pred_y, POS_DELTA_K);
                w.write_se(i32::from(new.qvx) - i32::from(old.qvx), VEL_DELTA_K);
                w.write_se(i32::from(new.qvy) - i32::from(old.qvy), VEL_DELTA_K);
            }
        }
    }
    w.finish();
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
    let tick = read_u32_le(bytes, 1)?;
    let baseline = read_u32_le(bytes, 5)?;
    Ok(SnapshotHeader {
        tick,
        baseline_tick: (baseline != NO_BASELINE).then_some(baseline),
        avatar_id: read_u32_le(bytes, 9)?,
        score: read_u32_le(bytes, 13)?,
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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Writes with `f` and returns the written bits as a string of '0'/'1' in stream order.
    fn bits_written(f: impl FnOnce(&mut BitWriter<'_>)) -> String {
        let mut bytes = Vec::new();
        let mut w = BitWriter::new(&mut bytes);
        f(&mut w);
        let n = w.finish();
        (0..n)
            .map(|i| {
                if (bytes[(i / 8) as usize] >> (i % 8)) & 1 == 1 {
                    '1'
                } else {
                    '0'
                }
            })
            .collect()
    }

    fn ue_string(v: u32, k: u32) -> String {
        bits_written(|w| w.write_ue(v, k))
    }

    fn se_string(v: i32, k: u32) -> String {
        bits_written(|w| w.write_se(v, k))
    }

    #[test]
    fn ue_golden_vectors() {
        let cases: &[(u32, u32, &str)] = &[
            (0, 0, "1"),
            (1, 0, "010"),
            (2, 0, "011"),
            (3, 0, "00100"),
            (6, 0, "00111"),
            (7, 0, "0001000"),
            (0, 1, "10"),
            (1, 1, "11"),
            (2, 1, "0100"),
            (5, 1, "0111"),
            (6, 1, "001000"),
            (0, 2, "100"),
            (3, 2, "111"),
            (4, 2, "01000"),
            (0, 3, "1000"),
            (7, 3, "1111"),
            (8, 3, "010000"),
            (0, 4, "10000"),
            (15, 4, "11111"),
            (16, 4, "0100000"),
        ];
        for &(v, k, expected) in cases {
            assert_eq!(ue_string(v, k), expected, "ue({k}) of {v}");
            assert_eq!(ue_bits(v, k) as usize, expected.len(), "ue_bits({v}, {k})");
        }
        // The largest value: w = 2^32 has 33 bits, so 32 zeros, a one and 32 zeros.
        let max = ue_string(u32::MAX, 0);
        assert_eq!(max, format!("{}1{}", "0".repeat(32), "0".repeat(32)));
        assert_eq!(ue_bits(u32::MAX, 0), 65);
        assert_eq!(ue_bits(u32::MAX, 4), 61);
    }

    #[test]
    fn se_golden_vectors() {
        assert_eq!([0, -1, 1, -2, 2].map(zigzag), [0, 1, 2, 3, 4]);
        assert_eq!(zigzag(i32::MIN), u32::MAX);
        assert_eq!(zigzag(i32::MAX), u32::MAX - 1);
        assert_eq!(unzigzag(u32::MAX), i32::MIN);
        let cases: &[(i32, u32, &str)] = &[
            (0, 0, "1"),
            (-1, 0, "010"),
            (1, 0, "011"),
            (-2, 0, "00100"),
            (2, 0, "00101"),
            (0, 1, "10"),
            (-1, 1, "11"),
            (1, 1, "0100"),
            (-3, 1, "0111"),
            (3, 1, "001000"),
        ];
        for &(v, k, expected) in cases {
            assert_eq!(se_string(v, k), expected, "se({k}) of {v}");
            assert_eq!(se_bits(v, k) as usize, expected.len(), "se_bits({v}, {k})");
        }
    }

    #[test]
    fn fixed_width_fields_are_lsb_first() {
        assert_eq!(bits_written(|w| w.write_bits(0b110, 3)), "011");
        assert_eq!(bits_written(|w| w.write_bits(0x1234, 16)), "0010110001001000");
        let mut bytes = vec![0xAA];
        let mut w = BitWriter::new(&mut bytes);
        w.write_bit(true);
        w.write_bits(0, 8);
        w.write_bit(true);
        assert_eq!(w.finish(), 10);
        assert_eq!(bytes, [0xAA, 0x01, 0x02]);
    }

    #[test]
    fn reader_rejects_oversized_codes() {
        // 32 zeros then w = 2^32 | 0: v = 2^32 - 1, the largest value.
        let mut bytes = Vec::new();
        let mut w = BitWriter::new(&mut bytes);
        w.write_ue(u32::MAX, 0);
        w.finish();
        assert_eq!(BitReader::new(&bytes).read_ue(0), Ok(u32::MAX));
        // Same length, w = 2^32 + 1: v = 2^32 does not fit.
        let mut bytes = Vec::new();
        let mut w = BitWriter::new(&mut bytes);
        w.write_bits(0, 32);
        w.write_bit(true);
        w.write_bits(0, 31);
        w.write_bit(true);
        w.finish();
        assert_eq!(
            BitReader::new(&bytes).read_ue(0),
            Err(DecodeError::CodeOverflow { bit_offset: 0 })
        );
        // 33 zeros then a one, then the input ends: rejected on the prefix, before the
        // missing low bits are looked for. For order 4 the limit is 28 zeros.
        assert_eq!(
            BitReader::new(&[0, 0, 0, 0, 0b10]).read_ue(0),
            Err(DecodeError::CodeOverflow { bit_offset: 0 })
        );
        assert_eq!(
            BitReader::new(&[0, 0, 0, 0b0010_0000]).read_ue(4),
            Err(DecodeError::CodeOverflow { bit_offset: 0 })
        );
        assert_eq!(
            BitReader::new(&[0, 0, 0, 0b0001_0000, 0, 0, 0, 0]).read_ue(4),
            Ok(u32::MAX - 15)
        );
        let zeros = [0u8; 64];
        assert_eq!(
            BitReader::new(&zeros).read_ue(0),
            Err(DecodeError::CodeOverflow { bit_offset: 0 })
        );
        assert_eq!(
            BitReader::new(&zeros).read_ue(4),
            Err(DecodeError::CodeOverflow { bit_offset: 0 })
        );
        assert_eq!(
            BitReader::new(&[]).read_bit(),
            Err(DecodeError::Truncated { bit_offset: 0 })
        );
    }

    fn entry(id: u32, kind: u8, qx: u16, qy: u16, qvx: i8, qvy: i8) -> ViewEntry {
        ViewEntry {
            id,
            qx,
            qy,
            qvx,
            qvy,
            kind,
            pad: 0,
        }
    }

    /// The worked example of SNAPSHOT_FORMAT.md, bytes derived by hand from the spec.
    const EXAMPLE_FRAME: [u8; 28] = [
        0x01, 0x64, 0x00, 0x00, 0x00, 0x62, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
        0x99, 0xAB, 0x93, 0xD2, 0x12, 0x1A, 0x09, 0x2B, 0x80, 0xFF, 0x02,
    ];

    fn example_baseline() -> [ViewEntry; 3] {
        [
            entry(3, 0, 10, 20, 0, 0),
            entry(7, 1, 100, 200, 3, -2),
            entry(9, 0, 5, 5, 1, 1),
        ]
    }

    fn example_header() -> SnapshotHeader {
        SnapshotHeader {
            tick: 100,
            baseline_tick: Some(98),
            avatar_id: 7,
            score: 3,
        }
    }

    #[test]
    fn worked_example_matches_spec() {
        let base = example_baseline();
        let new7 = entry(7, 1, 101, 199, 3, 0);
        let new12 = entry(12, 0, 0x1234, 0x0056, -1, 5);
        // dt = 2: x moves 3 * 2 >> 5 = 0, y moves -2 * 2 >> 5 = -1.
        assert_eq!(predict(&base[1], 2), (100, 199));
        let mut out = Vec::new();
        encode_snapshot(
            &mut out,
            &example_header(),
            &[3],
            &[(Some(base[1]), new7), (None, new12)],
        );
        assert_eq!(out, EXAMPLE_FRAME);
        let mut view = Vec::new();
        assert_eq!(
            apply_snapshot(&EXAMPLE_FRAME, &base, &mut view),
            Ok(example_header())
        );
        assert_eq!(view, [new7, base[2], new12]);
    }

    #[test]
    fn empty_full_snapshot_is_one_byte_of_stream() {
        let header = SnapshotHeader {
            tick: 5,
            baseline_tick: None,
            avatar_id: 1,
            score: 0,
        };
        let mut out = Vec::new();
        encode_snapshot(&mut out, &header, &[], &[]);
        let expected = [
            1, 5, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 0, 0, 0, 0, 0x11,
        ];
        assert_eq!(out, expected);
        let mut view = vec![entry(1, 0, 0, 0, 0, 0)];
        // A full snapshot ignores whatever baseline it is handed.
        assert_eq!(
            apply_snapshot(&out, &[entry(4, 0, 0, 0, 0, 0)], &mut view),
            Ok(header)
        );
        assert!(view.is_empty());
    }

    #[test]
    fn gap_coding_example_from_spec() {
        let header = SnapshotHeader {
            tick: 2,
            baseline_tick: Some(1),
            avatar_id: 0,
            score: 0,
        };
        let mut out = Vec::new();
        encode_snapshot(&mut out, &header, &[3, 4, 10], &[]);
        // removed_count 3, gaps 3, 0, 5, update_count 0, then 1 padding bit.
        assert_eq!(stream_bits(&out), "101110011100001010110000");
    }

    /// The stream bits of a snapshot (after the header) as '0'/'1' in stream order.
    fn stream_bits(snapshot: &[u8]) -> String {
        (0..(snapshot.len() - SNAPSHOT_HEADER_BYTES) * 8)
            .map(|i| {
                if (snapshot[SNAPSHOT_HEADER_BYTES + i / 8] >> (i % 8)) & 1 == 1 {
                    '1'
                } else {
                    '0'
                }
            })
            .collect()
    }

    #[test]
    fn moving_at_baseline_velocity_costs_two_bits_per_axis() {
        let dt = 6;
        let base = entry(0, 0, 1000, 2000, 17, -9);
        // 17 * 6 = 102 >> 5 = 3; -9 * 6 = -54 >> 5 = -2 (floor of -1.6875).
        assert_eq!(predict(&base, dt), (1003, 1998));
        let new = entry(0, 0, 1003, 1998, 17, -9);
        // se(1) of 0 twice ("10" each), se(0) of 0 twice ("1" each).
        assert_eq!(payload_bits(Some(&base), &new, dt), 2 + 2 + 1 + 1);
        assert_eq!(
            update_bits_max(0, Some(&base), &new, dt),
            ue_bits(0, ID_GAP_K) + 1 + 6
        );
        // Coded against the baseline position instead, dx = 3 would take se(1) of 3, 6 bits.
        assert_eq!(se_bits(3, POS_DELTA_K), 6);

        let header = SnapshotHeader {
            tick: 106,
            baseline_tick: Some(100),
            avatar_id: 0,
            score: 0,
        };
        let mut snapshot = Vec::new();
        encode_snapshot(&mut snapshot, &header, &[], &[(Some(base), new)]);
        // removed_count 0, update_count 1, gap 0, is_new 0, "10" "10" "1" "1": 20 bits, then
        // 4 padding bits.
        assert_eq!(
            stream_bits(&snapshot),
            "1000_1001_10000_0_10_10_1_1_0000".replace('_', "")
        );
        let mut view = Vec::new();
        assert_eq!(apply_snapshot(&snapshot, &[base], &mut view), Ok(header));
        assert_eq!(view, [new]);
    }

    #[test]
    fn prediction_floors_negative_velocities() {
        let at = |qvx: i8, dt: u32| predict(&entry(0, 0, 100, 100, qvx, qvx), dt).0;
        // -3 * 3 = -9, and -9 >> 5 = -1 (the floor of -0.28), not 0.
        assert_eq!(at(-3, 3), 99);
        assert_eq!(at(3, 3), 100);
        assert_eq!(at(-1, 1), 99);
        assert_eq!(at(-32, 1), 99);
        assert_eq!(at(-33, 1), 98);
        assert_eq!(at(31, 1), 100);
        assert_eq!(at(32, 1), 101);
        assert_eq!(at(-128, 0), 100);
        // Both axes use the same rule.
        assert_eq!(predict(&entry(0, 0, 100, 100, -3, 3), 3), (99, 100));
        for qv in i8::MIN..=i8::MAX {
            for dt in [0u32, 1, 2, 3, 7, 31, 33, 200, 1024] {
                let floor = (i32::from(qv) * dt as i32).div_euclid(32);
                assert_eq!(at(qv, dt), 100 + floor, "qv {qv}, dt {dt}");
            }
        }
        // The prediction is not clamped to the u16 range.
        assert_eq!(
            predict(&entry(0, 0, 0, 65535, -128, 127), 1024),
            (-4096, 65535 + 4064)
        );
    }

    #[test]
    fn huge_dt_is_clamped() {
        let base = entry(5, 0, 0, 65535, -128, 127);
        let clamped = predict(&base, PREDICTION_DT_MAX);
        assert_eq!(clamped, (-4096, 65535 + 4064));
        assert_ne!(predict(&base, PREDICTION_DT_MAX - 1), clamped);
        for dt in [PREDICTION_DT_MAX + 1, 100_000, u32::MAX] {
            assert_eq!(predict(&base, dt), clamped, "dt {dt}");
        }

        // The baseline tick is after the snapshot's, so dt wraps to 2^32 - 5: clamped to 1024.
        let header = SnapshotHeader {
            tick: 5,
            baseline_tick: Some(10),
            avatar_id: 0,
            score: 0,
        };
        let dt = header.tick.wrapping_sub(10);
        let new = entry(5, 0, 0, 65535, -128, 127);
        let mut snapshot = Vec::new();
        encode_snapshot(&mut snapshot, &header, &[], &[(Some(base), new)]);
        // Residuals +4096 and -4064 against the clamped prediction.
        let expected = se_bits(4096, POS_DELTA_K) + se_bits(-4064, POS_DELTA_K) + 2;
        assert_eq!(payload_bits(Some(&base), &new, dt), expected);
        let exact = ue_bits(0, COUNT_K) + ue_bits(1, COUNT_K) + update_bits_max(5, Some(&base), &new, dt)
            - ue_bits(5, ID_GAP_K)
            + ue_bits(5, ID_GAP_K);
        assert_eq!(snapshot.len(), SNAPSHOT_HEADER_BYTES + exact.div_ceil(8) as usize);
        let mut view = Vec::new();
        assert_eq!(apply_snapshot(&snapshot, &[base], &mut view), Ok(header));
        assert_eq!(view, [new]);
    }

    #[test]
    fn garbage_residuals_are_out_of_range() {
        // Residuals of i32::MAX and i32::MIN on top of a prediction that is itself outside
        // the u16 range: rejected, not overflowed.
        let base = [entry(0, 0, 65535, 0, 127, -128)];
        for (rx, ry, field) in [(i32::MAX, 0, "qx"), (-65535 - 4064, i32::MIN, "qy")] {
            let mut snapshot = encode_delta(&[], &[]);
            snapshot[1..5].copy_from_slice(&2000u32.to_le_bytes());
            snapshot.truncate(SNAPSHOT_HEADER_BYTES);
            let mut w = BitWriter::new(&mut snapshot);
            w.write_ue(0, COUNT_K);
            w.write_ue(1, COUNT_K);
            w.write_ue(0, ID_GAP_K);
            w.write_bit(false);
            w.write_se(rx, POS_DELTA_K);
            w.write_se(ry, POS_DELTA_K);
            w.write_se(0, VEL_DELTA_K);
            w.write_se(0, VEL_DELTA_K);
            w.finish();
            assert_eq!(
                apply_snapshot(&snapshot, &base, &mut Vec::new()),
                Err(DecodeError::FieldOutOfRange { id: 0, field })
            );
        }
    }

    /// Encodes a delta snapshot against a baseline tick of 1.
    fn encode_delta(removed: &[u32], updates: &[(Option<ViewEntry>, ViewEntry)]) -> Vec<u8> {
        let header = SnapshotHeader {
            tick: 2,
            baseline_tick: Some(1),
            avatar_id: 0,
            score: 0,
        };
        let mut out = Vec::new();
        encode_snapshot(&mut out, &header, removed, updates);
        out
    }

    #[test]
    fn semantic_errors() {
        let base = example_baseline();
        let mut view = Vec::new();
        let mut apply = |snapshot: &[u8]| apply_snapshot(snapshot, &base, &mut view).map(|_| ());
        // Encoded by hand-built lists that break the apply rules; the encoder's debug
        // checks only guard ordering and kinds, so these go through.
        assert_eq!(
            apply(&encode_delta(&[4], &[])),
            Err(DecodeError::RemovedUnknown { id: 4 })
        );
        assert_eq!(
            apply(&encode_delta(&[10], &[])),
            Err(DecodeError::RemovedUnknown { id: 10 })
        );
        let new9 = entry(9, 0, 0, 0, 0, 0);
        assert_eq!(
            apply(&encode_delta(&[], &[(None, new9)])),
            Err(DecodeError::NewAlreadyPresent { id: 9 })
        );
        let ghost = entry(8, 0, 0, 0, 0, 0);
        assert_eq!(
            apply(&encode_delta(&[], &[(Some(ghost), ghost)])),
            Err(DecodeError::DeltaUnknown { id: 8 })
        );
        // base[0].qx is 10, so a delta of -70 goes below zero.
        let (from, to) = (entry(3, 0, 70, 0, 0, 0), entry(3, 0, 0, 0, 0, 0));
        let mut snapshot = encode_delta(&[], &[(Some(from), to)]);
        assert_eq!(
            apply(&snapshot),
            Err(DecodeError::FieldOutOfRange { id: 3, field: "qx" })
        );
        // base[1].qvy is -2, so a delta of +130 goes above 127.
        let fast = entry(7, 1, 100, 200, 3, 127);
        snapshot = encode_delta(&[], &[(Some(entry(7, 1, 100, 200, 3, -3)), fast)]);
        assert_eq!(
            apply(&snapshot),
            Err(DecodeError::FieldOutOfRange { id: 7, field: "qvy" })
        );
        let unsorted = [base[1], base[0]];
        let ok = encode_delta(&[], &[]);
        assert_eq!(
            apply_snapshot(&ok, &unsorted, &mut Vec::new()),
            Err(DecodeError::NotAscending { index: 1 })
        );
    }

    #[test]
    fn delta_of_removed_id_is_rejected() {
        // The encoder refuses this list in debug builds, so the snapshot is written by hand:
        // removed [7], update id 7 as a zero delta.
        let mut snapshot = encode_delta(&[], &[]);
        snapshot.truncate(SNAPSHOT_HEADER_BYTES);
        let mut w = BitWriter::new(&mut snapshot);
        w.write_ue(1, 3);
        w.write_ue(7, 4);
        w.write_ue(1, 3);
        w.write_ue(7, 4);
        w.write_bit(false);
        for k in [1, 1, 0, 0] {
            w.write_se(0, k);
        }
        w.finish();
        let base = example_baseline();
        assert_eq!(
            apply_snapshot(&snapshot, &base, &mut Vec::new()),
            Err(DecodeError::DeltaRemoved { id: 7 })
        );
    }

    #[test]
    fn framing_errors() {
        let mut view = Vec::new();
        let base = example_baseline();
        assert_eq!(
            apply_snapshot(&[], &base, &mut view),
            Err(DecodeError::Truncated { bit_offset: 0 })
        );
        assert_eq!(
            apply_snapshot(&[2; 30], &base, &mut view),
            Err(DecodeError::UnsupportedVersion { found: 2 })
        );
        assert_eq!(
            apply_snapshot(&EXAMPLE_FRAME[..7], &base, &mut view),
            Err(DecodeError::Truncated { bit_offset: 40 })
        );
        let mut long = EXAMPLE_FRAME.to_vec();
        long.extend_from_slice(&[0, 0]);
        assert_eq!(
            apply_snapshot(&long, &base, &mut view),
            Err(DecodeError::TrailingBytes { count: 2 })
        );
        // The example's stream is 87 bits, so bit 7 of the last byte is padding.
        let mut padded = EXAMPLE_FRAME;
        padded[27] |= 0x80;
        assert_eq!(
            apply_snapshot(&padded, &base, &mut view),
            Err(DecodeError::NonZeroPadding {
                bit_offset: 27 * 8 + 7
            })
        );
        assert!(view.is_empty());
        // removed_count = 4097 (ue(3): w = 4105, 13 bits, so 9 zeros).
        let mut snapshot = EXAMPLE_FRAME[..SNAPSHOT_HEADER_BYTES].to_vec();
        let mut w = BitWriter::new(&mut snapshot);
        w.write_ue(4097, 3);
        w.finish();
        assert_eq!(
            apply_snapshot(&snapshot, &base, &mut view),
            Err(DecodeError::CountTooLarge { count: 4097 })
        );
        // Two removals: id u32::MAX, then any gap overflows.
        let mut snapshot = EXAMPLE_FRAME[..SNAPSHOT_HEADER_BYTES].to_vec();
        let mut w = BitWriter::new(&mut snapshot);
        w.write_ue(2, 3);
        w.write_ue(u32::MAX, 4);
        w.write_ue(0, 4);
        w.finish();
        assert_eq!(
            apply_snapshot(&snapshot, &base, &mut view),
            Err(DecodeError::IdOverflow {
                prev: u32::MAX,
                gap: 0
            })
        );
    }

    fn fields() -> impl Strategy<Value = (u8, u16, u16, i8, i8)> {
        (0u8..4, any::<u16>(), any::<u16>(), any::<i8>(), any::<i8>())
    }

    /// Mostly small ids so views overlap, sometimes any u32 so large gaps and the top of
    /// the id range are exercised.
    fn id() -> impl Strategy<Value = u32> {
        prop_oneof![4 => 0u32..96, 1 => any::<u32>(), 1 => (u32::MAX - 8)..=u32::MAX]
    }

    fn view_map() -> impl Strategy<Value = BTreeMap<u32, (u8, u16, u16, i8, i8)>> {
        prop::collection::btree_map(id(), fields(), 0..48)
    }

    fn to_view(map: &BTreeMap<u32, (u8, u16, u16, i8, i8)>) -> Vec<ViewEntry> {
        map.iter()
            .map(|(&id, &(kind, qx, qy, qvx, qvy))| entry(id, kind, qx, qy, qvx, qvy))
            .collect()
    }

    /// A tick interval dt, a baseline and a new view dt ticks later derived from it: each
    /// baseline entry is kept, removed, rewritten (kind kept), nudged from its baseline
    /// position, or dead-reckoned over dt and nudged, and random new ids are added.
    /// Velocities (from `fields`) take both signs.
    fn view_pair() -> impl Strategy<Value = (u32, Vec<ViewEntry>, Vec<ViewEntry>)> {
        (
            1u32..=200,
            view_map(),
            prop::collection::vec((0u8..5, fields(), -3i32..=3), 48),
            view_map(),
        )
            .prop_map(|(dt, base, ops, added)| {
                let mut new = BTreeMap::new();
                for ((&id, &f), (op, g, nudge)) in base.iter().zip(ops) {
                    let (kind, qx, qy, qvx, qvy) = f;
                    match op {
                        0 => {
                            new.insert(id, f);
                        }
                        1 => {}
                        2 => {
                            new.insert(id, (kind, g.1, g.2, g.3, g.4));
                        }
                        3 => {
                            let qx = qx.saturating_add_signed(nudge as i16);
                            let qvy = qvy.saturating_add(nudge as i8);
                            new.insert(id, (kind, qx, qy, qvx, qvy));
                        }
                        _ => {
                            let (px, py) = predict(&entry(id, kind, qx, qy, qvx, qvy), dt);
                            let on_track = |p: i32| (p + nudge).clamp(0, 65535) as u16;
                            let qvx = qvx.saturating_add(nudge as i8);
                            new.insert(id, (kind, on_track(px), on_track(py), qvx, qvy));
                        }
                    }
                }
                for (id, f) in added {
                    if !base.contains_key(&id) {
                        new.insert(id, f);
                    }
                }
                (dt, to_view(&base), to_view(&new))
            })
    }

    /// The removed ids and updates that turn `base` into `new`; unchanged entries are
    /// sent as zero deltas when `send_unchanged`.
    fn diff(
        base: &[ViewEntry],
        new: &[ViewEntry],
        send_unchanged: bool,
    ) -> (Vec<u32>, Vec<(Option<ViewEntry>, ViewEntry)>) {
        let old: BTreeMap<u32, ViewEntry> = base.iter().map(|e| (e.id, *e)).collect();
        let now: BTreeMap<u32, ViewEntry> = new.iter().map(|e| (e.id, *e)).collect();
        let removed = old.keys().filter(|id| !now.contains_key(id)).copied().collect();
        let updates = new
            .iter()
            .filter_map(|n| match old.get(&n.id) {
                None => Some((None, *n)),
                Some(o) if o != n || send_unchanged => Some((Some(*o), *n)),
                Some(_) => None,
            })
            .collect();
        (removed, updates)
    }

    /// A delta header `dt` ticks after its baseline; the baseline tick is near the top
    /// of the u32 range, so the snapshot's tick wraps for dt above 8.
    fn delta_header(dt: u32) -> SnapshotHeader {
        let baseline_tick = u32::MAX - 9;
        SnapshotHeader {
            tick: baseline_tick.wrapping_add(dt),
            baseline_tick: Some(baseline_tick),
            avatar_id: 42,
            score: 7,
        }
    }

    proptest! {
        #[test]
        fn round_trip((dt, base, new) in view_pair(), send_unchanged in any::<bool>()) {
            let (removed, updates) = diff(&base, &new, send_unchanged);
            let header = delta_header(dt);
            let mut snapshot = Vec::new();
            encode_snapshot(&mut snapshot, &header, &removed, &updates);
            let mut view = vec![entry(1, 0, 0, 0, 0, 0)];
            prop_assert_eq!(apply_snapshot(&snapshot, &base, &mut view), Ok(header));
            prop_assert_eq!(&view, &new);

            // The same view as a full snapshot.
            let full = SnapshotHeader { baseline_tick: None, ..header };
            let inserts: Vec<_> = new.iter().map(|e| (None, *e)).collect();
            encode_snapshot(&mut snapshot, &full, &[], &inserts);
            prop_assert_eq!(apply_snapshot(&snapshot, &base, &mut view), Ok(full));
            prop_assert_eq!(&view, &new);
        }

        #[test]
        fn length_never_exceeds_bound((dt, base, new) in view_pair()) {
            let (removed, updates) = diff(&base, &new, false);
            let mut payload_max = 0u64;
            let mut exact = 0u64;
            let mut prev = None;
            for &id in &removed {
                payload_max += u64::from(removal_bits_max(id));
                exact += u64::from(ue_bits(id_gap(prev, id), ID_GAP_K));
                prev = Some(id);
            }
            let mut prev = None;
            for (old, n) in &updates {
                let max = update_bits_max(n.id, old.as_ref(), n, dt);
                payload_max += u64::from(max);
                exact += u64::from(max - ue_bits(n.id, ID_GAP_K) + ue_bits(id_gap(prev, n.id), ID_GAP_K));
                prev = Some(n.id);
            }
            let mut snapshot = Vec::new();
            encode_snapshot(&mut snapshot, &delta_header(dt), &removed, &updates);
            let (rc, uc) = (removed.len() as u32, updates.len() as u32);
            prop_assert!(snapshot.len() <= snapshot_bytes_max(rc, uc, payload_max));
            // With the true gaps the cost functions give the exact length.
            prop_assert_eq!(snapshot.len(), snapshot_bytes_max(rc, uc, exact));
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let mut view = Vec::new();
            let _ = apply_snapshot(&bytes, &example_baseline(), &mut view);
            let _ = decode_snapshot_header(&bytes);
        }

        #[test]
        fn random_stream_after_valid_header_never_panics(
            tail in prop::collection::vec(any::<u8>(), 0..256),
            base in view_map(),
        ) {
            let mut snapshot = EXAMPLE_FRAME[..SNAPSHOT_HEADER_BYTES].to_vec();
            snapshot.extend_from_slice(&tail);
            let base = to_view(&base);
            let mut view = Vec::new();
            if apply_snapshot(&snapshot, &base, &mut view).is_ok() {
                prop_assert!(view.windows(2).all(|w| w[0].id < w[1].id));
            } else {
                prop_assert!(view.is_empty());
            }
        }

        #[test]
        fn truncated_and_extended_snapshots_fail((dt, base, new) in view_pair(), extra in 1usize..4) {
            let (removed, updates) = diff(&base, &new, false);
            let mut snapshot = Vec::new();
            encode_snapshot(&mut snapshot, &delta_header(dt), &removed, &updates);
            let mut view = Vec::new();
            for len in 0..snapshot.len() {
                let result = apply_snapshot(&snapshot[..len], &base, &mut view);
                prop_assert!(matches!(result, Err(DecodeError::Truncated { .. })), "len {}: {:?}", len, result);
            }
            snapshot.extend(std::iter::repeat_n(0, extra));
            prop_assert_eq!(apply_snapshot(&snapshot, &base, &mut view), Err(DecodeError::TrailingBytes { count: extra }));
        }
    }
}
