//! The boid rule: one boid's next state from the previous tick's world, integers only.
//!
//! `next` reads nothing but the previous state (through `Neighbourhood`) and writes
//! nothing, so any partition of the boids into shards computes the same result.

use crate::config::FlockingConfig;
use crate::grid::UniformGrid;
use crate::rng;
use crate::terrain::Terrain;

/// A boid: position in millimetres, velocity in millimetres per tick. Speeds are at most
/// `SPEED_MAX_MM_PER_TICK` (254), so velocities fit an i16: 12 bytes a boid, which is what
/// the state root hashes every tick.
///
/// Its canonical record (what hashes and checkpoints hold) is its memory on a
/// little-endian machine:
///
/// | offset | size | field          |
/// |--------|------|----------------|
/// | 0      | 4    | `x_mm` (i32)   |
/// | 4      | 4    | `y_mm` (i32)   |
/// | 8      | 2    | `vx` (i16)     |
/// | 10     | 2    | `vy` (i16)     |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[repr(C)]
pub struct Boid {
    pub x_mm: i32,
    pub y_mm: i32,
    pub vx: i16,
    pub vy: i16,
}

/// Bytes of one boid record.
pub(crate) const BOID_RECORD_BYTES: usize = 12;
pub(crate) const BOID_X_OFFSET: usize = 0;
pub(crate) const BOID_Y_OFFSET: usize = 4;
pub(crate) const BOID_VX_OFFSET: usize = 8;
pub(crate) const BOID_VY_OFFSET: usize = 10;
const _: () = assert!(std::mem::size_of::<Boid>() == BOID_RECORD_BYTES);
const _: () = assert!(std::mem::offset_of!(Boid, x_mm) == BOID_X_OFFSET);
const _: () = assert!(std::mem::offset_of!(Boid, y_mm) == BOID_Y_OFFSET);
const _: () = assert!(std::mem::offset_of!(Boid, vx) == BOID_VX_OFFSET);
const _: () = assert!(std::mem::offset_of!(Boid, vy) == BOID_VY_OFFSET);
const _: () = assert!(BOID_VY_OFFSET + 2 == BOID_RECORD_BYTES);

/// A joined player's avatar as the boids and snapshots see it this tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Avatar {
    pub slot: u32,
    pub x_mm: i32,
    pub y_mm: i32,
    pub vx: i32,
    pub vy: i32,
}

/// Everything the rule may read: the previous tick, frozen.
#[derive(Clone, Copy)]
pub(crate) struct Neighbourhood<'a> {
    pub flocking: &'a FlockingConfig,
    pub world_size_mm: i32,
    pub seed: u64,
    /// The tick being computed (keys the wander jitter).
    pub tick: u32,
    pub terrain: &'a Terrain,
    /// Boid grid over the previous positions, and the boids copied into grid order.
    pub grid: &'a UniformGrid,
    pub sorted: &'a [Boid],
    /// Avatar grid and the avatars it indexes.
    pub avatar_grid: &'a UniformGrid,
    pub avatars: &'a [Avatar],
    /// The synthetic next rules' extra cohesion weight (0 under this build's rules).
    #[cfg(feature = "synthetic-rules")]
    pub cohesion_extra: i64,
    /// The planted `shard-order` fault: where the neighbour scan starts (0: the centre).
    #[cfg(feature = "planted-faults")]
    pub cell_rotation: usize,
}

/// The scan of a build with planted faults: with the `shard-order` fault planted, the nine
/// cells one by one, the list rotated by `cell_rotation`; else `neighbour_runs`, so the
/// tests and the simulator (built with the feature) check the scan every build runs.
#[cfg(feature = "planted-faults")]
impl Neighbourhood<'_> {
    fn planted_runs(&self, cx: i32, cy: i32) -> [std::ops::Range<usize>; 9] {
        use crate::grid::NEIGHBOUR_CELLS;
        if self.cell_rotation % NEIGHBOUR_CELLS.len() == 0 {
            // Unplanted: the scan every build runs.
            let [a, b, c, d, e] = self.grid.neighbour_runs(cx, cy);
            return [a, b, c, d, e, 0..0, 0..0, 0..0, 0..0];
        }
        let mut cells = NEIGHBOUR_CELLS;
        cells.rotate_left(self.cell_rotation % NEIGHBOUR_CELLS.len());
        let cols = self.grid.cols();
        cells.map(|(ox, oy)| {
            let (x, y) = (cx + ox, cy + oy);
            match x >= 0 && y >= 0 && x < cols && y < cols {
                true => self.grid.cell_range(x, y),
                false => 0..0,
            }
        })
    }
}

