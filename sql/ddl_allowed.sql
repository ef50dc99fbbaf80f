--
-- ddl_allowed: the DDL that migrations, restores and partition managers
-- run keeps working, and protection stays with the data.
--   1. The canonical guard, as pg_dump writes it (CREATE TRIGGER
--      zz_fence_guard ... fence_guard(column, mode), ALTER TABLE ... ENABLE
--      ALWAYS, then the TRUNCATE refusals), protects the table: a registry
--      row for it and every partition, recorded as protect. With fewer
--      arguments the defaults apply.
--   2. DETACH PARTITION (also CONCURRENTLY): the detached table stays
--      protected with the same column and mode (registry row, its own
--      guard, ALWAYS, TRUNCATE and token-less writes refused), recorded as
--      detach. Detach then DROP, as pg_partman's retention does.
--   3. ATTACH PARTITION of an empty table, or of one protected with the same
--      column and mode (rows and all); INHERIT of an empty table: the new
--      member is protected, recorded as attach. A non-empty unprotected
--      table is refused (5F006).
--   4. CREATE TABLE ... PARTITION OF (at every level), INHERITS (the child
--      gets a guard of its own: an UPDATE or DELETE through the parent that
--      reaches child rows is guarded), and both inside CREATE SCHEMA: each
--      new table is protected.
--   5. RENAME and SET SCHEMA (recorded as rename; the registry row follows),
--      DROP TABLE and DROP SCHEMA ... CASCADE (recorded as drop; the row
--      goes).
--   6. VACUUM FULL, CLUSTER, REINDEX, SET ACCESS METHOD, SET LOGGED, ADD
--      COLUMN, DROP COLUMN of another column, ALTER COLUMN TYPE of another
--      column without USING: the table stays protected, its values as they
--      were.
--   7. fence_begin from inside a trigger is refused (5F006), on any table;
--      fence_claim and fence_renew are not. A BEFORE trigger that writes a
--      token it claimed during the statement into the epoch column cannot
--      vouch for that statement (5F004), whether or not it also renews the
--      claim, nor can the statement's own fence_claim; a token claimed by an
--      earlier statement of the same transaction can.
--   8. ALTER SEQUENCE fence_token_seq is refused, for a superuser too.
--   9. DROP EXTENSION fence is refused while a table is protected, and
--      allowed once fence_unprotect has removed them all.
-- Twins: the same tables before protection, and *_plain tables.
--
-- Token values vary from run to run: they are kept in psql variables and
-- compared, never printed. The superuser's name depends on the
-- installation, so audit rows show "(superuser)" for the session user.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_allow_owner;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_allow_owner');
GRANT CREATE ON SCHEMA public TO fence_regress_allow_owner;

-- The audit rows written since the last call (not the timestamp).
CREATE TABLE audit_mark (id bigint NOT NULL);
INSERT INTO audit_mark VALUES (0);
GRANT SELECT, UPDATE ON audit_mark TO PUBLIC;
CREATE FUNCTION audit_new()
RETURNS TABLE (role text, action text, relation text, detail text)
LANGUAGE sql AS $$
  WITH seen AS (SELECT m.id FROM audit_mark m),
       moved AS (UPDATE audit_mark SET id = coalesce((SELECT max(l.id) FROM fence_audit_log l), 0))
  SELECT CASE WHEN l.role = session_user THEN '(superuser)' ELSE l.role::text END,
         l.action, l.relation, l.detail
    FROM fence_audit_log l, seen
   WHERE l.id > seen.id
   ORDER BY l.id
$$;
-- Every member of an inheritance or partition tree: its registry row, its
-- guards and its TRUNCATE refusals (name and firing state).
CREATE FUNCTION members(root regclass)
RETURNS TABLE (rel text, registry text, guard text, truncate text)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE tree(relid) AS (
    SELECT root::oid
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN tree ON i.inhparent = tree.relid)
  SELECT tree.relid::regclass::text,
         (SELECT p.epoch_column::text || ' ' || p.mode FROM fence_protected p
           WHERE p.relation = tree.relid),
         (SELECT string_agg(t.tgname::text || ' ' || t.tgenabled::text, ', ') FROM pg_trigger t
           WHERE t.tgrelid = tree.relid AND t.tgfoid = 'fence_guard'::regproc),
         (SELECT string_agg(t.tgname::text || ' ' || t.tgenabled::text, ', ') FROM pg_trigger t
           WHERE t.tgrelid = tree.relid AND t.tgfoid = 'fence_refuse_truncate'::regproc)
    FROM tree ORDER BY 1
