-- bench/sql/fence_claims.sql: run before setup.sql when fence is installed.
-- Claims jobs bench_0 .. bench_63 with long leases, one token per
-- benchmark client (client c writes with token tbase + c), and checks that
-- the tokens are consecutive so pgbench can compute them from :client_id.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION fence;

CREATE TABLE bench_tokens AS
	SELECT c, fence_claim('bench_' || c, interval '1 day', 'bench') AS token
	  FROM generate_series(0, 63) c ORDER BY c;

DO $$
BEGIN
	IF EXISTS (SELECT 1 FROM bench_tokens
				WHERE token IS DISTINCT FROM
					  (SELECT token FROM bench_tokens WHERE c = 0) + c) THEN
		RAISE EXCEPTION 'fence_claim did not issue consecutive tokens to bench_0..63';
	END IF;
END $$;

SELECT token AS tbase FROM bench_tokens WHERE c = 0 \gset
\echo tbase=:tbase
