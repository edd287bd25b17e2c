//! How far out a number of items surely lie, from a grid's cell counts alone: what lets a
//! snapshot build scan only as far as its nearest 128 entities.

use super::UniformGrid;

impl UniformGrid {
    /// The square of cells `ring` cells out from the cell of (x, y), clipped to the grid:
    /// the squared distance from (x, y) to its farthest corner, the items it holds, and
    /// whether it covers the whole grid.
    fn ring_box(&self, x_mm: i32, y_mm: i32, ring: i32) -> (u64, usize, bool) {
        let (cx, cy) = (self.coord(x_mm), self.coord(y_mm));
        let last = self.cols - 1;
        let (x0, x1) = ((cx - ring).max(0), (cx + ring).min(last));
        let (y0, y1) = ((cy - ring).max(0), (cy + ring).min(last));
        let held: usize = (y0..=y1)
            .map(|row| {
                let first = self.cell_start[(row * self.cols + x0) as usize];
                let end = self.cell_start[(row * self.cols + x1 + 1) as usize];
                (end - first) as usize
            })
            .sum();
        // Items lie inside their cells, so no farther than the square's corners.
        let reach = |v: i32, c0: i32, c1: i32| {
            let (lo, hi) = (c0 * self.cell_mm, (c1 + 1) * self.cell_mm - 1);
            i64::from((v - lo).max(hi - v).max(0))
        };
        let (dx, dy) = (reach(x_mm, x0, x1), reach(y_mm, y0, y1));
        (
            (dx * dx + dy * dy) as u64,
            held,
            (x0, y0, x1, y1) == (0, 0, last, last),
        )
    }
}

/// Rings of cells `d2_holding` grows a grid's square by at most.
const D2_HOLDING_RINGS_MAX: i32 = 16;

/// A squared distance from (x, y) within which at least `count` items of `grids` lie,
/// found from cell counts alone, or `None` when none is found within `radius_mm`. Each
/// grid's squares of cells grow ring by ring around (x, y), taken in the order of their
/// farthest corners, until the squares taken hold `count` items: every item in them is no
/// farther than the last corner. A search for the `count` nearest items need look no
/// farther: it is how a snapshot build skips most of its view radius.
pub(crate) fn d2_holding(
    grids: [&UniformGrid; 2],
    x_mm: i32,
    y_mm: i32,
    radius_mm: i32,
    count: usize,
) -> Option<u64> {
    // Too few items anywhere: no square can hold `count`, and the search would walk every
    // ring out to the radius for nothing (quadratic in it on a small-celled world).
    if grids[0].order.len() + grids[1].order.len() < count {
        return None;
    }
    let r2 = (radius_mm as u64).pow(2);
    let mut ring = [0i32; 2];
    let mut held = [0usize; 2];
    let mut done = [false; 2];
    loop {
        let next = |g: usize| {
            (!done[g])
                .then(|| grids[g].ring_box(x_mm, y_mm, ring[g]))
                .filter(|&(d2, _, _)| d2 <= r2)
        };
        let (g, (d2, items, covers_all)) = match (next(0), next(1)) {
            (None, None) => return None,
            (Some(a), None) => (0, a),
            (None, Some(b)) => (1, b),
            (Some(a), Some(b)) => {
                if a.0 <= b.0 {
                    (0, a)
                } else {
                    (1, b)
                }
            }
        };
        held[g] = items;
        ring[g] += 1;
        // A square of many rings costs as much to count as the scan it would save.
        done[g] = covers_all || ring[g] > D2_HOLDING_RINGS_MAX;
        if held[0] + held[1] >= count {
            return Some(d2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d2_holding_bounds_hold_enough_items() {
        // Two grids of different cell sizes over clustered and spread points, queried at
        // many places: every bound found must hold `count` items of the two together, and a
        // dense neighbourhood must yield a bound well inside the radius.
        let world = 200_000;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u32| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % u64::from(m)) as i32
        };
        let near: Vec<(i32, i32)> = (0..3_000)
            .map(|i| {
                if i % 3 == 0 {
                    (next(world), next(world))
                } else {
                    (90_000 + next(20_000), 90_000 + next(20_000))
                }
            })
            .collect();
        let avatars: Vec<(i32, i32)> = (0..400)
            .map(|_| (95_000 + next(8_000), 95_000 + next(8_000)))
            .collect();
        let mut a = UniformGrid::new(world, 5_000);
        let mut b = UniformGrid::new(world, 12_500);
        a.rebuild(near.len(), |i| near[i]);
        b.rebuild(avatars.len(), |i| avatars[i]);
        let mut found = 0;
        for q in 0..400 {
            let (x, y) = if q % 2 == 0 {
                (next(world), next(world))
            } else {
                (92_000 + next(16_000), 92_000 + next(16_000))
            };
            let radius = 1_000 + next(60_000);
            let count = 1 + next(300) as usize;
            let Some(d2) = d2_holding([&a, &b], x, y, radius, count) else {
                continue;
            };
            found += 1;
            assert!(d2 <= (radius as u64).pow(2), "bound {d2} beyond radius {radius}");
            let within = near
                .iter()
                .chain(&avatars)
                .filter(|&&(px, py)| {
                    let (dx, dy) = (i64::from(px - x), i64::from(py - y));
                    (dx * dx + dy * dy) as u64 <= d2
                })
                .count();
            assert!(
                within >= count,
                "query ({x}, {y}) r {radius}: {within} items within {d2}, asked {count}"
            );
        }
        assert!(found > 100, "only {found} of 400 queries found a bound");
        let dense = d2_holding([&a, &b], 100_000, 100_000, 50_000, 128).expect("a dense centre");
        assert!(dense < 20_000u64.pow(2), "dense bound {dense}");
    }
}
