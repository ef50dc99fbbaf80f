--
-- ddl_refused: the DDL that would disarm a protected table is refused
-- (5F006), for the table's owner and for a superuser alike, and what it
-- would have done did not happen. Each group runs as the owner (a plain
-- role that owns the tables) and again as a superuser, then on an
-- unprotected twin (*_plain, or a look-alike trigger that calls another
-- function), where PostgreSQL lets the same command through: the refusal is
-- fence's, not PostgreSQL's.
--   1. fence's triggers: DISABLE (by name, ALL, USER), ENABLE (origin only)
--      and ENABLE REPLICA, DROP, ALTER TRIGGER ... RENAME, CREATE OR REPLACE;
--      also inside a multi-command ALTER TABLE and on a partition. The
--      boundary: ENABLE ALWAYS, ENABLE TRIGGER ALL|USER (fence's triggers
--      stay ALWAYS) and the table's own triggers are not refused.
--   2. a trigger calling fence_guard / fence_refuse_truncate in any form but
--      the canonical one, on any table.
--   3. ALTER COLUMN ... TYPE ... USING (any column); the epoch column's
--      TYPE, RENAME, DROP, SET DEFAULT (but 0 and NULL).
--   4. SET UNLOGGED; CREATE UNLOGGED TABLE ... PARTITION OF.
--   5. CREATE RULE.
--   6. CREATE TRIGGER by a role holding the TRIGGER privilege, not owning.
--   7. ATTACH PARTITION / INHERIT of a non-empty table that is not protected
--      with the same column and mode.
--   8. DROP EXTENSION fence while a table is protected; ALTER SEQUENCE
--      fence_token_seq (any option), by anyone (the table's owner owns
--      neither). Their twins: an ordinary sequence; the DROP EXTENSION at
--      the end, once nothing is protected.
--   9. a few refusals with their full message.
-- fence_begin inside a trigger and the token claimed mid-statement
-- (5F006/5F004) are in ddl_allowed; the declared paths in ddl_declared.
--
-- Token values vary from run to run: they are kept in psql variables and
-- compared, never printed.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_ddl_owner;
CREATE ROLE fence_regress_ddl_trigger;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_ddl_owner');
SELECT fence_grant_worker('fence_regress_ddl_trigger');
GRANT CREATE ON SCHEMA public TO fence_regress_ddl_owner;

-- What a table looks like: its triggers (function, firing state), columns
-- (type, default), persistence, rules and its fence_protected row.
CREATE FUNCTION shape(tbl regclass) RETURNS TABLE (item text, state text)
LANGUAGE sql STABLE AS $$
  SELECT s.item, s.state FROM (
    SELECT 'trigger ' || t.tgname::text AS item,
           t.tgfoid::regproc::text || ' ' || t.tgenabled::text AS state
      FROM pg_trigger t WHERE t.tgrelid = tbl AND NOT t.tgisinternal
    UNION ALL
    SELECT 'column ' || a.attname::text,
           format_type(a.atttypid, a.atttypmod)
           || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
      FROM pg_attribute a
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'persistence', c.relpersistence::text FROM pg_class c WHERE c.oid = tbl
    UNION ALL
    SELECT 'rules', count(*)::text FROM pg_rewrite r WHERE r.ev_class = tbl
    UNION ALL
    SELECT 'registry', coalesce((SELECT p.epoch_column::text || ' ' || p.mode
                                   FROM fence_protected p WHERE p.relation = tbl), 'none')
  ) s ORDER BY 1
$$;
CREATE FUNCTION noop_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE FUNCTION noop_stmt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

SET ROLE fence_regress_ddl_owner;
-- acct: protected (strict, writer_epoch); acct_plain: its unprotected twin.
-- Every row carries token tk in its epoch column.
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, note text,
                   writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO acct VALUES (1, 100, 'one'), (2, 200, 'two');
CREATE TABLE acct_plain (LIKE acct INCLUDING ALL);
INSERT INTO acct_plain SELECT * FROM acct;
SELECT fence_protect('acct');
SELECT fence_claim('ddl-refused', '1 hour') AS tk \gset
UPDATE acct SET writer_epoch = :tk;
UPDATE acct_plain SET writer_epoch = :tk;
-- a trigger of the table's own, and on the twin look-alikes of fence's
-- triggers that call another function
CREATE TRIGGER aa_touch BEFORE UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON acct_plain
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON acct_plain
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
-- ev: a protected partitioned table; ev_plain its twin, with a look-alike
-- guard cloned to its partition
CREATE TABLE ev (region text NOT NULL, id int NOT NULL, v text, writer_epoch bigint,
                 alt_epoch bigint) PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
