--
-- begin_in_statement: a binding made during a statement cannot vouch for
-- that statement's writes.
--
-- fence_begin (and fence_begin_fresh) called while a write is already
-- running, from a function the write evaluates, would bind a token the
-- statement was not written with, and the guard would stamp it.  Refused
-- (5F003) in both forms of the guard, whatever runs the function:
--   1. a trigger body (fence_begin itself refuses it there, 5F006, even
--      under an earlier binding);
--   2. the WHEN clause of a user trigger on the protected table (BEFORE,
--      and for the after form AFTER as well);
--   3. the DEFAULT of another column (INSERT, and UPDATE ... SET DEFAULT);
--   4. a CHECK constraint (after the guard's row: so the second row of an
--      INSERT whose first row carries its own token; in the after form, any
--      UPDATE);
--   5. a row-level security policy, as a role under the policy;
--   6. a function in the SET list;
--   7. a function in the WHERE clause;
--   8. a CTE;
--   9. a volatile function in RETURNING (the next row of the statement);
--  10. fence_begin_fresh in the WHERE clause.
-- Each has its twin: the same statement, the same function binding the
-- same token, after fence_begin in an earlier statement of the
-- transaction: the write lands.  The binding that vouches for a statement
-- is the one in force when it began (11).  A function, DO block or
-- procedure that calls fence_begin and then writes in a later statement of
-- its own is the ordinary pattern, and works (12).
--
-- Both tables are in repeat mode, so one execution may write a row again.
-- acct has the BEFORE guard, stock the after form; the rows of stock hold
-- the token already, so the after form takes a write that leaves the epoch
-- alone as one made with the bound token.  Epochs are shown as token names.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE ROLE fence_regress_bis_worker;
-- the worker API is granted to no role until fence_grant_worker
SELECT fence_grant_worker('fence_regress_bis_worker');
-- the superuser makes the claims below and the worker binds them, as a
-- supervisor may (a member of the claiming role would too)
GRANT EXECUTE ON FUNCTION fence_renew_any(text, interval) TO fence_regress_bis_worker;

CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);
INSERT INTO tok SELECT 'te', fence_claim('bis-early', '1 hour') RETURNING t AS te \gset
INSERT INTO tok SELECT 't', fence_claim('bis', '1 hour') RETURNING t AS t \gset
INSERT INTO tok VALUES ('none', 0);

