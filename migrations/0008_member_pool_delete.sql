-- Deleting a member or a pool from the web app (issue 12). Both stay as rows, so request records,
-- revoked keys and history keep pointing at something: the row is marked deleted, its name is
-- freed for reuse (a suffix no live name can have), and it leaves every list and choice.
ALTER TABLE members ADD COLUMN deleted_at INTEGER;
ALTER TABLE pools ADD COLUMN deleted_at INTEGER;
