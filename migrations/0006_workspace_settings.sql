-- Workspace settings managed in the web app (queue timeout and capacity, workspace capacity,
-- failure threshold and window, first model cooldown, stream idle timeout). A stored value wins
-- over the environment and config file; a NULL value turns an optional setting off. Whole
-- seconds or counts.
CREATE TABLE workspace_settings (
    name       TEXT    PRIMARY KEY,
    value      INTEGER,
    updated_at INTEGER NOT NULL  -- unix s
);
