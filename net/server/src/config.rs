//! The server's configuration: TOML with embedded defaults, unknown keys rejected, every
//! value validated at startup with an error that names its key.
//!
//! Layout (see `net/server/config/default.toml` for every key with its default):
//! `[server]` (listen address, shards, timeouts), `[server.recording]`,
//! `[server.tick_loop]`, `[server.input_limits]`, `[server.terrain_wire]`,
//! `[server.client_backpressure]`, and `[world]` (+ `[world.flocking]`, `[world.player]`),
//! which maps one to one onto the kernel's `WorldConfig`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use migratory_kernel::{WorldConfig, SHARD_COUNT_MAX};
use serde::Deserialize;
use thiserror::Error;

use migratory_wire::terrain_wire::{TerrainConfigError, TerrainWireConfig};

/// The defaults, as a document: parsing it gives `ServerConfig::default()` (a test checks).
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/default.toml");

/// A configuration that cannot be used. Every variant names the file or the key.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("config key `{key}`: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub server: ServerSection,
    pub world: WorldConfig,
}

/// `[server]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// Address the one HTTP + WebSocket port binds to (port 0: an ephemeral port).
    pub listen: String,
    /// Shards (worker threads) the kernel steps on; 0 (the default) picks one per CPU the
    /// process may run on, at most `SHARDS_AUTO_MAX` (see `shard_count`). Output is
    /// identical for any count.
    pub shards: u32,
    /// Pin each shard's thread to its own CPU (the tick thread to the first). Without it a
    /// tick thread waking from its sleep can land on a worker's CPU and the two spin
    /// against each other for the whole tick. Has no effect with one shard.
    pub pin_shard_threads: bool,
    /// Threads of the async runtime that serves the connections (0: one per CPU).
    pub io_threads: u32,
    /// A connection that has not sent HELLO within this time is closed (1008).
    pub hello_timeout_seconds: f64,
    /// A player whose connection drops keeps its avatar (idle) this long, for a HELLO
    /// with its reconnect token to take it back; only then is its Leave fed to the world.
    /// 0: a drop is a Leave at once.
    pub reconnect_grace_seconds: f64,
    /// A connection whose HTTP request head (the WebSocket upgrade, or a GET) has not
    /// arrived within this time is closed.
    pub http_header_timeout_seconds: f64,
    /// Open TCP connections the server holds at most; more get a 503 and are closed.
    pub connections_max: u32,
    /// Open TCP connections one IP address may hold at most; more get a 503.
    pub connections_per_ip_max: u32,
    /// Loopback addresses are not held to `connections_per_ip_max`: load tools on this
    /// machine, and a reverse proxy on it (behind which every client has its address).
    pub connections_per_ip_exempt_loopback: bool,
    /// Largest client message accepted; a larger one closes the connection (1009).
    pub max_client_message_bytes: u32,
    /// On shutdown, how long to wait for clients to finish the close handshake.
    pub shutdown_timeout_seconds: f64,
    /// Outgoing messages longer than this go out as several WebSocket frames (one
    /// message to the client), so no connection's write buffer ever holds more. Every
    /// connection keeps a buffer of this size for good (the terrain fills it once), so the
    /// default is just above a snapshot's hard cap at the default downstream cap (1,600
    /// bytes): 2,048 against 4,096 kept 2.0 KB less heap a client with 1,000 bots, with no
    /// CPU seen for the doubled terrain frames (`net/bench/rss_per_client.sh`).
    pub ws_frame_max_bytes: u32,
    /// SO_SNDBUF for client connections (0: the OS default, autotuned). A bound makes a
    /// client that stops reading show up as backpressure sooner, and caps kernel memory.
    pub tcp_send_buffer_bytes: u32,
    pub recording: RecordingSection,
    pub tick_loop: TickLoopSection,
    pub input_limits: InputLimitsSection,
    pub terrain_wire: TerrainWireConfig,
    pub client_backpressure: BackpressureSection,
    pub agones: AgonesSection,
}

/// Most shards `shards = 0` picks. Measured with 1,000 bots on this project's 2-core
/// machine (net/bench/soak/README.md): 2 pinned shards against 1, loop p99 6.3-6.9 ms
/// against 8.3-8.8 (9.5-10.0 ms of CPU per tick against 9.3-9.7), and still 11.0-11.4
/// against 12.9-13.2 with a CPU-bound neighbour. More shards than that are unmeasured, and
/// each one spins a while after every job of a tick, so a larger machine opts in.
pub const SHARDS_AUTO_MAX: usize = 2;

