-- A key an admin switched off stays off for its owner (issue 12): only an admin switches it back on.
ALTER TABLE api_keys ADD COLUMN disabled_by_admin INTEGER NOT NULL DEFAULT 0 CHECK (disabled_by_admin IN (0, 1));
