-- Power caps (docs/model.md §5): a limit on the draw of the whole system
-- (partition NULL) or of one partition, permanent or for a time window
-- (cooling maintenance, say). The cap in force at a time t for a scope is the
-- tightest one of that scope active at t.
CREATE TABLE power_caps (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE
                 CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    limit_w      DOUBLE PRECISION NOT NULL
                 CHECK (limit_w > 0 AND limit_w < 'Infinity'::float8),
    partition    TEXT CHECK (partition ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    -- NULL: since ever / for ever.
    starts_at    TIMESTAMPTZ,
    ends_at      TIMESTAMPTZ,
    description  TEXT NOT NULL DEFAULT '' CHECK (length(description) <= 4096),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT power_caps_window CHECK (ends_at > starts_at)
);

CREATE INDEX power_caps_scope_idx ON power_caps (partition, limit_w);
