--
-- protect: fence_protect / fence_unprotect, the triggers they create and
-- replace, and their errors (42P01, 42703, 42804, 22023, 42704).
-- Ownership checks (42501) are in privileges.sql.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TABLE t (id int PRIMARY KEY, writer_epoch bigint, ver bigint,
                n int, txt text, num numeric, small smallint);
INSERT INTO t VALUES (1, NULL, NULL, 0);
SELECT fence_claim('job-1', '1 hour') AS t1 \gset
SELECT fence_claim('job-2', '1 hour') AS t2 \gset

CREATE FUNCTION triggers_of(tbl regclass) RETURNS TABLE (tgname name, tgenabled "char", def text)
LANGUAGE sql AS $$
  SELECT tgname, tgenabled, pg_get_triggerdef(oid) FROM pg_trigger
   WHERE tgrelid = tbl ORDER BY tgname
$$;

-- defaults: column writer_epoch, mode strict
SELECT fence_protect('t');
SELECT * FROM triggers_of('t');
UPDATE t SET n = 1;
UPDATE t SET n = 1, writer_epoch = :t1;
UPDATE t SET n = 2, writer_epoch = :t1;
TRUNCATE t;

-- protecting again replaces the triggers: new column and mode
SELECT fence_protect('t', 'ver', 'repeat');
SELECT * FROM triggers_of('t');
-- now ver carries the token; writer_epoch is an ordinary column
UPDATE t SET n = 3, writer_epoch = :t2;
UPDATE t SET n = 3, ver = :t2;
UPDATE t SET n = 4, ver = :t2;
SELECT fence_protect('t', 'ver', 'shared');
SELECT * FROM triggers_of('t');
UPDATE t SET n = 5, ver = :t1;
SELECT n, writer_epoch = :t1 AS writer_epoch_t1, ver = :t1 AS ver_t1 FROM t;

-- errors; none of them touches the existing protection
SELECT fence_protect('no_such_table');
SELECT fence_protect('no_such_table', 'writer_epoch', 'strict');
SELECT fence_protect(4000000000::oid::regclass);
SELECT fence_protect('t', 'no_such_column');
SELECT fence_protect('t', 'n');
SELECT fence_protect('t', 'small');
SELECT fence_protect('t', 'txt');
SELECT fence_protect('t', 'num');
SELECT fence_protect('t', 'xmin');
SELECT fence_protect('t', 'writer_epoch', 'bogus');
SELECT fence_protect('t', 'writer_epoch', '');
SELECT fence_protect('t', 'writer_epoch', 'Strict');
SELECT fence_protect('t', 'writer_epoch', NULL);
SELECT fence_protect('t', NULL);
SELECT fence_protect(NULL);
SELECT * FROM triggers_of('t');

-- objects that cannot carry the guard
CREATE VIEW tv AS SELECT * FROM t;
SELECT fence_protect('tv');
CREATE SEQUENCE tseq;
SELECT fence_protect('tseq');
DROP VIEW tv;
DROP SEQUENCE tseq;

-- fence_unprotect removes both triggers: writes and TRUNCATE are plain again
SELECT fence_unprotect('t');
SELECT * FROM triggers_of('t');
UPDATE t SET n = 6;
TRUNCATE t;
-- not protected (any more)
SELECT fence_unprotect('t');
SELECT fence_unprotect('no_such_table');
SELECT fence_unprotect(4000000000::oid::regclass);
SELECT fence_unprotect(NULL);

-- names that need quoting, in a schema not on the search_path
CREATE SCHEMA "Odd Schema";
CREATE TABLE "Odd Schema"."Odd ""Table""" (id int, "Epoch ""Col""" bigint);
SELECT fence_protect('"Odd Schema"."Odd ""Table"""', 'Epoch "Col"', 'repeat');
SELECT * FROM triggers_of('"Odd Schema"."Odd ""Table"""');
INSERT INTO "Odd Schema"."Odd ""Table""" (id) VALUES (1);
INSERT INTO "Odd Schema"."Odd ""Table""" VALUES (1, :t2);
UPDATE "Odd Schema"."Odd ""Table""" SET id = 2, "Epoch ""Col""" = :t1;
SELECT id, "Epoch ""Col""" = :t2 AS stamped_t2 FROM "Odd Schema"."Odd ""Table""";
SELECT fence_unprotect('"Odd Schema"."Odd ""Table"""');
DROP SCHEMA "Odd Schema" CASCADE;

-- a partitioned table: unprotecting the parent unprotects every partition
CREATE TABLE p (k int, writer_epoch bigint) PARTITION BY RANGE (k);
CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10);
SELECT fence_protect('p');
CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (20);
INSERT INTO p VALUES (1), (11);
SELECT fence_protect('p', 'writer_epoch', 'repeat');
SELECT * FROM triggers_of('p2');
SELECT fence_unprotect('p');
SELECT count(*) AS guard_triggers FROM pg_trigger
 WHERE tgrelid IN ('p'::regclass, 'p1'::regclass, 'p2'::regclass) AND tgname LIKE 'zz_fence%';
INSERT INTO p VALUES (1), (11);
TRUNCATE p1;
TRUNCATE p;

DROP TABLE t, p;
DROP FUNCTION triggers_of(regclass);
DROP EXTENSION fence;
