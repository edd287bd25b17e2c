//! A uniform grid over the world: items bucketed by cell, re-sorted each tick.
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

/// The 3 x 3 cells around a cell as (dx, dy), in the order `neighbour_runs` visits them.
#[cfg(any(test, feature = "planted-faults"))]
pub(crate) const NEIGHBOUR_CELLS: [(i32, i32); 9] = [
    (0, 0),
    (-1, -1),
    (0, -1),
    (1, -1),
    (-1, 0),
    (1, 0),
    (-1, 1),
    (0, 1),
    (1, 1),
];

/// Cells shifted per item in a re-sort (see `shift_starts`) past which the cell starts are
/// written afresh: one cell shifted is a vector lane, one written afresh a mispredicted
/// branch now and then. Chosen by that reckoning, not measured.
const STARTS_SHIFT_PER_ITEM_MAX: usize = 16;

/// An item that changed cell in a re-sort: its new (cell, id) as one sort key, and its
/// old slot.
#[derive(Clone, Copy, Debug, Default)]
struct Mover {
    key: u64,
    slot: u32,
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
    /// Scratch of `resort_sharded`: each old band's movers from the band's first slot on,
    /// all of them sorted, and the items per row.
    movers: Vec<Mover>,
    movers_sorted: Vec<Mover>,
    row_count: Vec<u32>,
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
            cell_of_next: Vec::new(),
            movers: Vec::new(),
            movers_sorted: Vec::new(),
            row_count: vec![0; cols as usize],
            band_first: vec![0, 0],
            band_rows: vec![0, cols as u32],
        }
    }

    /// Cells per row.
    #[cfg(any(test, feature = "planted-faults"))]
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
    /// Items move little in a tick: the ones that keep their cell are still in (cell, id)
    /// order, so the new order is a merge of them with the few that changed cell (the
    /// movers), sorted apart. Each shard finds the new cells of its old band's items and
    /// lists its movers; then, serially, the movers are sorted by (cell, id) and the new
    /// bands cut; then each shard merges its new band (the stayers of the old slots of its
    /// rows with the movers into its rows) and moves its cells' starts by the movers
    /// (`shift_starts`). The work is O(items + movers log movers) and the cells between each
    /// mover's old and new cell, with no pass over every cell: a 1,024 m world has 42,025
    /// cells of 5 m for its 5,000 boids, of which about 100 change cell a tick. Where the
    /// movers went far, the starts are written afresh (`write_starts`). Allocates only when
    /// the count grows.
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
        self.movers.resize(n, Mover::default());
        self.movers_sorted.clear();
        self.movers_sorted.reserve(n);

        // 1. By old band: each item's new cell, and the movers listed from the band's first
        // slot on (a band's movers fit in its slots).
        let mut mover_counts = [0u32; SHARD_COUNT_MAX];
        {
            let (band_first, cell_of_current, order) = (&self.band_first, &self.cell_of_current, &self.order);
            let cell_of_slot = SharedSlice::new(&mut self.cell_of_slot);
            let movers = SharedSlice::new(&mut self.movers);
            let counts = SharedSlice::new(&mut mover_counts);
            pool.run(&|s| {
                let band = band_first[s] as usize..band_first[s + 1] as usize;
                // SAFETY: old bands are disjoint by shard, and so are the counts.
                let (cell_of, movers, count) = unsafe {
                    (
                        cell_of_slot.range_mut(band.clone()),
                        movers.range_mut(band.clone()),
                        counts.get_mut(s),
                    )
                };
                let mut m = 0;
                for (k, (c, item)) in cell_of.iter_mut().zip(&items[band.clone()]).enumerate() {
                    let (x, y) = position(item);
                    let cell = div.cell(y) as u32 * cols as u32 + div.cell(x) as u32;
                    *c = cell;
                    let slot = band.start + k;
                    if cell != cell_of_current[slot] {
                        movers[m] = Mover {
                            key: (cell as u64) << 32 | order[slot] as u64,
                            slot: slot as u32,
                        };
                        m += 1;
                    }
                }
                *count = m as u32;
            });
        }

        // 2. Serial: the movers sorted by (cell, id); the new count of each row (the old one,
        // less the movers that left it, plus those that came); the new bands cut on them;
        // and for each new band, the old slots of its rows and its run of movers.
        for (&first, &count) in self.band_first.iter().zip(&mover_counts[..shards]) {
            let first = first as usize;
            self.movers_sorted
                .extend_from_slice(&self.movers[first..first + count as usize]);
        }
        self.movers_sorted.sort_unstable_by_key(|m| m.key);
        let row_count = &mut self.row_count;
        for (row, count) in row_count.iter_mut().enumerate() {
            *count = self.cell_start[(row + 1) * cols] - self.cell_start[row * cols];
        }
        for m in &self.movers_sorted {
            row_count[self.cell_of_current[m.slot as usize] as usize / cols] -= 1;
            row_count[(m.key >> 32) as usize / cols] += 1;
        }
        let (new_rows, new_first) = cut_bands(n, rows, shards, |row| row_count[row]);
        let mut old_first = [n as u32; SHARD_COUNT_MAX + 1];
        let mut movers_first = [self.movers_sorted.len() as u32; SHARD_COUNT_MAX + 1];
        // Shifting the starts by the movers costs the cells between each mover's two; past
        // that many writes for every item, writing them afresh is cheaper.
        let shifted_cells: usize = self
            .movers_sorted
            .iter()
            .map(|m| (m.key >> 32).abs_diff(self.cell_of_current[m.slot as usize] as u64) as usize)
            .sum();
        let shift = shifted_cells <= STARTS_SHIFT_PER_ITEM_MAX * n;
        for b in 0..shards {
            let cell = new_rows[b] as usize * cols;
            old_first[b] = self.cell_start[cell];
            movers_first[b] = self
                .movers_sorted
                .partition_point(|m| m.key < (cell as u64) << 32) as u32;
        }

        // 3. By new band: the merge, in (cell, id) order, of the stayers of the band's old
        // slots with the movers into its rows; then its cells' starts, shifted by the movers
        // (all of them: one that crossed the band's rows shifts its cells too) or written.
        {
            let (order, cell_of_current, cell_of_slot) =
                (&self.order, &self.cell_of_current, &self.cell_of_slot);
            let movers = &self.movers_sorted;
            let order_next = SharedSlice::new(&mut self.order_next);
            let cell_of_next = SharedSlice::new(&mut self.cell_of_next);
            let cell_start = SharedSlice::new(&mut self.cell_start[..cells]);
            let out = SharedSlice::new(out);
            pool.run(&|b| {
                let slots = new_first[b] as usize..new_first[b + 1] as usize;
                let band_cells = new_rows[b] as usize * cols..new_rows[b + 1] as usize * cols;
                // SAFETY: new bands own disjoint runs of slots and of cells.
                let (ids, cells_of, items_out, starts) = unsafe {
                    (
                        order_next.range_mut(slots.clone()),
                        cell_of_next.range_mut(slots.clone()),
                        out.range_mut(slots.clone()),
                        cell_start.range_mut(band_cells.clone()),
                    )
                };
                let old = old_first[b] as usize..old_first[b + 1] as usize;
                merge_band(
                    Stayers {
                        order: &order[old.clone()],
                        cell_of_current: &cell_of_current[old.clone()],
                        cell_of_slot: &cell_of_slot[old.clone()],
                        first_slot: old.start,
                    },
                    &movers[movers_first[b] as usize..movers_first[b + 1] as usize],
                    items,
                    MergeOut {
                        ids,
                        cells_of: &mut *cells_of,
                        items: items_out,
                    },
                );
                if shift {
                    shift_starts(starts, band_cells.start, movers, cell_of_current);
                } else {
                    write_starts(starts, band_cells.start, cells_of, slots.start);
                }
            });
        }
        self.cell_start[cells] = n as u32;

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
    #[cfg(any(test, feature = "planted-faults"))]
    #[inline]
    pub fn cell_range(&self, cx: i32, cy: i32) -> std::ops::Range<usize> {
        let c = (cy * self.cols + cx) as usize;
        self.cell_start[c] as usize..self.cell_start[c + 1] as usize
    }

    /// The slot runs of the 3 x 3 cells around cell (cx, cy), in the order the flocking
    /// scan visits them: the centre cell, the row above, the cells left and right, the row
    /// below. A row's three cells are adjacent in the order, so each row is one run (cells
    /// outside the grid give empty runs): five runs and eight loads of `cell_start` where
    /// the nine cells one by one take nine and eighteen.
    #[inline]
    pub fn neighbour_runs(&self, cx: i32, cy: i32) -> [std::ops::Range<usize>; 5] {
        debug_assert!((0..self.cols).contains(&cx) && (0..self.cols).contains(&cy));
        let (cols, s) = (self.cols, &self.cell_start);
        let (x0, x1) = ((cx - 1).max(0) as usize, (cx + 1).min(cols - 1) as usize);
        let row = |y: i32| match (0..cols).contains(&y) {
            true => {
                let first = (y * cols) as usize;
                s[first + x0] as usize..s[first + x1 + 1] as usize
            }
            false => 0..0,
        };
        // The cells left and right of the centre (the centre itself at an edge).
        let c = (cy * cols + cx) as usize;
        let (left, right) = (c - (cx as usize - x0), c + (x1 - cx as usize));
        let centre = s[c] as usize..s[c + 1] as usize;
        [
            centre.clone(),
            row(cy - 1),
            s[left] as usize..centre.start,
            centre.end..s[right + 1] as usize,
            row(cy + 1),
        ]
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

/// The old slots of one new band's rows: ids, old cells and new cells (the stayers are
/// the slots where the two agree), from old slot `first_slot`.
struct Stayers<'a> {
    order: &'a [u32],
    cell_of_current: &'a [u32],
    cell_of_slot: &'a [u32],
    first_slot: usize,
}

