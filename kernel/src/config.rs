//! `WorldConfig`: every tunable of a world, validated on construction, with a stable content hash.

use thiserror::Error;

/// Largest world edge: quantized positions (64 mm units) must fit 16 bits on the wire.
pub const WORLD_SIZE_MAX_MM: u32 = 1 << 22;
/// Largest boid population a world may hold.
pub const BOID_COUNT_MAX: u32 = 1_000_000;
/// Largest number of simultaneously joined clients.
pub const CLIENT_SLOTS_MAX: u32 = 4096;
/// Largest terrain grid edge, in cells.
pub const TERRAIN_GRID_CELLS_MAX: u32 = 8192;
/// Largest number of hunting fields.
pub const HUNTING_FIELD_COUNT_MAX: u32 = 16;
/// Largest entity speed: quantized velocity (mm/tick >> 1) must fit an i8.
pub const SPEED_MAX_MM_PER_TICK: u32 = 254;
/// Largest `flocking.think_interval_ticks`: the state tree has a boid leaf group per
/// think phase (see `hash`), and sizes its tables for this many.
pub const THINK_INTERVAL_TICKS_MAX: u32 = 16;

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
        let w = WORLD_SIZE_MAX_MM as i64;
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
        let vmax = SPEED_MAX_MM_PER_TICK as i64;
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
            THINK_INTERVAL_TICKS_MAX as i64,
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

    /// The canonical encoding: "MGCF", `CONFIG_ENCODING_VERSION`, the seed (u64), then
    /// every other field as a little-endian u32 (i32 fields as their two's complement) in
    /// declaration order, the flocking and player tables inline. The structs are
    /// destructured without `..`, so a new field does not compile until it is encoded
    /// here (and `CONFIG_ENCODING_VERSION` bumped).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let WorldConfig {
            seed,
            world_size_mm,
            terrain_grid_cells,
            terrain_cell_size_mm,
            terrain_octaves,
            terrain_height_max_mm,
            water_level_mm,
            slope_max_mm_per_cell,
            hunting_field_count,
            hunting_field_radius_mm,
            town_radius_mm,
            boid_count,
            tick_rate_hz,
            snapshot_interval_ticks,
            view_radius_mm,
            client_slots_max,
            downstream_avg_bytes_per_s,
            downstream_cap_bytes_per_s,
            flocking,
            player,
        } = self;
        let FlockingConfig {
            neighbour_radius_mm,
            separation_radius_mm,
            neighbours_max,
            cohesion_weight,
            alignment_weight,
            separation_weight,
            speed_min_mm_per_tick,
            speed_max_mm_per_tick,
            accel_max_mm_per_tick,
            think_interval_ticks,
            wander_jitter_mm_per_tick,
            flee_radius_mm,
            flee_weight,
            lookahead_ticks,
            terrain_avoid_weight,
            edge_margin_mm,
        } = flocking;
        let PlayerConfig {
            speed_max_mm_per_tick: player_speed_max_mm_per_tick,
            accel_mm_per_tick,
            cast_radius_mm,
            cast_cooldown_ticks,
        } = player;
        let words: [u32; CONFIG_WORD_COUNT] = [
            *world_size_mm,
            *terrain_grid_cells,
            *terrain_cell_size_mm,
            *terrain_octaves,
            *terrain_height_max_mm as u32,
            *water_level_mm as u32,
            *slope_max_mm_per_cell,
            *hunting_field_count,
            *hunting_field_radius_mm,
            *town_radius_mm,
            *boid_count,
            *tick_rate_hz,
            *snapshot_interval_ticks,
            *view_radius_mm,
            *client_slots_max,
            *downstream_avg_bytes_per_s,
            *downstream_cap_bytes_per_s,
            *neighbour_radius_mm,
            *separation_radius_mm,
            *neighbours_max,
            *cohesion_weight,
            *alignment_weight,
            *separation_weight,
            *speed_min_mm_per_tick,
            *speed_max_mm_per_tick,
            *accel_max_mm_per_tick,
            *think_interval_ticks,
            *wander_jitter_mm_per_tick,
            *flee_radius_mm,
            *flee_weight,
            *lookahead_ticks,
            *terrain_avoid_weight,
            *edge_margin_mm,
            *player_speed_max_mm_per_tick,
            *accel_mm_per_tick,
            *cast_radius_mm,
            *cast_cooldown_ticks,
        ];
        let mut b = Vec::with_capacity(CONFIG_ENCODING_BYTES);
        b.extend_from_slice(CONFIG_ENCODING_MAGIC);
        b.extend_from_slice(&CONFIG_ENCODING_VERSION.to_le_bytes());
        b.extend_from_slice(&seed.to_le_bytes());
        for w in words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        debug_assert_eq!(b.len(), CONFIG_ENCODING_BYTES);
        b
    }

    /// blake3 of `canonical_bytes`: equal hashes mean equal configs.
    pub fn content_hash(&self) -> [u8; 32] {
        *blake3::hash(&self.canonical_bytes()).as_bytes()
    }
}

