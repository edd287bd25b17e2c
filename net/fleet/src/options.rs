//! How the fleet runs: `FleetOptions`, and where the roles' tokens come from.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::validate_world_id;
use crate::limits::WorldLimits;

/// How the fleet runs.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub listen: SocketAddr,
    /// Where this node's world servers reach its internal routes (their content, their
    /// recordings' shipments): loopback, since they run on this machine.
    pub internal_listen: SocketAddr,
    /// Worlds' recordings, logs and (by default) the SQLite store live here.
    pub data_dir: PathBuf,
    /// `postgres://...` (or `sqlite://...`); None: SQLite in `data_dir`.
    pub database_url: Option<String>,
    /// The `migratory-server` binary to run for each world.
    pub server_bin: PathBuf,
    /// Shards each world server steps on.
    pub shards: u32,
    /// A world with no players for this long is stopped.
    pub idle_timeout: Duration,
    /// A world server that has not reported ready within this time is killed.
    pub ready_timeout: Duration,
    /// A world server that has not exited this long after SIGTERM is killed.
    pub stop_timeout: Duration,
    /// How often player counts are read from the world servers.
    pub poll_interval: Duration,
    /// What one fleet accepts to run.
    pub limits: WorldLimits,
    /// Where the roles' tokens come from (`auth`).
    pub tokens: TokenSources,
    /// A world server whose `/status` goes unanswered this many polls in a row is killed.
    pub health_failed_polls_max: u32,
    /// This node's name in the store (unique among the nodes sharing it).
    pub node_id: String,
    /// The host clients reach this node's world servers at: the host of every `ws_url`
    /// this node hands out.
    pub advertise_host: String,
    /// The address world servers listen on (port: any free one).
    pub world_bind: IpAddr,
    /// The address the replay viewers of worlds' histories listen on (`POST
    /// /api/worlds/{id}/view`; port: any free one). Loopback by default: a viewer has no
    /// login of its own, and an operator reaches it on the node or through a tunnel.
    pub history_view_bind: IpAddr,
    /// A node that has not renewed its lease for this long is presumed dead, and its
    /// worlds are taken over by the next join on another node.
    pub lease: Duration,
    /// With a shared store, how often world servers ship their recordings to it.
    pub ship_interval: Duration,
    /// Allocate world servers from an Agones Fleet instead of forking them (PostgreSQL only).
    pub agones: Option<crate::agones::AgonesOptions>,
}

/// Longest `--lease-seconds`: a dead node's worlds wait this long for a takeover.
pub const LEASE_SECONDS_MAX: f64 = 60.0;

impl FleetOptions {
    /// Defaults for `data_dir`, with the server binary next to the running one.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> FleetOptions {
        let server_bin = std::env::current_exe()
            .map(|p| p.with_file_name("migratory-server"))
            .unwrap_or_else(|_| PathBuf::from("migratory-server"));
        FleetOptions {
            listen,
            internal_listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            data_dir,
            database_url: None,
            server_bin,
            shards: 1,
            idle_timeout: Duration::from_secs(300),
            ready_timeout: Duration::from_secs(30),
            stop_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            limits: WorldLimits::default(),
            tokens: TokenSources::default(),
            health_failed_polls_max: 3,
            node_id: default_node_id(),
            advertise_host: "127.0.0.1".into(),
            world_bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            history_view_bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            lease: Duration::from_secs(5),
            ship_interval: Duration::from_millis(250),
            agones: None,
        }
    }
}

/// The machine's host name (a node id unique per machine) with dots as dashes
/// (`eu-1.example.net` is `eu-1-example-net`), or `node` without a usable one.
fn default_node_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| node_id_of_host(h.trim()))
        .filter(|h| validate_world_id(h).is_ok())
        .unwrap_or_else(|| "node".into())
}

fn node_id_of_host(host: &str) -> String {
    host.to_ascii_lowercase().replace('.', "-")
}

#[cfg(test)]
mod tests {
    #[test]
    fn qualified_host_names_make_valid_node_ids() {
        let id = super::node_id_of_host("EU-1.Example.net");
        assert_eq!(id, "eu-1-example-net");
        assert!(crate::error::validate_world_id(&id).is_ok());
    }
}

/// Where each role's token is read from.
#[derive(Clone, Debug, Default)]
pub struct TokenSources {
    pub admin_file: Option<PathBuf>,
    pub reader_file: Option<PathBuf>,
    pub player_file: Option<PathBuf>,
    /// Joins without a token, at most this many a minute from one address.
    pub open_joins_per_minute: Option<u32>,
}
