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

/// `verify` over a world's segments: each must verify, and each must resume at the tick
/// and from the state the one before it recorded last.
#[test]
fn verify_checks_a_chain_of_segments_link_by_link() {
    let dir = TempDir::new("cli-chain");
    let whole = dir.write(
        "whole.mrec",
        &synth_bytes(&synth_options(21, 150, 3, 300, 20, 50)),
    );
    // Same world config, other players: another state at every tick.
    let other = dir.write(
        "other.mrec",
        &synth_bytes(&synth_options(21, 150, 1, 300, 20, 50)),
    );
    // Another world config.
    let elsewhere = dir.write(
        "elsewhere.mrec",
        &synth_bytes(&synth_options(22, 150, 3, 300, 20, 50)),
    );
    let cut = |src: &Path, name: &str, from, to| {
        let out = dir.path().join(name);
        migratory_replay::tools::extract(src, from, to, &out).expect("extract");
        out
    };
    let a = cut(&whole, "a.mrec", 0, 80);
    let b = cut(&whole, "b.mrec", 80, 120);
    let c = cut(&whole, "c.mrec", 120, 150);
    let late = cut(&whole, "late.mrec", 90, 150);
    let forked = cut(&other, "forked.mrec", 80, 150);
    let foreign = cut(&elsewhere, "foreign.mrec", 80, 150);

    let out = cli(&[
        "verify",
        path(&a),
        path(&b),
        path(&c),
        "--shards",
        "1,2",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r = json(&out);
    assert_eq!(r["segments"].as_array().map(Vec::len), Some(3));
    let links = r["links"].as_array().expect("links");
    assert_eq!(links.len(), 2);
    assert_eq!(
        (links[0]["tick"].as_u64(), links[1]["tick"].as_u64()),
        (Some(80), Some(120))
    );
    assert!(links.iter().all(|l| l["problem"].is_null()), "{r}");

    for (next, problem) in [
        (&late, "tick_gap"),
        (&forked, "root_differs"),
        (&foreign, "config_differs"),
    ] {
        let out = cli(&["verify", path(&a), path(next), "--shards", "1", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{problem}");
        let r = json(&out);
        assert_eq!(r["links"][0]["problem"]["problem"], problem, "{r}");
        // Each segment still verifies on its own: only the link is broken.
        assert!(r["segments"]
            .as_array()
            .expect("segments")
            .iter()
            .all(|s| s["divergence"].is_null()));
    }
    // A chain of one is plain `verify`.
    let out = cli(&["verify", path(&a), "--shards", "1", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(json(&out).get("links").is_none());
}

#[test]
fn check_and_sim_write_junit_reports() {
    let dir = TempDir::new("cli-junit");
    let recs = dir.path().join("recs");
    std::fs::create_dir_all(&recs).unwrap();
    for (name, ticks) in [("a.mrec", "30"), ("b.mrec", "40")] {
        let out = cli(&[
            "synth",
            "-o",
            path(&recs.join(name)),
            "--ticks",
            ticks,
            "--clients",
            "2",
            "--boids",
            "100",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // One recording damaged in its last block: check fails it, and says so in the report.
    let b = recs.join("b.mrec");
    let mut bytes = std::fs::read(&b).unwrap();
    let at = bytes.len() - 40;
    bytes[at] ^= 0xff;
    std::fs::write(&b, bytes).unwrap();
    let report = dir.path().join("check.xml");
    let out = cli(&["check", path(&recs), "--shards", "2", "--junit", path(&report)]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let xml = std::fs::read_to_string(&report).unwrap();
    assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
    assert!(
        xml.contains(&format!("name=\"{}\"", path(&recs.join("a.mrec")))),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");

    // A short sim run: one passing case for the run, naming its seed.
    let report = dir.path().join("sim.xml");
    let out = cli(&[
        "sim",
        "--seconds",
        "2",
        "--seed",
        "5",
        "--jobs",
        "1",
        "--junit",
        path(&report),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let xml = std::fs::read_to_string(&report).unwrap();
    assert!(xml.contains("failures=\"0\""), "{xml}");
    assert!(xml.contains("cases from seed 5"), "{xml}");
    // One case, rerun by its seed, in JSON.
    let out = cli(&["sim", "--seed", "12345", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let j = json(&out);
    assert_eq!(
        (j["cases"].as_u64(), j["failures"].as_array().map(Vec::len)),
        (Some(1), Some(0))
    );
}

/// `sim --plant`: the planted fault is found, reported in the JUnit report with its seed,
/// oracle, tick and entity, and the run stops at it; an unknown kind is refused by name.
#[test]
fn sim_finds_a_planted_fault_and_reports_it() {
    let dir = TempDir::new("cli-plant");
    let report = dir.path().join("sim.xml");
    let out = cli(&[
        "sim",
        "--plant",
        "shard-order",
        "--seconds",
        "120",
        "--seed",
        "1",
        "--stop-at-failure",
        "--failures-dir",
        path(dir.path()),
        "--junit",
        path(&report),
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    let f = &j["failures"][0];
    assert_eq!(f["oracle"], "shards", "{j}");
    assert!(f["tick"].as_u64().is_some(), "{j}");
    assert!(
        f["entity"].as_str().is_some_and(|e| e.starts_with("boid ")),
        "{j}"
    );
    assert!(j["first_failure_seconds"].as_f64().is_some(), "{j}");
    assert!(
        j["seconds"].as_f64().unwrap() < 120.0,
        "stopped at the failure: {j}"
    );
    let xml = std::fs::read_to_string(&report).unwrap();
    assert!(xml.contains(&format!("case seed {}", f["seed"])), "{xml}");
    assert!(xml.contains("state roots differ; first at boid "), "{xml}");
    // The shrunken run was written where asked.
    let written = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("sim-failure-")
        })
        .count();
    assert!(written >= 1);

    let out = cli(&["sim", "--plant", "cosmic-ray", "--seed", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"cosmic-ray\"") && err.contains("shard-order"),
        "{err}"
    );
}

/// Two "builds" as two processes: `trace` under this build's rules, then `rules-diff`
/// and `rerecord` in a process following the synthetic next rules
/// (MIGRATORY_SYNTHETIC_RULES=1, honoured only by builds with `synthetic-rules`).
#[test]
fn trace_rules_diff_and_rerecord_across_two_builds() {
    let dir = TempDir::new("cli-rules");
    let rec = dir.path().join("a.mrec");
    let trace = dir.path().join("a.mtrc");
    let out = cli(&[
        "synth",
        "-o",
        path(&rec),
        "--ticks",
        "60",
        "--clients",
        "2",
        "--boids",
        "150",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let out = cli(&["trace", path(&rec), "-o", path(&trace)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["rules-diff", path(&trace), path(&rec)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("same behaviour"));

    let next = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_migratory-replay"))
            .args(args)
            .env("MIGRATORY_SYNTHETIC_RULES", "1")
            .output()
            .expect("running migratory-replay")
    };
    let out = next(&["rules-diff", path(&trace), path(&rec)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("behaviour differs from tick") && text.contains("(trace) ->"),
        "{text}"
    );
    let new = dir.path().join("b.mrec");
    let out = next(&["rerecord", path(&rec), "-o", path(&new), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    assert_eq!(
        j["rules_version"].as_u64(),
        j["old_rules_version"].as_u64().map(|v| v + 1),
        "{j}"
    );
    let out = next(&["verify", path(&new), "--shards", "1,2"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A missing trace is an error that names it (exit 2), not a finding.
    let out = cli(&["rules-diff", path(&dir.path().join("none.mtrc")), path(&rec)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.mtrc"));
}

/// `inspect REC` alone summarises the recording (from a replay); `--entity` prints one
/// field per line; `--entity` without `--tick` is a usage error.
#[test]
fn inspect_summarises_a_recording_and_prints_an_entity_field_by_field() {
    let dir = TempDir::new("cli-inspect");
    let rec = dir.path().join("a.mrec");
    let out = cli(&[
        "synth",
        "-o",
        path(&rec),
        "--ticks",
        "90",
        "--clients",
        "3",
        "--boids",
        "120",
        "--checkpoint-interval",
        "30",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["inspect", "--json", path(&rec)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = json(&out);
    assert_eq!(
        (
            s["first_tick"].as_u64(),
            s["last_tick"].as_u64(),
            s["ticks"].as_u64()
        ),
        (Some(1), Some(90), Some(90))
    );
    assert_eq!(s["checkpoints"], serde_json::json!([30, 60, 90]), "{s}");
    assert_eq!(
        (s["boids"].as_u64(), s["ended_cleanly"].as_bool()),
        (Some(120), Some(true))
    );
    assert_eq!(s["rules_are_this_builds"], true);
    assert_eq!(s["roots_match"], true);
    // Three scripted players join: the replay counts them.
    assert_eq!(s["joins"].as_u64(), Some(3), "{s}");
    assert_eq!(s["clients_max"][0].as_u64(), Some(3), "{s}");
    let samples = s["clients_over_time"].as_array().unwrap();
    assert_eq!(samples.first().unwrap()[0], 0);
    assert_eq!(samples.last().unwrap()[0], 90);
    let text = String::from_utf8_lossy(&cli(&["inspect", path(&rec)]).stdout).to_string();
    assert!(
        text.contains("ticks 1..=90 (90 ticks, ") && text.contains("checkpoints at ticks 30, 60, 90"),
        "{text}"
    );

    let out = cli(&["inspect", path(&rec), "--tick", "45", "--entity", "7"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(lines[..2], ["kind boid", "id 7"], "{text}");
    assert!(
        lines[2].starts_with("x_mm ") && lines[2][5..].parse::<i32>().is_ok(),
        "{text}"
    );
    assert_eq!(
        cli(&["inspect", path(&rec), "--entity", "7"]).status.code(),
        Some(2)
    );
}

/// `probe`: a field over a range as lines, CSV or JSON, checked against `inspect` at the
/// same ticks; `--first` finds the first tick a condition holds (exit 1 when none does).
#[test]
fn probe_follows_a_field_and_finds_when_a_condition_first_holds() {
    let dir = TempDir::new("cli-probe");
    let rec = dir.path().join("a.mrec");
    let out = cli(&[
        "synth",
        "-o",
        path(&rec),
        "--ticks",
        "80",
        "--clients",
        "2",
        "--boids",
        "100",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let out = cli(&[
        "probe",
        "--json",
        path(&rec),
        "--entity",
        "9",
        "--field",
        "x_mm",
        "--from",
        "20",
        "--to",
        "40",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    let series = j["series"].as_array().unwrap();
    assert_eq!(series.len(), 21);
    for tick in [20u64, 33, 40] {
        let at = cli(&[
            "inspect",
            "--json",
            path(&rec),
            "--tick",
            &tick.to_string(),
            "--entity",
            "9",
        ]);
        let x = json(&at)["entity"]["x_mm"].clone();
        assert_eq!(
            series[(tick - 20) as usize],
            serde_json::json!([tick, x]),
            "tick {tick}"
        );
    }
    let csv = String::from_utf8_lossy(
        &cli(&["probe", path(&rec), "--entity", "9", "--field", "vx", "--csv"]).stdout,
    )
    .to_string();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        (rows[0], rows.len()),
        ("tick,vx", 82),
        "ticks 0..=80 and a header"
    );
    // The first tick its velocity changes: the row before it holds another value.
    let out = cli(&[
        "probe",
        "--json",
        path(&rec),
        "--entity",
        "9",
        "--field",
        "vx",
        "--first",
        "changes",
    ]);
    let t = json(&out)["first"]
        .as_u64()
        .expect("a boid turns within 80 ticks") as usize;
    let value = |k: usize| rows[k + 1].split(',').nth(1).unwrap().to_string();
    assert_ne!(value(t), value(t - 1));
    assert!((1..t - 1).all(|k| value(k) == value(0)), "no earlier change");
    // Never: exit 1. A field boids lack, an unknown field, a bad condition: exit 2.
    assert_eq!(
        cli(&[
            "probe",
            path(&rec),
            "--entity",
            "9",
            "--field",
            "vx",
            "--first",
            ">1000"
        ])
        .status
        .code(),
        Some(1)
    );
    for bad in [
        &["--entity", "9", "--field", "score"][..],
        &["--entity", "9", "--field", "nope"],
        &["--entity", "9", "--field", "vx", "--first", "soon"],
        &["--entity", "100000", "--field", "vx"],
    ] {
        let mut args = vec!["probe", path(&rec)];
        args.extend_from_slice(bad);
        assert_eq!(cli(&args).status.code(), Some(2), "{bad:?}");
    }
}

/// `probe --png`: the series drawn into a PNG of the documented size, beside the usual
/// output; a series absent at every tick is an error that says so, and writes nothing.
#[test]
fn probe_draws_a_field_into_a_png() {
    let dir = TempDir::new("cli-probe-png");
    let rec = dir.path().join("a.mrec");
    let out = cli(&[
        "synth",
        "-o",
        path(&rec),
        "--ticks",
        "60",
        "--clients",
        "1",
        "--boids",
        "50",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let png = dir.path().join("x.png");
    let out = cli(&[
        "probe",
        path(&rec),
        "--entity",
        "3",
        "--field",
        "x_mm",
        "--png",
        path(&png),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).expect("the PNG");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!(
        (be(16), be(20)),
        (
            migratory_replay::plot::PROBE_PLOT_WIDTH_PX,
            migratory_replay::plot::PROBE_PLOT_HEIGHT_PX
        )
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        61,
        "the lines still print"
    );
    // An avatar slot no one holds is absent at every tick: nothing to plot.
    let empty = dir.path().join("empty.png");
    let out = cli(&[
        "probe",
        path(&rec),
        "--entity",
        "60",
        "--field",
        "x_mm",
        "--png",
        path(&empty),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to plot"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!empty.exists());
}