INSERT INTO ev VALUES ('eu', 1, 'init', NULL, NULL);
SELECT fence_protect('ev');
CREATE TABLE ev_plain (LIKE ev) PARTITION BY LIST (region);
CREATE TABLE ev_plain_eu PARTITION OF ev_plain FOR VALUES IN ('eu');
INSERT INTO ev_plain VALUES ('eu', 1, 'init', NULL, NULL);
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON ev_plain
  FOR EACH ROW EXECUTE FUNCTION noop_row();
-- lp: a protected parent for legacy inheritance; lp_plain its twin
CREATE TABLE lp (id int, v text, writer_epoch bigint);
SELECT fence_protect('lp');
CREATE TABLE lp_plain (LIKE lp);
-- misc: an unprotected table for triggers that call fence's functions
CREATE TABLE misc (id int, n int, writer_epoch bigint);
RESET ROLE;

SELECT * FROM shape('acct');
SELECT relation::text, epoch_column, mode FROM fence_protected ORDER BY 1;

--
-- 1. fence's triggers.
--
-- as the owner
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct DISABLE TRIGGER zz_fence_truncate;
ALTER TABLE acct DISABLE TRIGGER ALL;
ALTER TABLE acct DISABLE TRIGGER USER;
ALTER TABLE acct ENABLE TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE TRIGGER zz_fence_truncate;
ALTER TABLE acct ENABLE REPLICA TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE REPLICA TRIGGER zz_fence_truncate;
DROP TRIGGER zz_fence_guard ON acct;
DROP TRIGGER zz_fence_truncate ON acct;
DROP TRIGGER IF EXISTS zz_fence_guard ON acct;
ALTER TRIGGER zz_fence_guard ON acct RENAME TO aa_fence_guard;
ALTER TRIGGER zz_fence_truncate ON acct RENAME TO aa_fence_truncate;
CREATE OR REPLACE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE OR REPLACE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
CREATE OR REPLACE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON acct
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
-- one refused subcommand refuses the whole ALTER TABLE
ALTER TABLE acct ADD COLUMN extra int, DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE TRIGGER aa_touch, DISABLE TRIGGER ALL;
-- a partitioned table and its partition (the guard there is the parent's clone)
ALTER TABLE ev DISABLE TRIGGER ALL;
ALTER TABLE ev DISABLE TRIGGER zz_fence_guard;
ALTER TABLE ev_eu DISABLE TRIGGER ALL;
ALTER TABLE ev_eu DISABLE TRIGGER zz_fence_guard;
ALTER TABLE ev_eu ENABLE REPLICA TRIGGER zz_fence_guard;
ALTER TABLE ev_eu DISABLE TRIGGER zz_fence_truncate;
RESET ROLE;
SELECT * FROM shape('acct');
SELECT * FROM shape('ev_eu') WHERE item LIKE 'trigger %';
-- as a superuser
ALTER TABLE acct DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct DISABLE TRIGGER zz_fence_truncate;
ALTER TABLE acct DISABLE TRIGGER ALL;
ALTER TABLE acct DISABLE TRIGGER USER;
ALTER TABLE acct ENABLE TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE TRIGGER zz_fence_truncate;
ALTER TABLE acct ENABLE REPLICA TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE REPLICA TRIGGER zz_fence_truncate;
DROP TRIGGER zz_fence_guard ON acct;
DROP TRIGGER zz_fence_truncate ON acct;
DROP TRIGGER IF EXISTS zz_fence_guard ON acct;
ALTER TRIGGER zz_fence_guard ON acct RENAME TO aa_fence_guard;
ALTER TRIGGER zz_fence_truncate ON acct RENAME TO aa_fence_truncate;
CREATE OR REPLACE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE OR REPLACE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
CREATE OR REPLACE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON acct
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
ALTER TABLE acct ADD COLUMN extra int, DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE TRIGGER aa_touch, DISABLE TRIGGER ALL;
ALTER TABLE ev DISABLE TRIGGER ALL;
ALTER TABLE ev DISABLE TRIGGER zz_fence_guard;
ALTER TABLE ev_eu DISABLE TRIGGER ALL;
ALTER TABLE ev_eu DISABLE TRIGGER zz_fence_guard;
ALTER TABLE ev_eu ENABLE REPLICA TRIGGER zz_fence_guard;
ALTER TABLE ev_eu DISABLE TRIGGER zz_fence_truncate;
-- in a transaction block, and under session_replication_role = replica
BEGIN;
SET LOCAL session_replication_role = replica;
ALTER TABLE acct DISABLE TRIGGER ALL;
ROLLBACK;
-- nothing changed: both triggers are there, fence's functions, ALWAYS; no extra column
SELECT * FROM shape('acct');
SELECT * FROM shape('ev') WHERE item LIKE 'trigger %';
SELECT * FROM shape('ev_eu') WHERE item LIKE 'trigger %';
-- and the writes they would have let through are still refused
UPDATE acct SET balance = 0;
SET session_replication_role = replica;
UPDATE acct SET balance = 0;
RESET session_replication_role;
TRUNCATE acct;
UPDATE ev_eu SET v = 'unchecked';
SELECT id, balance, note, writer_epoch = :tk AS epoch_is_tk FROM acct ORDER BY id;

-- the boundary, as the owner: ENABLE ALWAYS of fence's triggers; ENABLE
-- TRIGGER ALL / USER, which leave fence's triggers ALWAYS; anything on the
-- table's own triggers
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct ENABLE ALWAYS TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE ALWAYS TRIGGER zz_fence_truncate;
ALTER TABLE acct DISABLE TRIGGER aa_touch;
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
ALTER TABLE acct ENABLE TRIGGER ALL;
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
ALTER TABLE acct ENABLE REPLICA TRIGGER aa_touch;
ALTER TABLE acct ENABLE TRIGGER USER;
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
ALTER TRIGGER aa_touch ON acct RENAME TO aa_touched;
DROP TRIGGER aa_touched ON acct;
CREATE TRIGGER aa_touch BEFORE UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop_row();
ALTER TABLE ev ENABLE TRIGGER ALL;
-- ... and as a superuser
RESET ROLE;
ALTER TABLE acct ENABLE ALWAYS TRIGGER zz_fence_guard;
ALTER TABLE acct ENABLE TRIGGER ALL;
ALTER TABLE acct ENABLE TRIGGER USER;
ALTER TABLE ev_eu ENABLE TRIGGER ALL;
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
SELECT * FROM shape('ev_eu') WHERE item LIKE 'trigger %';

-- twin, as the owner: on look-alike triggers calling another function,
-- PostgreSQL runs every one of these commands
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct_plain DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct_plain DISABLE TRIGGER zz_fence_truncate;
SELECT * FROM shape('acct_plain') WHERE item LIKE 'trigger %';
ALTER TABLE acct_plain ENABLE TRIGGER ALL;
ALTER TABLE acct_plain DISABLE TRIGGER ALL;
ALTER TABLE acct_plain ENABLE TRIGGER USER;
ALTER TABLE acct_plain DISABLE TRIGGER USER;
ALTER TABLE acct_plain ENABLE TRIGGER zz_fence_guard;
ALTER TABLE acct_plain ENABLE REPLICA TRIGGER zz_fence_truncate;
SELECT * FROM shape('acct_plain') WHERE item LIKE 'trigger %';
ALTER TABLE acct_plain ADD COLUMN extra int, DISABLE TRIGGER zz_fence_guard;
ALTER TABLE acct_plain DROP COLUMN extra;
ALTER TRIGGER zz_fence_guard ON acct_plain RENAME TO aa_fence_guard;
CREATE OR REPLACE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON acct_plain
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
SELECT * FROM shape('acct_plain') WHERE item LIKE 'trigger %';
DROP TRIGGER aa_fence_guard ON acct_plain;
DROP TRIGGER zz_fence_truncate ON acct_plain;
DROP TRIGGER IF EXISTS zz_fence_guard ON acct_plain;
SELECT * FROM shape('acct_plain') WHERE item LIKE 'trigger %';
ALTER TABLE ev_plain DISABLE TRIGGER ALL;
ALTER TABLE ev_plain_eu ENABLE REPLICA TRIGGER zz_fence_guard;
SELECT * FROM shape('ev_plain_eu') WHERE item LIKE 'trigger %';
RESET ROLE;

--
-- 2. Triggers calling fence's functions in any form but the canonical one
-- (zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, no WHEN,
-- no column list, not a constraint trigger, no transition tables, at most
-- a valid bigint column and a valid mode; zz_fence_truncate BEFORE
-- TRUNCATE FOR EACH STATEMENT), on an unprotected table and on a protected
-- one.
--
-- as the owner
SET ROLE fence_regress_ddl_owner;
CREATE TRIGGER my_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict');
CREATE TRIGGER zz_fence_guard AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW WHEN (pg_trigger_depth() > 5) EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OF n OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE CONSTRAINT TRIGGER zz_fence_guard AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard AFTER UPDATE ON misc REFERENCING NEW TABLE AS nt
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('no_such_column');
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('n');
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'bogus');
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict', 'extra');
CREATE TRIGGER zz_fence_truncate BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER my_truncate BEFORE TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER zz_fence_truncate AFTER TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER zz_fence_truncate BEFORE UPDATE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER zz_fence_guard BEFORE TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
-- on a protected table: a second guard, weaker than the first
CREATE TRIGGER aa_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
CREATE TRIGGER aa_guard AFTER UPDATE ON acct
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
RESET ROLE;
-- as a superuser
CREATE TRIGGER my_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict');
CREATE TRIGGER zz_fence_guard AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW WHEN (pg_trigger_depth() > 5) EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OF n OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE CONSTRAINT TRIGGER zz_fence_guard AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard AFTER UPDATE ON misc REFERENCING NEW TABLE AS nt
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('no_such_column');
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('n');
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'bogus');
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'strict', 'extra');
CREATE TRIGGER zz_fence_truncate BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER my_truncate BEFORE TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER zz_fence_truncate AFTER TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER zz_fence_truncate BEFORE UPDATE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER zz_fence_guard BEFORE TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION fence_refuse_truncate();
CREATE TRIGGER aa_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'shared');
CREATE TRIGGER aa_guard AFTER UPDATE ON acct
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
-- none was created, and misc did not become protected
SELECT * FROM shape('misc');
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
-- twin, as the owner: the same shapes calling another function are created
SET ROLE fence_regress_ddl_owner;
CREATE TRIGGER t01 BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER t02 AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER t03 BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
CREATE TRIGGER t04 BEFORE INSERT OR UPDATE ON misc
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER t05 BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW WHEN (pg_trigger_depth() > 5) EXECUTE FUNCTION noop_row();
CREATE TRIGGER t06 BEFORE INSERT OR UPDATE OF n OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE CONSTRAINT TRIGGER t07 AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER t08 AFTER UPDATE ON misc REFERENCING NEW TABLE AS nt
  FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER t09 BEFORE INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION noop_row('writer_epoch', 'strict', 'extra');
