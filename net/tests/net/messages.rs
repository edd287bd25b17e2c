//! The protocol's messages one at a time with real WebSocket clients: WELCOME, terrain and
//! the terrain cache, PING and PONG, INPUT_ACK, CAMERA, BOOKMARK, a full world, and the
//! HTTP endpoints beside the WebSocket.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::common::http_get;
use futures_util::StreamExt;
use migratory_replay::Recording;
use migratory_server::ServeOptions;
use migratory_wire::metric::sample;
use migratory_wire::protocol::{self, InputMsg, ServerMessage, TerrainDelivery, ZoneKind, PROTOCOL_VERSION};
use migratory_wire::terrain_wire::TerrainAssembler;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, TempDir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn welcome_then_terrain_then_snapshots() {
    let mut config = common::small_config();
    // Force chunked delivery, so both paths of the assembler see real server output.
    config.server.terrain_wire.chunk_transport_threshold_bytes = 1;
    config.server.terrain_wire.chunk_target_bytes = 64 * 1024;
    let server = common::start(config).await;
    let expect = server.terrain().clone();
    assert!(expect.chunked && expect.chunk_count >= 2);
    let (mut ws, welcome) = common::join(&server.ws_url(), "mapper").await;
    assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
    assert_eq!(welcome.tick_rate_hz, 60);
    assert_eq!(welcome.snapshot_interval_ticks, 3);
    assert_eq!(welcome.world_size_mm, 256_000);
    assert_eq!(welcome.avatar_id, 400 + welcome.slot);
    assert_eq!(welcome.terrain.content_hash, expect.content_hash);
    assert_eq!(welcome.terrain.chunk_count, expect.chunk_count);
    let mut assembler = TerrainAssembler::new();
    let mut terrain_bytes = 0u64;
    let grid = loop {
        let Some(Ok(Message::Binary(b))) = ws.next().await else {
            panic!("connection ended during terrain");
        };
        match protocol::decode_server(&b) {
            Ok(ServerMessage::Terrain(m)) => {
                terrain_bytes += m.len() as u64;
                if let Some(grid) = assembler.push(m).expect("valid terrain") {
                    break grid;
                }
            }
            other => panic!("expected terrain before anything else, got {other:?}"),
        }
    };
    assert_eq!(terrain_bytes, expect.total_bytes);
    assert_eq!(grid.cells, 256);
    assert_eq!(grid.heights_m.len(), 256 * 256);
    // Then snapshots, each for this client's avatar.
    let Some(Ok(Message::Binary(b))) = ws.next().await else {
        panic!("no snapshot");
    };
    let Ok(ServerMessage::Snapshot {
        tick,
        snapshot: frame,
    }) = protocol::decode_server(&b)
    else {
        panic!("expected a SNAPSHOT");
    };
    assert!(tick >= welcome.join_tick);
    let avatar = u32::from_le_bytes([frame[9], frame[10], frame[11], frame[12]]);
    assert_eq!(avatar, welcome.avatar_id);
    server.shutdown().await.expect("clean stop");
}

