//! The viewer's JavaScript decoders against the Rust ones: this test generates the
//! cross-language test vectors (`net/viewer/test/vectors/snapshots.json`: three clients'
//! snapshot streams with ack lags and dropped snapshots, each frame with the view the
//! kernel's `ClientDecoder` makes of it, plus damaged copies and whether they are
//! rejected), checks the committed file equals them (`MIGRATORY_BLESS=1` rewrites it),
//! then runs the JavaScript tests on them with node.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Command;

use migratory_kernel::{hex, ClientDecoder, Input, TickInputs, ViewEntry, World};
use serde_json::{json, Value};

fn viewer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("viewer")
}

fn view_json(view: &[ViewEntry]) -> Value {
    json!(view
        .iter()
        .map(|e| json!([e.id, e.kind, e.qx, e.qy, e.qvx, e.qvy]))
        .collect::<Vec<_>>())
}

/// What a decoder must make of `bytes`: the view and sent ticks, or a rejection.
fn outcome(decoder: &mut ClientDecoder, bytes: &[u8]) -> Value {
    match decoder.decode(bytes) {
        Ok((h, view)) => {
            let view = view_json(view);
            let sent = decoder
                .sent_ticks(h.tick)
                .map(<[u32]>::to_vec)
                .unwrap_or_default();
            json!({
                "tick": h.tick,
                "baseline_tick": h.baseline_tick,
                "avatar_id": h.avatar_id,
                "score": h.score,
                "view": view,
                "sent_ticks": sent,
            })
        }
        Err(e) => {
            let name = format!("{e:?}");
            let name: String = name.chars().take_while(|c| c.is_alphanumeric()).collect();
            json!({ "error": name })
        }
    }
}