CREATE TRIGGER t10 AFTER TRUNCATE ON misc
  FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
CREATE TRIGGER aa_guard BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION noop_row();
SELECT count(*) AS misc_triggers FROM pg_trigger WHERE tgrelid = 'misc'::regclass AND NOT tgisinternal;
DROP TRIGGER aa_guard ON acct;
RESET ROLE;

--
-- 3. Columns: ALTER COLUMN ... TYPE ... USING rewrites every row with no
-- trigger firing; the epoch column is what the guard compares against.
--
-- as the owner
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct ALTER COLUMN balance TYPE int USING 0;
ALTER TABLE acct ALTER COLUMN balance TYPE bigint USING balance::bigint;
ALTER TABLE acct ALTER COLUMN note TYPE text USING 'overwritten';
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE bigint USING 0;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE bigint USING writer_epoch;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE numeric;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE int;
ALTER TABLE acct RENAME COLUMN writer_epoch TO old_epoch;
ALTER TABLE acct RENAME writer_epoch TO old_epoch;
ALTER TABLE acct DROP COLUMN writer_epoch;
ALTER TABLE acct DROP COLUMN writer_epoch CASCADE;
ALTER TABLE acct DROP COLUMN writer_epoch, ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT 42;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT -1;
ALTER TABLE acct ALTER writer_epoch SET DEFAULT 42;
ALTER TABLE ev_eu ALTER COLUMN writer_epoch SET DEFAULT 42;
ALTER TABLE ev ALTER COLUMN v TYPE text USING 'overwritten';
RESET ROLE;
SELECT * FROM shape('acct');
-- as a superuser
ALTER TABLE acct ALTER COLUMN balance TYPE int USING 0;
ALTER TABLE acct ALTER COLUMN balance TYPE bigint USING balance::bigint;
ALTER TABLE acct ALTER COLUMN note TYPE text USING 'overwritten';
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE bigint USING 0;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE bigint USING writer_epoch;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE numeric;
ALTER TABLE acct ALTER COLUMN writer_epoch TYPE int;
ALTER TABLE acct RENAME COLUMN writer_epoch TO old_epoch;
ALTER TABLE acct RENAME writer_epoch TO old_epoch;
ALTER TABLE acct DROP COLUMN writer_epoch;
ALTER TABLE acct DROP COLUMN writer_epoch CASCADE;
ALTER TABLE acct DROP COLUMN writer_epoch, ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT 42;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT -1;
ALTER TABLE acct ALTER writer_epoch SET DEFAULT 42;
ALTER TABLE ev_eu ALTER COLUMN writer_epoch SET DEFAULT 42;
ALTER TABLE ev ALTER COLUMN v TYPE text USING 'overwritten';
-- nothing changed: types, names, defaults and every stored value
SELECT * FROM shape('acct');
SELECT * FROM shape('ev_eu') WHERE item LIKE 'column %';
SELECT id, balance, note, writer_epoch = :tk AS epoch_is_tk FROM acct ORDER BY id;
SELECT region, id, v FROM ev ORDER BY id;
-- the boundary, as the owner: the epoch column's default may be 0 or NULL
-- (or none)
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT 0;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT NULL;
SELECT * FROM shape('acct') WHERE item = 'column writer_epoch';
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT 0;
ALTER TABLE acct ALTER COLUMN writer_epoch DROP DEFAULT;
ALTER TABLE acct ALTER COLUMN writer_epoch SET DEFAULT 0;
SELECT * FROM shape('acct') WHERE item = 'column writer_epoch';
-- twin, as the owner: every one of these changes the unprotected table
ALTER TABLE acct_plain ALTER COLUMN balance TYPE int USING 0;
ALTER TABLE acct_plain ALTER COLUMN note TYPE text USING 'overwritten';
ALTER TABLE acct_plain ALTER COLUMN writer_epoch TYPE bigint USING 0;
SELECT id, balance, note, writer_epoch = :tk AS epoch_is_tk FROM acct_plain ORDER BY id;
ALTER TABLE acct_plain ALTER COLUMN balance TYPE bigint USING balance::bigint;
ALTER TABLE acct_plain ALTER COLUMN writer_epoch SET DEFAULT 42;
ALTER TABLE acct_plain ALTER COLUMN writer_epoch TYPE numeric;
SELECT * FROM shape('acct_plain') WHERE item LIKE 'column %';
ALTER TABLE acct_plain RENAME COLUMN writer_epoch TO old_epoch;
ALTER TABLE acct_plain DROP COLUMN old_epoch;
ALTER TABLE acct_plain ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE acct_plain DROP COLUMN writer_epoch, ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0;
SELECT * FROM shape('acct_plain') WHERE item LIKE 'column %';
ALTER TABLE ev_plain ALTER COLUMN v TYPE text USING 'overwritten';
SELECT region, id, v FROM ev_plain ORDER BY id;
RESET ROLE;

