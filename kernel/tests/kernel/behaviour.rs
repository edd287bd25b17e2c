//! The game rules: water, fleeing, casting.

use super::{join, small_config, step};
use migratory_kernel::{Input, World, WorldConfig};

#[test]
fn boids_never_enter_water_and_keep_moving() {
    let config = WorldConfig {
        boid_count: 1_500,
        ..small_config(11)
    };
    let mut world = World::new(config, 2).unwrap();
    let start: Vec<_> = world.boids().to_vec();
    let water_cells = world
        .terrain()
        .heights_mm()
        .iter()
        .filter(|&&h| h < world.config().water_level_mm)
        .count();
    assert!(
        water_cells > 1_000,
        "the test world needs water ({water_cells} cells)"
    );
    for _ in 0..600 {
        step(&mut world, vec![]);
        for (id, b) in world.boids().iter().enumerate() {
            assert!(
                !world.terrain().is_water(b.x_mm, b.y_mm),
                "boid {id} in water at tick {}: {b:?}",
                world.tick()
            );
        }
    }
    let moved = world
        .boids()
        .iter()
        .zip(&start)
        .filter(|(a, b)| (a.x_mm - b.x_mm).abs() + (a.y_mm - b.y_mm).abs() > 5_000)
        .count();
    assert!(moved > world.boids().len() / 2, "only {moved} boids moved far");
}

#[test]
fn boids_move_in_straight_lines_between_thinks() {
    let mut world = World::new(small_config(12), 1).unwrap();
    let think = world.config().flocking.think_interval_ticks;
    assert!(think > 1, "the default world thinks every few ticks");
    let (mut glided, mut turned) = (0, 0);
    for _ in 0..200 {
        let before = world.boids().to_vec();
        step(&mut world, vec![]);
        let tick = world.tick();
        for (id, (b, a)) in before.iter().zip(world.boids()).enumerate() {
            if (tick + id as u32) % think == 0 {
                turned += usize::from((a.vx, a.vy) != (b.vx, b.vy));
                continue;
            }
            glided += 1;
            let expected = (b.x_mm + b.vx as i32, b.y_mm + b.vy as i32, b.vx, b.vy);
            assert_eq!(
                (a.x_mm, a.y_mm, a.vx, a.vy),
                expected,
                "boid {id} at tick {tick} left its line"
            );
        }
    }
    assert!(glided > 0 && turned > 0, "glided {glided}, turned {turned}");
}

/// Boids within `radius` of a point.
fn boids_near(world: &World, x: i32, y: i32, radius: i64) -> usize {
    world
        .boids()
        .iter()
        .filter(|b| {
            let (dx, dy) = ((b.x_mm - x) as i64, (b.y_mm - y) as i64);
            dx * dx + dy * dy < radius * radius
        })
        .count()
}

#[test]
fn boids_flee_a_standing_avatar() {
    let config = WorldConfig {
        boid_count: 3_000,
        ..small_config(4)
    };
    let mut with = World::new(config.clone(), 1).unwrap();
    let mut without = World::new(config.clone(), 1).unwrap();
    step(&mut with, vec![join(1)]);
    step(&mut without, vec![]);
    let p = with.players()[0];
    let r = config.flocking.flee_radius_mm as i64 / 2;
    for _ in 0..180 {
        step(&mut with, vec![]);
        step(&mut without, vec![]);
    }
    let near_with = boids_near(&with, p.x_mm, p.y_mm, r);
    let near_without = boids_near(&without, p.x_mm, p.y_mm, r);
    assert!(
        near_without >= 4,
        "control has too few boids near the avatar ({near_without})"
    );
    assert!(
        near_with * 4 <= near_without,
        "with avatar {near_with}, without {near_without}"
    );
}

/// Steers the player of `client` towards (x, y) until it is within `radius`, at most 2,000 ticks.
fn walk_to(world: &mut World, client: u32, x: i32, y: i32, radius: i64, seq: &mut u32) {
    for _ in 0..2_000 {
        let slot = world.slot_of(client).unwrap() as usize;
        let p = world.players()[slot];
        let (dx, dy) = ((x - p.x_mm) as i64, (y - p.y_mm) as i64);
        if dx * dx + dy * dy <= radius * radius {
            *seq += 1;
            step(
                world,
                vec![Input::Steer {
                    client,
                    seq: *seq,
                    dir_x: 0,
                    dir_y: 0,
                    throttle: 0,
                }],
            );
            return;
        }
        *seq += 1;
        let d = ((dx * dx + dy * dy) as f64).sqrt().max(1.0);
        let throttle = if d < 3_000.0 { 20 } else { 100 };
        step(
            world,
            vec![Input::Steer {
                client,
                seq: *seq,
                dir_x: (dx as f64 / d * 30_000.0) as i16,
                dir_y: (dy as f64 / d * 30_000.0) as i16,
                throttle,
            }],
        );
    }
    panic!("player {client} never reached ({x}, {y})");
}

