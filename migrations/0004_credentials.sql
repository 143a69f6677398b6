-- Token lifecycle (CRED-1..CRED-4). The sealed credential holds the current tokens; these columns
-- hold what may be shown or must survive a restart beside it.
ALTER TABLE accounts ADD COLUMN token_refreshed_at INTEGER;   -- unix s of the last successful refresh
-- The stored access token was refused upstream (CRED-3): a restart never makes it usable again;
-- cleared by the next successful refresh or a re-authorization.
ALTER TABLE accounts ADD COLUMN token_rejected_at INTEGER;
-- The grant is gone (invalid_grant, a reused refresh token, a refreshed token still refused): only
-- a re-authorization brings the account back (CRED-4).
ALTER TABLE accounts ADD COLUMN reauth_required_at INTEGER;
ALTER TABLE accounts ADD COLUMN reauth_reason TEXT;
-- Goes up with every write of the credential or the marks above (a refresh, a refusal, a
-- re-authorization): a process that read an older row never puts spent tokens back.
ALTER TABLE accounts ADD COLUMN credential_version INTEGER NOT NULL DEFAULT 0;