$$;
CREATE FUNCTION registry() RETURNS TABLE (relation text, epoch_column name, mode text)
LANGUAGE sql STABLE AS $$
  SELECT p.relation::text, p.epoch_column, p.mode FROM fence_protected p ORDER BY 1
$$;

SET ROLE fence_regress_allow_owner;
SELECT fence_claim('ddl-allowed', '1 hour') AS tk \gset

--
-- 1. The canonical guard, as pg_dump writes it.
--
CREATE TABLE restored (id int PRIMARY KEY, v text, writer_epoch bigint NOT NULL DEFAULT 0);
-- twin: before the guard, a write without a token lands
INSERT INTO restored (id, v) VALUES (1, 'restored'), (2, 'restored');
-- as the owner
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR DELETE OR UPDATE ON public.restored FOR EACH ROW EXECUTE FUNCTION public.fence_guard('writer_epoch', 'strict');
ALTER TABLE public.restored ENABLE ALWAYS TRIGGER zz_fence_guard;
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON public.restored FOR EACH STATEMENT EXECUTE FUNCTION public.fence_refuse_truncate();
ALTER TABLE public.restored ENABLE ALWAYS TRIGGER zz_fence_truncate;
SELECT * FROM members('restored');
SELECT * FROM audit_new();
INSERT INTO restored (id, v) VALUES (3, 'no token');
UPDATE restored SET v = 'no token';
TRUNCATE restored;
SELECT id, v FROM restored ORDER BY id;

-- a partitioned table, two levels, mode repeat
CREATE TABLE rev (region text NOT NULL, id int NOT NULL, v text, writer_epoch bigint)
  PARTITION BY LIST (region);
CREATE TABLE rev_a PARTITION OF rev FOR VALUES IN ('a');
CREATE TABLE rev_b PARTITION OF rev FOR VALUES IN ('b1') PARTITION BY LIST (region);
CREATE TABLE rev_b1 PARTITION OF rev_b FOR VALUES IN ('b1');
INSERT INTO rev VALUES ('a', 1, 'restored', NULL), ('b1', 1, 'restored', NULL);
RESET ROLE;
-- as a superuser, as pg_restore does: the guards first, then the refusals
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR DELETE OR UPDATE ON public.rev FOR EACH ROW EXECUTE FUNCTION public.fence_guard('writer_epoch', 'repeat');
ALTER TABLE public.rev ENABLE ALWAYS TRIGGER zz_fence_guard;
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON public.rev FOR EACH STATEMENT EXECUTE FUNCTION public.fence_refuse_truncate();
ALTER TABLE public.rev ENABLE ALWAYS TRIGGER zz_fence_truncate;
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON public.rev_a FOR EACH STATEMENT EXECUTE FUNCTION public.fence_refuse_truncate();
ALTER TABLE public.rev_a ENABLE ALWAYS TRIGGER zz_fence_truncate;
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON public.rev_b FOR EACH STATEMENT EXECUTE FUNCTION public.fence_refuse_truncate();
ALTER TABLE public.rev_b ENABLE ALWAYS TRIGGER zz_fence_truncate;
CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON public.rev_b1 FOR EACH STATEMENT EXECUTE FUNCTION public.fence_refuse_truncate();
ALTER TABLE public.rev_b1 ENABLE ALWAYS TRIGGER zz_fence_truncate;
SELECT * FROM members('rev');
SELECT * FROM audit_new();
INSERT INTO rev VALUES ('b1', 2, 'no token');
UPDATE rev_a SET v = 'no token';
TRUNCATE rev_b1;
TRUNCATE rev;

-- fewer arguments: the defaults (writer_epoch, strict)
SET ROLE fence_regress_allow_owner;
CREATE TABLE bare (id int, writer_epoch bigint);
CREATE TABLE alt (id int, epoch bigint);
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON bare
  FOR EACH ROW EXECUTE FUNCTION fence_guard();
CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON alt
  FOR EACH ROW EXECUTE FUNCTION fence_guard('epoch');
