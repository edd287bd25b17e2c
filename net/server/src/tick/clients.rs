//! The tick thread's roster: who is joining, joined, detached (dropped, waiting out the
//! reconnect grace) or refused, and the events that move a client between those states
//! (HELLO, a reclaim, the connection's end, the grace running out), with their WELCOMEs.
//!
//! A dropped player whose client holds a reconnect token stays in the world, steered to a
//! stop; its Leave is fed to the world only when `reconnect_grace_ticks` have passed
//! without a reclaim. A reclaim rebinds the same kernel client to the new connection, so
//! the kernel sees no join and no leave: only the idle steer, which is an input like any
//! other, recorded and replayed.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::send_queue::Sender;
use migratory_kernel::{Input, World};
use migratory_wire::protocol::{self, close_code, CameraMsg, InputMsg, ReconnectToken, Welcome};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Bytes;

use super::{TickLoop, WelcomeBase};
use crate::events::{ClientShared, Outbound, ReclaimRefused};
use crate::outlet::Outlet;
use crate::reclaim::Tokens;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JoinState {
    /// Join fed to this tick's inputs; resolved by its output.
    Joining,
    Joined,
    /// The connection dropped; the avatar waits for a reclaim until this tick, then leaves.
    Detached {
        leave_tick: u32,
    },
    /// The kernel refused the join; waiting for the connection to go.
    Rejected,
}

#[derive(Debug)]
pub(super) struct TickClient {
    pub state: JoinState,
    pub spectator: bool,
    pub terrain_cached: bool,
    /// WELCOME carries a reconnect token.
    pub want_token: bool,
    pub shared: Arc<ClientShared>,
    pub queue: Sender<Outbound>,
    /// No more messages are queued (eviction requested, or the queue is closed).
    pub closing: bool,
    /// After a reclaim by a client that kept no snapshots: hold snapshots back until the
    /// kernel sends a full one (its acked baseline aged out of the window).
    pub awaiting_full_snapshot: bool,
    /// Carried over a crash: what the client decoded may be ahead of the resumed world,
    /// so its first reclaim waits for a full snapshot whatever its HELLO says.
    pub baselines_unknown: bool,
    /// The hash of the token this connection's reclaim presented: it stays valid (beside
    /// the new one its WELCOME carries) until the client's first ACK shows it has the new.
    pub token_used: Option<crate::reclaim::TokenHash>,
    /// A new token went out in WELCOME and no ACK has confirmed it yet.
    pub token_unconfirmed: bool,
    /// The kernel's sequence numbers for this client: steer, camera and cast share one counter.
    pub kernel_seq: u32,
    /// The newest INPUT of the tick (its cast flag is `pending_cast`'s business).
    pub pending_steer: Option<InputMsg>,
    pub pending_camera: Option<CameraMsg>,
    pub pending_cast: bool,
    pub pending_ack: Option<u32>,
    pub overflow_streak: u32,
}

impl TickClient {
    pub fn new(shared: Arc<ClientShared>, queue: Sender<Outbound>) -> TickClient {
        TickClient {
            state: JoinState::Joining,
            spectator: false,
            terrain_cached: false,
            want_token: false,
            shared,
            queue,
            closing: false,
            awaiting_full_snapshot: false,
            baselines_unknown: false,
            token_used: None,
            token_unconfirmed: false,
            kernel_seq: 0,
            pending_steer: None,
            pending_camera: None,
            pending_cast: false,
            pending_ack: None,
            overflow_streak: 0,
        }
    }

    /// The next kernel sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.kernel_seq = self.kernel_seq.wrapping_add(1);
        self.kernel_seq
    }

    /// Keeps the newest acked tick for the next step; true when this is the first ACK
    /// since WELCOME carried a new token: an ACK names a snapshot, which only follows
    /// WELCOME, so the client has its new token and the one its reclaim used is dead.
    pub fn note_ack(&mut self, tick: u32) -> bool {
        self.pending_ack = Some(self.pending_ack.map_or(tick, |t| t.max(tick)));
        std::mem::take(&mut self.token_unconfirmed)
    }

    /// The steer that stops `client`'s avatar where it is (throttle 0).
    pub fn stop(&mut self, client: u32) -> Input {
        Input::Steer {
            client,
            seq: self.next_seq(),
            dir_x: 0,
            dir_y: 0,
            throttle: 0,
        }
    }
}

