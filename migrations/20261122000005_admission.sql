-- Admission (docs/model.md §5): a job may carry the time limit it was submitted
-- with. For an application without history it bounds the energy the job can
-- commit against its account's budget (reserved power × time limit).
ALTER TABLE jobs
    ADD COLUMN time_limit_s DOUBLE PRECISION CHECK (time_limit_s > 0);
