//! `inspect` (one tick of a recording, entity by entity) and `diff` (two recordings).

use super::*;

/// One entity, as `inspect --entity` shows it.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EntityReport {
    Boid {
        id: u32,
        x_mm: i32,
        y_mm: i32,
        vx: i32,
        vy: i32,
    },
    /// Everything the kernel keeps for a player's slot, and what follows from it.
    Avatar {
        id: u32,
        slot: u32,
        client: u32,
        name: String,
        x_mm: i32,
        y_mm: i32,
        vx: i32,
        vy: i32,
        /// The steering input in force: direction (a vector, not normalised) and throttle.
        dir_x: i16,
        dir_y: i16,
        throttle: u8,
        /// The highest steer or cast sequence number applied.
        last_seq: u32,
        score: u32,
        /// The first tick the next cast may happen, the ticks until then, and the tick
        /// of the last cast (`cast_ready_tick` less the cooldown; None: none yet).
        cast_ready_tick: u32,
        cooldown_ticks_left: u32,
        last_cast_tick: Option<u32>,
        /// The newest snapshot the client acked, and how many ticks ago.
        acked_tick: Option<u32>,
        ack_lag_ticks: Option<u32>,
        /// Its snapshot stream: the token bucket and the snapshots remembered as baselines.
        stream_tokens_bytes: Option<u32>,
        remembered_ticks: Vec<u32>,
    },
}

/// A player in the `inspect` summary. A spectator's position is its camera.
#[derive(Debug, Serialize)]
pub struct PlayerLine {
    pub slot: u32,
    pub client: u32,
    pub name: String,
    pub spectator: bool,
    pub x_mm: i32,
    pub y_mm: i32,
    pub score: u32,
}

/// What `inspect` shows.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    pub tick: u32,
    pub state_root: String,
    pub boids: usize,
    pub players: Vec<PlayerLine>,
    pub entity: Option<EntityReport>,
}

/// Entity `id` of `world` as `inspect --entity` shows it (None: no such entity now).
pub fn entity_report(world: &World, id: u32) -> Option<EntityReport> {
    let boid_count = world.config().boid_count;
    if id < boid_count {
        let b = world.boid(id)?;
        return Some(EntityReport::Boid {
            id,
            x_mm: b.x_mm,
            y_mm: b.y_mm,
            vx: b.vx.into(),
            vy: b.vy.into(),
        });
    }
    let slot = id - boid_count;
    let p = world
        .players()
        .get(slot as usize)
        .filter(|p| p.active && !p.spectator)?;
    let tick = world.tick();
    let cooldown = world.config().player.cast_cooldown_ticks;
    let acked_tick = (p.acked_tick != u32::MAX).then_some(p.acked_tick);
    let stream = world.stream_summary(slot);
    Some(EntityReport::Avatar {
        id,
        slot,
        client: p.client,
        name: p.name().to_string(),
        x_mm: p.x_mm,
        y_mm: p.y_mm,
        vx: p.vx,
        vy: p.vy,
        dir_x: p.dir_x,
        dir_y: p.dir_y,
        throttle: p.throttle,
        last_seq: p.last_seq,
        score: p.score,
        cast_ready_tick: p.cast_ready_tick,
        cooldown_ticks_left: p.cast_ready_tick.saturating_sub(tick),
        // A slot that never cast holds 0; a cast at tick T sets T + cooldown (T >= 1).
        last_cast_tick: (p.cast_ready_tick > cooldown).then(|| p.cast_ready_tick - cooldown),
        acked_tick,
        ack_lag_ticks: acked_tick.map(|a| tick.saturating_sub(a)),
        stream_tokens_bytes: stream.as_ref().map(|s| s.tokens_bytes),
        remembered_ticks: stream.map(|s| s.remembered_ticks).unwrap_or_default(),
    })
}

/// The state at `tick`: a summary, or one entity.
pub fn inspect(path: &Path, tick: u32, entity: Option<u32>) -> Result<InspectReport, ToolError> {
    let rec = open(path)?;
    // A tick outside the recording is a bad argument; `world_at` would report it as a
    // `Corrupted` recording ("recording corrupted at byte offset 0"), which it is not.
    if tick < rec.meta.start_tick || tick > rec.last_tick() {
        return Err(ToolError::Invalid(format!(
            "--tick {tick} is outside the recording ({}..={})",
            rec.meta.start_tick,
            rec.last_tick()
        )));
    }
    let world = rec.world_at(tick, 1).map_err(rec_err(path))?;
    let boid_count = world.config().boid_count;
    let entity = match entity {
        None => None,
        Some(id) => match entity_report(&world, id) {
            Some(e) => Some(e),
            None => {
                return Err(ToolError::Invalid(format!(
                    "entity {id} does not exist at tick {tick} (boids are 0..{boid_count}, avatars {boid_count} + slot of a joined player; spectators have none)"
                )))
            }
        },
    };
    Ok(InspectReport {
        tick: world.tick(),
        state_root: hex(&world.state_root()),
        boids: boid_count as usize,
        players: world
            .players()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.active)
            .map(|(s, p)| PlayerLine {
                slot: s as u32,
                client: p.client,
                name: p.name().to_string(),
                spectator: p.spectator,
                x_mm: p.x_mm,
                y_mm: p.y_mm,
                score: p.score,
            })
            .collect(),
        entity,
    })
}

/// What `diff` found.
#[derive(Debug, Serialize)]
pub struct DiffReport {
    pub a: String,
    pub b: String,
    pub config_differs: bool,
    /// Ticks both recordings cover.
    pub common_ticks: (u32, u32),
    pub first_divergent_tick: Option<u32>,
    pub root: Option<RootKind>,
    pub inputs_differ: bool,
    pub chunks: Vec<ChunkDiff>,
}

/// Compares two recordings tick by tick; at the first difference in recorded roots,
/// rebuilds both states at that tick and explains it.
pub fn diff(a: &Path, b: &Path) -> Result<DiffReport, ToolError> {
    let (ra, rb) = (open(a)?, open(b)?);
    let from = ra.first_tick().max(rb.first_tick());
    let to = ra.last_tick().min(rb.last_tick());
    let mut report = DiffReport {
        a: a.display().to_string(),
        b: b.display().to_string(),
        config_differs: ra.meta.config_hash != rb.meta.config_hash,
        common_ticks: (from, to),
        first_divergent_tick: None,
        root: None,
        inputs_differ: false,
        chunks: Vec::new(),
    };
    if report.config_differs {
        return Ok(report);
    }
    for (x, y) in ra.ticks_from(from).zip(rb.ticks_from(from)) {
        let (x, y) = (x.map_err(rec_err(a))?, y.map_err(rec_err(b))?);
        if x.tick > to {
            break;
        }
        if x.state_root != y.state_root || x.snapshots_root != y.snapshots_root {
            report.first_divergent_tick = Some(x.tick);
            report.root = Some(if x.state_root != y.state_root {
                RootKind::State
            } else {
                RootKind::Snapshots
            });
            report.inputs_differ = x.inputs != y.inputs;
            let wa = ra.world_at(x.tick, 1).map_err(rec_err(a))?;
            let wb = rb.world_at(x.tick, 1).map_err(rec_err(b))?;
            report.chunks = divergence::compare(&wa, &wb);
            break;
        }
    }
    Ok(report)
}
