-- An application's scaling mode as an enumerated type rather than text
-- with a CHECK: the service reads and writes it as `domain::ScalingMode`.
CREATE TYPE scaling_mode AS ENUM ('strong', 'weak', 'unknown');

ALTER TABLE applications DROP CONSTRAINT applications_scaling_mode_check;
ALTER TABLE applications ALTER COLUMN scaling_mode DROP DEFAULT;
ALTER TABLE applications
    ALTER COLUMN scaling_mode TYPE scaling_mode USING scaling_mode::scaling_mode;
ALTER TABLE applications ALTER COLUMN scaling_mode SET DEFAULT 'unknown';
