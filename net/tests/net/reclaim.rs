//! Reconnect tokens with real WebSocket clients: a dropped player takes its avatar back
//! within the grace (and never after), live frames still equal replayed ones at 1 and 3
//! shards, a half-open connection is replaced, and tokens that are guessed, used up or
//! from another world are refused with 4002. A resumed world lets its old players reclaim.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use migratory_kernel::{ClientDecoder, Input};
use migratory_replay::Recording;
use migratory_server::{ServeOptions, ServerConfig};
use migratory_wire::protocol::{
    self, close_code, HelloOptions, InputMsg, Reclaim, ReconnectToken, ServerMessage, Welcome,
    PROTOCOL_VERSION, RECONNECT_TOKEN_BYTES,
};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{self, TempDir, Ws};

/// How a HELLO went: WELCOME, or the server's close.
enum Hello {
    Welcome(Box<(Ws, Welcome)>),
    Closed(u16, String),
}

async fn hello(url: &str, options: &HelloOptions) -> Hello {
    let mut ws = common::connect(url).await;
    common::send(
        &mut ws,
        protocol::encode_hello_with(PROTOCOL_VERSION, "re", options),
    )
    .await;
    let got = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    if let Ok(ServerMessage::Welcome(w)) = protocol::decode_server(&b) {
                        return Ok(w);
                    }
                }
                Some(Ok(Message::Close(f))) => {
                    return Err(f.map_or((1005, String::new()), |f| {
                        (u16::from(f.code), f.reason.to_string())
                    }))
                }
                Some(Ok(_)) => {}
                other => return Err((1006, format!("{other:?}"))),
            }
        }
    })
    .await
    .expect("an answer to HELLO in time");
    match got {
        Ok(w) => Hello::Welcome(Box::new((ws, w))),
        Err((code, reason)) => Hello::Closed(code, reason),
    }
}

/// Whether a reclaim with `token` is refused with 4002 (and says why).
async fn reclaim_refused(url: &str, token: ReconnectToken) -> bool {
    let options = HelloOptions {
        reclaim: Some(Reclaim {
            token,
            keeps_baselines: false,
        }),
        ..HelloOptions::default()
    };
    match hello(url, &options).await {
        Hello::Closed(code, reason) => code == close_code::RECLAIM_REFUSED && reason.contains("token"),
        Hello::Welcome(_) => false,
    }
}

/// A player that acks and steers, decodes every snapshot with the reference decoder, and
/// keeps every frame it received over all its connections.
struct Player {
    /// None between a cut and the reclaim.
    ws: Option<Ws>,
    welcome: Welcome,
    token: ReconnectToken,
    decoder: ClientDecoder,
    /// (tick, snapshot bytes) over every connection.
    frames: Vec<(u32, Vec<u8>)>,
    scores: Vec<u32>,
    seq: u32,
}

impl Player {
    async fn join(url: &str) -> Player {
        let options = HelloOptions {
            want_token: true,
            ..HelloOptions::default()
        };
        let Hello::Welcome(b) = hello(url, &options).await else {
            panic!("join refused")
        };
        let (ws, welcome) = *b;
        let token = welcome
            .reconnect_token
            .expect("WELCOME carries the asked-for token");
        Player {
            ws: Some(ws),
            welcome,
            token,
            decoder: ClientDecoder::new(),
            frames: Vec::new(),
            scores: Vec::new(),
            seq: 0,
        }
    }

    /// Reads, decodes, acks and steers for `d`; a cast with every 5th INPUT.
    async fn play(&mut self, d: Duration) {
        let end = tokio::time::Instant::now() + d;
        let ws = self.ws.as_mut().expect("connected");
        while let Ok(msg) = tokio::time::timeout_at(end, ws.next()).await {
            let Some(Ok(Message::Binary(b))) = msg else {
                panic!("client {} lost its connection: {msg:?}", self.welcome.client_id)
            };
            let Ok(ServerMessage::Snapshot { tick, snapshot }) = protocol::decode_server(&b) else {
                continue;
            };
            let (header, _) = self.decoder.decode(snapshot).unwrap_or_else(|e| {
                panic!(
                    "client {} could not decode the snapshot of tick {tick}: {e}",
                    self.welcome.client_id
                )
            });
            assert_eq!(header.avatar_id, self.welcome.avatar_id);
            self.frames.push((tick, snapshot.to_vec()));
            self.scores.push(header.score);
            self.seq += 1;
            let input = InputMsg {
                seq: self.seq,
                dir_x: ((self.seq * 37) % 200) as i16 - 100,
                dir_y: ((self.seq * 91) % 200) as i16 - 100,
                throttle: 80,
                cast: self.seq % 5 == 0,
            };
            for m in [protocol::encode_ack(tick), protocol::encode_input(&input)] {
                ws.send(Message::Binary(m.into())).await.expect("send");
            }
        }
    }