--
-- 4. Unlogged: after a crash an unlogged table comes back empty, and its
-- changes never reach a standby.
--
-- as the owner
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct SET UNLOGGED;
ALTER TABLE acct ADD COLUMN extra int, SET UNLOGGED;
ALTER TABLE ev_eu SET UNLOGGED;
CREATE UNLOGGED TABLE ev_tmp PARTITION OF ev FOR VALUES IN ('tmp');
RESET ROLE;
-- as a superuser
ALTER TABLE acct SET UNLOGGED;
ALTER TABLE acct ADD COLUMN extra int, SET UNLOGGED;
ALTER TABLE ev_eu SET UNLOGGED;
CREATE UNLOGGED TABLE ev_tmp PARTITION OF ev FOR VALUES IN ('tmp');
-- nothing changed
SELECT relname, relpersistence FROM pg_class
 WHERE relname IN ('acct', 'ev_eu', 'ev_tmp') ORDER BY relname;
SELECT * FROM shape('acct') WHERE item NOT LIKE 'trigger %';
-- twin, as the owner
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct_plain SET UNLOGGED;
ALTER TABLE ev_plain_eu SET UNLOGGED;
CREATE UNLOGGED TABLE ev_plain_tmp PARTITION OF ev_plain FOR VALUES IN ('tmp');
SELECT relname, relpersistence FROM pg_class
 WHERE relname IN ('acct_plain', 'ev_plain_eu', 'ev_plain_tmp') ORDER BY relname;
