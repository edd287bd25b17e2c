-- Lineages: an upgrade (the world's whole input history replayed under new kernel rules
-- into one new segment) or a fork (a fresh start from the world's config) begins a new
-- lineage of the world; the world resumes from the newest segment of its current one.
-- The segments of earlier lineages are kept, rows and bytes.
-- Portable SQL: the same file migrates SQLite and PostgreSQL.
ALTER TABLE worlds ADD COLUMN lineage BIGINT NOT NULL DEFAULT 0;
ALTER TABLE segments ADD COLUMN lineage BIGINT NOT NULL DEFAULT 0;
-- How a segment came to be when no server recorded it: 'upgrade'. NULL: a server's run.
ALTER TABLE segments ADD COLUMN origin TEXT;
