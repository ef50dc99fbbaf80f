/* fence/fence--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION fence UPDATE TO '1.1'" to load this file. \quit

--
-- The TRUNCATE refusal of new partitions moves into C, called only by the
-- event trigger.  In 1.0, fence_cover_truncate() was an SQL function anyone
-- could call, and the event trigger ran it after every ALTER TABLE: also
-- after the ALTER TABLE ... ENABLE ALWAYS TRIGGER that pg_dump writes, so
-- every restore created the TRUNCATE triggers early and then failed on the
-- dump's own CREATE TRIGGER.  The new event trigger reads the parse tree
-- and acts only on commands that add a partition; it also refuses a
-- foreign-table partition of a protected table.
--
DROP EVENT TRIGGER fence_cover_new_partitions;
DROP FUNCTION fence_cover_new_partitions();
DROP FUNCTION fence_cover_truncate(pg_catalog.regclass);

CREATE FUNCTION fence_ddl_command_end()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'fence_ddl_command_end'
LANGUAGE C;

CREATE EVENT TRIGGER fence_ddl_command_end ON ddl_command_end
	WHEN TAG IN ('CREATE TABLE', 'CREATE FOREIGN TABLE', 'CREATE SCHEMA',
				 'ALTER TABLE')
	EXECUTE FUNCTION fence_ddl_command_end();
ALTER EVENT TRIGGER fence_ddl_command_end ENABLE ALWAYS;

--
-- fence_protect() moves into C, where it shares the TRUNCATE coverage of a
-- partition tree with the event trigger.  Same signature, defaults and
-- errors; it still runs as the caller, so only a table's owner can
-- protect it.
--
CREATE OR REPLACE FUNCTION fence_protect(tbl pg_catalog.regclass,
										 epoch_column pg_catalog.name DEFAULT 'writer_epoch',
										 mode pg_catalog.text DEFAULT 'strict')
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_protect'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