    /// Takes the avatar back on a new connection: WELCOME must name the same client,
    /// avatar and slot, with a new token.
    async fn reclaim(&mut self, url: &str, keeps_baselines: bool, cached_terrain: bool) {
        let options = HelloOptions {
            cached_terrain: cached_terrain.then_some(self.welcome.terrain.content_hash),
            reclaim: Some(Reclaim {
                token: self.token,
                keeps_baselines,
            }),
            ..HelloOptions::default()
        };
        let (ws, w) = match hello(url, &options).await {
            Hello::Welcome(b) => *b,
            Hello::Closed(code, reason) => panic!(
                "client {}'s reclaim was refused: {code} {reason}",
                self.welcome.client_id
            ),
        };
        assert_eq!(
            (w.client_id, w.avatar_id, w.slot),
            (self.welcome.client_id, self.welcome.avatar_id, self.welcome.slot),
            "a reclaim rebinds the same client, avatar and slot"
        );
        let token = w
            .reconnect_token
            .expect("a reclaim's WELCOME carries a new token");
        assert_ne!(token, self.token, "a token is used once");
        self.ws = Some(ws);
        self.welcome = w;
        self.token = token;
        if !keeps_baselines {
            self.decoder = ClientDecoder::new();
        }
    }

    /// Takes the connection away: dropped, it ends without a close frame, as a lost
    /// network does; kept, it stays open as a half-open one would.
    fn cut(&mut self) -> Ws {
        self.ws.take().expect("connected")
    }
}

/// Every (client, tick) frame a replay of `path` at `shards` produces.
fn replayed(path: &Path, shards: usize) -> BTreeMap<(u32, u32), Vec<u8>> {
    crate::session::replay_frames(path, shards)
}

/// The inputs of each kind the recording holds for `client`.
fn recorded_inputs(path: &Path, client: u32) -> Vec<(u32, Input)> {
    let rec = Recording::open(path).expect("recording opens");
    let mut out = Vec::new();
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.expect("tick reads");
        out.extend(
            t.inputs
                .inputs
                .iter()
                .filter(|i| i.client() == client)
                .map(|i| (t.tick, i.clone())),
        );
    }
    out
}

