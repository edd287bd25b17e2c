//! The bit-level layer: exp-Golomb codes' golden vectors, the writer against the format
//! spelled out bit by bit, and the reader's refusals.

use super::*;
use proptest::prelude::*;

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

proptest! {
    /// Any run of writes lays its bits down exactly as one bit at a time would, after
    /// bytes already in the vector, with `bit_len` right at every step.
    #[test]
    fn writes_equal_bit_by_bit(prefix in proptest::collection::vec(any::<u8>(), 0..3), writes in proptest::collection::vec((any::<u64>(), 0u32..=64), 0..40)) {
        let mut bytes = prefix.clone();
        let mut expected = prefix.clone();
        let mut expected_bits = 0u64;
        let mut w = BitWriter::new(&mut bytes);
        for &(value, count) in &writes {
            w.write_bits(value, count);
            for i in 0..u64::from(count) {
                if expected_bits % 8 == 0 {
                    expected.push(0);
                }
                let bit = ((value >> i) & 1) as u8;
                *expected.last_mut().unwrap() |= bit << (expected_bits % 8);
                expected_bits += 1;
            }
            prop_assert_eq!(w.bit_len(), expected_bits);
        }
        prop_assert_eq!(w.finish(), expected_bits);
        prop_assert_eq!(bytes, expected);
    }
}

proptest! {
    /// Codes and plain fields mixed lay their bits down as the format spells them out
    /// one bit at a time (a code: n - k - 1 zeros, then w = v + 2^k from its top bit),
    /// across word boundaries, codes longer than a word included, and read back.
    #[test]
    fn codes_and_fields_mixed_equal_bit_by_bit(writes in proptest::collection::vec((any::<bool>(), any::<u64>(), 0u32..=64, 0u32..=EG_ORDER_MAX), 0..60)) {
        // (is a code, value, bit count of a field, order of a code); codes are mostly
        // short, as snapshots write them, and some go up to u32::MAX.
        let writes: Vec<(bool, u64, u32, u32)> = writes
            .into_iter()
            .map(|(is_code, value, count, k)| match (is_code, count % 4) {
                (true, 0) => (true, value & u64::from(u32::MAX), 0, k),
                (true, _) => (true, value % 300, 0, k),
                (false, _) => (false, value & u64::MAX.checked_shr(64 - count).unwrap_or(0), count, 0),
            })
            .collect();
        let bit = |b: bool| if b { '1' } else { '0' };
        let mut expected = String::new();
        for &(is_code, value, count, k) in &writes {
            if is_code {
                let code = value + (1u64 << k);
                let n = 64 - code.leading_zeros();
                expected.extend(std::iter::repeat_n('0', (n - k - 1) as usize));
                expected.extend((0..n).rev().map(|i| bit(code >> i & 1 == 1)));
            } else {
                expected.extend((0..count).map(|i| bit(value >> i & 1 == 1)));
            }
        }
        let mut bytes = Vec::new();
        let mut w = BitWriter::new(&mut bytes);
        for &(is_code, value, count, k) in &writes {
            if is_code {
                w.write_ue(value as u32, k);
            } else {
                w.write_bits(value, count);
            }
        }
        let len_bits = w.finish();
        let written: String = (0..len_bits).map(|i| bit(bytes[(i / 8) as usize] >> (i % 8) & 1 == 1)).collect();
        prop_assert_eq!(&written, &expected);
        let mut r = BitReader::new(&bytes);
        for &(is_code, value, count, k) in &writes {
            if is_code {
                prop_assert_eq!(r.read_ue(k), Ok(value as u32));
            } else {
                prop_assert_eq!(r.read_bits(count), Ok(value));
            }
        }
    }
}

#[test]
fn longest_codes_of_every_order_round_trip() {
    // Codes of 64 and 65 bits (v near u32::MAX at orders 0 and 1) cross every limit of
    // the writer's words.
    for k in 0..=EG_ORDER_MAX {
        for v in [0, 1, u32::MAX - 1, u32::MAX] {
            let bits = ue_string(v, k);
            assert_eq!(bits.len() as u32, ue_bits(v, k), "ue({k}) of {v}");
            let mut bytes = Vec::new();
            let mut w = BitWriter::new(&mut bytes);
            w.write_bit(true);
            w.write_ue(v, k);
            w.write_bit(true);
            w.finish();
            let mut r = BitReader::new(&bytes);
            assert_eq!(r.read_bit(), Ok(true));
            assert_eq!(r.read_ue(k), Ok(v), "ue({k}) of {v}");
            assert_eq!(r.read_bit(), Ok(true));
        }
    }
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The word-at-a-time reader reads what the bit-at-a-time one reads, and stops at the
    /// same error, over any bytes (mostly zeros, as long codes are, or random): codes of
    /// every order, fields of every width, until either fails.
    #[test]
    fn word_reads_equal_bit_reads(
        bytes in proptest::collection::vec(prop_oneof![3 => Just(0u8), 1 => Just(1u8), 6 => any::<u8>()], 0..48),
        reads in proptest::collection::vec((any::<bool>(), 0u32..=64, 0u32..=EG_ORDER_MAX), 1..80),
    ) {
        let (mut fast, mut slow) = (BitReader::new(&bytes), BitReader::new(&bytes));
        for &(is_code, count, k) in &reads {
            let (a, b) = if is_code {
                (fast.read_ue(k).map(u64::from), slow.read_ue_bitwise(k).map(u64::from))
            } else {
                (fast.read_bits(count), slow.read_bits_bitwise(count))
            };
            prop_assert_eq!(&a, &b, "is_code {} count {} k {}", is_code, count, k);
            if a.is_err() {
                break;
            }
            prop_assert_eq!(fast.bit_pos(), slow.bit_pos());
        }
    }
}
