//! One simulator case, all from its seed: a random world config (every field drawn), a random session
//! (the kernel's scripted players with random joins, leaves, spectators, ack lags and
//! dropped snapshots, plus invalid inputs of every kind the kernel refuses), the shard
//! counts to compare, where to checkpoint, how to record, and where to tear the recording.

use migratory_kernel::{
    FlockingConfig, Input, PlayerConfig, ScriptConfig, Terrain, WorldConfig, SPEED_MAX_MM_PER_TICK,
    THINK_INTERVAL_TICKS_MAX,
};

use crate::WriterOptions;

/// A small, seeded generator (SplitMix64): the simulator's own randomness, apart from the
/// kernel's, so a case is a pure function of its seed on any machine.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.next() % (hi - lo + 1)
    }

    /// True `per_mille` times in a thousand.
    pub(crate) fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// Ticks a case runs at most: a case stays short so many run a minute.
pub const CASE_TICKS_MAX: u32 = 240;
/// Most shards a case compares against one.
pub const CASE_SHARDS_MAX: usize = 16;

/// Everything one case does.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub config: WorldConfig,
    pub script: ScriptConfig,
    pub ticks: u32,
    /// The shard count compared with one shard.
    pub shards: usize,
    /// The tick after which a checkpoint is saved, restored (at another shard count) and
    /// stepped on.
    pub checkpoint_tick: u32,
    pub checkpoint_shards: usize,
    pub writer: WriterOptions,
    /// Where the recording is torn, as a fraction of its length in per mille.
    pub tear_per_mille: u32,
    /// Chance per tick, in per mille, of an invalid input on top of the script's.
    pub invalid_per_mille: u32,
}

impl Case {
    /// The case of `seed`.
    pub fn from_seed(seed: u64) -> Case {
        let mut r = Rng::new(seed);
        let config = world_config(&mut r);
        let ticks = r.range(30, u64::from(CASE_TICKS_MAX)) as u32;
        let slots = config.client_slots_max;
        let script = ScriptConfig {
            seed: r.next(),
            // Up to a few more players than slots: some joins are refused.
            clients: r.range(1, u64::from(slots) + 3) as u32,
            join_spread_ticks: r.range(1, 60) as u32,
            churn_per_mille_per_s: r.range(0, 400) as u32,
            ack_lag_ticks_max: r.range(0, 30) as u32,
            drop_per_mille: r.range(0, 300) as u32,
            hunter_per_mille: r.range(0, 1000) as u32,
            spectator_per_mille: r.range(0, 400) as u32,
            tick_rate_hz: config.tick_rate_hz,
        };
        Case {
            seed,
            ticks,
            // Mostly 2 to 4 shards; one case in ten up to 16, which on a small machine
            // costs far more (every shard thread waits on the others each tick).
            shards: if r.chance(100) {
                r.range(5, CASE_SHARDS_MAX as u64)
            } else {
                r.range(2, 4)
            } as usize,
            checkpoint_tick: r.range(1, u64::from(ticks) - 1) as u32,
            checkpoint_shards: r.range(1, 3) as usize,
            writer: WriterOptions {
                block_ticks: r.range(1, 60) as u32,
                checkpoint_interval_ticks: [0, 30, 60, 90][r.range(0, 3) as usize],
                fsync_every_blocks: 0,
            },
            tear_per_mille: r.range(1, 999) as u32,
            invalid_per_mille: r.range(0, 200) as u32,
            script,
            config,
        }
    }
}

/// A random world the kernel accepts and can build: every field of `WorldConfig` drawn
/// within its valid range (the flocking and player tables field by field, each half the
/// time from its whole range and half the time at its default, so both odd and ordinary
/// worlds are common), redrawn until it validates and its terrain has land to spawn on.
fn world_config(r: &mut Rng) -> WorldConfig {
    for _ in 0..64 {
        let c = draw_world(r);
        if c.validate().is_ok() && Terrain::generate(&c).is_ok() {
            return c;
        }
    }
    // The draws above nearly always give a world; this one always does.
    WorldConfig {
        seed: r.next(),
        world_size_mm: 64_000,
        terrain_grid_cells: 64,
        terrain_cell_size_mm: 1_000,
        hunting_field_count: 1,
        hunting_field_radius_mm: 8_000,
        town_radius_mm: 6_000,
        boid_count: 100,
        view_radius_mm: 16_000,
        client_slots_max: 4,
        ..WorldConfig::default()
    }
}

