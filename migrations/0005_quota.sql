-- Subscription quota awareness (QT-1..QT-5, PACE). The quota revision goes up when what was
-- observed stops holding: a re-authorization (another grant) or a disable/enable. Clear cooldown
-- leaves it (QT-5: clearing a cooldown never restores quota).
ALTER TABLE accounts ADD COLUMN quota_revision INTEGER NOT NULL DEFAULT 0;

-- The last observation of each account (JSON of quota::Snapshot: windows, per-model fractions,
-- denial, model catalogue), valid only for the quota revision it was written under. Written
-- conditionally: never for an older revision, never over a newer observation.
CREATE TABLE quota_observations (
    account_id  INTEGER PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    revision    INTEGER NOT NULL,
    observed_at INTEGER NOT NULL,  -- unix ms of the newest item
    snapshot    TEXT    NOT NULL
);

-- The binding sweep deletes by age every minute: an index instead of a full scan.
CREATE INDEX session_bindings_used_at ON session_bindings (used_at);
