//! The bit layer of the snapshot format: the stream writer and reader and the exp-Golomb
//! codes they carry.

#[cfg(test)]
use super::zigzag;
use super::{unzigzag, DecodeError, EG_ORDER_MAX};

/// `ue(k)` of `v` as (w, length): the code is w = v + 2^k written in `length` bits from
/// the most significant, its leading zeros being the code's zero prefix.
#[inline(always)]
pub(super) fn ue_code(v: u32, k: u32) -> (u64, u32) {
    debug_assert!(k <= EG_ORDER_MAX, "exp-Golomb order {k} too large");
    let k = k.min(EG_ORDER_MAX);
    let w = u64::from(v) + (1u64 << k);
    let n = u64::BITS - w.leading_zeros();
    (w, 2 * n - k - 1)
}

/// Appends a bit stream to a byte vector: bit i of the stream is bit (i % 8) of the
/// i / 8-th appended byte. It allocates only when the vector runs out of capacity.
/// Bits still pending in a partial byte are written by [`BitWriter::finish`]; dropping
/// the writer without calling it loses them.
#[derive(Debug)]
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Pending bits in stream order from the most significant down: the first pending
    /// bit is bit `acc_bits - 1`. Fewer than 64 between calls, so up to 64 more always
    /// fit, and whole 64-bit words go out at once (a byte at a time cost the snapshot
    /// build a sixth of its time; 32-bit words 2.5% of the 1,000-client step more than
    /// these). Held in this order, an exp-Golomb code (zeros, then its value from the
    /// most significant bit) is the value itself shifted in; each outgoing word is
    /// reversed once into the stream's least-significant-first order, instead of every
    /// code being reversed (a third of the encoding's time).
    acc: u128,
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
    #[inline(always)]
    pub fn write_bit(&mut self, bit: bool) {
        self.push_msb_first(u64::from(bit), 1);
    }

    /// Writes the low `count` bits of `value` (at most 64), least significant first.
    // Always inlined: called for every field of every new entry, and a call costs as
    // much as the write (a tenth of the snapshot build when it was a call).
    #[inline(always)]
    pub fn write_bits(&mut self, value: u64, count: u32) {
        debug_assert!(count <= 64, "write_bits count {count} too large");
        let count = count.min(64);
        if count == 0 {
            return;
        }
        // Reversed, the field's first bit (its least significant) leads.
        let reversed = value.reverse_bits() >> (u64::BITS - count);
        self.push_msb_first(reversed, count);
    }

    /// Writes the low `count` (at most 64) bits of `code`, the most significant first.
    #[inline(always)]
    fn push_msb_first(&mut self, code: u64, count: u32) {
        debug_assert!(count <= 64 && self.acc_bits < 64);
        let chunk = code & u64::MAX.checked_shr(64 - count).unwrap_or(0);
        self.acc = self.acc << count | u128::from(chunk);
        self.acc_bits += count;
        if self.acc_bits >= 64 {
            let rest_bits = self.acc_bits - 64;
            let word = (self.acc >> rest_bits) as u64;
            self.out.extend_from_slice(&word.reverse_bits().to_le_bytes());
            self.acc &= (1u128 << rest_bits) - 1;
            self.acc_bits = rest_bits;
        }
    }

    /// Writes `ue(k)` of `v`: (n - k - 1) zero bits, then the n bits of w = v + 2^k
    /// from the most significant to the least.
    #[inline(always)]
    pub fn write_ue(&mut self, v: u32, k: u32) {
        self.write_codes([ue_code(v, k)]);
    }

    /// Writes codes made by [`ue_code`] (or `(0, 1)`, a zero bit), in order: joined
    /// into one write when they fit 64 bits together, as a delta's six usually do, which
    /// spares the stream's bookkeeping between them.
    #[inline(always)]
    pub(super) fn write_codes<const N: usize>(&mut self, codes: [(u64, u32); N]) {
        let total: u32 = codes.iter().map(|&(_, len)| len).sum();
        if total <= 64 {
            // Only the first code may be 64 bits long, and it shifts nothing.
            let joined = codes
                .iter()
                .fold(0u64, |acc, &(w, len)| acc.checked_shl(len).unwrap_or(0) | w);
            self.push_msb_first(joined, total);
        } else {
            for (w, len) in codes {
                // Zeros first: a code may be longer than 64 bits with them.
                let n = (u64::BITS - w.leading_zeros()).max(1).min(len);
                self.push_msb_first(0, len - n);
                self.push_msb_first(w, n);
            }
        }
    }

    /// Writes `se(k)` of `v`: zigzag, then `ue(k)`. Snapshots join their signed codes
    /// with [`BitWriter::write_codes`]; this is the codes' golden vectors' writer.
    #[cfg(test)]
    pub fn write_se(&mut self, v: i32, k: u32) {
        self.write_ue(zigzag(v), k);
    }

    /// Pads with zero bits to the next byte boundary and flushes. Returns the number of
    /// bits written, padding excluded.
    pub fn finish(self) -> u64 {
        let bits = self.bit_len();
        let pending_bytes = self.acc_bits.div_ceil(8) as usize;
        // The pending bits moved to the top of a word, then reversed to its bottom; the
        // zeros below them become the padding.
        let word = ((self.acc << (64 - self.acc_bits)) as u64).reverse_bits();
        self.out.extend_from_slice(&word.to_le_bytes()[..pending_bytes]);
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

    /// Bits read so far.
    #[cfg(test)]
    pub fn bit_pos(&self) -> u64 {
        self.pos
    }

    fn len_bits(&self) -> u64 {
        self.bytes.len() as u64 * 8
    }

    /// Reads one bit.
    #[inline]
    pub fn read_bit(&mut self) -> Result<bool, DecodeError> {
        Ok(self.read_bits(1)? == 1)
    }

    /// The next bits from the current position as one word, the next bit lowest, and how
    /// many of its bits are the stream's (57 to 64); `None` within 8 bytes of the end.
    #[inline]
    fn peek(&self) -> Option<(u64, u32)> {
        let at = usize::try_from(self.pos / 8).ok()?;
        let word: [u8; 8] = self.bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
        let shift = (self.pos % 8) as u32;
        Some((u64::from_le_bytes(word) >> shift, 64 - shift))
    }

    /// Reads `count` bits (at most 64) into the low bits of the result, the first bit
    /// read being the least significant.
    #[inline]
    pub fn read_bits(&mut self, count: u32) -> Result<u64, DecodeError> {
        // One unaligned load where eight bytes remain (`read_bits_bitwise` near the end).
        if let Some((word, available)) = self.peek() {
            if count < available {
                self.pos += u64::from(count);
                return Ok(word & ((1u64 << count) - 1));
            }
        }
        self.read_bits_bitwise(count)
    }

    /// `read_bits` a byte at a time: near the end of the input and for the longest reads.
    pub(super) fn read_bits_bitwise(&mut self, count: u32) -> Result<u64, DecodeError> {
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

    /// Reads `ue(k)`. Where eight bytes remain, the code is found in one word: its zero
    /// prefix is the word's trailing zeros, and its `w` (the leading 1 and the low bits,
    /// most significant first in the stream) the next bits reversed. A bit at a time
    /// (`read_ue_bitwise`) it had been a fifth of a bot's CPU at 1,000 bots.
    #[inline]
    pub fn read_ue(&mut self, k: u32) -> Result<u32, DecodeError> {
        debug_assert!(k <= EG_ORDER_MAX, "exp-Golomb order {k} too large");
        if let Some((word, available)) = self.peek() {
            let zeros = word.trailing_zeros();
            // A u32 value has at most 32 - k zeros; longer prefixes are errors, which the
            // bitwise reader reports.
            if k <= EG_ORDER_MAX && zeros <= 32 - k && 2 * zeros + k < available {
                let w_bits = zeros + k + 1;
                let w = (word >> zeros).reverse_bits() >> (64 - w_bits);
                if let Ok(v) = u32::try_from(w - (1u64 << k)) {
                    self.pos += u64::from(zeros + w_bits);
                    return Ok(v);
                }
            }
        }
        self.read_ue_bitwise(k)
    }

    /// `read_ue` a bit at a time. A code whose value would exceed `u32::MAX` is rejected
    /// as soon as its zero prefix is too long, so a run of zero bytes cannot make this loop
    /// long.
    pub(super) fn read_ue_bitwise(&mut self, k: u32) -> Result<u32, DecodeError> {
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
