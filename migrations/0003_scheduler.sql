-- The scheduler's durable state (ACC-4, RT-1). Memory is authoritative while running; these rows
-- are the copy read back at startup.

-- Blocking dimensions of an account (JSON of scheduler::state::AccountState), valid only for the
-- lifecycle revision they were written under.
CREATE TABLE account_runtime (
    account_id INTEGER PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    revision   INTEGER NOT NULL,
    state      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL  -- unix ms
);

-- Conversation bindings (RT-1): scoped to member + pool; the conversation is only a SHA-256 of
-- its session id or prompt cache key.
CREATE TABLE session_bindings (
    member_id  INTEGER NOT NULL,
    pool_id    INTEGER NOT NULL,
    key_hash   BLOB    NOT NULL,
    account_id INTEGER NOT NULL,
    model      TEXT    NOT NULL,
    used_at    INTEGER NOT NULL,  -- unix ms
    PRIMARY KEY (member_id, pool_id, key_hash)
) WITHOUT ROWID;
