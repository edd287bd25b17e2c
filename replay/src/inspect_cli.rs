//! The `inspect` and `probe` commands of the `migratory-replay` binary (not part of the
//! library): a recording's summary, the state at one tick, one entity field by field, and
//! one field over time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use migratory_replay::tools::{self, Condition, EntityReport, InspectReport, Probed, SummaryReport};

use crate::{print_json, progress};

pub(crate) fn inspect(
    json: bool,
    rec: &Path,
    tick: Option<u32>,
    entity: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let Some(tick) = tick else {
        let r = tools::summary(rec, &mut progress())?;
        if json {
            print_json(&r);
        } else {
            summary_text(&r);
        }
        return Ok(ExitCode::SUCCESS);
    };
    let r = tools::inspect(rec, tick, entity)?;
    if json {
        print_json(&r);
    } else {
        tick_text(&r);
    }
    Ok(ExitCode::SUCCESS)
}

fn summary_text(r: &SummaryReport) {
    out!("{}: {} bytes, format {}", r.file, r.bytes, r.format_version);
    out!(
        "rules {}{}, written by migratory {}{}",
        r.rules_version,
        if r.rules_are_this_builds {
            " (this build's)"
        } else {
            " (not this build's: replays will differ; see rules-diff and rerecord)"
        },
        r.crate_version,
        r.git_commit
            .as_deref()
            .map_or(String::new(), |c| format!(" ({c})"))
    );
    out!(
        "world: config {}, {} boids, {} client slots, {} Hz",
        r.config_hash,
        r.boids,
        r.client_slots,
        r.tick_rate_hz
    );
    out!(
        "ticks {}..={} ({} ticks, {:.1} s) from {}",
        r.first_tick,
        r.last_tick,
        r.ticks,
        r.duration_s,
        if r.start_tick == 0 {
            "the world as its config builds it".to_string()
        } else {
            format!("a checkpoint of tick {}", r.start_tick)
        }
    );
    match &r.torn_tail {
        None => out!("ended cleanly (end record and final checkpoint)"),
        Some(t) => out!(
            "no end record: {} bytes lost at byte {}{}",
            t.bytes_lost,
            t.offset,
            if t.damaged { " (damaged)" } else { "" }
        ),
    }
    let ticks: Vec<String> = r.checkpoints.iter().map(u32::to_string).collect();
    out!("{} blocks; checkpoints at ticks {}", r.blocks, ticks.join(", "));
    if r.bookmarks.is_empty() {
        out!("no bookmarks");
    }
    for b in &r.bookmarks {
        out!("bookmark at tick {} by client {}: {:?}", b.tick, b.client, b.note);
    }
    out!(
        "clients: {} joins, {} leaves, at most {} at once (tick {})",
        r.joins,
        r.leaves,
        r.clients_max.0,
        r.clients_max.1
    );
    let points: Vec<String> = r
        .clients_over_time
        .iter()
        .map(|(t, n)| format!("{t}:{n}"))
        .collect();
    out!("clients by tick: {}", points.join(" "));
    if !r.roots_match {
        out!("note: this build's replay does not reproduce every recorded root (run verify)");
    }
}

fn tick_text(r: &InspectReport) {
    out!("tick {} root {}", r.tick, r.state_root);
    out!("{} boids, {} players", r.boids, r.players.len());
    match &r.entity {
        Some(e) => entity_text(e),
        None => {
            for p in &r.players {
                if p.spectator {
                    out!(
                        "  slot {} client {} {:?} spectating, camera at ({}, {}) mm",
                        p.slot,
                        p.client,
                        p.name,
                        p.x_mm,
                        p.y_mm
                    );
                    continue;
                }
                out!(
                    "  slot {} client {} {:?} at ({}, {}) mm, score {}",
                    p.slot,
                    p.client,
                    p.name,
                    p.x_mm,
                    p.y_mm,
                    p.score
                );
            }
        }
    }
}