/// Scales (x, y) to length `len` (zero stays zero).
#[inline]
fn with_length(x: i64, y: i64, len: i64) -> (i64, i64) {
    let l = rng::isqrt((x * x + y * y) as u64) as i64;
    if l == 0 {
        (0, 0)
    } else {
        (x * len / l, y * len / l)
    }
}

impl Neighbourhood<'_> {
    /// The boid `id`'s state at the next tick when it thinks: it steers by its
    /// neighbours, the avatars, the terrain, the edges and its jitter, and plans its
    /// straight path until its next think.
    pub fn think(&self, id: u32, b: Boid) -> Boid {
        let f = self.flocking;
        let think = f.think_interval_ticks;
        let amax = f.accel_max_mm_per_tick as i64 * think as i64;
        let r = f.neighbour_radius_mm as i64;
        let rs = f.separation_radius_mm as i64;
        let (px, py) = (b.x_mm as i64, b.y_mm as i64);

        // The terrain ahead is looked up first: its bitmap is the one read of the think
        // likely to miss the cache, and the neighbour scan may hide the wait (the lookup
        // was 10% of the boid phase's samples after the scan; the move was not shown
        // faster side by side).
        let look = f.lookahead_ticks as i64;
        let lx = (px + b.vx as i64 * look).clamp(0, self.world_size_mm as i64 - 1) as i32;
        let ly = (py + b.vy as i64 * look).clamp(0, self.world_size_mm as i64 - 1) as i32;
        let danger_ahead = self.terrain.is_dangerous(lx, ly);

        // Flocking: the centre cell first, then its neighbours, so the nearest are kept
        // when `neighbours_max` cuts the scan short.
        let (cx, cy) = (self.grid.coord(b.x_mm), self.grid.coord(b.y_mm));
        let (mut count, mut sum_dx, mut sum_dy, mut sum_vx, mut sum_vy) = (0i64, 0i64, 0i64, 0i64, 0i64);
        let (mut sep_x, mut sep_y) = (0i64, 0i64);
        #[cfg(not(feature = "planted-faults"))]
        let runs = self.grid.neighbour_runs(cx, cy);
        #[cfg(feature = "planted-faults")]
        let runs = self.planted_runs(cx, cy);
        'cells: for run in runs {
            for k in run {
                let o = self.sorted[k];
                let (dx, dy) = (o.x_mm as i64 - px, o.y_mm as i64 - py);
                let d2 = dx * dx + dy * dy;
                // The boid itself (and any boid on exactly the same spot, which exerts no
                // direction anyway) is not a neighbour.
                if d2 >= r * r || d2 == 0 {
                    continue;
                }
                count += 1;
                sum_dx += dx;
                sum_dy += dy;
                sum_vx += o.vx as i64;
                sum_vy += o.vy as i64;
                if d2 < rs * rs {
                    let d = (rng::isqrt(d2 as u64) as i64).max(1);
                    sep_x -= dx * (rs - d) / d;
                    sep_y -= dy * (rs - d) / d;
                }
                if count >= f.neighbours_max as i64 {
                    break 'cells;
                }
            }
        }
        let (mut ax, mut ay) = (0i64, 0i64);
        if count > 0 {
            #[cfg(feature = "synthetic-rules")]
            let cohesion = f.cohesion_weight as i64 + self.cohesion_extra;
            #[cfg(not(feature = "synthetic-rules"))]
            let cohesion = f.cohesion_weight as i64;
            ax += ((sum_dx / count) * cohesion) >> 14;
            ay += ((sum_dy / count) * cohesion) >> 14;
            ax += ((sum_vx / count - b.vx as i64) * f.alignment_weight as i64) >> 10;
            ay += ((sum_vy / count - b.vy as i64) * f.alignment_weight as i64) >> 10;
            ax += (sep_x * f.separation_weight as i64) >> 14;
            ay += (sep_y * f.separation_weight as i64) >> 14;
        }

        // Flee: away from every avatar within the flee radius, harder the closer it is.
        let fr = f.flee_radius_mm as i64;
        if fr > 0 && !self.avatars.is_empty() {
            let (mut fx, mut fy) = (0i64, 0i64);
            self.avatar_grid.for_each_near(b.x_mm, b.y_mm, fr as i32, |a| {
                let av = self.avatars[a as usize];
                let (dx, dy) = (px - av.x_mm as i64, py - av.y_mm as i64);
                let d2 = dx * dx + dy * dy;
                if d2 < fr * fr {
                    let (ux, uy) = with_length(dx, dy, 1024);
                    let d = rng::isqrt(d2 as u64) as i64;
                    fx += ux * (fr - d) / fr;
                    fy += uy * (fr - d) / fr;
                }
            });
            ax += (fx * 2 * amax * f.flee_weight as i64) >> 18;
            ay += (fy * 2 * amax * f.flee_weight as i64) >> 18;
        }

        // Terrain: look ahead along the velocity; if that cell is water or steep, steer
        // along its escape vector, or straight back when it has none.
        if danger_ahead {
            let e = self.terrain.escape_at(lx, ly);
            let (ex, ey) = if e == [0, 0] {
                (-(b.vx as i64), -(b.vy as i64))
            } else {
                (e[0] as i64, e[1] as i64)
            };
            let (tx, ty) = with_length(ex, ey, 2 * amax);
            ax += (tx * f.terrain_avoid_weight as i64) >> 8;
            ay += (ty * f.terrain_avoid_weight as i64) >> 8;
        }

        // Edges: push inwards, proportionally to how deep into the margin the boid is.
        let m = f.edge_margin_mm as i64;
        if m > 0 {
            let w = self.world_size_mm as i64;
            let push = |p: i64| -> i64 {
                if p < m {
                    2 * amax * (m - p) / m
                } else if p > w - m {
                    -2 * amax * (p - (w - m)) / m
                } else {
                    0
                }
            };
            ax += push(px);
            ay += push(py);
        }

        // Wander jitter, keyed by (seed, tick, id).
        let j = f.wander_jitter_mm_per_tick * think;
        if j > 0 {
            let bits = rng::draw(self.seed, self.tick, id, rng::STREAM_WANDER);
            ax += rng::symmetric(bits, j) as i64;
            ay += rng::symmetric(bits.rotate_left(32), j) as i64;
        }

        // Turn limit: the velocity changes by at most `accel_max` a tick (per think).
        let a2 = ax * ax + ay * ay;
        if a2 > amax * amax {
            (ax, ay) = with_length(ax, ay, amax);
        }
        let (mut vx, mut vy) = (b.vx as i64 + ax, b.vy as i64 + ay);
        let s2 = vx * vx + vy * vy;
        let (smin, smax) = (f.speed_min_mm_per_tick as i64, f.speed_max_mm_per_tick as i64);
        // Compare squares first: most boids are within the speed band and need no root.
        let s = if s2 > smax * smax || s2 < smin * smin {
            rng::isqrt(s2 as u64) as i64
        } else {
            smin
        };
        if s > smax {
            (vx, vy) = with_length(vx, vy, smax);
        } else if s < smin {
            (vx, vy) = if s == 0 {
                (smin, 0)
            } else {
                with_length(vx, vy, smin)
            };
        }
        let (vx, vy) = plan_path(
            self.terrain,
            self.world_size_mm,
            b.x_mm,
            b.y_mm,
            vx as i32,
            vy as i32,
            think,
        );
        debug_assert!(
            vx.abs() <= 254 && vy.abs() <= 254,
            "speed clamp broken: ({vx}, {vy})"
        );
        Boid {
            x_mm: b.x_mm + vx,
            y_mm: b.y_mm + vy,
            vx: vx as i16,
            vy: vy as i16,
        }
    }
}

