-- bench/sql/setup.sql: the tables every variant runs on, and the variants
-- that do not need fence.  Run by bench/run with psql variables:
--   rows     rows of each benchmark table (100000 in a full run)
--   memrows  rows of the memory-test tables (1000000 in a full run)
--   njobs    jobs in the uncontended claims benchmark
--   tbase    the first per-client token (client c writes with tbase + c)
--
-- Every variant gets its own copy of the same data: b_<variant> for the
-- bulk and single-row shapes, m1_/m2_/m3_<variant> for the mixed shape
-- (fence_after_stmt runs in mixed only: see bench/run), w_<variant> for the
-- WAL measurement.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;

CREATE EXTENSION IF NOT EXISTS moddatetime;
CREATE EXTENSION IF NOT EXISTS pg_prewarm;

-- The source every table is copied from.  payload makes a row about as
-- wide as a small application row (~100 bytes).
CREATE TABLE seed_rows AS
	SELECT g AS id,
		   (g % 1000)::int AS qty,
		   0::bigint AS writer_epoch,
		   timestamptz '2026-01-01' AS updated_at,
		   md5(g::text) || md5((g + 1)::text) AS payload
	  FROM generate_series(1, :rows) g;

CREATE FUNCTION bench_make_table(tbl text, nrows bigint, fillfactor int DEFAULT 100)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('CREATE TABLE %I (id int PRIMARY KEY, qty int NOT NULL,'
				   ' writer_epoch bigint NOT NULL DEFAULT 0,'
				   ' updated_at timestamptz NOT NULL DEFAULT now(), payload text)'
				   ' WITH (fillfactor = %s)', tbl, fillfactor);
	IF nrows <= (SELECT count(*) FROM seed_rows) THEN
		EXECUTE format('INSERT INTO %I SELECT * FROM seed_rows WHERE id <= %s', tbl, nrows);
	ELSE
		EXECUTE format('INSERT INTO %I SELECT g, g %% 1000, 0, timestamptz %L,'
					   ' md5(g::text) || md5((g + 1)::text) FROM generate_series(1, %s) g',
					   tbl, '2026-01-01', nrows);
	END IF;
END $$;

