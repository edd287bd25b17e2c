//! What `migratory-replay view` works out about a whole recording in the background, while
//! the page is already usable: the seek index's checkpoints, the timeline's markers (joins, leaves, casts, catches, and
//! per client the snapshots it never acknowledged), and with `--compare`, the first tick
//! at which this recording and another one (or a replay at another shard count) diverge,
//! with the entities whose fields differ.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::divergence::{ChunkDiff, LeafKind};
use crate::tools::{diff, verify};
use crate::{Recording, RecordingError};
use migratory_kernel::Input;
use serde_json::{json, Value};

use super::seek::SeekIndex;
use migratory_view::marker;

/// Markers found so far. `markers` rows are `[tick, kind, client, n, entity]`: `entity`
/// is the client's avatar id (the page selects it when the marker is clicked; a
/// spectator's slot has one too, with nothing drawn).
#[derive(Debug, Default)]
pub struct Markers {
    pub complete: bool,
    pub scanned_tick: u32,
    pub error: Option<String>,
    pub markers: Vec<[u32; 5]>,
    /// Per client: name, spectator, first and last tick seen, unacknowledged snapshots.
    pub clients: BTreeMap<u32, ClientLine>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientLine {
    pub name: String,
    pub spectator: bool,
    pub first_tick: u32,
    pub last_tick: u32,
    pub snapshots: u32,
    pub unacked: u32,
}

impl Markers {
    /// The JSON of `/replay/markers?from=N`: the markers from index `from` on (a page polls
    /// while the scan runs and asks only for what it has not got), with the total.
    pub fn to_json(&self, from: usize) -> Value {
        json!({
            "complete": self.complete,
            "scanned_tick": self.scanned_tick,
            "error": self.error,
            "total": self.markers.len(),
            "from": from.min(self.markers.len()),
            "markers": &self.markers[from.min(self.markers.len())..],
            "clients": self.clients.iter().map(|(c, l)| {
                let mut v = serde_json::to_value(l).unwrap_or_default();
                v["client"] = json!(c);
                v
            }).collect::<Vec<_>>(),
        })
    }
}

/// Steps the whole recording once (on its own thread and its own reader), publishing
/// markers as it goes.
pub fn scan_markers(path: PathBuf, out: Arc<Mutex<Markers>>, index: Arc<SeekIndex>) {
    let publish = |f: &mut dyn FnMut(&mut Markers)| {
        if let Ok(mut m) = out.lock() {
            f(&mut m);
        }
    };
    if let Err(e) = scan(&path, &out, &index) {
        let e = e.to_string();
        publish(&mut |m| m.error = Some(e.clone()));
    }
    publish(&mut |m| m.complete = true);
}

fn scan(path: &Path, published: &Mutex<Markers>, index: &SeekIndex) -> Result<(), RecordingError> {
    let rec = Recording::open(path)?;
    let mut world = rec.start_world(1)?;
    // Per client: snapshot ticks sent and not yet acknowledged (oldest first).
    let mut pending: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut found: Vec<[u32; 5]> = Vec::new();
    // Per client in the world: its avatar id (its slot's), for markers after it left.
    let mut avatar_of: BTreeMap<u32, u32> = BTreeMap::new();
    let mut lines: BTreeMap<u32, ClientLine> = BTreeMap::new();
    let mut casters: Vec<(u32, u32, u32, u32)> = Vec::new(); // (client, slot, score, cast_ready_tick)
    for t in rec.ticks_from(rec.first_tick()) {
        let t = t?;
        casters.clear();
        for i in &t.inputs.inputs {
            match *i {
                Input::Cast { client, .. } => {
                    if let Some(slot) = world.slot_of(client) {
                        let p = world.players()[slot as usize];
                        casters.push((client, slot, p.score, p.cast_ready_tick));
                    }
                }
                Input::Ack { client, tick } => {
                    if let Some(sent) = pending.get_mut(&client) {
                        let older = sent.iter().take_while(|&&s| s < tick).count();
                        for &s in &sent[..older] {
                            let avatar = avatar_of.get(&client).copied().unwrap_or(u32::MAX);
                            found.push([s, marker::UNACKED, client, 0, avatar]);
                            if let Some(l) = lines.get_mut(&client) {
                                l.unacked += 1;
                            }
                        }
                        let through = sent.iter().take_while(|&&s| s <= tick).count();
                        sent.drain(..through);
                    }
                }
                _ => {}
            }
        }
        world.step(&t.inputs);
        // The scan steps every tick anyway: it fills the seek index as it goes.
        index.offer(&world);
        let out = world.output();
        let tick = out.tick;
        // Lines first, so a snapshot in the join tick itself is counted.
        for j in &out.joined {
            let kind = if j.spectator {
                marker::SPECTATE
            } else {
                marker::JOIN
            };
            let avatar = world.avatar_id(j.slot);
            avatar_of.insert(j.client, avatar);
            found.push([tick, kind, j.client, 0, avatar]);
            let p = world.players()[j.slot as usize];
            lines.entry(j.client).or_insert(ClientLine {
                name: p.name().to_string(),
                spectator: j.spectator,
                first_tick: tick,
                last_tick: tick,
                snapshots: 0,
                unacked: 0,
            });
        }
        for &c in &out.left {
            let avatar = avatar_of.remove(&c).unwrap_or(u32::MAX);
            found.push([tick, marker::LEAVE, c, 0, avatar]);
            pending.remove(&c);
        }
        for s in out.snapshots() {
            let sent = pending.entry(s.client).or_default();
            // A client that never acks would grow this without bound: keep the newest 64.
            if sent.len() >= 64 {
                sent.remove(0);
            }
            sent.push(tick);
            if let Some(l) = lines.get_mut(&s.client) {
                l.snapshots += 1;
                l.last_tick = tick;
            }
        }
        for &(client, slot, score, ready) in &casters {
            let p = world.players()[slot as usize];
            // A caster that left in the same tick no longer holds its slot.
            if !p.active || p.client != client {
                continue;
            }
            if p.cast_ready_tick != ready {
                found.push([tick, marker::CAST, client, 0, world.avatar_id(slot)]);
            }
            if p.score > score {
                found.push([
                    tick,
                    marker::CATCH,
                    client,
                    p.score - score,
                    world.avatar_id(slot),
                ]);
            }
        }
        // Publish every 512 ticks (a fraction of a second of work), not every tick.
        if tick % 512 == 0 {
            flush(published, tick, &mut found, &lines);
        }
    }
    flush(published, rec.last_tick(), &mut found, &lines);
    Ok(())
}

fn flush(out: &Mutex<Markers>, tick: u32, found: &mut Vec<[u32; 5]>, lines: &BTreeMap<u32, ClientLine>) {
    if let Ok(mut m) = out.lock() {
        m.scanned_tick = tick;
        m.markers.append(found);
        m.clients.clone_from(lines);
    }
}

/// What to compare the recording against.
#[derive(Debug, Clone)]
pub enum Compare {
    /// Another recording of the same world.
    Recording(PathBuf),
    /// A replay of this recording on this many shards (and on one).
    Shards(usize),
}

/// Finds the first divergence against `against`: JSON for `/replay/divergence`.
pub fn find_divergence(path: &Path, against: &Compare, boid_count: u32) -> Value {
    let entities = |chunks: &[ChunkDiff]| -> Vec<Value> {
        chunks
            .iter()
            .flat_map(|c| c.fields.iter().map(move |f| (c.kind, f)))
            .map(|(kind, f)| {
                let id = match kind {
                    LeafKind::Boids => f.id,
                    LeafKind::Players | LeafKind::Streams => boid_count + f.id,
                };
                json!({ "id": id, "entity": f.entity, "field": f.field, "a": f.a, "b": f.b })
            })
            .collect()
    };
    match against {
        Compare::Recording(other) => match diff(path, other) {
            Err(e) => json!({ "status": "error", "error": e.to_string() }),
            Ok(r) if r.config_differs => json!({
                "status": "error",
                "error": format!("{} is a recording of another world config", other.display()),
            }),
            Ok(r) => match r.first_divergent_tick {
                None => {
                    json!({ "status": "none", "against": other.display().to_string(), "ticks": r.common_ticks, "compared": r.common_ticks })
                }
                Some(tick) => json!({
                    "status": "found",
                    "against": other.display().to_string(),
                    "compared": r.common_ticks,
                    "tick": tick,
                    "explained_at_tick": tick,
                    "root": r.root,
                    "inputs_differ": r.inputs_differ,
                    "entities": entities(&r.chunks),
                }),
            },
        },
        Compare::Shards(n) => match verify(path, &[1, *n], None, &mut |_, _| {}) {
            Err(e) => json!({ "status": "error", "error": e.to_string() }),
            Ok(r) => match r.divergence {
                None => {
                    json!({ "status": "none", "against": format!("replay at 1 and {n} shards"), "ticks": r.ticks })
                }
                Some(d) => json!({
                    "status": "found",
                    "against": format!("{} vs {}", d.a, d.b),
                    "tick": d.tick,
                    "explained_at_tick": d.explained_at_tick.unwrap_or(d.tick),
                    "root": d.root,
                    "entities": entities(&d.chunks),
                }),
            },
        },
    }
}

/// The divergence answer while the search runs.
pub fn pending() -> Value {
    json!({ "status": "pending" })
}

/// The answer when nothing is compared.
pub fn not_asked() -> Value {
    json!({ "status": "off" })
}
