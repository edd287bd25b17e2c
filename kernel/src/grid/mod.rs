//! A uniform grid over the world, rebuilt each tick by a stable counting sort.
//!
//! Items in a cell are in ascending id order, so every scan of the grid visits
//! neighbours in the same order whatever the shard count.
//!
//! The boid grid is re-sorted on the shards (`resort_sharded`) from the previous grid
//! order, because a serial sort of 50,000 boids is a fifth of a tick and would cap what a
//! second shard can gain. The sharded sort has one answer whatever the shard count — the
//! order by (cell, id) — and a test compares it with the serial one.

use crate::pool::{ShardPool, SharedSlice, SHARD_COUNT_MAX};

mod near;
pub(crate) use near::d2_holding;

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

/// One shard's arrivals in a re-sort, on a cache line of its own: the shards push to
/// their lists at the same time.
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
struct Arrivals {
    cells: Vec<u32>,
    overflowed: bool,
}

/// Points bucketed into square cells; `order` lists item ids cell by cell.
#[derive(Clone, Debug)]
pub struct UniformGrid {
    cols: i32,
    cell_mm: i32,
    div: CellDivisor,
    /// `cell_start[c]..cell_start[c + 1]` indexes `order` for cell `c`.
    cell_start: Vec<u32>,
    /// Item ids sorted by cell, then id: the id of the item in each slot.
    order: Vec<u32>,
    /// The cell of each item, by id (scratch of `rebuild`).
    cell_of_item: Vec<u32>,
    /// The cell of each slot of `order`.
    cell_of_current: Vec<u32>,
    /// Scratch of `resort_sharded`: the next order, the new cell of each old slot and of
    /// each new slot.
    order_next: Vec<u32>,
    cell_of_slot: Vec<u32>,
    cell_of_next: Vec<u32>,
    /// Scratch of `resort_sharded`: per shard, the new cells its items arrived in from
    /// another cell (only those can be out of id order), and whether the list overflowed.
    arrivals: Vec<Arrivals>,
    /// When each cell was last checked for order (`resort_count`), so a cell with many
    /// arrivals is checked once.
    cell_checked: Vec<u32>,
    resort_count: u32,
    /// Scratch of `resort_sharded`: items per (shard, cell), `shard_cell[shard * cells +
    /// cell]`, turned in place into each shard's write cursor per cell; and items per
    /// (shard, row). A shard's rows of both are zero outside `shard_rows[shard]`, the rows
    /// it touched (cursors are only written there).
    shard_cell: Vec<u32>,
    shard_row: Vec<u32>,
    shard_rows: Vec<(u32, u32)>,
    /// `band_first[b]..band_first[b + 1]`: the slots of `order` in band `b`, a run of whole
    /// rows of cells (`band_rows[b]..band_rows[b + 1]`) holding about `1 / shards` of the
    /// items. Shard `b` works on band `b`.
    band_first: Vec<u32>,
    band_rows: Vec<u32>,
}

