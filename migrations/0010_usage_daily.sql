-- Daily usage summaries (BEY-1): per day of the workspace time zone, member, key, pool, account
-- and model. Written in the same transaction as the request records they summarize, so the two
-- always agree (a crash keeps or loses both); kept 90 days, independent of the records' 7.
--
-- An id the record lacks (a call refused before routing has no account) is stored as 0, so the
-- primary key is one plain unique key that an upsert can find (NULLs would never conflict).
-- No foreign keys: a deleted key or account keeps its history.
CREATE TABLE usage_daily (
    day                 TEXT    NOT NULL, -- YYYY-MM-DD in the workspace time zone
    member_id           INTEGER NOT NULL,
    key_id              INTEGER NOT NULL,
    pool_id             INTEGER NOT NULL,
    account_id          INTEGER NOT NULL,
    model               TEXT    NOT NULL,
    requests            INTEGER NOT NULL,
    succeeded           INTEGER NOT NULL,
    incomplete          INTEGER NOT NULL,
    errors              INTEGER NOT NULL,
    cancelled           INTEGER NOT NULL,
    rejected            INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cached_tokens       INTEGER NOT NULL,
    -- Sums and counts for averages: first output is known for some calls only (REC-7).
    duration_ms_sum     INTEGER NOT NULL,
    first_output_ms_sum INTEGER NOT NULL,
    first_output_count  INTEGER NOT NULL,
    PRIMARY KEY (day, member_id, key_id, pool_id, account_id, model)
);
-- A member's own usage (the personal Usage page) without scanning everyone's.
CREATE INDEX usage_daily_by_member ON usage_daily (member_id, day);
