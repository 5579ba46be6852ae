-- Applications: one per energy tag. The run statistics and history_version are
-- maintained in the same transaction that inserts runs, so listing applications
-- never scans the runs table and a predictor can tell when its fit is stale
-- (history_version changes with every committed batch of runs, on any replica).
CREATE TABLE applications (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tag              TEXT NOT NULL UNIQUE
                     CHECK (tag ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    scaling_mode     TEXT NOT NULL DEFAULT 'unknown'
                     CHECK (scaling_mode IN ('strong', 'weak', 'unknown')),
    description      TEXT NOT NULL DEFAULT '' CHECK (length(description) <= 4096),
    -- NULL means "use the service default" (2 %).
    allowed_rmse_pct DOUBLE PRECISION
                     CHECK (allowed_rmse_pct > 0 AND allowed_rmse_pct <= 100),
    run_count        BIGINT NOT NULL DEFAULT 0 CHECK (run_count >= 0),
    nodes_min        INTEGER,
    nodes_max        INTEGER,
    last_run_at      TIMESTAMPTZ,
    history_version  BIGINT NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Runs: one finished execution. All values SI; all three of energy, power and
-- duration are stored (the missing one derived at ingestion), and `derived`
-- records which one was computed rather than measured.
CREATE TABLE runs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id       BIGINT NOT NULL REFERENCES applications (id),
    source       TEXT NOT NULL CHECK (length(source) BETWEEN 1 AND 64),
    job_id       TEXT NOT NULL CHECK (length(job_id) BETWEEN 1 AND 128),
    nodes        INTEGER NOT NULL CHECK (nodes >= 1),
    node_list    TEXT[] CHECK (node_list IS NULL OR cardinality(node_list) = nodes),
    energy_j     DOUBLE PRECISION NOT NULL
                 CHECK (energy_j > 0 AND energy_j < 'Infinity'::float8),
    avg_power_w  DOUBLE PRECISION NOT NULL
                 CHECK (avg_power_w > 0 AND avg_power_w < 'Infinity'::float8),
    duration_s   DOUBLE PRECISION NOT NULL
                 CHECK (duration_s > 0 AND duration_s < 'Infinity'::float8),
    derived      TEXT CHECK (derived IN ('energy_j', 'avg_power_w', 'duration_s')),
    started_at   TIMESTAMPTZ,
    ended_at     TIMESTAMPTZ,
    quality      DOUBLE PRECISION NOT NULL DEFAULT 1 CHECK (quality > 0 AND quality <= 1),
    account      TEXT CHECK (length(account) BETWEEN 1 AND 128),
    ingested_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT runs_source_job_id_key UNIQUE (source, job_id),
    CONSTRAINT runs_end_after_start CHECK (ended_at > started_at)
);

-- Per-application, per-node-count access (the predictor groups by node count;
-- the runs listing filters by it), paging in id order, and time-range filters on
-- the time a run finished (its end, or its ingestion when no end was reported).
CREATE INDEX runs_app_nodes_idx ON runs (app_id, nodes, id)
    INCLUDE (energy_j, avg_power_w, duration_s, quality);
CREATE INDEX runs_app_id_idx ON runs (app_id, id);
CREATE INDEX runs_app_finished_idx ON runs (app_id, (COALESCE(ended_at, ingested_at)));

-- API tokens: only a SHA-256 of the secret is stored.
CREATE TABLE api_tokens (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    token_hash    BYTEA NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    scopes        TEXT[] NOT NULL
                  CHECK (cardinality(scopes) >= 1
                         AND scopes <@ ARRAY['read', 'ingest', 'schedule', 'admin']),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ,
    last_used_at  TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ
);
