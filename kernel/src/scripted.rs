//! Seeded scripted players: a pure function from (seed, tick, what the world sent) to the
//! next tick's inputs, for tests, benchmarks and recordings made without a network.
//!
//! Each bot joins at a staggered tick, wanders or heads for a hunting field and casts
//! there, acks the snapshots it "received" after its own lag, drops some snapshots, and with
//! churn enabled leaves and comes back. A share of the bots spectate instead: they pan
//! their camera a little every half second and now and then jump across the world.

use crate::input::{Input, TickInputs};
use crate::output::TickOutput;
use crate::rng;
use crate::world::World;

/// Randomness streams of the script, apart from the kernel's.
const STREAM_BOT: u32 = 0x100;
/// Most acks a bot keeps waiting (snapshots in flight).
const PENDING_ACKS_MAX: usize = 64;

/// How the bots behave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptConfig {
    pub seed: u64,
    pub clients: u32,
    /// Bots join spread over this many ticks from tick 1.
    pub join_spread_ticks: u32,
    /// Chance per second, in per mille, that a joined bot leaves (it rejoins a few seconds later).
    pub churn_per_mille_per_s: u32,
    /// Each bot acks after a lag drawn from 0..=this many ticks.
    pub ack_lag_ticks_max: u32,
    /// Chance, in per mille, that a snapshot is lost on the way (never acked).
    pub drop_per_mille: u32,
    /// Share of bots, in per mille, that hunt (go to a field and cast).
    pub hunter_per_mille: u32,
    /// Share of bots, in per mille, that spectate (camera only, no avatar).
    pub spectator_per_mille: u32,
    /// Ticks per second, for turning per-second rates into per-tick ones.
    pub tick_rate_hz: u32,
}

impl Default for ScriptConfig {
    fn default() -> Self {
        ScriptConfig {
            seed: 1,
            clients: 8,
            join_spread_ticks: 60,
            churn_per_mille_per_s: 0,
            ack_lag_ticks_max: 12,
            drop_per_mille: 20,
            hunter_per_mille: 500,
            spectator_per_mille: 0,
            tick_rate_hz: 60,
        }
    }
}

#[derive(Clone, Debug)]
struct Bot {
    client: u32,
    joined: bool,
    join_tick: u32,
    seq: u32,
    lag_ticks: u32,
    hunter: bool,
    spectator: bool,
    /// (due tick, acked tick), oldest first.
    pending: Vec<(u32, u32)>,
}

/// The bots and their memory.
#[derive(Clone, Debug)]
pub struct Script {
    config: ScriptConfig,
    bots: Vec<Bot>,
}

impl Script {
    /// Bots for client ids `1..=clients`.
    pub fn new(config: ScriptConfig) -> Script {
        let bots = (0..config.clients)
            .map(|i| {
                let bits = rng::draw(config.seed, 0, i, STREAM_BOT);
                Bot {
                    client: i + 1,
                    joined: false,
                    join_tick: 1 + rng::below(bits, config.join_spread_ticks.max(1)),
                    seq: 0,
                    lag_ticks: rng::below(bits.rotate_left(16), config.ack_lag_ticks_max + 1),
                    hunter: rng::below(bits.rotate_left(32), 1000) < config.hunter_per_mille,
                    // Drawn from bits of its own, so adding spectators changes no one's role.
                    spectator: rng::below(rng::draw(config.seed, 1, i, STREAM_BOT), 1000)
                        < config.spectator_per_mille,
                    pending: Vec::with_capacity(PENDING_ACKS_MAX),
                }
            })
            .collect();
        Script { config, bots }
    }

