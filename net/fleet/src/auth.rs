//! Who may do what. Every call but `/healthz`, `/metrics` and the world servers' internal
//! routes (their own tokens guard those) carries `Authorization: Bearer TOKEN`, and the
//! token's role decides:
//!
//! | role | may |
//! |---|---|
//! | admin | everything: create, delete, stop, list, show, nodes, discovery, join |
//! | reader | list, show, nodes, discovery |
//! | player | join |
//!
//! Without tokens anyone who reached the port could delete every recording of a world with
//! a player connected. Each role's token comes from an environment variable, or the first
//! line of a file (never the command line). The admin and player tokens default to files in
//! the data folder, made on first start with 256 random bits and mode 0600; the reader
//! role exists only when given one. `--open-joins` lets joins in without a token instead,
//! rate-limited per client address, when the operator chooses it.
//!
//! Tokens are kept only as hashes: comparing hashes (`blake3::Hash` equality is
//! constant-time) tells nothing about how close a guess came.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::{io_err, FleetError};
use crate::options::TokenSources;

/// The file the admin token is kept in when no `--admin-token-file` is given.
pub const ADMIN_TOKEN_FILE_NAME: &str = "admin-token";
/// The file the player token is kept in when no `--player-token-file` is given.
pub const PLAYER_TOKEN_FILE_NAME: &str = "player-token";
/// Environment variables that give a role's token (they win over the files).
pub const ADMIN_TOKEN_ENV: &str = "MIGRATORY_FLEET_ADMIN_TOKEN";
pub const READER_TOKEN_ENV: &str = "MIGRATORY_FLEET_READER_TOKEN";
pub const PLAYER_TOKEN_ENV: &str = "MIGRATORY_FLEET_PLAYER_TOKEN";
/// Shortest token accepted.
pub const TOKEN_CHARS_MIN: usize = 16;
/// Client addresses remembered by the open-join rate limit; past this many the oldest are
/// forgotten, so a flood of addresses cannot grow memory without bound.
pub const OPEN_JOIN_ADDRESSES_MAX: usize = 65_536;

/// What a role may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Player,
    Reader,
    Admin,
}

/// The roles' token hashes, and the open-join limiter.
#[derive(Debug)]
pub(crate) struct Auth {
    admin: blake3::Hash,
    reader: Option<blake3::Hash>,
    player: Option<blake3::Hash>,
    open_joins: Option<OpenJoins>,
}

/// Where each role's token came from, for the log.
#[derive(Debug)]
pub(crate) struct AuthReport {
    pub(crate) admin: String,
    pub(crate) reader: Option<String>,
    pub(crate) player: String,
}

impl Auth {
    pub(crate) fn load(sources: &TokenSources, data_dir: &Path) -> Result<(Auth, AuthReport), FleetError> {
        let (admin, admin_from) = load_token(
            ADMIN_TOKEN_ENV,
            sources.admin_file.as_deref(),
            Some(&data_dir.join(ADMIN_TOKEN_FILE_NAME)),
        )?
        .expect("a default file is given");
        let reader = load_token(READER_TOKEN_ENV, sources.reader_file.as_deref(), None)?;
        let player = match sources.open_joins_per_minute {
            // Open joins: a player token is still honoured when one is given.
            Some(_) => load_token(PLAYER_TOKEN_ENV, sources.player_file.as_deref(), None)?,
            None => load_token(
                PLAYER_TOKEN_ENV,
                sources.player_file.as_deref(),
                Some(&data_dir.join(PLAYER_TOKEN_FILE_NAME)),
            )?,
        };
        let report = AuthReport {
            admin: admin_from,
            reader: reader.as_ref().map(|(_, from)| from.clone()),
            player: match (&player, sources.open_joins_per_minute) {
                (_, Some(n)) => format!("open to anyone, {n} a minute per address"),
                (Some((_, from)), None) => from.clone(),
                (None, None) => "nobody".into(),
            },
        };
        Ok((
            Auth {
                admin,
                reader: reader.map(|(h, _)| h),
                player: player.map(|(h, _)| h),
                open_joins: sources.open_joins_per_minute.map(OpenJoins::new),
            },
            report,
        ))
    }

    /// The role of a presented token, if it has one.
    fn role_of(&self, presented: &str) -> Option<Role> {
        let hash = blake3::hash(presented.as_bytes());
        // Every comparison is made, whichever matches.
        let admin = hash == self.admin;
        let reader = self.reader.is_some_and(|h| h == hash);
        let player = self.player.is_some_and(|h| h == hash);
        if admin {
            Some(Role::Admin)
        } else if reader {
            Some(Role::Reader)
        } else if player {
            Some(Role::Player)
        } else {
            None
        }
    }
}

