CREATE TABLE IF NOT EXISTS conversations (
    key TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    last_activity_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_by_status ON conversations (status, last_activity_at);
-- Paused threads by channel (sparse, as the aws backend's `by_place`): rtrim strips the
-- thread_ts (digits and a dot) and leaves `[enterprise:]team:channel:`.
CREATE INDEX IF NOT EXISTS conversations_by_place
    ON conversations (rtrim(key, '0123456789.'), last_activity_at)
    WHERE status IN ('awaiting_approval', 'interrupted');
CREATE TABLE IF NOT EXISTS items (
    key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (key, seq)
);
-- A conversation's summary of its items before `through` (see storage.summaries).
CREATE TABLE IF NOT EXISTS summaries (
    key TEXT PRIMARY KEY,
    through INTEGER NOT NULL,
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    event_id TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tool_calls (
    key TEXT NOT NULL,
    call_id TEXT NOT NULL,
    record TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (key, call_id)
);
CREATE TABLE IF NOT EXISTS inbox (
    key TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (key, entry_id)
);
CREATE TABLE IF NOT EXISTS votes (
    key TEXT NOT NULL,
    answer TEXT NOT NULL,
    user TEXT NOT NULL,
    verdict TEXT NOT NULL,
    PRIMARY KEY (key, answer, user)
);
CREATE TABLE IF NOT EXISTS feedback_totals (
    verdict TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS installations (
    install_id TEXT PRIMARY KEY,
    document TEXT NOT NULL,
    updated_at REAL NOT NULL
);
-- A workspace that removed the application: pending while expires_at is NULL.
CREATE TABLE IF NOT EXISTS removals (
    removal_id TEXT PRIMARY KEY,
    removal TEXT NOT NULL,
    expires_at REAL
);
CREATE TABLE IF NOT EXISTS one_time_states (
    state TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS people (
    key TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    version INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS replicas (
    replica TEXT PRIMARY KEY,
    beat_at REAL NOT NULL
);
