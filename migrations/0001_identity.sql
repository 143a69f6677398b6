-- Identity, access and configuration of the workspace (ID-1..ID-6, ACC-5).
-- Times are unix seconds (INTEGER). AUTOINCREMENT keeps ids from ever being reused.

CREATE TABLE members (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    username          TEXT    NOT NULL UNIQUE COLLATE NOCASE,
    password_hash     TEXT    NOT NULL,
    role              TEXT    NOT NULL CHECK (role IN ('admin', 'member')),
    enabled           INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    concurrency_limit INTEGER NOT NULL DEFAULT 10 CHECK (concurrency_limit BETWEEN 0 AND 1000),
    rpm_limit         INTEGER CHECK (rpm_limit IS NULL OR rpm_limit >= 1),
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);

-- Browser sessions; only a SHA-256 of the cookie token is stored.
CREATE TABLE sessions (
    token_hash BLOB    NOT NULL PRIMARY KEY,
    member_id  INTEGER NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_by_member ON sessions (member_id);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

CREATE TABLE pools (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL UNIQUE COLLATE NOCASE,
    policy_mode   TEXT    NOT NULL DEFAULT 'all' CHECK (policy_mode IN ('all', 'allow', 'deny')),
    policy_models TEXT    NOT NULL DEFAULT '[]', -- JSON array of model ids
    model_aliases TEXT    NOT NULL DEFAULT '{}', -- JSON object: alias -> model id
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

CREATE TABLE pool_members (
    pool_id   INTEGER NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    member_id INTEGER NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    PRIMARY KEY (pool_id, member_id)
) WITHOUT ROWID;
CREATE INDEX pool_members_by_member ON pool_members (member_id);

CREATE TABLE accounts (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    provider            TEXT    NOT NULL CHECK (provider IN ('codex', 'claude', 'antigravity', 'openai_api', 'anthropic_api')),
    name                TEXT    NOT NULL,
    priority            INTEGER NOT NULL DEFAULT 0,
    max_concurrency     INTEGER NOT NULL DEFAULT 30 CHECK (max_concurrency BETWEEN 1 AND 1000),
    status              TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'error', 'disabled')),
    schedulable         INTEGER NOT NULL DEFAULT 1 CHECK (schedulable IN (0, 1)),
    credential_kind     TEXT    CHECK (credential_kind IN ('oauth', 'api_key')),
    sealed_credential   BLOB,    -- XChaCha20-Poly1305 under credentials.key (ID-6)
    token_expires_at    INTEGER,
    provider_account_id TEXT,
    lifecycle_revision  INTEGER NOT NULL DEFAULT 1,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    deleted_at          INTEGER  -- ACC-5: deleted accounts stay for history, without credentials
);
CREATE UNIQUE INDEX accounts_live_name ON accounts (name COLLATE NOCASE) WHERE deleted_at IS NULL;

CREATE TABLE account_pools (
    account_id INTEGER NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    pool_id    INTEGER NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    PRIMARY KEY (account_id, pool_id)
) WITHOUT ROWID;
CREATE INDEX account_pools_by_pool ON account_pools (pool_id);

-- Gateway API keys (ID-3); only a SHA-256 of the secret is stored.
CREATE TABLE api_keys (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    member_id    INTEGER NOT NULL REFERENCES members (id),
    pool_id      INTEGER NOT NULL REFERENCES pools (id),
    name         TEXT    NOT NULL,
    secret_hash  BLOB    NOT NULL UNIQUE,
    hint         TEXT    NOT NULL,
    enabled      INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    last_used_at INTEGER
);
CREATE INDEX api_keys_by_member ON api_keys (member_id);