/// The players of an earlier session still in a resumed world, and the reconnect tokens
/// they hold: a holder waits out the grace for a reclaim; the rest leave in the first tick.
#[derive(Debug, Default)]
pub struct Carried {
    pub clients: Vec<u32>,
    pub tokens: Tokens,
    /// The earlier session ended cleanly (a stop or a move): its last tick is the resumed
    /// world's, so the snapshots its clients decoded can still be baselines. After a crash
    /// the world resumes behind what they saw, and every reclaim waits for a full one.
    pub ended_cleanly: bool,
}

/// The slot and avatar id of `client` in `world`, and whether it spectates.
fn seat(world: &World, client: u32) -> Option<(u32, u32, bool)> {
    let slot = world
        .players()
        .iter()
        .position(|p| p.active && p.client == client)? as u32;
    let p = &world.players()[slot as usize];
    Some((slot, world.avatar_id(slot), p.spectator))
}

impl TickLoop {
    /// Seats the players a resumed world still holds: token holders detached with a full
    /// grace, the rest as leavers of the first tick.
    pub(super) fn carry(&mut self, mut carried: Carried) {
        let tick = self.world.tick();
        carried.tokens.retain(|c| carried.clients.contains(&c));
        for client in carried.clients {
            let keep = carried.tokens.has(client) && self.settings.reconnect_grace_ticks > 0;
            let Some((slot, _, spectator)) = seat(&self.world, client).filter(|_| keep) else {
                carried.tokens.remove(client);
                self.leaving_clients.push(client);
                continue;
            };
            // A closed queue: nothing is sent until a reclaim brings a connection.
            let (queue, _) = crate::send_queue::channel(1);
            let shared = ClientShared::new(client, Outlet::closed());
            let mut c = TickClient::new(Arc::new(shared), queue);
            c.state = JoinState::Detached {
                leave_tick: tick.saturating_add(self.settings.reconnect_grace_ticks),
            };
            c.spectator = spectator;
            c.want_token = true;
            c.baselines_unknown = !carried.ended_cleanly;
            // The kernel remembers the last sequence it applied: continue above it.
            c.kernel_seq = self.world.players()[slot as usize].last_seq;
            if !spectator {
                self.carried_to_stop.push(client);
            }
            self.metrics.clients_detached.fetch_add(1, Relaxed);
            self.board.with_joined(|s| {
                s.insert(client);
            });
            self.clients.insert(client, c);
        }
        self.tokens = carried.tokens;
        self.tokens.take_changed();
    }

    /// A HELLO without a token: the join goes into this tick's inputs.
    pub(super) fn on_hello(&mut self, client: u32, name: String, spectator: bool, mut c: TickClient) {
        self.inputs.inputs.push(match spectator {
            false => Input::Join { client, name },
            true => Input::Spectate { client, name },
        });
        c.spectator = spectator;
        self.clients.insert(client, c);
    }

