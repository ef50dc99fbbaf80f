--
-- paths: the other ways a row gets written pass through the guard like any
-- plain INSERT / UPDATE / DELETE:
--   INSERT ... ON CONFLICT DO UPDATE, MERGE, COPY FROM, and cascaded
--   foreign-key actions (ON DELETE CASCADE / ON UPDATE CASCADE).
-- Each fenced write has its twin on an unprotected copy (*_plain).
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);

-- COPY data is not interpolated by psql, so this file starts the counter at
-- a known value (as a superuser may after a restore) and checks the tokens
-- it gets. Nothing else here depends on the values.
-- The counter's first claim begins its history without moving it: it was
-- made here and never used.  (A setval() before it would be a restore's as
-- far as fence can tell, and the first claim would move the counter past
-- the clock's floor: token.c, "Histories".)
SELECT fence_claim('history-begins', '1 second') = 1 AS first_token_is_1;
DELETE FROM fence_claims WHERE job = 'history-begins';
SELECT setval('fence_token_seq', 1000) AS counter;
-- ta: worker A of job-a, superseded by tb (worker B) after its lease expired
INSERT INTO tok SELECT 'ta', fence_claim('job-a', '1 millisecond', 'A') RETURNING t AS ta \gset
SELECT pg_sleep(0.02);
INSERT INTO tok SELECT 'tb', fence_claim('job-a', '1 hour', 'B') RETURNING t AS tb \gset
-- tc: another job, current, newer than tb
INSERT INTO tok SELECT 'tc', fence_claim('job-c', '1 hour', 'C') RETURNING t AS tc \gset
SELECT :ta = 1001 AND :tb = 1002 AND :tc = 1003 AS known_tokens;
SELECT fence_is_current('job-a', :ta) AS ta_current,
       fence_is_current('job-a', :tb) AS tb_current,
       fence_is_current('job-c', :tc) AS tc_current;

CREATE FUNCTION show(tbl regclass) RETURNS TABLE (k text, v text, epoch text)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'SELECT x.k, x.v, CASE WHEN x.writer_epoch IS NOT NULL
                           THEN coalesce(tok.name, ''(not a token)'') END
       FROM %s x LEFT JOIN tok ON tok.t = x.writer_epoch ORDER BY x.k', tbl);
END $$;

--
-- INSERT ... ON CONFLICT DO UPDATE
-- The BEFORE INSERT guard fires on the proposed row, the BEFORE UPDATE
-- guard on the conflicting row; the UPDATE carries a statement token only
-- when DO UPDATE SET assigns the epoch column.
--
CREATE TABLE kv (k text PRIMARY KEY, v text, writer_epoch bigint);
CREATE TABLE kv_plain (LIKE kv INCLUDING ALL);
INSERT INTO kv VALUES ('x', 'init', NULL), ('y', 'init', NULL);
INSERT INTO kv_plain SELECT * FROM kv;
SELECT fence_protect('kv');

-- no token at all
INSERT INTO kv VALUES ('x', 'adhoc') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
INSERT INTO kv_plain VALUES ('x', 'adhoc') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
-- a token on the proposed row, but DO UPDATE does not assign the epoch
INSERT INTO kv VALUES ('x', 'B', :tb) ON CONFLICT (k) DO UPDATE SET v = excluded.v;
-- ... DO NOTHING still needs a token: the BEFORE INSERT guard fires first
INSERT INTO kv VALUES ('x', 'adhoc') ON CONFLICT DO NOTHING;
-- the token on both paths: conflict (x) and no conflict (z)
INSERT INTO kv VALUES ('x', 'B', :tb), ('z', 'B', :tb)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
-- the bound token, on both paths; the guard stamps it
BEGIN;
SELECT fence_begin('job-c', :tc);
INSERT INTO kv (k, v) VALUES ('y', 'C'), ('w', 'C') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
COMMIT;
SELECT * FROM show('kv');
-- the stale worker A upserts after B wrote: superseded
INSERT INTO kv VALUES ('x', 'A (stale)', :ta)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
-- B (current) upserts a row that the newer job-c wrote: the row is newer
INSERT INTO kv VALUES ('y', 'B', :tb)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
SELECT * FROM show('kv');
-- twin
INSERT INTO kv_plain VALUES ('x', 'B', :tb), ('z', 'B', :tb)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
INSERT INTO kv_plain VALUES ('y', 'C', :tc), ('w', 'C', :tc)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
INSERT INTO kv_plain VALUES ('x', 'A (stale)', :ta)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
INSERT INTO kv_plain VALUES ('y', 'B', :tb)
  ON CONFLICT (k) DO UPDATE SET v = excluded.v, writer_epoch = excluded.writer_epoch;
SELECT * FROM show('kv_plain');

--
-- MERGE
--
CREATE TABLE mg (k text PRIMARY KEY, v text, writer_epoch bigint);
CREATE TABLE mg_plain (LIKE mg INCLUDING ALL);
INSERT INTO mg VALUES ('m1', 'init', NULL), ('m9', 'init', NULL);
INSERT INTO mg_plain SELECT * FROM mg;
SELECT fence_protect('mg');
CREATE TABLE src (k text, v text);
INSERT INTO src VALUES ('m1', 'new'), ('m2', 'new');

-- no token
MERGE INTO mg USING src ON mg.k = src.k
  WHEN MATCHED THEN UPDATE SET v = src.v
  WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, src.v);