/// A boid's next state between thinks: a straight line, which its last think (or its
/// spawn) planned to stay dry and inside the world until the next one.
#[inline]
pub(crate) fn glide(b: Boid) -> Boid {
    Boid {
        x_mm: b.x_mm + b.vx as i32,
        y_mm: b.y_mm + b.vy as i32,
        ..b
    }
}

/// Which boids think at one tick: those whose `tick + id` (wrapping) is a multiple of the
/// think interval, found without a divide per boid (a divide and a mispredicted branch per
/// boid were an eighth of the boid phase). The remainder is Lemire's: with `m = floor((2^64
/// - 1) / d) + 1`, `a mod d = ((m * a mod 2^64) * d) >> 64`, exact for every 32-bit `a` and
/// `d`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThinkTurn {
    tick: u32,
    interval: u32,
    m: u64,
}

impl ThinkTurn {
    pub fn new(tick: u32, interval: u32) -> ThinkTurn {
        assert!(interval > 0, "think interval 0");
        ThinkTurn {
            tick,
            interval,
            // Interval 1 wraps m to 0, and then every boid thinks, as it should.
            m: (u64::MAX / interval as u64).wrapping_add(1),
        }
    }

    /// Whether boid `id` thinks this tick.
    #[inline]
    pub fn thinks(&self, id: u32) -> bool {
        let low = self.m.wrapping_mul(self.tick.wrapping_add(id) as u64);
        ((low as u128 * self.interval as u128) >> 64) == 0
    }
}