/// Damaged copies of a snapshot: cut short, extended, a flipped bit at several places,
/// another version.
fn mutants(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for cut in [0, 1, 9, 16, 17, bytes.len().saturating_sub(1)] {
        if cut < bytes.len() {
            out.push(bytes[..cut].to_vec());
        }
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    out.push(longer);
    let mut version = bytes.to_vec();
    version[0] = 2;
    out.push(version);
    for at in [17, 18, bytes.len() / 2, bytes.len() - 1] {
        for bit in [0, 3, 7] {
            if at < bytes.len() {
                let mut m = bytes.to_vec();
                m[at] ^= 1 << bit;
                out.push(m);
            }
        }
    }
    out
}

/// Three clients with different ack lags and drop rates on a small crowded world (so budgets carry entries over), 150 ticks.
fn vectors() -> Value {
    // A tight byte budget, so snapshots leave entities out and views carry them over.
    let config = migratory_kernel::WorldConfig {
        downstream_avg_bytes_per_s: 2_400,
        downstream_cap_bytes_per_s: 6_000,
        ..migratory_replay::testkit::small_config(7, 500)
    };
    let mut world = World::new(config, 1).expect("world");
    // (client, ack lag in ticks, dropped snapshots in tenths)
    let clients = [(1u32, 0u32, 0u32), (2, 6, 1), (3, 15, 3)];
    let mut decoders: Vec<ClientDecoder> = clients.iter().map(|_| ClientDecoder::new()).collect();
    let mut acks: Vec<VecDeque<(u32, u32)>> = clients.iter().map(|_| VecDeque::new()).collect();
    let mut frames: Vec<Vec<Value>> = clients.iter().map(|_| Vec::new()).collect();
    let mut inputs = TickInputs::default();
    for t in 1..=150u32 {
        inputs.inputs.clear();
        for (i, &(client, _, _)) in clients.iter().enumerate() {
            if t == 1 {
                inputs.inputs.push(Input::Join {
                    client,
                    name: format!("v{client}"),
                });
                continue;
            }
            // Each client turns on its own pattern, so avatars and views move.
            let phase = (t / 20 + client) % 4;
            let (dir_x, dir_y) = [(1, 0), (0, 1), (-1, 0), (0, -1)][phase as usize];
            inputs.inputs.push(Input::Steer {
                client,
                seq: t,
                dir_x,
                dir_y,
                throttle: 100,
            });
            while acks[i].front().is_some_and(|&(due, _)| due <= t) {
                let (_, tick) = acks[i].pop_front().unwrap_or_default();
                inputs.inputs.push(Input::Ack { client, tick });
            }
        }
        let out = world.step(&inputs);
        for s in out.snapshots() {
            let Some(i) = clients.iter().position(|c| c.0 == s.client) else {
                continue;
            };
            let (_, lag, drop_tenths) = clients[i];
            let delivered = (t * 31 + s.client * 17) % 10 >= drop_tenths;
            let mut frame = json!({ "hex": hex(s.bytes), "delivered": delivered });
            if delivered {
                // Damaged copies, tried on a copy of the decoder (every 8th frame).
                if frames[i].len() % 12 == 0 {
                    let tries: Vec<Value> = mutants(s.bytes)
                        .iter()
                        .map(|m| json!({ "hex": hex(m), "expect": outcome(&mut decoders[i].clone(), m) }))
                        .collect();
                    frame["mutants"] = json!(tries);
                }
                let expect = outcome(&mut decoders[i], s.bytes);
                if let Some(tick) = expect["tick"].as_u64() {
                    acks[i].push_back((t + lag, tick as u32));
                }
                frame["expect"] = expect;
            }
            frames[i].push(frame);
        }
    }
    json!({
        "about": "Generated by net/tests/net/viewer.rs (MIGRATORY_BLESS=1 rewrites it). Per client, \
                  every snapshot in order; a decoder fed the delivered ones must make each \
                  `expect` (a view as [id, kind, qx, qy, qvx, qvy], or an error); each mutant, \
                  tried on a copy of the decoder at that point, must give its `expect` too \
                  (errors: rejected; the kind may differ).",
        "clients": clients.iter().zip(frames).map(|(&(client, lag, drop), frames)| json!({
            "client": client,
            "ack_lag_ticks": lag,
            "dropped_tenths": drop,
            "frames": frames,
        })).collect::<Vec<_>>(),
    })
}

/// Protocol 2 messages from the Rust encoders, with their fields: the client messages
/// the JavaScript encoders must make byte for byte, the server messages they must read.
fn protocol_vectors() -> Value {
    use migratory_net::protocol::{
        self as p, TerrainDelivery, WireTerrainDescriptor, WireZone, WorldFacts, ZoneKind,
    };
    let hash = [0xab; 32];
    let mut client = Vec::new();
    for (name, cached) in [
        ("ada", None),
        ("鳥 bird", Some(&hash)),
        (&"x".repeat(32)[..], None),
    ] {
        client.push(json!({ "what": "hello", "name": name, "hash": cached.map(|h| hex(h)), "hex": hex(&p::encode_hello(2, name, cached)) }));
        client.push(json!({ "what": "hello", "spectate": true, "name": name, "hash": cached.map(|h| hex(h)), "hex": hex(&p::encode_hello_spectating(2, name, cached)) }));
    }
    for (seq, x_mm, y_mm) in [(1u32, 512_000i32, -64i32), (u32::MAX, i32::MIN, i32::MAX)] {
        let m = p::CameraMsg { seq, x_mm, y_mm };
        client.push(json!({ "what": "camera", "seq": seq, "x_mm": x_mm, "y_mm": y_mm, "hex": hex(&p::encode_camera(&m)) }));
    }
    for (seq, dir_x, dir_y, throttle, cast) in [
        (7u32, -300i16, 12i16, 100u8, true),
        (u32::MAX, i16::MIN, i16::MAX, 0, false),
    ] {
        let m = p::InputMsg {
            seq,
            dir_x,
            dir_y,
            throttle,
            cast,
        };
        client.push(json!({ "what": "input", "seq": seq, "dir_x": dir_x, "dir_y": dir_y, "throttle": throttle, "cast": cast, "hex": hex(&p::encode_input(&m)) }));
    }
    for tick in [0u32, 100, u32::MAX] {
        client.push(json!({ "what": "ack", "tick": tick, "hex": hex(&p::encode_ack(tick)) }));
    }
    // Nonces a JS Number holds exactly.
    for nonce in [0u64, 1_234_567_890_123, (1 << 53) - 1] {
        client.push(json!({ "what": "ping", "nonce": nonce, "hex": hex(&p::encode_ping(nonce)) }));
    }
    let zone = |kind, x_mm, y_mm, radius_mm| WireZone {
        kind,
        x_mm,
        y_mm,
        radius_mm,
    };
    let welcome = p::Welcome {
        protocol_version: 2,
        client_id: 17,
        avatar_id: 5003,
        slot: 3,
        join_tick: 123_456,
        tick_rate_hz: 60,
        snapshot_interval_ticks: 3,
        world_size_mm: 1_024_000,
        terrain: WireTerrainDescriptor {
            cells: 1024,
            cell_size_mm: 1000,
            dtype: 1,
            compression: 2,
            delivery: TerrainDelivery::Chunked,
            chunk_count: 5,
            total_bytes: 5_000_000_000,
            content_hash: hash,
        },
        world: WorldFacts {
            view_radius_mm: 30_000,
            view_entities_max: 128,
            baseline_window_snapshots: 16,
            cast_radius_mm: 9_000,
            cast_cooldown_ticks: 90,
            avatar_speed_max_mm_per_tick: 120,
            zones: vec![
                zone(ZoneKind::Town, 512_000, 512_000, 40_000),
                zone(ZoneKind::HuntingField, 200_000, 800_000, 60_000),
                zone(ZoneKind::HuntingField, u32::MAX, 0, 1),
            ],
        },
    };
    let w = &welcome;
    let server = vec![
        json!({ "what": "welcome", "hex": hex(&p::encode_welcome(w)), "fields": {
            "protocolVersion": w.protocol_version, "clientId": w.client_id, "avatarId": w.avatar_id,
            "slot": w.slot, "joinTick": w.join_tick, "tickRateHz": w.tick_rate_hz,
            "snapshotIntervalTicks": w.snapshot_interval_ticks, "worldSizeMm": w.world_size_mm,
            "terrain": { "cells": 1024, "cellSizeMm": 1000, "dtype": 1, "compression": 2, "delivery": 1,
                         "chunkCount": 5, "totalBytes": 5_000_000_000u64, "contentHash": hex(&hash) },
            "viewRadiusMm": 30_000, "viewEntitiesMax": 128, "baselineWindowSnapshots": 16,
            "castRadiusMm": 9_000, "castCooldownTicks": 90, "avatarSpeedMaxMmPerTick": 120,
            "zones": w.world.zones.iter().map(|z| json!({ "kind": z.kind as u8, "x_mm": z.x_mm, "y_mm": z.y_mm, "radius_mm": z.radius_mm })).collect::<Vec<_>>(),
        }}),
        json!({ "what": "pong", "hex": hex(&p::encode_pong(1_234_567_890_123, 4_000_000_000)),
                "fields": { "nonce": 1_234_567_890_123u64, "serverTick": 4_000_000_000u32 } }),
        json!({ "what": "snapshot", "hex": hex(&p::encode_snapshot(&[1, 2, 3])), "fields": { "snapshot": "010203" } }),
    ];
    json!({
        "about": "Generated by net/tests/net/viewer.rs (MIGRATORY_BLESS=1 rewrites it): client \
                  messages the JavaScript encoders must make byte for byte, and server messages \
                  with the fields they must decode to.",
        "client": client,
        "server": server,
    })
}

/// Compares a committed vectors file with `generated`, or rewrites it under `MIGRATORY_BLESS=1`.
fn check_vectors(name: &str, generated: &Value) {
    let path = viewer_dir().join("test/vectors").join(name);
    let text = serde_json::to_string(generated).expect("json") + "\n";
    if std::env::var("MIGRATORY_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("vectors folder");
        std::fs::write(&path, &text).expect("write vectors");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} differs from what the Rust side makes now: rerun with MIGRATORY_BLESS=1 and review",
        path.display()
    );
}