    /// A HELLO with a token: rebinds the token's avatar to the new connection, or refuses.
    pub(super) fn on_reclaim(
        &mut self,
        token: &ReconnectToken,
        terrain_cached: bool,
        keeps_baselines: bool,
        (queue, outlet): (Sender<Outbound>, Arc<Outlet>),
        reply: oneshot::Sender<Result<Arc<ClientShared>, ReclaimRefused>>,
    ) {
        let m = self.metrics.clone();
        let found = self.tokens.holder(token).filter(|(client, _)| {
            self.clients
                .get(client)
                .is_some_and(|c| matches!(c.state, JoinState::Joined | JoinState::Detached { .. }))
        });
        let Some((client, used)) = found else {
            m.reclaims_refused_total.fetch_add(1, Relaxed);
            let _ = reply.send(Err(ReclaimRefused));
            return;
        };
        let Some((slot, avatar_id, _)) = seat(&self.world, client) else {
            m.reclaims_refused_total.fetch_add(1, Relaxed);
            let _ = reply.send(Err(ReclaimRefused));
            return;
        };
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        match c.state {
            JoinState::Detached { .. } => {
                m.clients_detached.fetch_sub(1, Relaxed);
                m.clients.fetch_add(1, Relaxed);
            }
            // The old connection has not noticed its end yet (a half-open TCP): it goes.
            _ => c.shared.request_close(
                close_code::REPLACED,
                "another connection reclaimed this avatar with its reconnect token",
            ),
        }
        let shared = Arc::new(ClientShared::new(client, outlet));
        *c = TickClient {
            state: JoinState::Joined,
            spectator: c.spectator,
            terrain_cached,
            want_token: true,
            awaiting_full_snapshot: !keeps_baselines || c.baselines_unknown,
            kernel_seq: c.kernel_seq,
            token_used: Some(used),
            ..TickClient::new(shared.clone(), queue)
        };
        if reply.send(Ok(shared)).is_err() {
            // The connection went while asking: it will never send Gone for this shared
            // state, so the avatar is detached again here, still under the token the
            // client holds (no new one was issued).
            self.detach(client);
            return;
        }
        m.reclaims_taken_total.fetch_add(1, Relaxed);
        let join_tick = self.world.tick().wrapping_add(1);
        self.send_welcome(client, slot, avatar_id, join_tick);
        tracing::info!(client, slot, keeps_baselines, "avatar reclaimed");
    }

    /// A connection ended: a joined player with a token whose connection was lost is
    /// detached; anyone else leaves.
    pub(super) fn on_gone(&mut self, shared: &Arc<ClientShared>) {
        let client = shared.client;
        // A connection replaced by a reclaim is no longer this client's.
        if !self
            .clients
            .get(&client)
            .is_some_and(|c| Arc::ptr_eq(&c.shared, shared))
        {
            return;
        }
        // A client that closed the connection itself has left.
        if shared.closed_by_client.load(Relaxed) {
            self.tokens.remove(client);
        }
        self.detach(client);
    }

