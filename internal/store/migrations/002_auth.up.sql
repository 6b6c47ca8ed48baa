-- API keys: bearer tokens of the submitter's API. Only the SHA-256 of a key
-- is stored; the key itself is shown once, when it is created.
CREATE TABLE api_keys (
    id           bigserial PRIMARY KEY,
    name         text        NOT NULL CHECK (name <> '' AND length(name) <= 128),
    hash         text        NOT NULL UNIQUE CHECK (length(hash) = 64),
    scopes       text[]      NOT NULL CHECK (scopes <@ ARRAY['submit', 'read', 'admin'] AND cardinality(scopes) > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- Worker credentials: what a worker sends in its heartbeats (WORKER_CREDENTIAL).
-- A worker may hold several at once (rotation); revoking sets revoked_at.
CREATE TABLE worker_credentials (
    id         bigserial PRIMARY KEY,
    worker_id  text        NOT NULL CHECK (worker_id <> '' AND length(worker_id) <= 200),
    hash       text        NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX worker_credentials_active_idx ON worker_credentials (worker_id) WHERE revoked_at IS NULL;

-- Audit log: every admin action, who did it and to what. Append-only by
-- convention: nothing in the code updates a row except to record the
-- outcome of the action it announced.
CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    action      text        NOT NULL,
    target_type text        NOT NULL,
    target_id   text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}'
);