/// PING is answered by the connection, not through the tick: with a world ticking twice a
/// second, an answer through the tick would wait 250 ms on average; in place it is the
/// transport's round trip. (The RTT itself is a benchmark figure: the soak's `rtt_p50_ms`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_answered_off_the_tick() {
    let mut config = common::small_config();
    config.world.tick_rate_hz = 2;
    config.world.snapshot_interval_ticks = 1;
    let server = common::start(config).await;
    let (mut ws, _) = common::join(&server.ws_url(), "pinger").await;
    let tick_ms = 500;
    let mut rtts = Vec::new();
    let mut ticks = Vec::new();
    for i in 0..20u64 {
        let sent = Instant::now();
        common::send(&mut ws, protocol::encode_ping(i)).await;
        loop {
            let Some(Ok(Message::Binary(b))) = ws.next().await else {
                panic!("connection ended");
            };
            if let Ok(ServerMessage::Pong { nonce, server_tick }) = protocol::decode_server(&b) {
                assert_eq!(nonce, i);
                rtts.push(sent.elapsed());
                ticks.push(server_tick);
                break;
            }
        }
    }
    rtts.sort();
    let p50 = rtts[rtts.len() / 2];
    // Twenty pings in a row answered within a tick or two: most shared a tick.
    let distinct_ticks = {
        let mut t = ticks.clone();
        t.dedup();
        t.len()
    };
    assert!(
        distinct_ticks < ticks.len() / 2,
        "PONGs named {distinct_ticks} distinct ticks for {} pings ({ticks:?}): answered once per tick?",
        ticks.len()
    );
    assert!(
        p50 < Duration::from_millis(tick_ms / 5),
        "PING p50 {p50:?} with a {tick_ms} ms tick: answered through the tick?"
    );
    server.shutdown().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_world_refuses_the_join_with_1013() {
    let mut config = common::small_config();
    config.world.client_slots_max = 1;
    let server = common::start(config).await;
    let witness = common::Witness::join(&server.ws_url()).await;
    let mut ws = common::connect(&server.ws_url()).await;
    common::send(&mut ws, protocol::encode_hello(PROTOCOL_VERSION, "late", None)).await;
    let (code, reason) = common::close_of(&mut ws).await.expect("a close frame");
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("world full"), "{reason}");
    assert_eq!(server.metrics().joins_rejected_total.load(Relaxed), 1);
    witness.assert_receiving().await;
    witness.stop().await;
    server.shutdown().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_metrics_share_the_port() {
    // With the debug watchdog on, so its thread and heartbeat start and stop with the server.
    let options = ServeOptions {
        debug: true,
        ..ServeOptions::default()
    };
    let server = common::start_with(common::small_config(), options).await;
    let addr = server.local_addr().to_string();
    let (mut ws, _) = common::join(&server.ws_url(), "counted").await;
    let _ = ws.next().await;
    let (status, body) = http_get(&addr, "/healthz").await.expect("GET /healthz");
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert!(
        common::wait_until(Duration::from_secs(2), || server
            .metrics()
            .snapshots_sent_total
            .load(Relaxed)
            > 0)
        .await
    );
    let (status, text) = http_get(&addr, "/metrics").await.expect("GET /metrics");
    assert_eq!(status, 200);
    for name in [
        "migratory_ticks_total",
        "migratory_tick_overruns_total",
        "migratory_ticks_skipped_total",
        "migratory_clients",
        "migratory_connections",
        "migratory_bytes_sent_total",
        "migratory_state_updates_dropped_total",
        "migratory_evictions_total",
        "migratory_recording_checkpoints_total",
        "migratory_tick_loop_recent_checkpoints",
    ] {
        assert!(sample(&text, name, "").is_some(), "{name} missing from:\n{text}");
    }
    assert!(sample(&text, "migratory_ticks_total", "").unwrap() > 0.0);
    assert_eq!(sample(&text, "migratory_clients", ""), Some(1.0));
    assert!(sample(&text, "migratory_bytes_sent_total", "").unwrap() > 0.0);
    for q in ["0.5", "0.99", "1"] {
        assert!(sample(
            &text,
            "migratory_tick_loop_seconds",
            &format!("{{quantile=\"{q}\"}}")
        )
        .is_some());
    }
    assert!(sample(
        &text,
        "migratory_inputs_rejected_total",
        "{reason=\"rate_limited\"}"
    )
    .is_some());
    // `/` is the browser viewer, its files under /viewer/.
    let (status, body) = http_get(&addr, "/").await.expect("GET /");
    assert_eq!(status, 200);
    assert!(body.contains("<title>Migratory</title>") && body.contains("/viewer/main.js"));
    for (path, want) in [
        ("/viewer/main.js", 200),
        ("/viewer/snapshot.js", 200),
        ("/viewer/nope.js", 404),
    ] {
        assert_eq!(http_get(&addr, path).await.expect("GET").0, want, "{path}");
    }
    let (status, body) = http_get(&addr, "/viewer/terrain")
        .await
        .expect("GET /viewer/terrain");
    assert_eq!(status, 200);
    assert!(body.starts_with("MGVT"));
    // A plain GET of /ws is not an upgrade.
    let (status, _) = http_get(&addr, "/ws").await.expect("GET /ws");
    assert_eq!(status, 400);
    drop(ws);
    server.shutdown().await.expect("clean stop");
}

