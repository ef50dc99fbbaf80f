--
-- copied_rows: rows moved within a protected table keep their old epoch in
-- the INSERT that moves them (pg_partman's partition_data_id moves rows out
-- of the default partition with DELETE ... RETURNING feeding an INSERT into
-- the parent).  The rule: under a binding (fence_begin or
-- fence_begin_fresh), an INSERT whose epoch is below the bound token is
-- copied data and is stamped with the bound token.
--  (a) The move, as pg_partman does it, under fence_begin: every moved row
--      lands in its new partition stamped with the bound token; in strict,
--      repeat and shared mode.  Without the binding the same statement is
--      refused (5F003: the DELETE half carries no token).
--  (b) What stays refused: an INSERT under a binding whose epoch is above
--      the bound token (5F004: another token); an UPDATE whose SET list
--      writes a lower epoch under a binding (5F004: an UPDATE is not a
--      copy); a stale worker presenting its own old token in the INSERT
--      without a binding (5F001), while its twin on the unprotected table
--      lands with the stale token.
--  (c) Under fence_begin_fresh the same move works.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate
CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);

CREATE TABLE ev (id int, v text, writer_epoch bigint) PARTITION BY RANGE (id);
CREATE TABLE ev_default PARTITION OF ev DEFAULT;
CREATE TABLE evr (LIKE ev) PARTITION BY RANGE (id);
CREATE TABLE evr_default PARTITION OF evr DEFAULT;
CREATE TABLE evh (LIKE ev) PARTITION BY RANGE (id);
CREATE TABLE evh_default PARTITION OF evh DEFAULT;
CREATE TABLE evp (LIKE ev) PARTITION BY RANGE (id);                 -- unprotected twin
CREATE TABLE evp_default PARTITION OF evp DEFAULT;
SELECT fence_protect('ev');
SELECT fence_protect('evr', 'writer_epoch', 'repeat');
SELECT fence_protect('evh', 'writer_epoch', 'shared');

-- rows written by job "load" into the default partitions
INSERT INTO tok SELECT 'load', fence_claim('load', '1 hour');
INSERT INTO ev  SELECT g, 'row ' || g, (SELECT t FROM tok WHERE name = 'load') FROM generate_series(1, 6) g;
INSERT INTO evr SELECT * FROM ev;
INSERT INTO evh SELECT * FROM ev;
INSERT INTO evp SELECT * FROM ev;
SELECT fence_release('load', (SELECT t FROM tok WHERE name = 'load'));

CREATE TEMP VIEW rows_now AS
  SELECT x.tableoid::regclass AS part, x.id, coalesce(tok.name, '(not a token)') AS epoch
    FROM (SELECT tableoid, * FROM ev UNION ALL SELECT tableoid, * FROM evr
          UNION ALL SELECT tableoid, * FROM evh UNION ALL SELECT tableoid, * FROM evp) x
    LEFT JOIN tok ON tok.t = x.writer_epoch
   ORDER BY 1, 2;

--
-- (a) pg_partman's move: a partition for ids 1..3 cannot be created while
-- the default partition holds such rows, so the rows are moved out first,
-- into a holding table, then back through the parent.
--
CREATE TEMP TABLE hold (LIKE ev);
INSERT INTO tok SELECT 'mover', fence_claim('mover', '1 hour');
-- without a binding: the DELETE half carries no token
BEGIN;
WITH moved AS (DELETE FROM ev_default WHERE id < 4 RETURNING *)
  INSERT INTO ev SELECT * FROM moved;
\echo :SQLSTATE
ROLLBACK;
-- under the binding: moved and stamped
BEGIN;
SELECT fence_begin('mover', (SELECT t FROM tok WHERE name = 'mover'));
WITH moved AS (DELETE FROM ev_default WHERE id < 4 RETURNING *)
  INSERT INTO hold SELECT * FROM moved;
CREATE TABLE ev_p1 PARTITION OF ev FOR VALUES FROM (1) TO (4);
INSERT INTO ev SELECT * FROM hold;
TRUNCATE hold;
WITH moved AS (DELETE FROM evr_default WHERE id < 4 RETURNING *)
  INSERT INTO hold SELECT * FROM moved;
CREATE TABLE evr_p1 PARTITION OF evr FOR VALUES FROM (1) TO (4);
INSERT INTO evr SELECT * FROM hold;
TRUNCATE hold;
WITH moved AS (DELETE FROM evh_default WHERE id < 4 RETURNING *)
  INSERT INTO hold SELECT * FROM moved;
CREATE TABLE evh_p1 PARTITION OF evh FOR VALUES FROM (1) TO (4);
INSERT INTO evh SELECT * FROM hold;
TRUNCATE hold;
-- and the one-statement form pg_partman uses (DELETE ... RETURNING into INSERT)
WITH moved AS (DELETE FROM ev_default WHERE id = 6 RETURNING *)
  INSERT INTO ev SELECT * FROM moved;
COMMIT;
SELECT * FROM rows_now WHERE part::text NOT LIKE 'evp%';

--
-- (b) what stays refused
--
BEGIN;
SELECT fence_begin('mover', (SELECT t FROM tok WHERE name = 'mover'));
-- an epoch above the bound token is another token
INSERT INTO ev VALUES (7, 'higher', (SELECT t FROM tok WHERE name = 'mover') + 1);
\echo :SQLSTATE
ROLLBACK;
BEGIN;
SELECT fence_begin('mover', (SELECT t FROM tok WHERE name = 'mover'));
-- an UPDATE writing a lower epoch is not a copy
UPDATE ev SET writer_epoch = (SELECT t FROM tok WHERE name = 'load') WHERE id = 4;
\echo :SQLSTATE
ROLLBACK;
-- a stale worker: job "w" claimed, then taken over; the stale holder
-- inserts with its own old token and no binding
INSERT INTO tok SELECT 'w-stale', fence_claim('w', '1 second');
UPDATE fence_claims SET lease_expires_at = now() - interval '1 second' WHERE job = 'w';
INSERT INTO tok SELECT 'w-new', fence_claim('w', '1 hour');
INSERT INTO ev VALUES (8, 'stale', (SELECT t FROM tok WHERE name = 'w-stale'));
\echo :SQLSTATE
INSERT INTO evp VALUES (8, 'stale', (SELECT t FROM tok WHERE name = 'w-stale'));
SELECT * FROM rows_now WHERE id = 8;

--
-- (c) under fence_begin_fresh
--
BEGIN;
INSERT INTO tok SELECT 'fresh', fence_begin_fresh();
WITH moved AS (DELETE FROM evr_default WHERE id = 5 RETURNING *)
  INSERT INTO evr SELECT * FROM moved;
COMMIT;
SELECT * FROM rows_now WHERE part::text LIKE 'evr%' AND id = 5;

SELECT fence_unprotect('ev'), fence_unprotect('evr'), fence_unprotect('evh');
DROP VIEW rows_now;
DROP TABLE ev, evr, evh, evp, hold, tok;
DROP EXTENSION fence;
