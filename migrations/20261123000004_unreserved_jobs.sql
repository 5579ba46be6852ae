-- Jobs a scheduler ran without a power reservation because the service
-- could not be reached (deploy/slurm's prolog failing open), reported once
-- the service answers again: counted once each, on /metrics.
CREATE TABLE unreserved_jobs (
    source      text        NOT NULL,
    job_id      text        NOT NULL,
    started_at  timestamptz NOT NULL,
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, job_id)
);