/// Reads messages until `pick` returns something, within five seconds.
async fn read_until<T>(ws: &mut common::Ws, mut pick: impl FnMut(ServerMessage<'_>) -> Option<T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let Some(Ok(Message::Binary(b))) = ws.next().await else {
                panic!("the connection ended");
            };
            if let Some(t) = pick(protocol::decode_server(&b).expect("a valid server message")) {
                return t;
            }
        }
    })
    .await
    .expect("in time")
}

/// WELCOME tells a client everything it needs to play: the zones (as the world placed
/// them), the view and cast figures; a client that names the terrain it has cached gets
/// no terrain, and its first message after WELCOME is a SNAPSHOT it can decode; a wrong
/// hash gets the terrain as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn welcome_carries_the_zones_and_a_cached_terrain_is_skipped() {
    let config = common::small_config();
    let world = migratory_kernel::World::new(config.world.clone(), 1).expect("the test world");
    let server = common::start(config.clone()).await;
    let url = server.ws_url();

    let (mut first, welcome) = common::join(&url, "mapper").await;
    let facts = &welcome.world;
    assert_eq!(facts.view_radius_mm, config.world.view_radius_mm);
    assert_eq!(
        facts.view_entities_max as usize,
        migratory_kernel::VIEW_ENTITIES_MAX
    );
    assert_eq!(
        facts.baseline_window_snapshots as usize,
        migratory_kernel::BASELINE_RING_LEN
    );
    assert_eq!(facts.cast_radius_mm, config.world.player.cast_radius_mm);
    assert_eq!(facts.cast_cooldown_ticks, config.world.player.cast_cooldown_ticks);
    assert_eq!(
        facts.avatar_speed_max_mm_per_tick,
        config.world.player.speed_max_mm_per_tick
    );
    let zones = world.zones();
    assert!(
        !zones.hunting_fields.is_empty(),
        "the test world has hunting fields"
    );
    assert_eq!(facts.zones.len(), 1 + zones.hunting_fields.len());
    let expected = std::iter::once((ZoneKind::Town, zones.town))
        .chain(zones.hunting_fields.iter().map(|&z| (ZoneKind::HuntingField, z)));
    for (got, (kind, z)) in facts.zones.iter().zip(expected) {
        assert_eq!(got.kind, kind);
        assert_eq!(
            (got.x_mm as i32, got.y_mm as i32, got.radius_mm),
            (z.x_mm, z.y_mm, z.radius_mm)
        );
    }
    assert_ne!(welcome.terrain.delivery, TerrainDelivery::Cached);
    assert_eq!(welcome.terrain.content_hash, server.terrain().content_hash);
    // The first client takes the terrain, which is what it would cache.
    let mut assembler = TerrainAssembler::new();
    read_until(&mut first, |m| match m {
        ServerMessage::Terrain(t) => assembler.push(t).expect("valid terrain"),
        other => panic!("terrain first, got {other:?}"),
    })
    .await;

    // A returning client with that terrain cached.
    let hash = welcome.terrain.content_hash;
    let mut again = common::connect(&url).await;
    common::send(
        &mut again,
        protocol::encode_hello(PROTOCOL_VERSION, "returning", Some(&hash)),
    )
    .await;
    let cached = read_until(&mut again, |m| match m {
        ServerMessage::Welcome(w) => Some(w),
        other => panic!("WELCOME first, got {other:?}"),
    })
    .await;
    assert_eq!(cached.terrain.delivery, TerrainDelivery::Cached);
    assert_eq!((cached.terrain.chunk_count, cached.terrain.total_bytes), (0, 0));
    assert_eq!(cached.terrain.content_hash, hash);
    assert_eq!(cached.world, welcome.world);
    let mut decoder = migratory_kernel::ClientDecoder::new();
    let tick = read_until(&mut again, |m| match m {
        ServerMessage::Snapshot { tick, snapshot } => {
            let (header, _) = decoder.decode(snapshot).expect("the first snapshot decodes");
            assert_eq!(header.avatar_id, cached.avatar_id);
            Some(tick)
        }
        other => panic!("a SNAPSHOT right after WELCOME, got {other:?}"),
    })
    .await;
    assert!(tick >= cached.join_tick);

    // A stale cache (another terrain's hash) is no error: the terrain comes as usual.
    let mut stale = common::connect(&url).await;
    common::send(
        &mut stale,
        protocol::encode_hello(PROTOCOL_VERSION, "stale", Some(&[0x5a; 32])),
    )
    .await;
    let w = read_until(&mut stale, |m| match m {
        ServerMessage::Welcome(w) => Some(w),
        other => panic!("WELCOME first, got {other:?}"),
    })
    .await;
    assert_eq!(w.terrain.delivery, welcome.terrain.delivery);
    read_until(&mut stale, |m| match m {
        ServerMessage::Terrain(_) => Some(()),
        other => panic!("terrain after WELCOME, got {other:?}"),
    })
    .await;
    server.shutdown().await.expect("clean stop");
}

