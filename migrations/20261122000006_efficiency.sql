-- Fundamental efficiency factors (docs/model.md §6.1), measured per application,
-- code region and process count. One row per (application, region, process
-- count): a new measurement there replaces the old one, so a retried upload
-- never counts twice.
CREATE TABLE efficiency (
    app_id          BIGINT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    region          TEXT NOT NULL CHECK (region ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    processes       INTEGER NOT NULL CHECK (processes >= 1),
    load_balance    DOUBLE PRECISION NOT NULL CHECK (load_balance > 0 AND load_balance <= 1),
    serialization   DOUBLE PRECISION NOT NULL CHECK (serialization > 0 AND serialization <= 1),
    transfer        DOUBLE PRECISION NOT NULL CHECK (transfer > 0 AND transfer <= 1),
    -- The per-process compute times load balance was computed from, if it was.
    compute_times   DOUBLE PRECISION[],
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, region, processes)
);
