--
-- rewrite_reasons: the table_rewrite check refuses every rewrite of a
-- protected table that writes values no token checked, whatever its
-- reason, not only a change of column type: a new column's volatile
-- default, a new stored generated column (and SET EXPRESSION from 17 on,
-- sql/set_expression).  Declared, each lands.  A rewrite that copies the
-- rows as they are (SET LOGGED, SET ACCESS METHOD) goes through, and so
-- does a new column whose default is a constant (no rewrite).  The twin:
-- on a table fence does not protect, the rewrite stamps every row.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (t bigint);
INSERT INTO tok SELECT fence_claim('rewrite-reasons', '1 hour');
CREATE TABLE acct (id int PRIMARY KEY, balance int, writer_epoch bigint);
CREATE TABLE acct_plain (LIKE acct INCLUDING ALL);
SELECT fence_protect('acct');
BEGIN;
SELECT fence_begin('rewrite-reasons', (SELECT t FROM tok));
INSERT INTO acct VALUES (1, 100, (SELECT t FROM tok)), (2, 200, (SELECT t FROM tok));
COMMIT;
INSERT INTO acct_plain VALUES (1, 100, 0), (2, 200, 0);
CREATE SEQUENCE stamp;

-- a volatile default: every row gets a value no token checked
\set VERBOSITY terse
ALTER TABLE acct ADD COLUMN serial_no bigint DEFAULT nextval('stamp');
\set VERBOSITY sqlstate
-- a stored generated column
ALTER TABLE acct ADD COLUMN doubled int GENERATED ALWAYS AS (balance * 2) STORED;
\echo :SQLSTATE
SELECT count(*) AS acct_columns FROM pg_attribute
 WHERE attrelid = 'acct'::regclass AND attnum > 0 AND NOT attisdropped;
-- twin: the table fence does not protect is stamped
ALTER TABLE acct_plain ADD COLUMN serial_no bigint DEFAULT nextval('stamp');
SELECT id, serial_no IS NOT NULL AS stamped FROM acct_plain ORDER BY id;

-- what copies the rows as they are goes through (SET LOGGED does too, but
-- only a logged table can be protected), and so does a constant default,
-- which rewrites nothing
ALTER TABLE acct SET ACCESS METHOD heap;
ALTER TABLE acct ADD COLUMN note text DEFAULT 'n/a';

-- declared, the rewrite lands and is recorded
BEGIN;
SELECT fence_allow_ddl('acct', 'number the rows');
ALTER TABLE acct ADD COLUMN serial_no bigint DEFAULT nextval('stamp');
COMMIT;
SELECT id, balance, serial_no IS NOT NULL AS stamped FROM acct ORDER BY id;
SELECT action, relation, reason FROM fence_audit_log WHERE action = 'allow_ddl' ORDER BY id;
-- still protected
UPDATE acct SET balance = 0;
\echo :SQLSTATE

DROP TABLE acct, acct_plain;
DROP SEQUENCE stamp;
DROP EXTENSION fence;
