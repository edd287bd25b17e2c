//! The verifying commands of `migratory-replay`: `run`, `verify` (one recording, or a
//! world's chain of segments) and `check` (a folder against its stored roots), each its
//! report printed as text or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use migratory_replay::tools;

use crate::{ok, print_divergence, print_json, progress, write_junit};

/// `run REC`: one replay, its final root and speed.
pub fn run(json: bool, rec: &Path, shards: usize, until: Option<u32>) -> anyhow::Result<ExitCode> {
    let r = tools::run(rec, shards, until, &mut progress())?;
    if json {
        print_json(&r);
    } else {
        out!(
            "{}: ticks {}..={} on {} shard(s)",
            r.file,
            r.first_tick,
            r.final_tick,
            r.shards
        );
        out!("final root {}", r.final_root);
        out!(
            "{:.0} ticks/s ({:.1}x real time)",
            r.ticks_per_s,
            r.real_time_multiple
        );
        match r.first_mismatch_tick {
            None => out!("every root matches the recording"),
            Some(t) => {
                out!("roots differ from the recording from tick {t} (run verify for details)")
            }
        }
        if let Some(t) = &r.torn_tail {
            out!("torn tail at byte {}: {} ticks recovered", t.offset, r.ticks);
        }
    }
    Ok(ok(r.roots_match))
}

/// `verify SEG...`: every segment of a chain, and each link between them.
pub fn verify_chain(json: bool, recs: &[PathBuf], shards: &[usize], jobs: usize) -> anyhow::Result<ExitCode> {
    let r = tools::verify_chain_with(recs, shards, jobs, &mut progress())?;
    if json {
        print_json(&r);
    } else {
        for s in &r.segments {
            let verdict = if s.ok() { "OK" } else { "MISMATCH" };
            out!(
                "{}: {} ticks at shards {:?}: {verdict}",
                s.file,
                s.ticks,
                s.shard_counts
            );
            if let Some(d) = &s.divergence {
                print_divergence(d);
            }
            if let Some(b) = &s.bad_checkpoint {
                out!("BAD CHECKPOINT at tick {}: {}", b.tick, b.reason);
            }
        }
        for l in &r.links {
            match &l.problem {
                None => out!("link OK at tick {}: {} -> {}", l.tick, l.from, l.to),
                Some(p) => out!("link BROKEN at tick {}: {} -> {}: {p:?}", l.tick, l.from, l.to),
            }
        }
        if r.ok() {
            out!("OK: every segment verifies and each resumes where the one before ended");
        }
    }
    Ok(ok(r.ok()))
}

/// `verify REC`: every tick at every shard count, against the recording and each other.
pub fn verify(
    json: bool,
    rec: &Path,
    shards: &[usize],
    jobs: usize,
    inject_fault: Option<String>,
) -> anyhow::Result<ExitCode> {
    let fault = inject_fault
        .map(|s| -> anyhow::Result<tools::Fault> {
            let p: Vec<&str> = s.split(':').collect();
            anyhow::ensure!(p.len() == 3, "--inject-fault takes SHARDS:TICK:ENTITY");
            Ok(tools::Fault {
                shards: p[0].parse()?,
                tick: p[1].parse()?,
                entity: p[2].parse()?,
            })
        })
        .transpose()?;
    let r = tools::verify_with(rec, shards, fault, jobs, &mut progress())?;
    if json {
        print_json(&r);
    } else {
        out!("{}: {} ticks at shards {:?}", r.file, r.ticks, r.shard_counts);
        if let Some(t) = &r.torn_tail {
            out!(
                "torn tail at byte {} ({} bytes lost): {} ticks recovered",
                t.offset,
                t.bytes_lost,
                r.ticks_recovered
            );
        }
        if r.rules_version_differs {
            out!("note: recorded with other kernel rules; differences are expected");
        }
        match &r.divergence {
                Some(d) => print_divergence(d),
                None if r.end_record_matches == Some(false) => {
                    out!("MISMATCH: the end record's final root or chain differs")
                }
                None => match &r.bad_checkpoint {
                    Some(b) => out!("BAD CHECKPOINT at tick {}: {}", b.tick, b.reason),
                    None => out!(
                        "OK: every tick matches the recording and across shard counts ({} span(s) side by side, {:.0} ticks/s)",
                        r.spans,
                        r.ticks_per_s
                    ),
                },
            }
    }
    Ok(ok(r.ok()))
}

/// `check DIR`: every recording of a folder against its stored roots (`--bless` rewrites
/// them), with a JUnit report when asked.
pub fn check(
    json: bool,
    dir: &Path,
    shards: usize,
    bless: bool,
    junit: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let entries = tools::check(dir, shards, bless, None)?;
    let all_ok = entries.iter().all(|e| e.ok);
    if let Some(path) = junit {
        let cases: Vec<migratory_replay::junit::Case> = entries
            .iter()
            .map(|e| migratory_replay::junit::Case {
                name: e.file.clone(),
                seconds: 0.0,
                failure: (!e.ok).then(|| match (&e.error, &e.divergence) {
                    (Some(err), _) => err.clone(),
                    (None, Some(d)) => format!(
                        "{:?} roots differ at tick {}: {:?} has {}, {:?} has {}{}",
                        d.root,
                        d.tick,
                        d.a,
                        d.a_root,
                        d.b,
                        d.b_root,
                        if e.rules_version_differs {
                            " (recorded with other kernel rules)"
                        } else {
                            ""
                        }
                    ),
                    (None, None) => "end record mismatch".into(),
                }),
            })
            .collect();
        write_junit(path, "migratory-replay check", &cases)?;
    }
    if json {
        print_json(&entries);
    } else {
        for e in &entries {
            match (&e.error, bless, e.blessed_first_changed_tick, &e.divergence) {
                (Some(err), _, _, _) => out!("FAIL {}: {err}", e.file),
                (None, true, Some(t), _) => {
                    out!("BLESSED {}: roots changed from tick {t}", e.file)
                }
                (None, _, _, Some(d)) if !e.ok => {
                    out!("FAIL {}:", e.file);
                    print_divergence(d);
                    if e.rules_version_differs {
                        out!("  (recorded with other kernel rules: if intended, run check --bless)");
                    }
                }
                (None, _, _, _) if e.ok => out!("ok {} ({} ticks)", e.file, e.ticks),
                (None, _, _, _) => out!("FAIL {}: end record mismatch", e.file),
            }
        }
    }
    Ok(ok(all_ok))
}
