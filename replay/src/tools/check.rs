//! `check` (and `--bless`) over a folder of recordings, and rewriting a recording's stored roots.

use super::*;

/// One file's result in `check`.
#[derive(Debug, Serialize)]
pub struct CheckEntry {
    pub file: String,
    pub ok: bool,
    pub ticks: u32,
    pub divergence: Option<Divergence>,
    /// The recording was made by other kernel rules (a divergence is then expected).
    pub rules_version_differs: bool,
    /// With `--bless`: the first tick whose roots changed (None: nothing changed).
    pub blessed_first_changed_tick: Option<u32>,
    pub error: Option<String>,
}

/// Verifies every `.mrec` in `dir` at 1 and `shards` shards; with `bless`, rewrites the
/// stored roots of files that changed and says from which tick. `fault` is passed to every
/// `verify` (tests of the bless rule).
pub fn check(
    dir: &Path,
    shards: usize,
    bless: bool,
    fault: Option<Fault>,
) -> Result<Vec<CheckEntry>, ToolError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(format!("reading {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "mrec"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ToolError::Invalid(format!("no .mrec files in {}", dir.display())));
    }
    let mut entries = Vec::with_capacity(files.len());
    for path in files {
        let shard_counts: Vec<usize> = if shards > 1 { vec![1, shards] } else { vec![1] };
        let file = path.display().to_string();
        let entry = match verify(&path, &shard_counts, fault, &mut |_, _| {}) {
            Err(e) => CheckEntry {
                file,
                ok: false,
                ticks: 0,
                divergence: None,
                rules_version_differs: false,
                blessed_first_changed_tick: None,
                error: Some(e.to_string()),
            },
            Ok(report) => {
                // Bless only what a rules change explains: the recording disagreeing with
                // the replay. Runs disagreeing with each other is nondeterminism; rewriting
                // the roots from the 1-shard run would hide it.
                let blessable = report.divergence.as_ref().is_none_or(Divergence::blessable);
                let (ok, blessed, error) = match bless && !report.ok() && blessable {
                    false => (report.ok(), None, None),
                    true => match rewrite_roots(&path) {
                        Ok(changed) => (true, changed, None),
                        Err(e) => (false, None, Some(e.to_string())),
                    },
                };
                CheckEntry {
                    file,
                    ok,
                    ticks: report.ticks,
                    divergence: report.divergence,
                    rules_version_differs: report.rules_version_differs,
                    blessed_first_changed_tick: blessed,
                    error,
                }
            }
        };
        entries.push(entry);
    }
    Ok(entries)
}

/// The writer options a recording was made with, read back from its records.
pub(super) fn options_of(rec: &Recording) -> WriterOptions {
    // The longest block, not the first: the first is cut short when a checkpoint comes
    // before it fills (as in an extract starting between checkpoints), and rewriting with
    // its length would change the layout of every later block.
    let block_ticks = rec
        .records
        .iter()
        .filter(|f| f.kind == RecordKind::Block)
        .map(|f| f.tick_count)
        .max()
        .unwrap_or(60);
    let ticks: Vec<u32> = rec
        .checkpoints()
        .map(|f| f.first_tick)
        .filter(|&t| t != rec.meta.start_tick)
        .collect();
    let checkpoint_interval_ticks = match ticks.as_slice() {
        [a, b, ..] => b - a,
        [a] => *a,
        [] => 0,
    };
    WriterOptions {
        block_ticks,
        checkpoint_interval_ticks,
        fsync_every_blocks: 0,
    }
}

/// Replays `path` and rewrites it with this build's roots, checkpoints and end record (same
/// inputs), through a temporary file renamed into place. Returns the first changed tick.
pub fn rewrite_roots(path: &Path) -> Result<Option<u32>, ToolError> {
    let rec = open(path)?;
    if rec.torn_tail.is_some() {
        return Err(ToolError::Invalid(format!(
            "{}: torn tail; extract the readable part first",
            path.display()
        )));
    }
    let mut world = rec.start_world(1).map_err(rec_err(path))?;
    let tmp = path.with_extension("mrec.blessing");
    let file = std::fs::File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let mut writer = RecordingWriter::new(std::io::BufWriter::new(file), &world, 1, options_of(&rec))
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    let mut first_changed = None;
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t.map_err(rec_err(path))?;
        let out = world.step(&t.inputs);
        if first_changed.is_none()
            && (out.state_root != t.state_root || out.snapshots_root != t.snapshots_root)
        {
            first_changed = Some(t.tick);
        }
        let out = out.clone();
        writer
            .record_tick(&t.inputs, &out, &world)
            .map_err(io_err(format!("writing {}", tmp.display())))?;
    }
    writer
        .finish()
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io_err(format!("replacing {}", path.display())))?;
    Ok(first_changed)
}
