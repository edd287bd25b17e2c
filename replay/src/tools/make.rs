//! Tools that make recordings: `extract` a tick range, `synth` a scripted session, and `bench` replays of one.

use super::*;

/// What `extract` wrote.
#[derive(Debug, Serialize)]
pub struct ExtractReport {
    pub out: String,
    pub from: u32,
    pub to: u32,
    pub bytes: u64,
}

/// Cuts ticks `from+1..=to` (starting from the state at `from`) into a new recording whose
/// roots are checked against the original on the way.
pub fn extract(path: &Path, from: u32, to: u32, out: &Path) -> Result<ExtractReport, ToolError> {
    let rec = open(path)?;
    if from >= to || to > rec.last_tick() || from < rec.meta.start_tick {
        return Err(ToolError::Invalid(format!(
            "--from {from} --to {to} must satisfy {} <= from < to <= {}",
            rec.meta.start_tick,
            rec.last_tick()
        )));
    }
    let mut world = rec.world_at(from, 1).map_err(rec_err(path))?;
    let file = std::fs::File::create(out).map_err(io_err(format!("creating {}", out.display())))?;
    let mut writer = RecordingWriter::new(std::io::BufWriter::new(file), &world, 1, options_of(&rec))
        .map_err(io_err(format!("writing {}", out.display())))?;
    for t in rec.ticks_from(from + 1) {
        let t = t.map_err(rec_err(path))?;
        if t.tick > to {
            break;
        }
        let out_tick = world.step(&t.inputs).clone();
        if out_tick.state_root != t.state_root || out_tick.snapshots_root != t.snapshots_root {
            return Err(ToolError::Invalid(format!(
                "the original does not replay on this build at tick {} (run verify)",
                t.tick
            )));
        }
        writer
            .record_tick(&t.inputs, &out_tick, &world)
            .map_err(io_err(format!("writing {}", out.display())))?;
    }
    // Bookmarks of the ticks kept go along (the start tick is not one of them).
    for b in rec
        .bookmarks()
        .map_err(rec_err(path))?
        .iter()
        .filter(|b| b.tick > from && b.tick <= to)
    {
        writer
            .bookmark(b.tick, b.client, &b.note)
            .map_err(io_err(format!("writing {}", out.display())))?;
    }
    let bytes = writer.bytes_written();
    writer
        .finish()
        .map_err(io_err(format!("writing {}", out.display())))?;
    Ok(ExtractReport {
        out: out.display().to_string(),
        from,
        to,
        bytes,
    })
}

/// How `synth` builds a session.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub config: WorldConfig,
    pub script: ScriptConfig,
    pub ticks: u32,
    pub shards: usize,
    pub writer: WriterOptions,
}

/// What `synth` wrote.
#[derive(Debug, Serialize)]
pub struct SynthReport {
    pub ticks: u32,
    pub bytes: u64,
    pub final_root: String,
    pub step_ms_per_tick: f64,
    pub record_ms_per_tick: f64,
    /// Recording cost as a fraction of the tick.
    pub record_fraction: f64,
}

/// Plays scripted bots in a fresh world and records the session into `sink`.
pub fn synth_into<W: crate::format::Durable>(
    options: &SynthOptions,
    sink: W,
) -> Result<(SynthReport, W), ToolError> {
    let mut world =
        World::new(options.config.clone(), options.shards).map_err(|e| ToolError::Invalid(e.to_string()))?;
    let mut script = Script::new(options.script.clone());
    let mut writer = RecordingWriter::new(sink, &world, options.shards as u32, options.writer.clone())
        .map_err(io_err("writing"))?;
    let mut inputs = TickInputs::default();
    let mut last = world.output().clone();
    let (mut step_s, mut record_s) = (0.0, 0.0);
    for _ in 0..options.ticks {
        script.next_inputs(&world, &last, &mut inputs);
        let t0 = Instant::now();
        let out = world.step(&inputs);
        step_s += t0.elapsed().as_secs_f64();
        last.clone_from(out);
        let t1 = Instant::now();
        writer
            .record_tick(&inputs, &last, &world)
            .map_err(io_err("writing"))?;
        record_s += t1.elapsed().as_secs_f64();
    }
    let t1 = Instant::now();
    let bytes = writer.bytes_written();
    let sink = writer.finish().map_err(io_err("writing"))?;
    record_s += t1.elapsed().as_secs_f64();
    let n = options.ticks.max(1) as f64;
    Ok((
        SynthReport {
            ticks: options.ticks,
            bytes,
            final_root: hex(&world.state_root()),
            step_ms_per_tick: step_s * 1000.0 / n,
            record_ms_per_tick: record_s * 1000.0 / n,
            record_fraction: record_s / step_s.max(1e-9),
        },
        sink,
    ))
}

/// Synthesises a recording into a file.
pub fn synth(options: &SynthOptions, out: &Path) -> Result<SynthReport, ToolError> {
    let file = std::fs::File::create(out).map_err(io_err(format!("creating {}", out.display())))?;
    let (report, _) = synth_into(options, std::io::BufWriter::new(file))?;
    Ok(report)
}

/// One line of `bench`.
#[derive(Debug, Serialize)]
pub struct BenchLine {
    pub shards: usize,
    pub ticks_per_s: f64,
    pub real_time_multiple: f64,
    /// Ticks/s relative to the first shard count.
    pub speedup: f64,
}

/// What `bench` measured.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub boids: u32,
    pub clients: u32,
    pub ticks: u32,
    pub recording_bytes: u64,
    pub record_fraction: f64,
    pub lines: Vec<BenchLine>,
}

/// Synthesises a session in memory, then replays it at each shard count, side by side.
pub fn bench(options: &SynthOptions, shard_counts: &[usize]) -> Result<BenchReport, ToolError> {
    let (synth, bytes) = synth_into(options, Vec::new())?;
    let dir = std::env::temp_dir().join(format!("migratory-bench-{}.mrec", std::process::id()));
    std::fs::write(&dir, &bytes).map_err(io_err("writing the bench recording"))?;
    let mut lines: Vec<BenchLine> = Vec::new();
    for &n in shard_counts {
        let r = run(&dir, n, None, &mut |_, _| {});
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_file(&dir);
                return Err(e);
            }
        };
        let base = lines.first().map_or(r.ticks_per_s, |l| l.ticks_per_s);
        lines.push(BenchLine {
            shards: n,
            ticks_per_s: r.ticks_per_s,
            real_time_multiple: r.real_time_multiple,
            speedup: r.ticks_per_s / base,
        });
    }
    let _ = std::fs::remove_file(&dir);
    Ok(BenchReport {
        boids: options.config.boid_count,
        clients: options.script.clients,
        ticks: options.ticks,
        recording_bytes: synth.bytes,
        record_fraction: synth.record_fraction,
        lines,
    })
}
