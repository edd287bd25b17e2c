//! `WorldConfig`: every tunable of a world, validated on construction, with a stable content hash.

use thiserror::Error;

/// Largest world edge: quantized positions (64 mm units) must fit 16 bits on the wire.
pub const WORLD_SIZE_MM_MAX: u32 = 1 << 22;
/// Largest boid population a world may hold.
pub const BOID_COUNT_MAX: u32 = 1_000_000;
/// Largest number of simultaneously joined clients.
pub const CLIENT_SLOTS_MAX: u32 = 4096;
/// Largest terrain grid edge, in cells.
pub const TERRAIN_GRID_CELLS_MAX: u32 = 8192;
/// Largest number of hunting fields.
pub const HUNTING_FIELD_COUNT_MAX: u32 = 16;
/// Largest entity speed: quantized velocity (mm/tick >> 1) must fit an i8.
pub const SPEED_MM_PER_TICK_MAX: u32 = 254;

/// A configuration value that is out of range or inconsistent with another.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("config field `{field}` is {value}, allowed range is {min}..={max}")]
    OutOfRange {
        field: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
    #[error("config field `{field}` is invalid: {reason}")]
    Inconsistent { field: &'static str, reason: String },
}

/// Boid flocking parameters. Weights are fixed-point with 8 fractional bits (256 = 1.0).
#[derive(
    Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, serde::Deserialize,
)]
#[serde(deny_unknown_fields, default)]
pub struct FlockingConfig {
    pub neighbour_radius_mm: u32,
    pub separation_radius_mm: u32,
    /// Neighbours considered per boid (nearest cells first, then id order); bounds the work.
    pub neighbours_max: u32,
    pub cohesion_weight: u32,
    pub alignment_weight: u32,
    pub separation_weight: u32,
    pub speed_min_mm_per_tick: u32,
    pub speed_max_mm_per_tick: u32,
    /// The largest change of velocity in one tick: this is the turn limit.
    pub accel_max_mm_per_tick: u32,
    /// A boid steers (scans its neighbours) once every this many ticks, at a phase set by
    /// its id, and glides on its velocity in between; the turn limit scales with it, so
    /// the flock turns as fast, at a fraction of the cost.
    pub think_interval_ticks: u32,
    pub wander_jitter_mm_per_tick: u32,
    /// Boids within this distance of an avatar flee from it.
    pub flee_radius_mm: u32,
    pub flee_weight: u32,
    /// How far ahead (in ticks of current velocity) a boid looks for water and cliffs.
    pub lookahead_ticks: u32,
    pub terrain_avoid_weight: u32,
    /// Within this distance of the world edge, boids steer back inwards.
    pub edge_margin_mm: u32,
}

/// Player (avatar) parameters.
#[derive(
    Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, serde::Deserialize,
)]
#[serde(deny_unknown_fields, default)]
pub struct PlayerConfig {
    pub speed_max_mm_per_tick: u32,
    pub accel_mm_per_tick: u32,
    pub cast_radius_mm: u32,
    pub cast_cooldown_ticks: u32,
}

