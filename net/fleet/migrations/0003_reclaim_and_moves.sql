-- The reclaim file of a segment's server (its players' reconnect token hashes, in the
-- server's own format), as it last shipped it: the node that resumes the world writes it
-- beside the segment, so the players reclaim their avatars on any machine. NULL: none.
ALTER TABLE segments ADD COLUMN reclaim BYTEA;

-- A draining node takes no world: moves and fresh starts go elsewhere (1) until it stops.
ALTER TABLE nodes ADD COLUMN draining BIGINT NOT NULL DEFAULT 0;

-- The node's public API (`http://advertise-host:port`), where moves and drains are asked.
ALTER TABLE nodes ADD COLUMN api_url TEXT;