-- Functions that bind job bis's current token while the statement runs.
CREATE FUNCTION bind_job() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	RETURN true;
END $$;
CREATE FUNCTION bind_note(v text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	RETURN v;
END $$;
CREATE FUNCTION bind_fresh() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin_fresh();
	RETURN true;
END $$;
CREATE FUNCTION bind_in_body() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	RETURN NEW;
END $$;
CREATE FUNCTION keep_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RETURN NEW;
END $$;

CREATE TABLE acct (id int PRIMARY KEY, note text NOT NULL,
                   bound boolean DEFAULT bind_job(),
                   writer_epoch bigint NOT NULL DEFAULT 0);
INSERT INTO acct (id, note, bound) VALUES (1, 'initial', false), (2, 'initial', false);
CREATE TABLE stock (LIKE acct INCLUDING ALL);
INSERT INTO stock (id, note, bound, writer_epoch) VALUES (1, 'initial', false, :t), (2, 'initial', false, :t);
SELECT fence_protect('acct', 'writer_epoch', 'repeat');
SELECT fence_protect('stock', 'writer_epoch', 'repeat', 'after');
GRANT SELECT, INSERT, UPDATE ON acct, stock TO fence_regress_bis_worker;

CREATE TEMP VIEW a AS
  SELECT x.id, x.note, x.bound, coalesce(tok.name, x.writer_epoch::text) AS epoch
    FROM acct x LEFT JOIN tok ON tok.t = x.writer_epoch ORDER BY x.id;
CREATE TEMP VIEW s AS
  SELECT x.id, x.note, x.bound, coalesce(tok.name, x.writer_epoch::text) AS epoch
    FROM stock x LEFT JOIN tok ON tok.t = x.writer_epoch ORDER BY x.id;

-- Without any binding, a write that carries no token is refused.
UPDATE acct SET note = 'no token' WHERE id = 1;
UPDATE stock SET note = 'no token' WHERE id = 1;

--
-- 1. A trigger body: fence_begin refuses (5F006), under an earlier binding
-- too.
--
CREATE TRIGGER aa_body BEFORE UPDATE ON acct FOR EACH ROW EXECUTE FUNCTION bind_in_body();
CREATE TRIGGER aa_body BEFORE UPDATE ON stock FOR EACH ROW EXECUTE FUNCTION bind_in_body();
BEGIN;
UPDATE acct SET note = 'trigger body' WHERE id = 1;
COMMIT;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE acct SET note = 'trigger body' WHERE id = 1;
COMMIT;
BEGIN;
UPDATE stock SET note = 'trigger body' WHERE id = 1;
COMMIT;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE stock SET note = 'trigger body' WHERE id = 1;
COMMIT;
DROP TRIGGER aa_body ON acct;
DROP TRIGGER aa_body ON stock;
SELECT * FROM a;
SELECT * FROM s;

--
-- 2. The WHEN clause of a user trigger (pg_trigger_depth() is 0 there).
--
CREATE TRIGGER aa_when BEFORE UPDATE ON acct FOR EACH ROW
  WHEN (bind_job()) EXECUTE FUNCTION keep_row();
BEGIN;
UPDATE acct SET note = 'when' WHERE id = 1;
COMMIT;
SELECT * FROM a WHERE id = 1;
-- twin
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE acct SET note = 'when' WHERE id = 1;
COMMIT;
SELECT * FROM a WHERE id = 1;
DROP TRIGGER aa_when ON acct;
-- the after form: a BEFORE trigger's WHEN clause, and an AFTER trigger's
-- evaluated before the guard's own
CREATE TRIGGER aa_when BEFORE UPDATE ON stock FOR EACH ROW
  WHEN (bind_job()) EXECUTE FUNCTION keep_row();
BEGIN;
UPDATE stock SET note = 'when' WHERE id = 1;
COMMIT;
SELECT * FROM s WHERE id = 1;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE stock SET note = 'when' WHERE id = 1;
COMMIT;
SELECT * FROM s WHERE id = 1;
DROP TRIGGER aa_when ON stock;
CREATE TRIGGER aa_when_after AFTER UPDATE ON stock FOR EACH ROW
  WHEN (bind_job()) EXECUTE FUNCTION keep_row();
BEGIN;
UPDATE stock SET note = 'when, after' WHERE id = 1;
COMMIT;
SELECT * FROM s WHERE id = 1;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE stock SET note = 'when, after' WHERE id = 1;
COMMIT;
SELECT * FROM s WHERE id = 1;
DROP TRIGGER aa_when_after ON stock;

--
-- 3. The DEFAULT of another column: INSERT, and UPDATE ... SET DEFAULT.
--
BEGIN;
INSERT INTO acct (id, note) VALUES (3, 'default');
COMMIT;
BEGIN;
UPDATE acct SET note = 'set default', bound = DEFAULT WHERE id = 2;
COMMIT;
SELECT * FROM a WHERE id >= 2;
BEGIN;
SELECT fence_begin('bis', :t);
INSERT INTO acct (id, note) VALUES (3, 'default');
UPDATE acct SET note = 'set default', bound = DEFAULT WHERE id = 2;
COMMIT;
SELECT * FROM a WHERE id >= 2;
BEGIN;
INSERT INTO stock (id, note) VALUES (3, 'default');
COMMIT;
BEGIN;
UPDATE stock SET note = 'set default', bound = DEFAULT WHERE id = 2;
COMMIT;
SELECT * FROM s WHERE id >= 2;
BEGIN;
SELECT fence_begin('bis', :t);
INSERT INTO stock (id, note) VALUES (3, 'default');
UPDATE stock SET note = 'set default', bound = DEFAULT WHERE id = 2;
COMMIT;
SELECT * FROM s WHERE id >= 2;

--
-- 4. A CHECK constraint.  It is evaluated after the BEFORE guard has
-- checked the row, so it binds for the statement's next row; the after
-- form checks an UPDATE after it, at the row itself.
--
ALTER TABLE acct ADD CONSTRAINT bind_check CHECK (bind_job()) NOT VALID;
ALTER TABLE stock ADD CONSTRAINT bind_check CHECK (bind_job()) NOT VALID;
BEGIN;
INSERT INTO acct (id, note, bound, writer_epoch)
  VALUES (4, 'check, own token', false, :t), (5, 'check, no token', false, 0);
COMMIT;
SELECT * FROM a WHERE id >= 4;
BEGIN;
SELECT fence_begin('bis', :t);
INSERT INTO acct (id, note, bound, writer_epoch)
  VALUES (4, 'check, own token', false, :t), (5, 'check, no token', false, 0);
COMMIT;
SELECT * FROM a WHERE id >= 4;
BEGIN;
INSERT INTO stock (id, note, bound, writer_epoch)
  VALUES (4, 'check, own token', false, :t), (5, 'check, no token', false, 0);
COMMIT;
BEGIN;
UPDATE stock SET note = 'check' WHERE id = 1;
COMMIT;
SELECT * FROM s WHERE id = 1 OR id >= 4;
BEGIN;
SELECT fence_begin('bis', :t);
INSERT INTO stock (id, note, bound, writer_epoch)
  VALUES (4, 'check, own token', false, :t), (5, 'check, no token', false, 0);
UPDATE stock SET note = 'check' WHERE id = 1;
COMMIT;
SELECT * FROM s WHERE id = 1 OR id >= 4;
ALTER TABLE acct DROP CONSTRAINT bind_check;
ALTER TABLE stock DROP CONSTRAINT bind_check;

--
-- 5. A row-level security policy, for a role under it.
--
ALTER TABLE acct ENABLE ROW LEVEL SECURITY;
ALTER TABLE stock ENABLE ROW LEVEL SECURITY;
CREATE POLICY bind_policy ON acct USING (bind_job());
CREATE POLICY bind_policy ON stock USING (bind_job());
SET ROLE fence_regress_bis_worker;
BEGIN;
UPDATE acct SET note = 'policy' WHERE id = 1;
COMMIT;
BEGIN;
UPDATE stock SET note = 'policy' WHERE id = 1;
COMMIT;
RESET ROLE;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
SET ROLE fence_regress_bis_worker;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE acct SET note = 'policy' WHERE id = 1;
UPDATE stock SET note = 'policy' WHERE id = 1;
COMMIT;
RESET ROLE;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
DROP POLICY bind_policy ON acct;
DROP POLICY bind_policy ON stock;
ALTER TABLE acct DISABLE ROW LEVEL SECURITY;
ALTER TABLE stock DISABLE ROW LEVEL SECURITY;

--
-- 6. A function in the SET list.
--
BEGIN;
UPDATE acct SET note = bind_note('set list') WHERE id = 1;
COMMIT;
BEGIN;
UPDATE stock SET note = bind_note('set list') WHERE id = 1;
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE acct SET note = bind_note('set list') WHERE id = 1;
UPDATE stock SET note = bind_note('set list') WHERE id = 1;
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;

--
-- 7. A function in the WHERE clause.
--
BEGIN;
UPDATE acct SET note = 'where' WHERE id = 1 AND bind_job();
COMMIT;
BEGIN;
UPDATE stock SET note = 'where' WHERE id = 1 AND bind_job();
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE acct SET note = 'where' WHERE id = 1 AND bind_job();
UPDATE stock SET note = 'where' WHERE id = 1 AND bind_job();
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;

--
-- 8. A CTE.
--
BEGIN;
WITH b AS (SELECT fence_begin('bis', :t)) UPDATE acct SET note = 'cte' FROM b WHERE id = 1;
COMMIT;
BEGIN;
WITH b AS (SELECT fence_begin('bis', :t)) UPDATE stock SET note = 'cte' FROM b WHERE id = 1;
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
BEGIN;
SELECT fence_begin('bis', :t);
WITH b AS (SELECT fence_begin('bis', :t)) UPDATE acct SET note = 'cte' FROM b WHERE id = 1;
WITH b AS (SELECT fence_begin('bis', :t)) UPDATE stock SET note = 'cte' FROM b WHERE id = 1;
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;

--
-- 9. A volatile function in RETURNING: it runs after its row is written,
-- so it binds for the next row.  INSERT (the BEFORE guard, in both forms),
-- and an UPDATE of the after form whose first row writes its own token.
--
BEGIN;
INSERT INTO acct (id, note, bound, writer_epoch)
  VALUES (6, 'returning, own token', false, :t), (7, 'returning, no token', false, 0)
  RETURNING id, bind_job();
COMMIT;
BEGIN;
INSERT INTO stock (id, note, bound, writer_epoch)
  VALUES (6, 'returning, own token', false, :t), (7, 'returning, no token', false, 0)
  RETURNING id, bind_job();
COMMIT;
SELECT * FROM a WHERE id >= 6;
SELECT * FROM s WHERE id >= 6;
BEGIN;
SELECT fence_begin('bis', :t);
INSERT INTO acct (id, note, bound, writer_epoch)
  VALUES (6, 'returning, own token', false, :t), (7, 'returning, no token', false, 0)
  RETURNING id, bind_job();
INSERT INTO stock (id, note, bound, writer_epoch)
  VALUES (6, 'returning, own token', false, :t), (7, 'returning, no token', false, 0)
  RETURNING id, bind_job();
COMMIT;
SELECT * FROM a WHERE id >= 6;
SELECT * FROM s WHERE id >= 6;
-- the after form's UPDATE: row 1 goes from epoch 0 to t (its own token),
-- row 2 keeps t, which only a binding could vouch for
CREATE TABLE stock_ret (LIKE acct INCLUDING ALL);
INSERT INTO stock_ret (id, note, bound, writer_epoch) VALUES (1, 'initial', false, 0), (2, 'initial', false, :t);
SELECT fence_protect('stock_ret', 'writer_epoch', 'repeat', 'after');
CREATE TEMP VIEW r AS
  SELECT x.id, x.note, x.bound, coalesce(tok.name, x.writer_epoch::text) AS epoch
    FROM stock_ret x LEFT JOIN tok ON tok.t = x.writer_epoch ORDER BY x.id;
BEGIN;
UPDATE stock_ret SET note = 'returning',
       writer_epoch = CASE WHEN id = 1 THEN :t ELSE writer_epoch END
  RETURNING id, bind_job();
COMMIT;
SELECT * FROM r;
BEGIN;
SELECT fence_begin('bis', :t);
UPDATE stock_ret SET note = 'returning',
       writer_epoch = CASE WHEN id = 1 THEN :t ELSE writer_epoch END
  RETURNING id, bind_job();
COMMIT;
SELECT * FROM r;

--
-- 10. fence_begin_fresh follows the same rule (row 2; its fresh token is
-- newer than t).
--
BEGIN;
UPDATE acct SET note = 'fresh' WHERE id = 2 AND bind_fresh();
COMMIT;
SELECT * FROM a WHERE id = 2;
BEGIN;
SELECT fence_begin_fresh() AS tf \gset
UPDATE acct SET note = 'fresh' WHERE id = 2 AND bind_fresh();
COMMIT;
INSERT INTO tok VALUES ('fresh', :tf);
SELECT * FROM a WHERE id = 2;

--
-- 11. The binding that vouches for a statement is the one in force when it
-- began: under bis-early's binding, a statement whose SET list binds bis is
-- stamped with bis-early's token; the next statement carries bis's.
--
BEGIN;
SELECT fence_begin('bis-early', :te);
INSERT INTO acct (id, note, bound) VALUES (8, 'early', false);
UPDATE acct SET note = bind_note('early, bound bis') WHERE id = 8;
SELECT * FROM a WHERE id = 8;
UPDATE acct SET note = 'then bis' WHERE id = 8;
SELECT * FROM a WHERE id = 8;
COMMIT;

-- The refusal in full (token numbers replaced by N).
CREATE FUNCTION pg_temp.fenced(stmt text)
RETURNS TABLE (sqlstate text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
DECLARE
	m text;
	d text;
	h text;
BEGIN
	EXECUTE stmt;
	RETURN QUERY SELECT 'no error'::text, NULL::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
	RETURN QUERY SELECT SQLSTATE::text,
		regexp_replace(m, '[0-9]+', 'N', 'g'),
		regexp_replace(d, '[0-9]+', 'N', 'g'),
		regexp_replace(h, '[0-9]+', 'N', 'g');
END
$$;
\x on
BEGIN;
SELECT * FROM pg_temp.fenced('UPDATE acct SET note = bind_note(''in full'') WHERE id = 1');
SELECT * FROM pg_temp.fenced('UPDATE stock SET note = bind_note(''in full'') WHERE id = 1');
SELECT * FROM pg_temp.fenced('UPDATE acct SET note = ''in full'' WHERE id = 1 AND bind_fresh()');
ROLLBACK;
\x off

--
-- 12. The ordinary patterns: fence_begin, then the write in a later
-- statement, inside one function, DO block or procedure.
--
CREATE FUNCTION handler(v text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	UPDATE acct SET note = v WHERE id = 1;
	UPDATE stock SET note = v WHERE id = 1;
END $$;
CREATE FUNCTION handler_sql(v text) RETURNS void LANGUAGE sql AS $$
	SELECT fence_begin('bis', fence_current('bis'));
	UPDATE acct SET note = v WHERE id = 1;
	UPDATE stock SET note = v WHERE id = 1;
$$;
CREATE PROCEDURE handler_proc(v text) LANGUAGE plpgsql AS $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	UPDATE acct SET note = v WHERE id = 1;
	UPDATE stock SET note = v WHERE id = 1;
END $$;
BEGIN;
SELECT handler('handler');
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
-- in autocommit (fence_begin warns: the binding ends with the statement)
SELECT handler('handler, autocommit');
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
BEGIN;
SELECT handler_sql('sql function');
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
BEGIN;
DO $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	UPDATE acct SET note = 'do block' WHERE id = 1;
	UPDATE stock SET note = 'do block' WHERE id = 1;
END $$;
COMMIT;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
-- outside a transaction block, DO and CALL run non-atomic
DO $$
BEGIN
	PERFORM fence_begin('bis', fence_current('bis'));
	UPDATE acct SET note = 'do block, autocommit' WHERE id = 1;
	UPDATE stock SET note = 'do block, autocommit' WHERE id = 1;
END $$;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
CALL handler_proc('procedure');
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
-- several statements in one query string
SELECT fence_begin('bis', :t) \; UPDATE acct SET note = 'query string' WHERE id = 1 \; UPDATE stock SET note = 'query string' WHERE id = 1;
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;
-- ... while a statement of theirs that binds as it writes is refused, in a
-- function as in a procedure (which runs non-atomic outside a block)
CREATE FUNCTION bind_while_writing() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	UPDATE acct SET note = 'bound while writing' WHERE id = 1 AND bind_job();
END $$;
CREATE PROCEDURE bind_while_writing_proc() LANGUAGE plpgsql AS $$
BEGIN
	UPDATE stock SET note = 'bound while writing' WHERE id = 1 AND bind_job();
END $$;
BEGIN;
SELECT bind_while_writing();
COMMIT;
CALL bind_while_writing_proc();
SELECT * FROM a WHERE id = 1;
SELECT * FROM s WHERE id = 1;

DROP VIEW a, s, r;
DROP TABLE acct, stock, stock_ret;
DROP FUNCTION bind_job(), bind_note(text), bind_fresh(), bind_in_body(), keep_row(),
  handler(text), handler_sql(text), bind_while_writing();
DROP PROCEDURE handler_proc(text), bind_while_writing_proc();
SELECT fence_revoke_worker('fence_regress_bis_worker');
REVOKE EXECUTE ON FUNCTION fence_renew_any(text, interval) FROM fence_regress_bis_worker;
DROP ROLE fence_regress_bis_worker;
DROP EXTENSION fence;
