//! Crossing a kernel rules change: `trace` (export what a recording's run did, tick by
//! tick, under this build's rules), `rules_diff` (replay the same inputs under this
//! build's rules and report where and how far behaviour moved from a trace) and
//! `rerecord` (a fresh recording of the same inputs under this build's rules).

use super::*;
use crate::divergence::{boid_fields, player_fields, FieldDiff};
use crate::format::trace::{TraceError, TraceFrame, TraceHeader, TraceReader, TraceWriter};

fn trace_err(path: &Path) -> impl FnOnce(TraceError) -> ToolError + '_ {
    move |e| ToolError::Invalid(format!("{}: {e}", path.display()))
}

/// What `trace` wrote.
#[derive(Debug, Serialize)]
pub struct TraceReport {
    pub file: String,
    pub trace: String,
    pub header: TraceHeader,
    pub bytes: u64,
    /// Whether the replay reproduced every recorded root (a trace of a run that does not
    /// is still written, but it is not the recording's behaviour).
    pub roots_match: bool,
    pub first_mismatch_tick: Option<u32>,
}

/// Replays `path` under this build's rules and writes every tick's entity states to `out`.
pub fn trace(
    path: &Path,
    out: &Path,
    shards: usize,
    progress: Progress<'_>,
) -> Result<TraceReport, ToolError> {
    refuse_overwrite(&[path], out)?;
    let rec = open(path)?;
    let mut world = rec.start_world(shards).map_err(rec_err(path))?;
    let tmp = out.with_extension("mtrc.partial");
    let mut writer = TraceWriter::create(&tmp, &world).map_err(trace_err(&tmp))?;
    let total = rec.last_tick() - world.tick();
    let mut first_mismatch = None;
    for t in rec.ticks_from(world.tick() + 1) {
        let t = t.map_err(rec_err(path))?;
        let o = world.step(&t.inputs);
        if first_mismatch.is_none() && (o.state_root != t.state_root || o.snapshots_root != t.snapshots_root)
        {
            first_mismatch = Some(t.tick);
        }
        writer.push(&world).map_err(trace_err(&tmp))?;
        progress(t.tick - rec.meta.start_tick, total);
    }
    let header = writer.finish().map_err(trace_err(&tmp))?;
    std::fs::rename(&tmp, out).map_err(io_err(format!("renaming {} to {}", tmp.display(), out.display())))?;
    let bytes = std::fs::metadata(out)
        .map_err(io_err(out.display().to_string()))?
        .len();
    Ok(TraceReport {
        file: path.display().to_string(),
        trace: out.display().to_string(),
        header,
        bytes,
        roots_match: first_mismatch.is_none(),
        first_mismatch_tick: first_mismatch,
    })
}

/// How many entities differ at one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Spread {
    pub tick: u32,
    pub boids: u32,
    pub players: u32,
}

/// What `rules_diff` found.
#[derive(Debug, Serialize)]
pub struct RulesDiffReport {
    pub file: String,
    pub trace: String,
    /// The rules the trace was made under, and this build's.
    pub trace_rules_version: u32,
    pub rules_version: u32,
    pub first_tick: u32,
    pub last_tick: u32,
    pub ticks_compared: u32,
    /// The first tick at which any entity differs, and its first differing fields
    /// (`a` the trace's value, `b` this build's).
    pub first_difference_tick: Option<u32>,
    pub first_fields: Vec<FieldDiff>,
    /// Ticks at which something differs.
    pub ticks_differing: u32,
    /// The most entities differing at one tick, and the tick.
    pub most: Spread,
    /// Entities differing at the last tick compared.
    pub at_end: Spread,
    /// Boids and players that differed at some tick.
    pub boids_ever_differing: u32,
    pub players_ever_differing: u32,
    /// Up to `SPREAD_SAMPLES` ticks from the first difference to the end, evenly spaced:
    /// how the difference grew.
    pub spread: Vec<Spread>,
}

/// Points of `RulesDiffReport::spread`.
pub const SPREAD_SAMPLES: usize = 12;

