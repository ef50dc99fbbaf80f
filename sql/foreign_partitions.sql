--
-- foreign_partitions: a foreign table cannot join a protected partition
-- tree. fence cannot guard rows that live behind a foreign data wrapper,
-- and a foreign table cannot have the TRUNCATE trigger every protected
-- partition gets, so fence refuses (42809):
--   CREATE FOREIGN TABLE ... PARTITION OF a protected table, or of a
--     partitioned partition of one;
--   ALTER TABLE ... ATTACH PARTITION of a foreign table, at either level;
--   fence_protect() of a partitioned table that has a foreign partition.
-- After the refusals the protected tree's other DDL keeps working: ADD
-- COLUMN, fence_protect() again, new ordinary partitions (each gets
-- zz_fence_truncate, ENABLE ALWAYS), and the guard still guards. The twin:
-- an unprotected partitioned table takes foreign partitions as before.
-- (1.0 let CREATE FOREIGN TABLE ... PARTITION OF through; every later
-- ALTER TABLE of the parent then failed inside fence's event trigger with
-- "Foreign tables cannot have TRUNCATE triggers".)
--
CREATE EXTENSION fence;
\set VERBOSITY sqlstate

-- No handler: enough to create foreign tables, never to read them.
CREATE FOREIGN DATA WRAPPER fence_dummy_fdw;
CREATE SERVER fence_dummy FOREIGN DATA WRAPPER fence_dummy_fdw;

-- Every member of a partition tree with its kind and triggers.
CREATE FUNCTION tree(root regclass)
RETURNS TABLE (rel text, relkind "char", tgname name, tgenabled "char")
LANGUAGE sql AS $$
  SELECT pt.relid::text, c.relkind, t.tgname, t.tgenabled
    FROM pg_partition_tree(root) pt
    JOIN pg_class c ON c.oid = pt.relid
    LEFT JOIN pg_trigger t ON t.tgrelid = pt.relid
   ORDER BY 1, 3
$$;

-- ev: protected, two levels. ev_plain: the unprotected twin.
CREATE TABLE ev (region text NOT NULL, id int NOT NULL, v text,
                 writer_epoch bigint) PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
CREATE TABLE ev_am PARTITION OF ev FOR VALUES IN ('us', 'ca') PARTITION BY LIST (region);
CREATE TABLE ev_am_us PARTITION OF ev_am FOR VALUES IN ('us');
SELECT fence_protect('ev');
CREATE TABLE ev_plain (LIKE ev) PARTITION BY LIST (region);
CREATE TABLE ev_plain_eu PARTITION OF ev_plain FOR VALUES IN ('eu');
CREATE FOREIGN TABLE ft_asia (region text NOT NULL, id int NOT NULL, v text,
                              writer_epoch bigint) SERVER fence_dummy;
CREATE FOREIGN TABLE ft_ca (region text NOT NULL, id int NOT NULL, v text,
                            writer_epoch bigint) SERVER fence_dummy;

--
-- Refused: a foreign partition of the protected tree, created or attached.
--
CREATE FOREIGN TABLE ev_asia PARTITION OF ev FOR VALUES IN ('asia') SERVER fence_dummy;
CREATE FOREIGN TABLE ev_am_ca PARTITION OF ev_am FOR VALUES IN ('ca') SERVER fence_dummy;
ALTER TABLE ev ATTACH PARTITION ft_asia FOR VALUES IN ('asia');
ALTER TABLE ev_am ATTACH PARTITION ft_ca FOR VALUES IN ('ca');
-- the text, once
\set VERBOSITY default
CREATE FOREIGN TABLE ev_asia PARTITION OF ev FOR VALUES IN ('asia') SERVER fence_dummy;
\set VERBOSITY sqlstate
-- nothing joined the tree, and the foreign tables stayed outside it
SELECT * FROM tree('ev');
SELECT count(*) AS foreign_partitions FROM pg_inherits
 WHERE inhrelid IN ('ft_asia'::regclass, 'ft_ca'::regclass);
SELECT count(*) AS stray_foreign_tables FROM pg_class WHERE relname IN ('ev_asia', 'ev_am_ca');

--
-- Twin: the unprotected table takes foreign partitions, created and
-- attached; then protecting it is refused, and it is left unprotected.
--
CREATE FOREIGN TABLE ev_plain_us PARTITION OF ev_plain FOR VALUES IN ('us') SERVER fence_dummy;
ALTER TABLE ev_plain ATTACH PARTITION ft_asia FOR VALUES IN ('asia');
ALTER TABLE ev_plain ADD COLUMN note text;
SELECT fence_protect('ev_plain');
SELECT * FROM tree('ev_plain');

--
-- The protected tree's other DDL keeps working after the refusals.
--
ALTER TABLE ev ADD COLUMN note text;
SELECT fence_protect('ev');
CREATE TABLE ev_asia PARTITION OF ev FOR VALUES IN ('asia');
CREATE TABLE ev_am_ca PARTITION OF ev_am FOR VALUES IN ('ca');
CREATE TABLE ev_af (LIKE ev);
ALTER TABLE ev ATTACH PARTITION ev_af FOR VALUES IN ('af');
SELECT * FROM tree('ev');

-- and the guard still guards every partition
SELECT fence_claim('fp-job', '1 hour') AS t1 \gset
INSERT INTO ev (region, id, v) VALUES ('asia', 1, 'no token');
INSERT INTO ev (region, id, v) VALUES ('ca', 1, 'no token');
INSERT INTO ev (region, id, v, writer_epoch) VALUES ('asia', 1, 't1', :t1), ('ca', 1, 't1', :t1),
                                                    ('af', 1, 't1', :t1);
SELECT region, id, v, writer_epoch = :t1 AS stamped_t1 FROM ev ORDER BY region, id;
TRUNCATE ev_asia;
TRUNCATE ev_am_ca;
TRUNCATE ev_af;
-- twin
INSERT INTO ev_plain_eu (region, id, v) VALUES ('eu', 1, 'no token');
TRUNCATE ev_plain_eu;

DROP TABLE ev, ev_plain;
DROP FOREIGN TABLE ft_ca;
DROP SERVER fence_dummy;
DROP FOREIGN DATA WRAPPER fence_dummy_fdw;
DROP FUNCTION tree(regclass);
DROP EXTENSION fence;
