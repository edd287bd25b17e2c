//! Spectators: a slot with a camera instead of an avatar, under the same snapshot rules.

use super::{assert_same_run, join, run, scripted, small_config, step};
use migratory_kernel::{ClientDecoder, Input, ScriptConfig, World, WorldConfig};

fn spectate(client: u32) -> Input {
    Input::Spectate {
        client,
        name: format!("s{client}"),
    }
}

fn camera(client: u32, seq: u32, x_mm: i32, y_mm: i32) -> Input {
    Input::Camera {
        client,
        seq,
        x_mm,
        y_mm,
    }
}

/// Decodes every snapshot `client` gets over `ticks` steps (acking each at once) and returns
/// the last decoded view's entities as (id, x_mm, y_mm).
fn watch(world: &mut World, decoder: &mut ClientDecoder, client: u32, ticks: u32) -> Vec<(u32, i32, i32)> {
    let mut view = Vec::new();
    let mut ack = vec![];
    for _ in 0..ticks {
        let out = step(world, std::mem::take(&mut ack));
        if let Some(s) = out.snapshots().find(|s| s.client == client) {
            let (header, entries) = decoder.decode(s.bytes).expect("a kernel snapshot decodes");
            view = entries
                .iter()
                .map(|e| (e.id, e.qx as i32 * 64 + 32, e.qy as i32 * 64 + 32))
                .collect();
            ack.push(Input::Ack {
                client,
                tick: header.tick,
            });
        };
    }
    view
}

fn farthest_from(view: &[(u32, i32, i32)], x: i32, y: i32) -> i64 {
    view.iter()
        .map(|&(_, ex, ey)| {
            let (dx, dy) = ((ex - x) as i64, (ey - y) as i64);
            (dx * dx + dy * dy).isqrt()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn a_spectator_sees_around_its_camera_and_is_never_seen() {
    let config = WorldConfig {
        boid_count: 2_000,
        ..small_config(21)
    };
    let r = config.view_radius_mm as i64;
    let mut world = World::new(config.clone(), 2).unwrap();
    let out = step(&mut world, vec![spectate(1), join(2)]);
    let joined: Vec<(u32, bool)> = out.joined.iter().map(|j| (j.client, j.spectator)).collect();
    assert_eq!(joined, vec![(1, true), (2, false)]);
    let slot = world.slot_of(1).unwrap();
    let own_id = world.avatar_id(slot);
    let town = world.zones().town;
    let p = world.players()[slot as usize];
    assert!(p.spectator && (p.x_mm, p.y_mm, p.vx, p.vy) == (town.x_mm, town.y_mm, 0, 0));

    // The camera starts in town: the view is around the town's centre (quantisation adds at
    // most a cell of 64 mm).
    let mut decoder = ClientDecoder::new();
    let view = watch(&mut world, &mut decoder, 1, 60);
    assert!(!view.is_empty(), "the spectator sees nothing in town");
    assert!(farthest_from(&view, town.x_mm, town.y_mm) <= r + 64);
    assert!(
        view.iter().all(|&(id, ..)| id != own_id),
        "a spectator sees itself"
    );
    // The player in town sees boids but never the spectator.
    let mut player = ClientDecoder::new();
    let seen = watch(&mut world, &mut player, 2, 60);
    assert!(
        seen.iter().all(|&(id, ..)| id != own_id),
        "a player sees the spectator"
    );

    // Move the camera onto a boid far from town: the view follows it.
    let far = *world
        .boids()
        .iter()
        .max_by_key(|b| ((b.x_mm - town.x_mm) as i64).abs() + ((b.y_mm - town.y_mm) as i64).abs())
        .unwrap();
    step(&mut world, vec![camera(1, 1, far.x_mm, far.y_mm)]);
    let p = world.players()[slot as usize];
    assert_eq!((p.x_mm, p.y_mm), (far.x_mm, far.y_mm));
    let view = watch(&mut world, &mut decoder, 1, 60);
    assert!(!view.is_empty(), "nothing seen at the new camera");
    assert!(farthest_from(&view, far.x_mm, far.y_mm) <= r + 64);

    // The camera is clamped to the world.
    step(&mut world, vec![camera(1, 2, -5, i32::MAX)]);
    let p = world.players()[slot as usize];
    assert_eq!((p.x_mm, p.y_mm), (0, config.world_size_mm as i32 - 1));
}

#[test]
fn nothing_flees_a_spectator() {
    // A world with spectators moving their cameras through the flock is, boid for boid,
    // the world without them.
    let config = WorldConfig {
        boid_count: 2_000,
        ..small_config(22)
    };
    let mut with = World::new(config.clone(), 1).unwrap();
    let mut without = World::new(config, 1).unwrap();
    step(&mut with, vec![spectate(1), spectate(2)]);
    step(&mut without, vec![]);
    for t in 0..300u32 {
        let b = without.boids()[(t as usize * 7) % 2_000];
        step(
            &mut with,
            vec![camera(1, t + 1, b.x_mm, b.y_mm), camera(2, t + 1, b.y_mm, b.x_mm)],
        );
        step(&mut without, vec![]);
        assert_eq!(
            with.boids(),
            without.boids(),
            "boids differ at tick {}",
            with.tick()
        );
    }
}

#[test]
fn spectators_and_players_keep_to_their_roles() {
    let mut world = World::new(small_config(23), 1).unwrap();
    step(&mut world, vec![spectate(1), join(2)]);
    let out = step(
        &mut world,
        vec![
            Input::Steer {
                client: 1,
                seq: 1,
                dir_x: 1,
                dir_y: 0,
                throttle: 50,
            },
            Input::Cast { client: 1, seq: 2 },
            camera(2, 1, 10, 10),
            spectate(2),
            camera(1, 3, 100, 100),
            camera(1, 3, 200, 200),
        ],
    );
    let r = out.rejected;
    assert_eq!(
        (r.wrong_role, r.duplicate_join, r.stale_seq, r.total()),
        (3, 1, 1, 5)
    );
    let slot = world.slot_of(1).unwrap() as usize;
    assert_eq!(
        (world.players()[slot].x_mm, world.players()[slot].y_mm),
        (100, 100)
    );
    // A spectator that leaves frees its slot for a player.
    step(&mut world, vec![Input::Leave { client: 1 }]);
    let out = step(
        &mut world,
        vec![Input::Join {
            client: 1,
            name: "back".into(),
        }],
    );
    assert_eq!(out.joined.len(), 1);
    assert!(!out.joined[0].spectator && !world.players()[out.joined[0].slot as usize].spectator);
}

#[test]
fn sessions_with_spectators_agree_on_every_shard_count_from_1_to_7() {
    for seed in [31u64, 32] {
        let config = || WorldConfig {
            boid_count: 1_500,
            ..small_config(seed)
        };
        let script = ScriptConfig {
            seed,
            clients: 8,
            join_spread_ticks: 30,
            churn_per_mille_per_s: 100,
            spectator_per_mille: 500,
            ..ScriptConfig::default()
        };
        let stream = scripted(config(), script, 400);
        let spectating = stream
            .iter()
            .flatten()
            .filter(|i| matches!(i, Input::Camera { .. }))
            .count();
        assert!(spectating > 20, "seed {seed}: only {spectating} camera moves");
        let expected = run(&mut World::new(config(), 1).unwrap(), &stream);
        for shards in 2..=7 {
            let actual = run(&mut World::new(config(), shards).unwrap(), &stream);
            assert_same_run(seed, &format!("{shards} shards vs 1"), &expected, &actual);
        }
    }
}
