//! Zones: one town (a safe zone) and the hunting fields, placed from the seed on land.

use crate::config::WorldConfig;
use crate::rng;
use crate::terrain::Terrain;

/// How many random land cells are tried per zone before placement gives up.
const PLACEMENT_ATTEMPTS_MAX: u32 = 4096;

/// A circular zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zone {
    pub x_mm: i32,
    pub y_mm: i32,
    pub radius_mm: u32,
}

impl Zone {
    /// True when the point lies inside (or on the edge of) the zone.
    #[inline]
    pub fn contains(&self, x_mm: i32, y_mm: i32) -> bool {
        let dx = (x_mm - self.x_mm) as i64;
        let dy = (y_mm - self.y_mm) as i64;
        dx * dx + dy * dy <= self.radius_mm as i64 * self.radius_mm as i64
    }
}

/// The town and the hunting fields of a world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zones {
    pub town: Zone,
    pub hunting_fields: Vec<Zone>,
}

impl Zones {
    /// Places the town, then each hunting field, on land cells drawn from the seed, inside
    /// the world and not overlapping earlier zones. A zone that finds no room after
    /// `PLACEMENT_ATTEMPTS_MAX` draws is skipped, so small worlds get fewer fields.
    pub fn place(config: &WorldConfig, terrain: &Terrain) -> Zones {
        let mut placed: Vec<Zone> = Vec::new();
        let radii = std::iter::once(config.town_radius_mm).chain(std::iter::repeat_n(
            config.hunting_field_radius_mm,
            config.hunting_field_count as usize,
        ));
        for (index, radius) in radii.enumerate() {
            let r = radius as i32;
            let size = config.world_size_mm as i32;
            let found = (0..PLACEMENT_ATTEMPTS_MAX).find_map(|attempt| {
                let bits = rng::draw(config.seed, index as u32, attempt, rng::STREAM_ZONES);
                let (x, y) = terrain.spawn_point(bits);
                let zone = Zone {
                    x_mm: x,
                    y_mm: y,
                    radius_mm: radius,
                };
                let inside = x >= r && y >= r && x <= size - r && y <= size - r;
                let apart = placed.iter().all(|z| {
                    let dx = (z.x_mm - x) as i64;
                    let dy = (z.y_mm - y) as i64;
                    let gap = z.radius_mm as i64 + radius as i64;
                    dx * dx + dy * dy > gap * gap
                });
                (inside && apart).then_some(zone)
            });
            if index == 0 {
                // The town always exists: if no spot is free, it sits on the first land cell.
                let zone = found.unwrap_or_else(|| {
                    let (x, y) = terrain.cell_centre_mm(terrain.land_cells()[0]);
                    Zone {
                        x_mm: x,
                        y_mm: y,
                        radius_mm: radius,
                    }
                });
                placed.push(zone);
            } else if let Some(zone) = found {
                placed.push(zone);
            }
        }
        let town = placed[0];
        Zones {
            town,
            hunting_fields: placed.split_off(1),
        }
    }

    /// The hunting field containing a point, if any.
    pub fn hunting_field_at(&self, x_mm: i32, y_mm: i32) -> Option<usize> {
        self.hunting_fields.iter().position(|z| z.contains(x_mm, y_mm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_world_places_all_zones_apart_on_land() {
        let c = WorldConfig::default();
        let t = Terrain::generate(&c).unwrap();
        let z = Zones::place(&c, &t);
        assert_eq!(z.hunting_fields.len(), c.hunting_field_count as usize);
        let all: Vec<Zone> = std::iter::once(z.town)
            .chain(z.hunting_fields.iter().copied())
            .collect();
        for (i, a) in all.iter().enumerate() {
            assert!(!t.is_water(a.x_mm, a.y_mm));
            for b in &all[i + 1..] {
                assert!(!a.contains(b.x_mm, b.y_mm));
            }
        }
        assert_eq!(z, Zones::place(&c, &t));
    }
}
