-- Deleting a member or a pool from the web app (issue 12). Both stay as rows, so request records,
-- revoked keys and history keep pointing at something: the row is marked deleted, its name is
-- freed for reuse (a suffix no live name can have), and it leaves every list and choice.
ALTER TABLE members ADD COLUMN deleted_at INTEGER;
ALTER TABLE pools ADD COLUMN deleted_at INTEGER;

-- An expiry an admin set binds the key's owner as an admin's switch-off does (issue 12): the owner
-- may bring it forward, not push it back or remove it.
ALTER TABLE api_keys ADD COLUMN expiry_by_admin INTEGER NOT NULL DEFAULT 0 CHECK (expiry_by_admin IN (0, 1));