ALTER TABLE acct_plain SET LOGGED;
ALTER TABLE ev_plain_eu SET LOGGED;
DROP TABLE ev_plain_tmp;
RESET ROLE;

--
-- 5. Rules: DO INSTEAD NOTHING makes a fenced writer's statement report
-- success while it writes nothing; DO ALSO / INSTEAD can write elsewhere.
--
-- as the owner
SET ROLE fence_regress_ddl_owner;
CREATE RULE acct_nothing AS ON UPDATE TO acct DO INSTEAD NOTHING;
CREATE OR REPLACE RULE acct_nothing AS ON UPDATE TO acct DO INSTEAD NOTHING;
CREATE RULE acct_ins AS ON INSERT TO acct DO INSTEAD NOTHING;
CREATE RULE acct_del AS ON DELETE TO acct DO ALSO NOTHING;
CREATE RULE ev_eu_nothing AS ON UPDATE TO ev_eu DO INSTEAD NOTHING;
CREATE RULE lp_nothing AS ON DELETE TO lp DO INSTEAD NOTHING;
RESET ROLE;
-- as a superuser
CREATE RULE acct_nothing AS ON UPDATE TO acct DO INSTEAD NOTHING;
CREATE OR REPLACE RULE acct_nothing AS ON UPDATE TO acct DO INSTEAD NOTHING;
CREATE RULE acct_ins AS ON INSERT TO acct DO INSTEAD NOTHING;
CREATE RULE acct_del AS ON DELETE TO acct DO ALSO NOTHING;
CREATE RULE ev_eu_nothing AS ON UPDATE TO ev_eu DO INSTEAD NOTHING;
CREATE RULE lp_nothing AS ON DELETE TO lp DO INSTEAD NOTHING;
-- no rule: a token-less write is still refused, not silently swallowed
SELECT count(*) AS rules FROM pg_rewrite
 WHERE ev_class IN ('acct'::regclass, 'ev_eu'::regclass, 'lp'::regclass);
