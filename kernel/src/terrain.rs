//! The integer heightfield: generated from the seed by value noise, or supplied by the caller.
//!
//! Besides the heights, the terrain precomputes what the step asks of it every tick:
//! per-cell flags (water, steep) and an escape vector that points away from nearby
//! dangerous cells, plus the list of spawnable cells.

use crate::config::WorldConfig;
use crate::rng;
use thiserror::Error;

/// The cell is below the water level: nothing walks or flies into it.
pub const FLAG_WATER: u8 = 1;
/// The cell's slope to a neighbour exceeds `slope_max_mm_per_cell`: boids steer away.
pub const FLAG_STEEP: u8 = 2;

/// Half-width of the neighbourhood the escape vector is summed over, in cells.
const ESCAPE_RADIUS_CELLS: i32 = 2;

/// A terrain that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TerrainError {
    #[error("terrain has {actual} heights, a {cells}x{cells} grid needs {expected}")]
    WrongLength {
        cells: u32,
        expected: usize,
        actual: usize,
    },
    #[error("terrain height {value} mm at cell ({x}, {y}) is outside {min}..={max}")]
    HeightOutOfRange {
        x: u32,
        y: u32,
        value: i32,
        min: i32,
        max: i32,
    },
    #[error("terrain has no spawnable land (every cell is water or steep)")]
    NoLand,
    #[error("terrain grid is {actual} cells wide, the config says {expected}")]
    GridMismatch { expected: u32, actual: u32 },
}

/// Heights are kept within this magnitude so slope sums cannot overflow an i32.
pub const TERRAIN_HEIGHT_ABS_MAX_MM: i32 = 100_000_000;

/// The heightfield and everything derived from it. Immutable once built.
#[derive(Clone, Debug)]
pub struct Terrain {
    cells: u32,
    cell_size_mm: u32,
    div: crate::grid::CellDivisor,
    heights_mm: Vec<i32>,
    flags: Vec<u8>,
    water_bits: Vec<u64>,
    danger_bits: Vec<u64>,
    escape: Vec<[i8; 2]>,
    land_cells: Vec<u32>,
    content_hash: [u8; 32],
}

impl Terrain {
    /// Generates the terrain a config describes (deterministic in the seed).
    pub fn generate(config: &WorldConfig) -> Result<Terrain, TerrainError> {
        let heights = generate_heights(config);
        Terrain::from_heights(config, heights)
    }

