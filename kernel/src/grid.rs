//! A uniform grid over the world, rebuilt each tick by a stable counting sort.
//!
//! Items in a cell are in ascending id order, so every scan of the grid visits
//! neighbours in the same order whatever the shard count.

/// Division of a world coordinate by a fixed cell size without a divide instruction:
/// `floor(v / d) = (v * m) >> 42` with `m = ceil(2^42 / d)` is exact for every
/// `0 <= v < 2^25` when `d < 2^17` (the rounding error `m * d - 2^42 < d` stays below one
/// step), which covers every coordinate inside the largest world (2^22 mm).
#[derive(Clone, Copy, Debug)]
pub struct CellDivisor {
    m: u64,
    limit: i32,
}

impl CellDivisor {
    /// A divisor for cells of `d` millimetres (1 ..= 100,000) in a grid of `cols` cells.
    pub fn new(d: u32, cols: i32) -> CellDivisor {
        assert!((1..1 << 17).contains(&d), "cell size {d} mm out of range");
        CellDivisor {
            m: (1u64 << 42).div_ceil(d as u64),
            limit: cols - 1,
        }
    }

    /// The cell of coordinate `v`, clamped into `0..cols`.
    #[inline]
    pub fn cell(&self, v: i32) -> i32 {
        if v <= 0 {
            0
        } else if v >= 1 << 25 {
            self.limit
        } else {
            (((v as u64 * self.m) >> 42) as i32).min(self.limit)
        }
    }
}

/// Points bucketed into square cells; `order` lists item ids cell by cell.
#[derive(Clone, Debug)]
pub struct UniformGrid {
    cell_mm: i32,
    cols: i32,
    div: CellDivisor,
    /// `cell_start[c]..cell_start[c + 1]` indexes `order` for cell `c`.
    cell_start: Vec<u32>,
    /// Item ids sorted by cell, then id.
    order: Vec<u32>,
    /// The cell of each item, by id (scratch kept to avoid recomputing).
    cell_of_item: Vec<u32>,
}

impl UniformGrid {
    /// A grid covering `0..world_size_mm` in both axes with cells of `cell_mm`.
    pub fn new(world_size_mm: u32, cell_mm: u32) -> UniformGrid {
        let cell_mm = cell_mm.max(1) as i32;
        let cols = (world_size_mm as i32 + cell_mm - 1) / cell_mm;
        let cols = cols.max(1);
        UniformGrid {
            cell_mm,
            cols,
            div: CellDivisor::new(cell_mm as u32, cols),
            cell_start: vec![0; (cols * cols + 1) as usize],
            order: Vec::new(),
            cell_of_item: Vec::new(),
        }
    }

    /// Cell edge in millimetres.
    pub fn cell_mm(&self) -> i32 {
        self.cell_mm
    }

    /// Cells per row.
    pub fn cols(&self) -> i32 {
        self.cols
    }

    /// The column (or row) of a coordinate, clamped into the grid.
    #[inline]
    pub fn coord(&self, v_mm: i32) -> i32 {
        self.div.cell(v_mm)
    }

    /// Rebuilds from item positions, in id order. Allocates only when `count` grows.
    pub fn rebuild(&mut self, count: usize, position: impl Fn(usize) -> (i32, i32)) {
        self.cell_start.fill(0);
        self.cell_of_item.resize(count, 0);
        self.order.resize(count, 0);
        for i in 0..count {
            let (x, y) = position(i);
            let c = (self.coord(y) * self.cols + self.coord(x)) as u32;
            self.cell_of_item[i] = c;
            self.cell_start[c as usize + 1] += 1;
        }
        for c in 1..self.cell_start.len() {
            self.cell_start[c] += self.cell_start[c - 1];
        }
        // Stable scatter: walking ids upwards keeps each cell's ids ascending. The running
        // cursor borrows `cell_start[c]` and is restored by the shift below.
        for i in 0..count {
            let c = self.cell_of_item[i] as usize;
            let slot = self.cell_start[c];
            self.order[slot as usize] = i as u32;
            self.cell_start[c] += 1;
        }
        for c in (1..self.cell_start.len()).rev() {
            self.cell_start[c] = self.cell_start[c - 1];
        }
        self.cell_start[0] = 0;
    }

    /// The ids in cell (cx, cy), ascending.
    #[inline]
    pub fn cell(&self, cx: i32, cy: i32) -> &[u32] {
        let c = (cy * self.cols + cx) as usize;
        &self.order[self.cell_start[c] as usize..self.cell_start[c + 1] as usize]
    }

    /// The index range into `order()` of cell (cx, cy).
    #[inline]
    pub fn cell_range(&self, cx: i32, cy: i32) -> std::ops::Range<usize> {
        let c = (cy * self.cols + cx) as usize;
        self.cell_start[c] as usize..self.cell_start[c + 1] as usize
    }

    /// All ids, cell by cell.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// Calls `visit(id)` for every item in cells overlapping the square of half-width
    /// `radius_mm` around (x, y), row by row, ids ascending within a cell.
    #[inline]
    pub fn for_each_near(&self, x_mm: i32, y_mm: i32, radius_mm: i32, mut visit: impl FnMut(u32)) {
        let (x0, x1) = (
            self.coord(x_mm.saturating_sub(radius_mm)),
            self.coord(x_mm.saturating_add(radius_mm)),
        );
        let (y0, y1) = (
            self.coord(y_mm.saturating_sub(radius_mm)),
            self.coord(y_mm.saturating_add(radius_mm)),
        );
        for cy in y0..=y1 {
            for cx in x0..=x1 {
                for &id in self.cell(cx, cy) {
                    visit(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_divisor_is_exact_over_the_largest_world() {
        for d in [
            1u32, 7, 999, 1000, 1024, 2_500, 8_000, 15_000, 65_537, 99_999, 100_000,
        ] {
            let cols = ((1u32 << 22).div_ceil(d)) as i32;
            let div = CellDivisor::new(d, cols);
            for v in (0..1i32 << 22).step_by(if d < 100 { 1 } else { 3 }) {
                assert_eq!(div.cell(v), (v / d as i32).min(cols - 1), "v {v} d {d}");
            }
            assert_eq!(div.cell(-5), 0);
            assert_eq!(div.cell(i32::MAX), cols - 1);
        }
    }

    #[test]
    fn counting_sort_is_stable_and_complete() {
        let pts: Vec<(i32, i32)> = (0..500)
            .map(|i| ((i * 7919) % 10_000, (i * 104_729) % 10_000))
            .collect();
        let mut g = UniformGrid::new(10_000, 1_000);
        g.rebuild(pts.len(), |i| pts[i]);
        let mut seen = g.order().to_vec();
        seen.sort_unstable();
        assert_eq!(seen, (0..500).collect::<Vec<u32>>());
        for cy in 0..g.cols() {
            for cx in 0..g.cols() {
                let ids = g.cell(cx, cy);
                assert!(ids.windows(2).all(|w| w[0] < w[1]));
                for &id in ids {
                    let (x, y) = pts[id as usize];
                    assert_eq!((g.coord(x), g.coord(y)), (cx, cy));
                }
            }
        }
        let mut near = Vec::new();
        g.for_each_near(5_000, 5_000, 1_500, |id| near.push(id));
        for (i, &(x, y)) in pts.iter().enumerate() {
            if (x - 5_000).abs() <= 1_000 && (y - 5_000).abs() <= 1_000 {
                assert!(near.contains(&(i as u32)), "point {i} missing");
            }
        }
    }
}