#[test]
fn the_javascript_decoders_agree_with_the_rust_ones() {
    check_vectors("snapshots.json", &vectors());
    check_vectors("protocol.json", &protocol_vectors());
    let out = Command::new("node")
        .arg("--test")
        .arg(viewer_dir().join("test/snapshot.test.mjs"))
        .arg(viewer_dir().join("test/protocol.test.mjs"))
        .output()
        .unwrap_or_else(|e| panic!("running node (install Debian's nodejs; .ci/run does): {e}"));
    assert!(
        out.status.success(),
        "the JavaScript tests failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Installs the browser tests' one npm package (playwright-core, pinned by the lockfile)
/// when it is not there yet, once per test process: the browser tests run in parallel, and
/// two `npm ci` in one folder delete each other's files.
fn ensure_playwright() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(install_playwright);
}

fn install_playwright() {
    let dir = viewer_dir();
    if dir.join("node_modules/playwright-core").exists() {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .status()
        .unwrap_or_else(|e| panic!("running npm (install Debian's nodejs and npm; .ci/run does): {e}"));
    assert!(status.success(), "npm ci in {} failed", dir.display());
}

/// The live viewer in Debian's Chromium: the page loads without console errors, draws the
/// terrain and the entities in view, steering moves the avatar, the HUD counts, and a
/// close by the server is shown with its reason. Screenshots go to
/// `target/tmp/viewer-screenshots/`.
#[test]
fn the_live_viewer_plays_in_a_real_browser() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
    );
    ensure_playwright();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let handle = crate::common::start(crate::common::small_config()).await;
        let url = format!("http://{}/", handle.local_addr());
        let mut child = Command::new("node")
            .arg(viewer_dir().join("test/browser.mjs"))
            .arg(&url)
            .arg(&out_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("node");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut log = Vec::new();
        let mut handle = Some(handle);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            match rx.try_recv() {
                Ok(line) => {
                    if line == "close-now" {
                        if let Some(h) = handle.take() {
                            h.shutdown().await.expect("shutdown");
                        }
                    }
                    log.push(line);
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the browser test hung:\n{}",
                        log.join("\n")
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        }
        let result = child.wait_with_output().expect("node exits");
        assert!(
            result.status.success(),
            "the browser test failed:\n{}\n{}",
            log.join("\n"),
            String::from_utf8_lossy(&result.stderr)
        );
        if let Some(h) = handle.take() {
            let _ = h.shutdown().await;
        }
    });
}

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

