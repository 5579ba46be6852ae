-- Whether an application holds efficiency measurements, on its own row: the
-- clean-up of applications a job start created (store::apps::remove_if_unused)
-- reads it as a condition on the row it locks, so an efficiency write committed
-- while the clean-up runs makes PostgreSQL check the row again and keep it. (A
-- NOT EXISTS on the efficiency table is read from the statement's snapshot and
-- missed such a write; its rows then went with the application, ON DELETE
-- CASCADE.) Efficiency measurements are never deleted on their own, so the flag
-- only ever turns true.
ALTER TABLE applications ADD COLUMN has_efficiency BOOLEAN NOT NULL DEFAULT false;

UPDATE applications a SET has_efficiency = true
WHERE EXISTS (SELECT 1 FROM efficiency e WHERE e.app_id = a.id);