impl UniformGrid {
    /// A grid covering `0..world_size_mm` in both axes with cells of `cell_mm`.
    pub fn new(world_size_mm: u32, cell_mm: u32) -> UniformGrid {
        let cell_mm = cell_mm.max(1) as i32;
        let cols = (world_size_mm as i32 + cell_mm - 1) / cell_mm;
        let cols = cols.max(1);
        UniformGrid {
            cols,
            cell_mm,
            div: CellDivisor::new(cell_mm as u32, cols),
            cell_start: vec![0; (cols * cols + 1) as usize],
            order: Vec::new(),
            cell_of_item: Vec::new(),
            cell_of_current: Vec::new(),
            order_next: Vec::new(),
            cell_of_slot: Vec::new(),
            arrivals: Vec::new(),
            cell_checked: vec![0; (cols * cols) as usize],
            resort_count: 0,
            cell_of_next: Vec::new(),
            shard_cell: Vec::new(),
            shard_row: Vec::new(),
            shard_rows: Vec::new(),
            band_first: vec![0, 0],
            band_rows: vec![0, cols as u32],
        }
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

    /// Builds from items given by id (`items_by_id[id]`), copies them into grid order into
    /// `gathered`, and cuts `shards` bands for `resort_sharded`. Serial: this is the start
    /// of a world (construction, restore), not a step.
    pub fn build_gathered<T: Copy>(
        &mut self,
        shards: usize,
        items_by_id: &[T],
        position: impl Fn(&T) -> (i32, i32),
        gathered: &mut [T],
    ) {
        assert_eq!(
            items_by_id.len(),
            gathered.len(),
            "gather buffer of the wrong length"
        );
        assert!((1..=SHARD_COUNT_MAX).contains(&shards), "{shards} shards");
        self.rebuild(items_by_id.len(), |i| position(&items_by_id[i]));
        for (g, &id) in gathered.iter_mut().zip(&self.order) {
            *g = items_by_id[id as usize];
        }
        self.cell_of_current.clear();
        let cell_of_item = &self.cell_of_item;
        self.cell_of_current
            .extend(self.order.iter().map(|&id| cell_of_item[id as usize]));
        let cols = self.cols as usize;
        let cell_start = &self.cell_start;
        let (rows, first) = cut_bands(items_by_id.len(), cols, shards, |row| {
            cell_start[(row + 1) * cols] - cell_start[row * cols]
        });
        self.band_rows.clear();
        self.band_rows.extend_from_slice(&rows[..=shards]);
        self.band_first.clear();
        self.band_first.extend_from_slice(&first[..=shards]);
    }

    /// Re-sorts after the items moved: `items[k]` is the item that sat in slot `k` (id
    /// `order()[k]`), at its new position. Writes the items in the new grid order into
    /// `out` and cuts new bands on the new counts. The result is the one (cell, id) order,
    /// as `rebuild` over the items by id gives it, whatever the shard count.
    ///
    /// The work goes by band, and items move little in a tick, so a shard reads and writes
    /// almost only its own band: it counts the new cells of its band's items, computes the
    /// new cell starts of its new band, scatters its items by cell (in slot order, so a
    /// cell's items from one old cell stay ascending), and finally re-sorts by id the few
    /// cells of its new band where items arriving from other cells broke the order. Only
    /// items that change band cross to another core. Allocates only when the count grows.
    pub fn resort_sharded<T: Copy + Send + Sync>(
        &mut self,
        pool: &ShardPool,
        items: &[T],
        position: impl Fn(&T) -> (i32, i32) + Sync,
        out: &mut [T],
    ) {
        let n = items.len();
        let shards = pool.shard_count();
        assert_eq!(n, self.order.len(), "items and grid disagree on the count");
        assert_eq!(n, out.len(), "output buffer of the wrong length");
        assert_eq!(
            self.band_first.len(),
            shards + 1,
            "bands cut for another shard count"
        );
        let (cols, div) = (self.cols as usize, self.div);
        let (rows, cells) = (cols, cols * cols);
        self.order_next.resize(n, 0);
        self.cell_of_slot.resize(n, 0);
        self.cell_of_next.resize(n, 0);
        self.shard_cell.resize(shards * cells, 0);
        self.shard_row.resize(shards * rows, 0);
        self.shard_rows.resize(shards, (0, 0));
        // Arrivals are about 1% of the items a tick; past a quarter of a band's share the
        // fix-up below scans every slot instead of the list.
        let arrivals_max = n.div_ceil(shards) / 4 + 64;
        if self.arrivals.len() != shards || self.arrivals[0].cells.capacity() < arrivals_max {
            self.arrivals = (0..shards)
                .map(|_| Arrivals {
                    cells: Vec::with_capacity(arrivals_max),
                    overflowed: false,
                })
                .collect();
        }
        self.resort_count = self.resort_count.wrapping_add(1);
        if self.resort_count == 0 {
            // The stamps wrapped: none may look current.
            self.cell_checked.fill(0);
            self.resort_count = 1;
        }

        // 1. By old band: each item's new cell (and the cells it arrives in), and the
        // shard's items per cell and per row.
        {
            let (band_first, cell_of_current) = (&self.band_first, &self.cell_of_current);
            let arrivals = SharedSlice::new(&mut self.arrivals);
            let cell_of_slot = SharedSlice::new(&mut self.cell_of_slot);
            let shard_cell = SharedSlice::new(&mut self.shard_cell);
            let shard_row = SharedSlice::new(&mut self.shard_row);
            let shard_rows = SharedSlice::new(&mut self.shard_rows);
            pool.run(&|s| {
                let band = band_first[s] as usize..band_first[s + 1] as usize;
                // SAFETY: bands, and the shard's rows of counts, are disjoint by shard.
                let (cell_of, counts, row_counts, touched, arrivals) = unsafe {
                    (
                        cell_of_slot.range_mut(band.clone()),
                        shard_cell.range_mut(s * cells..(s + 1) * cells),
                        shard_row.range_mut(s * rows..(s + 1) * rows),
                        shard_rows.get_mut(s),
                        arrivals.get_mut(s),
                    )
                };
                let Arrivals {
                    cells: arrived,
                    overflowed,
                } = arrivals;
                arrived.clear();
                *overflowed = false;
                // Only the rows touched last time hold counts; clear just those.
                let (lo, hi) = (touched.0 as usize, touched.1 as usize);
                counts[lo * cols..hi * cols].fill(0);
                row_counts[lo..hi].fill(0);
                let (mut lo, mut hi) = (rows, 0);
                for ((c, item), &old) in cell_of
                    .iter_mut()
                    .zip(&items[band.clone()])
                    .zip(&cell_of_current[band])
                {
                    let (x, y) = position(item);
                    let row = div.cell(y) as usize;
                    let cell = row * cols + div.cell(x) as usize;
                    *c = cell as u32;
                    counts[cell] += 1;
                    if cell as u32 != old {
                        if arrived.len() < arrived.capacity() {
                            arrived.push(cell as u32);
                        } else {
                            *overflowed = true;
                        }
                    }
                    lo = lo.min(row);
                    hi = hi.max(row + 1);
                }
                lo = lo.min(hi);
                for row in lo..hi {
                    row_counts[row] = counts[row * cols..(row + 1) * cols].iter().sum();
                }
                *touched = (lo as u32, hi as u32);
            });
        }

        // 2. Serial: the new bands, cut on the new counts.
        let (shard_row, shard_rows) = (&self.shard_row, &self.shard_rows);
        let (new_rows, new_first) = cut_bands(n, cols, shards, |row| {
            (0..shards)
                .filter(|&s| (shard_rows[s].0..shard_rows[s].1).contains(&(row as u32)))
                .map(|s| shard_row[s * rows + row])
                .sum()
        });

        self.cell_start[cells] = n as u32;
        // 3. By new band: each cell's first slot, and each shard's count in it turned into
        // its write cursor (the shards' items go in shard order, i.e. in old slot order).
        {
            let shard_rows = &self.shard_rows;
            let cell_start = SharedSlice::new(&mut self.cell_start);
            let shard_cell = SharedSlice::new(&mut self.shard_cell);
            pool.run(&|b| {
                let mut next = new_first[b];
                for row in new_rows[b] as usize..new_rows[b + 1] as usize {
                    let mut active = [0u8; SHARD_COUNT_MAX];
                    let mut active_count = 0;
                    for (s, &(lo, hi)) in shard_rows.iter().enumerate() {
                        if (lo..hi).contains(&(row as u32)) {
                            active[active_count] = s as u8;
                            active_count += 1;
                        }
                    }
                    for c in row * cols..(row + 1) * cols {
                        // SAFETY: new bands own disjoint runs of cells, in every row of cursors.
                        unsafe { *cell_start.get_mut(c) = next };
                        for &s in &active[..active_count] {
                            let count = unsafe { shard_cell.get_mut(s as usize * cells + c) };
                            (*count, next) = (next, next + *count);
                        }
                    }
                }
                debug_assert_eq!(next, new_first[b + 1]);
            });
        }

        // 4. By old band: every item to its cursor.
        {
            let (band_first, order, cell_of_slot) = (&self.band_first, &self.order, &self.cell_of_slot);
            let order_next = SharedSlice::new(&mut self.order_next);
            let cell_of_next = SharedSlice::new(&mut self.cell_of_next);
            let shard_cell = SharedSlice::new(&mut self.shard_cell);
            let out = SharedSlice::new(out);
            pool.run(&|s| {
                let band = band_first[s] as usize..band_first[s + 1] as usize;
                // SAFETY: the shard's row of cursors is its own.
                let cursor = unsafe { shard_cell.range_mut(s * cells..(s + 1) * cells) };
                for k in band {
                    let c = cell_of_slot[k];
                    let slot = cursor[c as usize] as usize;
                    cursor[c as usize] += 1;
                    // SAFETY: the cursors of all shards tile the slots; each is written once.
                    unsafe {
                        *order_next.get_mut(slot) = order[k];
                        *cell_of_next.get_mut(slot) = c;
                        *out.get_mut(slot) = items[k];
                    }
                }
            });
        }

        // 5. By new band: restore ascending ids in the cells where arrivals broke them. A
        // cell that took no arrival holds a subsequence of its old ascending run.
        {
            let (cell_start, cell_of_next, arrivals) = (&self.cell_start, &self.cell_of_next, &self.arrivals);
            let stamp = self.resort_count;
            let order_next = SharedSlice::new(&mut self.order_next);
            let cell_checked = SharedSlice::new(&mut self.cell_checked);
            let out = SharedSlice::new(out);
            pool.run(&|b| {
                let band = new_first[b] as usize..new_first[b + 1] as usize;
                let band_cells = new_rows[b] * cols as u32..new_rows[b + 1] * cols as u32;
                // SAFETY: new bands own disjoint runs of slots and of cells.
                let (ids, items, checked) = unsafe {
                    (
                        order_next.range_mut(band.clone()),
                        out.range_mut(band.clone()),
                        cell_checked.range_mut(band_cells.start as usize..band_cells.end as usize),
                    )
                };
                let fix = |ids: &mut [u32], items: &mut [T], c: usize| {
                    let run = cell_start[c] as usize - band.start..cell_start[c + 1] as usize - band.start;
                    if !ids[run.clone()].is_sorted() {
                        sort_by_id(&mut ids[run.clone()], &mut items[run]);
                    }
                };
                if arrivals.iter().any(|a| a.overflowed) {
                    let cells_of = &cell_of_next[band.clone()];
                    let mut k = 1;
                    while k < cells_of.len() {
                        if cells_of[k - 1] == cells_of[k] && ids[k - 1] > ids[k] {
                            let c = cells_of[k] as usize;
                            fix(ids, items, c);
                            k = cell_start[c + 1] as usize - band.start;
                        }
                        k += 1;
                    }
                    return;
                }
                for &c in arrivals.iter().flat_map(|a| &a.cells) {
                    if band_cells.contains(&c) {
                        let seen = &mut checked[(c - band_cells.start) as usize];
                        if *seen != stamp {
                            *seen = stamp;
                            fix(ids, items, c as usize);
                        }
                    }
                }
            });
        }

        std::mem::swap(&mut self.order, &mut self.order_next);
        std::mem::swap(&mut self.cell_of_current, &mut self.cell_of_next);
        self.band_rows.clear();
        self.band_rows.extend_from_slice(&new_rows[..=shards]);
        self.band_first.clear();
        self.band_first.extend_from_slice(&new_first[..=shards]);
    }

    /// The slots of `order()` in band `band` (see `resort_sharded`): a run of whole rows of
    /// cells, so the shard that works on them finds them in its cache.
    pub fn band(&self, band: usize) -> std::ops::Range<usize> {
        self.band_first[band] as usize..self.band_first[band + 1] as usize
    }

    /// The ids in cell (cx, cy), ascending.
    #[cfg(test)]
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
        self.for_each_slot_near(x_mm, y_mm, radius_mm, |k| visit(self.order[k]));
    }