UPDATE acct SET balance = 0;
-- twin, as the owner: the rule swallows the write, which "succeeds"
SET ROLE fence_regress_ddl_owner;
CREATE RULE acct_plain_nothing AS ON UPDATE TO acct_plain DO INSTEAD NOTHING;
UPDATE acct_plain SET balance = -1;
SELECT id, balance FROM acct_plain ORDER BY id;
DROP RULE acct_plain_nothing ON acct_plain;
RESET ROLE;

--
-- 6. CREATE TRIGGER on a protected table by a role holding only the TRIGGER
-- privilege (part of GRANT ALL): refused, whatever the trigger does. The
-- owner and a superuser may add triggers of their own.
--
SET ROLE fence_regress_ddl_owner;
GRANT SELECT, INSERT, UPDATE, DELETE, TRIGGER ON acct, acct_plain TO fence_regress_ddl_trigger;
SET ROLE fence_regress_ddl_trigger;
CREATE TRIGGER aa_spy BEFORE INSERT OR UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER spy AFTER UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop_row();
CREATE TRIGGER spy AFTER TRUNCATE ON acct FOR EACH STATEMENT EXECUTE FUNCTION noop_stmt();
-- twin: the same role on the unprotected twin
CREATE TRIGGER aa_spy BEFORE INSERT OR UPDATE ON acct_plain FOR EACH ROW EXECUTE FUNCTION noop_row();
RESET ROLE;
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
SELECT * FROM shape('acct_plain') WHERE item LIKE 'trigger %';
-- the boundary: the owner, and a superuser
SET ROLE fence_regress_ddl_owner;
CREATE TRIGGER aa_owner AFTER UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop_row();
RESET ROLE;
CREATE TRIGGER aa_super AFTER UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop_row();
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
DROP TRIGGER aa_owner ON acct;
DROP TRIGGER aa_super ON acct;
DROP TRIGGER aa_spy ON acct_plain;

--
-- 7. ATTACH PARTITION / INHERIT of a table that already holds rows nobody
-- checked, unless it is protected with the same column and mode.
--
SET ROLE fence_regress_ddl_owner;
CREATE TABLE ev_fill (LIKE ev);
INSERT INTO ev_fill VALUES ('fill', 1, 'unchecked', NULL, NULL);
CREATE TABLE ev_shared (LIKE ev);
INSERT INTO ev_shared VALUES ('shared', 1, 'unchecked', NULL, NULL);
SELECT fence_protect('ev_shared', 'writer_epoch', 'shared');
CREATE TABLE ev_alt (LIKE ev);
INSERT INTO ev_alt VALUES ('alt', 1, 'unchecked', NULL, NULL);
SELECT fence_protect('ev_alt', 'alt_epoch');
CREATE TABLE lk (LIKE lp);
INSERT INTO lk VALUES (1, 'unchecked', NULL);
-- as the owner
ALTER TABLE ev ATTACH PARTITION ev_fill FOR VALUES IN ('fill');
ALTER TABLE ev ATTACH PARTITION ev_fill DEFAULT;
ALTER TABLE ev ATTACH PARTITION ev_shared FOR VALUES IN ('shared');
ALTER TABLE ev ATTACH PARTITION ev_alt FOR VALUES IN ('alt');
ALTER TABLE lk INHERIT lp;
RESET ROLE;
-- as a superuser
ALTER TABLE ev ATTACH PARTITION ev_fill FOR VALUES IN ('fill');
ALTER TABLE ev ATTACH PARTITION ev_fill DEFAULT;
ALTER TABLE ev ATTACH PARTITION ev_shared FOR VALUES IN ('shared');
ALTER TABLE ev ATTACH PARTITION ev_alt FOR VALUES IN ('alt');
ALTER TABLE lk INHERIT lp;
-- none joined: ev and lp hold what they held
SELECT tableoid::regclass AS part, region, id, v FROM ev ORDER BY region, id;
SELECT count(*) AS lp_rows FROM lp;
SELECT c.relname, c.relispartition,
       EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid) AS has_parent
  FROM pg_class c WHERE c.relname IN ('ev_fill', 'ev_shared', 'ev_alt', 'lk') ORDER BY 1;
