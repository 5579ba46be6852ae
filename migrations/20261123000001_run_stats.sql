-- History as sufficient statistics (docs/model.md §2.2): per application and node
-- count, the runs' count, summed quality weight, and per metric the weighted
-- sum, weighted sum of squares, min and max. Kept by the statement that
-- inserts runs (store::runs::insert_batch), in the same transaction, so a
-- refit reads one row per distinct node count however many runs there are.
-- Runs are never deleted, so sums, min and max only ever grow.
CREATE TABLE run_stats (
    app_id        BIGINT NOT NULL REFERENCES applications (id),
    nodes         INTEGER NOT NULL CHECK (nodes >= 1),
    runs          BIGINT NOT NULL CHECK (runs >= 1),
    weight        DOUBLE PRECISION NOT NULL CHECK (weight > 0),
    energy_sum    DOUBLE PRECISION NOT NULL,
    energy_sumsq  DOUBLE PRECISION NOT NULL,
    energy_min    DOUBLE PRECISION NOT NULL,
    energy_max    DOUBLE PRECISION NOT NULL,
    power_sum     DOUBLE PRECISION NOT NULL,
    power_sumsq   DOUBLE PRECISION NOT NULL,
    power_min     DOUBLE PRECISION NOT NULL,
    power_max     DOUBLE PRECISION NOT NULL,
    time_sum      DOUBLE PRECISION NOT NULL,
    time_sumsq    DOUBLE PRECISION NOT NULL,
    time_min      DOUBLE PRECISION NOT NULL,
    time_max      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (app_id, nodes)
);

-- backfill: the statistics of the runs already stored (tests/api/stats.rs runs
-- the statement below against runs ingested afresh and compares).
INSERT INTO run_stats (app_id, nodes, runs, weight,
                       energy_sum, energy_sumsq, energy_min, energy_max,
                       power_sum, power_sumsq, power_min, power_max,
                       time_sum, time_sumsq, time_min, time_max)
SELECT app_id, nodes, count(*), sum(quality),
       sum(quality * energy_j), sum(quality * energy_j * energy_j), min(energy_j), max(energy_j),
       sum(quality * avg_power_w), sum(quality * avg_power_w * avg_power_w),
       min(avg_power_w), max(avg_power_w),
       sum(quality * duration_s), sum(quality * duration_s * duration_s),
       min(duration_s), max(duration_s)
FROM runs
GROUP BY app_id, nodes;
