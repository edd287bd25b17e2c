//! Unit tests of the world that need its internals: boids placed by hand, casts in the
//! tick a boid thinks.

use super::rules::spawn_boid;
use super::World;
use crate::boids::Boid;
use crate::config::WorldConfig;
use crate::input::{Input, TickInputs};
use crate::rng;
use crate::zones::Zone;

/// A world on `shards` shards, stepped once with `client` joined, and that client's
/// avatar moved to the middle of the first hunting field (which is returned).
fn hunter_in_field(config: &WorldConfig, shards: usize, client: u32) -> (World, Zone) {
    let mut w = World::new(config.clone(), shards).unwrap();
    let join = Input::Join {
        client,
        name: "hunter".into(),
    };
    w.step(&TickInputs { inputs: vec![join] });
    let field = w.zones.hunting_fields[0];
    let slot = w.slot_of(client).unwrap() as usize;
    (w.players[slot].x_mm, w.players[slot].y_mm) = (field.x_mm, field.y_mm);
    (w, field)
}

/// A boid caught in the very tick its think group steers must think from where it
/// respawned, and alike on every shard count (the cast writes its boids in grid order
/// and re-sorts the grid on the shards before the boid phase).
#[test]
fn a_boid_caught_as_it_thinks_thinks_from_its_respawn_on_every_shard_count() {
    let config = WorldConfig {
        boid_count: 600,
        ..WorldConfig::default()
    };
    let think = config.flocking.think_interval_ticks;
    let shard_counts = [1, 2, 3];
    let mut boids_after: Vec<Vec<Boid>> = Vec::new();
    for shards in shard_counts {
        // Stand the hunter in a field with three boids next to it, one of which thinks
        // in the cast's tick, and the others do not.
        let (mut w, field) = hunter_in_field(&config, shards, 1);
        let tick = w.tick + 1;
        let thinker = (0..w.anchors.len() as u32)
            .find(|id| (tick + id) % think == 0)
            .unwrap();
        let mut boids = w.boids();
        for (k, id) in [thinker, thinker + 1, thinker + 2].into_iter().enumerate() {
            boids[id as usize] = Boid {
                x_mm: field.x_mm + 300 * k as i32,
                y_mm: field.y_mm,
                vx: 40,
                vy: 0,
            };
        }
        w.replace_boids(&boids);
        let cast = Input::Cast { client: 1, seq: 1 };
        let out = w.step(&TickInputs { inputs: vec![cast] });
        assert!(
            out.casts.caught >= 3,
            "shards {shards}: caught {}",
            out.casts.caught
        );
        boids_after.push(w.boids());
    }
    for (i, b) in boids_after.iter().enumerate().skip(1) {
        let first = (0..b.len()).find(|&id| b[id] != boids_after[0][id]);
        assert_eq!(
            first, None,
            "{} shards differ from 1 at boid {first:?}",
            shard_counts[i]
        );
    }
}

/// A boid a cast respawns stands, for the rest of that tick, where it respawned: the
/// boids thinking in that tick see it there as a neighbour, exactly as if it had stood
/// there all along. The cast has to re-sort the grid for that (the boids are kept in
/// grid order); without the re-sort this test fails.
#[test]
fn a_respawned_boid_is_a_neighbour_where_it_respawned_in_the_same_tick() {
    let config = WorldConfig {
        boid_count: 600,
        ..WorldConfig::default()
    };
    let think = config.flocking.think_interval_ticks;
    for shards in [1, 2, 3] {
        // The victim glides in the cast's tick, the neighbour thinks in it.
        // (The cast comes at tick 2.)
        let (victim, neighbour) = (1 + 2 * think, 4 * think - 2);
        let world_with = |cast: bool| {
            let (mut w, field) = hunter_in_field(&config, shards, 1);
            let tick = w.tick + 1;
            assert_eq!((tick + neighbour) % think, 0, "the neighbour must think");
            let bits = rng::draw(w.config.seed, tick, victim, rng::STREAM_SPAWN);
            let respawn = spawn_boid(&w.terrain, &w.config, bits, victim, tick - 1);
            let mut boids = w.boids();
            // A metre from the respawn point (towards the middle): well within neighbour reach.
            let dx = if respawn.x_mm > 500_000 { -1_000 } else { 1_000 };
            boids[neighbour as usize] = Boid {
                x_mm: respawn.x_mm + dx,
                ..respawn
            };
            boids[victim as usize] = if cast {
                Boid {
                    x_mm: field.x_mm + 300,
                    y_mm: field.y_mm,
                    vx: 40,
                    vy: 0,
                }
            } else {
                respawn
            };
            w.replace_boids(&boids);
            let inputs = if cast {
                vec![Input::Cast { client: 1, seq: 1 }]
            } else {
                vec![]
            };
            let caught = w.step(&TickInputs { inputs }).casts.caught;
            (w, caught)
        };
        let ((cast, caught), (placed, _)) = (world_with(true), world_with(false));
        assert_eq!(caught, 1, "shards {shards}: the cast must catch the victim alone");
        for id in [victim, neighbour] {
            assert_eq!(cast.boid(id), placed.boid(id), "shards {shards}, boid {id}");
        }
    }
}