SELECT * FROM registry() WHERE relation IN ('bare', 'alt');
SELECT action, relation FROM audit_new();
RESET ROLE;

--
-- 2. DETACH PARTITION.
--
SET ROLE fence_regress_allow_owner;
CREATE TABLE ev (region text NOT NULL, id int NOT NULL, v text, writer_epoch bigint)
  PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us');
CREATE TABLE ev_old PARTITION OF ev FOR VALUES IN ('old');
INSERT INTO ev VALUES ('eu', 1, 'init', NULL), ('us', 1, 'init', NULL), ('old', 1, 'init', NULL);
SELECT fence_protect('ev', 'writer_epoch', 'repeat');
CREATE TABLE ev_plain (LIKE ev) PARTITION BY LIST (region);
CREATE TABLE ev_plain_eu PARTITION OF ev_plain FOR VALUES IN ('eu');
INSERT INTO ev_plain VALUES ('eu', 1, 'init', NULL);
SELECT * FROM audit_new();
-- as the owner
ALTER TABLE ev DETACH PARTITION ev_eu;
SELECT * FROM members('ev_eu');
SELECT * FROM audit_new();
TRUNCATE ev_eu;
INSERT INTO ev_eu VALUES ('eu', 2, 'no token');
UPDATE ev_eu SET v = 'no token';
DELETE FROM ev_eu;
UPDATE ev_eu SET v = 'detached, token', writer_epoch = :tk;
SELECT region, id, v, writer_epoch = :tk AS epoch_is_tk FROM ev_eu;
RESET ROLE;
-- as a superuser, CONCURRENTLY
ALTER TABLE ev DETACH PARTITION ev_us CONCURRENTLY;
SELECT * FROM members('ev_us');
SELECT * FROM audit_new();
TRUNCATE ev_us;
INSERT INTO ev_us VALUES ('us', 2, 'no token');
SET session_replication_role = replica;
UPDATE ev_us SET v = 'no token';
RESET session_replication_role;
SELECT region, id, v FROM ev_us;
-- what remains of ev
SELECT * FROM members('ev');
-- twin: detached from an unprotected table, the partition takes anything
SET ROLE fence_regress_allow_owner;
ALTER TABLE ev_plain DETACH PARTITION ev_plain_eu;
SELECT * FROM members('ev_plain_eu');
UPDATE ev_plain_eu SET v = 'no token';
TRUNCATE ev_plain_eu;
-- retention: detach, then drop
ALTER TABLE ev DETACH PARTITION ev_old;
DROP TABLE ev_old;
SELECT * FROM audit_new();
SELECT * FROM registry() WHERE relation LIKE 'ev%';

