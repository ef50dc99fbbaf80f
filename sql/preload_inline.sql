--
-- The guard's inline form (inline.c), on a server with fence in
-- shared_preload_libraries (test/run's second pass: sql/preload_*.sql run
-- there only).  Whether the trigger or the inline check ran is read from
-- pg_stat_user_functions (track_functions = all counts C functions, a
-- trigger's included) and from fence_stats (calls(), below).
--
CREATE EXTENSION fence;
SELECT current_setting('shared_preload_libraries') ~ 'fence' AS preloaded;
SET track_functions = 'all';
SET stats_fetch_consistency = 'none';
CREATE TABLE seen (what text PRIMARY KEY, n bigint NOT NULL);
-- calls(): since its last call, the calls of fence_guard (the trigger) and
-- of the inline checks (fence_inline_guard, _stamp, _delete), and
-- fence_stats' counts of UPDATE and DELETE statements that used the inline
-- form or kept the trigger, by reason
CREATE FUNCTION calls(OUT guard bigint, OUT inline bigint, OUT used bigint,
					  OUT off bigint, OUT unplanned bigint, OUT triggers bigint,
					  OUT replica bigint)
LANGUAGE plpgsql AS $$
DECLARE
	now_n bigint[];
	was_n bigint[];
	names text[] := ARRAY['guard', 'inline', 'used', 'off', 'unplanned', 'triggers', 'replica'];
BEGIN
	SELECT ARRAY[coalesce(sum(f.calls) FILTER (WHERE f.funcname = 'fence_guard'), 0),
				 coalesce(sum(f.calls) FILTER (WHERE f.funcname LIKE 'fence\_inline\_%'
											AND f.funcname <> 'fence_inline_counts'), 0)]
	  INTO now_n FROM pg_stat_user_functions f;
	SELECT now_n || ARRAY[s.inline_writes, s.trigger_writes_inline_off,
						  s.trigger_writes_unplanned, s.trigger_writes_triggers,
						  s.trigger_writes_replica]
	  INTO now_n FROM fence_stats s;
	SELECT array_agg(coalesce((SELECT s.n FROM seen s WHERE s.what = w), 0) ORDER BY o)
	  INTO was_n FROM unnest(names) WITH ORDINALITY AS u(w, o);
	guard := now_n[1] - was_n[1];
	inline := now_n[2] - was_n[2];
	used := now_n[3] - was_n[3];
	off := now_n[4] - was_n[4];
	unplanned := now_n[5] - was_n[5];
	triggers := now_n[6] - was_n[6];
	replica := now_n[7] - was_n[7];
	INSERT INTO seen SELECT w, now_n[o] FROM unnest(names) WITH ORDINALITY AS u(w, o)
		ON CONFLICT (what) DO UPDATE SET n = EXCLUDED.n;
END $$;
-- a statement's counts are flushed when the session next goes idle
CREATE PROCEDURE flush() LANGUAGE sql AS $$ SELECT pg_stat_force_next_flush() $$;

CREATE TABLE r (id int PRIMARY KEY, v text, writer_epoch bigint);
INSERT INTO r SELECT g, 'init', NULL FROM generate_series(1, 4) g;
CREATE TABLE r_plain (LIKE r INCLUDING ALL);
INSERT INTO r_plain SELECT * FROM r;
SELECT fence_protect('r');
CREATE TABLE tok (who text PRIMARY KEY, t bigint);
INSERT INTO tok SELECT 'a', fence_claim('J', '1 millisecond', 'A');
SELECT pg_sleep(0.01);
INSERT INTO tok SELECT 'b', fence_claim('J', '1 hour', 'B');
SELECT t AS ta FROM tok WHERE who = 'a' \gset
SELECT t AS tb FROM tok WHERE who = 'b' \gset
CALL flush();
-- (what the tests before this one counted)
SELECT true AS baseline FROM calls();

--
-- 1. The token in the statement: the inline check runs, the trigger does not.
--
-- EXPLAIN VERBOSE shows the check in the scan's output (the check alone
-- printed here, r's OID as 'r'::regclass: plans differ between majors)
CREATE FUNCTION explain_check(stmt text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	line text;
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || stmt LOOP
		CONTINUE WHEN line !~ '^ *Output:';
		RETURN NEXT coalesce(substring(replace(line, quote_literal('r'::regclass::oid::text) || '::oid',
											   '''r''::regclass')
									   FROM 'fence_inline_[a-z]+\(.*\)'),
							 '(no check)');
	END LOOP;
END $$;
SELECT explain_check(format('UPDATE r SET v = %L, writer_epoch = %s WHERE id <= 2', 'B', :tb));
-- ... and where the trigger checks (fence.inline off), none
SET fence.inline = off;
SELECT explain_check(format('UPDATE r SET v = %L, writer_epoch = %s WHERE id <= 2', 'B', :tb));
RESET fence.inline;
UPDATE r SET v = 'B', writer_epoch = :tb WHERE id <= 2;
CALL flush();
SELECT * FROM calls();
SELECT id, v, writer_epoch = :tb AS epoch_b FROM r ORDER BY id;
-- fence_begin, the guard stamping the row: the check gives the token the
-- trigger would stamp, in the column's place in the plan
SELECT explain_check('UPDATE r SET v = ''B4'' WHERE id = 4');
BEGIN;
SELECT fence_begin('J', :tb);
UPDATE r SET v = 'B4' WHERE id = 4 RETURNING id, v, writer_epoch = :tb AS stamped;
COMMIT;
CALL flush();
SELECT * FROM calls();
-- DELETE: the check is a junk column of the scan
SELECT explain_check('DELETE FROM r WHERE id = 4');
SELECT fence_claim('JD', '1 hour') AS tdel \gset
BEGIN;
SELECT fence_begin('JD', :tdel);
DELETE FROM r WHERE id = 4 RETURNING id;
ROLLBACK;
CALL flush();
SELECT * FROM calls();

--
-- 2. The same refusals, messages and all, inline and by the trigger.  (A
-- call that raises is not counted, so calls() has nothing to show here.)
--
\set VERBOSITY default
-- A, superseded by B's takeover: 5F001
UPDATE r SET v = 'A', writer_epoch = :ta WHERE id = 3;
SET fence.inline = off;
UPDATE r SET v = 'A', writer_epoch = :ta WHERE id = 3;
RESET fence.inline;
-- B again on its own row, strict mode: 5G003
UPDATE r SET v = 'B2', writer_epoch = :tb WHERE id = 1;
SET fence.inline = off;
UPDATE r SET v = 'B2', writer_epoch = :tb WHERE id = 1;
RESET fence.inline;
-- NULL and a token never issued
UPDATE r SET writer_epoch = NULL WHERE id = 4;
UPDATE r SET writer_epoch = 999999 WHERE id = 4;
-- under fence_begin, another token in the statement: 5F004
BEGIN;
SELECT fence_begin('J', :tb);
UPDATE r SET v = 'A', writer_epoch = :ta WHERE id = 4;
ROLLBACK;
-- no binding at all: 5F003, stamped and deleting
UPDATE r SET v = 'A' WHERE id = 3;
SET fence.inline = off;
UPDATE r SET v = 'A' WHERE id = 3;
RESET fence.inline;
DELETE FROM r WHERE id = 3;
SET fence.inline = off;
DELETE FROM r WHERE id = 3;
RESET fence.inline;
-- B stamping its own row again, strict mode: 5G003, both ways
BEGIN;
SELECT fence_begin('J', :tb);
SAVEPOINT s;
UPDATE r SET v = 'B5' WHERE id = 4;
ROLLBACK TO s;
SET LOCAL fence.inline = off;
UPDATE r SET v = 'B5' WHERE id = 4;
ROLLBACK;
-- B deleting a row C has written since: 5F002, both ways
SELECT fence_claim('JC', '1 hour') AS tjc \gset
UPDATE r SET v = 'C', writer_epoch = :tjc WHERE id = 4;
BEGIN;
SELECT fence_begin('J', :tb);
SAVEPOINT s;
DELETE FROM r WHERE id = 4;
ROLLBACK TO s;
SET LOCAL fence.inline = off;
DELETE FROM r WHERE id = 4;
ROLLBACK;
CALL flush();
SELECT * FROM calls();
\set VERBOSITY terse
-- the twins: the same stale writes on the unprotected table land
UPDATE r_plain SET v = 'B', writer_epoch = :tb WHERE id = 3;
UPDATE r_plain SET v = 'A', writer_epoch = :ta WHERE id = 3;
SELECT v, writer_epoch = :ta AS stale_epoch_landed FROM r_plain WHERE id = 3;
UPDATE r_plain SET v = 'C', writer_epoch = :tjc WHERE id = 4;
DELETE FROM r_plain WHERE id = 4;
SELECT (SELECT v FROM r WHERE id = 4) AS protected_keeps,
	   (SELECT count(*) FROM r_plain WHERE id = 4) AS unprotected_rows_left;

--
-- 3. Every path the inline form does not take keeps the trigger.
--
-- fence.inline off
SET fence.inline = off;
UPDATE r SET v = 'B3', writer_epoch = :tb WHERE id = 3;
RESET fence.inline;
CALL flush();
SELECT * FROM calls();
-- fence.inline off: stamping and DELETE
SELECT fence_claim('JE', '1 hour') AS tje \gset
BEGIN;
SELECT fence_begin('JE', :tje);
SET LOCAL fence.inline = off;
UPDATE r SET v = 'E0' WHERE id = 4 RETURNING id, v, writer_epoch = :tje AS stamped;
DELETE FROM r WHERE id = 2 RETURNING id;
ROLLBACK;
CALL flush();
SELECT * FROM calls();
-- stamping with a multiple assignment in the SET list: no stamp planned
BEGIN;
SELECT fence_begin('JE', :tje);
UPDATE r SET (v, id) = (SELECT 'E1', 4) WHERE id = 4 RETURNING id, v, writer_epoch = :tje AS stamped;
ROLLBACK;
CALL flush();
SELECT * FROM calls();
-- ... nor on a table with a stored generated column (which might depend
-- on the stamp); the token in the statement is still checked inline
CREATE TABLE g (id int PRIMARY KEY, v text, writer_epoch bigint,
				e2 bigint GENERATED ALWAYS AS (writer_epoch * 2) STORED);
INSERT INTO g VALUES (1, 'init', NULL);
SELECT fence_protect('g');
BEGIN;
SELECT fence_begin('JE', :tje);
UPDATE g SET v = 'G' WHERE id = 1 RETURNING id, e2 = 2 * :tje AS generated_from_stamp;
UPDATE g SET v = 'G2', writer_epoch = :tje WHERE id = 1;
ROLLBACK;
CALL flush();
SELECT * FROM calls();
-- another BEFORE ROW DELETE trigger; and one for UPDATE only, which does
-- not stand in a DELETE's way
CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN OLD; END $$;
CREATE TRIGGER a_keep BEFORE DELETE ON r FOR EACH ROW EXECUTE FUNCTION keep();
BEGIN;
SELECT fence_begin('JE', :tje);
DELETE FROM r WHERE id = 4 RETURNING id;
ROLLBACK;
DROP TRIGGER a_keep ON r;
CREATE TRIGGER a_keep BEFORE UPDATE ON r FOR EACH ROW EXECUTE FUNCTION keep();
BEGIN;
SELECT fence_begin('JE', :tje);
DELETE FROM r WHERE id = 4 RETURNING id;
ROLLBACK;
DROP TRIGGER a_keep ON r;
CALL flush();
SELECT * FROM calls();
-- a hand-written call of the check is a value like any other: the planner
-- wraps it in the check of its own, which reads the row's real epoch.  This
-- one lies about the row's epoch (NULL) and lets the write through; the
-- check around it refuses (5G003: the row holds this token already).
UPDATE r SET writer_epoch = fence_inline_guard(NULL, :tb, 'r'::regclass, 'writer_epoch', 'strict') WHERE id = 2;
CALL flush();
SELECT * FROM calls();
-- ... and it marks nothing: planned with fence.inline off (no check of
-- the planner's), it leaves the trigger to run once fence.inline is on
SET plan_cache_mode = force_generic_plan;
SET fence.inline = off;
PREPARE forged(bigint) AS
	UPDATE r SET writer_epoch = fence_inline_guard(NULL, $1, 'r'::regclass, 'writer_epoch', 'strict') WHERE id = 2;
SELECT fence_claim('JF', '1 hour') AS tforged \gset
EXECUTE forged(:tforged);
RESET fence.inline;
SELECT fence_release('JF', :tforged) AS released;
SELECT fence_claim('JF', '1 hour') AS tforged \gset
EXECUTE forged(:tforged);
CALL flush();
SELECT * FROM calls();
DEALLOCATE forged;
RESET plan_cache_mode;
-- another BEFORE ROW UPDATE trigger on the table
CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.v := NEW.v || '+'; RETURN NEW; END $$;
CREATE TRIGGER a_touch BEFORE UPDATE ON r FOR EACH ROW EXECUTE FUNCTION touch();
SELECT fence_claim('J2', '1 hour') AS tc \gset
UPDATE r SET v = 'C', writer_epoch = :tc WHERE id = 1;
CALL flush();
SELECT * FROM calls();
-- disabled, it is no longer in the way
ALTER TABLE r DISABLE TRIGGER a_touch;
SELECT fence_claim('J3', '1 hour') AS td \gset
UPDATE r SET v = 'D', writer_epoch = :td WHERE id = 1;
CALL flush();
SELECT * FROM calls();
DROP TRIGGER a_touch ON r;
SELECT id, v FROM r WHERE id = 1;
-- session_replication_role = replica: the guard (ENABLE ALWAYS) fires
SET session_replication_role = replica;
SELECT fence_claim('J4', '1 hour') AS te \gset
UPDATE r SET v = 'E', writer_epoch = :te WHERE id = 1;
RESET session_replication_role;
CALL flush();
SELECT * FROM calls();
-- a data-modifying CTE
SELECT fence_claim('J5', '1 hour') AS tf \gset
WITH u AS (UPDATE r SET v = 'F', writer_epoch = :tf WHERE id = 1 RETURNING id)
SELECT count(*) FROM u;
SELECT fence_claim('J6', '1 hour') AS tg \gset
BEGIN;
SELECT fence_begin('J6', :tg);
WITH d AS (DELETE FROM r WHERE id = 1 RETURNING id)
SELECT count(*) FROM d;
ROLLBACK;
CALL flush();
SELECT * FROM calls();
-- a partitioned table, a row moving between partitions included
CREATE TABLE p (id int, v text, writer_epoch bigint) PARTITION BY RANGE (id);
CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10);
CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (20);
INSERT INTO p VALUES (1, 'init', NULL), (2, 'init', NULL);
SELECT fence_protect('p');
SELECT fence_claim('P', '1 hour') AS tp \gset
UPDATE p SET v = 'P', writer_epoch = :tp WHERE id = 1;
UPDATE p SET id = 12, writer_epoch = :tp WHERE id = 2;
SELECT fence_claim('PD', '1 hour') AS tpd \gset
BEGIN;
SELECT fence_begin('PD', :tpd);
DELETE FROM p WHERE id = 1;
ROLLBACK;
-- ... and a partition written directly: an ordinary table, inline
SELECT fence_release('P', :tp) AS released;
SELECT fence_claim('P', '1 hour') AS tp2 \gset
UPDATE p1 SET v = 'P1', writer_epoch = :tp2 WHERE id = 1;
CALL flush();
SELECT * FROM calls();
SELECT tableoid::regclass, id, v, writer_epoch = :tp2 AS epoch_p2 FROM p ORDER BY id;
-- inheritance: a parent with a child
CREATE TABLE ih (id int, v text, writer_epoch bigint);
CREATE TABLE ih_c () INHERITS (ih);
INSERT INTO ih VALUES (1, 'init', NULL);
INSERT INTO ih_c VALUES (2, 'init', NULL);
SELECT fence_protect('ih');
SELECT fence_claim('I', '1 hour') AS ti \gset
UPDATE ih SET v = 'I', writer_epoch = :ti;
SELECT fence_claim('ID', '1 hour') AS tid \gset
BEGIN;
SELECT fence_begin('ID', :tid);
DELETE FROM ih;
ROLLBACK;
CALL flush();
SELECT * FROM calls();

--
-- 4. Plans kept: prepared statements, generic plans, PL/pgSQL, and a
-- plan the trigger set changed under.
--
SELECT fence_claim('K', '1 hour') AS tk \gset
PREPARE upd(bigint, int) AS UPDATE r SET v = 'K', writer_epoch = $1 WHERE id = $2;
SET plan_cache_mode = force_generic_plan;
EXECUTE upd(:tk, 1);
EXECUTE upd(:tk, 2);
CALL flush();
SELECT * FROM calls();
-- a trigger added since the plan: the plan is made again, the trigger runs
CREATE TRIGGER a_touch BEFORE UPDATE ON r FOR EACH ROW EXECUTE FUNCTION touch();
SELECT fence_claim('K2', '1 hour') AS tk2 \gset
EXECUTE upd(:tk2, 3);
CALL flush();
SELECT * FROM calls();
DROP TRIGGER a_touch ON r;
-- fence_unprotect since the plan: the plan is made again, nothing checks
SELECT fence_unprotect('r');
EXECUTE upd(12345, 4);
CALL flush();
SELECT * FROM calls();
SELECT fence_protect('r');
RESET plan_cache_mode;
DEALLOCATE upd;
-- PL/pgSQL (SPI, a kept plan)
CREATE FUNCTION write_r(tok bigint, rid int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN UPDATE r SET v = 'L', writer_epoch = tok WHERE id = rid; END $$;
SELECT fence_claim('L', '1 hour') AS tl \gset
SELECT write_r(:tl, 1);
SELECT write_r(:tl, 2);
SELECT write_r(:ta, 3);
CALL flush();
SELECT * FROM calls();

DROP FUNCTION write_r(bigint, int);
DROP TABLE r, r_plain, p, ih, ih_c, g, tok, seen;
DROP FUNCTION touch(), keep(), calls(), explain_check(text);
DROP PROCEDURE flush();
DROP EXTENSION fence;