/// Bumped whenever the canonical encoding of `WorldConfig` changes.
pub const CONFIG_ENCODING_VERSION: u32 = 2;
const CONFIG_ENCODING_MAGIC: &[u8; 4] = b"MGCF";
/// Fields after the seed, each encoded as one u32.
const CONFIG_WORD_COUNT: usize = 37;
/// Bytes of the canonical encoding: magic, version, seed, the words.
const CONFIG_ENCODING_BYTES: usize = 4 + 4 + 8 + 4 * CONFIG_WORD_COUNT;

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

    /// Every field, perturbed alone, changes the content hash; and the perturbation list
    /// is checked against the encoding, so a field left out of it fails here.
    #[test]
    fn hash_changes_with_every_field() {
        let base = WorldConfig::default();
        let h = base.content_hash();
        assert_eq!(base.clone().content_hash(), h);
        type Perturb = fn(&mut WorldConfig);
        let perturbations: [(&str, Perturb); CONFIG_WORD_COUNT + 1] = [
            ("seed", |c| c.seed ^= 1 << 40),
            ("world_size_mm", |c| c.world_size_mm += 1),
            ("terrain_grid_cells", |c| c.terrain_grid_cells += 1),
            ("terrain_cell_size_mm", |c| c.terrain_cell_size_mm += 1),
            ("terrain_octaves", |c| c.terrain_octaves += 1),
            ("terrain_height_max_mm", |c| c.terrain_height_max_mm += 1),
            ("water_level_mm", |c| c.water_level_mm -= 1),
            ("slope_max_mm_per_cell", |c| c.slope_max_mm_per_cell += 1),
            ("hunting_field_count", |c| c.hunting_field_count += 1),
            ("hunting_field_radius_mm", |c| c.hunting_field_radius_mm += 1),
            ("town_radius_mm", |c| c.town_radius_mm += 1),
            ("boid_count", |c| c.boid_count += 1),
            ("tick_rate_hz", |c| c.tick_rate_hz += 1),
            ("snapshot_interval_ticks", |c| c.snapshot_interval_ticks += 1),
            ("view_radius_mm", |c| c.view_radius_mm += 1),
            ("client_slots_max", |c| c.client_slots_max += 1),
            ("downstream_avg_bytes_per_s", |c| {
                c.downstream_avg_bytes_per_s += 1
            }),
            ("downstream_cap_bytes_per_s", |c| {
                c.downstream_cap_bytes_per_s += 1
            }),
            ("flocking.neighbour_radius_mm", |c| {
                c.flocking.neighbour_radius_mm += 1
            }),
            ("flocking.separation_radius_mm", |c| {
                c.flocking.separation_radius_mm += 1
            }),
            ("flocking.neighbours_max", |c| c.flocking.neighbours_max += 1),
            ("flocking.cohesion_weight", |c| c.flocking.cohesion_weight += 1),
            ("flocking.alignment_weight", |c| c.flocking.alignment_weight += 1),
            ("flocking.separation_weight", |c| {
                c.flocking.separation_weight += 1
            }),
            ("flocking.speed_min_mm_per_tick", |c| {
                c.flocking.speed_min_mm_per_tick += 1
            }),
            ("flocking.speed_max_mm_per_tick", |c| {
                c.flocking.speed_max_mm_per_tick += 1
            }),
            ("flocking.accel_max_mm_per_tick", |c| {
                c.flocking.accel_max_mm_per_tick += 1
            }),
            ("flocking.think_interval_ticks", |c| {
                c.flocking.think_interval_ticks += 1
            }),
            ("flocking.wander_jitter_mm_per_tick", |c| {
                c.flocking.wander_jitter_mm_per_tick += 1
            }),
            ("flocking.flee_radius_mm", |c| c.flocking.flee_radius_mm += 1),
            ("flocking.flee_weight", |c| c.flocking.flee_weight += 1),
            ("flocking.lookahead_ticks", |c| c.flocking.lookahead_ticks += 1),
            ("flocking.terrain_avoid_weight", |c| {
                c.flocking.terrain_avoid_weight += 1
            }),
            ("flocking.edge_margin_mm", |c| c.flocking.edge_margin_mm += 1),
            ("player.speed_max_mm_per_tick", |c| {
                c.player.speed_max_mm_per_tick += 1
            }),
            ("player.accel_mm_per_tick", |c| c.player.accel_mm_per_tick += 1),
            ("player.cast_radius_mm", |c| c.player.cast_radius_mm += 1),
            ("player.cast_cooldown_ticks", |c| {
                c.player.cast_cooldown_ticks += 1
            }),
        ];
        let mut encodings = vec![base.canonical_bytes()];
        for (field, perturb) in perturbations {
            let mut c = base.clone();
            perturb(&mut c);
            assert_ne!(c, base, "{field}: the perturbation changed nothing");
            assert_ne!(c.content_hash(), h, "{field} is not in the content hash");
            encodings.push(c.canonical_bytes());
        }
        // Each perturbation changes a different part of the encoding: two fields sharing
        // one word, or one field encoded twice, would make two of these equal.
        encodings.sort();
        encodings.dedup();
        assert_eq!(encodings.len(), CONFIG_WORD_COUNT + 2);
        assert!(encodings.iter().all(|e| e.len() == CONFIG_ENCODING_BYTES));
    }
}
