-- A budget's period as an enumerated type rather than text with a CHECK:
-- the service reads and writes it as `domain::Period`. The window check
-- compares the period with text, so it is dropped and made again.
CREATE TYPE budget_period AS ENUM ('month', 'week', 'custom');

ALTER TABLE budgets DROP CONSTRAINT budgets_period_check;
ALTER TABLE budgets DROP CONSTRAINT budgets_custom_window;
ALTER TABLE budgets
    ALTER COLUMN period TYPE budget_period USING period::budget_period;
ALTER TABLE budgets ADD CONSTRAINT budgets_custom_window CHECK (
    (period = 'custom') = (starts_at IS NOT NULL AND ends_at IS NOT NULL)
    AND (ends_at IS NULL OR ends_at > starts_at));