    /// Calls `visit(slot)` for the slot of `order()` of every item in cells overlapping the
    /// square of half-width `radius_mm` around (x, y), in slot order within each row.
    #[inline]
    pub fn for_each_slot_near(&self, x_mm: i32, y_mm: i32, radius_mm: i32, mut visit: impl FnMut(usize)) {
        for run in self.slot_runs_near(x_mm, y_mm, radius_mm) {
            run.for_each(&mut visit);
        }
    }

    /// The slots of `order()` of the items in cells overlapping the square of half-width
    /// `radius_mm` around (x, y): one run of slots per row of cells, rows ascending (the
    /// cells of a row are adjacent in the order).
    #[inline]
    pub fn slot_runs_near(
        &self,
        x_mm: i32,
        y_mm: i32,
        radius_mm: i32,
    ) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let (x0, x1) = (
            self.coord(x_mm.saturating_sub(radius_mm)),
            self.coord(x_mm.saturating_add(radius_mm)),
        );
        let (y0, y1) = (
            self.coord(y_mm.saturating_sub(radius_mm)),
            self.coord(y_mm.saturating_add(radius_mm)),
        );
        (y0..=y1).map(move |cy| {
            let first = self.cell_start[(cy * self.cols + x0) as usize] as usize;
            let end = self.cell_start[(cy * self.cols + x1 + 1) as usize] as usize;
            first..end
        })
    }
}

