//! Snapshot and protocol vectors: three clients' snapshot streams with ack lags and
//! dropped snapshots, each frame with the view the kernel's `ClientDecoder` makes of it,
//! plus damaged copies and whether they are rejected; protocol 2 messages from the Rust
//! encoders with their fields.

use std::collections::VecDeque;

use migratory_kernel::{hex, ClientDecoder, Input, TickInputs, ViewEntry, World};
use serde_json::{json, Value};

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
pub(super) fn snapshots() -> Value {
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
        "about": "Generated by net/tests/net/viewer/vectors.rs (MIGRATORY_BLESS=1 rewrites it). Per client, \
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
pub(super) fn protocol() -> Value {
    use migratory_wire::protocol::{
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
    // Reconnect tokens: asked for, presented (with and without kept snapshots, after a
    // cached hash).
    let token: p::ReconnectToken = std::array::from_fn(|i| (i as u8).wrapping_mul(17));
    for (want_token, reclaim, keeps_baselines, cached) in [
        (true, false, false, None),
        (false, true, true, Some(&hash)),
        (true, true, false, None),
    ] {
        let o = p::HelloOptions {
            cached_terrain: cached.copied(),
            want_token,
            reclaim: reclaim.then_some(p::Reclaim {
                token,
                keeps_baselines,
            }),
            ..p::HelloOptions::default()
        };
        client.push(json!({ "what": "hello", "name": "ada", "hash": cached.map(|h| hex(h)),
            "want_token": want_token, "reclaim": reclaim.then(|| hex(&token)), "keeps_baselines": keeps_baselines,
            "hex": hex(&p::encode_hello_with(2, "ada", &o)) }));
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
        let tick = seq.wrapping_mul(3);
        client.push(json!({ "what": "input_ack", "seq": seq, "dir_x": dir_x, "dir_y": dir_y, "throttle": throttle, "cast": cast, "tick": tick, "hex": hex(&p::encode_input_ack(&m, tick)) }));
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
        reconnect_token: None,
    };
    let welcome_json = |w: &p::Welcome| {
        json!({ "what": "welcome", "hex": hex(&p::encode_welcome(w)), "fields": {
            "protocolVersion": w.protocol_version, "clientId": w.client_id, "avatarId": w.avatar_id,
            "slot": w.slot, "joinTick": w.join_tick, "tickRateHz": w.tick_rate_hz,
            "snapshotIntervalTicks": w.snapshot_interval_ticks, "worldSizeMm": w.world_size_mm,
            "terrain": { "cells": 1024, "cellSizeMm": 1000, "dtype": 1, "compression": 2, "delivery": 1,
                         "chunkCount": 5, "totalBytes": 5_000_000_000u64, "contentHash": hex(&hash) },
            "viewRadiusMm": 30_000, "viewEntitiesMax": 128, "baselineWindowSnapshots": 16,
            "castRadiusMm": 9_000, "castCooldownTicks": 90, "avatarSpeedMaxMmPerTick": 120,
            "zones": w.world.zones.iter().map(|z| json!({ "kind": z.kind as u8, "x_mm": z.x_mm, "y_mm": z.y_mm, "radius_mm": z.radius_mm })).collect::<Vec<_>>(),
            "reconnectToken": w.reconnect_token.map(|t| hex(&t)),
        }})
    };
    let with_token = p::Welcome {
        reconnect_token: Some(token),
        ..welcome.clone()
    };
    let server = vec![
        welcome_json(&welcome),
        welcome_json(&with_token),
        json!({ "what": "pong", "hex": hex(&p::encode_pong(1_234_567_890_123, 4_000_000_000)),
                "fields": { "nonce": 1_234_567_890_123u64, "serverTick": 4_000_000_000u32 } }),
        json!({ "what": "snapshot", "hex": hex(&p::encode_snapshot(&[1, 2, 3])), "fields": { "snapshot": "010203" } }),
    ];
    json!({
        "about": "Generated by net/tests/net/viewer/vectors.rs (MIGRATORY_BLESS=1 rewrites it): client \
                  messages the JavaScript encoders must make byte for byte, and server messages \
                  with the fields they must decode to.",
        "client": client,
        "server": server,
    })
}
