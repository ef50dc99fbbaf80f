--
-- bypass: the ways around a row trigger, each kept closed.
--   session_replication_role = replica   (the guard is ENABLE ALWAYS)
--   TRUNCATE                             (5F005, also ALWAYS)
--   a BEFORE ROW trigger firing after the guard (39P01 on write)
--   fence_guard attached or called the wrong way (39P01)
--   partitions, present and future, and cross-partition UPDATE
-- Each fenced write has its twin on an unprotected table (*_plain).
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);
-- tx: superseded by ty (same job, lease expired); tz: another job, newest
INSERT INTO tok SELECT 'tx', fence_claim('job-1', '1 millisecond') RETURNING t AS tx \gset
SELECT pg_sleep(0.02);
INSERT INTO tok SELECT 'ty', fence_claim('job-1', '1 hour') RETURNING t AS ty \gset
INSERT INTO tok SELECT 'tz', fence_claim('job-2', '1 hour') RETURNING t AS tz \gset

CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, writer_epoch bigint);
CREATE TABLE acct_plain (LIKE acct INCLUDING ALL);
INSERT INTO acct VALUES (1, 100, NULL), (2, 200, NULL);
INSERT INTO acct_plain SELECT * FROM acct;
SELECT fence_protect('acct');
CREATE TEMP VIEW ac AS
  SELECT a.id, a.balance, CASE WHEN a.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM acct a LEFT JOIN tok ON tok.t = a.writer_epoch ORDER BY a.id;
CREATE TEMP VIEW ac_plain AS
  SELECT a.id, a.balance, CASE WHEN a.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM acct_plain a LEFT JOIN tok ON tok.t = a.writer_epoch ORDER BY a.id;

-- both triggers are ENABLE ALWAYS ('A')
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'acct'::regclass ORDER BY tgname;

--
-- session_replication_role = replica skips ordinary triggers, as the twin's
-- trap trigger shows, but not the guard.
--
CREATE FUNCTION trap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ordinary trigger fired';
END $$;
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON acct_plain
  FOR EACH ROW EXECUTE FUNCTION trap();
UPDATE acct_plain SET balance = 0 WHERE id = 1;
SET session_replication_role = replica;
UPDATE acct SET balance = 0 WHERE id = 1;
UPDATE acct_plain SET balance = 0 WHERE id = 1;
INSERT INTO acct VALUES (3, 300);
INSERT INTO acct_plain VALUES (3, 300);
DELETE FROM acct WHERE id = 2;
DELETE FROM acct_plain WHERE id = 2;
UPDATE acct SET balance = 0, writer_epoch = :tx WHERE id = 1;
UPDATE acct_plain SET balance = 0, writer_epoch = :tx WHERE id = 1;
UPDATE acct SET balance = 0, writer_epoch = :ty + 1000000 WHERE id = 1;
TRUNCATE acct;
-- a write with a current token still passes, and is stamped
UPDATE acct SET balance = 101, writer_epoch = :ty WHERE id = 1;
RESET session_replication_role;
-- SET LOCAL inside a transaction: the same
BEGIN;
SET LOCAL session_replication_role = replica;
DELETE FROM acct;
ROLLBACK;
SELECT * FROM ac;
SELECT * FROM ac_plain;
DROP TRIGGER trap ON acct_plain;

--
-- TRUNCATE of a protected table is refused, even by a worker holding a
-- current token, even through CASCADE from a referencing table.
--
TRUNCATE acct;
TRUNCATE ONLY acct;
TRUNCATE acct_plain, acct;
BEGIN;
SELECT fence_begin('job-1', :ty);
TRUNCATE acct;
ROLLBACK;
CREATE TABLE acct_owner (id int PRIMARY KEY);
INSERT INTO acct_owner VALUES (1), (2);
ALTER TABLE acct ADD COLUMN owner_id int REFERENCES acct_owner;
TRUNCATE acct_owner CASCADE;
SELECT count(*) AS acct_rows FROM acct;
SELECT count(*) AS acct_owner_rows FROM acct_owner;
SELECT count(*) AS acct_plain_rows FROM acct_plain;
-- twin
TRUNCATE acct_plain;
SELECT count(*) AS acct_plain_rows FROM acct_plain;
ALTER TABLE acct DROP COLUMN owner_id;
DROP TABLE acct_owner;
INSERT INTO acct_plain SELECT * FROM acct;

--
-- The guard must fire last among the enabled BEFORE ROW triggers: one that
-- sorts after it (triggers fire in name order) could rewrite NEW after the
-- guard has checked and stamped it.
--
CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.balance := -1;
  NEW.writer_epoch := 0;
  RETURN NEW;
