--
-- caller_bugs: class 5F means "fenced", and only that (issue 31, item 1).
-- Three mistakes of the caller's own are not fencing, and have their own
-- SQLSTATEs in class 5G, with a message naming what was passed and what
-- fence expected:
--
--  5G001  a token used under another job's name: the token's claim row
--         names another job, or the named job's latest token is lower (a
--         job's tokens only rise), or the job was never claimed and the
--         token is another job's;
--  5G002  a token this database never issued;
--  5G003  in strict mode, a second write of one row by one execution (the
--         row holds the very token the write carries).
--
-- Each has its twin: the real stale write, by a superseded execution,
-- still gets its 5F code, and on an unprotected copy of the table the
-- stale write lands.  fence_release keeps its boolean: false for each.
--
CREATE EXTENSION fence;

-- The error, with the numbers (tokens differ from run to run) as N; the
-- digits of a job's name stay.
CREATE FUNCTION pg_temp.err(stmt text)
RETURNS TABLE (sqlstate text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
DECLARE
	m text;
	d text;
	h text;
BEGIN
	EXECUTE stmt;
	RETURN QUERY SELECT 'no error'::text, NULL::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
	RETURN QUERY SELECT SQLSTATE::text,
		regexp_replace(m, '(^|[^:A-Za-z0-9-])[0-9]+', '\1N', 'g'),
		regexp_replace(d, '(^|[^:A-Za-z0-9-])[0-9]+', '\1N', 'g'),
		regexp_replace(h, '(^|[^:A-Za-z0-9-])[0-9]+', '\1N', 'g');
END
$$;

CREATE TABLE job_result (id int PRIMARY KEY, v text, writer_epoch bigint);
CREATE TABLE job_result_plain (LIKE job_result);
SELECT fence_protect('job_result');
SELECT fence_claim('seed', '1 hour') AS t0 \gset
INSERT INTO job_result VALUES (1, 'new', :t0), (2, 'new', :t0);
INSERT INTO job_result_plain VALUES (1, 'new', :t0), (2, 'new', :t0);

\x on

--
-- 5G001 (a): the job name differs from the one used at claim time.
--
SELECT fence_claim('graphile-worker:042', '1 hour') AS t42 \gset
SELECT * FROM pg_temp.err(format($$SELECT fence_begin('graphile-worker:42', %s)$$, :t42));
SELECT * FROM pg_temp.err(format($$SELECT fence_renew('graphile-worker:42', %s)$$, :t42));
-- the right name binds
SELECT * FROM pg_temp.err(format($$SELECT fence_begin('graphile-worker:042', %s)$$, :t42));

--
-- 5G001 (b): another job's token, newer than the named job's own.  (Before
-- 1.1 this read "token 21 of job m7 has been superseded ... now held by
-- token 20".)
--
SELECT fence_claim('m7', '1 hour') AS t7 \gset
SELECT fence_claim('m9', '1 hour') AS t9 \gset
SELECT :t9 > :t7 AS m9_is_newer;
SELECT * FROM pg_temp.err(format($$SELECT fence_begin('m7', %s)$$, :t9));
-- also once m9's claim has moved on, so that no row holds t9: m7's
-- latest token is below t9, which cannot have been m7's
SELECT fence_release('m9', :t9) AS released;
SELECT fence_claim('m9', '1 hour') AS t9b \gset
SELECT * FROM pg_temp.err(format($$SELECT fence_renew('m7', %s)$$, :t9));
-- fence_release keeps its boolean
SELECT fence_release('m7', :t9) AS wrong_job_release;
SELECT fence_current('m7') = :t7 AS m7_untouched;

--
-- The twin of 5G001: m7's own earlier token, after a takeover, is fenced:
-- 5F001, and the stale write lands on the unprotected copy.
--
SELECT fence_claim('m7-x', '1 millisecond') AS tx_old \gset
SELECT pg_sleep(0.02);
SELECT fence_claim('m7-x', '1 hour') AS tx_new \gset
UPDATE job_result SET v = 'taker', writer_epoch = :tx_new WHERE id = 1;
UPDATE job_result_plain SET v = 'taker', writer_epoch = :tx_new WHERE id = 1;
SELECT * FROM pg_temp.err(format($$SELECT fence_begin('m7-x', %s)$$, :tx_old));
SELECT * FROM pg_temp.err(format($$UPDATE job_result SET v = 'stale', writer_epoch = %s WHERE id = 1$$, :tx_old));
UPDATE job_result_plain SET v = 'stale', writer_epoch = :tx_old WHERE id = 1;
SELECT 'protected' AS tbl, v FROM job_result WHERE id = 1
UNION ALL
SELECT 'plain', v FROM job_result_plain WHERE id = 1;

--
-- 5G002: a token never issued, in the guard and in the functions that
-- name a job; the last token issued is in the detail.
--
SELECT * FROM pg_temp.err(format($$UPDATE job_result SET v = 'forged', writer_epoch = %s WHERE id = 2$$, :tx_new + 1000000));
SELECT * FROM pg_temp.err(format($$SELECT fence_begin('m7', %s)$$, :t7 + 1000000));
SELECT fence_release('m7', :t7 + 1000000) AS never_issued_release;

--
-- 5G003: "mark running, then mark done" by one execution, in strict mode.
--
SELECT fence_claim('two-step', '1 hour') AS ts \gset
SELECT * FROM pg_temp.err(format($$UPDATE job_result SET v = 'running', writer_epoch = %s WHERE id = 2$$, :ts));
SELECT * FROM pg_temp.err(format($$UPDATE job_result SET v = 'done', writer_epoch = %s WHERE id = 2$$, :ts));
-- through the binding too
BEGIN;
SELECT fence_begin('two-step', :ts) IS NOT NULL AS bound;
SELECT * FROM pg_temp.err($$UPDATE job_result SET v = 'done' WHERE id = 2$$);
ROLLBACK;
-- the fix the hint names: repeat mode takes the second write
SELECT fence_protect('job_result', mode => 'repeat');
SELECT * FROM pg_temp.err(format($$UPDATE job_result SET v = 'done', writer_epoch = %s WHERE id = 2$$, :ts));
SELECT fence_protect('job_result', mode => 'strict');

--
-- The twin of 5G003: an older execution, still current, after a newer one
-- wrote the row: 5F002 (fenced), and on the unprotected copy it lands.
--
SELECT fence_claim('older', '1 hour') AS to_ \gset
SELECT fence_claim('newer', '1 hour') AS tn \gset
UPDATE job_result SET v = 'newer', writer_epoch = :tn WHERE id = 2;
UPDATE job_result_plain SET v = 'newer', writer_epoch = :tn WHERE id = 2;
SELECT * FROM pg_temp.err(format($$UPDATE job_result SET v = 'older', writer_epoch = %s WHERE id = 2$$, :to_));
UPDATE job_result_plain SET v = 'older', writer_epoch = :to_ WHERE id = 2;
SELECT 'protected' AS tbl, v FROM job_result WHERE id = 2
UNION ALL
SELECT 'plain', v FROM job_result_plain WHERE id = 2;

\x off
SELECT id, v FROM job_result ORDER BY id;

DROP TABLE job_result, job_result_plain;
DROP EXTENSION fence;