#[test]
fn casts_catch_only_inside_hunting_fields() {
    let config = WorldConfig {
        boid_count: 4_000,
        ..small_config(21)
    };
    let mut world = World::new(config.clone(), 1).unwrap();
    step(&mut world, vec![join(7)]);
    let mut seq = 0;
    // In town: no field, nothing caught.
    seq += 1;
    let out = step(&mut world, vec![Input::Cast { client: 7, seq }]);
    assert_eq!(
        (out.casts.made, out.casts.outside_field, out.casts.caught),
        (0, 1, 0)
    );
    assert_eq!(world.players()[0].score, 0);

    let field = world.zones().hunting_fields[0];
    walk_to(&mut world, 7, field.x_mm, field.y_mm, 2_000, &mut seq);
    let p = world.players()[0];
    assert!(field.contains(p.x_mm, p.y_mm));
    // Boids flee avatars, so the hunter has to chase one: steer at the nearest boid in
    // the field until one is within the cast radius (avatars outrun boids).
    let r = config.player.cast_radius_mm as i64;
    let mut p = world.players()[0];
    for _ in 0..1_500 {
        p = world.players()[0];
        if field.contains(p.x_mm, p.y_mm) && boids_near(&world, p.x_mm, p.y_mm, r - 200) > 0 {
            break;
        }
        let target = world
            .boids()
            .iter()
            .filter(|b| field.contains(b.x_mm, b.y_mm))
            .min_by_key(|b| ((b.x_mm - p.x_mm) as i64).pow(2) + ((b.y_mm - p.y_mm) as i64).pow(2))
            .copied()
            .expect("boids in the field");
        let (dx, dy) = ((target.x_mm - p.x_mm) as f64, (target.y_mm - p.y_mm) as f64);
        let d = (dx * dx + dy * dy).sqrt().max(1.0);
        seq += 1;
        step(
            &mut world,
            vec![Input::Steer {
                client: 7,
                seq,
                dir_x: (dx / d * 30_000.0) as i16,
                dir_y: (dy / d * 30_000.0) as i16,
                throttle: 100,
            }],
        );
    }
    assert!(field.contains(p.x_mm, p.y_mm), "the chase left the field");
    let before: Vec<_> = world.boids().to_vec();
    let in_radius: Vec<usize> = (0..before.len())
        .filter(|&i| {
            let (dx, dy) = ((before[i].x_mm - p.x_mm) as i64, (before[i].y_mm - p.y_mm) as i64);
            dx * dx + dy * dy <= (config.player.cast_radius_mm as i64).pow(2)
        })
        .collect();
    assert!(!in_radius.is_empty(), "no boid came within the cast radius");
    seq += 1;
    let out = step(&mut world, vec![Input::Cast { client: 7, seq }]);
    assert_eq!(out.casts.made, 1);
    assert_eq!(out.casts.caught as usize, in_radius.len());
    assert_eq!(world.players()[0].score as usize, in_radius.len());
    // Caught boids respawned elsewhere on land.
    for &i in &in_radius {
        let b = world.boids()[i];
        assert!(!world.terrain().is_water(b.x_mm, b.y_mm));
    }
    // The cooldown holds the next cast back.
    seq += 1;
    let out = step(&mut world, vec![Input::Cast { client: 7, seq }]);
    assert_eq!((out.casts.made, out.casts.cooling), (0, 1));
}

#[test]
fn invalid_inputs_are_rejected_and_counted() {
    let mut world = World::new(small_config(2), 1).unwrap();
    step(&mut world, vec![join(1)]);
    let out = step(
        &mut world,
        vec![
            join(1),
            Input::Join {
                client: 2,
                name: String::new(),
            },
            Input::Join {
                client: 3,
                name: "x".repeat(33),
            },
            Input::Steer {
                client: 9,
                seq: 1,
                dir_x: 1,
                dir_y: 0,
                throttle: 10,
            },
            Input::Steer {
                client: 1,
                seq: 1,
                dir_x: 1,
                dir_y: 0,
                throttle: 101,
            },
            Input::Steer {
                client: 1,
                seq: 2,
                dir_x: 0,
                dir_y: 0,
                throttle: 50,
            },
            Input::Ack { client: 1, tick: 99 },
            Input::Leave { client: 42 },
        ],
    );
    let r = out.rejected;
    assert_eq!(
        (
            r.duplicate_join,
            r.name_invalid,
            r.unknown_client,
            r.out_of_range,
            r.ack_from_future
        ),
        (1, 2, 2, 2, 1)
    );
    let out = step(
        &mut world,
        vec![
            Input::Steer {
                client: 1,
                seq: 5,
                dir_x: 1,
                dir_y: 0,
                throttle: 10,
            },
            Input::Steer {
                client: 1,
                seq: 5,
                dir_x: 1,
                dir_y: 1,
                throttle: 10,
            },
        ],
    );
    assert_eq!(out.rejected.stale_seq, 1);
    let slots = world.config().client_slots_max;
    let out = step(&mut world, (100..100 + slots).map(join).collect());
    assert_eq!(out.rejected.slots_full, 1);
    assert_eq!(out.joined.len() as u32, slots - 1);
}
