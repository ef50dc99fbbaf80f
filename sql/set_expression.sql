--
-- set_expression: ALTER COLUMN ... SET EXPRESSION (PostgreSQL 17 and later)
-- computes a stored generated column again in every row of the table, with
-- no token and no trigger, as ALTER COLUMN ... TYPE ... USING does.  The
-- table_rewrite check refuses it (5F006) on a protected table unless
-- declared, like every rewrite that writes values no token checked.  The
-- twin: on a table fence does not protect, the same command rewrites every
-- row.  (On 15 and 16 there is no SET EXPRESSION: expected/set_expression_1.out.)
--
SELECT current_setting('server_version_num')::int < 170000 AS no_set_expression \gset
\if :no_set_expression
\echo 'ALTER COLUMN ... SET EXPRESSION needs PostgreSQL 17 or later'
\quit
\endif
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (t bigint);
INSERT INTO tok SELECT fence_claim('set-expression', '1 hour');

CREATE TABLE acct (id int PRIMARY KEY, balance int,
	shown int GENERATED ALWAYS AS (balance) STORED, writer_epoch bigint);
CREATE TABLE acct_plain (LIKE acct INCLUDING ALL);
SELECT fence_protect('acct');
BEGIN;
SELECT fence_begin('set-expression', (SELECT t FROM tok));
INSERT INTO acct (id, balance, writer_epoch) VALUES (1, 100, (SELECT t FROM tok));
COMMIT;
INSERT INTO acct_plain (id, balance, writer_epoch) VALUES (1, 100, 0);

-- refused: every row would get a value no token checked
\set VERBOSITY terse
ALTER TABLE acct ALTER COLUMN shown SET EXPRESSION AS (balance * 0 - 1);
\set VERBOSITY sqlstate
SELECT id, balance, shown FROM acct;
-- the same change spelt ALTER COLUMN ... TYPE ... USING is refused too
ALTER TABLE acct ALTER COLUMN balance TYPE int USING -1;
\echo :SQLSTATE
-- on a partitioned table: refused for its partition, declared on the parent
-- it goes through
CREATE TABLE pt (id int, balance int, shown int GENERATED ALWAYS AS (balance) STORED,
	writer_epoch bigint) PARTITION BY LIST (id);
CREATE TABLE pt_a PARTITION OF pt FOR VALUES IN (1);
SELECT fence_protect('pt');
ALTER TABLE pt ALTER COLUMN shown SET EXPRESSION AS (balance + 1);
\echo :SQLSTATE

-- twin: the table fence does not protect is rewritten
ALTER TABLE acct_plain ALTER COLUMN shown SET EXPRESSION AS (balance * 0 - 1);
SELECT id, balance, shown FROM acct_plain;

-- declared, it lands, and is recorded
BEGIN;
SELECT fence_allow_ddl('acct', 'show cents');
ALTER TABLE acct ALTER COLUMN shown SET EXPRESSION AS (balance * 100);
COMMIT;
BEGIN;
SELECT fence_allow_ddl('pt', 'show one more');
ALTER TABLE pt ALTER COLUMN shown SET EXPRESSION AS (balance + 1);
COMMIT;
SELECT id, balance, shown FROM acct;
SELECT action, relation, reason FROM fence_audit_log WHERE action = 'allow_ddl' ORDER BY id;
-- still protected
UPDATE acct SET balance = 0;
\echo :SQLSTATE

DROP TABLE acct, acct_plain, pt;
DROP EXTENSION fence;
