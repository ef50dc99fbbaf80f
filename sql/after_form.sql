--
-- after_form: the after form of the guard, fence_protect(..., form => 'after').
--
-- UPDATEs are checked in the WHEN clause of an AFTER UPDATE trigger
-- (zz_fence_guard_update, fence_update_allowed), which raises the guard's
-- errors at the row; INSERT and DELETE keep the BEFORE guard.  What this
-- file shows:
--   - the same refusals as the BEFORE guard (5F001 superseded, 5F002 row
--     newer, 5F003 no token, 5F004 mixed tokens, 5G002 never issued), each with its
--     twin: the same statement on an unprotected copy (*_plain) goes
--     through and loses the newer execution's update;
--   - what the form cannot see, and refuses rather than guess: the SET
--     list.  No stamping: an UPDATE must write its token into the epoch
--     column, under fence_begin too; an unchanged epoch is no token (5F003);
--     in repeat mode, a write again with the row's own token needs
--     fence_begin.  The BEFORE guard's answer to each is shown beside it;
--   - rows moving between partitions need fence_begin;
--   - a BEFORE trigger that claims a job and writes the token into NEW is
--     refused, as with the BEFORE guard;
--   - the registry, the canonical triggers, switching forms, the DDL
--     refusals and fence_audit cover the form.
--
-- Tokens are kept in the temp table tok(name, t); the views show a row's
-- epoch as the name of the token it holds, never as a raw number.
--
CREATE EXTENSION fence;

CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);

CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL, note text,
                    writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE stock_plain (LIKE stock INCLUDING ALL);
-- the same table under the BEFORE guard, for the differences
CREATE TABLE stock_before (LIKE stock INCLUDING ALL);
INSERT INTO stock VALUES ('apple', 10, 'initial'), ('pear', 20, 'initial');
INSERT INTO stock_plain SELECT * FROM stock;
INSERT INTO stock_before SELECT * FROM stock;
SELECT fence_protect('stock', form => 'after');
SELECT fence_protect('stock_before');

CREATE TEMP VIEW st AS
  SELECT s.sku, s.qty, s.note, coalesce(tok.name, s.writer_epoch::text) AS epoch
    FROM stock s LEFT JOIN tok ON tok.t = s.writer_epoch ORDER BY s.sku;
CREATE TEMP VIEW st_plain AS
  SELECT s.sku, s.qty, s.note, coalesce(tok.name, s.writer_epoch::text) AS epoch
    FROM stock_plain s LEFT JOIN tok ON tok.t = s.writer_epoch ORDER BY s.sku;

-- what fence_protect created, and the registry row
SELECT tgname, tgtype, tgenabled, pg_get_triggerdef(oid) AS def
  FROM pg_trigger WHERE tgrelid = 'stock'::regclass ORDER BY tgname;
SELECT relation, epoch_column, mode, form FROM fence_protected ORDER BY relation::text;
SELECT * FROM fence_audit();

--
-- 5F003: no token.  The twin takes it.
--
UPDATE stock SET qty = 0 WHERE sku = 'apple';
\echo :SQLSTATE
UPDATE stock_plain SET qty = 0 WHERE sku = 'apple';
DELETE FROM stock WHERE sku = 'pear';
\echo :SQLSTATE
DELETE FROM stock_plain WHERE sku = 'pear';
SELECT * FROM st;
SELECT * FROM st_plain;
TRUNCATE stock_plain;
INSERT INTO stock_plain SELECT * FROM stock;

--
-- The statement's token: written into the epoch column.
--
INSERT INTO tok SELECT 'ta', fence_claim('restock', '1 hour') RETURNING t AS ta \gset
UPDATE stock SET qty = qty + 5, note = 'restock', writer_epoch = :ta WHERE sku = 'apple';
INSERT INTO stock VALUES ('plum', 5, 'restock', :ta);
SELECT * FROM st;