    /// Writes the inputs for tick `world.tick() + 1` into `out`, given the output of the
    /// last step (its snapshots are what the bots receive).
    pub fn next_inputs(&mut self, world: &World, last: &TickOutput, out: &mut TickInputs) {
        out.inputs.clear();
        let tick = world.tick() + 1;
        let cfg = &self.config;
        let per_tick_churn = cfg.churn_per_mille_per_s * 1000 / cfg.tick_rate_hz.max(1);
        for (i, bot) in self.bots.iter_mut().enumerate() {
            let bits = rng::draw(cfg.seed, tick, i as u32, STREAM_BOT);
            if !bot.joined {
                if tick >= bot.join_tick {
                    bot.joined = true;
                    bot.pending.clear();
                    let name = format!("bot-{}", bot.client);
                    out.inputs.push(match bot.spectator {
                        false => Input::Join {
                            client: bot.client,
                            name,
                        },
                        true => Input::Spectate {
                            client: bot.client,
                            name,
                        },
                    });
                }
                continue;
            }
            let Some(slot) = world.slot_of(bot.client) else {
                // The join was refused (no slot): try again later.
                bot.joined = false;
                bot.join_tick = tick + cfg.tick_rate_hz;
                continue;
            };
            // Frames: some are lost, the rest get acked after the bot's lag.
            if let Some(snapshot) = last.snapshot_for_slot(slot) {
                let lost = rng::below(bits, 1000) < cfg.drop_per_mille;
                if !lost && bot.pending.len() < PENDING_ACKS_MAX && snapshot.len() >= 5 {
                    let t = u32::from_le_bytes([snapshot[1], snapshot[2], snapshot[3], snapshot[4]]);
                    bot.pending.push((tick + bot.lag_ticks, t));
                }
            }
            let due = bot.pending.iter().take_while(|&&(d, _)| d <= tick).count();
            if due > 0 {
                let newest = bot.pending[due - 1].1;
                bot.pending.drain(..due);
                out.inputs.push(Input::Ack {
                    client: bot.client,
                    tick: newest,
                });
            }
            // A spectator's camera: a short pan every half second, a jump anywhere (often
            // out of the world, to be clamped) every fifth time.
            if bot.spectator && (tick + bot.client) % 30 == 0 {
                bot.seq += 1;
                let p = &world.players()[slot as usize];
                let size = world.config().world_size_mm;
                let (x_mm, y_mm) = if rng::below(bits.rotate_left(8), 5) == 0 {
                    let (mid, reach) = ((size / 2) as i32, size / 4 * 3);
                    (
                        mid + rng::symmetric(bits.rotate_left(16), reach),
                        mid + rng::symmetric(bits.rotate_left(24), reach),
                    )
                } else {
                    let step = world.config().view_radius_mm / 2;
                    (
                        p.x_mm + rng::symmetric(bits.rotate_left(16), step),
                        p.y_mm + rng::symmetric(bits.rotate_left(24), step),
                    )
                };
                out.inputs.push(Input::Camera {
                    client: bot.client,
                    seq: bot.seq,
                    x_mm,
                    y_mm,
                });
            }
            // Steering: every half second, a new heading; hunters head for a field.
            if !bot.spectator && (tick + bot.client) % 30 == 0 {
                bot.seq += 1;
                let p = &world.players()[slot as usize];
                let (dx, dy) = match (bot.hunter, world.zones().hunting_fields.first()) {
                    (true, Some(_)) => {
                        let fields = &world.zones().hunting_fields;
                        let f = fields[bot.client as usize % fields.len()];
                        let (dx, dy) = (f.x_mm - p.x_mm, f.y_mm - p.y_mm);
                        if f.contains(p.x_mm, p.y_mm) {
                            (
                                rng::symmetric(bits.rotate_left(8), 1000),
                                rng::symmetric(bits.rotate_left(24), 1000),
                            )
                        } else {
                            (dx.clamp(-30_000, 30_000), dy.clamp(-30_000, 30_000))
                        }
                    }
                    _ => (
                        rng::symmetric(bits.rotate_left(8), 1000),
                        rng::symmetric(bits.rotate_left(24), 1000),
                    ),
                };
                let (dx, dy) = if dx == 0 && dy == 0 { (1, 0) } else { (dx, dy) };
                out.inputs.push(Input::Steer {
                    client: bot.client,
                    seq: bot.seq,
                    dir_x: dx.clamp(-30_000, 30_000) as i16,
                    dir_y: dy.clamp(-30_000, 30_000) as i16,
                    throttle: 40 + rng::below(bits.rotate_left(40), 61) as u8,
                });
            }
            if bot.hunter && !bot.spectator && (tick + 7 * bot.client) % 45 == 0 {
                bot.seq += 1;
                out.inputs.push(Input::Cast {
                    client: bot.client,
                    seq: bot.seq,
                });
            }
            if per_tick_churn > 0 && rng::below(bits.rotate_left(48), 1_000_000) < per_tick_churn {
                out.inputs.push(Input::Leave { client: bot.client });
                bot.joined = false;
                bot.seq = 0;
                bot.join_tick = tick + cfg.tick_rate_hz * (1 + rng::below(bits.rotate_left(56), 4));
            }
        }
    }
}