    /// Builds a terrain from caller-supplied heights (row-major, `y * cells + x`).
    pub fn from_heights(config: &WorldConfig, heights_mm: Vec<i32>) -> Result<Terrain, TerrainError> {
        let cells = config.terrain_grid_cells;
        let expected = cells as usize * cells as usize;
        if heights_mm.len() != expected {
            return Err(TerrainError::WrongLength {
                cells,
                expected,
                actual: heights_mm.len(),
            });
        }
        let lim = TERRAIN_HEIGHT_ABS_MAX_MM;
        if let Some(i) = heights_mm.iter().position(|h| !(-lim..=lim).contains(h)) {
            return Err(TerrainError::HeightOutOfRange {
                x: i as u32 % cells,
                y: i as u32 / cells,
                value: heights_mm[i],
                min: -lim,
                max: lim,
            });
        }
        let n = cells as i32;
        let at = |x: i32, y: i32| heights_mm[(y.clamp(0, n - 1) * n + x.clamp(0, n - 1)) as usize];
        let mut flags = vec![0u8; expected];
        for y in 0..n {
            for x in 0..n {
                let h = at(x, y);
                let mut f = 0;
                if h < config.water_level_mm {
                    f |= FLAG_WATER;
                }
                let slope = [(1, 0), (-1, 0), (0, 1), (0, -1)]
                    .iter()
                    .map(|(dx, dy)| (at(x + dx, y + dy) - h).unsigned_abs())
                    .max()
                    .unwrap_or(0);
                if slope > config.slope_max_mm_per_cell {
                    f |= FLAG_STEEP;
                }
                flags[(y * n + x) as usize] = f;
            }
        }
        let mut escape = vec![[0i8; 2]; expected];
        let r = ESCAPE_RADIUS_CELLS;
        for y in 0..n {
            for x in 0..n {
                let (mut ex, mut ey) = (0i32, 0i32);
                for dy in -r..=r {
                    for dx in -r..=r {
                        let (cx, cy) = (x + dx, y + dy);
                        // Outside the grid counts as dangerous, so the escape points inwards.
                        let danger =
                            cx < 0 || cy < 0 || cx >= n || cy >= n || flags[(cy * n + cx) as usize] != 0;
                        if danger {
                            ex -= dx;
                            ey -= dy;
                        }
                    }
                }
                escape[(y * n + x) as usize] = [ex.clamp(-127, 127) as i8, ey.clamp(-127, 127) as i8];
            }
        }
        let land_cells: Vec<u32> = (0..expected as u32).filter(|&i| flags[i as usize] == 0).collect();
        if land_cells.is_empty() {
            return Err(TerrainError::NoLand);
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"MGTR");
        hasher.update(&cells.to_le_bytes());
        hasher.update(&config.terrain_cell_size_mm.to_le_bytes());
        hasher.update(&config.water_level_mm.to_le_bytes());
        hasher.update(&config.slope_max_mm_per_cell.to_le_bytes());
        let bytes: Vec<u8> = heights_mm.iter().flat_map(|h| h.to_le_bytes()).collect();
        hasher.update(&bytes);
        // One bit per cell: the per-tick lookups then touch 128 KiB for a 1024 x 1024 grid
        // instead of a megabyte of flag bytes, and stay in cache.
        let bits = |mask: u8| -> Vec<u64> {
            let mut v = vec![0u64; expected.div_ceil(64)];
            for (i, f) in flags.iter().enumerate() {
                if f & mask != 0 {
                    v[i / 64] |= 1 << (i % 64);
                }
            }
            v
        };
        let water_bits = bits(FLAG_WATER);
        let danger_bits = bits(FLAG_WATER | FLAG_STEEP);
        Ok(Terrain {
            cells,
            cell_size_mm: config.terrain_cell_size_mm,
            div: crate::grid::CellDivisor::new(config.terrain_cell_size_mm, cells as i32),
            heights_mm,
            flags,
            water_bits,
            danger_bits,
            escape,
            land_cells,
            content_hash: *hasher.finalize().as_bytes(),
        })
    }

    /// Grid edge in cells.
    pub fn cells(&self) -> u32 {
        self.cells
    }

    /// Cell edge in millimetres.
    pub fn cell_size_mm(&self) -> u32 {
        self.cell_size_mm
    }

    /// Row-major heights in millimetres.
    pub fn heights_mm(&self) -> &[i32] {
        &self.heights_mm
    }

    /// blake3 over the heights and the parameters that derive the flags.
    pub fn content_hash(&self) -> [u8; 32] {
        self.content_hash
    }

    /// Indices of cells that are neither water nor steep.
    pub fn land_cells(&self) -> &[u32] {
        &self.land_cells
    }

    /// The cell index containing a point; points outside the world clamp to the edge.
    #[inline]
    pub fn cell_index(&self, x_mm: i32, y_mm: i32) -> usize {
        let n = self.cells as i32;
        let cx = self.div.cell(x_mm);
        let cy = self.div.cell(y_mm);
        (cy * n + cx) as usize
    }

    /// Flags of the cell containing a point.
    #[inline]
    pub fn flags_at(&self, x_mm: i32, y_mm: i32) -> u8 {
        self.flags[self.cell_index(x_mm, y_mm)]
    }

    /// True where nothing may enter: water.
    #[inline]
    pub fn is_water(&self, x_mm: i32, y_mm: i32) -> bool {
        self.water_at(self.cell_index(x_mm, y_mm))
    }

    /// Whether cell `i` (row-major) is water.
    #[inline]
    fn water_at(&self, i: usize) -> bool {
        self.water_bits[i / 64] & (1 << (i % 64)) != 0
    }

