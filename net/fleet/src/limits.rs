//! What a node accepts to run: caps on a world's terrain, boids and client slots, a cap on
//! the world servers running at once, and a model of a world's tick cost that refuses a
//! config whose tick cannot fit its budget on this node.
//!
//! Without them one PUT of an 8,192-cell terrain took 15 s to start and 1.35 GB (and would
//! send 121 MB of terrain to each client), and a million boids ran 83 ms ticks against a
//! 16.7 ms budget.

use migratory_kernel::WorldConfig;

use crate::error::FleetError;

/// The caps. The defaults admit four times the default world's terrain and boids, and its
/// 1,024 client slots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorldLimits {
    /// Most `terrain_grid_cells` a world may have (the grid is that squared: 2,048 cells
    /// is 4.2 million heights, 8 MiB as 16-bit samples before the wire compresses them).
    pub terrain_grid_cells_max: u32,
    /// Most `boid_count` a world may have.
    pub boid_count_max: u32,
    /// Most `client_slots_max` a world may have.
    pub client_slots_max: u32,
    /// Most world servers running at once; a join that would start one more is a 503.
    pub worlds_running_max: u32,
    pub tick_cost: TickCostModel,
}

impl Default for WorldLimits {
    fn default() -> Self {
        WorldLimits {
            terrain_grid_cells_max: 2048,
            boid_count_max: 20_000,
            client_slots_max: 1024,
            worlds_running_max: 64,
            tick_cost: TickCostModel::default(),
        }
    }
}

/// A world's tick cost on this node, linear in its boids and its client slots (a world
/// may fill up), divided over its shards. Measured on the 2-core machine this project is
/// built on (`cargo run --release -p migratory-kernel --example headless -- TICKS 1
/// CLIENTS BOIDS`, the step and every client's snapshot): 40-100 ns a boid (20,000 to
/// 200,000 boids in the default world; denser worlds cost more a boid), 6.6 us a client
/// (1,000 clients), plus about 3 us a client of network system time measured in the
/// 1,000-bot soak. The defaults take the dense end and round up, so a config the model
/// admits fits with room.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TickCostModel {
    pub us_per_boid: f64,
    pub us_per_client: f64,
    /// The share of the tick's duration a world's estimated cost may take.
    pub budget_percent: u32,
}

impl Default for TickCostModel {
    fn default() -> Self {
        TickCostModel {
            us_per_boid: 0.1,
            us_per_client: 10.0,
            budget_percent: 80,
        }
    }
}

impl TickCostModel {
    /// The estimated cost of one tick of `config` on `shards` shards, in ms.
    pub fn estimate_ms(&self, config: &WorldConfig, shards: u32) -> f64 {
        let work_us = f64::from(config.boid_count) * self.us_per_boid
            + f64::from(config.client_slots_max) * self.us_per_client;
        work_us / f64::from(shards.max(1)) / 1000.0
    }

    /// The budget of one tick of `config`, in ms.
    pub fn budget_ms(&self, config: &WorldConfig) -> f64 {
        1000.0 / f64::from(config.tick_rate_hz.max(1)) * f64::from(self.budget_percent) / 100.0
    }
}

impl WorldLimits {
    /// Checks a world config against the caps and the cost model (`shards`: what this
    /// node's servers step on). The error names the key and the flag that set the limit.
    pub fn check(&self, config: &WorldConfig, shards: u32) -> Result<(), FleetError> {
        let invalid = |reason: String| FleetError::Invalid { reason };
        for (key, value, max, flag) in [
            (
                "terrain_grid_cells",
                config.terrain_grid_cells,
                self.terrain_grid_cells_max,
                "--world-terrain-cells-max",
            ),
            (
                "boid_count",
                config.boid_count,
                self.boid_count_max,
                "--world-boids-max",
            ),
            (
                "client_slots_max",
                config.client_slots_max,
                self.client_slots_max,
                "--world-clients-max",
            ),
        ] {
            if value > max {
                return Err(invalid(format!(
                    "world config key `{key}`: {value} is over this fleet's limit of {max} ({flag})"
                )));
            }
        }
        let m = &self.tick_cost;
        let (estimate, budget) = (m.estimate_ms(config, shards), m.budget_ms(config));
        if estimate > budget {
            return Err(invalid(format!(
                "world config: its tick is estimated at {estimate:.1} ms ({} boids x {} us + {} client slots x {} us, over {shards} shard(s)), \
                 over this node's budget of {budget:.1} ms ({}% of a tick at {} Hz; --tick-budget-percent, --tick-cost-us-per-boid, --tick-cost-us-per-client)",
                config.boid_count, m.us_per_boid, config.client_slots_max, m.us_per_client, m.budget_percent, config.tick_rate_hz
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(boids: u32, clients: u32, hz: u32) -> WorldConfig {
        WorldConfig {
            boid_count: boids,
            client_slots_max: clients,
            tick_rate_hz: hz,
            ..WorldConfig::default()
        }
    }

    #[test]
    fn the_default_world_fits_and_what_does_not_fit_is_refused_by_name() {
        let limits = WorldLimits {
            boid_count_max: 2_000_000,
            ..WorldLimits::default()
        };
        assert!(limits.check(&WorldConfig::default(), 1).is_ok());
        // A million boids: measured 83 ms a tick.
        let e = limits.check(&world(1_000_000, 16, 60), 1).expect_err("refused");
        assert!(e.to_string().contains("estimated at 100.2 ms"), "{e}");
        assert!(e.to_string().contains("--tick-budget-percent"), "{e}");
        // The same world on 8 shards fits.
        assert!(limits.check(&world(100_000, 16, 60), 8).is_ok());
        // Twice the tick rate halves the budget.
        assert!(limits.check(&world(5_000, 1024, 60), 1).is_ok());
        assert!(limits.check(&world(5_000, 1024, 120), 1).is_err());
        let e = WorldLimits::default()
            .check(&world(5_000, 2048, 60), 1)
            .expect_err("too many slots");
        assert!(e.to_string().contains("--world-clients-max"), "{e}");
    }
}