/// Replays `path`'s inputs under this build's rules (from its start, whatever rules
/// recorded it) and compares each tick's entities with the trace `trace_path` made of it.
pub fn rules_diff(
    trace_path: &Path,
    path: &Path,
    shards: usize,
    progress: Progress<'_>,
) -> Result<RulesDiffReport, ToolError> {
    let rec = open(path)?;
    let mut trace = TraceReader::open(trace_path).map_err(trace_err(trace_path))?;
    let h = trace.header.clone();
    if h.config_hash != rec.meta.config_hash {
        return Err(ToolError::Invalid(format!(
            "{} is a trace of another world (config {}) than {} (config {})",
            trace_path.display(),
            hex(&h.config_hash),
            path.display(),
            hex(&rec.meta.config_hash)
        )));
    }
    let mut world = rec.start_world_any_rules(shards).map_err(rec_err(path))?;
    // The same ticks, or the comparison would say nothing of those left out.
    let (first, last) = (world.tick() + 1, rec.last_tick());
    if h.first_tick != first || h.tick_count != last - world.tick() {
        return Err(ToolError::Invalid(format!(
            "the trace holds {} ticks from tick {}, the recording ticks {first}..={last}: trace the same recording",
            h.tick_count, h.first_tick
        )));
    }
    let mut report = RulesDiffReport {
        file: path.display().to_string(),
        trace: trace_path.display().to_string(),
        trace_rules_version: h.rules_version,
        rules_version: world.rules_version(),
        first_tick: h.first_tick,
        last_tick: last,
        ticks_compared: 0,
        first_difference_tick: None,
        first_fields: Vec::new(),
        ticks_differing: 0,
        most: Spread::default(),
        at_end: Spread::default(),
        boids_ever_differing: 0,
        players_ever_differing: 0,
        spread: Vec::new(),
    };
    let mut boid_ever = vec![false; h.boid_count as usize];
    let mut player_ever = vec![false; h.slot_count as usize];
    let mut by_tick = Vec::new();
    let mut frame = TraceFrame::default();
    for t in rec.ticks_from(world.tick() + 1) {
        let t = t.map_err(rec_err(path))?;
        if t.tick > last {
            break;
        }
        world.step(&t.inputs);
        if !trace.next_into(&mut frame).map_err(trace_err(trace_path))? {
            break;
        }
        let mut s = Spread {
            tick: t.tick,
            ..Spread::default()
        };
        let mut fields = Vec::new();
        for (id, (old, new)) in frame.boids.iter().zip(world.boids().iter()).enumerate() {
            if old != new {
                s.boids += 1;
                boid_ever[id] = true;
                if report.first_difference_tick.is_none() {
                    boid_fields(id as u32, old, new, &mut fields);
                }
            }
        }
        for (slot, (old, new)) in frame.players.iter().zip(world.players()).enumerate() {
            if old != new {
                s.players += 1;
                player_ever[slot] = true;
                if report.first_difference_tick.is_none() {
                    player_fields(slot as u32, old, new, &mut fields);
                }
            }
        }
        report.ticks_compared += 1;
        if s.boids + s.players > 0 {
            if report.first_difference_tick.is_none() {
                report.first_difference_tick = Some(t.tick);
                report.first_fields = fields;
            }
            report.ticks_differing += 1;
            if s.boids + s.players > report.most.boids + report.most.players {
                report.most = s;
            }
        }
        report.at_end = s;
        if report.first_difference_tick.is_some() {
            by_tick.push(s);
        }
        progress(t.tick - rec.meta.start_tick, last - rec.meta.start_tick);
    }
    // Every frame read: the last read checks the trace's checksum.
    if trace.next_into(&mut frame).map_err(trace_err(trace_path))? {
        return Err(ToolError::Invalid(format!(
            "{} holds more frames than its header says",
            trace_path.display()
        )));
    }
    report.boids_ever_differing = boid_ever.iter().filter(|&&d| d).count() as u32;
    report.players_ever_differing = player_ever.iter().filter(|&&d| d).count() as u32;
    let n = by_tick.len();
    if n > 0 {
        let k = SPREAD_SAMPLES.min(n);
        report.spread = (0..k).map(|i| by_tick[i * (n - 1) / (k - 1).max(1)]).collect();
    }
    Ok(report)
}

/// What `rerecord` wrote.
#[derive(Debug, Serialize)]
pub struct RerecordReport {
    /// The recordings replayed, in order (a world's segments, or one recording).
    pub files: Vec<String>,
    pub out: String,
    pub old_rules_version: u32,
    pub rules_version: u32,
    pub first_tick: u32,
    pub last_tick: u32,
    pub bytes: u64,
    /// The first tick whose state root differs from the old recordings' (None: the new
    /// rules changed nothing this session did).
    pub first_changed_root_tick: Option<u32>,
    pub final_root: String,
    /// Inputs that ended early (a crash's cut or garbage): the file, the last tick kept,
    /// and where and how it ended. Their later ticks are not in the new recording.
    pub torn_tails: Vec<(String, u32, TornTail)>,
}