    /// Whether every cell of the rectangle of cells spanned by two points is dry, when it
    /// is at most 2 x 2 cells (`None` when larger). A straight path's points have cells
    /// between its two ends' in each axis (`cell` is monotone), so a dry rectangle clears
    /// the whole path with at most four lookups where checking it point by point takes
    /// one a tick.
    #[inline]
    pub fn cells_between_are_dry(&self, a: (i32, i32), b: (i32, i32)) -> Option<bool> {
        let (ax, bx) = (self.div.cell(a.0), self.div.cell(b.0));
        let (ay, by) = (self.div.cell(a.1), self.div.cell(b.1));
        let (x0, x1) = (ax.min(bx), ax.max(bx));
        let (y0, y1) = (ay.min(by), ay.max(by));
        if x1 - x0 > 1 || y1 - y0 > 1 {
            return None;
        }
        let n = self.cells as i32;
        let wet = |x: i32, y: i32| self.water_at((y * n + x) as usize);
        Some(!(wet(x0, y0) || wet(x1, y0) || wet(x0, y1) || wet(x1, y1)))
    }

    /// True where boids steer away: water or steep.
    #[inline]
    pub fn is_dangerous(&self, x_mm: i32, y_mm: i32) -> bool {
        let i = self.cell_index(x_mm, y_mm);
        self.danger_bits[i / 64] & (1 << (i % 64)) != 0
    }

    /// Escape direction (unnormalised) at a point: away from nearby water and cliffs.
    #[inline]
    pub fn escape_at(&self, x_mm: i32, y_mm: i32) -> [i8; 2] {
        self.escape[self.cell_index(x_mm, y_mm)]
    }

    /// The centre of a cell, in millimetres.
    pub fn cell_centre_mm(&self, index: u32) -> (i32, i32) {
        let half = self.cell_size_mm as i32 / 2;
        let x = (index % self.cells) as i32 * self.cell_size_mm as i32 + half;
        let y = (index / self.cells) as i32 * self.cell_size_mm as i32 + half;
        (x, y)
    }

    /// A spawnable point chosen by random bits: always on land, anywhere within its cell.
    pub fn spawn_point(&self, bits: u64) -> (i32, i32) {
        let cell = self.land_cells[rng::below(bits, self.land_cells.len() as u32) as usize];
        let c = self.cell_size_mm as i32;
        let (x0, y0) = ((cell % self.cells) as i32 * c, (cell / self.cells) as i32 * c);
        let jx = ((bits & 0xffff) as i32 * c) >> 16;
        let jy = (((bits >> 16) & 0xffff) as i32 * c) >> 16;
        (x0 + jx, y0 + jy)
    }
}

/// Smoothstep in 16.16 fixed point: 3t^2 - 2t^3 for t in [0, 65536).
#[inline]
fn smooth(t: i64) -> i64 {
    (((t * t) >> 16) * (3 * 65536 - 2 * t)) >> 16
}