/// A token from the environment variable `env`, else the first line of `file`, else of
/// `default_file` (made when missing). None when none of them is given.
fn load_token(
    env: &str,
    file: Option<&Path>,
    default_file: Option<&Path>,
) -> Result<Option<(blake3::Hash, String)>, FleetError> {
    let (token, from) = if let Ok(t) = std::env::var(env) {
        (t, format!("${env}"))
    } else if let Some(path) = file.or(default_file) {
        if file.is_none() && !path.exists() {
            make_token_file(path)?;
        }
        let text =
            std::fs::read_to_string(path).map_err(io_err(format!("reading the token {}", path.display())))?;
        (
            text.lines().next().unwrap_or("").to_string(),
            path.display().to_string(),
        )
    } else {
        return Ok(None);
    };
    let token = token.trim();
    if token.len() < TOKEN_CHARS_MIN {
        return Err(FleetError::Invalid {
            reason: format!("the token in {from} must be at least {TOKEN_CHARS_MIN} characters"),
        });
    }
    Ok(Some((blake3::hash(token.as_bytes()), from)))
}

fn make_token_file(path: &Path) -> Result<(), FleetError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let token = crate::error::new_token()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("creating the token {}", path.display())))?;
    writeln!(f, "{token}").map_err(io_err(format!("writing the token {}", path.display())))
}

/// Per-address token buckets for joins without a token.
#[derive(Debug)]
struct OpenJoins {
    per_minute: u32,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl OpenJoins {
    fn new(per_minute: u32) -> OpenJoins {
        OpenJoins {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one join from `ip`'s bucket (a minute's worth, refilled continuously). An
    /// IPv6 client is counted by its /64 (one subscriber's prefix), so a host with a
    /// prefix of addresses does not get a bucket for each.
    fn admit(&self, ip: IpAddr, now: Instant) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => {
                let mut o = v6.octets();
                o[8..].fill(0);
                IpAddr::from(o)
            }
            v4 => v4,
        };
        let capacity = f64::from(self.per_minute);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= OPEN_JOIN_ADDRESSES_MAX && !buckets.contains_key(&ip) {
            // Forget the buckets that have refilled (a full one is the same as none), and
            // failing that the one used longest ago: a flood of addresses costs its
            // senders their own buckets, never a newcomer's join.
            buckets.retain(|_, (level, at)| {
                *level + now.duration_since(*at).as_secs_f64() * capacity / 60.0 < capacity
            });
            if buckets.len() >= OPEN_JOIN_ADDRESSES_MAX {
                let oldest = buckets.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k);
                if let Some(oldest) = oldest {
                    buckets.remove(&oldest);
                }
            }
        }
        let (level, at) = buckets.entry(ip).or_insert((capacity, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * capacity / 60.0).min(capacity);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            true
        } else {
            false
        }
    }
}

fn presented(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Lets a request through with a token whose role is at least `needed` (a player token
/// only for joins: the roles are not a ladder below reader).
async fn require(auth: &Auth, needed: Role, request: Request, next: Next) -> Response {
    let role = presented(&request).map(|t| auth.role_of(t));
    let allowed = |r: Role| match needed {
        Role::Player => matches!(r, Role::Player | Role::Admin),
        Role::Reader => matches!(r, Role::Reader | Role::Admin),
        Role::Admin => r == Role::Admin,
    };
    match role {
        Some(Some(r)) if allowed(r) => next.run(request).await,
        Some(Some(r)) => refuse(
            StatusCode::FORBIDDEN,
            &format!(
                "a {} token may not do this (it needs the {} role)",
                name(r),
                name(needed)
            ),
        ),
        Some(None) => refuse(
            StatusCode::UNAUTHORIZED,
            "the token given is none of this fleet's",
        ),
        None if needed == Role::Player && auth.open_joins.is_some() => {
            let ip = request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip());
            let open = auth.open_joins.as_ref().expect("checked just above");
            match ip {
                Some(ip) if open.admit(ip, Instant::now()) => next.run(request).await,
                _ => refuse(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!(
                        "joins without a token are limited to {} a minute per address",
                        open.per_minute
                    ),
                ),
            }
        }
        None => refuse(
            StatusCode::UNAUTHORIZED,
            &format!(
                "this call needs Authorization: Bearer TOKEN with the {} role",
                name(needed)
            ),
        ),
    }
}

fn name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::Reader => "reader",
        Role::Player => "player",
    }
}

pub(crate) async fn require_admin(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    require(&auth, Role::Admin, request, next).await
}

pub(crate) async fn require_reader(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    require(&auth, Role::Reader, request, next).await
}

pub(crate) async fn require_player(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    require(&auth, Role::Player, request, next).await
}

fn refuse(status: StatusCode, error: &str) -> Response {
    let mut r = (status, Json(json!({ "error": error }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn open_joins_allow_a_minutes_worth_then_refill() {
        let open = OpenJoins::new(3);
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        let t = Instant::now();
        assert!((0..3).all(|_| open.admit(ip, t)));
        assert!(!open.admit(ip, t));
        assert!(open.admit(other, t), "each address has its own bucket");
        // One join comes back every 20 s at 3 a minute.
        assert!(!open.admit(ip, t + Duration::from_secs(19)));
        assert!(open.admit(ip, t + Duration::from_secs(40)));
    }

    #[test]
    fn an_ipv6_prefix_shares_one_bucket() {
        let open = OpenJoins::new(1);
        let t = Instant::now();
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        let other: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert!(open.admit(a, t));
        assert!(!open.admit(b, t), "the same /64");
        assert!(open.admit(other, t));
    }
}
