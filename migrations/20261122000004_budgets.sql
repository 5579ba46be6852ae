-- Energy budgets per account (docs/model.md §5): a limit in joules over a
-- period, a calendar month or week (UTC) or explicit start and end.
CREATE TABLE budgets (
    account     TEXT PRIMARY KEY CHECK (account ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    limit_j     DOUBLE PRECISION NOT NULL CHECK (limit_j > 0 AND limit_j < 'Infinity'::float8),
    period      TEXT NOT NULL CHECK (period IN ('month', 'week', 'custom')),
    starts_at   TIMESTAMPTZ,
    ends_at     TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT budgets_custom_window CHECK (
        (period = 'custom') = (starts_at IS NOT NULL AND ends_at IS NOT NULL)
        AND (ends_at IS NULL OR ends_at > starts_at))
);

-- An account's consumption in a period: its runs by the time they finished.
CREATE INDEX runs_account_finished_idx ON runs (account, (COALESCE(ended_at, ingested_at)))
    INCLUDE (energy_j) WHERE account IS NOT NULL;
