--
-- guard: fence_guard on plain INSERT / UPDATE / DELETE.
-- Where the write's token comes from, the stamp, every rejection (5F001
-- superseded, 5F002 row is newer, 5F003 no token, 5F004 invalid token; the
-- caller's bugs 5G002 never issued and 5G003 a strict row written twice),
-- and the three modes strict / repeat / shared.
--
-- Every fenced write has a twin right after it: the same statement on an
-- unprotected copy of the table (*_plain), where the stale or tokenless
-- write goes through and the newer execution's update is lost.
--
-- Tokens are kept in the temp table tok(name, t); the views show a row's
-- epoch as the name of the token it holds, never as a raw number.
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

CREATE TEMP TABLE tok (name text PRIMARY KEY, t bigint UNIQUE);

CREATE TABLE inventory (sku text PRIMARY KEY, qty int NOT NULL, note text,
                        writer_epoch bigint);
CREATE TABLE inventory_plain (LIKE inventory INCLUDING ALL);
INSERT INTO inventory VALUES ('apple', 10, 'initial', NULL), ('pear', 20, 'initial', NULL);
INSERT INTO inventory_plain SELECT * FROM inventory;
SELECT fence_protect('inventory');

CREATE TEMP VIEW inv AS
  SELECT i.sku, i.qty, i.note,
         CASE WHEN i.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM inventory i LEFT JOIN tok ON tok.t = i.writer_epoch ORDER BY i.sku;
CREATE TEMP VIEW inv_plain AS
  SELECT i.sku, i.qty, i.note,
         CASE WHEN i.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM inventory_plain i LEFT JOIN tok ON tok.t = i.writer_epoch ORDER BY i.sku;

--
-- 5F003: a write without any token, e.g. a maintenance script's ad-hoc
-- statement. The twin table takes every one of them.
--
UPDATE inventory SET qty = 0 WHERE sku = 'apple';
UPDATE inventory_plain SET qty = 0 WHERE sku = 'apple';
INSERT INTO inventory (sku, qty, note) VALUES ('plum', 1, 'adhoc');
INSERT INTO inventory_plain (sku, qty, note) VALUES ('plum', 1, 'adhoc');
-- on INSERT, an epoch of 0 or NULL is "no token in the statement"
INSERT INTO inventory VALUES ('plum', 1, 'adhoc', 0);
INSERT INTO inventory VALUES ('plum', 1, 'adhoc', NULL);
DELETE FROM inventory WHERE sku = 'pear';
DELETE FROM inventory_plain WHERE sku = 'pear';
SELECT * FROM inv;
SELECT * FROM inv_plain;
-- reset the twin
TRUNCATE inventory_plain;
INSERT INTO inventory_plain SELECT * FROM inventory;

--
-- The statement's own token: the value an INSERT writes into the epoch
-- column, or the value an UPDATE's SET list assigns to it.
-- The guard stamps the epoch column with the token.
--
INSERT INTO tok SELECT 'ta', fence_claim('restock', '1 hour') RETURNING t AS ta \gset
INSERT INTO inventory VALUES ('plum', 5, 'restock', :ta);
UPDATE inventory SET qty = qty + 5, note = 'restock', writer_epoch = :ta WHERE sku = 'apple';
SELECT * FROM inv;

-- The transaction's bound token (fence_begin); the guard stamps it even
-- where the statement does not mention the epoch column.
INSERT INTO tok SELECT 'tb', fence_claim('count', '1 hour') RETURNING t AS tb \gset
BEGIN;
SELECT fence_begin('count', :tb);
UPDATE inventory SET note = 'counted' WHERE sku = 'pear';
INSERT INTO inventory (sku, qty, note) VALUES ('fig', 3, 'counted');
-- both sources present and equal: fine
UPDATE inventory SET note = 'counted', writer_epoch = :tb WHERE sku = 'apple';
COMMIT;
SELECT * FROM inv;

-- An UPDATE that does not assign the epoch column carries no token of its
-- own, even though the row it rewrites holds a current token.
UPDATE inventory SET qty = 0 WHERE sku = 'apple';
UPDATE inventory_plain SET qty = 0 WHERE sku = 'apple';

