//! The replay viewer in Debian's Chromium (`viewer/test/replay.mjs`), checked against the
//! recording computed independently here.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{ensure_npm_packages, viewer_dir};

/// Writes a copy of the recording at `from` into `to` in which one input of tick `at` is
/// changed: client `client`'s steering is swapped for a hard turn east. Returns nothing;
/// the copy diverges from `at` on.
fn write_diverging_copy(from: &std::path::Path, to: &std::path::Path, at: u32, client: u32) {
    use migratory_kernel::Input;
    let rec = migratory_replay::Recording::open(from).expect("open");
    let mut world = rec.start_world(1).expect("start");
    let file = std::io::BufWriter::new(std::fs::File::create(to).expect("create"));
    let options = migratory_replay::WriterOptions {
        block_ticks: 20,
        checkpoint_interval_ticks: 100,
        fsync_every_blocks: 0,
    };
    let mut writer = migratory_replay::RecordingWriter::new(file, &world, 1, options).expect("writer");
    for t in rec.ticks_from(rec.first_tick()) {
        let mut t = t.expect("tick");
        if t.tick == at {
            t.inputs.inputs.push(Input::Steer {
                client,
                seq: 1_000_000,
                dir_x: 1000,
                dir_y: 0,
                throttle: 100,
            });
        }
        world.step(&t.inputs);
        let out = world.output().clone();
        writer.record_tick(&t.inputs, &out, &world).expect("record");
    }
    writer.finish().expect("finish");
}

