-- Deleting members and pools from the web app, admin-bound key expiries (issue 12), and the key
-- circuit breaker's trips (issue 13, BUD-4).

-- A deleted member or pool stays as a row, so request records, revoked keys and history keep
-- pointing at something: the row is marked deleted, its name is freed for reuse (a suffix no live
-- name can have), and it leaves every list and choice.
ALTER TABLE members ADD COLUMN deleted_at INTEGER;
ALTER TABLE pools ADD COLUMN deleted_at INTEGER;

-- An expiry an admin set binds the key's owner as an admin's switch-off does (issue 12): the owner
-- may bring it forward, not push it back or remove it.
ALTER TABLE api_keys ADD COLUMN expiry_by_admin INTEGER NOT NULL DEFAULT 0 CHECK (expiry_by_admin IN (0, 1));

-- The key circuit breaker (BUD-4): trips count for the key's whole life; the 5th bans it.
ALTER TABLE api_keys ADD COLUMN breaker_trips INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN breaker_blocked_until INTEGER; -- unix ms
ALTER TABLE api_keys ADD COLUMN banned_at INTEGER;             -- unix s
