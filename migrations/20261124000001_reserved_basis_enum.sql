-- What a job's reserved power comes from, as an enumerated type rather than
-- free text: the service reads and writes it as `domain::ReservedBasis`.
CREATE TYPE reserved_basis AS ENUM ('node_set', 'worst_nodes', 'expected', 'no_history');

ALTER TABLE jobs
    ALTER COLUMN reserved_basis TYPE reserved_basis USING reserved_basis::reserved_basis;