impl ServerSection {
    /// The shard count `shards` stands for: itself, or for 0 one per CPU this process may
    /// run on (its affinity mask and CPU quota), at most `SHARDS_AUTO_MAX`. One CPU gets
    /// one shard: two pinned to one CPU would spin against each other.
    pub fn shard_count(&self) -> usize {
        match self.shards {
            0 => std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(SHARDS_AUTO_MAX),
            n => n as usize,
        }
    }
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: "127.0.0.1:7400".to_string(),
            shards: 0,
            pin_shard_threads: true,
            io_threads: 0,
            hello_timeout_seconds: 5.0,
            reconnect_grace_seconds: 30.0,
            http_header_timeout_seconds: 5.0,
            connections_max: 4_096,
            connections_per_ip_max: 64,
            connections_per_ip_exempt_loopback: true,
            max_client_message_bytes: 512,
            shutdown_timeout_seconds: 2.0,
            ws_frame_max_bytes: 2_048,
            tcp_send_buffer_bytes: 0,
            recording: RecordingSection::default(),
            tick_loop: TickLoopSection::default(),
            input_limits: InputLimitsSection::default(),
            terrain_wire: TerrainWireConfig::default(),
            client_backpressure: BackpressureSection::default(),
            agones: AgonesSection::default(),
        }
    }
}

/// `[server.agones]`: used only when the server runs under Agones (the environment has
/// `AGONES_SDK_HTTP_PORT`, which the Agones sidecar sets).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgonesSection {
    /// A `Health` call every this many seconds (within the GameServer's health period).
    pub health_period_seconds: f64,
    /// With no players for this long, the server calls `Shutdown` and stops (0: never).
    pub idle_shutdown_seconds: f64,
    /// How long calls are retried while the sidecar starts (`Ready` waits this long at most).
    pub sdk_retry_seconds: f64,
    /// A spare in a pool that a fleet allocates from: go Ready with no world, wait until
    /// the GameServer is Allocated, then serve the world its annotations name, read from
    /// the fleet they name (`net/README.md`, "A fleet that allocates from Agones").
    pub await_allocation: bool,
}

impl Default for AgonesSection {
    fn default() -> Self {
        AgonesSection {
            health_period_seconds: 2.0,
            idle_shutdown_seconds: 300.0,
            sdk_retry_seconds: 60.0,
            await_allocation: false,
        }
    }
}

/// `[server.recording]`: every session is recorded unless `enabled = false`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordingSection {
    pub enabled: bool,
    /// Folder for the `.mrec` files (created if missing); one timestamped file a session.
    pub dir: PathBuf,
    /// Ticks per input block. A block is written when complete, so a killed process
    /// loses at most this many ticks.
    pub block_ticks: u32,
    /// A full-state checkpoint every this many ticks (0: none).
    pub checkpoint_interval_ticks: u32,
    /// `fsync` after every this many blocks (0: leave it to the OS).
    pub fsync_every_blocks: u32,
}

impl Default for RecordingSection {
    fn default() -> Self {
        RecordingSection {
            enabled: true,
            dir: PathBuf::from("recordings"),
            block_ticks: 60,
            checkpoint_interval_ticks: 600,
            fsync_every_blocks: 0,
        }
    }
}

/// `[server.tick_loop]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TickLoopSection {
    /// When the loop falls behind, it runs at most this many ticks back to back to catch
    /// up; deadlines beyond that are skipped (not simulated) and counted.
    pub catch_up_ticks_max: u32,
}

impl Default for TickLoopSection {
    fn default() -> Self {
        TickLoopSection {
            catch_up_ticks_max: 4,
        }
    }
}

/// `[server.input_limits]`: a token bucket per client over every message it sends.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputLimitsSection {
    /// Sustained messages per second a client may send (INPUT, ACK and PING together).
    pub messages_per_second: f64,
    /// Bucket size: how many messages may arrive back to back.
    pub burst_messages: u32,
    /// More rate-limited (dropped) messages than this within one second closes the
    /// client with 1008.
    pub close_after_excess_per_second: u32,
}

impl Default for InputLimitsSection {
    fn default() -> Self {
        InputLimitsSection {
            messages_per_second: 200.0,
            burst_messages: 100,
            close_after_excess_per_second: 400,
        }
    }
}

/// `[server.client_backpressure]`: per-client send queue and slow-client eviction.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackpressureSection {
    /// Per-client queue depth: writes that may wait for the client's socket. A snapshot
    /// that does not fit is dropped and counted.
    pub send_queue_max_messages: u32,
    /// This many overflows in a row, with no successful send in between, evict the client.
    pub grace_overflow_events: u32,
    /// Close code sent to an evicted client (1013: try again later).
    pub eviction_close_code: u16,
    /// How long the close handshake may take before the transport is dropped.
    pub eviction_close_timeout_seconds: f64,
    /// Terrain is never dropped: a client that cannot take a terrain message within
    /// this time is evicted at once.
    pub terrain_enqueue_timeout_seconds: f64,
    /// Log dropped snapshots at WARN (true) or DEBUG (false).
    pub log_overflow_at_warn: bool,
}