MERGE INTO mg_plain USING src ON mg_plain.k = src.k
  WHEN MATCHED THEN UPDATE SET v = src.v
  WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, src.v);
-- the stale worker A, its token in both actions: superseded
MERGE INTO mg USING src ON mg.k = src.k
  WHEN MATCHED THEN UPDATE SET v = 'A (stale)', writer_epoch = :ta
  WHEN NOT MATCHED THEN INSERT VALUES (src.k, 'A (stale)', :ta);
-- worker B, its token in both actions
MERGE INTO mg USING src ON mg.k = src.k
  WHEN MATCHED THEN UPDATE SET v = 'B', writer_epoch = :tb
  WHEN NOT MATCHED THEN INSERT VALUES (src.k, 'B', :tb);
SELECT * FROM show('mg');
-- job-c through its binding: UPDATE, INSERT and DELETE actions
INSERT INTO src VALUES ('m3', 'new'), ('m9', 'gone');
BEGIN;
SELECT fence_begin('job-c', :tc);
MERGE INTO mg USING src ON mg.k = src.k
  WHEN MATCHED AND src.v = 'gone' THEN DELETE
  WHEN MATCHED THEN UPDATE SET v = 'C'
  WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, 'C');
COMMIT;
SELECT * FROM show('mg');
-- B again, now older than what job-c wrote: the row is newer
MERGE INTO mg USING src ON mg.k = src.k
  WHEN MATCHED THEN UPDATE SET v = 'B', writer_epoch = :tb;
-- a DELETE action needs the binding
MERGE INTO mg USING src ON mg.k = src.k WHEN MATCHED THEN DELETE;
SELECT * FROM show('mg');
-- twin: the same sequence of MERGEs on the plain table; the stale and the
-- older writes land and job-c's rows are overwritten
DELETE FROM src WHERE k IN ('m3', 'm9');
MERGE INTO mg_plain USING src ON mg_plain.k = src.k
  WHEN MATCHED THEN UPDATE SET v = 'A (stale)', writer_epoch = :ta
  WHEN NOT MATCHED THEN INSERT VALUES (src.k, 'A (stale)', :ta);
INSERT INTO src VALUES ('m3', 'new'), ('m9', 'gone');
MERGE INTO mg_plain USING src ON mg_plain.k = src.k
  WHEN MATCHED AND src.v = 'gone' THEN DELETE
  WHEN MATCHED THEN UPDATE SET v = 'C', writer_epoch = :tc
  WHEN NOT MATCHED THEN INSERT VALUES (src.k, 'C', :tc);
MERGE INTO mg_plain USING src ON mg_plain.k = src.k
  WHEN MATCHED THEN UPDATE SET v = 'B', writer_epoch = :tb;
SELECT * FROM show('mg_plain');