CREATE FUNCTION bench_age_table(tbl text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('UPDATE %I SET qty = qty', tbl);
END $$;

SELECT bench_make_table(t || '_' || v, :rows)
  FROM unnest(ARRAY['plain', 'predicate', 'noop_trigger', 'after_when', 'moddatetime',
					'plpgsql_guard', 'fence_stmt', 'fence_begin',
					'fence_after_stmt', 'fence_after_begin']) v,
	   unnest(ARRAY['b', 'm1', 'm2', 'm3']) t
 WHERE (t, v) <> ('b', 'fence_after_stmt');

-- Memory test: the same 1M rows unguarded, under the noop C trigger, and
-- guarded by fence in each of its two forms.
SELECT bench_make_table('mem_plain', :memrows);
SELECT bench_make_table('mem_noop', :memrows);
SELECT bench_make_table('mem_fence', :memrows);
SELECT bench_make_table('mem_fence_after', :memrows);

-- WAL per UPDATE (bench/run's WAL section): w_<variant>, the first 1000
-- rows of the same data at fillfactor 40, so that every row's new version
-- fits on its page (a HOT update, the steady state of a table with room to
-- update in place) and the VACUUM before each measurement returns every
-- table to the same state.  w_plain_tx is plain's, for its transaction shape.
SELECT bench_make_table('w_' || v, 1000, 40)
  FROM unnest(ARRAY['plain', 'predicate', 'noop_trigger', 'after_when', 'moddatetime',
					'plpgsql_guard', 'fence_stmt', 'fence_begin',
					'fence_after_stmt', 'fence_after_begin', 'plain_tx']) v;

-- Age the benchmark tables once: a freshly loaded table is packed full, so
-- the first UPDATE of every row extends the relation, and later ones reuse
-- the space VACUUM frees.  Without this the first round of every variant
-- measures relation extension.  (Before any trigger exists.)
SELECT bench_age_table(t || '_' || v)
  FROM unnest(ARRAY['plain', 'predicate', 'noop_trigger', 'after_when', 'moddatetime',
					'plpgsql_guard', 'fence_stmt', 'fence_begin',
					'fence_after_stmt', 'fence_after_begin']) v,
	   unnest(ARRAY['b', 'm1', 'm2', 'm3']) t
 WHERE (t, v) <> ('b', 'fence_after_stmt');
VACUUM;

-- noop C trigger: the cheapest C BEFORE ROW trigger there is.  No row in
-- this benchmark is redundant (qty always changes), so it returns NEW.
CREATE TRIGGER noop BEFORE UPDATE ON b_noop_trigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER noop BEFORE UPDATE ON m1_noop_trigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER noop BEFORE UPDATE ON m2_noop_trigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER noop BEFORE UPDATE ON m3_noop_trigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();

CREATE TRIGGER noop BEFORE UPDATE ON mem_noop
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TRIGGER noop BEFORE UPDATE ON w_noop_trigger
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();

-- after_when: PostgreSQL's own floor for the after form's mechanism, an
-- AFTER UPDATE row trigger whose WHEN clause is never true here (every
-- UPDATE writes an epoch at least the row's), so no event is queued and
-- the body never runs.  What the after form adds to it is fence's check.
CREATE FUNCTION bench_after_noop() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER after_when AFTER UPDATE ON b_after_when FOR EACH ROW
	WHEN (NEW.writer_epoch < OLD.writer_epoch) EXECUTE FUNCTION bench_after_noop();
CREATE TRIGGER after_when AFTER UPDATE ON m1_after_when FOR EACH ROW
	WHEN (NEW.writer_epoch < OLD.writer_epoch) EXECUTE FUNCTION bench_after_noop();
CREATE TRIGGER after_when AFTER UPDATE ON m2_after_when FOR EACH ROW
	WHEN (NEW.writer_epoch < OLD.writer_epoch) EXECUTE FUNCTION bench_after_noop();
CREATE TRIGGER after_when AFTER UPDATE ON m3_after_when FOR EACH ROW
	WHEN (NEW.writer_epoch < OLD.writer_epoch) EXECUTE FUNCTION bench_after_noop();
CREATE TRIGGER after_when AFTER UPDATE ON w_after_when FOR EACH ROW
	WHEN (NEW.writer_epoch < OLD.writer_epoch) EXECUTE FUNCTION bench_after_noop();

-- moddatetime: the cheapest C trigger that rewrites the row.
CREATE TRIGGER mdt BEFORE UPDATE ON b_moddatetime
	FOR EACH ROW EXECUTE FUNCTION moddatetime(updated_at);
CREATE TRIGGER mdt BEFORE UPDATE ON m1_moddatetime
	FOR EACH ROW EXECUTE FUNCTION moddatetime(updated_at);
CREATE TRIGGER mdt BEFORE UPDATE ON m2_moddatetime
	FOR EACH ROW EXECUTE FUNCTION moddatetime(updated_at);
CREATE TRIGGER mdt BEFORE UPDATE ON m3_moddatetime
	FOR EACH ROW EXECUTE FUNCTION moddatetime(updated_at);
CREATE TRIGGER mdt BEFORE UPDATE ON w_moddatetime
	FOR EACH ROW EXECUTE FUNCTION moddatetime(updated_at);

-- PL/pgSQL guard: fence's checks written by hand, the way a user would
-- without the extension.  Its own claims table, one row per job, a global
-- token sequence, the token looked up FOR SHARE (so a claim of the job
-- blocks behind the writer), then compared with the row's stored epoch.
CREATE SEQUENCE pl_token_seq;
CREATE TABLE pl_claims (
	job text PRIMARY KEY,
	token bigint NOT NULL UNIQUE,
	claimed_at timestamptz NOT NULL DEFAULT now(),
	lease_expires_at timestamptz NOT NULL,
	released boolean NOT NULL DEFAULT false);

CREATE FUNCTION pl_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	tok bigint := NEW.writer_epoch;
	c record;
BEGIN
	IF tok IS NULL OR tok <= 0 THEN
		RAISE EXCEPTION 'write without a fencing token' USING ERRCODE = '5F003';
	END IF;
	SELECT job, released INTO c FROM pl_claims WHERE token = tok FOR SHARE;
	IF NOT FOUND THEN
		IF tok > (SELECT last_value FROM pl_token_seq) THEN
			RAISE EXCEPTION 'invalid fencing token %', tok USING ERRCODE = '5F004';
		END IF;
		RAISE EXCEPTION 'token % is superseded', tok USING ERRCODE = '5F001';
	END IF;
	IF c.released THEN
		RAISE EXCEPTION 'token % is superseded', tok USING ERRCODE = '5F001';
	END IF;
	IF (TG_ARGV[0] = 'strict' AND tok <= OLD.writer_epoch)
	   OR (TG_ARGV[0] = 'repeat' AND tok < OLD.writer_epoch) THEN
		RAISE EXCEPTION 'row is newer than token %', tok USING ERRCODE = '5F002';
	END IF;
	RETURN NEW;
END $$;

CREATE TRIGGER zz_pl_guard BEFORE UPDATE ON b_plpgsql_guard
	FOR EACH ROW EXECUTE FUNCTION pl_guard('repeat');
CREATE TRIGGER zz_pl_guard BEFORE UPDATE ON m1_plpgsql_guard
	FOR EACH ROW EXECUTE FUNCTION pl_guard('strict');
CREATE TRIGGER zz_pl_guard BEFORE UPDATE ON m2_plpgsql_guard
	FOR EACH ROW EXECUTE FUNCTION pl_guard('strict');
CREATE TRIGGER zz_pl_guard BEFORE UPDATE ON m3_plpgsql_guard
	FOR EACH ROW EXECUTE FUNCTION pl_guard('strict');
CREATE TRIGGER zz_pl_guard BEFORE UPDATE ON w_plpgsql_guard
	FOR EACH ROW EXECUTE FUNCTION pl_guard('repeat');

-- The per-client claims of the bulk/single shapes (tokens tbase + c, the
-- same values fence issued, when fence is there) and the mixed shape's
-- jobs (claimed afresh every transaction from pl_token_seq).
INSERT INTO pl_claims (job, token, lease_expires_at)
	SELECT 'bench_' || c, :tbase + c, now() + interval '1 day'
	  FROM generate_series(0, 63) c;
SELECT setval('pl_token_seq', :tbase + 1000);
INSERT INTO pl_claims (job, token, lease_expires_at, released)
	SELECT 'mx_' || c, nextval('pl_token_seq'), now(), true
	  FROM generate_series(0, 63) c;

-- The seed's jobs table, claimed with its raw conditional UPDATE.
-- mx_jobs: the mixed shape (job id = variant base + client);
-- claim_jobs: the claims benchmark.
CREATE TABLE mx_jobs (
	id int PRIMARY KEY,
	status text NOT NULL DEFAULT 'pending',
	lease_epoch bigint NOT NULL DEFAULT 0,
	lease_expires_at timestamptz,
	available_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
INSERT INTO mx_jobs (id) SELECT b + c FROM unnest(ARRAY[100, 200, 300, 400, 500]) b,
	generate_series(0, 63) c;

CREATE TABLE claim_jobs (LIKE mx_jobs INCLUDING ALL);
INSERT INTO claim_jobs (id) SELECT g FROM generate_series(1, :njobs) g;

VACUUM ANALYZE;