/// The replay viewer (`migratory-replay view --compare`) in Chromium, against what the
/// recording says computed here independently: seeking forward past a checkpoint and then
/// back shows exactly the entities of the recorded world at that tick (as
/// `migratory-replay inspect --tick` computes it: restore, then step); the timeline's join,
/// leave, cast and catch markers agree tick by tick with the world's own outputs; clicking
/// an avatar shows its `inspect --entity` fields and its track; "as client N saw it" draws
/// the view the kernel holds for that client; and the jump to the first divergence from a
/// copy with one changed input lands on that tick with the changed avatar highlighted.
#[test]
fn the_replay_viewer_shows_the_recorded_world_at_a_sought_tick() {
    use migratory_replay::tools::{synth, SynthOptions};
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
    );
    ensure_npm_packages();
    let dir = crate::common::TempDir::new("replay-view");
    let rec_path = dir.path().join("session.mrec");
    let other_path = dir.path().join("other.mrec");
    let config = migratory_replay::testkit::small_config(9, 1_500);
    let options = SynthOptions {
        script: migratory_kernel::ScriptConfig {
            seed: 9,
            clients: 4,
            join_spread_ticks: 10,
            drop_per_mille: 200,
            hunter_per_mille: 1000,
            spectator_per_mille: 250,
            tick_rate_hz: config.tick_rate_hz,
            ..migratory_kernel::ScriptConfig::default()
        },
        config,
        ticks: 900,
        shards: 1,
        writer: migratory_replay::WriterOptions {
            block_ticks: 20,
            checkpoint_interval_ticks: 100,
            fsync_every_blocks: 0,
        },
    };
    synth(&options, &rec_path).expect("synth");
    let rec = migratory_replay::Recording::open(&rec_path).expect("open");
    let changed_client = rec
        .world_at(150, 1)
        .expect("world_at")
        .players()
        .iter()
        .find(|p| p.active && !p.spectator)
        .expect("a player by tick 150")
        .client;
    write_diverging_copy(&rec_path, &other_path, 150, changed_client);
    let ticks = [250u32, 37];
    let rt = crate::common::runtime();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
    let output = rt.block_on(async {
        let compare = migratory_replay::viewer::Compare::Recording(other_path.clone());
        let view = migratory_replay::viewer::view(
            rec_path.clone(),
            "127.0.0.1:0".parse().expect("addr"),
            Some(compare),
        )
        .await
        .expect("view");
        let url = format!("http://{}/", view.local_addr);
        let out = tokio::task::spawn_blocking(move || {
            Command::new("node")
                .arg(viewer_dir().join("test/replay.mjs"))
                .arg(&url)
                .arg(&out_dir)
                .args(ticks.iter().map(u32::to_string))
                .output()
                .expect("node")
        })
        .await
        .expect("join");
        view.task.abort();
        out
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the replay browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let of = |what: &str| -> Vec<&Value> { lines.iter().filter(|l| l["what"] == what).collect() };
    let states = of("state");
    assert_eq!(states.len(), ticks.len());
    for (line, &tick) in states.iter().zip(&ticks) {
        assert_eq!(line["tick"], tick);
        let world = rec.world_at(tick, 1).expect("world_at");
        let mut expected: Vec<(u32, i64, i64, i64, i64)> = world
            .boids()
            .iter()
            .enumerate()
            .map(|(id, b)| {
                (
                    id as u32,
                    i64::from(b.x_mm),
                    i64::from(b.y_mm),
                    i64::from(b.vx),
                    i64::from(b.vy),
                )
            })
            .collect();
        for (slot, p) in world
            .players()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.active && !p.spectator)
        {
            expected.push((
                world.avatar_id(slot as u32),
                i64::from(p.x_mm),
                i64::from(p.y_mm),
                i64::from(p.vx),
                i64::from(p.vy),
            ));
        }
        let drawn: Vec<(u32, i64, i64, i64, i64)> = line["entities"]
            .as_array()
            .expect("entities")
            .iter()
            .map(|e| {
                let n = |k: &str| e[k].as_i64().expect("number");
                (n("id") as u32, n("x_mm"), n("y_mm"), n("vx"), n("vy"))
            })
            .collect();
        assert!(expected.len() > 300, "boids and avatars at tick {tick}");
        assert_eq!(drawn, expected, "tick {tick}");
        assert_eq!(line["drawn"].as_u64(), Some(expected.len() as u64));
    }
    check_markers(&rec, of("markers")[0]);
    check_timeline(of("markers")[0], of("timeline")[0]);
    check_inspected(&rec, ticks[0], of("inspected")[0]);
    check_pinned(&rec, ticks[0], of("pinned")[0]);
    check_client_view(&rec, ticks[0], of("client")[0]);
    // As a client, the camera follows the centre of what it saw.
    let seen = of("client")[0];
    assert_eq!(seen["follow"], true, "{seen}");
    assert_eq!(seen["camera"], seen["view"]["centre"], "{seen}");
    check_client_view(&rec, ticks[0] + 3, of("client-later")[0]);
    // A link opens the moment it names: tick, selection, client (in the menu, followed) and
    // zoom, and the page keeps its address bar on what it shows.
    let link = of("link")[0];
    let client = of("client")[0]["view"]["client"].clone();
    assert_eq!(link["shown"], ticks[0], "{link}");
    assert_eq!(link["selected"], of("inspected")[0]["picked"], "{link}");
    assert_eq!(
        (&link["client"], link["menu"].as_str()),
        (&client, Some(client.to_string().as_str())),
        "{link}"
    );
    assert_eq!(link["zoom"], 40, "{link}");
    assert_eq!(link["camera"], link["centre"], "{link}");
    let search = link["search"].as_str().expect("search");
    assert!(
        search.contains(&format!("tick={}", ticks[0])) && search.contains(&format!("client={client}")),
        "{search}"
    );
    // The keys, from the first sought tick.
    let keys = of("keys")[0];
    let from = keys["from"].as_u64().expect("from");
    let rate = u64::from(rec.meta.config.tick_rate_hz);
    assert_eq!(
        (
            keys["right"].as_u64(),
            keys["left"].as_u64(),
            keys["shiftRight"].as_u64()
        ),
        (Some(from + 1), Some(from - 1), Some(from - 1 + rate)),
        "{keys}"
    );
    assert_eq!(keys["end"].as_u64(), Some(u64::from(rec.last_tick())), "{keys}");
    assert_eq!(keys["playingFrom"]["playing"], true, "{keys}");
    assert!(
        keys["playingFrom"]["tick"].as_u64().is_some_and(|t| t < from),
        "Space at the end plays from the start: {keys}"
    );
    assert_eq!(keys["paused"], true);
    assert!(
        keys["help"]
            .as_str()
            .is_some_and(|h| h.contains("one tick forward")),
        "{keys}"
    );
    // At tick 0 the client has not joined: the panel says so, and when it does.
    let absent = of("client-absent")[0];
    let client = absent["client"].as_u64().expect("client") as u32;
    let joined = rec
        .ticks_from(1)
        .map(|t| t.expect("tick"))
        .find(|t| {
            t.inputs
                .inputs
                .iter()
                .any(|i| matches!(i, migratory_kernel::Input::Join { client: c, .. } | migratory_kernel::Input::Spectate { client: c, .. } if *c == client))
        })
        .expect("the client joins")
        .tick;
    let panel = absent["panel"].as_str().expect("panel");
    assert!(
        panel.contains(&format!(
            "client {client} is not in the world at tick 0 (it joins at tick {joined})"
        )),
        "{panel}"
    );
    // The divergence: at tick 150, the changed client's avatar among the highlighted.
    let d = of("divergence")[0];
    let report = migratory_replay::tools::diff(&rec_path, &other_path).expect("diff");
    assert_eq!(report.first_divergent_tick, Some(150));
    assert_eq!(d["divergence"]["status"], "found", "{d}");
    assert_eq!(d["divergence"]["tick"], 150);
    // The page says what was compared, and that the inputs differ (the copy changed them).
    let (first, last) = report.common_ticks;
    assert_eq!(
        d["divergence"]["compared"],
        serde_json::json!([first, last]),
        "{d}"
    );
    let text = d["text"].as_str().expect("text");
    assert!(
        text.contains(&format!("ticks {first}..{last}")) && text.contains("the recorded inputs differ"),
        "{text}"
    );
    assert_eq!(d["shown"], 150);
    let world = rec.world_at(150, 1).expect("world_at");
    let avatar = world.avatar_id(world.slot_of(changed_client).expect("slot"));
    let highlighted: Vec<u64> = d["highlighted"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(
        highlighted.contains(&u64::from(avatar)),
        "avatar {avatar} not among {highlighted:?}"
    );
    // The jump selects the first differing entity and centres the camera on it, close up.
    let jumped = &d["jumped"];
    let first = d["divergence"]["entities"][0]["id"].clone();
    assert_eq!(jumped["selected"], first, "{d}");
    assert_eq!(jumped["camera"], jumped["at"], "{jumped}");
    assert!(jumped["mmPerPx"].as_f64().is_some_and(|z| z <= 100.0), "{jumped}");
}

/// The markers against the world's own per-tick outputs: every join, spectate and leave
/// by client, the casts that worked and the boids caught per tick.
fn check_markers(rec: &migratory_replay::Recording, line: &Value) {
    use migratory_view::marker;
    use std::collections::BTreeMap;
    let markers = &line["markers"];
    assert_eq!(markers["complete"], true);
    assert!(markers["error"].is_null(), "{}", markers["error"]);
    let rows: Vec<[u32; 5]> = serde_json::from_value(markers["markers"].clone()).expect("rows");
    assert_eq!(
        markers["total"].as_u64(),
        Some(rows.len() as u64),
        "every marker fetched"
    );
    let mut world = rec.start_world(1).expect("start");
    let (mut joins, mut leaves, mut casts, mut caught) =
        (Vec::new(), Vec::new(), BTreeMap::new(), BTreeMap::new());
    // Every catch as a player's score rising: [tick, CATCH, client, boids, avatar id].
    let mut catches = Vec::new();
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.expect("tick");
        let before: Vec<(bool, u32, u32)> = world
            .players()
            .iter()
            .map(|p| (p.active, p.client, p.score))
            .collect();
        let avatars: BTreeMap<u32, u32> = (0..before.len() as u32)
            .filter(|&s| before[s as usize].0)
            .map(|s| (before[s as usize].1, world.avatar_id(s)))
            .collect();
        let out = world.step(&t.inputs).clone();
        for j in &out.joined {
            let kind = if j.spectator {
                marker::SPECTATE
            } else {
                marker::JOIN
            };
            joins.push([out.tick, kind, j.client, 0, world.avatar_id(j.slot)]);
        }
        leaves.extend(
            out.left
                .iter()
                .map(|&c| [out.tick, marker::LEAVE, c, 0, avatars[&c]]),
        );
        for (slot, p) in world.players().iter().enumerate() {
            let (was_active, client, score) = before[slot];
            if p.active && was_active && p.client == client && p.score > score {
                catches.push([
                    out.tick,
                    marker::CATCH,
                    client,
                    p.score - score,
                    world.avatar_id(slot as u32),
                ]);
            }
        }
        if out.casts.made > 0 {
            casts.insert(out.tick, out.casts.made);
        }
        if out.casts.caught > 0 {
            caught.insert(out.tick, out.casts.caught);
        }
    }
    let kind = |k: u32| -> Vec<[u32; 5]> { rows.iter().filter(|r| r[1] == k).copied().collect() };
    let mut got_joins: Vec<[u32; 5]> = rows
        .iter()
        .filter(|r| r[1] == marker::JOIN || r[1] == marker::SPECTATE)
        .copied()
        .collect();
    got_joins.sort();
    joins.sort();
    assert!(joins.len() >= 4, "every client joins");
    assert_eq!(got_joins, joins);
    assert_eq!(kind(marker::LEAVE), leaves);
    let per_tick = |k: u32, n: bool| -> BTreeMap<u32, u32> {
        let mut m = BTreeMap::new();
        for r in kind(k) {
            *m.entry(r[0]).or_insert(0) += if n { r[3] } else { 1 };
        }
        m
    };
    assert!(
        !casts.is_empty() && !caught.is_empty(),
        "the hunters cast and catch: {casts:?} {caught:?}"
    );
    assert_eq!(per_tick(marker::CAST, false), casts);
    assert_eq!(per_tick(marker::CATCH, true), caught);
    let mut got_catches = kind(marker::CATCH);
    got_catches.sort();
    catches.sort();
    assert_eq!(got_catches, catches, "catches with their avatars");
    // Bots drop a fifth of their snapshots and never ack them.
    let unacked = kind(marker::UNACKED).len();
    assert!(unacked > 0, "no unacked snapshot marked");
    let clients = markers["clients"].as_array().expect("clients");
    let total: u64 = clients
        .iter()
        .map(|c| c["unacked"].as_u64().expect("unacked"))
        .sum();
    assert_eq!(total as usize, unacked);
    assert!(line["drawn"].as_u64().is_some_and(|n| n > 0));
}

