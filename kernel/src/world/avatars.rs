//! Avatar movement: each joined player's avatar (spectators have none) accelerates towards its steering target,
//! blocked by water and steep ground, and is indexed for the boids and snapshots.

use super::World;
use crate::boids::{self, Avatar};
use crate::input::THROTTLE_MAX;
use crate::rng;

impl World {
    /// Moves every avatar towards its steering target, then indexes them for this tick.
    pub(super) fn move_avatars(&mut self) {
        let pc = &self.config.player;
        let size = self.config.world_size_mm as i32;
        for p in self.players.iter_mut().filter(|p| p.active && !p.spectator) {
            let smax = pc.speed_max_mm_per_tick as i64;
            let (tx, ty) = if p.throttle == 0 {
                (0, 0)
            } else {
                let (dx, dy) = (p.dir_x as i64, p.dir_y as i64);
                let len = rng::isqrt((dx * dx + dy * dy) as u64).max(1) as i64;
                let s = smax * p.throttle as i64 / THROTTLE_MAX as i64;
                (dx * s / len, dy * s / len)
            };
            let (mut ax, mut ay) = (tx - p.vx as i64, ty - p.vy as i64);
            let a = rng::isqrt((ax * ax + ay * ay) as u64) as i64;
            let amax = pc.accel_mm_per_tick as i64;
            if a > amax {
                (ax, ay) = (ax * amax / a, ay * amax / a);
            }
            let (vx, vy) = ((p.vx as i64 + ax) as i32, (p.vy as i64 + ay) as i32);
            let (x, y) = boids::move_blocked(&self.terrain, size, p.x_mm, p.y_mm, vx, vy);
            // A blocked axis stops the avatar on that axis.
            p.vx = if x == p.x_mm + vx { vx } else { 0 };
            p.vy = if y == p.y_mm + vy { vy } else { 0 };
            (p.x_mm, p.y_mm) = (x, y);
        }
        self.index_avatars();
    }

    /// The joined players' avatars as the boids and snapshots see them, in slot order, and
    /// the avatar grid built on them.
    pub(super) fn index_avatars(&mut self) {
        self.avatars.clear();
        let has_avatar = |(_, p): &(usize, &crate::player::Player)| p.active && !p.spectator;
        for (slot, p) in self.players.iter().enumerate().filter(has_avatar) {
            self.avatars.push(Avatar {
                slot: slot as u32,
                x_mm: p.x_mm,
                y_mm: p.y_mm,
                vx: p.vx,
                vy: p.vy,
            });
        }
        let avatars = &self.avatars;
        self.avatar_grid
            .rebuild(avatars.len(), |i| (avatars[i].x_mm, avatars[i].y_mm));
        // The snapshot builds scan avatars cell by cell, hundreds per build in a crowd:
        // a copy in the grid's slot order makes that scan sequential.
        self.grid_avatars.clear();
        let order = self.avatar_grid.order();
        self.grid_avatars
            .extend(order.iter().map(|&i| avatars[i as usize]));
    }
}
