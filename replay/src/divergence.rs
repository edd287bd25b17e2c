//! Explaining a divergence: which leaf of the state tree differs, then which entity and
//! which fields, with both values.

use migratory_kernel::{hex, ChunkId, ChunkKind, TreeLayout};
use migratory_kernel::{Boid, Player, World};
use serde::Serialize;

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "side", rename_all = "snake_case")]
pub enum Side {
    /// The roots stored in the recording.
    Recording,
    /// One replay run on `shards` shards.
    Run { shards: usize },
    /// The replay runs, which agreed with each other, at these shard counts.
    Replay { shard_counts: Vec<usize> },
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Side::Recording => write!(f, "recording"),
            Side::Run { shards } => write!(f, "shards={shards}"),
            Side::Replay { shard_counts } => {
                let runs: Vec<String> = shard_counts.iter().map(|n| format!("shards={n}")).collect();
                write!(f, "replay ({})", runs.join(", "))
            }
        }
    }
}

/// Which of a tick's two roots differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootKind {
    /// The root over the whole state.
    State,
    /// The root over the tick's client snapshots.
    Snapshots,
}

impl std::fmt::Display for RootKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RootKind::State => "state root",
            RootKind::Snapshots => "snapshots root",
        })
    }
}

/// What part of the state a differing leaf covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeafKind {
    Boids,
    Players,
    Streams,
}

impl std::fmt::Display for LeafKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LeafKind::Boids => "boids",
            LeafKind::Players => "players",
            LeafKind::Streams => "streams",
        })
    }
}

impl From<ChunkKind> for LeafKind {
    fn from(k: ChunkKind) -> LeafKind {
        match k {
            ChunkKind::Boids => LeafKind::Boids,
            ChunkKind::Players => LeafKind::Players,
            ChunkKind::Streams => LeafKind::Streams,
        }
    }
}

/// One field that differs between two worlds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldDiff {
    /// `boid 17`, `player slot 3 (client 9)` or `stream slot 3`.
    pub entity: String,
    /// The boid id or player slot.
    pub id: u32,
    pub field: String,
    pub a: String,
    pub b: String,
}

/// A leaf whose hashes differ, and what differs inside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChunkDiff {
    pub kind: LeafKind,
    pub index: u32,
    /// The items (boid ids or slots) the chunk covers: every `stride`-th id from the first
    /// up to the end (boid leaves hold one think group, so their stride is the think interval).
    pub items: (u32, u32),
    pub stride: u32,
    pub fields: Vec<FieldDiff>,
}

/// Most field differences reported per chunk.
const FIELDS_PER_CHUNK_MAX: usize = 16;

fn field(entity: &str, id: u32, name: &str, a: impl ToString, b: impl ToString, out: &mut Vec<FieldDiff>) {
    let (a, b) = (a.to_string(), b.to_string());
    if a != b && out.len() < FIELDS_PER_CHUNK_MAX {
        out.push(FieldDiff {
            entity: entity.to_string(),
            id,
            field: name.to_string(),
            a,
            b,
        });
    }
}

/// The fields of boid `n` that differ between `x` and `y`, onto `out`.
pub(crate) fn boid_fields(n: u32, x: &Boid, y: &Boid, out: &mut Vec<FieldDiff>) {
    let e = format!("boid {n}");
    field(&e, n, "x_mm", x.x_mm, y.x_mm, out);
    field(&e, n, "y_mm", x.y_mm, y.y_mm, out);
    field(&e, n, "vx", x.vx, y.vx, out);
    field(&e, n, "vy", x.vy, y.vy, out);
}

/// The fields of the player in slot `s` that differ between `p` and `q`, onto `out`.
pub(crate) fn player_fields(s: u32, p: &Player, q: &Player, out: &mut Vec<FieldDiff>) {
    let e = format!("player slot {s} (client {})", p.client);
    field(&e, s, "active", p.active, q.active, out);
    field(&e, s, "spectator", p.spectator, q.spectator, out);
    field(&e, s, "client", p.client, q.client, out);
    field(&e, s, "name", p.name(), q.name(), out);
    field(&e, s, "x_mm", p.x_mm, q.x_mm, out);
    field(&e, s, "y_mm", p.y_mm, q.y_mm, out);
    field(&e, s, "vx", p.vx, q.vx, out);
    field(&e, s, "vy", p.vy, q.vy, out);
    field(
        &e,
        s,
        "dir",
        format!("{:?}", (p.dir_x, p.dir_y)),
        format!("{:?}", (q.dir_x, q.dir_y)),
        out,
    );
    field(&e, s, "throttle", p.throttle, q.throttle, out);
    field(&e, s, "score", p.score, q.score, out);
    field(&e, s, "last_seq", p.last_seq, q.last_seq, out);
    field(&e, s, "acked_tick", p.acked_tick, q.acked_tick, out);
    field(
        &e,
        s,
        "cast_ready_tick",
        p.cast_ready_tick,
        q.cast_ready_tick,
        out,
    );
}

/// Compares two worlds of the same config at the same tick, leaf by leaf.
pub fn compare(a: &World, b: &World) -> Vec<ChunkDiff> {
    let layout = TreeLayout::of(a.config());
    let mut diffs = Vec::new();
    for (i, (ha, hb)) in a.chunk_hashes().iter().zip(b.chunk_hashes()).enumerate() {
        if ha == hb {
            continue;
        }
        let id: ChunkId = layout.chunk(i);
        let range = layout.items(id);
        let mut fields = Vec::new();
        match id.kind {
            ChunkKind::Boids => {
                let (boids_a, boids_b) = (a.boids(), b.boids());
                for n in range.iter() {
                    boid_fields(n, &boids_a[n as usize], &boids_b[n as usize], &mut fields);
                }
            }
            ChunkKind::Players => {
                for s in range.iter() {
                    player_fields(s, &a.players()[s as usize], &b.players()[s as usize], &mut fields);
                }
            }
            ChunkKind::Streams => {
                for s in range.iter() {
                    let (p, q) = (a.stream_summary(s), b.stream_summary(s));
                    if p == q {
                        continue;
                    }
                    let e = format!("stream slot {s}");
                    match (p, q) {
                        (Some(p), Some(q)) => {
                            field(&e, s, "tokens_bytes", p.tokens_bytes, q.tokens_bytes, &mut fields);
                            field(
                                &e,
                                s,
                                "remembered_ticks",
                                format!("{:?}", p.remembered_ticks),
                                format!("{:?}", q.remembered_ticks),
                                &mut fields,
                            );
                            if p.interest != q.interest {
                                let at = p
                                    .interest
                                    .iter()
                                    .zip(&q.interest)
                                    .position(|(x, y)| x != y)
                                    .unwrap_or(p.interest.len().min(q.interest.len()));
                                field(
                                    &e,
                                    s,
                                    &format!("interest[{at}] (id, priority)"),
                                    format!("{:?}", p.interest.get(at)),
                                    format!("{:?}", q.interest.get(at)),
                                    &mut fields,
                                );
                            }
                            field(
                                &e,
                                s,
                                "remembered views",
                                hex(&p.digest),
                                hex(&q.digest),
                                &mut fields,
                            );
                        }
                        (p, q) => field(&e, s, "joined", p.is_some(), q.is_some(), &mut fields),
                    }
                }
            }
        }
        diffs.push(ChunkDiff {
            kind: id.kind.into(),
            index: id.index,
            items: (range.first, range.end),
            stride: range.stride,
            fields,
        });
    }
    diffs
}
