-- Ends of jobs reported while they were not running (DELETE or finish of an
-- unknown job): a start of the same attempt that reaches the service later
-- (a prolog that gave up waiting, an epilog that overtook it) is refused
-- instead of reserving power until it expires. Kept for seven days.
CREATE TABLE job_ends (
    source   text        NOT NULL,
    job_id   text        NOT NULL,
    ended_at timestamptz NOT NULL,
    PRIMARY KEY (source, job_id)
);
CREATE INDEX job_ends_ended_at ON job_ends (ended_at);
