--
-- privileges: what a plain role can and cannot do.
-- It can claim, bind, write through the guard with a token, renew and
-- release. It cannot write fence_claims, cannot move fence_token_seq,
-- cannot remove or change the guard of a table it does not own (even
-- holding every privilege on it), and cannot get around the guard by
-- calling fence_guard() itself, by TRUNCATE, or by switching off triggers.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_worker;
CREATE ROLE fence_regress_owner;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_worker');
GRANT CREATE ON SCHEMA public TO fence_regress_owner;

-- The functions: signatures, security and search_path settings, and not
-- STRICT (NULL input must raise an error, not return NULL silently).
-- fence_claim, fence_renew and fence_release write fence_claims although
-- their callers cannot: their C code switches to the table's owner for its
-- own, fully qualified statements, so they need no SECURITY DEFINER.
SELECT p.oid::regprocedure AS function, p.prorettype::regtype AS returns,
       p.prosecdef AS security_definer, p.proconfig, p.proisstrict AS strict
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                  AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'fence'
 WHERE p.proname IN ('fence_claim', 'fence_renew', 'fence_release', 'fence_current',
                     'fence_is_current', 'fence_begin', 'fence_guard', 'fence_protect',
                     'fence_unprotect')
 ORDER BY p.proname;
-- what a role with no grants of its own gets (that is, PUBLIC)
SELECT priv, has_table_privilege('fence_regress_worker', 'fence_claims', priv) AS granted
  FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS priv;
SELECT priv, has_sequence_privilege('fence_regress_worker', 'fence_token_seq', priv) AS granted
  FROM unnest(ARRAY['SELECT', 'USAGE', 'UPDATE']) AS priv;

CREATE TABLE stock (item text PRIMARY KEY, qty int NOT NULL, writer_epoch bigint);
CREATE TABLE stock_plain (LIKE stock INCLUDING ALL);
INSERT INTO stock VALUES ('bolt', 10, NULL);
INSERT INTO stock_plain VALUES ('bolt', 10, NULL);
SELECT fence_protect('stock');
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON stock, stock_plain TO fence_regress_worker;

SET ROLE fence_regress_worker;
--
-- The worker loop works for a plain role: claim, begin, write, renew, release.
--
SELECT fence_claim('w-job', '1 hour', 'worker') AS tw \gset
SELECT fence_claim('w-job') IS NULL AS held;
BEGIN;
SELECT fence_begin('w-job', :tw);
UPDATE stock SET qty = qty - 1 WHERE item = 'bolt';
INSERT INTO stock (item, qty) VALUES ('nut', 5);
COMMIT;
SELECT fence_renew('w-job', :tw, '2 hours') > now() + interval '1 hour' AS renewed;
SELECT item, qty, writer_epoch = :tw AS stamped_tw FROM stock ORDER BY item;
-- a statement token works too
SELECT fence_claim('w-job-2', '1 hour', 'worker') AS tw2 \gset
UPDATE stock SET qty = qty - 1, writer_epoch = :tw2 WHERE item = 'bolt';
SELECT item, qty, writer_epoch = :tw2 AS stamped_tw2 FROM stock WHERE item = 'bolt';
-- reading the registry and the counter is allowed
SELECT job, holder, released FROM fence_claims ORDER BY job;
SELECT last_value >= :tw2 AS counter_readable FROM fence_token_seq;
SELECT fence_current('w-job') = :tw AS current, fence_is_current('w-job', :tw) AS is_current;

--
-- Writing the registry directly is not.
--
INSERT INTO fence_claims (job, token, holder, claimed_at, lease_expires_at)
  VALUES ('forged', 999999999, 'worker', now(), now() + interval '1 day');
UPDATE fence_claims SET lease_expires_at = now() + interval '1 day' WHERE job = 'w-job';
UPDATE fence_claims SET token = token + 1000 WHERE job = 'w-job';
DELETE FROM fence_claims WHERE job = 'w-job';
TRUNCATE fence_claims;
-- nor moving the counter
SELECT nextval('fence_token_seq');
SELECT setval('fence_token_seq', 1);
SELECT setval('fence_token_seq', 999999999);
ALTER SEQUENCE fence_token_seq RESTART;

--
-- Nor getting around the guard.
--
UPDATE stock SET qty = 0 WHERE item = 'bolt';
UPDATE stock_plain SET qty = 0 WHERE item = 'bolt';
SELECT fence_guard();
TRUNCATE stock;
TRUNCATE stock_plain;
SET session_replication_role = replica;
ALTER TABLE stock DISABLE TRIGGER zz_fence_guard;
DROP TRIGGER zz_fence_guard ON stock;
SELECT fence_unprotect('stock');
SELECT fence_protect('stock', 'writer_epoch', 'shared');
SELECT fence_protect('stock_plain');
-- the worker's own claim is released only with its token
SELECT fence_release('w-job', :tw + 1000) AS forged_release;
SELECT fence_release('w-job', :tw) AS released;
RESET ROLE;

-- none of that changed the registry or the guard
SELECT job, holder, released FROM fence_claims ORDER BY job;
SELECT item, qty FROM stock ORDER BY item;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'stock'::regclass ORDER BY tgname;
SELECT count(*) AS plain_triggers FROM pg_trigger WHERE tgrelid = 'stock_plain'::regclass;

--
-- A table's owner may protect and unprotect it; a role holding every
-- privilege on it, TRIGGER included, but not owning it may not. The owner
-- is no more able than anyone else to write fence_claims.
--
SET ROLE fence_regress_owner;
CREATE TABLE owned (id int PRIMARY KEY, writer_epoch bigint);
SELECT fence_protect('owned');
SELECT fence_protect('owned', 'writer_epoch', 'repeat');
SELECT fence_unprotect('owned');
SELECT fence_protect('owned');
GRANT ALL ON owned TO fence_regress_worker;
DELETE FROM fence_claims;
SELECT nextval('fence_token_seq');
SET ROLE fence_regress_worker;
SELECT fence_unprotect('owned');
SELECT fence_protect('owned', 'writer_epoch', 'shared');
INSERT INTO owned VALUES (1);
TRUNCATE owned;
RESET ROLE;
SELECT count(*) AS guard_triggers FROM pg_trigger WHERE tgrelid = 'owned'::regclass;
-- a superuser may unprotect any table
SELECT fence_unprotect('owned');

DROP TABLE stock, stock_plain, owned;
DROP EXTENSION fence;
REVOKE CREATE ON SCHEMA public FROM fence_regress_owner;
DROP ROLE fence_regress_worker;
DROP ROLE fence_regress_owner;
