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
            let sent = decoder.sent_ticks(h.tick).map(<[u32]>::to_vec).unwrap_or_default();
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

#[test]
fn the_javascript_decoders_agree_with_the_rust_ones() {
    let path = viewer_dir().join("test/vectors/snapshots.json");
    let text = serde_json::to_string(&vectors()).expect("json") + "\n";
    if std::env::var("MIGRATORY_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("vectors folder");
        std::fs::write(&path, &text).expect("write vectors");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} differs from what the kernel makes now: rerun with MIGRATORY_BLESS=1 and review",
        path.display()
    );
    let out = Command::new("node")
        .arg("--test")
        .arg(viewer_dir().join("test/snapshot.test.mjs"))
        .output()
        .unwrap_or_else(|e| panic!("running node (install Debian's nodejs; .ci/run does): {e}"));
    assert!(
        out.status.success(),
        "the JavaScript tests failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