/// The event timeline (its markers checked by `check_markers`): a drag zoomed to the 60
/// ticks around the first catch, hovering it named it, clicking it showed its tick with the
/// catching avatar selected, `]` (or `[`) in the focused casts lane went to the next (or
/// previous) cast, and a
/// double click showed the whole recording again.
fn check_timeline(markers: &Value, line: &Value) {
    let rows: Vec<[u32; 5]> = serde_json::from_value(markers["markers"]["markers"].clone()).expect("rows");
    let row: [u32; 5] = serde_json::from_value(line["catchRow"].clone()).expect("catch row");
    assert!(
        rows.contains(&row) && row[1] == migratory_view::marker::CATCH,
        "{line}"
    );
    let t = i64::from(row[0]);
    let range: [i64; 2] = serde_json::from_value(line["range"].clone()).expect("range");
    assert!(
        (range[0] - (t - 30).max(0)).abs() <= 2 && (range[1] - (t + 30)).abs() <= 2,
        "zoomed to {range:?} around tick {t}"
    );
    let tip = line["tip"].as_str().expect("tip");
    assert!(
        tip.starts_with(&format!("tick {t}: client {}", row[2]))
            && tip.contains(&format!("caught {} boid", row[3])),
        "{tip}"
    );
    assert_eq!(line["clicked"]["shown"], t, "{line}");
    assert_eq!(line["clicked"]["selected"], row[4], "{line}");
    let casts = rows
        .iter()
        .filter(|r| r[1] == migratory_view::marker::CAST)
        .map(|r| i64::from(r[0]));
    let next = match line["key"].as_str() {
        Some("]") => casts.filter(|&c| c > t).min(),
        Some("[") => casts.filter(|&c| c < t).max(),
        _ => panic!("no key pressed: {line}"),
    };
    assert_eq!(line["next"].as_i64(), next, "{line}");
    assert_eq!(
        line["whole"],
        serde_json::json!([0, markers["markers"]["scanned_tick"]]),
        "{line}"
    );
}

