//! Counter-based randomness: every draw is a pure function of (seed, tick, entity, stream).
//!
//! There is no generator state to carry, hash or checkpoint: replaying a tick on any
//! thread, in any order, draws the same numbers.

/// Jitter added to a boid's velocity each tick.
pub const STREAM_WANDER: u32 = 1;
/// Where a caught or initial boid (re)spawns.
pub const STREAM_SPAWN: u32 = 2;
/// Where a joining player's avatar appears.
pub const STREAM_JOIN: u32 = 3;
/// Terrain noise lattice values.
pub const STREAM_TERRAIN: u32 = 4;
/// Zone placement.
pub const STREAM_ZONES: u32 = 5;

/// The splitmix64 finaliser: a bijective mix with full avalanche.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64 random bits for (seed, tick, entity, stream).
#[inline]
pub fn draw(seed: u64, tick: u32, entity: u32, stream: u32) -> u64 {
    let a = mix64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let b = mix64(a ^ ((stream as u64) << 32 | tick as u64));
    mix64(b ^ (entity as u64).wrapping_mul(0xd6e8_feb8_6659_fd93))
}

/// A uniform value in `0..n` (n > 0) by multiply-shift; the bias is below 2^-32 for n < 2^32.
#[inline]
pub fn below(bits: u64, n: u32) -> u32 {
    debug_assert!(n > 0);
    (((bits >> 32) * n as u64) >> 32) as u32
}

/// A uniform value in `-r..=r` from the given bits.
#[inline]
pub fn symmetric(bits: u64, r: u32) -> i32 {
    below(bits, 2 * r + 1) as i32 - r as i32
}

/// Integer square root: the largest `s` with `s * s <= v`.
#[inline]
pub fn isqrt(v: u64) -> u64 {
    v.isqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ_by_every_key_part() {
        let base = draw(7, 10, 3, STREAM_WANDER);
        assert_eq!(base, draw(7, 10, 3, STREAM_WANDER));
        assert_ne!(base, draw(8, 10, 3, STREAM_WANDER));
        assert_ne!(base, draw(7, 11, 3, STREAM_WANDER));
        assert_ne!(base, draw(7, 10, 4, STREAM_WANDER));
        assert_ne!(base, draw(7, 10, 3, STREAM_SPAWN));
    }

    #[test]
    fn below_stays_in_range_and_spreads() {
        let mut seen = [0u32; 10];
        for e in 0..10_000 {
            let v = below(draw(1, 2, e, 3), 10);
            seen[v as usize] += 1;
        }
        for count in seen {
            assert!((800..1200).contains(&count), "{seen:?}");
        }
        for e in 0..1000 {
            let s = symmetric(draw(1, 2, e, 3), 5);
            assert!((-5..=5).contains(&s));
        }
    }

    #[test]
    fn isqrt_is_floor() {
        for v in [0u64, 1, 2, 3, 4, 15, 16, 17, 1 << 40, u64::MAX] {
            let s = isqrt(v);
            assert!(s * s <= v);
            assert!((s + 1).checked_mul(s + 1).is_none_or(|x| x > v));
        }
    }
}
