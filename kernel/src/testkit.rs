//! Shared test fixtures (feature `testkit`): the small world every crate's tests step.

use crate::config::WorldConfig;

/// A small, dense world (192 x 192 m, two hunting fields, eight client slots) with
/// `boid_count` boids, which steps in tens of microseconds.
pub fn small_config(seed: u64, boid_count: u32) -> WorldConfig {
    WorldConfig {
        seed,
        world_size_mm: 192_000,
        terrain_grid_cells: 192,
        terrain_cell_size_mm: 1_000,
        hunting_field_count: 2,
        hunting_field_radius_mm: 20_000,
        town_radius_mm: 15_000,
        boid_count,
        view_radius_mm: 30_000,
        client_slots_max: 8,
        ..WorldConfig::default()
    }
}