/// The replay viewer (`migratory-server view --compare`) in Chromium, against what the
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
    ensure_playwright();
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
    let output = rt.block_on(async {
        let compare = migratory_net::server::replay_view::Compare::Recording(other_path.clone());
        let view = migratory_net::server::replay_view::view(
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
    check_inspected(&rec, ticks[0], of("inspected")[0]);
    check_client_view(&rec, ticks[0], of("client")[0]);
    // The divergence: at tick 150, the changed client's avatar among the highlighted.
    let d = of("divergence")[0];
    let report = migratory_replay::tools::diff(&rec_path, &other_path).expect("diff");
    assert_eq!(report.first_divergent_tick, Some(150));
    assert_eq!(d["divergence"]["status"], "found", "{d}");
    assert_eq!(d["divergence"]["tick"], 150);
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
}

/// The markers against the world's own per-tick outputs: every join, spectate and leave
/// by client, the casts that worked and the boids caught per tick.
fn check_markers(rec: &migratory_replay::Recording, line: &Value) {
    use migratory_net::server::replay_view::marker;
    use std::collections::BTreeMap;
    let markers = &line["markers"];
    assert_eq!(markers["complete"], true);
    assert!(markers["error"].is_null(), "{}", markers["error"]);
    let rows: Vec<[u32; 4]> = serde_json::from_value(markers["markers"].clone()).expect("rows");
    let mut world = rec.start_world(1).expect("start");
    let (mut joins, mut leaves, mut casts, mut caught) =
        (Vec::new(), Vec::new(), BTreeMap::new(), BTreeMap::new());
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.expect("tick");
        let out = world.step(&t.inputs);
        for j in &out.joined {
            let kind = if j.spectator {
                marker::SPECTATE
            } else {
                marker::JOIN
            };
            joins.push([out.tick, kind, j.client, 0]);
        }
        leaves.extend(out.left.iter().map(|&c| [out.tick, marker::LEAVE, c, 0]));
        if out.casts.made > 0 {
            casts.insert(out.tick, out.casts.made);
        }
        if out.casts.caught > 0 {
            caught.insert(out.tick, out.casts.caught);
        }
    }
    let kind = |k: u32| -> Vec<[u32; 4]> { rows.iter().filter(|r| r[1] == k).copied().collect() };
    let mut got_joins: Vec<[u32; 4]> = rows
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
    let span = migratory_net::server::replay_view::TRACK_SECONDS * world.config().tick_rate_hz;
    assert!(!track.is_empty() && track.len() <= span as usize + 1);
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
    let p = world.players()[world.slot_of(client).expect("slot") as usize];
    let acked = (p.acked_tick != u32::MAX).then_some(u64::from(p.acked_tick));
    assert_eq!(view["acked_tick"].as_u64(), acked);
}