/// A pinned field: the avatar's x_mm at every tick of the timeline's range, as a replay
/// here computes it, its value at the tick shown (one step after the pick), and a plot.
fn check_pinned(rec: &migratory_replay::Recording, tick: u32, line: &Value) {
    let id = line["id"].as_u64().expect("id") as u32;
    assert_eq!(line["field"], "x_mm", "{line}");
    let (from, to) = (
        line["from"].as_u64().expect("from") as u32,
        line["to"].as_u64().expect("to") as u32,
    );
    assert_eq!(
        (from, to),
        (rec.meta.start_tick, rec.last_tick()),
        "the whole recording is in view"
    );
    let slot = (id - rec.meta.config.boid_count) as usize;
    let mut world = rec.world_at(from, 1).expect("world_at");
    let x = |w: &migratory_kernel::World| {
        let p = w.players()[slot];
        (p.active && !p.spectator).then_some(i64::from(p.x_mm))
    };
    let mut expected = vec![(from, x(&world))];
    for t in rec.ticks_from(from + 1) {
        let t = t.expect("tick");
        if t.tick > to {
            break;
        }
        world.step(&t.inputs);
        expected.push((t.tick, x(&world)));
    }
    let got: Vec<(u32, Option<i64>)> = serde_json::from_value(line["series"].clone()).expect("series");
    assert_eq!(got, expected, "the pinned series");
    let shown = expected
        .iter()
        .find(|(t, _)| *t == tick + 1)
        .and_then(|(_, v)| *v)
        .expect("present");
    assert_eq!(line["shown"], tick + 1);
    assert_eq!(line["value"], shown.to_string(), "{line}");
    assert!(line["polylines"].as_u64().is_some_and(|n| n >= 1), "{line}");
}

