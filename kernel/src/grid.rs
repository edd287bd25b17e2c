//! A uniform grid over the world, rebuilt each tick by a stable counting sort.
//!
//! Items in a cell are in ascending id order, so every scan of the grid visits
//! neighbours in the same order whatever the shard count.
//!
//! The boid grid is rebuilt on the shards (`rebuild_sharded`), because a serial sort of
//! 50,000 boids is a fifth of a tick and would cap what a second shard can gain. The
//! sharded sort has one answer whatever the shard count — the stable order by (cell, id)
//! — and a test compares it with the serial one.

use crate::pool::{shard_range, ShardPool, SharedSlice, SHARD_COUNT_MAX};

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
    /// Scratch of the sharded rebuild: items per (shard, cell), turned into each
    /// shard's write cursor per cell: `shard_cell[shard * cells + cell]`.
    shard_cell: Vec<u32>,
    /// Scratch of the sharded rebuild: items per (shard, row of cells).
    shard_row: Vec<u32>,
    /// `band_first[b]..band_first[b + 1]`: the slots of `order` that shard `b` placed in
    /// the last `rebuild_sharded` (one band of whole rows of cells per shard).
    band_first: Vec<u32>,
    /// `band_rows[b]..band_rows[b + 1]`: the rows of cells of band `b` in the next
    /// `rebuild_sharded`, balanced on the last one's counts.
    band_rows: Vec<u32>,
    /// Scratch of the sharded rebuild: the band of each row, of each item (by id), the
    /// staged ids and cells (in the stager's id range, band by band), and where each
    /// shard's run for each band starts: `stage_first[shard * (shards + 1) + band]`.
    row_band: Vec<u8>,
    band_of_item: Vec<u8>,
    stage_id: Vec<u32>,
    stage_cell: Vec<u32>,
    stage_first: Vec<u32>,
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
            shard_cell: Vec::new(),
            shard_row: Vec::new(),
            band_first: Vec::new(),
            band_rows: Vec::new(),
            row_band: Vec::new(),
            band_of_item: Vec::new(),
            stage_id: Vec::new(),
            stage_cell: Vec::new(),
            stage_first: Vec::new(),
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

    /// Rebuilds from `items` on the pool's shards and copies the items into grid order
    /// into `gathered` (as long as `items`), so neighbour scans read memory in sequence.
    /// `staging` (as long as `items`) is scratch. The result equals `rebuild` followed by
    /// a serial gather, for every shard count. Allocates only when the item count grows.
    ///
    /// Each shard owns a *band* of whole rows of cells and places that band's items. The
    /// band cuts are the ones balanced on the previous rebuild's counts (items move little
    /// in a tick), so every shard knows the band of each of its items while it first reads
    /// them, and stages them band by band next to its own ids. A band's owner then streams
    /// the other shards' staged runs in order: cross-core traffic becomes sequential reads
    /// the prefetcher hides, not one cache miss per item. Which shard places what never
    /// changes the result, only how well the work is balanced.
    pub fn rebuild_sharded<T: Copy + Send + Sync>(
        &mut self,
        pool: &ShardPool,
        items: &[T],
        position: impl Fn(&T) -> (i32, i32) + Sync,
        gathered: &mut [T],
        staging: &mut [T],
    ) {
        assert_eq!(items.len(), gathered.len(), "gather buffer of the wrong length");
        assert_eq!(items.len(), staging.len(), "staging buffer of the wrong length");
        let n = items.len();
        let shards = pool.shard_count();
        if shards == 1 {
            self.rebuild(n, |i| position(&items[i]));
            for (g, &id) in gathered.iter_mut().zip(&self.order) {
                *g = items[id as usize];
            }
            self.band_first.clear();
            self.band_first.extend([0, n as u32]);
            return;
        }
        let (cols, div) = (self.cols as usize, self.div);
        let (rows, cells) = (cols, cols * cols);
        self.cell_of_item.resize(n, 0);
        self.band_of_item.resize(n, 0);
        self.stage_id.resize(n, 0);
        self.stage_cell.resize(n, 0);
        self.order.resize(n, 0);
        self.shard_cell.resize(shards * cells, 0);
        self.shard_row.resize(shards * rows, 0);
        self.stage_first.resize(shards * (shards + 1), 0);
        if self.band_rows.len() != shards + 1 {
            // No previous rebuild at this shard count: equal runs of rows until the first
            // rebuild has counted where the items are.
            self.band_rows.clear();
            self.band_rows
                .extend((0..=shards).map(|b| (rows * b / shards) as u32));
        }
        self.row_band.resize(rows, 0);
        for b in 0..shards {
            let run = self.band_rows[b] as usize..self.band_rows[b + 1] as usize;
            self.row_band[run].fill(b as u8);
        }

        // 1. Sharded by id range: each item's cell and band, the shard's items per cell
        // and per row, then the shard's items staged band by band in its own id range.
        {
            let row_band = &self.row_band;
            let cell_of_item = SharedSlice::new(&mut self.cell_of_item);
            let band_of_item = SharedSlice::new(&mut self.band_of_item);
            let shard_cell = SharedSlice::new(&mut self.shard_cell);
            let shard_row = SharedSlice::new(&mut self.shard_row);
            let stage_first = SharedSlice::new(&mut self.stage_first);
            let stage_id = SharedSlice::new(&mut self.stage_id);
            let stage_cell = SharedSlice::new(&mut self.stage_cell);
            let staging = SharedSlice::new(staging);
            pool.run(&|s| {
                let ids = shard_range(n, s, shards);
                // SAFETY: id ranges, and the shard's rows of counts and of stage starts, are
                // disjoint by shard.
                let (cell_of, band_of, counts, row_counts, first) = unsafe {
                    (
                        cell_of_item.range_mut(ids.clone()),
                        band_of_item.range_mut(ids.clone()),
                        shard_cell.range_mut(s * cells..(s + 1) * cells),
                        shard_row.range_mut(s * rows..(s + 1) * rows),
                        stage_first.range_mut(s * (shards + 1)..(s + 1) * (shards + 1)),
                    )
                };
                counts.fill(0);
                // One count per item, per cell; rows and bands are summed from the cells
                // (a counter bumped by every item would chain the loop through memory).
                for ((c, band), item) in cell_of
                    .iter_mut()
                    .zip(band_of.iter_mut())
                    .zip(&items[ids.clone()])
                {
                    let (x, y) = position(item);
                    let row = div.cell(y) as usize;
                    let cell = row * cols + div.cell(x) as usize;
                    (*c, *band) = (cell as u32, row_band[row]);
                    counts[cell] += 1;
                }
                for (total, row) in row_counts.iter_mut().zip(counts.chunks_exact(cols)) {
                    *total = row.iter().sum();
                }
                // Summed on the stack: the shards' rows of `stage_first` share cache lines.
                let mut in_band = [0u32; SHARD_COUNT_MAX + 1];
                for (row, &total) in row_counts.iter().enumerate() {
                    in_band[row_band[row] as usize + 1] += total;
                }
                // Stage starts (absolute slots), then place: ids stay ascending in each run.
                in_band[0] = ids.start as u32;
                for b in 1..=shards {
                    in_band[b] += in_band[b - 1];
                }
                first.copy_from_slice(&in_band[..=shards]);
                let mut cursor = in_band;
                for (id, (&c, &band)) in ids.zip(cell_of.iter().zip(band_of.iter())) {
                    let k = cursor[band as usize] as usize;
                    cursor[band as usize] += 1;
                    // SAFETY: `k` lies in this shard's id range, each slot written once.
                    unsafe {
                        *stage_id.get_mut(k) = id as u32;
                        *stage_cell.get_mut(k) = c;
                        *staging.get_mut(k) = items[id];
                    }
                }
            });
        }

        // 2. Serial: where each band's slots begin (the items staged for earlier bands, over
        // all shards), and the cuts for the next rebuild: one band per shard of about
        // n / shards items (a band may be empty when one row holds more than a share).
        let stage_first = &self.stage_first;
        let staged_before = |b: usize| {
            (0..shards)
                .map(|s| stage_first[s * (shards + 1) + b] - stage_first[s * (shards + 1)])
                .sum::<u32>()
        };
        self.band_first.clear();
        self.band_first.extend((0..=shards).map(staged_before));
        debug_assert_eq!(self.band_first[shards] as usize, n);
        let row_total = |row: usize| (0..shards).map(|s| self.shard_row[s * rows + row]).sum::<u32>();
        let mut next_rows = [rows as u32; SHARD_COUNT_MAX + 1];
        next_rows[0] = 0;
        let (mut band, mut seen) = (0, 0u32);
        for row in 0..rows {
            while band + 1 < shards && seen as usize >= n * (band + 1) / shards {
                band += 1;
                next_rows[band] = row as u32;
            }
            seen += row_total(row);
        }

        // 3 and 4. Sharded by band: each cell's first slot (and a write cursor, kept in
        // the first row of `shard_cell`), then the staged runs of the band from every
        // shard in shard order, i.e. in ascending id order, placed at the cursors.
        {
            let (band_rows, band_first) = (&self.band_rows, &self.band_first);
            let (stage_first, stage_id, stage_cell) = (&self.stage_first, &self.stage_id, &self.stage_cell);
            let staging = &*staging;
            let cell_start = SharedSlice::new(&mut self.cell_start);
            let shard_cell = SharedSlice::new(&mut self.shard_cell);
            let order = SharedSlice::new(&mut self.order);
            let gathered = SharedSlice::new(gathered);
            pool.run(&|b| {
                let band_cells = band_rows[b] as usize * cols..band_rows[b + 1] as usize * cols;
                let mut next = band_first[b];
                for c in band_cells.clone() {
                    // SAFETY: bands own disjoint runs of cells, in every row of counts.
                    unsafe { *cell_start.get_mut(c) = next };
                    let first = next;
                    for s in 0..shards {
                        next += unsafe { *shard_cell.get_mut(s * cells + c) };
                    }
                    unsafe { *shard_cell.get_mut(c) = first };
                }
                // SAFETY: as above; the cursors are the band's cells of the first row.
                let cursor = unsafe { shard_cell.range_mut(band_cells.clone()) };
                let lo = band_cells.start;
                for s in 0..shards {
                    let run = stage_first[s * (shards + 1) + b] as usize
                        ..stage_first[s * (shards + 1) + b + 1] as usize;
                    for k in run {
                        let cur = &mut cursor[stage_cell[k] as usize - lo];
                        let slot = *cur as usize;
                        *cur += 1;
                        // SAFETY: a band's cells own the band's run of slots.
                        unsafe {
                            *order.get_mut(slot) = stage_id[k];
                            *gathered.get_mut(slot) = staging[k];
                        }
                    }
                }
            });
        }
        self.cell_start[cells] = n as u32;
        self.band_rows.clear();
        self.band_rows.extend_from_slice(&next_rows[..=shards]);
    }

    /// The slots of `order()` that shard `band` placed in the last `rebuild_sharded`: a run
    /// of whole rows of cells, so the shard that works on them finds them in its cache.
    pub fn band(&self, band: usize) -> std::ops::Range<usize> {
        self.band_first[band] as usize..self.band_first[band + 1] as usize
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

    #[test]
    fn the_sharded_rebuild_equals_the_serial_one() {
        // Clustered points (many in few rows, as flocks are) and uniform ones, with counts
        // around the shard counts, so bands come out empty, lopsided and even.
        for n in [0usize, 1, 2, 5, 97, 3_000] {
            for clustered in [false, true] {
                let pts: Vec<(i32, i32)> = (0..n as i64)
                    .map(|i| {
                        let h = (i * 2_654_435_761) % 1_000_003;
                        if clustered {
                            (4_000 + (h % 900) as i32, 7_000 + (h / 900 % 300) as i32)
                        } else {
                            ((h % 10_000) as i32, (h * 7 % 10_000) as i32)
                        }
                    })
                    .collect();
                let mut serial = UniformGrid::new(10_000, 700);
                serial.rebuild(n, |i| pts[i]);
                for shards in [1usize, 2, 3, 4, 7] {
                    let pool = ShardPool::new(shards);
                    let mut g = UniformGrid::new(10_000, 700);
                    let (mut gathered, mut staging) = (vec![(0, 0); n], vec![(0, 0); n]);
                    // Three times: the first rebuild cuts bands blind, the later ones on the
                    // previous counts, and stale scratch would show.
                    for _ in 0..3 {
                        g.rebuild_sharded(&pool, &pts, |&p| p, &mut gathered, &mut staging);
                        assert_eq!(g.order, serial.order, "n {n}, shards {shards}");
                        assert_eq!(g.cell_start, serial.cell_start, "n {n}, shards {shards}");
                        let expected: Vec<_> = serial.order.iter().map(|&id| pts[id as usize]).collect();
                        assert_eq!(gathered, expected, "n {n}, shards {shards}");
                        // The bands tile the slots in order, each a run of whole rows.
                        let mut next = 0;
                        for b in 0..shards {
                            let band = g.band(b);
                            assert_eq!(band.start, next, "n {n}, shards {shards}, band {b}");
                            let row_start = |slot: usize| {
                                (0..g.cols as usize)
                                    .any(|row| g.cell_start[row * g.cols as usize] as usize == slot)
                            };
                            assert!(
                                row_start(band.start) || band.is_empty(),
                                "band {b} starts mid-row"
                            );
                            next = band.end;
                        }
                        assert_eq!(next, n, "n {n}, shards {shards}");
                    }
                }
            }
        }
    }
}
