//! The commands of `migratory-replay` that compare and make recordings: `diff`, `extract`,
//! `synth` and `bench`, each its report printed as text or JSON.

use std::path::Path;
use std::process::ExitCode;

use migratory_replay::tools;

use crate::{ok, print_chunks, print_json, SessionArgs};

/// `diff A B`: the first tick two recordings of one world differ, and where.
pub fn diff(json: bool, a: &Path, b: &Path) -> anyhow::Result<ExitCode> {
    let r = tools::diff(a, b)?;
    if json {
        print_json(&r);
    } else if r.config_differs {
        out!("the recordings are of different worlds (config hashes differ)");
    } else {
        match r.first_divergent_tick {
            None => out!("identical over ticks {}..={}", r.common_ticks.0, r.common_ticks.1),
            Some(t) => {
                out!(
                    "first divergent tick {t} ({}){}",
                    r.root.map(|r| r.to_string()).unwrap_or_default(),
                    if r.inputs_differ {
                        "; the inputs differ there"
                    } else {
                        ""
                    }
                );
                print_chunks(&r.chunks);
            }
        }
    }
    Ok(ok(!r.config_differs && r.first_divergent_tick.is_none()))
}

/// `extract REC --from A --to B -o OUT`: ticks A..=B as a recording of their own.
pub fn extract(json: bool, rec: &Path, (from, to): (u32, u32), out: &Path) -> anyhow::Result<ExitCode> {
    let r = tools::extract(rec, from, to, out)?;
    if json {
        print_json(&r);
    } else {
        out!(
            "wrote {} ({} bytes): state at tick {} and ticks {}..={}",
            r.out,
            r.bytes,
            r.from,
            r.from + 1,
            r.to
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `synth -o OUT`: a scripted session recorded.
pub fn synth(json: bool, out: &Path, session: &SessionArgs) -> anyhow::Result<ExitCode> {
    let r = tools::synth(&session.options(1), out)?;
    if json {
        print_json(&r);
    } else {
        out!(
            "wrote {} ({} bytes, {} ticks), final root {}",
            out.display(),
            r.bytes,
            r.ticks,
            r.final_root
        );
        out!(
            "step {:.3} ms/tick, recording {:.4} ms/tick ({:.2}% of the tick)",
            r.step_ms_per_tick,
            r.record_ms_per_tick,
            r.record_fraction * 100.0
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench`: replay speed side by side at several shard counts.
pub fn bench(json: bool, session: &SessionArgs, shards: &[usize]) -> anyhow::Result<ExitCode> {
    let r = tools::bench(&session.options(1), shards)?;
    if json {
        print_json(&r);
    } else {
        out!(
            "{} boids, {} clients, {} ticks; recording {} bytes, recording cost {:.2}% of the tick",
            r.boids,
            r.clients,
            r.ticks,
            r.recording_bytes,
            r.record_fraction * 100.0
        );
        for l in &r.lines {
            out!(
                "  shards {}: {:.0} ticks/s ({:.1}x real time, {:.2}x vs shards {})",
                l.shards,
                l.ticks_per_s,
                l.real_time_multiple,
                l.speedup,
                r.lines[0].shards
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
