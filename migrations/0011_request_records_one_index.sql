-- Request records keep one secondary index, by member (performance, issue 15).
--
-- Every record written costs an insert into the table and into each index, and, once the 5,000-row
-- cap is reached, a delete from each (REC-5): with three indexes that was eight b-tree changes per
-- call, and SQLite's share of a proxied call's CPU was close to the rest of the gateway's own work.
-- At most 5,000 rows are kept, so the two indexes dropped here bought little:
-- - the UNIQUE index on `request_id`: ids are made unique by the server (REC-9: the time and 80
--   random bits), and the one lookup by id (REC-4's filter) scans at most 5,000 rows;
-- - the index on `started_at_ms`: the time-range filter scans as much, and pruning by age runs on
--   every read (exactly, before the read) and at most once a minute on write, not on every batch.
-- The member index stays: personal history (REC-3) is read by member, newest first.
--
-- SQLite cannot drop a UNIQUE constraint in place, so the table is rebuilt. AUTOINCREMENT's
-- high-water mark is carried over, so no id is ever handed out again (REC-5), even when every row
-- has been pruned.
CREATE TABLE request_records_rebuilt (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id       TEXT    NOT NULL,
    member_id        INTEGER NOT NULL,
    key_id           INTEGER,
    pool_id          INTEGER,
    account_id       INTEGER,
    provider         TEXT,
    model            TEXT    NOT NULL,
    operation        TEXT    NOT NULL,
    started_at_ms    INTEGER NOT NULL,
    duration_ms      INTEGER NOT NULL,
    first_output_ms  INTEGER,
    outcome          TEXT    NOT NULL CHECK (outcome IN ('success', 'incomplete', 'error', 'cancelled', 'rejected')),
    error_code       TEXT,
    upstream_status  INTEGER,
    input_tokens     INTEGER,
    output_tokens    INTEGER,
    cached_tokens    INTEGER,
    routing          TEXT    -- JSON routing explanation (EXP-1), null when rejected before routing
);

INSERT INTO request_records_rebuilt (id, request_id, member_id, key_id, pool_id, account_id, provider, model,
    operation, started_at_ms, duration_ms, first_output_ms, outcome, error_code, upstream_status,
    input_tokens, output_tokens, cached_tokens, routing)
SELECT id, request_id, member_id, key_id, pool_id, account_id, provider, model,
    operation, started_at_ms, duration_ms, first_output_ms, outcome, error_code, upstream_status,
    input_tokens, output_tokens, cached_tokens, routing
FROM request_records;

-- The copy above may have started a sequence of its own (at its highest id, or at 0 when empty);
-- the old table's high-water mark replaces it, and the rename below carries it to the new name.
DELETE FROM sqlite_sequence WHERE name = 'request_records_rebuilt';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'request_records_rebuilt', seq FROM sqlite_sequence WHERE name = 'request_records';

DROP TABLE request_records;
ALTER TABLE request_records_rebuilt RENAME TO request_records;
CREATE INDEX request_records_by_member ON request_records (member_id, id);