/// One new band's share of the re-sort's output: the ids, cells and items of its slots.
struct MergeOut<'a, T> {
    ids: &'a mut [u32],
    cells_of: &'a mut [u32],
    items: &'a mut [T],
}

/// Merges a band's stayers (in old slot order, so by (cell, id)) with the movers into its
/// rows (sorted by (cell, id)), writing the ids, cells and items of its slots.
///
/// The old slots are sorted by (old cell, id), so where each mover goes among them is a
/// binary search, and the stayers between two movers are copied as runs between the slots
/// of items that left: about 100 searches and 200 runs a tick in `corpora/default.mrec`
/// where a merge step per slot took 5,000. Not shown faster on its own: side by side
/// with the merge step per slot, replay measured 0.99-1.00x (the merge's share of the
/// profile 6.3% -> 6.0% with its copies).
fn merge_band<T: Copy>(stay: Stayers<'_>, movers: &[Mover], items: &[T], mut out: MergeOut<'_, T>) {
    let n = out.ids.len();
    debug_assert_eq!(n, out.cells_of.len());
    debug_assert_eq!(n, out.items.len());
    let old_key = |k: usize| (stay.cell_of_current[k] as u64) << 32 | stay.order[k] as u64;
    let (mut k, mut w) = (0, 0);
    for m in movers.iter().map(Some).chain([None]) {
        // No old slot holds a mover's (new cell, id): its id's old slot has another cell.
        let end = match m {
            Some(m) => k + partition_point_by(k..stay.order.len(), |j| old_key(j) < m.key),
            None => stay.order.len(),
        };
        // The stayers of k..end, as runs between the slots of those that left.
        while k < end {
            let run_end = (k..end)
                .find(|&j| stay.cell_of_slot[j] != stay.cell_of_current[j])
                .unwrap_or(end);
            let len = run_end - k;
            out.ids[w..w + len].copy_from_slice(&stay.order[k..run_end]);
            out.cells_of[w..w + len].copy_from_slice(&stay.cell_of_current[k..run_end]);
            let first = stay.first_slot + k;
            out.items[w..w + len].copy_from_slice(&items[first..first + len]);
            w += len;
            k = run_end + 1;
        }
        k = end;
        if let Some(m) = m {
            out.put(w, m.key as u32, (m.key >> 32) as u32, items[m.slot as usize]);
            w += 1;
        }
    }
    debug_assert_eq!(w, n, "the merge wrote {w} of the band's {n} slots");
}