impl Default for BackpressureSection {
    fn default() -> Self {
        BackpressureSection {
            send_queue_max_messages: 16,
            grace_overflow_events: 20,
            eviction_close_code: 1013,
            eviction_close_timeout_seconds: 1.0,
            terrain_enqueue_timeout_seconds: 2.0,
            log_overflow_at_warn: true,
        }
    }
}

impl BackpressureSection {
    pub fn eviction_close_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.eviction_close_timeout_seconds)
    }

    pub fn terrain_enqueue_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.terrain_enqueue_timeout_seconds)
    }
}

/// `[world]` is the kernel's `WorldConfig` itself (it deserializes with unknown keys
/// refused and missing ones defaulted); this validates it and names a bad key as
/// `world.<field>`.
fn validate_world(c: &WorldConfig) -> Result<(), ConfigError> {
    c.validate().map_err(|e| {
        use migratory_kernel::ConfigError as K;
        let field = match &e {
            K::OutOfRange { field, .. } | K::Inconsistent { field, .. } => *field,
        };
        invalid(&format!("world.{field}"), e.to_string())
    })
}

impl ServerConfig {
    /// Parses a TOML document over the defaults (keys it leaves out keep their defaults)
    /// and validates the result. `origin` names the document in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<ServerConfig, ConfigError> {
        let config: ServerConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ServerConfig::from_toml(&text, &path.display().to_string())
    }

    /// The listen address, parsed.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server.listen.parse().map_err(|e| {
            invalid(
                "server.listen",
                format!("`{}` is not an address: {e}", self.server.listen),
            )
        })
    }

    /// Checks every value; the first problem is returned, naming its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        self.listen_addr()?;
        range_u32("server.shards", s.shards, 0, SHARD_COUNT_MAX as u32)?;
        range_u32("server.io_threads", s.io_threads, 0, 256)?;
        seconds("server.hello_timeout_seconds", s.hello_timeout_seconds)?;
        if !(s.reconnect_grace_seconds.is_finite() && (0.0..=3600.0).contains(&s.reconnect_grace_seconds)) {
            return Err(invalid(
                "server.reconnect_grace_seconds",
                format!(
                    "must be a number of seconds from 0 to 3600, is {}",
                    s.reconnect_grace_seconds
                ),
            ));
        }
        seconds(
            "server.http_header_timeout_seconds",
            s.http_header_timeout_seconds,
        )?;
        range_u32("server.connections_max", s.connections_max, 1, 1 << 20)?;
        range_u32(
            "server.connections_per_ip_max",
            s.connections_per_ip_max,
            1,
            s.connections_max.max(1),
        )?;
        seconds("server.shutdown_timeout_seconds", s.shutdown_timeout_seconds)?;
        range_u32(
            "server.max_client_message_bytes",
            s.max_client_message_bytes,
            64,
            1 << 20,
        )?;
        range_u32("server.ws_frame_max_bytes", s.ws_frame_max_bytes, 1024, 16 << 20)?;
        if s.tcp_send_buffer_bytes != 0 {
            range_u32(
                "server.tcp_send_buffer_bytes",
                s.tcp_send_buffer_bytes,
                4096,
                1 << 30,
            )?;
        }
        let r = &s.recording;
        range_u32("server.recording.block_ticks", r.block_ticks, 1, 65_536)?;
        range_u32(
            "server.recording.checkpoint_interval_ticks",
            r.checkpoint_interval_ticks,
            0,
            u32::MAX,
        )?;
        if r.enabled && r.dir.as_os_str().is_empty() {
            return Err(invalid("server.recording.dir", "must not be empty"));
        }
        range_u32(
            "server.tick_loop.catch_up_ticks_max",
            s.tick_loop.catch_up_ticks_max,
            0,
            1000,
        )?;
        let l = &s.input_limits;
        if !(l.messages_per_second.is_finite()
            && l.messages_per_second >= 1.0
            && l.messages_per_second <= 1e6)
        {
            return Err(invalid(
                "server.input_limits.messages_per_second",
                format!("must be within 1..=1000000, is {}", l.messages_per_second),
            ));
        }
        range_u32(
            "server.input_limits.burst_messages",
            l.burst_messages,
            1,
            1_000_000,
        )?;
        range_u32(
            "server.input_limits.close_after_excess_per_second",
            l.close_after_excess_per_second,
            1,
            u32::MAX,
        )?;
        let b = &s.client_backpressure;
        range_u32(
            "server.client_backpressure.send_queue_max_messages",
            b.send_queue_max_messages,
            1,
            65_536,
        )?;
        range_u32(
            "server.client_backpressure.grace_overflow_events",
            b.grace_overflow_events,
            1,
            u32::MAX,
        )?;
        if !close_code_is_sendable(b.eviction_close_code) {
            return Err(invalid(
                "server.client_backpressure.eviction_close_code",
                format!(
                    "{} cannot be sent in a close frame (use 1000-1003, 1007-1014 or 3000-4999)",
                    b.eviction_close_code
                ),
            ));
        }
        seconds(
            "server.client_backpressure.eviction_close_timeout_seconds",
            b.eviction_close_timeout_seconds,
        )?;
        seconds(
            "server.client_backpressure.terrain_enqueue_timeout_seconds",
            b.terrain_enqueue_timeout_seconds,
        )?;
        let a = &s.agones;
        seconds("server.agones.health_period_seconds", a.health_period_seconds)?;
        if a.idle_shutdown_seconds != 0.0 {
            seconds("server.agones.idle_shutdown_seconds", a.idle_shutdown_seconds)?;
        }
        seconds("server.agones.sdk_retry_seconds", a.sdk_retry_seconds)?;
        s.terrain_wire
            .validate()
            .map_err(|TerrainConfigError { key, reason }| {
                invalid(&format!("server.terrain_wire.{key}"), reason)
            })?;
        validate_world(&self.world)?;
        Ok(())
    }
}

