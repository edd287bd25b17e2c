//! How a bot plays: its role, where it heads, and when it casts, decided from the zones
//! WELCOME gives and its own position as decoded from each snapshot.
//!
//! Walkers wander the world between random waypoints; town bots stay in the town;
//! hunters go to a hunting field, wander inside it and cast every 2-6 s, standing still
//! while they cast. A bot sends one INPUT per snapshot it decodes.

use migratory_wire::protocol::{InputMsg, WireZone, WorldFacts, ZoneKind};

/// Shares of the roles, in percent of the bots (the rest are walkers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BotMix {
    /// Bots that stay in the town (25 %).
    pub town_percent: u32,
    /// Bots that head for a hunting field and hunt there (50 %).
    pub field_percent: u32,
    /// A hunter casts every `cast_every_ms` (a range, drawn per cast) while in a field.
    pub cast_every_ms: (u32, u32),
}

impl Default for BotMix {
    fn default() -> Self {
        BotMix {
            town_percent: 25,
            field_percent: 50,
            cast_every_ms: (2_000, 6_000),
        }
    }
}

/// What a bot does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Walker,
    Town,
    Hunter,
}

impl Role {
    /// The role of bot `index` under `mix`: a fixed function of the index, so a run's mix
    /// is exact at every bot count that divides evenly.
    pub fn of(index: u32, mix: &BotMix) -> Role {
        let p = index.wrapping_mul(37) % 100;
        if p < mix.town_percent {
            Role::Town
        } else if p < mix.town_percent + mix.field_percent {
            Role::Hunter
        } else {
            Role::Walker
        }
    }
}

/// Snapshots a hunter stands still around a cast.
const CAST_STILL_SNAPSHOTS: u32 = 10;
/// A waypoint closer than this is reached.
const WAYPOINT_REACHED_MM: i64 = 5_000;

/// A bot's steering state.
#[derive(Debug)]
pub struct Brain {
    role: Role,
    rng: u64,
    world_size_mm: u32,
    town: Option<WireZone>,
    /// The hunting field this hunter works in.
    field: Option<WireZone>,
    waypoint: (i32, i32),
    next_cast_ms: u64,
    still_snapshots: u32,
    seq: u32,
    mix: BotMix,
}