/// Sums `terrain_octaves` octaves of bilinear value noise, then rescales to
/// `0..=terrain_height_max_mm`. Integer only, so every machine produces the same heights.
fn generate_heights(config: &WorldConfig) -> Vec<i32> {
    let n = config.terrain_grid_cells as i64;
    let mut acc = vec![0i64; (n * n) as usize];
    let mut amplitude: i64 = 1 << 16;
    // The coarsest lattice spans a quarter of the grid: a few continents and lakes.
    let mut spacing = (n / 4).max(2);
    for octave in 0..config.terrain_octaves {
        let lattice = n / spacing + 2;
        let value = |lx: i64, ly: i64| -> i64 {
            let bits = rng::draw(
                config.seed,
                octave,
                (ly * lattice + lx) as u32,
                rng::STREAM_TERRAIN,
            );
            (bits >> 48) as i64 // 0..65536
        };
        for y in 0..n {
            let ly = y / spacing;
            let ty = smooth(((y % spacing) << 16) / spacing);
            for x in 0..n {
                let lx = x / spacing;
                let tx = smooth(((x % spacing) << 16) / spacing);
                let v00 = value(lx, ly);
                let v10 = value(lx + 1, ly);
                let v01 = value(lx, ly + 1);
                let v11 = value(lx + 1, ly + 1);
                let top = v00 + (((v10 - v00) * tx) >> 16);
                let bottom = v01 + (((v11 - v01) * tx) >> 16);
                let v = top + (((bottom - top) * ty) >> 16);
                acc[(y * n + x) as usize] += (v * amplitude) >> 16;
            }
        }
        amplitude /= 2;
        spacing = (spacing / 2).max(1);
    }
    let lo = acc.iter().copied().min().unwrap_or(0);
    let hi = acc.iter().copied().max().unwrap_or(0).max(lo + 1);
    let top = config.terrain_height_max_mm as i64;
    acc.iter().map(|&v| ((v - lo) * top / (hi - lo)) as i32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> WorldConfig {
        WorldConfig {
            world_size_mm: 128_000,
            terrain_grid_cells: 128,
            terrain_cell_size_mm: 1000,
            hunting_field_radius_mm: 10_000,
            town_radius_mm: 10_000,
            view_radius_mm: 20_000,
            ..WorldConfig::default()
        }
    }

    #[test]
    fn generation_is_deterministic_and_seeded() {
        let c = small();
        let a = Terrain::generate(&c).unwrap();
        let b = Terrain::generate(&c).unwrap();
        assert_eq!(a.heights_mm(), b.heights_mm());
        let other = Terrain::generate(&WorldConfig {
            seed: 99,
            ..c.clone()
        })
        .unwrap();
        assert_ne!(a.content_hash(), other.content_hash());
        let max = *a.heights_mm().iter().max().unwrap();
        assert_eq!(max, c.terrain_height_max_mm);
        assert!(a.heights_mm().iter().all(|&h| h >= 0));
        let water = a.heights_mm().iter().filter(|&&h| h < c.water_level_mm).count();
        assert!(water > 0 && water < a.heights_mm().len(), "water cells: {water}");
    }

    #[test]
    fn supplied_heights_are_checked() {
        let c = small();
        assert!(matches!(
            Terrain::from_heights(&c, vec![0; 10]),
            Err(TerrainError::WrongLength { .. })
        ));
        assert_eq!(
            Terrain::from_heights(&c, vec![0; 128 * 128]).unwrap_err(),
            TerrainError::NoLand
        );
        let mut h = vec![30_000; 128 * 128];
        h[5] = i32::MAX;
        assert!(matches!(
            Terrain::from_heights(&c, h),
            Err(TerrainError::HeightOutOfRange { x: 5, y: 0, .. })
        ));
    }

    /// Checking the cells between two points agrees with walking every point between
    /// them whenever it answers, over a coast (paths in open water, on land and across),
    /// and it answers for the short paths boids plan.
    #[test]
    fn dry_cells_between_points_clear_every_point_between() {
        let t = Terrain::generate(&small()).unwrap();
        let (mut answered, mut wet) = (0, 0);
        for i in 0..20_000i64 {
            let h = (i * 2_654_435_761) % 1_000_003;
            let (x, y) = (
                (h * 131 % 126_000) as i32 + 1_000,
                (h * 17 % 126_000) as i32 + 1_000,
            );
            let (vx, vy) = ((h % 221) as i32 - 110, (h / 221 % 221) as i32 - 110);
            let ticks = 1 + (i % 8) as i32;
            let walked = (1..=ticks).all(|k| !t.is_water(x + vx * k, y + vy * k));
            match t.cells_between_are_dry((x + vx, y + vy), (x + vx * ticks, y + vy * ticks)) {
                Some(dry) => {
                    answered += 1;
                    wet += usize::from(!dry);
                    assert!(!dry || walked, "({x}, {y}) + k ({vx}, {vy}), k <= {ticks}");
                }
                None => panic!("a path of {ticks} ticks at ({vx}, {vy}) spans more than 2 x 2 cells"),
            }
        }
        assert!(
            answered == 20_000 && wet > 100 && wet < 19_000,
            "{wet} of {answered} wet"
        );
        assert_eq!(t.cells_between_are_dry((0, 0), (2_500, 0)), None);
    }

    #[test]
    fn escape_points_away_from_water() {
        let c = small();
        // Water on the left half, land on the right.
        let h: Vec<i32> = (0..128 * 128)
            .map(|i| if i % 128 < 64 { 0 } else { 30_000 })
            .collect();
        let t = Terrain::from_heights(&c, h).unwrap();
        let e = t.escape_at(64_500, 64_500);
        assert!(e[0] > 0, "{e:?}");
        assert!(t.is_water(10_000, 10_000));
        assert!(!t.is_water(100_000, 10_000));
        for bits in 0..200u64 {
            let (x, y) = t.spawn_point(rng::draw(1, 0, bits as u32, 0));
            assert_eq!(t.flags_at(x, y), 0);
        }
    }
}