fn recorded_config(dir: &Path) -> ServerConfig {
    let mut c = common::small_config();
    c.server.recording.enabled = true;
    c.server.recording.dir = dir.to_path_buf();
    c.server.recording.block_ticks = 30;
    c.server.recording.checkpoint_interval_ticks = 90;
    c.server.shards = 2;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_players_reclaim_their_avatars_and_live_equals_replay() {
    let dir = TempDir::new("reclaim-live");
    let server = common::start(recorded_config(dir.path())).await;
    let url = server.ws_url();
    let path = server.recording_path().expect("recorded").to_path_buf();
    let mut players = Vec::new();
    for _ in 0..3 {
        players.push(Player::join(&url).await);
    }
    for p in &mut players {
        p.play(Duration::from_millis(300)).await;
    }
    // Player 0 drops between snapshots and comes back keeping its decoder; player 1 drops
    // right after a cast and comes back with a fresh decoder and its cached terrain;
    // player 2 drops mid-terrain: right after its reclaim's WELCOME, before the terrain.
    let [a, b, c] = &mut players[..] else {
        unreachable!()
    };
    drop(a.cut());
    b.seq += 1;
    let cast = InputMsg {
        seq: b.seq,
        dir_x: 1,
        dir_y: 0,
        throttle: 50,
        cast: true,
    };
    let ws = b.ws.as_mut().expect("connected");
    ws.send(Message::Binary(protocol::encode_input(&cast).into()))
        .await
        .unwrap();
    drop(b.cut());
    drop(c.cut());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        common::wait_until(Duration::from_secs(3), || server
            .metrics()
            .clients_detached
            .load(Relaxed)
            == 3)
        .await,
        "three detached players"
    );
    a.reclaim(&url, true, true).await;
    b.reclaim(&url, false, true).await;
    c.reclaim(&url, false, false).await;
    // c cut again before reading its terrain, and reclaims once more.
    drop(c.cut());
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.reclaim(&url, false, false).await;
    for p in &mut players {
        p.play(Duration::from_millis(1200)).await;
    }
    let m = server.metrics().clone();
    assert_eq!(m.reclaims_taken_total.load(Relaxed), 4);
    assert_eq!(m.clients.load(Relaxed), 3);
    let report = server.shutdown().await.expect("clean stop");
    assert_eq!(report.connections_left, 0);
    for p in &players {
        let id = p.welcome.client_id;
        // The kernel saw one join and no leave: the avatar never left the world.
        let inputs = recorded_inputs(&path, id);
        let joins = inputs
            .iter()
            .filter(|(_, i)| matches!(i, Input::Join { .. }))
            .count();
        let leaves = inputs
            .iter()
            .filter(|(_, i)| matches!(i, Input::Leave { .. }))
            .count();
        assert_eq!((joins, leaves), (1, 0), "client {id}: {inputs:?}");
        assert!(p.frames.len() >= 20, "client {id} got {} frames", p.frames.len());
        // Scores only grow: the reclaimed avatar kept its score.
        assert!(
            p.scores.windows(2).all(|w| w[0] <= w[1]),
            "client {id}: {:?}",
            p.scores
        );
    }
    for shards in [1, 3] {
        let frames = replayed(&path, shards);
        for p in &players {
            for (tick, bytes) in &p.frames {
                let r = frames.get(&(p.welcome.client_id, *tick));
                assert!(
                    r == Some(bytes),
                    "client {} tick {tick} at {shards} shards: the live frame is not the replayed one",
                    p.welcome.client_id
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_grace_the_avatar_leaves_and_the_token_is_refused() {
    let dir = TempDir::new("reclaim-grace");
    let mut config = recorded_config(dir.path());
    config.server.reconnect_grace_seconds = 0.5;
    let server = common::start(config).await;
    let url = server.ws_url();
    let path = server.recording_path().expect("recorded").to_path_buf();
    let mut p = Player::join(&url).await;
    p.play(Duration::from_millis(200)).await;
    let dropped_at = server.metrics().current_tick.load(Relaxed);
    drop(p.cut());
    let m = server.metrics().clone();
    assert!(
        common::wait_until(Duration::from_secs(3), || m
            .reconnect_grace_expired_total
            .load(Relaxed)
            == 1)
        .await,
        "the grace runs out"
    );
    assert!(
        reclaim_refused(&url, p.token).await,
        "an expired token is refused"
    );
    assert_eq!(m.reclaims_refused_total.load(Relaxed), 1);
    assert_eq!(m.clients_detached.load(Relaxed), 0);
    server.shutdown().await.expect("clean stop");
    // The Leave came after the grace (30 ticks at 60 Hz), not at the drop.
    let leaves: Vec<u32> = recorded_inputs(&path, p.welcome.client_id)
        .into_iter()
        .filter(|(_, i)| matches!(i, Input::Leave { .. }))
        .map(|(t, _)| t)
        .collect();
    assert_eq!(leaves.len(), 1, "{leaves:?}");
    assert!(
        leaves[0] >= dropped_at + 30,
        "left at tick {} after dropping at {dropped_at}",
        leaves[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_replaces_a_half_open_connection_tokens_work_once_and_a_close_leaves() {
    let server = common::start(common::small_config()).await;
    let url = server.ws_url();
    let mut p = Player::join(&url).await;
    p.play(Duration::from_millis(200)).await;
    let old_token = p.token;
    // The old connection is still open (the server has not seen it drop).
    let mut old = p.cut();
    p.reclaim(&url, true, true).await;
    let (code, _) = common::close_of(&mut old)
        .await
        .expect("the old connection is closed");
    assert_eq!(code, close_code::REPLACED);
    p.play(Duration::from_millis(300)).await;
    assert!(reclaim_refused(&url, old_token).await, "a used token is refused");
    // The refusal took nothing from the player.
    p.play(Duration::from_millis(200)).await;
    let m = server.metrics().clone();
    assert_eq!(m.clients.load(Relaxed), 1);
    // A client that closes the connection itself has left: no grace, its token dies.
    let mut ws = p.cut();
    ws.close(None).await.expect("close");
    assert!(
        common::wait_until(Duration::from_secs(3), || m.clients.load(Relaxed) == 0).await,
        "the player left"
    );
    assert_eq!(m.clients_detached.load(Relaxed), 0);
    assert!(
        reclaim_refused(&url, p.token).await,
        "the token of a player who left is refused"
    );
    server.shutdown().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessed_tokens_and_other_worlds_tokens_are_refused() {
    let a = common::start(common::small_config()).await;
    let b = common::start(common::small_config()).await;
    let p = Player::join(&a.ws_url()).await;
    assert!(
        reclaim_refused(&b.ws_url(), p.token).await,
        "world A's token is refused by world B"
    );
    // 10,000 guesses, 50 at a time: all refused, and the player keeps its avatar.
    const GUESSES: u32 = 10_000;
    let url = a.ws_url();
    let mut tasks = Vec::new();
    for lane in 0..50u32 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut taken = 0;
            for i in (lane..GUESSES).step_by(50) {
                let mut token = [0u8; RECONNECT_TOKEN_BYTES];
                token[..4].copy_from_slice(&i.to_le_bytes());
                token[4..12].copy_from_slice(&u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
                if !reclaim_refused(&url, token).await {
                    taken += 1;
                }
            }
            taken
        }));
    }
    let mut taken = 0;
    for t in tasks {
        taken += t.await.expect("guessing task");
    }
    assert_eq!(taken, 0, "a guessed token took an avatar");
    let m = a.metrics();
    assert_eq!(m.reclaims_refused_total.load(Relaxed), u64::from(GUESSES));
    assert_eq!(m.clients.load(Relaxed), 1);
    drop(p);
    a.shutdown().await.expect("clean stop");
    b.shutdown().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_reclaim_their_avatars_in_a_resumed_world() {
    let dir = TempDir::new("reclaim-resume");
    let config = recorded_config(dir.path());
    let server = common::start(config.clone()).await;
    let url = server.ws_url();
    let mut players = Vec::new();
    for _ in 0..3 {
        players.push(Player::join(&url).await);
    }
    for p in &mut players {
        p.play(Duration::from_millis(300)).await;
    }
    // One player has no token: it leaves in the resumed world's first tick.
    let (_plain_ws, plain) = common::join(&url, "plain").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = server.recording_path().expect("recorded").to_path_buf();
    server.shutdown().await.expect("clean stop");
    assert!(migratory_server::reclaim::reclaim_path(&first).exists());

    let resumed = common::start_with(
        config,
        ServeOptions {
            resume_from: Some(first.clone()),
            ..ServeOptions::default()
        },
    )
    .await;
    assert_eq!(resumed.metrics().clients_detached.load(Relaxed), 3);
    let url = resumed.ws_url();
    for p in &mut players {
        let before = *p.scores.last().expect("scores");
        p.reclaim(&url, true, true).await;
        p.play(Duration::from_millis(400)).await;
        assert!(*p.scores.last().expect("scores") >= before);
    }
    let second = resumed.recording_path().expect("recorded").to_path_buf();
    resumed.shutdown().await.expect("clean stop");
    // In the resumed session's first tick, every carried avatar is steered to a stop.
    let rec = Recording::open(&second).expect("resumed recording");
    let first_tick = rec
        .ticks_from(rec.first_tick())
        .next()
        .expect("a tick")
        .expect("reads");
    for p in &players {
        assert!(
            first_tick.inputs.inputs.iter().any(|i| matches!(
                i,
                Input::Steer { client, throttle: 0, .. } if *client == p.welcome.client_id
            )),
            "client {} stopped in tick {}: {:?}",
            p.welcome.client_id,
            first_tick.tick,
            first_tick.inputs
        );
    }
    // In the resumed session: the token-less player left at once, the others never did.
    let leaves = |client| {
        recorded_inputs(&second, client)
            .into_iter()
            .filter(|(_, i)| matches!(i, Input::Leave { .. }))
            .count()
    };
    assert_eq!(leaves(plain.client_id), 1);
    for p in &players {
        assert_eq!(leaves(p.welcome.client_id), 0);
    }
    // The resumed session's frames replay exactly (the kept decoders decoded them).
    let frames = replayed(&second, 1);
    for p in &players {
        let start = Recording::open(&second).unwrap().first_tick();
        for (tick, bytes) in p.frames.iter().filter(|(t, _)| *t > start) {
            assert_eq!(frames.get(&(p.welcome.client_id, *tick)), Some(bytes));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_before_the_new_welcome_arrives_does_not_cost_the_avatar() {
    let server = common::start(common::small_config()).await;
    let url = server.ws_url();
    let mut p = Player::join(&url).await;
    p.play(Duration::from_millis(200)).await;
    drop(p.cut());
    // A reclaim whose connection dies before its WELCOME is read: the client never got
    // the new token, so the one it presented must still work.
    let options = HelloOptions {
        reclaim: Some(Reclaim {
            token: p.token,
            keeps_baselines: true,
        }),
        ..HelloOptions::default()
    };
    let mut ws = common::connect(&url).await;
    common::send(
        &mut ws,
        protocol::encode_hello_with(PROTOCOL_VERSION, "re", &options),
    )
    .await;
    let m = server.metrics().clone();
    assert!(
        common::wait_until(Duration::from_secs(3), || m.reclaims_taken_total.load(Relaxed)
            == 1)
        .await,
        "the first reclaim was taken"
    );
    drop(ws);
    assert!(
        common::wait_until(Duration::from_secs(3), || m.clients_detached.load(Relaxed) == 1).await,
        "detached again"
    );
    let first = p.token;
    p.reclaim(&url, true, true).await;
    p.play(Duration::from_millis(300)).await;
    // Now the client has acknowledged a snapshot with its newest token: the old one died.
    assert!(
        reclaim_refused(&url, first).await,
        "a confirmed reclaim's token is dead"
    );
    assert_eq!(m.clients.load(Relaxed), 1);
    server.shutdown().await.expect("clean stop");
}