--
-- 3. ATTACH PARTITION and INHERIT.
--
-- an empty table
CREATE TABLE ev_new (LIKE ev);
ALTER TABLE ev ATTACH PARTITION ev_new FOR VALUES IN ('new');
SELECT * FROM members('ev_new');
SELECT * FROM audit_new();
INSERT INTO ev_new VALUES ('new', 1, 'no token');
TRUNCATE ev_new;
-- a table protected with the same column and mode, rows and all: the
-- partition detached above comes back
ALTER TABLE ev ATTACH PARTITION ev_eu FOR VALUES IN ('eu');
-- and one protected on its own
CREATE TABLE ev_sep (LIKE ev);
INSERT INTO ev_sep VALUES ('sep', 1, 'init', NULL);
SELECT fence_protect('ev_sep', 'writer_epoch', 'repeat');
ALTER TABLE ev ATTACH PARTITION ev_sep FOR VALUES IN ('sep');
SELECT * FROM audit_new();
-- each has one guard (the parent's), ALWAYS
SELECT * FROM members('ev');
SELECT tableoid::regclass AS part, region, id, v FROM ev ORDER BY region, id;
UPDATE ev SET v = 'no token' WHERE region IN ('eu', 'sep');
TRUNCATE ev_sep;
RESET ROLE;
-- as a superuser, an empty table
CREATE TABLE ev_new2 (LIKE ev);
ALTER TABLE ev_new2 OWNER TO fence_regress_allow_owner;
ALTER TABLE ev ATTACH PARTITION ev_new2 FOR VALUES IN ('new2');
SELECT * FROM members('ev_new2');
SELECT action, relation FROM audit_new();
-- a non-empty table that is not protected: refused
SET ROLE fence_regress_allow_owner;
CREATE TABLE ev_full (LIKE ev);
INSERT INTO ev_full VALUES ('full', 1, 'unchecked', NULL);
ALTER TABLE ev ATTACH PARTITION ev_full FOR VALUES IN ('full');
SELECT relispartition FROM pg_class WHERE oid = 'ev_full'::regclass;

-- legacy inheritance: an empty table may INHERIT, a non-empty one may not
CREATE TABLE lp (id int, v text, writer_epoch bigint);
SELECT fence_protect('lp');
CREATE TABLE lk_empty (LIKE lp);
ALTER TABLE lk_empty INHERIT lp;
CREATE TABLE lk_full (LIKE lp);
INSERT INTO lk_full VALUES (1, 'unchecked', NULL);
ALTER TABLE lk_full INHERIT lp;
SELECT * FROM members('lp');
SELECT action, relation FROM audit_new();
INSERT INTO lk_empty VALUES (1, 'no token');
TRUNCATE lk_empty;
DROP TABLE lk_empty, lk_full;
SELECT action, relation FROM audit_new();

--
-- 4. New members: PARTITION OF, INHERITS, and both inside CREATE SCHEMA.
--
CREATE TABLE ev_asia PARTITION OF ev FOR VALUES IN ('asia');
CREATE TABLE ev_am PARTITION OF ev FOR VALUES IN ('us-west', 'ca') PARTITION BY LIST (region);
CREATE TABLE ev_am_ca PARTITION OF ev_am FOR VALUES IN ('ca');
SELECT * FROM members('ev_am');
SELECT * FROM registry() WHERE relation IN ('ev_asia', 'ev_am', 'ev_am_ca');
INSERT INTO ev VALUES ('ca', 1, 'no token');
INSERT INTO ev_am_ca VALUES ('ca', 1, 'no token');
TRUNCATE ev_am_ca;
TRUNCATE ev_asia;
-- legacy inheritance: the child, and its child, get guards of their own
CREATE TABLE lp_kid (extra text) INHERITS (lp);
CREATE TABLE lp_grandkid () INHERITS (lp_kid);
SELECT * FROM members('lp');
SELECT action, relation FROM audit_new();
INSERT INTO lp_kid (id, v) VALUES (1, 'no token');
INSERT INTO lp_grandkid (id, v) VALUES (2, 'no token');
INSERT INTO lp_kid (id, v, writer_epoch) VALUES (1, 'kid', :tk);
INSERT INTO lp_grandkid (id, v, writer_epoch) VALUES (2, 'grandkid', :tk);
-- through the parent, without a token: refused for the children's rows
UPDATE lp SET v = 'through the parent';
DELETE FROM lp;
TRUNCATE lp;
TRUNCATE lp_kid;
-- ... and with a newer token it passes
SELECT fence_claim('ddl-allowed-2', '1 hour') AS tk2 \gset
UPDATE lp SET v = 'through the parent, token', writer_epoch = :tk2;
SELECT tableoid::regclass AS tbl, id, v, writer_epoch = :tk2 AS epoch_is_tk2 FROM lp ORDER BY id;
-- twin: unprotected, the parent reaches the child's rows unchecked
CREATE TABLE lp_plain (id int, v text, writer_epoch bigint);
CREATE TABLE lp_plain_kid (extra text) INHERITS (lp_plain);
INSERT INTO lp_plain_kid (id, v) VALUES (1, 'kid');
UPDATE lp_plain SET v = 'through the parent';
SELECT tableoid::regclass AS tbl, id, v FROM lp_plain ORDER BY id;
RESET ROLE;
-- CREATE SCHEMA ... CREATE TABLE (the tables belong to the schema's owner)
CREATE SCHEMA fence_allow_s AUTHORIZATION fence_regress_allow_owner
  CREATE TABLE ev_s PARTITION OF public.ev FOR VALUES IN ('s')
  CREATE TABLE lp_s (x int) INHERITS (public.lp);
SELECT * FROM members('fence_allow_s.ev_s');
SELECT * FROM members('fence_allow_s.lp_s');
SELECT action, relation FROM audit_new();
INSERT INTO fence_allow_s.ev_s VALUES ('s', 1, 'no token');
INSERT INTO fence_allow_s.lp_s (id, v) VALUES (1, 'no token');
TRUNCATE fence_allow_s.ev_s;
TRUNCATE fence_allow_s.lp_s;

--
-- 5. RENAME, SET SCHEMA, DROP.
--
-- as the owner
SET ROLE fence_regress_allow_owner;
ALTER TABLE restored RENAME TO restored_v2;
ALTER TABLE restored_v2 SET SCHEMA fence_allow_s;
ALTER TABLE ev_asia RENAME TO ev_asia_2026;
SELECT * FROM audit_new();
SELECT * FROM registry() WHERE relation LIKE '%restored%' OR relation LIKE 'ev_asia%';
SELECT * FROM members('fence_allow_s.restored_v2');
INSERT INTO fence_allow_s.restored_v2 (id, v) VALUES (3, 'no token');
TRUNCATE fence_allow_s.restored_v2;
RESET ROLE;
-- as a superuser
ALTER TABLE rev RENAME TO rev_v2;
DROP TABLE fence_allow_s.restored_v2;
DROP TABLE ev_asia_2026;
DROP TABLE bare, alt;
SELECT * FROM audit_new();
SELECT * FROM registry() WHERE relation LIKE '%restored%' OR relation LIKE 'ev_asia%'
    OR relation IN ('bare', 'alt') OR relation LIKE 'rev%';
-- a schema and what it holds
DROP SCHEMA fence_allow_s CASCADE;
SELECT action, relation FROM audit_new();
SELECT * FROM registry() WHERE relation LIKE '%ev_s' OR relation LIKE '%lp_s';
-- a partitioned table and its partitions
DROP TABLE rev_v2;
SELECT action, relation FROM audit_new();
SELECT * FROM registry() WHERE relation LIKE 'rev%';
-- nothing left behind: every registry row names a table that exists
SELECT count(*) AS dangling FROM fence_protected p
 WHERE NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = p.relation);

--
-- 6. Maintenance that changes no values.
--
SET ROLE fence_regress_allow_owner;
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, note text, writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO acct VALUES (1, 100, 'one'), (2, 200, 'two');
SELECT fence_protect('acct');
UPDATE acct SET writer_epoch = :tk;
CREATE UNLOGGED TABLE ul (id int PRIMARY KEY, writer_epoch bigint);
-- an unlogged table is not protected (a crash would empty it) ...
SELECT fence_protect('ul');
-- ... until it is logged
ALTER TABLE ul SET LOGGED;
SELECT fence_protect('ul');
SELECT action, relation FROM audit_new();
-- as the owner
VACUUM FULL acct;
CLUSTER acct USING acct_pkey;
REINDEX TABLE acct;
REINDEX TABLE CONCURRENTLY acct;
ALTER TABLE acct SET ACCESS METHOD heap;
ALTER TABLE acct ADD COLUMN extra int;
ALTER TABLE acct ADD COLUMN flag text NOT NULL DEFAULT 'x';
ALTER TABLE acct DROP COLUMN extra;
-- a change of type that rewrites the table converts every stored value
-- without a token (table_rewrite): refused unless declared, even int to
-- bigint, which keeps values
ALTER TABLE acct ALTER COLUMN balance TYPE bigint;
\echo :SQLSTATE
BEGIN;
SELECT fence_allow_ddl('acct', 'widen balance, limit note');
ALTER TABLE acct ALTER COLUMN balance TYPE bigint;
ALTER TABLE acct ALTER COLUMN note TYPE varchar(20);
COMMIT;
ALTER TABLE acct SET (fillfactor = 70);
ALTER TABLE ul SET LOGGED;
VACUUM FULL ev;
RESET ROLE;
-- as a superuser
VACUUM FULL acct;
CLUSTER acct;
REINDEX TABLE acct;
ALTER TABLE acct ADD COLUMN extra2 int;
ALTER TABLE acct DROP COLUMN extra2;
-- a change of type that needs no rewrite converts nothing: allowed
ALTER TABLE acct ALTER COLUMN note TYPE varchar(40);
-- still protected, values unchanged
SELECT * FROM members('acct');
SELECT relpersistence FROM pg_class WHERE oid = 'ul'::regclass;
SELECT * FROM members('ul');
SELECT id, balance, note, flag, writer_epoch = :tk AS epoch_is_tk FROM acct ORDER BY id;
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'acct'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum;
UPDATE acct SET balance = 0;
TRUNCATE acct;
INSERT INTO ul VALUES (1, NULL);
UPDATE acct SET balance = balance + 1, writer_epoch = :tk2;
SELECT id, balance, writer_epoch = :tk2 AS epoch_is_tk2 FROM acct ORDER BY id;
SELECT action, relation FROM audit_new();

--
-- 7. Triggers that bind or mint tokens.
--
SET ROLE fence_regress_allow_owner;
CREATE TABLE launder (id int PRIMARY KEY, v text, writer_epoch bigint);
SELECT fence_protect('launder');
CREATE TABLE launder_plain (LIKE launder);
SELECT fence_claim('trig-job', '1 hour') IS NOT NULL AS claimed;
CREATE FUNCTION bind_in_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM fence_begin('trig-job', (SELECT c.token FROM fence_claims c WHERE c.job = 'trig-job'));
  IF TG_LEVEL = 'ROW' THEN RETURN NEW; END IF;
  RETURN NULL;
END $$;
-- fence_begin in a BEFORE ROW trigger of a protected table
CREATE TRIGGER aa_bind BEFORE INSERT OR UPDATE ON launder
  FOR EACH ROW EXECUTE FUNCTION bind_in_trigger();
INSERT INTO launder (id, v) VALUES (1, 'bound in a trigger');
BEGIN;
INSERT INTO launder (id, v) VALUES (1, 'bound in a trigger');
ROLLBACK;
-- in any trigger, on any table
CREATE TRIGGER bind AFTER INSERT ON launder_plain
  FOR EACH STATEMENT EXECUTE FUNCTION bind_in_trigger();
INSERT INTO launder_plain (id, v) VALUES (1, 'bound in a trigger');
SELECT count(*) AS plain_rows FROM launder_plain;
DROP TRIGGER aa_bind ON launder;
DROP TRIGGER bind ON launder_plain;
-- twin: the same token bound by the transaction's own statement
BEGIN;
SELECT fence_begin('trig-job', (SELECT c.token FROM fence_claims c WHERE c.job = 'trig-job'));
INSERT INTO launder (id, v) VALUES (1, 'bound by the transaction');
COMMIT;

-- fence_claim and fence_renew may be called from a trigger
CREATE FUNCTION claim_in_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.writer_epoch := fence_claim(TG_TABLE_NAME || ':' || NEW.id, '1 hour');
  RETURN NEW;
END $$;
CREATE FUNCTION claim_renew_in_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.writer_epoch := fence_claim(TG_TABLE_NAME || ':' || NEW.id, '1 hour');
  PERFORM fence_renew(TG_TABLE_NAME || ':' || NEW.id, NEW.writer_epoch, '2 hours');
  RETURN NEW;
END $$;
CREATE TRIGGER aa_claim BEFORE INSERT OR UPDATE ON launder_plain
  FOR EACH ROW EXECUTE FUNCTION claim_renew_in_trigger();
INSERT INTO launder_plain (id, v) VALUES (2, 'claimed in a trigger');
SELECT id, v, writer_epoch = fence_current('launder_plain:2') AS current_token,
       (SELECT lease_expires_at > now() + interval '90 minutes' FROM fence_claims
         WHERE job = 'launder_plain:2') AS renewed
  FROM launder_plain;
-- but the guard does not take such a token as the statement's: laundering
CREATE TRIGGER aa_claim BEFORE INSERT OR UPDATE ON launder
  FOR EACH ROW EXECUTE FUNCTION claim_in_trigger();
INSERT INTO launder (id, v) VALUES (2, 'laundered');
BEGIN;
INSERT INTO launder (id, v) VALUES (2, 'laundered');
ROLLBACK;
INSERT INTO launder (id, v) SELECT g, 'laundered' FROM generate_series(3, 5) g;
UPDATE launder SET v = 'laundered', writer_epoch = writer_epoch WHERE id = 1;
-- (an UPDATE that does not assign the epoch column carries no token at all)
UPDATE launder SET v = 'laundered' WHERE id = 1;
DROP TRIGGER aa_claim ON launder;
-- renewing the token in the trigger changes nothing
CREATE TRIGGER aa_claim BEFORE INSERT OR UPDATE ON launder
  FOR EACH ROW EXECUTE FUNCTION claim_renew_in_trigger();
INSERT INTO launder (id, v) VALUES (2, 'laundered, renewed');
BEGIN;
INSERT INTO launder (id, v) VALUES (2, 'laundered, renewed');
ROLLBACK;
INSERT INTO launder (id, v) SELECT g, 'laundered, renewed' FROM generate_series(3, 5) g;
UPDATE launder SET v = 'laundered, renewed', writer_epoch = writer_epoch WHERE id = 1;
DROP TRIGGER aa_claim ON launder;
-- nor the statement's own fence_claim, renewed or not
INSERT INTO launder VALUES (6, 'claimed by the statement', fence_claim('launder-inline', '1 hour'));
INSERT INTO launder (id, v, writer_epoch)
  SELECT 6, 'claimed and renewed by the statement', c.t
    FROM (SELECT fence_claim('launder-inline', '1 hour') AS t) c,
         LATERAL (SELECT fence_renew('launder-inline', c.t, '2 hours')) r;
-- twin: a token claimed by an earlier statement of the same transaction,
-- written by a trigger or by the statement
CREATE FUNCTION token_from_registry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.writer_epoch := (SELECT c.token FROM fence_claims c WHERE c.job = 'launder-ok');
  RETURN NEW;
END $$;
CREATE TRIGGER aa_lookup BEFORE INSERT ON launder
  FOR EACH ROW EXECUTE FUNCTION token_from_registry();
BEGIN;
SELECT fence_claim('launder-ok', '1 hour') IS NOT NULL AS claimed;
INSERT INTO launder (id, v) VALUES (7, 'claimed earlier, written by a trigger');
COMMIT;
DROP TRIGGER aa_lookup ON launder;
BEGIN;
SELECT fence_claim('launder-ok-2', '1 hour') AS t2 \gset
INSERT INTO launder VALUES (8, 'claimed earlier, written by the statement', :t2);
COMMIT;
SELECT l.id, l.v, c.job AS epoch_of_job
  FROM launder l LEFT JOIN fence_claims c ON c.token = l.writer_epoch ORDER BY l.id;
RESET ROLE;

--
-- 8. The counter, even for a superuser.
--
SELECT last_value AS seq_before FROM fence_token_seq \gset
ALTER SEQUENCE fence_token_seq RESTART;
ALTER SEQUENCE fence_token_seq RESTART WITH 1;
SELECT last_value = :seq_before AS counter_unchanged FROM fence_token_seq;

--
-- 9. DROP EXTENSION: refused while a table is protected; allowed once none is.
--
DROP EXTENSION fence;
DROP EXTENSION fence CASCADE;
SELECT extname FROM pg_extension WHERE extname = 'fence';
SET ROLE fence_regress_allow_owner;
DROP TABLE lp CASCADE;
DROP TABLE ev_us;
DROP TABLE ev_full, ev_plain, ev_plain_eu, lp_plain CASCADE;
DROP TABLE launder, launder_plain;
SELECT * FROM registry();
SELECT fence_unprotect('acct');
SELECT fence_unprotect('ul');
SELECT fence_unprotect('ev');
SELECT * FROM registry();
SELECT action, relation FROM audit_new();
SELECT count(*) AS fence_triggers FROM pg_trigger
 WHERE tgfoid IN ('fence_guard'::regproc, 'fence_refuse_truncate'::regproc);
RESET ROLE;
DROP EXTENSION fence;
SELECT count(*) AS fence_installed FROM pg_extension WHERE extname = 'fence';

SET ROLE fence_regress_allow_owner;
DROP TABLE acct, ul, ev;
DROP FUNCTION bind_in_trigger(), claim_in_trigger(), claim_renew_in_trigger(), token_from_registry();
RESET ROLE;
DROP TABLE audit_mark;
DROP FUNCTION audit_new(), members(regclass), registry();
DROP OWNED BY fence_regress_allow_owner;
REVOKE CREATE ON SCHEMA public FROM fence_regress_allow_owner;
DROP ROLE fence_regress_allow_owner;
-- should a step above have failed, leave no extension behind for the next file
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS fence;
RESET client_min_messages;
