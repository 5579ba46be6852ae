-- Whether an administrator set the application up (`PUT /v1/apps/{app}`),
-- even with every setting at its default: the clean-up of applications a job
-- start created (store::apps::remove_if_unused) keeps such a one. It read
-- "settings at their defaults" as "never set", and removed an application an
-- administrator had just registered once a job of it was cancelled. Like
-- `has_efficiency`, a condition on the row the clean-up locks.
ALTER TABLE applications ADD COLUMN registered BOOLEAN NOT NULL DEFAULT false;

UPDATE applications SET registered = true
WHERE scaling_mode <> 'unknown' OR description <> '' OR allowed_rmse_pct IS NOT NULL;