impl<T> MergeOut<'_, T> {
    #[inline]
    fn put(&mut self, w: usize, id: u32, cell: u32, item: T) {
        self.ids[w] = id;
        self.cells_of[w] = cell;
        self.items[w] = item;
    }
}

/// How many of `range`'s indices, from its start, satisfy `pred`, for a `pred` true on a
/// prefix of it (a binary search, as `slice::partition_point`).
fn partition_point_by(range: std::ops::Range<usize>, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - range.start
}

/// Moves a band's cell starts (`starts`, from cell `first_cell`) from the old order to the
/// new by the movers alone: a cell's start counts the items in the cells before it, so an
/// item that went from cell `a` to cell `b` takes one from the starts of cells `a + 1 ..=
/// b` (or gives one to `b + 1 ..= a`). Work: the cells between each mover's two cells that
/// lie in the band, a row's width for a mover that changed row.
fn shift_starts(starts: &mut [u32], first_cell: usize, movers: &[Mover], cell_of_current: &[u32]) {
    let band = first_cell..first_cell + starts.len();
    for m in movers {
        let (old, new) = (cell_of_current[m.slot as usize] as usize, (m.key >> 32) as usize);
        let (lo, hi) = (
            (old.min(new) + 1).max(band.start),
            (old.max(new) + 1).min(band.end),
        );
        if lo >= hi {
            continue;
        }
        let run = &mut starts[lo - band.start..hi - band.start];
        if new > old {
            run.iter_mut().for_each(|s| *s -= 1);
        } else {
            run.iter_mut().for_each(|s| *s += 1);
        }
    }
}