--
-- 5G003 in strict mode: the same token again.  The WHEN clause cannot tell
-- "SET writer_epoch = ta" from a statement that leaves it alone; either way
-- the token is not newer than the row's, and the BEFORE guard refuses the
-- first with 5G003 (the row holds the token: the caller's bug) and the
-- second with 5F003.  The after form says 5F003.
--
UPDATE stock SET qty = qty + 1, writer_epoch = :ta WHERE sku = 'apple';
\echo :SQLSTATE
UPDATE stock_before SET writer_epoch = :ta WHERE sku = 'apple';
UPDATE stock_before SET qty = qty + 1, writer_epoch = :ta WHERE sku = 'apple';
\echo :SQLSTATE

--
-- fence_begin: the statement still writes the token.  The after form does
-- not stamp; the BEFORE guard would.
--
INSERT INTO tok SELECT 'tb', fence_claim('count', '1 hour') RETURNING t AS tb \gset
BEGIN;
SELECT fence_begin('count', :tb);
UPDATE stock SET note = 'counted' WHERE sku = 'pear';
ROLLBACK;
BEGIN;
SELECT fence_begin('count', :tb);
UPDATE stock SET note = 'counted', writer_epoch = :tb WHERE sku = 'pear';
-- INSERT keeps the BEFORE guard: stamped
INSERT INTO stock (sku, qty, note) VALUES ('fig', 3, 'counted');
COMMIT;
SELECT * FROM st;
BEGIN;
SELECT fence_begin('count', :tb);
UPDATE stock_before SET note = 'counted' WHERE sku = 'pear';
SELECT note, writer_epoch = :tb AS stamped FROM stock_before WHERE sku = 'pear';
ROLLBACK;

--
-- 5G002: forged values (never issued); 5F004: two tokens in one write.
--
UPDATE stock SET note = 'forged', writer_epoch = :tb + 1000000 WHERE sku = 'apple';
\echo :SQLSTATE
UPDATE stock_plain SET note = 'forged', writer_epoch = :tb + 1000000 WHERE sku = 'apple';
UPDATE stock SET note = 'zero', writer_epoch = 0 WHERE sku = 'apple';
\echo :SQLSTATE
UPDATE stock SET note = 'negative', writer_epoch = -1 WHERE sku = 'apple';
\echo :SQLSTATE
BEGIN;
SELECT fence_begin('count', :tb);
UPDATE stock SET note = 'mixed', writer_epoch = :ta WHERE sku = 'fig';
\echo :SQLSTATE
ROLLBACK;
SELECT * FROM st;
SELECT * FROM st_plain;
TRUNCATE stock_plain;
INSERT INTO stock_plain SELECT * FROM stock;

--
-- 5F001: the stale worker.  A claims "sweep" with a short lease and reads;
-- the lease expires; B claims the job and reads the same row.
--
-- (1) B writes first, then A wakes and writes.
--
INSERT INTO tok SELECT 'tx', fence_claim('sweep', '1 millisecond', 'A') RETURNING t AS tx \gset
SELECT qty AS a_read FROM stock WHERE sku = 'apple' \gset
SELECT pg_sleep(0.02);
INSERT INTO tok SELECT 'ty', fence_claim('sweep', '1 hour', 'B') RETURNING t AS ty \gset
SELECT qty AS b_read FROM stock WHERE sku = 'apple' \gset
UPDATE stock SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'apple';
UPDATE stock SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'apple';
\echo :SQLSTATE
SELECT * FROM st WHERE sku = 'apple';
-- twin: the stale write lands, B's update is lost, the epoch goes backwards
UPDATE stock_plain SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'apple';
UPDATE stock_plain SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'apple';
SELECT * FROM st_plain WHERE sku = 'apple';
--
-- (2) A writes after B's claim, before B's write: the row still holds an
-- older epoch, so only the arbiter can refuse it.
--
SELECT qty AS a_read FROM stock WHERE sku = 'pear' \gset
UPDATE stock SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'pear';
\echo :SQLSTATE
SELECT qty AS b_read FROM stock WHERE sku = 'pear' \gset
UPDATE stock SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'pear';
SELECT * FROM st WHERE sku = 'pear';
-- twin: both land; the job's increment is applied twice
SELECT qty AS a_read FROM stock_plain WHERE sku = 'pear' \gset
UPDATE stock_plain SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'pear';
SELECT qty AS b_read FROM stock_plain WHERE sku = 'pear' \gset
UPDATE stock_plain SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'pear';
SELECT * FROM st_plain WHERE sku = 'pear';
-- (3) 5F002: an older execution of another job, still current, writes over
-- a row a newer token wrote
UPDATE stock SET note = 'restock again', writer_epoch = :ta WHERE sku = 'pear';
\echo :SQLSTATE
UPDATE stock_plain SET note = 'restock again', writer_epoch = :ta WHERE sku = 'pear';
SELECT * FROM st WHERE sku = 'pear';
SELECT * FROM st_plain WHERE sku = 'pear';

--
-- Repeat and shared modes: a write again with the token the row holds.
-- The BEFORE guard lets "SET writer_epoch = ty" through; the after form
-- cannot tell it from a statement that leaves the epoch alone (which
-- carries no token at all), so it wants fence_begin for it.
--
SELECT fence_protect('stock', 'writer_epoch', 'repeat', 'after');
UPDATE stock SET qty = qty + 1, writer_epoch = :ty WHERE sku = 'apple';
\echo :SQLSTATE
UPDATE stock SET qty = qty + 1 WHERE sku = 'apple';
\echo :SQLSTATE
BEGIN;
SELECT fence_begin('sweep', :ty);
UPDATE stock SET qty = qty + 1, writer_epoch = :ty WHERE sku = 'apple';
-- bound, and the row already holds the bound token: nothing to tell apart
UPDATE stock SET qty = qty + 1 WHERE sku = 'apple';
COMMIT;
SELECT fence_protect('stock_before', 'writer_epoch', 'repeat');
UPDATE stock_before SET writer_epoch = :ty WHERE sku = 'apple';
UPDATE stock_before SET qty = qty + 1, writer_epoch = :ty WHERE sku = 'apple';
-- shared mode: tokens of different jobs carry no order, the arbiter decides
SELECT fence_protect('stock', 'writer_epoch', 'shared', 'after');
UPDATE stock SET note = 'restock, shared', writer_epoch = :ta WHERE sku = 'apple';
UPDATE stock SET note = 'A (stale), shared', writer_epoch = :tx WHERE sku = 'apple';
\echo :SQLSTATE
SELECT * FROM st WHERE sku = 'apple';
-- twin: the superseded execution's write lands
UPDATE stock_plain SET note = 'restock, shared', writer_epoch = :ta WHERE sku = 'apple';
UPDATE stock_plain SET note = 'A (stale), shared', writer_epoch = :tx WHERE sku = 'apple';
SELECT * FROM st_plain WHERE sku = 'apple';
SELECT fence_protect('stock', form => 'after');

--
-- A BEFORE trigger may change NEW after nothing has checked it; the after
-- form checks the row as written.  One that claims a job and writes the
-- fresh token into NEW would launder any write: refused (5F004), as the
-- BEFORE guard refuses it.  With the after form, BEFORE UPDATE triggers may
-- sort anywhere.
--
CREATE FUNCTION launder() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.writer_epoch := fence_claim('laundry', '1 hour');
	RETURN NEW;
END $$;
CREATE TRIGGER zzz_launder BEFORE UPDATE ON stock FOR EACH ROW EXECUTE FUNCTION launder();
UPDATE stock SET note = 'laundered' WHERE sku = 'apple';
\echo :SQLSTATE
DROP TRIGGER zzz_launder ON stock;
SELECT * FROM st WHERE sku = 'apple';

--
-- Partitions: the triggers are cloned, the registry covers every member.
-- A row moving to another partition is deleted from its old one before
-- any AFTER UPDATE trigger could see it: that DELETE needs fence_begin.
--
CREATE TABLE ev (id int, part text, v text, writer_epoch bigint NOT NULL DEFAULT 0,
                 PRIMARY KEY (id, part)) PARTITION BY LIST (part);
CREATE TABLE ev_a PARTITION OF ev FOR VALUES IN ('a');
CREATE TABLE ev_b PARTITION OF ev FOR VALUES IN ('b');
SELECT fence_protect('ev', 'writer_epoch', 'strict', 'after');
CREATE TABLE ev_c PARTITION OF ev FOR VALUES IN ('c');
SELECT relation, form FROM fence_protected WHERE relation::text LIKE 'ev%' ORDER BY 1::text;
SELECT tgrelid::regclass AS rel, tgname, tgenabled FROM pg_trigger
 WHERE tgrelid IN ('ev_a'::regclass, 'ev_c'::regclass) ORDER BY 1::text, 2;
INSERT INTO tok SELECT 'te', fence_claim('events', '1 millisecond') RETURNING t AS te \gset
INSERT INTO ev VALUES (1, 'a', 'new', :te), (2, 'b', 'new', :te);
SELECT pg_sleep(0.02);
INSERT INTO tok SELECT 'tf', fence_claim('events', '1 hour') RETURNING t AS tf \gset
UPDATE ev SET v = 'moved', part = 'c', writer_epoch = :tf WHERE id = 1;
\echo :SQLSTATE
BEGIN;
SELECT fence_begin('events', :tf);
UPDATE ev SET v = 'moved', part = 'c', writer_epoch = :tf WHERE id = 1;
UPDATE ev SET v = 'kept', writer_epoch = :tf WHERE id = 2;
COMMIT;
-- the superseded token, within a partition
UPDATE ev SET v = 'stale', writer_epoch = :te WHERE id = 2;
\echo :SQLSTATE
SELECT e.tableoid::regclass AS part, e.id, e.v, tok.name AS epoch
  FROM ev e JOIN tok ON tok.t = e.writer_epoch ORDER BY e.id;
-- twin: on an unprotected copy the superseded write lands over tf's
CREATE TABLE ev_plain AS SELECT * FROM ev;
UPDATE ev_plain SET v = 'stale', writer_epoch = :te WHERE id = 2;
SELECT e.id, e.v, tok.name AS epoch FROM ev_plain e JOIN tok ON tok.t = e.writer_epoch ORDER BY e.id;

--
-- Switching forms replaces the guard; the registry follows.
--
SELECT fence_protect('stock');
SELECT tgname, tgtype FROM pg_trigger WHERE tgrelid = 'stock'::regclass ORDER BY tgname;
SELECT fence_protect('stock', form => 'after');
SELECT tgname, tgtype FROM pg_trigger WHERE tgrelid = 'stock'::regclass ORDER BY tgname;
SELECT relation, form FROM fence_protected WHERE relation = 'stock'::regclass;
SELECT action, detail FROM fence_audit_log WHERE relation = 'public.stock' ORDER BY id;
SELECT fence_protect('stock', form => 'below');
\echo :SQLSTATE
SELECT fence_protect('stock', form => NULL);
\echo :SQLSTATE

--
-- DDL that would disarm the form is refused like the guard's (5F006).
--
DROP TRIGGER zz_fence_guard_update ON stock;
\echo :SQLSTATE
ALTER TABLE stock DISABLE TRIGGER zz_fence_guard_update;
\echo :SQLSTATE
ALTER TABLE stock ENABLE TRIGGER zz_fence_guard_update;
\echo :SQLSTATE
ALTER TRIGGER zz_fence_guard_update ON stock RENAME TO other;
\echo :SQLSTATE
-- fence_guard_after, or the after form's guard, in any other shape
CREATE TRIGGER zz_fence_guard_update2 AFTER UPDATE ON stock_plain FOR EACH ROW
  WHEN (NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'strict'))
  EXECUTE FUNCTION fence_guard_after();