/// The inspector: the picked avatar's fields as `inspect --entity` makes them, and its
/// track tick by tick over the last seconds.
fn check_inspected(rec: &migratory_replay::Recording, tick: u32, line: &Value) {
    let id = line["picked"].as_u64().expect("picked") as u32;
    let world = rec.world_at(tick, 1).expect("world_at");
    let expected = migratory_replay::tools::entity_report(&world, id).expect("the avatar exists");
    let inspected = &line["inspected"];
    assert_eq!(inspected["tick"], tick);
    assert_eq!(
        inspected["entity"],
        serde_json::to_value(&expected).expect("json")
    );
    assert!(line["panel"]
        .as_str()
        .is_some_and(|p| p.contains(&format!("entity {id}"))));
    let track = inspected["track"].as_array().expect("track");
    let span = migratory_replay::viewer::TRACK_SECONDS * world.config().tick_rate_hz;
    // The avatar joined in the first ticks, so it has a point at every tick of the span.
    assert_eq!(track.len(), span as usize + 1);
    for point in [track.first(), track.get(track.len() / 2), track.last()]
        .into_iter()
        .flatten()
    {
        let t = point[0].as_u64().expect("tick") as u32;
        let w = rec.world_at(t, 1).expect("world_at");
        let p = w.players()[(id - w.config().boid_count) as usize];
        assert_eq!(
            (point[1].as_i64(), point[2].as_i64()),
            (Some(i64::from(p.x_mm)), Some(i64::from(p.y_mm))),
            "track at {t}"
        );
    }
    assert_eq!(track.last().map(|p| p[0].as_u64()), Some(Some(u64::from(tick))));
}