-- twin, as the owner
SET ROLE fence_regress_ddl_owner;
CREATE TABLE ev_plain_fill (LIKE ev);
INSERT INTO ev_plain_fill VALUES ('fill', 1, 'unchecked', NULL, NULL);
ALTER TABLE ev_plain ATTACH PARTITION ev_plain_fill FOR VALUES IN ('fill');
CREATE TABLE lk_plain (LIKE lp);
INSERT INTO lk_plain VALUES (1, 'unchecked', NULL);
ALTER TABLE lk_plain INHERIT lp_plain;
SELECT tableoid::regclass AS part, region, id, v FROM ev_plain ORDER BY region, id;
SELECT tableoid::regclass AS child, id, v FROM lp_plain;
RESET ROLE;

--
-- 8. The extension and its counter. DROP EXTENSION fence (CASCADE too)
-- would remove every guard and restart the counter at 1.
--
SELECT last_value AS seq_before FROM fence_token_seq \gset
-- a table of the sequence's owner, for OWNED BY
CREATE TABLE seq_anchor (id int);
-- as the owner (PostgreSQL would refuse it too: not the owner)
SET ROLE fence_regress_ddl_owner;
DROP EXTENSION fence;
ALTER SEQUENCE fence_token_seq RESTART;
RESET ROLE;
-- as a superuser
DROP EXTENSION fence;
DROP EXTENSION fence CASCADE;
DROP EXTENSION IF EXISTS fence CASCADE;
ALTER SEQUENCE fence_token_seq RESTART;
ALTER SEQUENCE fence_token_seq RESTART WITH 1;
ALTER SEQUENCE fence_token_seq START WITH 1;
ALTER SEQUENCE fence_token_seq CYCLE;
ALTER SEQUENCE fence_token_seq MINVALUE 0;
ALTER SEQUENCE fence_token_seq MAXVALUE 1000000;
ALTER SEQUENCE fence_token_seq NO MAXVALUE;
ALTER SEQUENCE fence_token_seq CACHE 10;
ALTER SEQUENCE fence_token_seq AS integer;
ALTER SEQUENCE fence_token_seq INCREMENT BY -1;
ALTER SEQUENCE fence_token_seq OWNED BY seq_anchor.id;
ALTER SEQUENCE fence_token_seq OWNER TO fence_regress_ddl_owner;
ALTER TABLE fence_token_seq OWNER TO fence_regress_ddl_owner;
ALTER SEQUENCE fence_token_seq SET UNLOGGED;
ALTER TABLE fence_token_seq SET UNLOGGED;
ALTER SEQUENCE IF EXISTS fence_token_seq RESTART;
-- nothing changed: the extension, the counter's value, options, persistence
-- and owner
SELECT extname, extversion FROM pg_extension WHERE extname = 'fence';
SELECT last_value = :seq_before AS counter_unchanged FROM fence_token_seq;
SELECT s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle,
       c.relpersistence
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
 WHERE s.seqrelid = 'fence_token_seq'::regclass;
SELECT count(*) AS owned_by FROM pg_depend
 WHERE objid = 'fence_token_seq'::regclass AND refobjid = 'seq_anchor'::regclass;
SELECT relowner = (SELECT relowner FROM pg_class WHERE relname = 'fence_claims') AS owner_unchanged
  FROM pg_class WHERE oid = 'fence_token_seq'::regclass;
SELECT * FROM shape('acct') WHERE item LIKE 'trigger %';
-- and the counter still counts up
SELECT fence_claim('ddl-refused-after') > :tk AS counter_moves_on;
-- twin, as the owner: an ordinary sequence takes every one of these
SET ROLE fence_regress_ddl_owner;
CREATE SEQUENCE plain_seq AS bigint MINVALUE 1 NO CYCLE;
SELECT nextval('plain_seq') + nextval('plain_seq') AS two_values;
ALTER SEQUENCE plain_seq RESTART;
ALTER SEQUENCE plain_seq RESTART WITH 1;
ALTER SEQUENCE plain_seq START WITH 1;
ALTER SEQUENCE plain_seq CYCLE;
ALTER SEQUENCE plain_seq MINVALUE 0;
ALTER SEQUENCE plain_seq MAXVALUE 1000000;
ALTER SEQUENCE plain_seq NO MAXVALUE;
ALTER SEQUENCE plain_seq CACHE 10;
ALTER SEQUENCE plain_seq AS integer;
ALTER SEQUENCE plain_seq INCREMENT BY -1;
ALTER SEQUENCE plain_seq OWNED BY acct_plain.id;
ALTER SEQUENCE plain_seq SET UNLOGGED;
SELECT s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle,
       c.relpersistence
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
 WHERE s.seqrelid = 'plain_seq'::regclass;