END $$;
CREATE TRIGGER zzz_rewrite BEFORE UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION rewrite();
CREATE TRIGGER zzz_rewrite BEFORE UPDATE ON acct_plain FOR EACH ROW EXECUTE FUNCTION rewrite();
-- refused even with a current token, and through the binding
UPDATE acct SET balance = 5, writer_epoch = :tz WHERE id = 1;
BEGIN;
SELECT fence_begin('job-2', :tz);
UPDATE acct SET balance = 5 WHERE id = 1;
ROLLBACK;
-- twin: the late trigger's rewrite is what gets stored
UPDATE acct_plain SET balance = 5, writer_epoch = :tz WHERE id = 1;
SELECT * FROM ac_plain;
-- a disabled late trigger does not fire, so it is no threat
ALTER TABLE acct DISABLE TRIGGER zzz_rewrite;
UPDATE acct SET balance = 5, writer_epoch = :tz WHERE id = 1;
-- ENABLE ALWAYS and ENABLE REPLICA late triggers do fire (under replica)
ALTER TABLE acct ENABLE ALWAYS TRIGGER zzz_rewrite;
INSERT INTO tok SELECT 'tw', fence_claim('job-3', '1 hour') RETURNING t AS tw \gset
UPDATE acct SET balance = 6, writer_epoch = :tw WHERE id = 1;
ALTER TABLE acct ENABLE REPLICA TRIGGER zzz_rewrite;
SET session_replication_role = replica;
UPDATE acct SET balance = 6, writer_epoch = :tw WHERE id = 1;
RESET session_replication_role;
DROP TRIGGER zzz_rewrite ON acct;
-- a trigger that sorts before the guard is fine: the guard sees its NEW
CREATE FUNCTION add_bonus() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.balance := NEW.balance + 1000;
  RETURN NEW;
END $$;
CREATE TRIGGER aaa_bonus BEFORE UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION add_bonus();
UPDATE acct SET balance = 6, writer_epoch = :tw WHERE id = 1;
-- AFTER ROW triggers may sort anywhere
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER zzz_after AFTER UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION noop();
INSERT INTO tok SELECT 'tv', fence_claim('job-4', '1 hour') RETURNING t AS tv \gset
UPDATE acct SET balance = 7, writer_epoch = :tv WHERE id = 1;
SELECT * FROM ac;
DROP TRIGGER aaa_bonus ON acct;
DROP TRIGGER zzz_after ON acct;

--
-- fence_guard fired any other way than BEFORE ... FOR EACH ROW: 39P01.
-- Since 1.1 CREATE TRIGGER refuses such triggers (5F006); a superuser's
-- session that declares its DDL can still make them, and the guard, as the
-- second line of defense, refuses to run.
--
SELECT fence_guard();
CREATE TABLE misuse (id int, writer_epoch bigint, n int);
INSERT INTO misuse VALUES (1, NULL, 0);
CREATE TRIGGER g AFTER UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fence_guard();
SET fence.allow_ddl = on;
CREATE TRIGGER g AFTER UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fence_guard();
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
CREATE TRIGGER g BEFORE UPDATE ON misuse FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
CREATE TRIGGER g AFTER UPDATE ON misuse FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
CREATE TRIGGER g BEFORE TRUNCATE ON misuse FOR EACH STATEMENT EXECUTE FUNCTION fence_guard();
TRUNCATE misuse;
DROP TRIGGER g ON misuse;
-- attached by hand as a BEFORE ROW trigger, its arguments are checked
CREATE TRIGGER g BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fence_guard('writer_epoch', 'bogus');
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
CREATE TRIGGER g BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fence_guard('no_such_column');
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
CREATE TRIGGER g BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fence_guard('n');
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
-- fence_refuse_truncate, too, works only as a BEFORE TRUNCATE trigger
SELECT fence_refuse_truncate();
CREATE TRIGGER g BEFORE UPDATE ON misuse FOR EACH ROW EXECUTE FUNCTION fence_refuse_truncate();
UPDATE misuse SET n = 1;
DROP TRIGGER g ON misuse;
RESET fence.allow_ddl;
SELECT n FROM misuse;
DROP TABLE misuse;