/// Band cuts over `rows` rows holding `row_total(row)` of `n` items: for each of `shards`
/// bands its first row and first slot (entry `shards` closes the last band). Each band is a
/// run of whole rows holding about `n / shards` items; a band may be empty when one row
/// holds more than a share.
fn cut_bands(
    n: usize,
    rows: usize,
    shards: usize,
    row_total: impl Fn(usize) -> u32,
) -> ([u32; SHARD_COUNT_MAX + 1], [u32; SHARD_COUNT_MAX + 1]) {
    let mut band_rows = [rows as u32; SHARD_COUNT_MAX + 1];
    let mut band_first = [n as u32; SHARD_COUNT_MAX + 1];
    (band_rows[0], band_first[0]) = (0, 0);
    let (mut band, mut seen) = (0, 0u32);
    for row in 0..rows {
        while band + 1 < shards && seen as usize >= n * (band + 1) / shards {
            band += 1;
            (band_rows[band], band_first[band]) = (row as u32, seen);
        }
        seen += row_total(row);
    }
    debug_assert_eq!(seen as usize, n);
    (band_rows, band_first)
}

/// Sorts one cell's slots by id, moving the items along. Insertion sort, because the cells
/// that need it usually hold a few arrivals in an otherwise ascending run; a crowded cell
/// that took many arrivals runs out of the shift budget and is heap-sorted instead, so no
/// configuration makes a tick quadratic in a cell's size.
fn sort_by_id<T: Copy>(ids: &mut [u32], items: &mut [T]) {
    debug_assert_eq!(ids.len(), items.len());
    let mut shifts_left = 8 * ids.len() + 64;
    for i in 1..ids.len() {
        let (id, item) = (ids[i], items[i]);
        let mut j = i;
        while j > 0 && ids[j - 1] > id {
            ids[j] = ids[j - 1];
            items[j] = items[j - 1];
            j -= 1;
        }
        (ids[j], items[j]) = (id, item);
        shifts_left = shifts_left.saturating_sub(i - j);
        if shifts_left == 0 {
            heap_sort_by_id(ids, items);
            return;
        }
    }
}

