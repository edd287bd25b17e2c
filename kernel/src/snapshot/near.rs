//! A snapshot build's candidates: the entities near a client, scanned from the two grids
//! as one integer key each (squared distance, then id) with their slot, and the chosen
//! ones sorted by id.

use crate::boids::{Avatar, Boid};
use crate::grid::UniformGrid;

/// The entities a build looks at: the two grids and what they index.
#[derive(Clone, Copy)]
pub(crate) struct Entities<'a> {
    /// The boids in the slot order of `grid`, which is built on their positions.
    pub boids: &'a [Boid],
    pub grid: &'a UniformGrid,
    /// The avatars in the slot order of `avatar_grid`, which is built on their positions.
    pub avatars: &'a [Avatar],
    pub avatar_grid: &'a UniformGrid,
    /// Avatar ids follow the boids': a slot's avatar is `boid_count + slot`.
    pub boid_count: u32,
}

/// Bits of an entity id in a candidate's key: ids are below
/// `BOID_COUNT_MAX + CLIENT_SLOTS_MAX`, and a squared view radius (at most a quarter of a
/// world below 2^22 mm, so 2^40) fits above them.
pub(super) const NEAR_ID_BITS: u32 = 20;
pub(super) const NEAR_ID_MASK: u64 = (1 << NEAR_ID_BITS) - 1;
const _: () =
    assert!((crate::config::BOID_COUNT_MAX + crate::config::CLIENT_SLOTS_MAX) as u64 <= NEAR_ID_MASK + 1);
const _: () = assert!(40 + 1 + NEAR_ID_BITS <= 64);
/// Marks an avatar's slot in a candidate (boid slots are below `BOID_COUNT_MAX`).
pub(super) const NEAR_AVATAR: u32 = 1 << 31;
/// Oldest last build whose nearest entities a build starts its scan from (one second at
/// 60 Hz): past it the widening by what can have moved outgrows the view.
pub(super) const NEAR_HINT_TICKS_MAX: u32 = 60;

/// Writes into `near` the candidates within `reach2` (squared) of `own` as
/// `(d2 << NEAR_ID_BITS | id, slot)`, boids first, and returns how many there are. The
/// own avatar counts as at distance 0, so it sorts first whatever the rounding.
pub(super) fn scan_near(
    ctx: &Entities<'_>,
    near: &mut Vec<(u64, u32)>,
    own: &Avatar,
    own_id: u32,
    reach2: u64,
) -> usize {
    // The scan's half-width: the square root of `reach2`, rounded up.
    let root = reach2.isqrt();
    let reach = (root + u64::from(root * root < reach2)) as i32;
    let (px, py) = (own.x_mm as i64, own.y_mm as i64);
    let d2_of = |x: i32, y: i32| {
        let (dx, dy) = (x as i64 - px, y as i64 - py);
        (dx * dx + dy * dy) as u64
    };
    // Every item of a run is written and only those in reach are kept (the count moves
    // by the comparison): about half are not, and a branch on it mispredicted so often
    // that the scan cost 8 cycles an item.
    let mut kept = 0;
    let ids = ctx.grid.order();
    for run in ctx.grid.slot_runs_near(own.x_mm, own.y_mm, reach) {
        let out = reserve_run(near, kept, run.len());
        let mut m = 0;
        for k in run {
            let b = &ctx.boids[k];
            let d2 = d2_of(b.x_mm, b.y_mm);
            out[m] = (d2 << NEAR_ID_BITS | u64::from(ids[k]), k as u32);
            m += usize::from(d2 <= reach2);
        }
        kept += m;
    }
    for run in ctx.avatar_grid.slot_runs_near(own.x_mm, own.y_mm, reach) {
        let out = reserve_run(near, kept, run.len());
        let mut m = 0;
        for k in run {
            let av = &ctx.avatars[k];
            let id = ctx.boid_count + av.slot;
            let d2 = if id == own_id { 0 } else { d2_of(av.x_mm, av.y_mm) };
            out[m] = (d2 << NEAR_ID_BITS | u64::from(id), k as u32 | NEAR_AVATAR);
            m += usize::from(d2 <= reach2);
        }
        kept += m;
    }
    kept
}

/// The `len` entries of `near` from `start` on, for a run of candidates to be written
/// into: `near` grows to hold them, and is never shortened, so warm builds find it long
/// enough already and write nothing but candidates.
fn reserve_run(near: &mut Vec<(u64, u32)>, start: usize, len: usize) -> &mut [(u64, u32)] {
    if near.len() < start + len {
        near.resize(start + len, (0, 0));
    }
    &mut near[start..start + len]
}

/// Sorts `(id << 32 | index)` keys with unique ids ascending: a radix sort by the id's
/// bytes, least significant first, as many as the largest id has (two in any world below
/// 65,536 entities). Keying a view's 128 candidates and sorting them took 2.0k cycles a
/// build this way, 2.6k with the comparison sort, which mispredicts its way through them
/// (1,000-client `synth`).
pub(super) fn sort_by_id(keys: &mut Vec<u64>, next: &mut Vec<u64>) {
    let id_max = keys.iter().map(|&key| (key >> 32) as u32).max().unwrap_or(0);
    let id_bits = u32::BITS - id_max.leading_zeros();
    let mut shift = 32;
    while shift < 32 + id_bits {
        let mut start = [0u32; 257];
        for &key in keys.iter() {
            start[((key >> shift) & 0xff) as usize + 1] += 1;
        }
        for b in 1..257 {
            start[b] += start[b - 1];
        }
        next.clear();
        next.resize(keys.len(), 0);
        for &key in keys.iter() {
            let b = ((key >> shift) & 0xff) as usize;
            next[start[b] as usize] = key;
            start[b] += 1;
        }
        std::mem::swap(keys, next);
        shift += 8;
    }
    debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The radix sort orders keys as a comparison sort does, for ids of one, two and
    /// three bytes and for none at all.
    #[test]
    fn sort_by_id_equals_a_comparison_sort() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next_u32 = |m: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(m)) as u32
        };
        let (mut keys, mut next) = (Vec::new(), Vec::new());
        for (len, id_end) in [
            (0, 1),
            (1, 1),
            (128, 200),
            (128, 6_024),
            (300, 70_000),
            (128, 1 << 20),
            (50, 512),
            (128, u32::MAX),
        ] {
            let mut ids: Vec<u32> = Vec::new();
            while ids.len() < len {
                let id = next_u32(id_end);
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            keys.clear();
            keys.extend(
                ids.iter()
                    .enumerate()
                    .map(|(i, &id)| u64::from(id) << 32 | i as u64),
            );
            let mut expected = keys.clone();
            expected.sort_unstable();
            sort_by_id(&mut keys, &mut next);
            assert_eq!(keys, expected, "{len} ids below {id_end}");
        }
    }
}