fn draw_world(r: &mut Rng) -> WorldConfig {
    let cells = [32u32, 48, 64, 96, 128][r.range(0, 4) as usize];
    let cell_mm = [500u32, 1_000, 2_000][r.range(0, 2) as usize];
    let world_size_mm = cells * cell_mm;
    let quarter = u64::from(world_size_mm / 4);
    let tenth = u64::from(world_size_mm / 10);
    let tick_rate_hz = [20u32, 30, 60][r.range(0, 2) as usize];
    let snapshot_interval_ticks = r.range(1, 6) as u32;
    // At least 64 bytes a snapshot on average (the smallest frame must fit).
    let avg_min = u64::from(64 * tick_rate_hz).div_ceil(u64::from(snapshot_interval_ticks));
    let avg = r.range(avg_min.max(1_000), 16_000) as u32;
    let height = r.range(1_000, 200_000) as i32;
    let d = WorldConfig::default();
    // A field from its whole range half the time, else its default (kept in range).
    let mut pick = |default: u32, lo: u64, hi: u64| -> u32 {
        if r.chance(500) {
            r.range(lo, hi) as u32
        } else {
            u64::from(default).clamp(lo, hi) as u32
        }
    };
    let vmax = u64::from(SPEED_MAX_MM_PER_TICK);
    let f = &d.flocking;
    let neighbour_radius_mm = pick(f.neighbour_radius_mm, 100, tenth);
    let speed_max_mm_per_tick = pick(f.speed_max_mm_per_tick, 1, vmax);
    let flocking = FlockingConfig {
        neighbour_radius_mm,
        separation_radius_mm: pick(f.separation_radius_mm, 1, u64::from(neighbour_radius_mm)),
        neighbours_max: pick(f.neighbours_max, 1, 64),
        cohesion_weight: pick(f.cohesion_weight, 0, 4096),
        alignment_weight: pick(f.alignment_weight, 0, 4096),
        separation_weight: pick(f.separation_weight, 0, 4096),
        speed_min_mm_per_tick: pick(f.speed_min_mm_per_tick, 0, u64::from(speed_max_mm_per_tick)),
        speed_max_mm_per_tick,
        accel_max_mm_per_tick: pick(f.accel_max_mm_per_tick, 1, vmax),
        think_interval_ticks: pick(f.think_interval_ticks, 1, u64::from(THINK_INTERVAL_TICKS_MAX)),
        wander_jitter_mm_per_tick: pick(f.wander_jitter_mm_per_tick, 0, vmax),
        flee_radius_mm: pick(f.flee_radius_mm, 0, tenth),
        flee_weight: pick(f.flee_weight, 0, 4096),
        lookahead_ticks: pick(f.lookahead_ticks, 1, 600),
        terrain_avoid_weight: pick(f.terrain_avoid_weight, 0, 4096),
        edge_margin_mm: pick(f.edge_margin_mm, 0, quarter),
    };
    let p = &d.player;
    let player = PlayerConfig {
        speed_max_mm_per_tick: pick(p.speed_max_mm_per_tick, 1, vmax),
        accel_mm_per_tick: pick(p.accel_mm_per_tick, 1, vmax),
        cast_radius_mm: pick(p.cast_radius_mm, 100, tenth),
        // Cooldowns past the case's length all behave alike: one cast.
        cast_cooldown_ticks: pick(p.cast_cooldown_ticks, 0, u64::from(CASE_TICKS_MAX)),
    };
    WorldConfig {
        seed: r.next(),
        world_size_mm,
        terrain_grid_cells: cells,
        terrain_cell_size_mm: cell_mm,
        terrain_octaves: r.range(1, 8) as u32,
        terrain_height_max_mm: height,
        // Mostly below the middle height: a world of water has nowhere to spawn.
        water_level_mm: r.range(0, height as u64 * 6 / 10) as i32 - 1,
        slope_max_mm_per_cell: r.range(50, 20_000) as u32,
        hunting_field_count: r.range(0, 3) as u32,
        hunting_field_radius_mm: r.range(1_000, quarter.min(12_000)) as u32,
        town_radius_mm: r.range(1_000, quarter.min(10_000)) as u32,
        boid_count: r.range(0, 300) as u32,
        tick_rate_hz,
        snapshot_interval_ticks,
        view_radius_mm: r.range(1_000, quarter) as u32,
        client_slots_max: r.range(1, 10) as u32,
        downstream_avg_bytes_per_s: avg,
        downstream_cap_bytes_per_s: r.range(u64::from(avg.max(1_000)), u64::from(avg) * 3) as u32,
        flocking,
        player,
    }
}

/// One input the kernel must refuse (and count), of a kind drawn from every kind it
/// refuses: an unknown client, a duplicate join, a bad name, a steer out of range, a stale
/// sequence number, an ack of a future tick, a steer from a spectator or a camera from a
/// player (whichever the drawn client is, one of them is wrong), an ack far in the past.
pub(crate) fn invalid_input(r: &mut Rng, tick: u32, clients: u32) -> Input {
    let client = r.range(1, u64::from(clients.max(1)) + 2) as u32;
    match r.range(0, 8) {
        0 => Input::Steer {
            client: 10_000 + client,
            seq: u32::MAX,
            dir_x: 1,
            dir_y: 0,
            throttle: 50,
        },
        1 => Input::Join {
            client,
            name: format!("again-{client}"),
        },
        2 => Input::Join {
            client: 20_000 + client,
            name: ["", "\u{7}bell", &"x".repeat(40)][r.range(0, 2) as usize].to_string(),
        },
        3 => Input::Steer {
            client,
            seq: u32::MAX,
            dir_x: 0,
            dir_y: 0,
            throttle: r.range(1, 255) as u8,
        },
        4 => Input::Cast { client, seq: 0 },
        5 => Input::Ack {
            client,
            tick: tick + r.range(0, 100) as u32,
        },
        6 => Input::Camera {
            client,
            seq: u32::MAX,
            x_mm: -5,
            y_mm: i32::MAX,
        },
        7 => Input::Leave {
            client: 30_000 + client,
        },
        _ => Input::Ack { client, tick: 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_is_a_function_of_its_seed_and_valid() {
        for seed in 0..200 {
            let a = Case::from_seed(seed);
            let b = Case::from_seed(seed);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "seed {seed}");
            assert_eq!(a.config.validate(), Ok(()), "seed {seed}");
            assert!(
                Terrain::generate(&a.config).is_ok(),
                "seed {seed}: a world with land"
            );
            assert!(a.checkpoint_tick >= 1 && a.checkpoint_tick < a.ticks);
            assert!((2..=CASE_SHARDS_MAX).contains(&a.shards));
        }
        assert_ne!(
            format!("{:?}", Case::from_seed(1)),
            format!("{:?}", Case::from_seed(2))
        );
    }
}