/// Everything that defines a world. Two worlds with equal configs (and equal terrain)
/// evolve identically under equal inputs.
#[derive(
    Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, serde::Deserialize,
)]
#[serde(deny_unknown_fields, default)]
pub struct WorldConfig {
    pub seed: u64,
    pub world_size_mm: u32,
    pub terrain_grid_cells: u32,
    pub terrain_cell_size_mm: u32,
    pub terrain_octaves: u32,
    pub terrain_height_max_mm: i32,
    pub water_level_mm: i32,
    /// A height difference between neighbouring cells above this counts as steep.
    pub slope_max_mm_per_cell: u32,
    pub hunting_field_count: u32,
    pub hunting_field_radius_mm: u32,
    pub town_radius_mm: u32,
    pub boid_count: u32,
    pub tick_rate_hz: u32,
    pub snapshot_interval_ticks: u32,
    pub view_radius_mm: u32,
    pub client_slots_max: u32,
    pub downstream_avg_bytes_per_s: u32,
    pub downstream_cap_bytes_per_s: u32,
    pub flocking: FlockingConfig,
    pub player: PlayerConfig,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            seed: 0x5eed_0001,
            world_size_mm: 1_024_000,
            terrain_grid_cells: 1024,
            terrain_cell_size_mm: 1000,
            terrain_octaves: 5,
            terrain_height_max_mm: 60_000,
            water_level_mm: 18_000,
            slope_max_mm_per_cell: 900,
            hunting_field_count: 4,
            hunting_field_radius_mm: 60_000,
            town_radius_mm: 40_000,
            boid_count: 5_000,
            tick_rate_hz: 60,
            snapshot_interval_ticks: 3,
            view_radius_mm: 50_000,
            client_slots_max: 1024,
            downstream_avg_bytes_per_s: 12_000,
            downstream_cap_bytes_per_s: 32_000,
            flocking: FlockingConfig {
                neighbour_radius_mm: 5_000,
                separation_radius_mm: 2_500,
                neighbours_max: 16,
                cohesion_weight: 8,
                alignment_weight: 32,
                separation_weight: 96,
                speed_min_mm_per_tick: 30,
                speed_max_mm_per_tick: 110,
                accel_max_mm_per_tick: 10,
                think_interval_ticks: 8,
                wander_jitter_mm_per_tick: 4,
                flee_radius_mm: 15_000,
                flee_weight: 256,
                lookahead_ticks: 20,
                terrain_avoid_weight: 256,
                edge_margin_mm: 20_000,
            },
            player: PlayerConfig {
                speed_max_mm_per_tick: 150,
                accel_mm_per_tick: 15,
                cast_radius_mm: 6_000,
                cast_cooldown_ticks: 30,
            },
        }
    }
}

/// The defaults of the default world (so a config file may give only some of the fields).
impl Default for FlockingConfig {
    fn default() -> Self {
        WorldConfig::default().flocking
    }
}

impl Default for PlayerConfig {
    fn default() -> Self {
        WorldConfig::default().player
    }
}

fn check(field: &'static str, value: i64, min: i64, max: i64) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::OutOfRange {
            field,
            value,
            min,
            max,
        });
    }
    Ok(())
}