/// Heap sort by id, moving the items along: O(m log m) in place, without allocating.
fn heap_sort_by_id<T: Copy>(ids: &mut [u32], items: &mut [T]) {
    fn sift_down<T>(ids: &mut [u32], items: &mut [T], mut root: usize, end: usize) {
        loop {
            let mut child = 2 * root + 1;
            if child >= end {
                return;
            }
            if child + 1 < end && ids[child] < ids[child + 1] {
                child += 1;
            }
            if ids[root] >= ids[child] {
                return;
            }
            ids.swap(root, child);
            items.swap(root, child);
            root = child;
        }
    }
    let n = ids.len();
    for root in (0..n / 2).rev() {
        sift_down(ids, items, root, n);
    }
    for end in (1..n).rev() {
        ids.swap(0, end);
        items.swap(0, end);
        sift_down(ids, items, 0, end);
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
    fn the_sharded_resort_equals_the_serial_rebuild() {
        // Clustered points (many in few rows, as flocks are) and uniform ones, with counts
        // around the shard counts, so bands come out empty, lopsided and even; then moves
        // small (most items keep their cell) and large (most change cell and band).
        for n in [0usize, 1, 2, 5, 97, 3_000] {
            for clustered in [false, true] {
                let mut pts: Vec<(i32, i32)> = (0..n as i64)
                    .map(|i| {
                        let h = (i * 2_654_435_761) % 1_000_003;
                        if clustered {
                            (4_000 + (h % 900) as i32, 7_000 + (h / 900 % 300) as i32)
                        } else {
                            ((h % 10_000) as i32, (h * 7 % 10_000) as i32)
                        }
                    })
                    .collect();
                for shards in [1usize, 2, 3, 4, 7] {
                    let pool = ShardPool::new(shards);
                    let mut g = UniformGrid::new(10_000, 700);
                    let mut gathered = vec![(0, 0); n];
                    g.build_gathered(shards, &pts, |&p| p, &mut gathered);
                    for round in 0..6i64 {
                        // A few items change cell (the fix-up goes by the arrivals), many do,
                        // and most do (too many arrivals: the fix-up scans every slot).
                        let step = [20, 120, 2_500][round as usize % 3];
                        for (i, p) in pts.iter_mut().enumerate() {
                            let h = (i as i64 + 31 * round) * 48_271 % 65_521;
                            p.0 = (p.0 + (h % (2 * step + 1) - step) as i32).clamp(0, 9_999);
                            p.1 = (p.1 + (h / 7 % (2 * step + 1) - step) as i32).clamp(0, 9_999);
                        }
                        // The items in the old slot order, moved.
                        let moved: Vec<_> = g.order().iter().map(|&id| pts[id as usize]).collect();
                        g.resort_sharded(&pool, &moved, |&p| p, &mut gathered);
                        let mut serial = UniformGrid::new(10_000, 700);
                        serial.rebuild(n, |i| pts[i]);
                        let what = format!("n {n}, clustered {clustered}, shards {shards}, round {round}");
                        assert_eq!(g.order, serial.order, "{what}");
                        assert_eq!(g.cell_start, serial.cell_start, "{what}");
                        let expected: Vec<_> = serial.order.iter().map(|&id| pts[id as usize]).collect();
                        assert_eq!(gathered, expected, "{what}");
                        // The bands tile the slots in order, each a run of whole rows.
                        let mut next = 0;
                        for b in 0..shards {
                            let band = g.band(b);
                            assert_eq!(band.start, next, "{what}, band {b}");
                            let rows = g.band_rows[b] as usize * g.cols as usize;
                            assert_eq!(g.cell_start[rows] as usize, band.start, "{what}, band {b}");
                            next = band.end;
                        }
                        assert_eq!(next, n, "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_slot_query_visits_the_slots_of_an_id_query() {
        let pts: Vec<(i32, i32)> = (0..400)
            .map(|i| ((i * 7919) % 10_000, (i * 104_729) % 10_000))
            .collect();
        let mut g = UniformGrid::new(10_000, 1_000);
        g.rebuild(pts.len(), |i| pts[i]);
        for (x, y, r) in [
            (5_000, 5_000, 1_500),
            (0, 0, 2_000),
            (9_999, 300, 10),
            (4_000, 9_000, 20_000),
        ] {
            let (mut ids, mut slots) = (Vec::new(), Vec::new());
            g.for_each_near(x, y, r, |id| ids.push(id));
            g.for_each_slot_near(x, y, r, |k| slots.push(g.order()[k]));
            assert_eq!(ids, slots);
            // The same ids as walking the covered cells one by one.
            let mut by_cell = Vec::new();
            for cy in g.coord(y - r)..=g.coord(y + r) {
                for cx in g.coord(x - r)..=g.coord(x + r) {
                    by_cell.extend_from_slice(g.cell(cx, cy));
                }
            }
            assert_eq!(ids, by_cell, "({x}, {y}, {r})");
            let expected = pts
                .iter()
                .filter(|p| {
                    (g.coord(x - r)..=g.coord(x + r)).contains(&g.coord(p.0))
                        && (g.coord(y - r)..=g.coord(y + r)).contains(&g.coord(p.1))
                })
                .count();
            assert_eq!(ids.len(), expected, "({x}, {y}, {r})");
        }
    }

    #[test]
    fn a_cell_sorts_by_id_with_its_items_however_disordered() {
        // Nearly sorted (the usual case), a run merged into another, and reversed (which
        // exhausts the insertion budget and goes to the heap sort), at several sizes.
        for m in [0usize, 1, 2, 3, 17, 200, 5_000] {
            let ascending: Vec<u32> = (0..m as u32).map(|i| 3 * i + 1).collect();
            let mut nearly = ascending.clone();
            if m > 2 {
                nearly.swap(m / 2, m / 2 + 1);
                nearly.swap(0, m - 1);
            }
            let merged: Vec<u32> = ascending
                .iter()
                .step_by(2)
                .chain(ascending.iter().skip(1).step_by(2))
                .copied()
                .collect();
            let reversed: Vec<u32> = ascending.iter().rev().copied().collect();
            for ids in [nearly, merged, reversed] {
                let mut sorted_ids = ids.clone();
                let mut items: Vec<(u32, u32)> = ids
                    .iter()
                    .map(|&id| (id, id.wrapping_mul(2_654_435_761)))
                    .collect();
                sort_by_id(&mut sorted_ids, &mut items);
                assert_eq!(sorted_ids, ascending, "m {m}");
                let expected: Vec<(u32, u32)> = ascending
                    .iter()
                    .map(|&id| (id, id.wrapping_mul(2_654_435_761)))
                    .collect();
                assert_eq!(items, expected, "m {m}");
            }
        }
    }
}