/// "As client N saw it": the view the kernel holds for N after its newest snapshot at or
/// before the tick, drawn entity for entity.
fn check_client_view(rec: &migratory_replay::Recording, tick: u32, line: &Value) {
    let view = &line["view"];
    let client = view["client"].as_u64().expect("client") as u32;
    let sent = view["snapshot_tick"].as_u64().expect("snapshot tick") as u32;
    assert!(
        sent <= tick && tick - sent < 3,
        "snapshot of tick {sent} for tick {tick}"
    );
    let world = rec.world_at(sent, 1).expect("world_at");
    let expected: Vec<[i64; 6]> = world
        .client_view(client, sent)
        .expect("the client's view")
        .iter()
        .map(|e| {
            [
                e.id.into(),
                e.qx.into(),
                e.qy.into(),
                e.qvx.into(),
                e.qvy.into(),
                e.kind.into(),
            ]
        })
        .collect();
    let got: Vec<[i64; 6]> = serde_json::from_value(view["view"].clone()).expect("view rows");
    assert!(!expected.is_empty());
    assert_eq!(got, expected);
    assert_eq!(line["drawn"].as_u64(), Some(expected.len() as u64));
    // The ack is the client's at the tick shown.
    let now = rec.world_at(tick, 1).expect("world_at");
    let p = now.players()[now.slot_of(client).expect("slot") as usize];
    let acked = (p.acked_tick != u32::MAX).then_some(u64::from(p.acked_tick));
    assert_eq!(view["acked_tick"].as_u64(), acked);
}

