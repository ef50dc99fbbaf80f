--
-- typed_tables: a typed table (CREATE TABLE ... OF a composite type) takes
-- its columns from the type, and ALTER TYPE ... CASCADE changes them: the
-- end-of-command check reaches the typed tables of an altered type.
-- RENAME ATTRIBUTE of the epoch column (which ALTER TABLE ... RENAME COLUMN
-- cannot do), DROP ATTRIBUTE of it, a change of its type: each is refused
-- (5F006) and rolled back.  The twin: the same commands on the type of a
-- table fence does not protect land, and then ADD ATTRIBUTE gives every row
-- a NULL epoch, over which an older token's UPDATE writes in strict mode.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint);
INSERT INTO tok SELECT 'old', fence_claim('typed-old', '1 hour');
INSERT INTO tok SELECT 'new', fence_claim('typed-new', '1 hour');

CREATE TYPE acct_t AS (id int, v int, writer_epoch bigint);
CREATE TABLE acct OF acct_t (PRIMARY KEY (id));
SELECT fence_protect('acct');
BEGIN;
SELECT fence_begin('typed-new', (SELECT t FROM tok WHERE name = 'new'));
INSERT INTO acct VALUES (1, 100, (SELECT t FROM tok WHERE name = 'new'));
COMMIT;

-- RENAME ATTRIBUTE ... CASCADE renames the epoch column: refused
\set VERBOSITY terse
ALTER TYPE acct_t RENAME ATTRIBUTE writer_epoch TO was_epoch CASCADE;
\set VERBOSITY sqlstate
-- (as ALTER TABLE ... RENAME COLUMN is)
ALTER TABLE acct RENAME COLUMN writer_epoch TO was_epoch;
\echo :SQLSTATE
-- DROP ATTRIBUTE ... CASCADE, ALTER ATTRIBUTE ... TYPE ... CASCADE
ALTER TYPE acct_t DROP ATTRIBUTE writer_epoch CASCADE;
\echo :SQLSTATE
ALTER TYPE acct_t ALTER ATTRIBUTE writer_epoch TYPE int CASCADE;
\echo :SQLSTATE
-- an attribute fence does not look at may change
ALTER TYPE acct_t ADD ATTRIBUTE note text CASCADE;
ALTER TYPE acct_t RENAME ATTRIBUTE note TO remark CASCADE;
SELECT attname FROM pg_attribute WHERE attrelid = 'acct'::regclass AND attnum > 0
   AND NOT attisdropped ORDER BY attnum;
-- the older token's write is still fenced
BEGIN;
SELECT fence_begin('typed-old', (SELECT t FROM tok WHERE name = 'old'));
UPDATE acct SET v = -1 WHERE id = 1;
\echo :SQLSTATE
ROLLBACK;
SELECT id, v FROM acct;

-- twin: on the type of a table fence does not protect the rename lands,
-- ADD ATTRIBUTE gives every row a NULL epoch, and once the table is
-- protected an older token's UPDATE writes over the newer row
CREATE TYPE plain_t AS (id int, v int, writer_epoch bigint);
CREATE TABLE plain OF plain_t (PRIMARY KEY (id));
INSERT INTO plain VALUES (1, 100, (SELECT t FROM tok WHERE name = 'new'));
ALTER TYPE plain_t RENAME ATTRIBUTE writer_epoch TO was_epoch CASCADE;
ALTER TYPE plain_t ADD ATTRIBUTE writer_epoch bigint CASCADE;
SELECT fence_protect('plain');
BEGIN;
SELECT fence_begin('typed-old', (SELECT t FROM tok WHERE name = 'old'));
UPDATE plain SET v = -1 WHERE id = 1;
COMMIT;
SELECT id, v, writer_epoch = (SELECT t FROM tok WHERE name = 'old') AS old_token_wrote FROM plain;

-- declared, the rename lands; left so (the end of a command that fence's
-- event triggers did not see could leave it so too), fence_audit reports
-- the typed table, and renaming the attribute back repairs it
BEGIN;
SELECT fence_allow_ddl('acct', 'rename for a while');
ALTER TYPE acct_t RENAME ATTRIBUTE writer_epoch TO was_epoch CASCADE;
COMMIT;
SELECT severity, relation, problem FROM fence_audit() WHERE relation = 'acct'::regclass;
BEGIN;
SELECT fence_allow_ddl('acct', 'rename back');
ALTER TYPE acct_t RENAME ATTRIBUTE was_epoch TO writer_epoch CASCADE;
COMMIT;
SELECT count(*) AS acct_findings FROM fence_audit() WHERE relation = 'acct'::regclass;

DROP TABLE acct, plain;
DROP TYPE acct_t, plain_t;
DROP EXTENSION fence;