--
-- COPY FROM: every row passes the BEFORE INSERT guard.
-- (Tokens: 1001 = ta, superseded; 1002 = tb, current; 1003 = tc, current.)
--
CREATE TABLE cp (k text PRIMARY KEY, v text, writer_epoch bigint);
CREATE TABLE cp_plain (LIKE cp INCLUDING ALL);
SELECT fence_protect('cp');
-- no token
COPY cp (k, v) FROM STDIN;
c1	adhoc
\.
-- a token column of zeros is no token either
COPY cp FROM STDIN;
c1	adhoc	0
\.
-- the stale worker A's rows
COPY cp FROM STDIN;
c1	A (stale)	1001
c2	A (stale)	1001
\.
COPY cp_plain FROM STDIN;
c1	A (stale)	1001
c2	A (stale)	1001
\.
-- a forged token (never issued: 5G002)
COPY cp FROM STDIN;
c1	forged	99999999
\.
-- one bad row refuses the whole COPY
COPY cp FROM STDIN;
c1	B	1002
c2	A (stale)	1001
\.
-- worker B's rows
COPY cp FROM STDIN;
c1	B	1002
c2	B	1002
\.
-- job-c through its binding, the epoch column left out: stamped
BEGIN;
SELECT fence_begin('job-c', :tc);
COPY cp (k, v) FROM STDIN;
c3	C
\.
COMMIT;
-- the binding and the data disagree: an epoch above the bound token is
-- another token
BEGIN;
SELECT fence_begin('job-c', :tc);
COPY cp FROM STDIN;
c4	B	99999999
\.
ROLLBACK;
-- an epoch below it is a copied row (sql/copied_rows.sql): stamped with
-- the bound token
BEGIN;
SELECT fence_begin('job-c', :tc);
COPY cp FROM STDIN;
c5	copied	1002
\.
COMMIT;
SELECT * FROM show('cp');
SELECT * FROM show('cp_plain');

--
-- Cascaded foreign-key actions fire the child's guard. The parent is not
-- protected; the child is. A cascade carries only the transaction's bound
-- token, so without fence_begin it is refused.
--
CREATE TABLE orders (id int PRIMARY KEY, note text);
CREATE TABLE lines (id int PRIMARY KEY,
                    order_id int REFERENCES orders ON DELETE CASCADE ON UPDATE CASCADE,
                    v text, writer_epoch bigint);
CREATE TABLE orders_plain (LIKE orders INCLUDING ALL);
CREATE TABLE lines_plain (id int PRIMARY KEY,
                          order_id int REFERENCES orders_plain ON DELETE CASCADE ON UPDATE CASCADE,
                          v text, writer_epoch bigint);
SELECT fence_protect('lines');
INSERT INTO orders VALUES (1, 'o1'), (2, 'o2'), (3, 'o3');
INSERT INTO orders_plain SELECT * FROM orders;
INSERT INTO lines VALUES (10, 1, 'B', :tb), (20, 2, 'C', :tc), (30, 3, 'B', :tb);
INSERT INTO lines_plain SELECT * FROM lines;
CREATE FUNCTION show_lines(tbl regclass) RETURNS TABLE (id int, order_id int, v text, epoch text)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'SELECT x.id, x.order_id, x.v, CASE WHEN x.writer_epoch IS NOT NULL
                                        THEN coalesce(tok.name, ''(not a token)'') END
       FROM %s x LEFT JOIN tok ON tok.t = x.writer_epoch ORDER BY x.id', tbl);
END $$;

-- no token: ON DELETE CASCADE and ON UPDATE CASCADE are refused, and with
-- them the parent's write
DELETE FROM orders WHERE id = 3;
UPDATE orders SET id = 33 WHERE id = 3;
DELETE FROM orders_plain WHERE id = 3;
SELECT id FROM orders ORDER BY id;
-- worker B, bound: the cascade into line 20, which job-c (newer) wrote, is refused
BEGIN;
SELECT fence_begin('job-a', :tb);
DELETE FROM orders WHERE id = 2;
ROLLBACK;
BEGIN;
SELECT fence_begin('job-a', :tb);
UPDATE orders SET id = 22 WHERE id = 2;
ROLLBACK;
DELETE FROM orders_plain WHERE id = 2;
-- a newer job, bound: cascades pass; the ON UPDATE CASCADE stamps its token
INSERT INTO tok SELECT 'td', fence_claim('job-d', '1 hour', 'D') RETURNING t AS td \gset
BEGIN;
SELECT fence_begin('job-d', :td);
UPDATE orders SET id = 33 WHERE id = 3;
DELETE FROM orders WHERE id = 1;
COMMIT;
SELECT id FROM orders ORDER BY id;
SELECT * FROM show_lines('lines');
SELECT id FROM orders_plain ORDER BY id;
SELECT * FROM show_lines('lines_plain');

DROP TABLE kv, kv_plain, mg, mg_plain, src, cp, cp_plain, lines, lines_plain, orders, orders_plain;
DROP FUNCTION show(regclass), show_lines(regclass);
DROP EXTENSION fence;