/// Writes a band's cell starts (`starts`, from cell `first_cell`) afresh from the cells of
/// its slots (`cells_of`, from slot `first_slot`), for ticks where the movers went far.
fn write_starts(starts: &mut [u32], first_cell: usize, cells_of: &[u32], first_slot: usize) {
    let mut opened = 0;
    for (w, &cell) in cells_of.iter().enumerate() {
        let c = cell as usize - first_cell;
        if c >= opened {
            starts[opened..=c].fill((first_slot + w) as u32);
            opened = c + 1;
        }
    }
    starts[opened..].fill((first_slot + cells_of.len()) as u32);
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

    /// The five runs hold the slots of the nine cells one by one, in the same order, at
    /// the grid's corners, edges and inside (cells empty, crowded and in between).
    #[test]
    fn neighbour_runs_visit_the_nine_cells_in_order() {
        let pts: Vec<(i32, i32)> = (0..600i64)
            .map(|i| (((i * 7_919) % 5_000) as i32, ((i * i * 104_729) % 5_000) as i32))
            .collect();
        let mut g = UniformGrid::new(5_000, 1_000);
        g.rebuild(pts.len(), |i| pts[i]);
        let mut checked = 0;
        for cy in 0..g.cols() {
            for cx in 0..g.cols() {
                let one_by_one: Vec<usize> = NEIGHBOUR_CELLS
                    .iter()
                    .map(|&(ox, oy)| (cx + ox, cy + oy))
                    .filter(|&(x, y)| (0..g.cols()).contains(&x) && (0..g.cols()).contains(&y))
                    .flat_map(|(x, y)| g.cell_range(x, y))
                    .collect();
                let runs: Vec<usize> = g.neighbour_runs(cx, cy).into_iter().flatten().collect();
                assert_eq!(runs, one_by_one, "cell ({cx}, {cy})");
                checked += one_by_one.len();
            }
        }
        assert!(checked > pts.len() * 4, "too few slots seen: {checked}");
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
                        // A few items change cell, many do (both: the cell starts shifted by
                        // the movers), and most do, far (the starts written afresh).
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
}
