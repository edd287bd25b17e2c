-- Several fleet nodes on one store: each node's lease, each world's owner node and
-- fencing epoch, and the bytes of every segment as its world server shipped them.
-- Portable SQL: the same file migrates SQLite and PostgreSQL.

CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    -- The host this node's world servers are reached at (ws_url's host).
    advertise_host TEXT NOT NULL,
    -- Random per process: a restarted node is a new incarnation of its id.
    incarnation TEXT NOT NULL,
    -- The lease, on the store's clock (ms since 1970): live while in the future.
    lease_expires_unix_ms BIGINT NOT NULL,
    started_unix_ms BIGINT NOT NULL
);

-- The node running the world's server (NULL: none), and the fencing epoch, incremented
-- on every start and takeover. Only the owner at the current epoch may change the row or
-- append to the world's segments.
ALTER TABLE worlds ADD COLUMN owner_node TEXT;
ALTER TABLE worlds ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;

-- The epoch the segment's server ran under.
ALTER TABLE segments ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;

-- A segment's recording, in the order its server flushed it: chunk `offset_bytes` holds
-- the file's bytes from that offset. The contiguous chunks from offset 0 are the
-- segment; what a server wrote but had not shipped when its machine died is lost.
-- (BYTEA: PostgreSQL's byte string; SQLite keeps the blob as given.)
CREATE TABLE segment_chunks (
    world_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    offset_bytes BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    bytes BYTEA NOT NULL,
    PRIMARY KEY (world_id, seq, offset_bytes)
);