/// Replays `path`'s inputs under this build's rules (from its start, whatever rules
/// recorded it) and records them afresh to `out`, with this build's roots.
pub fn rerecord(
    path: &Path,
    out: &Path,
    shards: usize,
    options: WriterOptions,
    progress: Progress<'_>,
) -> Result<RerecordReport, ToolError> {
    rerecord_chain(&[path], out, shards, options, progress)
}

/// `rerecord` of a chain of recordings that continue one another (a world's segments,
/// each starting at the tick after the one before ended): one recording of all their
/// inputs, from the first one's start, under this build's rules. Each is read as a
/// resume reads it (`Recording::open_after_crash`).
pub fn rerecord_chain(
    paths: &[&Path],
    out: &Path,
    shards: usize,
    options: WriterOptions,
    progress: Progress<'_>,
) -> Result<RerecordReport, ToolError> {
    let Some(&first) = paths.first() else {
        return Err(ToolError::Invalid("rerecord needs at least one recording".into()));
    };
    refuse_overwrite(paths, out)?;
    // Read as a resume reads them: a segment that ends in a crash's garbage continued
    // from its last intact tick.
    let recs = paths
        .iter()
        .map(|p| Recording::open_after_crash(p).map_err(rec_err(p)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut world = recs[0].start_world_any_rules(shards).map_err(rec_err(first))?;
    let tmp = out.with_extension("mrec.partial");
    let file = std::fs::File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let mut writer = RecordingWriter::new(std::io::BufWriter::new(file), &world, shards as u32, options)
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    let first_tick = world.tick() + 1;
    let start = world.tick();
    let total = recs.last().map_or(0, |r| r.last_tick()).saturating_sub(start);
    let mut first_changed = None;
    let torn_tails = recs
        .iter()
        .zip(paths)
        .filter_map(|(r, p)| {
            r.torn_tail
                .clone()
                .map(|t| (p.display().to_string(), r.last_tick(), t))
        })
        .collect();
    let result = (|| {
        for (rec, path) in recs.iter().zip(paths) {
            if rec.meta.config_hash != recs[0].meta.config_hash {
                return Err(ToolError::Invalid(format!(
                    "{} is of another world than {}",
                    path.display(),
                    first.display()
                )));
            }
            if rec.first_tick() != world.tick() + 1 {
                return Err(ToolError::Invalid(format!(
                    "{} starts at tick {}, but the recordings before it end at tick {}: not a chain",
                    path.display(),
                    rec.first_tick(),
                    world.tick()
                )));
            }
            for t in rec.ticks_from(rec.first_tick()) {
                let t = t.map_err(rec_err(path))?;
                world.step(&t.inputs);
                if first_changed.is_none() && world.output().state_root != t.state_root {
                    first_changed = Some(t.tick);
                }
                writer
                    .record_tick(&t.inputs, world.output(), &world)
                    .map_err(io_err(format!("writing {}", tmp.display())))?;
                progress(t.tick - start, total);
            }
            // The people's bookmarks go along: they name ticks, not states.
            for b in rec.bookmarks().map_err(rec_err(path))? {
                writer
                    .bookmark(b.tick, b.client, &b.note)
                    .map_err(io_err(format!("writing {}", tmp.display())))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        drop(writer);
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let mut file = writer
        .finish_with_checkpoint(&world)
        .map_err(io_err(format!("finishing {}", tmp.display())))?;
    std::io::Write::flush(&mut file).map_err(io_err(format!("flushing {}", tmp.display())))?;
    drop(file);
    std::fs::rename(&tmp, out).map_err(io_err(format!("renaming {} to {}", tmp.display(), out.display())))?;
    let bytes = std::fs::metadata(out)
        .map_err(io_err(out.display().to_string()))?
        .len();
    Ok(RerecordReport {
        files: paths.iter().map(|p| p.display().to_string()).collect(),
        out: out.display().to_string(),
        old_rules_version: recs[0].rules_version,
        rules_version: world.rules_version(),
        first_tick,
        last_tick: world.tick(),
        bytes,
        first_changed_root_tick: first_changed,
        final_root: hex(&world.state_root()),
        torn_tails,
    })
}

/// Refuses an output that is one of the inputs (it would be overwritten as it is read).
fn refuse_overwrite(inputs: &[&Path], out: &Path) -> Result<(), ToolError> {
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    match inputs.iter().find(|p| same(p, out)) {
        Some(p) => Err(ToolError::Invalid(format!(
            "{} would overwrite the recording it reads: write elsewhere",
            p.display()
        ))),
        None => Ok(()),
    }
}
