-- PostgreSQL orders NaN above every number, so `x > 0` let NaN (and
-- Infinity) into the jobs' estimates and reservation. Every other table
-- bounds its doubles below 'Infinity', which excludes both; jobs now do too.
-- NOT VALID: rows already stored are not re-checked, so an upgrade never
-- fails on them; every row written from now on is.
ALTER TABLE jobs
    ADD CONSTRAINT jobs_numbers_finite CHECK (
        predicted_apc_w < 'Infinity'::float8
        AND predicted_ets_j < 'Infinity'::float8
        AND predicted_tts_s < 'Infinity'::float8
        AND reserved_w < 'Infinity'::float8
        AND time_limit_s < 'Infinity'::float8
    ) NOT VALID;