impl WorldConfig {
    /// Checks every field; the first problem found is returned, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let w = WORLD_SIZE_MM_MAX as i64;
        check("world_size_mm", self.world_size_mm as i64, 16_000, w)?;
        check(
            "terrain_grid_cells",
            self.terrain_grid_cells as i64,
            16,
            TERRAIN_GRID_CELLS_MAX as i64,
        )?;
        check(
            "terrain_cell_size_mm",
            self.terrain_cell_size_mm as i64,
            100,
            100_000,
        )?;
        let covered = self.terrain_grid_cells as u64 * self.terrain_cell_size_mm as u64;
        if covered != self.world_size_mm as u64 {
            return Err(ConfigError::Inconsistent {
                field: "world_size_mm",
                reason: format!(
                    "must equal terrain_grid_cells ({}) x terrain_cell_size_mm ({}) = {covered}, is {}",
                    self.terrain_grid_cells, self.terrain_cell_size_mm, self.world_size_mm
                ),
            });
        }
        check("terrain_octaves", self.terrain_octaves as i64, 1, 8)?;
        check(
            "terrain_height_max_mm",
            self.terrain_height_max_mm as i64,
            1,
            1_000_000,
        )?;
        check(
            "water_level_mm",
            self.water_level_mm as i64,
            -1,
            self.terrain_height_max_mm as i64 - 1,
        )?;
        check(
            "slope_max_mm_per_cell",
            self.slope_max_mm_per_cell as i64,
            1,
            1_000_000,
        )?;
        check(
            "hunting_field_count",
            self.hunting_field_count as i64,
            0,
            HUNTING_FIELD_COUNT_MAX as i64,
        )?;
        let quarter = (self.world_size_mm / 4) as i64;
        check(
            "hunting_field_radius_mm",
            self.hunting_field_radius_mm as i64,
            1_000,
            quarter,
        )?;
        check("town_radius_mm", self.town_radius_mm as i64, 1_000, quarter)?;
        check("boid_count", self.boid_count as i64, 0, BOID_COUNT_MAX as i64)?;
        check("tick_rate_hz", self.tick_rate_hz as i64, 1, 1_000)?;
        check(
            "snapshot_interval_ticks",
            self.snapshot_interval_ticks as i64,
            1,
            self.tick_rate_hz as i64,
        )?;
        check("view_radius_mm", self.view_radius_mm as i64, 1_000, quarter)?;
        check(
            "client_slots_max",
            self.client_slots_max as i64,
            1,
            CLIENT_SLOTS_MAX as i64,
        )?;
        check(
            "downstream_cap_bytes_per_s",
            self.downstream_cap_bytes_per_s as i64,
            1_000,
            10_000_000,
        )?;
        check(
            "downstream_avg_bytes_per_s",
            self.downstream_avg_bytes_per_s as i64,
            1,
            self.downstream_cap_bytes_per_s as i64,
        )?;
        // The smallest frame (header plus two counts) must fit one snapshot's average share.
        let per_snapshot = self.downstream_avg_bytes_per_s as u64 * self.snapshot_interval_ticks as u64
            / self.tick_rate_hz as u64;
        if per_snapshot < 64 {
            return Err(ConfigError::Inconsistent {
                field: "downstream_avg_bytes_per_s",
                reason: format!(
                    "gives {per_snapshot} bytes per snapshot at {} Hz / {} ticks; at least 64 are needed",
                    self.tick_rate_hz, self.snapshot_interval_ticks
                ),
            });
        }
        let f = &self.flocking;
        let tenth = (self.world_size_mm / 10) as i64;
        check(
            "flocking.neighbour_radius_mm",
            f.neighbour_radius_mm as i64,
            100,
            tenth,
        )?;
        check(
            "flocking.separation_radius_mm",
            f.separation_radius_mm as i64,
            1,
            f.neighbour_radius_mm as i64,
        )?;
        check("flocking.neighbours_max", f.neighbours_max as i64, 1, 64)?;
        check("flocking.cohesion_weight", f.cohesion_weight as i64, 0, 4096)?;
        check("flocking.alignment_weight", f.alignment_weight as i64, 0, 4096)?;
        check("flocking.separation_weight", f.separation_weight as i64, 0, 4096)?;
        let vmax = SPEED_MM_PER_TICK_MAX as i64;
        check(
            "flocking.speed_max_mm_per_tick",
            f.speed_max_mm_per_tick as i64,
            1,
            vmax,
        )?;
        check(
            "flocking.speed_min_mm_per_tick",
            f.speed_min_mm_per_tick as i64,
            0,
            f.speed_max_mm_per_tick as i64,
        )?;
        check(
            "flocking.accel_max_mm_per_tick",
            f.accel_max_mm_per_tick as i64,
            1,
            vmax,
        )?;
        check(
            "flocking.think_interval_ticks",
            f.think_interval_ticks as i64,
            1,
            crate::hash::THINK_GROUPS_MAX as i64,
        )?;
        check(
            "flocking.wander_jitter_mm_per_tick",
            f.wander_jitter_mm_per_tick as i64,
            0,
            vmax,
        )?;
        check("flocking.flee_radius_mm", f.flee_radius_mm as i64, 0, tenth)?;
        check("flocking.flee_weight", f.flee_weight as i64, 0, 4096)?;
        check("flocking.lookahead_ticks", f.lookahead_ticks as i64, 1, 600)?;
        check(
            "flocking.terrain_avoid_weight",
            f.terrain_avoid_weight as i64,
            0,
            4096,
        )?;
        check("flocking.edge_margin_mm", f.edge_margin_mm as i64, 0, quarter)?;
        let p = &self.player;
        check(
            "player.speed_max_mm_per_tick",
            p.speed_max_mm_per_tick as i64,
            1,
            vmax,
        )?;
        check("player.accel_mm_per_tick", p.accel_mm_per_tick as i64, 1, vmax)?;
        check("player.cast_radius_mm", p.cast_radius_mm as i64, 100, tenth)?;
        check(
            "player.cast_cooldown_ticks",
            p.cast_cooldown_ticks as i64,
            0,
            100_000,
        )?;
        Ok(())
    }

    /// Snapshot bytes a client may receive on average per snapshot (the token bucket's refill).
    pub fn snapshot_budget_avg_bytes(&self) -> u32 {
        (self.downstream_avg_bytes_per_s as u64 * self.snapshot_interval_ticks as u64
            / self.tick_rate_hz as u64) as u32
    }

    /// The hard cap on one snapshot's bytes: with snapshots spaced evenly, no second of
    /// traffic can exceed `downstream_cap_bytes_per_s`.
    pub fn snapshot_budget_cap_bytes(&self) -> u32 {
        (self.downstream_cap_bytes_per_s as u64 * self.snapshot_interval_ticks as u64
            / self.tick_rate_hz as u64) as u32
    }

    /// The canonical encoding: every field little-endian in declaration order, behind a
    /// version tag. Any change to the field list must bump `CONFIG_ENCODING_VERSION`.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(160);
        b.extend_from_slice(b"MGCF");
        b.extend_from_slice(&CONFIG_ENCODING_VERSION.to_le_bytes());
        b.extend_from_slice(&self.seed.to_le_bytes());
        let f = &self.flocking;
        let p = &self.player;
        let words: [u32; 35] = [
            self.world_size_mm,
            self.terrain_grid_cells,
            self.terrain_cell_size_mm,
            self.terrain_octaves,
            self.terrain_height_max_mm as u32,
            self.water_level_mm as u32,
            self.slope_max_mm_per_cell,
            self.hunting_field_count,
            self.hunting_field_radius_mm,
            self.town_radius_mm,
            self.boid_count,
            self.tick_rate_hz,
            self.snapshot_interval_ticks,
            self.view_radius_mm,
            self.client_slots_max,
            self.downstream_avg_bytes_per_s,
            self.downstream_cap_bytes_per_s,
            f.neighbour_radius_mm,
            f.separation_radius_mm,
            f.neighbours_max,
            f.cohesion_weight,
            f.alignment_weight,
            f.separation_weight,
            f.speed_min_mm_per_tick,
            f.speed_max_mm_per_tick,
            f.accel_max_mm_per_tick,
            f.think_interval_ticks,
            f.wander_jitter_mm_per_tick,
            f.flee_radius_mm,
            f.flee_weight,
            f.lookahead_ticks,
            f.terrain_avoid_weight,
            f.edge_margin_mm,
            p.speed_max_mm_per_tick,
            p.accel_mm_per_tick,
        ];
        for w in words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&p.cast_radius_mm.to_le_bytes());
        b.extend_from_slice(&p.cast_cooldown_ticks.to_le_bytes());
        b
    }

    /// blake3 of `canonical_bytes`: equal hashes mean equal configs.
    pub fn content_hash(&self) -> [u8; 32] {
        *blake3::hash(&self.canonical_bytes()).as_bytes()
    }
}