/// One field per line, `name value`.
fn entity_text(e: &EntityReport) {
    match e {
        EntityReport::Boid {
            id,
            x_mm,
            y_mm,
            vx,
            vy,
        } => {
            out!("kind boid");
            out!("id {id}");
            out!("x_mm {x_mm}");
            out!("y_mm {y_mm}");
            out!("vx {vx}");
            out!("vy {vy}");
        }
        EntityReport::Avatar {
            id,
            slot,
            client,
            name,
            x_mm,
            y_mm,
            vx,
            vy,
            dir_x,
            dir_y,
            throttle,
            last_seq,
            score,
            cast_ready_tick,
            cooldown_ticks_left,
            last_cast_tick,
            acked_tick,
            ack_lag_ticks,
            stream_tokens_bytes,
            remembered_ticks,
        } => {
            let opt = |v: &Option<u32>| v.map_or("none".to_string(), |t| t.to_string());
            out!("kind avatar");
            out!("id {id}");
            out!("slot {slot}");
            out!("client {client}");
            out!("name {name:?}");
            out!("x_mm {x_mm}");
            out!("y_mm {y_mm}");
            out!("vx {vx}");
            out!("vy {vy}");
            out!("dir_x {dir_x}");
            out!("dir_y {dir_y}");
            out!("throttle {throttle}");
            out!("last_seq {last_seq}");
            out!("score {score}");
            out!("cast_ready_tick {cast_ready_tick}");
            out!("cooldown_ticks_left {cooldown_ticks_left}");
            out!("last_cast_tick {}", opt(last_cast_tick));
            out!("acked_tick {}", opt(acked_tick));
            out!("ack_lag_ticks {}", opt(ack_lag_ticks));
            out!("stream_tokens_bytes {}", opt(stream_tokens_bytes));
            let ticks: Vec<String> = remembered_ticks.iter().map(u32::to_string).collect();
            out!("remembered_ticks {}", ticks.join(","));
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct ProbeArgs {
    rec: PathBuf,
    /// A boid id, or an avatar's (boid count + slot).
    #[arg(long, conflicts_with = "client", required_unless_present = "client")]
    entity: Option<u32>,
    /// A client id, wherever its slot is.
    #[arg(long)]
    client: Option<u32>,
    /// x_mm, y_mm, vx, vy (boids and avatars); score, last_seq, acked_tick, ack_lag,
    /// cast_ready_tick, throttle, dir_x, dir_y (avatars and clients).
    #[arg(long)]
    field: String,
    #[arg(long)]
    from: Option<u32>,
    #[arg(long)]
    to: Option<u32>,
    /// Print the first tick where the field `changes`, or compares with a number: '>N',
    /// '>=N', '<N', '<=N', '==N', '!=N'. Exit 1 when it never does.
    #[arg(long, value_name = "CONDITION")]
    first: Option<Condition>,
    /// `tick,value` rows with a header (ticks where it is absent are left out).
    #[arg(long)]
    csv: bool,
    /// Also draw the series into this PNG (a line over ticks, broken where absent).
    #[cfg(feature = "plot")]
    #[arg(long, value_name = "OUT.png")]
    png: Option<std::path::PathBuf>,
}

/// Exit 0, or 1 when `--first`'s condition never held.
pub(crate) fn probe(json: bool, a: &ProbeArgs) -> anyhow::Result<ExitCode> {
    let probed = match (a.entity, a.client) {
        (Some(e), _) => Probed::Entity(e),
        (None, Some(c)) => Probed::Client(c),
        (None, None) => anyhow::bail!("give --entity ID or --client ID"),
    };
    let r = tools::probe(&a.rec, probed, &a.field, (a.from, a.to), a.first, &mut progress())?;
    #[cfg(feature = "plot")]
    if let Some(out) = &a.png {
        let who = match probed {
            Probed::Entity(id) => format!("entity {id}"),
            Probed::Client(c) => format!("client {c}"),
        };
        let title = format!(
            "{who} {} over ticks {}..={} ({})",
            r.field,
            r.from,
            r.to,
            a.rec.display()
        );
        migratory_replay::plot::plot_series(out, &title, &r.field, &r.series)?;
        eprintln!("wrote {}", out.display());
    }
    if json {
        print_json(&r);
    } else if a.csv {
        out!("tick,{}", r.field);
        for (t, v) in &r.series {
            if let Some(v) = v {
                out!("{t},{v}");
            }
        }
    } else if a.first.is_none() {
        for (t, v) in &r.series {
            out!("{t} {}", v.map_or("-".to_string(), |v| v.to_string()));
        }
    }
    if !json && !a.csv {
        if let Some(c) = &a.first {
            match r.first {
                Some(t) => out!("{} {c} first at tick {t}", r.field),
                None => out!("{} {c} at no tick of {}..={}", r.field, r.from, r.to),
            }
        }
    }
    Ok(if a.first.is_some() && r.first.is_none() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