--
-- 5F004: a value that is not a token (0, negative) or two different tokens
-- in one write; 5G002: a value no claim ever issued (the caller's bug).
--
INSERT INTO inventory VALUES ('kiwi', 1, 'forged', -5);
INSERT INTO inventory_plain VALUES ('kiwi', 1, 'forged', -5);
UPDATE inventory SET note = 'forged', writer_epoch = :tb + 1000000 WHERE sku = 'apple';
UPDATE inventory_plain SET note = 'forged', writer_epoch = :tb + 1000000 WHERE sku = 'apple';
UPDATE inventory SET note = 'forged', writer_epoch = 9223372036854775807 WHERE sku = 'apple';
-- on UPDATE, an assigned value counts whatever it is
UPDATE inventory SET note = 'zero', writer_epoch = 0 WHERE sku = 'apple';
UPDATE inventory SET note = 'null', writer_epoch = NULL WHERE sku = 'apple';
-- the bound token and the statement's token differ (both are valid tokens)
BEGIN;
SELECT fence_begin('count', :tb);
UPDATE inventory SET note = 'mixed', writer_epoch = :ta WHERE sku = 'plum';
ROLLBACK;
BEGIN;
SELECT fence_begin('restock', :ta);
INSERT INTO inventory VALUES ('kiwi', 1, 'mixed', :tb);
ROLLBACK;
SELECT * FROM inv;
SELECT * FROM inv_plain;
TRUNCATE inventory_plain;
INSERT INTO inventory_plain SELECT * FROM inventory;

--
-- 5F001: the stale worker. Worker A claims job "sweep" with a short lease
-- and reads a counter; its lease expires; worker B claims the job (a newer
-- token) and reads the same counter.
--
-- (1) B writes first, then A wakes and writes.
--
INSERT INTO tok SELECT 'tx', fence_claim('sweep', '1 millisecond', 'A') RETURNING t AS tx \gset
SELECT qty AS a_read FROM inventory WHERE sku = 'apple' \gset
SELECT pg_sleep(0.02);
INSERT INTO tok SELECT 'ty', fence_claim('sweep', '1 hour', 'B') RETURNING t AS ty \gset
SELECT qty AS b_read FROM inventory WHERE sku = 'apple' \gset
UPDATE inventory SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'apple';
UPDATE inventory SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'apple';
SELECT * FROM inv WHERE sku = 'apple';
-- twin: the stale write lands; B's update is lost and the epoch goes backwards
UPDATE inventory_plain SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'apple';
UPDATE inventory_plain SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'apple';
SELECT * FROM inv_plain WHERE sku = 'apple';

--
-- (2) A wakes first and writes after B's claim but before B's write. The
-- row still holds an older epoch, so only the arbiter check (is tx still
-- the current claim of "sweep"?) can refuse it. Then B reads and writes.
--
SELECT qty AS a_read FROM inventory WHERE sku = 'pear' \gset
UPDATE inventory SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'pear';
SELECT qty AS b_read FROM inventory WHERE sku = 'pear' \gset
UPDATE inventory SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'pear';
SELECT * FROM inv WHERE sku = 'pear';
-- twin: both writes land; the job's increment is applied twice (22, not 21)
SELECT qty AS a_read FROM inventory_plain WHERE sku = 'pear' \gset
UPDATE inventory_plain SET qty = :a_read + 1, note = 'A (stale)', writer_epoch = :tx WHERE sku = 'pear';
SELECT qty AS b_read FROM inventory_plain WHERE sku = 'pear' \gset
UPDATE inventory_plain SET qty = :b_read + 1, note = 'B', writer_epoch = :ty WHERE sku = 'pear';
SELECT * FROM inv_plain WHERE sku = 'pear';

-- (3) A stale INSERT: there is no row to compare with, only the arbiter.
INSERT INTO inventory VALUES ('lime', 1, 'A (stale)', :tx);
INSERT INTO inventory_plain VALUES ('lime', 1, 'A (stale)', :tx);

-- (4) A released claim is superseded too: its worker acknowledged the job.
INSERT INTO tok SELECT 'tc', fence_claim('recount', '1 hour') RETURNING t AS tc \gset
SELECT fence_release('recount', :tc) AS released;
UPDATE inventory SET note = 'after release', writer_epoch = :tc WHERE sku = 'fig';
UPDATE inventory_plain SET note = 'after release', writer_epoch = :tc WHERE sku = 'fig';

-- (5) A claim deleted by a superuser: its token lies at or below the last
-- token issued but names no claim, so it reads as superseded.
INSERT INTO tok SELECT 'td', fence_claim('audit', '1 hour') RETURNING t AS td \gset
DELETE FROM fence_claims WHERE job = 'audit';
UPDATE inventory SET note = 'deleted claim', writer_epoch = :td WHERE sku = 'fig';
UPDATE inventory_plain SET note = 'deleted claim', writer_epoch = :td WHERE sku = 'fig';

SELECT * FROM inv;
SELECT * FROM inv_plain;
TRUNCATE inventory_plain;
INSERT INTO inventory_plain SELECT * FROM inventory;

--
-- strict mode (the default): token > stored epoch, one write per execution
-- per row. 5F002 when the row is newer.
--
INSERT INTO tok SELECT 'te', fence_claim('strict-1', '1 hour') RETURNING t AS te \gset
UPDATE inventory SET qty = qty + 1, note = 'te', writer_epoch = :te WHERE sku = 'fig';
-- a second write of the same execution to the same row
UPDATE inventory SET qty = qty + 1, note = 'te again', writer_epoch = :te WHERE sku = 'fig';
UPDATE inventory_plain SET qty = qty + 1, note = 'te', writer_epoch = :te WHERE sku = 'fig';
UPDATE inventory_plain SET qty = qty + 1, note = 'te again', writer_epoch = :te WHERE sku = 'fig';
-- ... including through the binding, and a DELETE
BEGIN;
SELECT fence_begin('strict-1', :te);
UPDATE inventory SET qty = qty + 1 WHERE sku = 'fig';
ROLLBACK;
BEGIN;
SELECT fence_begin('strict-1', :te);
DELETE FROM inventory WHERE sku = 'fig';
ROLLBACK;
-- self-assignment of the epoch column is the statement's token: the stored
-- value itself, which does not exceed the stored value
UPDATE inventory SET note = 'self', writer_epoch = writer_epoch WHERE sku = 'fig';
-- a current, but older, token of another job: the row is newer
SELECT fence_is_current('count', :tb) AS tb_is_current;
UPDATE inventory SET note = 'tb', writer_epoch = :tb WHERE sku = 'fig';
UPDATE inventory_plain SET note = 'tb', writer_epoch = :tb WHERE sku = 'fig';
-- one refused row refuses the whole statement: no row is touched
-- (te is newer than every stored epoch but fig's)
UPDATE inventory SET note = 'bulk', writer_epoch = :te;
SELECT * FROM inv;
-- a newer token passes, also for DELETE
INSERT INTO tok SELECT 'tf', fence_claim('strict-2', '1 hour') RETURNING t AS tf \gset
UPDATE inventory SET note = 'tf', writer_epoch = :tf WHERE sku = 'fig';
BEGIN;
SELECT fence_begin('strict-2', :tf);
DELETE FROM inventory WHERE sku = 'plum';
COMMIT;
SELECT * FROM inv;
SELECT * FROM inv_plain;

--
-- repeat mode: token >= stored epoch, an execution may write a row again.
-- Also a non-default epoch column name.
--
CREATE TABLE ledger (id int PRIMARY KEY, amount int NOT NULL, ver bigint);
CREATE TABLE ledger_plain (LIKE ledger INCLUDING ALL);
INSERT INTO ledger VALUES (1, 0, NULL);
INSERT INTO ledger_plain VALUES (1, 0, NULL);
SELECT fence_protect('ledger', 'ver', 'repeat');
CREATE TEMP VIEW led AS
  SELECT l.id, l.amount, CASE WHEN l.ver IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS ver
    FROM ledger l LEFT JOIN tok ON tok.t = l.ver ORDER BY l.id;
INSERT INTO tok SELECT 'tg', fence_claim('repeat-1', '1 hour') RETURNING t AS tg \gset
INSERT INTO tok SELECT 'th', fence_claim('repeat-2', '1 hour') RETURNING t AS th \gset
-- the newer execution writes the row twice, the second time assigning the
-- very value already stored (a write NEW = OLD cannot tell from no token)
UPDATE ledger SET amount = amount + 1, ver = :th WHERE id = 1;
UPDATE ledger SET amount = amount + 1, ver = :th WHERE id = 1;
BEGIN;
SELECT fence_begin('repeat-2', :th);
UPDATE ledger SET amount = amount + 1 WHERE id = 1;
INSERT INTO ledger (id, amount) VALUES (2, 10);
DELETE FROM ledger WHERE id = 2;
COMMIT;
SELECT * FROM led;
-- an older token, although current: the row is newer
UPDATE ledger SET amount = 100, ver = :tg WHERE id = 1;
UPDATE ledger_plain SET amount = 3, ver = :th WHERE id = 1;
UPDATE ledger_plain SET amount = 100, ver = :tg WHERE id = 1;
-- no token and superseded tokens are refused as in every mode
UPDATE ledger SET amount = 100 WHERE id = 1;
UPDATE ledger SET amount = 100, ver = :tx WHERE id = 1;
UPDATE ledger SET amount = 100, ver = :tc WHERE id = 1;
SELECT * FROM led;
SELECT id, amount FROM ledger_plain;

--
-- shared mode: rows that many concurrent jobs write. Tokens of different
-- jobs are not compared; the arbiter check still applies.
--
CREATE TABLE stock (item text PRIMARY KEY, qty int NOT NULL, writer_epoch bigint);
CREATE TABLE stock_plain (LIKE stock INCLUDING ALL);
INSERT INTO stock VALUES ('bolt', 100, NULL);
INSERT INTO stock_plain VALUES ('bolt', 100, NULL);
SELECT fence_protect('stock', 'writer_epoch', 'shared');
CREATE TEMP VIEW stk AS
  SELECT s.item, s.qty, CASE WHEN s.writer_epoch IS NOT NULL THEN coalesce(tok.name, '(not a token)') END AS epoch
    FROM stock s LEFT JOIN tok ON tok.t = s.writer_epoch ORDER BY s.item;
INSERT INTO tok SELECT 'ti', fence_claim('order-1', '1 hour') RETURNING t AS ti \gset
INSERT INTO tok SELECT 'tj', fence_claim('order-2', '1 hour') RETURNING t AS tj \gset
-- the newer job writes, then the older one, then the newer one again
UPDATE stock SET qty = qty - 1, writer_epoch = :tj WHERE item = 'bolt';
UPDATE stock SET qty = qty - 1, writer_epoch = :ti WHERE item = 'bolt';
SELECT * FROM stk;
BEGIN;
SELECT fence_begin('order-2', :tj);
UPDATE stock SET qty = qty - 1 WHERE item = 'bolt';
UPDATE stock SET qty = qty - 1 WHERE item = 'bolt';
INSERT INTO stock (item, qty) VALUES ('nut', 50);
COMMIT;
SELECT * FROM stk;
-- a superseded worker (order-3 taken over after its lease expired) is refused
INSERT INTO tok SELECT 'tk', fence_claim('order-3', '1 millisecond') RETURNING t AS tk \gset
SELECT pg_sleep(0.02);
INSERT INTO tok SELECT 'tl', fence_claim('order-3', '1 hour') RETURNING t AS tl \gset
UPDATE stock SET qty = qty - 1, writer_epoch = :tl WHERE item = 'bolt';
UPDATE stock SET qty = qty - 1, writer_epoch = :tk WHERE item = 'bolt';
UPDATE stock_plain SET qty = qty - 1, writer_epoch = :tl WHERE item = 'bolt';
UPDATE stock_plain SET qty = qty - 1, writer_epoch = :tk WHERE item = 'bolt';
-- as are writes without a token and forged tokens
UPDATE stock SET qty = 0 WHERE item = 'bolt';
UPDATE stock SET qty = 0, writer_epoch = :tl + 1000000 WHERE item = 'bolt';
DELETE FROM stock WHERE item = 'nut';
SELECT * FROM stk;
SELECT item, qty FROM stock_plain;

DROP VIEW inv, inv_plain, led, stk;
DROP TABLE inventory, inventory_plain, ledger, ledger_plain, stock, stock_plain;
DROP EXTENSION fence;