/// `boid(id)` reads a boid from its anchor record, `boids()` gathers the grid order:
/// they must agree at every tick, casts included.
#[test]
fn a_boid_read_by_id_equals_the_gathered_boids() {
    let config = WorldConfig {
        boid_count: 700,
        ..WorldConfig::default()
    };
    let (mut w, field) = hunter_in_field(&config, 2, 7);
    let mut boids = w.boids();
    for (k, b) in boids.iter_mut().take(40).enumerate() {
        (b.x_mm, b.y_mm) = (field.x_mm + 100 * k as i32, field.y_mm);
    }
    w.replace_boids(&boids);
    let mut caught = 0;
    for seq in 1..=30 {
        let inputs = vec![Input::Cast { client: 7, seq }];
        caught += w.step(&TickInputs { inputs }).casts.caught;
        let by_id = w.boids();
        for (id, b) in by_id.iter().enumerate() {
            assert_eq!(w.boid(id as u32), Some(*b), "tick {}, boid {id}", w.tick);
        }
        assert_eq!(w.boid(by_id.len() as u32), None);
    }
    assert!(caught > 0, "no cast caught anything");
}

/// Stepping entities only moves boids, avatars and players exactly as a full step does,
/// on every shard count, with casts, acks, joins and leaves in the inputs; the world says
/// it is detached and refuses a checkpoint.
#[test]
fn entities_only_steps_move_the_entities_as_full_steps_do() {
    use crate::scripted::{Script, ScriptConfig};
    let config = WorldConfig {
        boid_count: 800,
        ..WorldConfig::default()
    };
    let mut full = World::new(config.clone(), 1).unwrap();
    let mut detached: Vec<World> = [1, 3]
        .iter()
        .map(|&n| World::new(config.clone(), n).unwrap())
        .collect();
    let mut script = Script::new(ScriptConfig {
        clients: 24,
        join_spread_ticks: 20,
        churn_per_mille_per_s: 30,
        hunter_per_mille: 800,
        ..ScriptConfig::default()
    });
    let mut inputs = TickInputs::default();
    let (mut casts, mut snapshots) = (0, 0);
    for _ in 0..1500 {
        inputs.inputs.clear();
        script.next_inputs(&full, &full.output().clone(), &mut inputs);
        let out = full.step(&inputs);
        casts += out.casts.made + out.casts.outside_field + out.casts.cooling;
        snapshots += out.snapshots().count();
        for w in &mut detached {
            let out = w.step_entities_only(&inputs);
            assert_eq!(out.snapshots().count(), 0);
            assert_eq!(out.casts, full.output().casts, "tick {}", full.tick());
            assert_eq!(w.tick(), full.tick());
            assert_eq!(w.boids(), full.boids(), "tick {}", full.tick());
            assert_eq!(w.players(), full.players(), "tick {}", full.tick());
        }
    }
    assert!(
        casts > 0 && snapshots > 0,
        "the session casts ({casts}) and sends ({snapshots})"
    );
    assert!(detached.iter().all(World::is_detached) && !full.is_detached());
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::save_checkpoint(&detached[0])
    }));
    assert!(refused.is_err(), "a detached world cannot be checkpointed");
}