\echo :SQLSTATE
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON stock_plain FOR EACH ROW
  EXECUTE FUNCTION fence_guard_after();
\echo :SQLSTATE
-- the right shape with another WHEN clause: refused once it is stored
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON stock_plain FOR EACH ROW
  WHEN (NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'repeat'))
  EXECUTE FUNCTION fence_guard_after();
\echo :SQLSTATE
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON stock_plain FOR EACH ROW
  WHEN (OLD.qty > 0 AND NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'strict'))
  EXECUTE FUNCTION fence_guard_after();
\echo :SQLSTATE
CREATE TRIGGER zz_fence_guard AFTER INSERT OR DELETE ON stock_plain FOR EACH ROW
  EXECUTE FUNCTION fence_guard();
\echo :SQLSTATE
-- fence_guard_after fired any other way
CREATE FUNCTION call_guard_after() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
SELECT fence_guard_after();
\echo :SQLSTATE

--
-- Declared DDL that leaves the form broken is reported by fence_audit, and
-- a trigger that is merely ENABLE'd fails closed.
--
BEGIN;
SELECT fence_allow_ddl('stock', 'test: drop the UPDATE check');
DROP TRIGGER zz_fence_guard_update ON stock;
SELECT severity, problem, fix FROM fence_audit() WHERE relation = 'stock'::regclass;
-- and UPDATEs now go unchecked: the reason fence_audit reports it
UPDATE stock SET qty = 999 WHERE sku = 'apple';
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('stock', 'test: another WHEN clause');
DROP TRIGGER zz_fence_guard_update ON stock;
CREATE TRIGGER zz_fence_guard_update AFTER UPDATE ON stock FOR EACH ROW
  WHEN (NOT fence_update_allowed(NEW.writer_epoch, OLD.writer_epoch, NEW.tableoid, 'writer_epoch', 'shared'))
  EXECUTE FUNCTION fence_guard_after('writer_epoch', 'strict');