--
-- Partitions: present, created after fence_protect, and attached after it.
--
CREATE TABLE ev (region text, id int, v text, writer_epoch bigint,
                 PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
CREATE TABLE ev_plain (LIKE ev) PARTITION BY LIST (region);
CREATE TABLE ev_plain_eu PARTITION OF ev_plain FOR VALUES IN ('eu');
CREATE TABLE ev_plain_us PARTITION OF ev_plain FOR VALUES IN ('us');
CREATE TABLE ev_plain_asia PARTITION OF ev_plain FOR VALUES IN ('asia');
INSERT INTO ev VALUES ('eu', 1, 'init', NULL);
SELECT fence_protect('ev');
CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us');
CREATE TABLE ev_asia (LIKE ev);
INSERT INTO ev_asia VALUES ('asia', 1, 'init', NULL);
-- its row was written with no token: attaching it must be declared (1.1)
ALTER TABLE ev ATTACH PARTITION ev_asia FOR VALUES IN ('asia');
BEGIN;
SELECT fence_allow_ddl('ev', 'attach a pre-filled partition, for the test');
ALTER TABLE ev ATTACH PARTITION ev_asia FOR VALUES IN ('asia');
COMMIT;
INSERT INTO ev_plain SELECT * FROM ev;
INSERT INTO ev_plain VALUES ('us', 1, 'init', NULL);
CREATE TEMP VIEW evv AS
  SELECT e.tableoid::regclass AS part, e.region, e.id, e.v,
         CASE WHEN e.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM ev e LEFT JOIN tok ON tok.t = e.writer_epoch ORDER BY e.region, e.id;
CREATE TEMP VIEW evv_plain AS
  SELECT e.tableoid::regclass AS part, e.region, e.id, e.v,
         CASE WHEN e.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM ev_plain e LEFT JOIN tok ON tok.t = e.writer_epoch ORDER BY e.region, e.id;
-- every partition carries the guard, ENABLE ALWAYS
SELECT tgrelid::regclass AS tbl, tgname, tgenabled FROM pg_trigger
 WHERE tgname = 'zz_fence_guard' AND tgrelid IN ('ev'::regclass, 'ev_eu'::regclass, 'ev_us'::regclass, 'ev_asia'::regclass)
 ORDER BY tgrelid::regclass::text;

-- writes without a token, through the parent and straight into each partition
INSERT INTO ev VALUES ('us', 1, 'adhoc');
INSERT INTO ev_us VALUES ('us', 1, 'adhoc');
INSERT INTO ev_plain_us VALUES ('us', 2, 'adhoc');
UPDATE ev SET v = 'adhoc' WHERE region = 'asia';
UPDATE ev_asia SET v = 'adhoc';
UPDATE ev_eu SET v = 'adhoc';
UPDATE ev_plain SET v = 'adhoc' WHERE region = 'asia';
DELETE FROM ev WHERE region = 'asia';
-- ... under replica too
SET session_replication_role = replica;
INSERT INTO ev_us VALUES ('us', 1, 'adhoc');
UPDATE ev_asia SET v = 'adhoc';
RESET session_replication_role;
-- TRUNCATE of the parent and of each partition
TRUNCATE ev;
TRUNCATE ev_eu;
TRUNCATE ev_us;
TRUNCATE ev_asia;
-- a stale token into the future partition
INSERT INTO ev VALUES ('us', 1, 'stale', :tx);
INSERT INTO ev_plain VALUES ('us', 3, 'stale', :tx);
-- a current token, into the future partition
INSERT INTO ev VALUES ('us', 1, 'ty', :ty);
SELECT * FROM evv;

--
-- Cross-partition UPDATE runs as a DELETE from the old partition and an
-- INSERT into the new one; every part of it passes the guard.
--
-- no token
UPDATE ev SET region = 'us', id = 2 WHERE region = 'eu' AND id = 1;
UPDATE ev_plain SET region = 'us', id = 9 WHERE region = 'eu' AND id = 1;
-- the stale token
UPDATE ev SET region = 'eu', id = 2, writer_epoch = :tx WHERE region = 'us' AND id = 1;
UPDATE ev_plain SET region = 'eu', id = 2, writer_epoch = :tx WHERE region = 'us' AND id = 1;
-- a current token the row already holds (strict): the caller's bug, 5G003
UPDATE ev SET region = 'asia', id = 2, v = 'ty', writer_epoch = :ty WHERE region = 'us' AND id = 1;
-- the bound token: the row moves eu -> us and is stamped
BEGIN;
SELECT fence_begin('job-1', :ty);
UPDATE ev SET region = 'us', id = 2, v = 'moved by ty' WHERE region = 'eu' AND id = 1;
COMMIT;
-- the statement's own token: the row moves us -> asia and is stamped
UPDATE ev SET region = 'asia', id = 3, v = 'moved by tz', writer_epoch = :tz WHERE region = 'us' AND id = 2;
SELECT * FROM evv;
SELECT * FROM evv_plain;

DROP VIEW ac, ac_plain, evv, evv_plain;
DROP TABLE acct, acct_plain, ev, ev_plain;
DROP FUNCTION trap(), rewrite(), add_bonus(), noop();
DROP EXTENSION fence;