impl Brain {
    /// The brain of bot `index`, from its WELCOME's facts.
    pub fn new(index: u32, seed: u64, mix: BotMix, world_size_mm: u32, facts: &WorldFacts) -> Brain {
        let role = Role::of(index, &mix);
        let mut rng = seed ^ (u64::from(index) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let town = facts.zones.iter().copied().find(|z| z.kind == ZoneKind::Town);
        let fields: Vec<WireZone> = facts
            .zones
            .iter()
            .copied()
            .filter(|z| z.kind == ZoneKind::HuntingField)
            .collect();
        let field =
            (!fields.is_empty()).then(|| fields[(next_rand(&mut rng) % fields.len() as u64) as usize]);
        let mut brain = Brain {
            role,
            rng,
            world_size_mm,
            town,
            field,
            waypoint: (0, 0),
            next_cast_ms: 0,
            still_snapshots: 0,
            seq: 0,
            mix,
        };
        brain.waypoint = brain.pick_waypoint();
        brain
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// A point in the bot's area: the town, its field, or anywhere.
    fn pick_waypoint(&mut self) -> (i32, i32) {
        let area = match self.role {
            Role::Town => self.town,
            Role::Hunter => self.field.or(self.town),
            Role::Walker => None,
        };
        let r = next_rand(&mut self.rng);
        match area {
            Some(z) => {
                // Inside 70 % of the radius, so wandering keeps the bot in the zone.
                let reach = (z.radius_mm as i64 * 7 / 10).max(1);
                let dx = (r % (2 * reach as u64)) as i64 - reach;
                let dy = ((r >> 32) % (2 * reach as u64)) as i64 - reach;
                (z.x_mm as i32 + dx as i32, z.y_mm as i32 + dy as i32)
            }
            None => {
                let size = u64::from(self.world_size_mm.max(1));
                ((r % size) as i32, ((r >> 32) % size) as i32)
            }
        }
    }

    /// The INPUT for a snapshot that showed the bot at `pos_mm`, `now_ms` into the run.
    pub fn steer(&mut self, pos_mm: (i32, i32), now_ms: u64) -> InputMsg {
        self.seq += 1;
        let (dx, dy) = (
            self.waypoint.0 as i64 - pos_mm.0 as i64,
            self.waypoint.1 as i64 - pos_mm.1 as i64,
        );
        if dx * dx + dy * dy < WAYPOINT_REACHED_MM * WAYPOINT_REACHED_MM {
            self.waypoint = self.pick_waypoint();
        }
        let in_field = self.field.is_some_and(|f| {
            let (fx, fy) = (pos_mm.0 as i64 - f.x_mm as i64, pos_mm.1 as i64 - f.y_mm as i64);
            fx * fx + fy * fy <= f.radius_mm as i64 * f.radius_mm as i64
        });
        let mut cast = false;
        if self.role == Role::Hunter && in_field && now_ms >= self.next_cast_ms {
            cast = self.next_cast_ms > 0;
            let (lo, hi) = self.mix.cast_every_ms;
            let span = u64::from(hi.saturating_sub(lo)).max(1);
            self.next_cast_ms = now_ms + u64::from(lo) + next_rand(&mut self.rng) % span;
            if cast {
                self.still_snapshots = CAST_STILL_SNAPSHOTS;
            }
        }
        let (dir_x, dir_y) = direction(
            self.waypoint.0 as i64 - pos_mm.0 as i64,
            self.waypoint.1 as i64 - pos_mm.1 as i64,
        );
        let throttle = if self.still_snapshots > 0 {
            self.still_snapshots -= 1;
            0
        } else {
            100
        };
        InputMsg {
            seq: self.seq,
            dir_x,
            dir_y,
            throttle,
            cast,
        }
    }
}

/// A steering direction towards (dx, dy), scaled into i16 (never zero).
fn direction(dx: i64, dy: i64) -> (i16, i16) {
    let m = dx.abs().max(dy.abs()).max(1);
    let (x, y) = ((dx * 30_000 / m) as i16, (dy * 30_000 / m) as i16);
    if x == 0 && y == 0 {
        (1, 0)
    } else {
        (x, y)
    }
}

/// A small deterministic generator for the bots' choices (xorshift64*).
pub(crate) fn next_rand(state: &mut u64) -> u64 {
    let mut x = *state;
    if x == 0 {
        x = 0x9e37_79b9_7f4a_7c15;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> WorldFacts {
        WorldFacts {
            view_radius_mm: 50_000,
            view_entities_max: 128,
            baseline_window_snapshots: 16,
            cast_radius_mm: 6_000,
            cast_cooldown_ticks: 30,
            avatar_speed_max_mm_per_tick: 150,
            zones: vec![
                WireZone {
                    kind: ZoneKind::Town,
                    x_mm: 100_000,
                    y_mm: 100_000,
                    radius_mm: 40_000,
                },
                WireZone {
                    kind: ZoneKind::HuntingField,
                    x_mm: 600_000,
                    y_mm: 300_000,
                    radius_mm: 60_000,
                },
            ],
        }
    }

    #[test]
    fn the_mix_gives_each_role_its_share() {
        let mix = BotMix::default();
        let mut counts = [0u32; 3];
        for i in 0..1000 {
            counts[Role::of(i, &mix) as usize] += 1;
        }
        assert_eq!(counts, [250, 250, 500], "walker, town, hunter");
    }

    #[test]
    fn a_hunter_heads_for_its_field_then_casts_standing_still() {
        let f = facts();
        let mix = BotMix::default();
        let index = (0..100).find(|&i| Role::of(i, &mix) == Role::Hunter).unwrap();
        let mut b = Brain::new(index, 1, mix, 1_024_000, &f);
        let field = f.zones[1];
        // Far away: full throttle towards the field.
        let m = b.steer((100_000, 100_000), 0);
        assert_eq!((m.throttle, m.cast), (100, false));
        assert!(m.dir_x > 0, "{m:?}");
        // In the field: the first visit only schedules; a cast comes 2-6 s later, still.
        let at = (field.x_mm as i32, field.y_mm as i32);
        assert!(!b.steer(at, 1_000).cast);
        let casts: Vec<(u64, InputMsg)> = (1..=200)
            .map(|k| (1_000 + k * 50, b.steer(at, 1_000 + k * 50)))
            .filter(|(_, m)| m.cast)
            .collect();
        assert!(casts.len() >= 2, "{} casts in 10 s", casts.len());
        assert!((2_000..=7_000).contains(&(casts[0].0 - 1_000)), "{}", casts[0].0);
        for (_, m) in &casts {
            assert_eq!(m.throttle, 0, "standing still while casting");
        }
    }

    #[test]
    fn a_town_bot_stays_near_the_town() {
        let f = facts();
        let mix = BotMix::default();
        let index = (0..100).find(|&i| Role::of(i, &mix) == Role::Town).unwrap();
        let mut b = Brain::new(index, 1, mix, 1_024_000, &f);
        let town = f.zones[0];
        for k in 0..100 {
            let pos = b.waypoint;
            let (dx, dy) = (pos.0 as i64 - town.x_mm as i64, pos.1 as i64 - town.y_mm as i64);
            assert!(dx.abs() < town.radius_mm as i64 && dy.abs() < town.radius_mm as i64);
            // Standing on the waypoint picks the next one.
            let m = b.steer(pos, k * 50);
            assert!(!m.cast);
        }
    }
}
