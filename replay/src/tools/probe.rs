//! `probe`: one field of one entity or client over a range of ticks (a time series), and
//! the first tick in it where a simple condition holds.

use super::*;

/// What `probe` follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum Probed {
    /// A boid id, or an avatar's (boid count + slot).
    Entity(u32),
    /// A client, wherever its slot is (absent while it is not joined).
    Client(u32),
}

/// The fields `probe` reads. Boids have the first four.
pub const PROBE_FIELDS: &[&str] = &[
    "x_mm",
    "y_mm",
    "vx",
    "vy",
    "score",
    "last_seq",
    "acked_tick",
    "ack_lag",
    "cast_ready_tick",
    "throttle",
    "dir_x",
    "dir_y",
];

/// A condition on a field's value, for `--first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// The value differs from the one at the tick before (present at both).
    Changes,
    Above(i64),
    AtLeast(i64),
    Below(i64),
    AtMost(i64),
    Equals(i64),
    Differs(i64),
}

/// Why a `--first` condition could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error("a condition is `changes` or >N, >=N, <N, <=N, ==N, !=N, not {0:?}")]
    Unknown(String),
    #[error("{number:?} in the condition {condition:?} is not a whole number")]
    NotANumber { number: String, condition: String },
}

impl std::str::FromStr for Condition {
    type Err = ConditionError;

    /// `changes`, or a comparison with a number: `>N`, `>=N`, `<N`, `<=N`, `==N`, `!=N`.
    fn from_str(s: &str) -> Result<Condition, ConditionError> {
        let s = s.trim();
        if s == "changes" {
            return Ok(Condition::Changes);
        }
        let (op, rest) = ["==", "!=", ">=", "<=", ">", "<"]
            .iter()
            .find_map(|op| s.strip_prefix(op).map(|rest| (*op, rest)))
            .ok_or_else(|| ConditionError::Unknown(s.to_string()))?;
        let n: i64 = rest.trim().parse().map_err(|_| ConditionError::NotANumber {
            number: rest.to_string(),
            condition: s.to_string(),
        })?;
        Ok(match op {
            ">" => Condition::Above(n),
            ">=" => Condition::AtLeast(n),
            "<" => Condition::Below(n),
            "<=" => Condition::AtMost(n),
            "==" => Condition::Equals(n),
            _ => Condition::Differs(n),
        })
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Condition::Changes => write!(f, "changes"),
            Condition::Above(n) => write!(f, ">{n}"),
            Condition::AtLeast(n) => write!(f, ">={n}"),
            Condition::Below(n) => write!(f, "<{n}"),
            Condition::AtMost(n) => write!(f, "<={n}"),
            Condition::Equals(n) => write!(f, "=={n}"),
            Condition::Differs(n) => write!(f, "!={n}"),
        }
    }
}

impl Condition {
    fn holds(self, previous: Option<i64>, value: i64) -> bool {
        match self {
            Condition::Changes => previous.is_some_and(|p| p != value),
            Condition::Above(n) => value > n,
            Condition::AtLeast(n) => value >= n,
            Condition::Below(n) => value < n,
            Condition::AtMost(n) => value <= n,
            Condition::Equals(n) => value == n,
            Condition::Differs(n) => value != n,
        }
    }
}

/// What `probe` found.
#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub file: String,
    pub probed: Probed,
    pub field: String,
    pub from: u32,
    pub to: u32,
    /// `(tick, value)`, the value None while the entity or client is absent.
    pub series: Vec<(u32, Option<i64>)>,
    pub condition: Option<Condition>,
    /// The first tick of the range where the condition holds.
    pub first: Option<u32>,
}

/// `field` of `probed` at every tick `from..=to` of `path` (default: the whole
/// recording), and the first tick where `condition` holds.
pub fn probe(
    path: &Path,
    probed: Probed,
    field: &str,
    range: (Option<u32>, Option<u32>),
    condition: Option<Condition>,
    progress: Progress<'_>,
) -> Result<ProbeReport, ToolError> {
    if !PROBE_FIELDS.contains(&field) {
        return Err(ToolError::Invalid(format!(
            "no field {field:?}: the fields are {}",
            PROBE_FIELDS.join(", ")
        )));
    }
    let rec = open(path)?;
    let from = range.0.unwrap_or(rec.meta.start_tick).max(rec.meta.start_tick);
    let to = range.1.unwrap_or(rec.last_tick());
    if from > to || to > rec.last_tick() {
        return Err(ToolError::Invalid(format!(
            "--from {from} --to {to} is not a range of the recording ({}..={})",
            rec.meta.start_tick,
            rec.last_tick()
        )));
    }
    let boid_count = rec.meta.config.boid_count;
    if let Probed::Entity(id) = probed {
        let slots = rec.meta.config.client_slots_max;
        if id >= boid_count + slots {
            return Err(ToolError::Invalid(format!(
                "entity {id} does not exist: boids are 0..{boid_count}, avatars {boid_count}..{}",
                boid_count + slots
            )));
        }
        if id < boid_count && !PROBE_FIELDS[..4].contains(&field) {
            return Err(ToolError::Invalid(format!(
                "a boid has x_mm, y_mm, vx and vy, not {field:?}"
            )));
        }
    }
    let mut world = rec.world_at(from, 1).map_err(rec_err(path))?;
    let mut report = ProbeReport {
        file: path.display().to_string(),
        probed,
        field: field.to_string(),
        from,
        to,
        series: Vec::with_capacity((to - from + 1) as usize),
        condition,
        first: None,
    };
    let note = |world: &World, report: &mut ProbeReport| {
        let value = read(world, probed, field);
        let previous = report.series.last().and_then(|&(_, v)| v);
        if let (Some(c), Some(v), None) = (condition, value, report.first) {
            if c.holds(previous, v) {
                report.first = Some(world.tick());
            }
        }
        report.series.push((world.tick(), value));
    };
    note(&world, &mut report);
    for t in rec.ticks_from(from + 1) {
        let t = t.map_err(rec_err(path))?;
        if t.tick > to {
            break;
        }
        world.step(&t.inputs);
        note(&world, &mut report);
        progress(t.tick - from, to - from);
    }
    Ok(report)
}

/// `field` of `probed` in `world` now (None: absent).
fn read(world: &World, probed: Probed, field: &str) -> Option<i64> {
    let boid_count = world.config().boid_count;
    let player = match probed {
        Probed::Entity(id) if id < boid_count => {
            let b = world.boid(id)?;
            return Some(match field {
                "x_mm" => b.x_mm.into(),
                "y_mm" => b.y_mm.into(),
                "vx" => b.vx.into(),
                _ => b.vy.into(),
            });
        }
        Probed::Entity(id) => world
            .players()
            .get((id - boid_count) as usize)
            .filter(|p| p.active && !p.spectator)?,
        Probed::Client(c) => world.players().iter().find(|p| p.active && p.client == c)?,
    };
    let acked = (player.acked_tick != u32::MAX).then_some(i64::from(player.acked_tick));
    Some(match field {
        "x_mm" => player.x_mm.into(),
        "y_mm" => player.y_mm.into(),
        "vx" => player.vx.into(),
        "vy" => player.vy.into(),
        "score" => player.score.into(),
        "last_seq" => player.last_seq.into(),
        "acked_tick" => acked?,
        "ack_lag" => i64::from(world.tick()) - acked?,
        "cast_ready_tick" => player.cast_ready_tick.into(),
        "throttle" => player.throttle.into(),
        "dir_x" => player.dir_x.into(),
        _ => player.dir_y.into(),
    })
}
