-- The fleet's state of record: one row per world, one per recording segment.
-- Portable SQL: the same file migrates SQLite and PostgreSQL.

CREATE TABLE worlds (
    id TEXT PRIMARY KEY,
    -- The world config as JSON, as it was created (`{}` takes every default).
    config_json TEXT NOT NULL,
    -- blake3 of the kernel's canonical config encoding, hex.
    config_hash TEXT NOT NULL,
    created_unix_ms BIGINT NOT NULL,
    -- The running server process, if any: its pid and WebSocket URL.
    server_pid BIGINT,
    ws_url TEXT
);

CREATE TABLE segments (
    world_id TEXT NOT NULL REFERENCES worlds(id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    -- Relative to the fleet's data folder.
    recording_path TEXT NOT NULL,
    first_tick BIGINT NOT NULL,
    last_tick BIGINT,
    -- The state root at last_tick, hex.
    final_root TEXT,
    -- running | stopped | crashed
    ended TEXT NOT NULL,
    -- The segment this one resumed from (NULL: a fresh world).
    resumed_from_seq BIGINT,
    started_unix_ms BIGINT NOT NULL,
    ended_unix_ms BIGINT,
    PRIMARY KEY (world_id, seq)
);