    fn detach(&mut self, client: u32) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let grace = self.settings.reconnect_grace_ticks;
        match c.state {
            JoinState::Joined if grace > 0 && self.tokens.has(client) => {
                c.state = JoinState::Detached {
                    leave_tick: self.world.tick().saturating_add(grace),
                };
                c.closing = true;
                c.pending_steer = None;
                c.pending_camera = None;
                c.pending_cast = false;
                c.pending_ack = None;
                if !c.spectator {
                    // Idle: the avatar stops where it is.
                    self.inputs.inputs.push(c.stop(client));
                }
                self.metrics.clients.fetch_sub(1, Relaxed);
                self.metrics.clients_detached.fetch_add(1, Relaxed);
            }
            JoinState::Joined => {
                self.clients.remove(&client);
                self.leave(client);
                self.metrics.clients.fetch_sub(1, Relaxed);
            }
            // Joined and gone within one tick: the join never happens.
            JoinState::Joining => {
                self.clients.remove(&client);
                self.inputs.inputs.retain(|i| {
                    !matches!(i, Input::Join { client: c2, .. } | Input::Spectate { client: c2, .. } if *c2 == client)
                });
            }
            JoinState::Rejected => {
                self.clients.remove(&client);
            }
            JoinState::Detached { .. } => {}
        }
    }

    /// Steers to a stop the avatars a resumed world carried (they drive on with their last
    /// steering otherwise), in the first tick, as a drop does.
    pub(super) fn stop_carried(&mut self) {
        for client in std::mem::take(&mut self.carried_to_stop) {
            let Some(c) = self.clients.get_mut(&client) else {
                continue;
            };
            self.inputs.inputs.push(c.stop(client));
        }
    }

    /// Feeds the Leave of every detached player whose grace ends with the coming tick.
    pub(super) fn expire_grace(&mut self) {
        let next = self.world.tick().wrapping_add(1);
        let expired: Vec<u32> = self
            .clients
            .iter()
            .filter(|(_, c)| matches!(c.state, JoinState::Detached { leave_tick } if leave_tick <= next))
            .map(|(&client, _)| client)
            .collect();
        for client in expired {
            self.clients.remove(&client);
            self.leave(client);
            self.metrics.clients_detached.fetch_sub(1, Relaxed);
            self.metrics.reconnect_grace_expired_total.fetch_add(1, Relaxed);
            tracing::info!(client, "reconnect grace ran out: the avatar leaves");
        }
    }

    /// `client`'s Leave into this tick's inputs; its token dies with it.
    fn leave(&mut self, client: u32) {
        self.inputs.inputs.push(Input::Leave { client });
        self.tokens.remove(client);
        self.board.with_joined(|s| {
            s.remove(&client);
        });
    }

    /// A WELCOME for each client the world joined this tick.
    pub(super) fn welcome_joined(&mut self) {
        let joined: Vec<_> = self
            .world
            .output()
            .joined
            .iter()
            .map(|j| (j.client, j.slot, j.avatar_id))
            .collect();
        let tick = self.world.tick();
        for (client, slot, avatar_id) in joined {
            let Some(c) = self.clients.get_mut(&client) else {
                continue;
            };
            c.state = JoinState::Joined;
            self.metrics.clients.fetch_add(1, Relaxed);
            self.board.with_joined(|s| {
                s.insert(client);
            });
            self.send_welcome(client, slot, avatar_id, tick);
        }
    }

    /// Queues `client`'s WELCOME, with a new reconnect token when it wants one.
    fn send_welcome(&mut self, client: u32, slot: u32, avatar_id: u32, join_tick: u32) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let reconnect_token = match c.want_token {
            false => None,
            true => match self.tokens.issue(client, c.token_used.take()) {
                Ok(t) => {
                    c.token_unconfirmed = true;
                    Some(t)
                }
                Err(e) => {
                    tracing::warn!(client, error = %e, "no reconnect token: the OS gave no random bytes");
                    None
                }
            },
        };
        let message = Bytes::from(protocol::encode_welcome(&welcome(
            &self.welcome,
            c.terrain_cached,
            client,
            slot,
            avatar_id,
            join_tick,
            reconnect_token,
        )));
        let welcome = Outbound::Welcome {
            message,
            terrain_cached: c.terrain_cached,
        };
        // Nothing is queued before the WELCOME, so it always fits an open queue.
        if c.queue.try_send(welcome).is_err() {
            c.closing = true;
        }
    }

    /// Closes every client whose join this tick's world did not confirm.
    pub(super) fn refuse_unjoined(&mut self) {
        let slots_full = self.world.output().rejected.slots_full > 0;
        let slots = self.world.config().client_slots_max;
        for (&client, c) in self.clients.iter_mut() {
            if c.state == JoinState::Joining {
                c.state = JoinState::Rejected;
                c.closing = true;
                self.metrics.joins_rejected_total.fetch_add(1, Relaxed);
                let reason = if slots_full {
                    format!("world full: all {slots} client slots are taken")
                } else {
                    "join refused by the world".to_string()
                };
                tracing::info!(client, %reason, "join refused");
                c.shared.request_close(close_code::TRY_AGAIN_LATER, reason);
            }
        }
    }
}

fn welcome(
    base: &WelcomeBase,
    terrain_cached: bool,
    client_id: u32,
    slot: u32,
    avatar_id: u32,
    join_tick: u32,
    reconnect_token: Option<ReconnectToken>,
) -> Welcome {
    Welcome {
        protocol_version: protocol::PROTOCOL_VERSION,
        client_id,
        avatar_id,
        slot,
        join_tick,
        tick_rate_hz: base.tick_rate_hz,
        snapshot_interval_ticks: base.snapshot_interval_ticks,
        world_size_mm: base.world_size_mm,
        terrain: if terrain_cached {
            base.terrain.cached()
        } else {
            base.terrain
        },
        world: base.world.clone(),
        reconnect_token,
    }
}
