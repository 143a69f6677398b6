-- Budgets (issue 13, BUD-1..BUD-3): limits on a key, a member or the whole workspace over a
-- window, the usage counted against them, and the per-model prices behind the `credits` metric.

-- One limit. `subject_id` is the key or member id, NULL for the workspace (`ws`). Credits limits
-- are stored in micro-credits so every counter is an integer.
CREATE TABLE budget_policies (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    subject        TEXT    NOT NULL CHECK (subject IN ('apikey', 'member', 'ws')),
    subject_id     INTEGER,
    metric         TEXT    NOT NULL CHECK (metric IN ('requests', 'total_tokens', 'prompt_tokens',
                                                      'completion_tokens', 'credits')),
    window_kind    TEXT    NOT NULL CHECK (window_kind IN ('minute', 'minutes', 'day', 'month', 'total')),
    window_minutes INTEGER,
    limit_value    INTEGER NOT NULL CHECK (limit_value >= 0),
    created_by     INTEGER REFERENCES members (id),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    CHECK ((subject = 'ws') = (subject_id IS NULL)),
    CHECK ((window_kind = 'minutes') = (window_minutes IS NOT NULL))
);
-- One policy per subject, metric and window (a second would only hide the first).
CREATE UNIQUE INDEX budget_policies_unique
    ON budget_policies (subject, COALESCE(subject_id, 0), metric, window_kind, COALESCE(window_minutes, 0));

-- What each policy's window has used so far. Written in the same transaction as the request
-- records it counts, so a crash loses or keeps both, never one (no double counting on restart).
-- Kept apart from the records, which are pruned after 7 days.
CREATE TABLE budget_usage (
    policy_id       INTEGER NOT NULL,
    window_start_ms INTEGER NOT NULL,
    window_end_ms   INTEGER,
    used            INTEGER NOT NULL,
    PRIMARY KEY (policy_id, window_start_ms)
);
CREATE INDEX budget_usage_by_end ON budget_usage (window_end_ms);

-- Credits per million tokens, by model (`*` for any model not listed). Values set here override
-- the configuration file's `[prices]` table.
CREATE TABLE model_prices (
    model      TEXT PRIMARY KEY,
    prompt     REAL NOT NULL CHECK (prompt >= 0),
    completion REAL NOT NULL CHECK (completion >= 0),
    cached     REAL CHECK (cached >= 0)
);
