-- Jobs in flight: started, not yet finished. Each carries the prediction made
-- when it started and the power it reserves against the caps (docs/model.md §5).
-- Finishing a job turns it into a run; cancelling removes it.
CREATE TABLE jobs (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source           TEXT NOT NULL CHECK (length(source) BETWEEN 1 AND 64),
    job_id           TEXT NOT NULL CHECK (length(job_id) BETWEEN 1 AND 128),
    app_id           BIGINT NOT NULL REFERENCES applications (id),
    nodes            INTEGER NOT NULL CHECK (nodes >= 1),
    node_list        TEXT[] CHECK (node_list IS NULL OR cardinality(node_list) = nodes),
    partition        TEXT CHECK (partition ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    account          TEXT CHECK (length(account) BETWEEN 1 AND 128),
    started_at       TIMESTAMPTZ NOT NULL,
    -- NULL where the application has no history to predict from.
    predicted_apc_w  DOUBLE PRECISION CHECK (predicted_apc_w > 0),
    predicted_ets_j  DOUBLE PRECISION CHECK (predicted_ets_j > 0),
    predicted_tts_s  DOUBLE PRECISION CHECK (predicted_tts_s > 0),
    -- What the job counts for in headroom: its node set's APC, else the
    -- worst-node bound, else the expected APC, else a conservative default.
    reserved_w       DOUBLE PRECISION NOT NULL CHECK (reserved_w > 0),
    reserved_basis   TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT jobs_source_job_id_key UNIQUE (source, job_id)
);

CREATE INDEX jobs_partition_idx ON jobs (partition);
CREATE INDEX jobs_account_idx ON jobs (account);