ALTER TABLE stock ENABLE ALWAYS TRIGGER zz_fence_guard_update;
SELECT severity, problem, fix FROM fence_audit() WHERE relation = 'stock'::regclass;
ROLLBACK;
BEGIN;
SELECT fence_allow_ddl('stock', 'test: ENABLE, not ALWAYS');
ALTER TABLE stock ENABLE TRIGGER zz_fence_guard_update;
SELECT severity, problem FROM fence_audit() WHERE relation = 'stock'::regclass;
SAVEPOINT s;
UPDATE stock SET qty = 1, writer_epoch = :ty WHERE sku = 'apple';
\echo :SQLSTATE
ROLLBACK TO s;
-- ENABLE TRIGGER ALL heals every trigger of fence's back to ALWAYS
ALTER TABLE stock ENABLE TRIGGER ALL;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'stock'::regclass ORDER BY tgname;
ROLLBACK;

--
-- ATTACH: a table protected the same way (column, mode and form) may join;
-- one protected in the other form, with rows, may not.
--
CREATE TABLE ev_d (LIKE ev INCLUDING ALL);
CREATE TABLE ev_e (LIKE ev INCLUDING ALL);
INSERT INTO ev_d VALUES (4, 'd', 'own', 0);
INSERT INTO ev_e VALUES (5, 'e', 'own', 0);
SELECT fence_protect('ev_d', 'writer_epoch', 'strict', 'after');
SELECT fence_protect('ev_e', 'writer_epoch', 'strict');
ALTER TABLE ev ATTACH PARTITION ev_d FOR VALUES IN ('d');
ALTER TABLE ev ATTACH PARTITION ev_e FOR VALUES IN ('e');
\echo :SQLSTATE
SELECT tgname, tgparentid <> 0 AS cloned FROM pg_trigger WHERE tgrelid = 'ev_d'::regclass ORDER BY tgname;