/// The velocity a boid at (x, y) keeps for its next `ticks` ticks: the wanted (vx, vy) if
/// that straight path stays on dry land inside the world, else the first of it mirrored in
/// x, in y, or in both that does, else standing still (the boid's own spot is dry).
///
/// Planning the whole stretch up front is what keeps motion between thinks linear, so a
/// think group's anchor records (see `hash`) stay unchanged until it thinks again.
#[inline]
pub(crate) fn plan_path(
    terrain: &Terrain,
    world_size_mm: i32,
    x: i32,
    y: i32,
    vx: i32,
    vy: i32,
    ticks: u32,
) -> (i32, i32) {
    let t = ticks as i32;
    let inside = 0..world_size_mm;
    // Whether (x, y) + k * (vx, vy) is inside the world and dry for every k in 1..=ticks.
    let clear = |&(vx, vy): &(i32, i32)| {
        // The path is a segment from a point inside the world, so its far end decides.
        inside.contains(&(x + vx * t))
            && inside.contains(&(y + vy * t))
            // Most paths lie within a few dry cells; the others are walked point by
            // point, the far end first: water ahead is likelier there than one step away.
            && (terrain.cells_between_are_dry((x + vx, y + vy), (x + vx * t, y + vy * t)) == Some(true)
                || (1..=t).rev().all(|k| !terrain.is_water(x + vx * k, y + vy * k)))
    };
    [(vx, vy), (-vx, vy), (vx, -vy), (-vx, -vy)]
        .into_iter()
        .find(clear)
        .unwrap_or((0, 0))
}

/// Moves (x, y) by (vx, vy) but never into water or out of the world: the full move if
/// it lands on dry ground, else the x-only or y-only move, else no move at all.
#[inline]
pub(crate) fn move_blocked(
    terrain: &Terrain,
    world_size_mm: i32,
    x: i32,
    y: i32,
    vx: i32,
    vy: i32,
) -> (i32, i32) {
    let limit = world_size_mm - 1;
    let nx = (x + vx).clamp(0, limit);
    let ny = (y + vy).clamp(0, limit);
    if !terrain.is_water(nx, ny) {
        (nx, ny)
    } else if !terrain.is_water(nx, y) {
        (nx, y)
    } else if !terrain.is_water(x, ny) {
        (x, ny)
    } else {
        (x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::ThinkTurn;

    #[test]
    fn a_think_turn_is_the_remainder_of_tick_plus_id() {
        // Every interval the config allows, ticks near the start and near the wrap of
        // `tick + id`, and ids up to the largest.
        let ticks = [
            0u32,
            1,
            7,
            59,
            1_000_003,
            u32::MAX - 70_000,
            u32::MAX - 3,
            u32::MAX,
        ];
        let ids = (0..200u32).chain([65_535, 65_536, 1 << 20, (1 << 25) - 1, u32::MAX]);
        let ids: Vec<u32> = ids.collect();
        for interval in 1..=crate::config::THINK_INTERVAL_TICKS_MAX {
            for &tick in &ticks {
                let turn = ThinkTurn::new(tick, interval);
                for &id in &ids {
                    assert_eq!(
                        turn.thinks(id),
                        tick.wrapping_add(id) % interval == 0,
                        "tick {tick}, id {id}, interval {interval}"
                    );
                }
            }
        }
    }
}