SELECT nextval('plain_seq') AS restarted;
RESET ROLE;

--
-- 9. The full message of a few refusals: it names the table and the
-- command, and the hint names the sanctioned way.
--
\set VERBOSITY default
\set SHOW_CONTEXT never
SET ROLE fence_regress_ddl_owner;
ALTER TABLE acct DISABLE TRIGGER ALL;
\echo :SQLSTATE
DROP TRIGGER zz_fence_guard ON acct;
\echo :SQLSTATE
ALTER TABLE acct ALTER COLUMN balance TYPE bigint USING balance::bigint;
\echo :SQLSTATE
ALTER TABLE acct RENAME COLUMN writer_epoch TO old_epoch;
\echo :SQLSTATE
CREATE RULE acct_nothing AS ON UPDATE TO acct DO INSTEAD NOTHING;
\echo :SQLSTATE
ALTER TABLE ev ATTACH PARTITION ev_fill FOR VALUES IN ('fill');
\echo :SQLSTATE
CREATE TRIGGER zz_fence_guard AFTER INSERT OR UPDATE OR DELETE ON misc
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
\echo :SQLSTATE
RESET ROLE;
DROP EXTENSION fence;
\echo :SQLSTATE
ALTER SEQUENCE fence_token_seq RESTART;
\echo :SQLSTATE
\set VERBOSITY sqlstate

--
-- Edges of the epoch column and of fence's own relations.
--  * harmless: a default of '0'::bigint, a TYPE bigint that changes nothing
--  * refused: an identity on the epoch column (a default by another name);
--    renaming or moving the counter or the registry (fence finds them by
--    name); both for a superuser
--
CREATE TABLE edge (id int PRIMARY KEY, writer_epoch bigint);
SELECT fence_protect('edge');
ALTER TABLE edge ALTER COLUMN writer_epoch SET DEFAULT '0'::bigint;
ALTER TABLE edge ALTER COLUMN writer_epoch TYPE bigint;
ALTER TABLE edge ALTER COLUMN writer_epoch SET NOT NULL;
ALTER TABLE edge ALTER COLUMN writer_epoch DROP DEFAULT;
ALTER TABLE edge ALTER COLUMN writer_epoch ADD GENERATED BY DEFAULT AS IDENTITY;
SELECT attidentity = '' AS no_identity FROM pg_attribute
 WHERE attrelid = 'edge'::regclass AND attname = 'writer_epoch';
ALTER SEQUENCE fence_token_seq RENAME TO fence_token_seq_old;
ALTER SEQUENCE fence_token_seq SET SCHEMA pg_catalog;
ALTER TABLE fence_claims RENAME TO fence_claims_old;
ALTER TABLE fence_claims RENAME COLUMN token TO tok;
ALTER TABLE fence_protected SET SCHEMA pg_catalog;
SELECT count(*) AS still_named FROM pg_class
 WHERE relname IN ('fence_token_seq', 'fence_claims', 'fence_protected')
   AND relnamespace = 'public'::regnamespace;
-- twin: the same on an unprotected table, and on another sequence
CREATE TABLE edge_plain (id int PRIMARY KEY, writer_epoch bigint NOT NULL);
ALTER TABLE edge_plain ALTER COLUMN writer_epoch ADD GENERATED BY DEFAULT AS IDENTITY;
CREATE SEQUENCE edge_seq;
ALTER SEQUENCE edge_seq RENAME TO edge_seq_renamed;
DROP SEQUENCE edge_seq_renamed;
DROP TABLE edge, edge_plain;

--
-- Clean up: dropping the tables is allowed, and once nothing is protected
-- DROP EXTENSION is too (the twin of section 8).
--
SET ROLE fence_regress_ddl_owner;
DROP TABLE acct, acct_plain, ev, ev_plain, ev_fill, ev_shared, ev_alt, ev_plain_fill,
           lp, lp_plain, lk, lk_plain, misc;
RESET ROLE;
DROP TABLE seq_anchor;
SELECT count(*) AS still_protected FROM fence_protected;
DROP FUNCTION shape(regclass), noop_row(), noop_stmt();
DROP EXTENSION fence;
DROP OWNED BY fence_regress_ddl_owner;
REVOKE CREATE ON SCHEMA public FROM fence_regress_ddl_owner;
DROP ROLE fence_regress_ddl_trigger;
DROP ROLE fence_regress_ddl_owner;
