//! `inspect REC` without a tick: what a recording holds, in one screen.

use super::*;

/// Points of `SummaryReport::clients_over_time`.
pub const CLIENT_SAMPLES: usize = 12;

/// What `inspect REC` shows.
#[derive(Debug, Serialize)]
pub struct SummaryReport {
    pub file: String,
    pub bytes: u64,
    pub format_version: u32,
    /// The kernel rules it was recorded under, and whether they are this build's.
    pub rules_version: u32,
    pub rules_are_this_builds: bool,
    pub crate_version: String,
    pub git_commit: Option<String>,
    pub config_hash: String,
    pub tick_rate_hz: u32,
    pub boids: u32,
    pub client_slots: u32,
    /// The state it starts from (0: the world as its config builds it), and its ticks.
    pub start_tick: u32,
    pub first_tick: u32,
    pub last_tick: u32,
    pub ticks: u32,
    /// `ticks` at the world's tick rate.
    pub duration_s: f64,
    pub ended_cleanly: bool,
    pub torn_tail: Option<TornTail>,
    pub blocks: usize,
    /// The ticks of its checkpoints.
    pub checkpoints: Vec<u32>,
    /// Bookmarks made in the live viewer.
    pub bookmarks: Vec<crate::Bookmark>,
    /// Clients joined (players and spectators) at evenly spaced ticks, from a replay.
    pub clients_over_time: Vec<(u32, u32)>,
    /// The most clients at once, and the first tick with that many.
    pub clients_max: (u32, u32),
    pub joins: u32,
    pub leaves: u32,
    /// Whether the replay reproduced every recorded root.
    pub roots_match: bool,
}

/// Replays `path` once (on one shard) and summarises it.
pub fn summary(path: &Path, progress: Progress<'_>) -> Result<SummaryReport, ToolError> {
    let rec = open(path)?;
    let cfg = &rec.meta.config;
    let mut world = rec.start_world(1).map_err(rec_err(path))?;
    let start = world.tick();
    let count = |w: &World| w.players().iter().filter(|p| p.active).count() as u32;
    let mut clients = vec![(start, count(&world))];
    let mut clients_max = (count(&world), start);
    let (mut joins, mut leaves) = (0u32, 0u32);
    let mut roots_match = true;
    let total = rec.last_tick() - start;
    for t in rec.ticks_from(start + 1) {
        let t = t.map_err(rec_err(path))?;
        let out = world.step(&t.inputs);
        roots_match &= out.state_root == t.state_root && out.snapshots_root == t.snapshots_root;
        joins += out.joined.len() as u32;
        leaves += out.left.len() as u32;
        let n = count(&world);
        if n > clients_max.0 {
            clients_max = (n, t.tick);
        }
        clients.push((t.tick, n));
        progress(t.tick - start, total);
    }
    let k = CLIENT_SAMPLES.min(clients.len());
    let clients_over_time = (0..k)
        .map(|i| clients[i * (clients.len() - 1) / (k - 1).max(1)])
        .collect();
    let ticks = rec.last_tick() - start;
    Ok(SummaryReport {
        file: path.display().to_string(),
        bytes: rec.file_bytes,
        format_version: rec.format_version,
        rules_version: rec.rules_version,
        rules_are_this_builds: rec.rules_version == migratory_kernel::rules_version(),
        crate_version: rec.meta.crate_version.clone(),
        git_commit: rec.meta.git_commit.clone(),
        config_hash: hex(&rec.meta.config_hash),
        tick_rate_hz: cfg.tick_rate_hz,
        boids: cfg.boid_count,
        client_slots: cfg.client_slots_max,
        start_tick: start,
        first_tick: rec.first_tick(),
        last_tick: rec.last_tick(),
        ticks,
        duration_s: f64::from(ticks) / f64::from(cfg.tick_rate_hz.max(1)),
        ended_cleanly: rec.end.is_some(),
        torn_tail: rec.torn_tail.clone(),
        blocks: rec.records.iter().filter(|r| r.kind == RecordKind::Block).count(),
        checkpoints: rec.checkpoints().map(|c| c.first_tick).collect(),
        bookmarks: rec.bookmarks().map_err(rec_err(path))?,
        clients_over_time,
        clients_max: (clients_max.0, clients_max.1),
        joins,
        leaves,
        roots_match,
    })
}
