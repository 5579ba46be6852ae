-- A run sent with its start and duration but no end ended at their sum.
-- Budgets and run listings date a run by its end (else by when it was
-- stored), so such runs counted in the period they were sent in. New runs
-- get their end at ingestion; this gives the stored ones theirs, computed as
-- ingestion computes it (microseconds, rounded half to even).
UPDATE runs
SET ended_at = started_at + make_interval(secs => duration_s)
WHERE ended_at IS NULL AND started_at IS NOT NULL;
