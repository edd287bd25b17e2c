//! `verify` over a chain of segments: a world's life across processes, each segment
//! resuming where the one before it ended. Each segment is verified on its own, and each
//! link is checked: same world config, the next segment starts at the previous one's last
//! durable tick, and from the state whose root the previous one recorded for that tick.

use super::*;

/// Why two consecutive segments do not join.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum LinkProblem {
    /// The segments are of different world configs.
    ConfigDiffers { from_hash: String, to_hash: String },
    /// The next segment does not start at the previous one's last durable tick.
    TickGap { last_tick: u32, start_tick: u32 },
    /// It starts at that tick, but from another state.
    RootDiffers {
        tick: u32,
        recorded: String,
        resumed: String,
    },
}

/// One link between consecutive segments.
#[derive(Debug, Serialize)]
pub struct ChainLink {
    pub from: String,
    pub to: String,
    /// The tick the next segment resumes at.
    pub tick: u32,
    pub problem: Option<LinkProblem>,
}

/// What `verify` found over several segments.
#[derive(Debug, Serialize)]
pub struct ChainReport {
    pub segments: Vec<VerifyReport>,
    pub links: Vec<ChainLink>,
}

impl ChainReport {
    /// Every segment verifies and every link holds.
    pub fn ok(&self) -> bool {
        self.segments.iter().all(VerifyReport::ok) && self.links.iter().all(|l| l.problem.is_none())
    }
}

/// Checks the link from segment `a` to segment `b`.
pub fn link(a: &Path, b: &Path) -> Result<ChainLink, ToolError> {
    let (ra, rb) = (open(a)?, open(b)?);
    let tick = rb.meta.start_tick;
    let problem = if ra.meta.config_hash != rb.meta.config_hash {
        Some(LinkProblem::ConfigDiffers {
            from_hash: hex(&ra.meta.config_hash),
            to_hash: hex(&rb.meta.config_hash),
        })
    } else if ra.last_tick() != tick {
        Some(LinkProblem::TickGap {
            last_tick: ra.last_tick(),
            start_tick: tick,
        })
    } else {
        let recorded = ra.last_recorded_root().map_err(rec_err(a))?;
        let resumed = rb.start_world(1).map_err(rec_err(b))?.state_root();
        (recorded != resumed).then(|| LinkProblem::RootDiffers {
            tick,
            recorded: hex(&recorded),
            resumed: hex(&resumed),
        })
    };
    Ok(ChainLink {
        from: a.display().to_string(),
        to: b.display().to_string(),
        tick,
        problem,
    })
}

/// Verifies every segment at `shard_counts` and every link between consecutive ones, on
/// every core.
pub fn verify_chain(
    paths: &[PathBuf],
    shard_counts: &[usize],
    progress: Progress<'_>,
) -> Result<ChainReport, ToolError> {
    verify_chain_with(paths, shard_counts, default_jobs(), progress)
}

/// `verify_chain` with `jobs` threads per segment (`verify_with`).
pub fn verify_chain_with(
    paths: &[PathBuf],
    shard_counts: &[usize],
    jobs: usize,
    progress: Progress<'_>,
) -> Result<ChainReport, ToolError> {
    if paths.is_empty() {
        return Err(ToolError::Invalid("verify needs at least one recording".into()));
    }
    let mut segments = Vec::with_capacity(paths.len());
    for p in paths {
        segments.push(verify_with(p, shard_counts, None, jobs, progress)?);
    }
    let links = paths
        .windows(2)
        .map(|w| link(&w[0], &w[1]))
        .collect::<Result<_, _>>()?;
    Ok(ChainReport { segments, links })
}
