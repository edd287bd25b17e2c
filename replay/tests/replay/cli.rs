//! The `migratory-replay` binary: exit codes (0 ok, 1 divergence, 2 could not run), JSON
//! reports and `error:` lines.

use std::path::Path;
use std::process::{Command, Output};

use migratory_kernel::World;
use migratory_replay::Recording;
use serde_json::Value;

use crate::{inputs_of, record_with, synth_bytes, synth_options, writer_options, TempDir};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_migratory-replay"))
        .args(args)
        .output()
        .expect("running migratory-replay")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn assert_error(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: stderr {stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("error: ")),
        "{what}: no error line on stderr: {stderr}"
    );
}

#[test]
fn synth_then_verify_succeeds_with_a_json_report() {
    let dir = TempDir::new("cli-synth");
    let s = dir.path().join("s.mrec");
    let out = cli(&[
        "synth",
        "-o",
        path(&s),
        "--ticks",
        "45",
        "--clients",
        "2",
        "--boids",
        "200",
        "--block-ticks",
        "20",
        "--checkpoint-interval",
        "30",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let synth = json(&out);
    assert_eq!(synth["ticks"], 45);
    let rec = Recording::open(&s).unwrap();
    assert_eq!(rec.ticks_recovered(), 45);
    assert_eq!(rec.meta.config.boid_count, 200);
    let final_root = migratory_kernel::hex(&rec.end.unwrap().final_root);
    assert_eq!(synth["final_root"], final_root.as_str());

    let out = cli(&["--json", "verify", path(&s), "--shards", "1,2"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["ticks"], 45);
    assert_eq!(v["ticks_recovered"], 45);
    assert_eq!(v["shard_counts"], serde_json::json!([1, 2]));
    assert_eq!(v["divergence"], Value::Null);
    assert_eq!(v["end_record_matches"], true);
    assert_eq!(v["torn_tail"], Value::Null);

    let out = cli(&["run", path(&s), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let r = json(&out);
    assert_eq!(r["final_root"], final_root.as_str());
    assert_eq!(r["roots_match"], true);

    let out = cli(&["verify", path(&s), "--shards", "1"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK"));
}

#[test]
fn exit_codes_tell_divergences_from_errors() {
    let dir = TempDir::new("cli-codes");
    let opts = synth_options(12, 60, 2, 200, 20, 30);
    let good = dir.write("good.mrec", &synth_bytes(&opts));

    // Stored roots wrong from tick 25: a divergence, exit 1.
    let inputs = inputs_of(&Recording::open(&good).unwrap());
    let world = World::new(opts.config.clone(), 1).unwrap();
    let (doctored, _) = record_with(world, &inputs, writer_options(20, 30), |out| {
        if out.tick >= 25 {
            out.snapshots_root[31] ^= 1;
        }
    });
    let bad = dir.write("bad.mrec", &doctored);
    let out = cli(&["verify", "--json", path(&bad), "--shards", "1,2"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["divergence"]["tick"], 25);
    assert_eq!(v["divergence"]["root"], "snapshots");
    assert_eq!(v["divergence"]["a"]["side"], "recording");
    assert_eq!(v["divergence"]["b"]["side"], "replay");
    assert_eq!(v["divergence"]["b"]["shard_counts"], serde_json::json!([1, 2]));
    let out = cli(&["verify", path(&bad), "--shards", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("DIVERGED at tick 25"));
    let out = cli(&["diff", "--json", path(&good), path(&bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["first_divergent_tick"], 25);
    let out = cli(&["diff", path(&good), path(&good)]);
    assert_eq!(out.status.code(), Some(0));

    // A corrupted file, a missing file, a bad argument: exit 2 with an error line.
    let mut bytes = std::fs::read(&good).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    let corrupted = dir.write("corrupted.mrec", &bytes);
    let out = cli(&["verify", path(&corrupted), "--shards", "1"]);
    assert_error(&out, "corrupted file");
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupted at byte offset"));
    assert_error(
        &cli(&["verify", path(&dir.path().join("missing.mrec"))]),
        "missing file",
    );
    let text = dir.write("text.mrec", b"not a recording at all");
    assert_error(&cli(&["run", path(&text)]), "not a recording");
    let cut = dir.path().join("cut.mrec");
    assert_error(
        &cli(&[
            "extract",
            path(&good),
            "--from",
            "30",
            "--to",
            "10",
            "-o",
            path(&cut),
        ]),
        "bad range",
    );
    assert_error(
        &cli(&["inspect", path(&good), "--tick", "10", "--entity", "99999"]),
        "bad entity",
    );

    // The inspect and extract reports.
    let out = cli(&["inspect", "--json", path(&good), "--tick", "30", "--entity", "5"]);
    assert_eq!(out.status.code(), Some(0));
    let r = json(&out);
    assert_eq!(r["tick"], 30);
    assert_eq!(r["entity"]["kind"], "boid");
    assert_eq!(r["entity"]["id"], 5);
    let out = cli(&[
        "extract",
        path(&good),
        "--from",
        "10",
        "--to",
        "40",
        "-o",
        path(&cut),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(Recording::open(&cut).unwrap().ticks_recovered(), 30);
}