/// `--compare-shards` and a bad `--compare`, over HTTP: a healthy recording replays the same
/// on 1 and 3 shards (status "none" over all its ticks); a recording of another world
/// config is a clear error, not a divergence at tick 1; and questions about ticks or
/// clients that are not there are 422s that say why.
#[test]
fn the_replay_server_compares_shard_counts_and_refuses_bad_questions() {
    use crate::common::http_get;
    use migratory_replay::viewer::{view, Compare};
    let dir = crate::common::TempDir::new("replay-compare");
    let make = |name: &str, seed: u64| {
        let path = dir.path().join(name);
        synth_240_ticks(&path, seed);
        path
    };
    let (a, other_world) = (make("a.mrec", 3), make("b.mrec", 4));
    let rt = crate::common::runtime();
    rt.block_on(async {
        let divergence = |addr: String| async move {
            for _ in 0..400 {
                let (_, body) = http_get(&addr, "/replay/divergence").await.expect("GET");
                let v: Value = serde_json::from_str(&body).expect("json");
                if v["status"] != "pending" {
                    return v;
                }
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
            panic!("the comparison never finished");
        };
        let any = "127.0.0.1:0".parse().expect("addr");
        let shards = view(a.clone(), any, Some(Compare::Shards(3)))
            .await
            .expect("view");
        let addr = shards.local_addr.to_string();
        let d = divergence(addr.clone()).await;
        assert_eq!(d["status"], "none", "{d}");
        assert_eq!(d["ticks"], 240);
        // A client not in the world at the tick is an answer that says so, not an error
        // (the page asks as it plays and would log one per tick).
        let (status, body) = http_get(&addr, "/replay/client?tick=100&client=77")
            .await
            .expect("GET");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["absent"], "client 77 is not in the world at tick 100", "{v}");
        // So is an avatar id whose slot is free at the tick; an id past every slot is not.
        let (_, info) = http_get(&addr, "/replay/info").await.expect("GET");
        let info: Value = serde_json::from_str(&info).expect("JSON");
        let first_avatar = info["boid_count"].as_u64().expect("boid count");
        let (status, body) = http_get(&addr, &format!("/replay/entity?tick=0&id={first_avatar}"))
            .await
            .expect("GET");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["entity"]["kind"], "absent", "{v}");
        assert!(
            v["entity"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("does not exist at tick 0")),
            "{v}"
        );
        for (path, why) in [
            ("/replay/state?tick=241", "outside the recording"),
            ("/replay/entity?tick=100&id=999999", "does not exist"),
            ("/replay/entity?tick=999&id=1", "outside the recording"),
            ("/replay/client?tick=999&client=1", "outside the recording"),
        ] {
            let (status, body) = http_get(&addr, path).await.expect("GET");
            assert_eq!(status, 422, "{path}: {body}");
            assert!(body.contains(why), "{path}: {body}");
        }
        shards.task.abort();
        // A --compare file that cannot be opened is refused at start-up, naming it.
        let missing = a.with_file_name("no-such-recording.mrec");
        match view(a.clone(), any, Some(Compare::Recording(missing.clone()))).await {
            Err(e @ migratory_replay::viewer::ViewError::Compare { .. }) => {
                assert!(e.to_string().contains("no-such-recording.mrec"), "{e}")
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a missing --compare file was accepted"),
        }
        let other = view(a.clone(), any, Some(Compare::Recording(other_world.clone())))
            .await
            .expect("view");
        let d = divergence(other.local_addr.to_string()).await;
        assert_eq!(d["status"], "error", "{d}");
        assert!(
            d["error"]
                .as_str()
                .is_some_and(|e| e.contains("another world config")),
            "{d}"
        );
        other.task.abort();
    });
}

/// Synthesises 240 ticks of a small world with 3 scripted clients, a checkpoint every 100.
fn synth_240_ticks(path: &std::path::Path, seed: u64) {
    use migratory_replay::tools::{synth, SynthOptions};
    let config = migratory_replay::testkit::small_config(seed, 300);
    let options = SynthOptions {
        script: migratory_kernel::ScriptConfig {
            seed,
            clients: 3,
            tick_rate_hz: config.tick_rate_hz,
            ..migratory_kernel::ScriptConfig::default()
        },
        config,
        ticks: 240,
        shards: 1,
        writer: migratory_replay::WriterOptions {
            block_ticks: 20,
            checkpoint_interval_ticks: 100,
            fsync_every_blocks: 0,
        },
    };
    synth(&options, path).expect("synth");
}

