//! The input rules: join, spectate, steer, camera, cast, ack and leave, applied serially in
//! canonical order, and where a boid (re)spawns.

use super::World;
use crate::boids::{self, Boid};
use crate::config::WorldConfig;
use crate::hash;
use crate::input::{name_is_valid, Input, TickInputs, THROTTLE_MAX};
use crate::output::Joined;
use crate::player::Player;
use crate::rng;
use crate::snapshot::stream::{ClientStream, NO_TICK};
use crate::terrain::Terrain;

impl World {
    /// Applies the tick's inputs sorted canonically (by client, then join < steer < cast <
    /// ack < leave, then sequence number, then value), so delivery order never matters.
    pub(super) fn apply_inputs(&mut self, tick: u32, inputs: &TickInputs) {
        let list = &inputs.inputs;
        self.input_order.clear();
        self.input_order.extend(0..list.len() as u32);
        self.input_order
            .sort_unstable_by(|&a, &b| list[a as usize].canonical_cmp(&list[b as usize]));
        // The planted `hash-tie` fault: clients in this world's hash order, as a map drained.
        #[cfg(feature = "planted-faults")]
        if self.planted == Some(crate::planted::PlantedFault::HashTie) {
            use std::hash::BuildHasher;
            let h = &self.planted_hasher;
            self.input_order
                .sort_by_key(|&i| h.hash_one(list[i as usize].client()));
        }
        let mut grid_dirty = false;
        for k in 0..self.input_order.len() {
            let input = &list[self.input_order[k] as usize];
            grid_dirty |= self.apply_input(tick, input);
        }
        if grid_dirty {
            self.resort_grid();
        }
    }

    /// Applies one input; returns true when boids moved (a cast caught some).
    fn apply_input(&mut self, tick: u32, input: &Input) -> bool {
        let rejected = &mut self.output.rejected;
        let found = self.clients.binary_search_by_key(&input.client(), |&(c, _)| c);
        if let Input::Join { client, name } | Input::Spectate { client, name } = input {
            let spectator = matches!(input, Input::Spectate { .. });
            match found {
                Ok(_) => rejected.duplicate_join += 1,
                Err(_) if !name_is_valid(name) => rejected.name_invalid += 1,
                Err(index) => match self.players.iter().position(|p| !p.active) {
                    Some(slot) => self.join(tick, *client, name, spectator, slot as u32, index),
                    None => rejected.slots_full += 1,
                },
            }
            return false;
        }
        let Ok(index) = found else {
            rejected.unknown_client += 1;
            return false;
        };
        let slot = self.clients[index].1 as usize;
        let player = &mut self.players[slot];
        // A spectator has no avatar to steer or cast with; a player has no free camera.
        let wrong_role = match input {
            Input::Steer { .. } | Input::Cast { .. } => player.spectator,
            Input::Camera { .. } => !player.spectator,
            _ => false,
        };
        if wrong_role {
            rejected.wrong_role += 1;
            return false;
        }
        match *input {
            Input::Join { .. } | Input::Spectate { .. } => unreachable!("handled above"),
            Input::Camera { seq, x_mm, y_mm, .. } => {
                if seq <= player.last_seq {
                    rejected.stale_seq += 1;
                } else {
                    let limit = self.config.world_size_mm as i32 - 1;
                    player.last_seq = seq;
                    (player.x_mm, player.y_mm) = (x_mm.clamp(0, limit), y_mm.clamp(0, limit));
                }
            }
            Input::Steer {
                seq,
                dir_x,
                dir_y,
                throttle,
                ..
            } => {
                if seq <= player.last_seq {
                    rejected.stale_seq += 1;
                } else if throttle > THROTTLE_MAX || (throttle > 0 && dir_x == 0 && dir_y == 0) {
                    rejected.out_of_range += 1;
                } else {
                    player.last_seq = seq;
                    player.dir_x = dir_x;
                    player.dir_y = dir_y;
                    player.throttle = throttle;
                }
            }
            Input::Cast { seq, .. } => {
                if seq <= player.last_seq {
                    rejected.stale_seq += 1;
                } else {
                    player.last_seq = seq;
                    return self.cast(tick, slot);
                }
            }
            Input::Ack { tick: acked, .. } => {
                // A client can only have received snapshots of ticks already produced.
                if acked >= tick {
                    rejected.ack_from_future += 1;
                } else if player.acked_tick == NO_TICK || acked > player.acked_tick {
                    player.acked_tick = acked;
                }
            }
            Input::Leave { client } => {
                self.players[slot] = Player::default();
                self.streams[slot] = None;
                self.clients.remove(index);
                self.output.left.push(client);
            }
        }
        false
    }