/// Bumped whenever the canonical encoding of `WorldConfig` changes.
pub const CONFIG_ENCODING_VERSION: u32 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        WorldConfig::default().validate().unwrap();
    }

    #[test]
    fn out_of_range_names_the_field() {
        let mut c = WorldConfig::default();
        c.flocking.speed_max_mm_per_tick = 10_000;
        let err = c.validate().unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::OutOfRange {
                    field: "flocking.speed_max_mm_per_tick",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("flocking.speed_max_mm_per_tick"));
    }

    #[test]
    fn world_size_must_match_terrain() {
        let c = WorldConfig {
            world_size_mm: 1_000_000,
            ..WorldConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Inconsistent {
                field: "world_size_mm",
                ..
            })
        ));
    }

    #[test]
    fn hash_changes_with_every_field() {
        let base = WorldConfig::default();
        let h = base.content_hash();
        let mut c = base.clone();
        c.player.cast_cooldown_ticks += 1;
        assert_ne!(c.content_hash(), h);
        let mut c = base.clone();
        c.seed ^= 1;
        assert_ne!(c.content_hash(), h);
        let mut c = base.clone();
        c.flocking.edge_margin_mm += 1;
        assert_ne!(c.content_hash(), h);
        assert_eq!(base.clone().content_hash(), h);
    }
}