/// Playback's windows (`/replay/states`) hold, frame by frame, the recorded world at each
/// tick they name, as computed here independently (restore, then step): from the start,
/// after a seek back that restores from the in-memory seek index the marker scan filled,
/// and cut short at the recording's end; and a window out of bounds is refused.
#[test]
fn playback_windows_hold_the_recorded_world_at_each_tick() {
    use migratory_replay::viewer::{state_layout as at, view};
    let dir = crate::common::TempDir::new("replay-windows");
    let path = dir.path().join("w.mrec");
    synth_240_ticks(&path, 6);
    let rec = migratory_replay::Recording::open(&path).expect("open");
    let boid_count = rec.meta.config.boid_count;
    // Every frame of a window: its tick and records equal the world's at that tick.
    let check = |bytes: &[u8], ticks: &[u32]| {
        let mut offset = 0;
        for &tick in ticks {
            let word = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
            assert_eq!(word(offset + at::TICK), tick, "frame tick");
            let n = word(offset + at::COUNT) as usize;
            let world = rec.world_at(tick, 1).expect("world_at");
            let avatars = world
                .players()
                .iter()
                .filter(|p| p.active && !p.spectator)
                .count();
            assert_eq!(n, boid_count as usize + avatars, "entities at tick {tick}");
            for k in 0..n {
                let r = &bytes[offset + at::HEADER_BYTES + k * at::ENTITY_BYTES..][..at::ENTITY_BYTES];
                let i32_at = |o: usize| i32::from_le_bytes(r[o..o + 4].try_into().expect("4 bytes"));
                let i16_at = |o: usize| i16::from_le_bytes(r[o..o + 2].try_into().expect("2 bytes"));
                let id = u32::from_le_bytes(r[at::ID..at::ID + 4].try_into().expect("4 bytes"));
                let expected = if id < boid_count {
                    let b = world.boid(id).expect("boid");
                    (b.x_mm, b.y_mm, b.vx, b.vy)
                } else {
                    let slot = (0..world.players().len() as u32)
                        .find(|&s| world.avatar_id(s) == id)
                        .expect("an avatar's slot");
                    let p = world.players()[slot as usize];
                    let clamp = |v: i32| v.clamp(i16::MIN.into(), i16::MAX.into()) as i16;
                    (p.x_mm, p.y_mm, clamp(p.vx), clamp(p.vy))
                };
                let got = (i32_at(at::X_MM), i32_at(at::Y_MM), i16_at(at::VX), i16_at(at::VY));
                assert_eq!(got, expected, "entity {id} at tick {tick}");
            }
            offset += at::HEADER_BYTES + n * at::ENTITY_BYTES;
        }
        assert_eq!(offset, bytes.len(), "bytes past the last frame");
    };
    let rt = crate::common::runtime();
    rt.block_on(async {
        let v = view(path.clone(), "127.0.0.1:0".parse().expect("addr"), None)
            .await
            .expect("view");
        let base = format!("http://{}", v.local_addr);
        let get = |p: String| {
            let url = format!("{base}{p}");
            async move { migratory_http::get(&url).await.expect("GET") }
        };
        let r = get("/replay/states?from=0&count=5&stride=1".into()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        check(&r.body, &[0, 1, 2, 3, 4]);
        // Once the scan is done, the seek index holds a checkpoint a second of ticks.
        let mut index = Value::Null;
        for _ in 0..400 {
            let m: Value =
                serde_json::from_str(&get("/replay/markers?from=0".into()).await.text()).expect("json");
            if m["complete"] == true {
                index = m["seek_index"].clone();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        let hz = u64::from(rec.meta.config.tick_rate_hz);
        assert_eq!(index["spacing_ticks"].as_u64(), Some(hz), "{index}");
        assert_eq!(index["checkpoints"].as_u64(), Some(240 / hz), "{index}");
        // Forward past a checkpoint of the recording, back to one of the index, across the
        // end (a window stops at the last tick).
        for (from, count, stride, ticks) in [
            (150, 4, 7, vec![150, 157, 164, 171]),
            (
                hz as u32 + 3,
                3,
                2,
                vec![hz as u32 + 3, hz as u32 + 5, hz as u32 + 7],
            ),
            (230, 20, 4, vec![230, 234, 238]),
        ] {
            let r = get(format!(
                "/replay/states?from={from}&count={count}&stride={stride}"
            ))
            .await;
            assert_eq!(r.status, 200, "{}", r.text());
            check(&r.body, &ticks);
        }
        for (q, status) in [
            ("from=0&count=0", 400),
            ("from=0&count=121", 400),
            ("from=0&count=2&stride=0", 400),
            ("from=0&count=2&stride=3601", 400),
            ("from=241&count=2", 422),
        ] {
            let r = get(format!("/replay/states?{q}")).await;
            assert_eq!(r.status, status, "{q}: {}", r.text());
        }
        v.task.abort();
    });
}