    /// Seats `client` in the free `slot` (at `index` of the sorted client list): a player
    /// somewhere dry inside the town, a spectator's camera at the town's centre.
    fn join(&mut self, tick: u32, client: u32, name: &str, spectator: bool, slot: u32, index: usize) {
        let cfg = &self.config;
        let town = self.zones.town;
        let bits = rng::draw(cfg.seed, tick, client, rng::STREAM_JOIN);
        // The planted `debug-wrap` fault: an add meant to wrap, written plainly. Release
        // builds wrap it (and the subtraction undoes it); overflow checks panic.
        #[cfg(feature = "planted-faults")]
        #[allow(clippy::arithmetic_side_effects)]
        let bits = if self.planted == Some(crate::planted::PlantedFault::DebugWrap) {
            std::hint::black_box(bits + (1 << 63)).wrapping_sub(1 << 63)
        } else {
            bits
        };
        let half = (town.radius_mm / 2).max(1);
        let mut x = town.x_mm + rng::symmetric(bits, half);
        let mut y = town.y_mm + rng::symmetric(bits.rotate_left(32), half);
        let limit = cfg.world_size_mm as i32 - 1;
        (x, y) = (x.clamp(0, limit), y.clamp(0, limit));
        if spectator || self.terrain.is_water(x, y) {
            (x, y) = (town.x_mm, town.y_mm);
        }
        let mut p = Player {
            active: true,
            spectator,
            client,
            name_len: name.len() as u8,
            x_mm: x,
            y_mm: y,
            acked_tick: NO_TICK,
            ..Player::default()
        };
        p.name[..name.len()].copy_from_slice(name.as_bytes());
        self.players[slot as usize] = p;
        self.streams[slot as usize] = Some(Box::new(ClientStream::new(cfg.snapshot_budget_cap_bytes())));
        self.clients.insert(index, (client, slot));
        self.output.joined.push(Joined {
            client,
            slot,
            avatar_id: cfg.boid_count + slot,
            spectator,
        });
    }

    /// Resolves a cast by the player in `slot`: inside a hunting field and off cooldown,
    /// every boid within the cast radius is caught, scored and respawned.
    fn cast(&mut self, tick: u32, slot: usize) -> bool {
        let cfg = &self.config;
        let p = self.players[slot];
        let casts = &mut self.output.casts;
        if tick < p.cast_ready_tick {
            casts.cooling += 1;
            return false;
        }
        if self.zones.hunting_field_at(p.x_mm, p.y_mm).is_none() {
            casts.outside_field += 1;
            return false;
        }
        casts.made += 1;
        let r = cfg.player.cast_radius_mm as i64;
        self.caught.clear();
        let (boids, order) = (&self.grid_boids, self.grid.order());
        let caught = &mut self.caught;
        self.grid.for_each_slot_near(p.x_mm, p.y_mm, r as i32, |k| {
            let b = boids[k];
            let (dx, dy) = (b.x_mm as i64 - p.x_mm as i64, b.y_mm as i64 - p.y_mm as i64);
            if dx * dx + dy * dy <= r * r {
                caught.push((order[k], k as u32));
            }
        });
        // Grid order is cell by cell; respawn in id order so the result reads naturally.
        self.caught.sort_unstable();
        // The respawned boids stand in the previous tick's state (the boid phase comes next),
        // and so does their anchor: a glider keeps it, a thinker replaces it.
        let think = cfg.flocking.think_interval_ticks;
        for &(id, k) in &self.caught {
            let bits = rng::draw(cfg.seed, tick, id, rng::STREAM_SPAWN);
            let b = spawn_boid(&self.terrain, cfg, bits, id, tick - 1);
            self.grid_boids[k as usize] = b;
            self.anchors[id as usize] = hash::anchor(b, (tick - 1).wrapping_add(id) % think);
            self.dirty_groups |= 1 << (id % think);
        }
        let n = self.caught.len() as u32;
        let player = &mut self.players[slot];
        player.score = player.score.saturating_add(n);
        player.cast_ready_tick = tick.saturating_add(cfg.player.cast_cooldown_ticks);
        self.output.casts.caught += n;
        n > 0
    }
}

/// Boid `id` at a random land point, moving at the minimum speed in a random direction, as
/// its state at `state_tick`: its velocity is planned (see `boids::plan_path`) for the
/// ticks it glides before it first thinks.
pub(super) fn spawn_boid(terrain: &Terrain, cfg: &WorldConfig, bits: u64, id: u32, state_tick: u32) -> Boid {
    let (x_mm, y_mm) = terrain.spawn_point(bits);
    let dir = rng::draw(bits, 0, 0, rng::STREAM_SPAWN);
    let s = cfg.flocking.speed_min_mm_per_tick.max(1) as i64;
    let (dx, dy) = (
        rng::symmetric(dir, 1024) as i64,
        rng::symmetric(dir.rotate_left(32), 1024) as i64,
    );
    let len = rng::isqrt((dx * dx + dy * dy) as u64).max(1) as i64;
    let think = cfg.flocking.think_interval_ticks;
    let glides = (think - state_tick.wrapping_add(1).wrapping_add(id) % think) % think;
    let (vx, vy) = boids::plan_path(
        terrain,
        cfg.world_size_mm as i32,
        x_mm,
        y_mm,
        (dx * s / len) as i32,
        (dy * s / len) as i32,
        glides,
    );
    Boid {
        x_mm,
        y_mm,
        vx: vx as i16,
        vy: vy as i16,
    }
}