/// Close codes an endpoint may put in a close frame (RFC 6455 section 7.4).
pub fn close_code_is_sendable(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

fn range_u32(key: &str, value: u32, min: u32, max: u32) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(invalid(key, format!("must be within {min}..={max}, is {value}")));
    }
    Ok(())
}

/// A duration in seconds: finite, positive, at most an hour.
fn seconds(key: &str, value: f64) -> Result<(), ConfigError> {
    if !(value.is_finite() && value > 0.0 && value <= 3600.0) {
        return Err(invalid(
            key,
            format!("must be a number of seconds above 0 and at most 3600, is {value}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_document_is_the_default() {
        let parsed = ServerConfig::from_toml(DEFAULT_CONFIG_TOML, "default.toml").unwrap();
        // When a kernel default changes, net/server/config/default.toml must say so too.
        assert_eq!(
            parsed,
            ServerConfig::default(),
            "net/server/config/default.toml is out of date"
        );
        ServerConfig::default().validate().unwrap();
    }

    #[test]
    fn empty_document_is_the_default() {
        assert_eq!(
            ServerConfig::from_toml("", "empty").unwrap(),
            ServerConfig::default()
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        for (doc, key) in [
            ("[server]\nlisten_addr = \"x\"", "listen_addr"),
            (
                "[server.client_backpressure]\nsend_queue_max = 3",
                "send_queue_max",
            ),
            ("[world.flocking]\ncohesion = 3", "cohesion"),
            ("[bogus]\nx = 1", "bogus"),
        ] {
            let e = ServerConfig::from_toml(doc, "t").unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    #[test]
    fn invalid_values_are_named() {
        for (doc, key) in [
            (
                "[server.client_backpressure]\nsend_queue_max_messages = 0",
                "server.client_backpressure.send_queue_max_messages",
            ),
            (
                "[server.client_backpressure]\neviction_close_code = 1005",
                "server.client_backpressure.eviction_close_code",
            ),
            (
                "[server.client_backpressure]\neviction_close_timeout_seconds = -1.0",
                "server.client_backpressure.eviction_close_timeout_seconds",
            ),
            ("[server]\nlisten = \"nowhere\"", "server.listen"),
            ("[server]\nshards = 65", "server.shards"),
            ("[server]\nconnections_max = 0", "server.connections_max"),
            (
                "[server]\nconnections_per_ip_max = 0",
                "server.connections_per_ip_max",
            ),
            (
                "[server]\nhttp_header_timeout_seconds = -1.0",
                "server.http_header_timeout_seconds",
            ),
            ("[world]\ntick_rate_hz = 0", "world.tick_rate_hz"),
            (
                "[world.flocking]\nspeed_max_mm_per_tick = 100000",
                "world.flocking.speed_max_mm_per_tick",
            ),
        ] {
            let e = ServerConfig::from_toml(doc, "t").unwrap_err().to_string();
            assert!(e.contains(key), "{doc}: {e}");
        }
        // A wrong type is a parse error that still names the key.
        let e = ServerConfig::from_toml("[server]\nshards = \"two\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("shards"), "{e}");
    }

    #[test]
    fn world_keys_map_onto_the_kernel_config() {
        let c = ServerConfig::from_toml(
            "[world]\nboid_count = 77\n[world.flocking]\nneighbours_max = 9\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.world.boid_count, 77);
        assert_eq!(c.world.flocking.neighbours_max, 9);
        assert_eq!(c.world.view_radius_mm, WorldConfig::default().view_radius_mm);
        let e = ServerConfig::from_toml("[world.flocking]\nbogus = 1\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = ServerConfig::from_toml("[world]\nboid_count = 99999999\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("world.boid_count"), "{e}");
    }
}
