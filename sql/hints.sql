--
-- hints: what an error tells a newcomer to do (issue 31, item 1).
--
--  * An epoch column that is not bigint: the ALTER COLUMN ... TYPE bigint
--    to run (fence_protect, 42804).
--  * A write without a token (5F003): fence_begin, the token in the
--    column, or fence_begin_fresh() for a writer that is not a job.
--  * DISABLE TRIGGER ALL on a protected table (5F006), as a data-only
--    restore with --disable-triggers runs it: the detail names
--    PGOPTIONS='-c fence.allow_ddl=on'.
--  * fence_audit() on stored epochs above the counter: the fix is
--    fence_advance(), as the 5F002 "from the future" hint says.
--  * fence_protect of a table whose epochs lie above the counter (the
--    extension re-created): a NOTICE naming fence_advance; none for a
--    table whose epochs the counter covers, nor in shared mode.
--  * fence_claim('x', 30): the lease is an interval.  A number is no
--    interval, and PostgreSQL itself refuses the call (42883, "function
--    fence_claim(unknown, integer) does not exist"); fence cannot add an
--    overload taking seconds without making fence_claim('x', '30 s')
--    ambiguous.
--
CREATE EXTENSION fence;
\set VERBOSITY default

-- the epoch column's type
CREATE TABLE h_int (id int PRIMARY KEY, writer_epoch integer);
SELECT fence_protect('h_int');
ALTER TABLE h_int ALTER COLUMN writer_epoch TYPE bigint;
SELECT fence_protect('h_int');

-- 5F003, with fence_begin_fresh in the hint; the twin: under
-- fence_begin_fresh the same write lands
INSERT INTO h_int VALUES (1, NULL);
BEGIN;
SELECT fence_begin_fresh() IS NOT NULL AS fresh;
INSERT INTO h_int VALUES (1, NULL);
COMMIT;
SELECT id, writer_epoch > 0 AS stamped FROM h_int;

-- DISABLE TRIGGER ALL
ALTER TABLE h_int DISABLE TRIGGER ALL;

-- fence_protect of rows whose epochs are above the counter: the NOTICE;
-- fence_audit's fix for them
CREATE TABLE h_future (id int PRIMARY KEY, writer_epoch bigint);
INSERT INTO h_future VALUES (1, 9000000000);
SELECT fence_protect('h_future');
SELECT severity, problem ~ 'above the counter' AS above, fix
  FROM fence_audit(scan_rows => true) WHERE relation = 'h_future'::regclass;
-- the twin: shared mode compares no epochs, and says nothing
SELECT fence_protect('h_future', mode => 'shared');
-- after fence_advance, nothing to say
SELECT fence_advance() > 9000000000 AS advanced;
SELECT fence_protect('h_future');
SELECT count(*) AS problems FROM fence_audit(scan_rows => true)
 WHERE relation = 'h_future'::regclass AND severity = 'error';

-- the lease is an interval: PostgreSQL's own error for a number
\set VERBOSITY terse
SELECT fence_claim('h-job', 30);
\set VERBOSITY default
SELECT fence_claim('h-job', '30 seconds') IS NOT NULL AS claimed;

DROP TABLE h_int, h_future;
DROP EXTENSION fence;