/// PONG's tick is never below the tick of a SNAPSHOT the client received before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pong_never_names_a_tick_older_than_a_received_snapshot() {
    let server = common::start(common::small_config()).await;
    let (mut ws, _) = common::join(&server.ws_url(), "clock").await;
    let mut newest_snapshot = 0u32;
    let mut pongs = 0;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut nonce = 0u64;
    while Instant::now() < deadline {
        // Ping right after each snapshot, when a stale tick would show.
        let Some(Ok(Message::Binary(b))) = ws.next().await else {
            panic!("connection ended");
        };
        match protocol::decode_server(&b) {
            Ok(ServerMessage::Snapshot { tick, .. }) => {
                newest_snapshot = newest_snapshot.max(tick);
                nonce += 1;
                common::send(&mut ws, protocol::encode_ping(nonce)).await;
            }
            Ok(ServerMessage::Pong { server_tick, .. }) => {
                assert!(
                    server_tick >= newest_snapshot,
                    "PONG says tick {server_tick} after a SNAPSHOT of tick {newest_snapshot}"
                );
                pongs += 1;
            }
            _ => {}
        }
    }
    assert!(pongs >= 20, "only {pongs} PONGs in 3 s");
    server.shutdown().await.expect("clean stop");
}

/// INPUT_ACK is an INPUT and an ACK in one message: the avatar steers by it, the next
/// snapshots are deltas against the tick it acks, and a stale INPUT inside one is dropped
/// (and counted) while its ACK still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_ack_steers_and_acks_in_one_message() {
    let server = common::start(common::small_config()).await;
    let (mut ws, welcome) = common::join(&server.ws_url(), "both").await;
    let mut decoder = migratory_kernel::ClientDecoder::new();
    // The next snapshot: its tick, its baseline and the avatar's x (mm).
    async fn next(
        ws: &mut common::Ws,
        decoder: &mut migratory_kernel::ClientDecoder,
        avatar: u32,
    ) -> (u32, Option<u32>, i64) {
        read_until(ws, |m| match m {
            ServerMessage::Snapshot { tick, snapshot } => {
                let (header, view) = decoder.decode(snapshot).expect("snapshot decodes");
                let me = view
                    .iter()
                    .find(|e| e.id == avatar)
                    .expect("the avatar is in view");
                Some((tick, header.baseline_tick, i64::from(me.qx) * 64 + 32))
            }
            _ => None,
        })
        .await
    }
    let steer = |seq, dir_x| InputMsg {
        seq,
        dir_x,
        dir_y: 0,
        throttle: 100,
        cast: false,
    };
    let avatar = welcome.avatar_id;
    let (t0, baseline, x0) = next(&mut ws, &mut decoder, avatar).await;
    assert_eq!(baseline, None, "nothing acked yet, so a full snapshot");
    common::send(&mut ws, protocol::encode_input_ack(&steer(5, 1000), t0)).await;
    let mut acked = false;
    let mut t1 = t0;
    for _ in 0..20 {
        let (tick, baseline, _) = next(&mut ws, &mut decoder, avatar).await;
        t1 = tick;
        if baseline.is_some() {
            assert_eq!(baseline, Some(t0), "the delta is against the acked tick");
            acked = true;
            break;
        }
    }
    assert!(acked, "no delta against tick {t0} within 20 snapshots");
    // Seq 5 again: the steering west is stale and dropped, the ACK is taken.
    let stale_before = server.metrics().inputs_stale_total.load(Relaxed);
    common::send(&mut ws, protocol::encode_input_ack(&steer(5, -1000), t1)).await;
    let mut x1 = x0;
    acked = false;
    for _ in 0..20 {
        let (_, baseline, x) = next(&mut ws, &mut decoder, avatar).await;
        x1 = x;
        if baseline == Some(t1) {
            acked = true;
            break;
        }
    }
    assert!(acked, "the stale INPUT's ACK of tick {t1} was not taken");
    assert_eq!(
        server.metrics().inputs_stale_total.load(Relaxed),
        stale_before + 1
    );
    // Still heading east (by the first INPUT_ACK's steering), never turned west.
    for _ in 0..10 {
        let (_, _, x) = next(&mut ws, &mut decoder, avatar).await;
        assert!(x >= x1, "the avatar turned back: x {x1} then {x}");
        x1 = x;
    }
    assert!(x1 > x0, "the avatar did not move east: x {x0} then {x1}");
    server.shutdown().await.expect("clean stop");
}