--
-- fence_update_allowed called directly only answers (and locks the token,
-- as fence_begin does): no row is written, nothing is granted.
--
SELECT fence_update_allowed(:ty, :tx, 'stock'::regclass, 'writer_epoch', 'strict');
SELECT fence_update_allowed(:tx, :tx, 'stock'::regclass, 'writer_epoch', 'strict');
\echo :SQLSTATE
SELECT fence_update_allowed(:ty, :tx, NULL, 'writer_epoch', 'strict');
\echo :SQLSTATE
-- a relation that does not exist (the OID of the dropped table)
CREATE TABLE gone (writer_epoch bigint);
SELECT 'gone'::regclass::oid AS gone_oid \gset
DROP TABLE gone;
\set VERBOSITY sqlstate
SELECT fence_update_allowed(:ty, :tx, :gone_oid, 'writer_epoch', 'strict') IS NOT NULL AS answered;
\set VERBOSITY default

--
-- Unprotect removes every trigger of the form.
--
SELECT fence_unprotect('ev');
-- (ev_e was protected on its own and never joined)
SELECT t.tgrelid::regclass AS rel, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relname LIKE 'ev%' AND NOT t.tgisinternal ORDER BY 1::text, 2;
SELECT * FROM fence_audit();

DROP VIEW st, st_plain;
DROP TABLE stock, stock_plain, stock_before, ev, ev_e, ev_plain, tok;
DROP FUNCTION launder(), call_guard_after();
DROP EXTENSION fence;
