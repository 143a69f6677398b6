-- Request records (REC-1, REC-2, REC-5, REC-7, REC-8, EXP-1). Metadata only: never prompts,
-- bodies, raw provider errors, headers, IPs, session ids or credentials.
-- AUTOINCREMENT: ids are never reused after pruning.
CREATE TABLE request_records (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id       TEXT    NOT NULL UNIQUE,
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
CREATE INDEX request_records_by_member ON request_records (member_id, id);
CREATE INDEX request_records_by_start ON request_records (started_at_ms);