/// Bots that reconnect name the terrain they already have: every reconnect is served
/// from the cache (no terrain bytes), and the first sessions did get the terrain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_bots_use_the_terrain_cache() {
    let server = common::start(common::small_config()).await;
    let options = migratory_bots::bots::BotOptions {
        url: server.ws_url(),
        clients: 3,
        duration: Duration::from_millis(3500),
        connect_spread: Duration::from_millis(100),
        session: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    let report = migratory_bots::bots::run(&options).await;
    assert_eq!(report.joined, 3, "{report:?}");
    assert!(report.reconnects >= 6, "{report:?}");
    assert!(report.terrain_bytes > 0, "{report:?}");
    assert_eq!(report.reconnect_terrain_bytes, 0, "{report:?}");
    assert_eq!(
        (report.decode_errors, report.connect_failures),
        (0, 0),
        "{report:?}"
    );
    server.shutdown().await.expect("shutdown");
}

/// A spectator over the wire: its view starts around the town's centre and follows each
/// CAMERA, its own id never appears (not to itself, not to a player beside its camera),
/// and INPUT from it is refused by the world as `wrong_role`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spectator_moves_its_camera_and_the_view_follows() {
    let config = common::small_config();
    let server = common::start(config.clone()).await;
    let url = server.ws_url();
    let (mut eye, welcome) = common::spectate(&url, "eye").await;
    let (mut player, _) = common::join(&url, "player").await;
    let r = welcome.world.view_radius_mm as i64;
    let town = welcome.world.zones[0];
    assert_eq!(town.kind, ZoneKind::Town);
    let mut decoder = migratory_kernel::ClientDecoder::new();
    // Reads snapshots (acking each) until one has a non-empty view entirely within the view
    // radius of `centre`; fails after 100 snapshots (5 s at 20 Hz).
    async fn view_around(
        ws: &mut common::Ws,
        decoder: &mut migratory_kernel::ClientDecoder,
        own_id: u32,
        centre: (i64, i64),
        r: i64,
    ) -> usize {
        for _ in 0..100 {
            let (tick, entries) = read_until(ws, |m| match m {
                ServerMessage::Snapshot { tick, snapshot } => {
                    let (_, view) = decoder.decode(snapshot).expect("snapshot decodes");
                    Some((tick, view.to_vec()))
                }
                _ => None,
            })
            .await;
            common::send(ws, protocol::encode_ack(tick)).await;
            assert!(
                entries.iter().all(|e| e.id != own_id),
                "the spectator sees itself"
            );
            let far = entries
                .iter()
                .map(|e| {
                    let (x, y) = (e.qx as i64 * 64 + 32, e.qy as i64 * 64 + 32);
                    ((x - centre.0).pow(2) + (y - centre.1).pow(2)).isqrt()
                })
                .max();
            if far.is_some_and(|d| d <= r + 64) {
                return entries.len();
            }
        }
        panic!("no view around ({}, {}) in 100 snapshots", centre.0, centre.1);
    }
    let home = (town.x_mm as i64, town.y_mm as i64);
    let n = view_around(&mut eye, &mut decoder, welcome.avatar_id, home, r).await;
    assert!(n > 0);
    let corner = (200_000i64, 60_000i64);
    let camera = protocol::CameraMsg {
        seq: 1,
        x_mm: corner.0 as i32,
        y_mm: corner.1 as i32,
    };
    common::send(&mut eye, protocol::encode_camera(&camera)).await;
    let n = view_around(&mut eye, &mut decoder, welcome.avatar_id, corner, r).await;
    assert!(n > 0, "nothing seen at the new camera");

    // The player stands in town, where the camera started: it never sees the spectator.
    let mut pd = migratory_kernel::ClientDecoder::new();
    for _ in 0..10 {
        let view = read_until(&mut player, |m| match m {
            ServerMessage::Snapshot { snapshot, .. } => {
                Some(pd.decode(snapshot).expect("decodes").1.to_vec())
            }
            _ => None,
        })
        .await;
        assert!(view.iter().all(|e| e.id != welcome.avatar_id));
    }
    let steer = InputMsg {
        seq: 2,
        dir_x: 1,
        dir_y: 0,
        throttle: 50,
        cast: false,
    };
    common::send(&mut eye, protocol::encode_input(&steer)).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    let addr = server.local_addr().to_string();
    loop {
        let (_, body) = http_get(&addr, "/metrics").await.expect("GET /metrics");
        if sample(
            &body,
            "migratory_inputs_rejected_total",
            "{reason=\"wrong_role\"}",
        ) == Some(1.0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "wrong_role never counted:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await.expect("clean stop");
}

/// A BOOKMARK from a joined client is recorded with the tick that follows it, its client
/// and its note; a second within a second of the first is dropped; `/metrics` counts both;
/// a BOOKMARK before HELLO closes the connection with 1008.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_from_the_live_page_is_recorded_and_counted() {
    let dir = TempDir::new("bookmarks");
    let mut config = common::small_config();
    config.server.recording.enabled = true;
    config.server.recording.dir = dir.path().to_path_buf();
    let server = common::start(config).await;
    let addr = server.local_addr().to_string();
    let path = server.recording_path().expect("recording on").to_path_buf();
    let (mut ws, welcome) = common::join(&server.ws_url(), "marker").await;
    let _ = ws.next().await;
    let before = server.metrics().current_tick.load(Relaxed);
    common::send(&mut ws, protocol::encode_bookmark("the flock split in two")).await;
    common::send(&mut ws, protocol::encode_bookmark("too soon")).await;
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            let m = server.metrics();
            m.bookmarks_recorded_total.load(Relaxed) == 1 && m.bookmarks_dropped_total.load(Relaxed) == 1
        })
        .await,
        "one bookmark recorded and one dropped"
    );
    let after = server.metrics().current_tick.load(Relaxed);
    let (_, text) = http_get(&addr, "/metrics").await.expect("GET /metrics");
    assert_eq!(
        sample(&text, "migratory_bookmarks_total", "{outcome=\"recorded\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "migratory_bookmarks_total", "{outcome=\"dropped\"}"),
        Some(1.0),
        "{text}"
    );
    let mut early = common::connect(&server.ws_url()).await;
    common::send(&mut early, protocol::encode_bookmark("no hello")).await;
    assert_eq!(common::close_of(&mut early).await.map(|c| c.0), Some(1008));
    drop(ws);
    server.shutdown().await.expect("clean stop");
    let rec = Recording::open(&path).expect("recording opens");
    let marks = rec.bookmarks().expect("bookmarks");
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert_eq!(
        (marks[0].client, marks[0].note.as_str()),
        (welcome.client_id, "the flock split in two")
    );
    assert!(
        (before..=after + 1).contains(&marks[0].tick),
        "bookmark of tick {} sent between ticks {before} and {after}",
        marks[0].tick
    );
}
