-- The node registry and the power samples nodes draw under reference
-- workloads, from which nodes are classified (docs/model.md §3).
CREATE TABLE nodes (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE
                    CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    -- NULL: not in any named partition.
    partition       TEXT CHECK (partition ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    hardware_model  TEXT NOT NULL DEFAULT '' CHECK (length(hardware_model) <= 128),
    -- Draw of the node when idle, and the vendor's peak, when known.
    idle_power_w    DOUBLE PRECISION
                    CHECK (idle_power_w > 0 AND idle_power_w < 'Infinity'::float8),
    peak_power_w    DOUBLE PRECISION
                    CHECK (peak_power_w > 0 AND peak_power_w < 'Infinity'::float8),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX nodes_partition_idx ON nodes (partition, name);

-- One average power measured on one node while it ran a named reference
-- workload. (node, workload, measured_at) identifies a sample: sending it
-- again must not count it twice.
CREATE TABLE node_samples (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id      BIGINT NOT NULL REFERENCES nodes (id),
    workload     TEXT NOT NULL
                 CHECK (workload ~ '^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$'),
    avg_power_w  DOUBLE PRECISION NOT NULL
                 CHECK (avg_power_w > 0 AND avg_power_w < 'Infinity'::float8),
    measured_at  TIMESTAMPTZ NOT NULL,
    ingested_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT node_samples_key UNIQUE (node_id, workload, measured_at)
);

-- Classification reads one workload's recent samples.
CREATE INDEX node_samples_workload_idx ON node_samples (workload, measured_at)
    INCLUDE (node_id, avg_power_w);
