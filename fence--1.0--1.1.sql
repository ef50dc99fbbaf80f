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
-- and acts only on commands that add a partition (and, since issue 8, on
-- the others below); it also refuses a foreign-table partition of a
-- protected table.
--
DROP EVENT TRIGGER fence_cover_new_partitions;
DROP FUNCTION fence_cover_new_partitions();
DROP FUNCTION fence_cover_truncate(pg_catalog.regclass);

CREATE FUNCTION fence_ddl_command_end()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'fence_ddl_command_end'
LANGUAGE C;

-- No tag filter: the function reads the parse tree and returns at once
-- for commands it has nothing to do with.
CREATE EVENT TRIGGER fence_ddl_command_end ON ddl_command_end
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

--
-- The registry of protected relations.  A relation is protected because it
-- is here, not because a trigger of a certain name exists: fence's event
-- triggers compare DDL against this table and refuse what would disarm a
-- relation in it.  A protected partitioned table has a row for every
-- partition at every level, and so has every inheritance child.  Only
-- fence writes it.  It is not dumped: a restore rebuilds it from the
-- guards the dump creates (the canonical CREATE TRIGGER of the guard
-- protects its table).  regclass survives pg_upgrade, which keeps
-- relation OIDs.
--
CREATE TABLE fence_protected (
	relation pg_catalog.regclass NOT NULL,
	epoch_column pg_catalog.name NOT NULL,
	mode pg_catalog.text NOT NULL,
	CONSTRAINT fence_protected_pkey PRIMARY KEY (relation),
	CONSTRAINT fence_protected_mode_check
		CHECK (mode OPERATOR(pg_catalog.=) ANY (ARRAY['strict', 'repeat', 'shared']))
);
REVOKE ALL ON fence_protected FROM PUBLIC;
GRANT SELECT ON fence_protected TO PUBLIC;

-- What 1.0 protected: every relation with a guard, partitions' clones
-- included, with the guard's arguments (defaults: writer_epoch, strict).
INSERT INTO fence_protected (relation, epoch_column, mode)
SELECT t.tgrelid,
	   COALESCE(a.args[1], 'writer_epoch'),
	   COALESCE(a.args[2], 'strict')
  FROM pg_catalog.pg_trigger t
  CROSS JOIN LATERAL (SELECT pg_catalog.string_to_array(
			pg_catalog.rtrim(pg_catalog.encode(t.tgargs, 'escape'), '\000'), '\000') AS args) a
 WHERE t.tgfoid OPERATOR(pg_catalog.=) '@extschema@.fence_guard()'::pg_catalog.regprocedure
ON CONFLICT DO NOTHING;

--
-- The audit log: every change to protection, and every DDL let through by
-- a declaration, leaves a row here, written in the same transaction.
-- Anyone may read it; only fence (and a superuser) writes it.  Dumped.
--
CREATE TABLE fence_audit_log (
	id pg_catalog.int8 GENERATED ALWAYS AS IDENTITY,
	at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	role pg_catalog.name NOT NULL DEFAULT CURRENT_USER,
	action pg_catalog.text NOT NULL,
	relation pg_catalog.text,
	detail pg_catalog.text,
	reason pg_catalog.text,
	xid pg_catalog.xid8 DEFAULT pg_catalog.pg_current_xact_id()
);
-- No unique key on id: a parallel pg_restore may record the guards it
-- creates before it has loaded the old rows and moved the sequence.
CREATE INDEX fence_audit_log_at_idx ON fence_audit_log (at);
REVOKE ALL ON fence_audit_log FROM PUBLIC;
GRANT SELECT ON fence_audit_log TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('fence_audit_log', '');
-- and its id sequence, so rows written during a restore follow the old ones
SELECT pg_catalog.pg_extension_config_dump('fence_audit_log_id_seq', '');

--
-- fence_allow_ddl(tbl, reason): declare that this transaction runs DDL on
-- a protected table that fence would otherwise refuse (a migration's ALTER
-- COLUMN ... TYPE ... USING, pg_restore --disable-triggers).  Recorded.
-- The setting fence.allow_ddl does the same for a superuser's session.
--
CREATE FUNCTION fence_allow_ddl(tbl pg_catalog.regclass, reason pg_catalog.text)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_allow_ddl'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- fence_unprotect moves into C beside fence_protect (it runs DDL that the
-- event triggers refuse to anyone else).
CREATE OR REPLACE FUNCTION fence_unprotect(tbl pg_catalog.regclass)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_unprotect'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

--
-- The DDL checks.  ddl_command_start sees each command's parse tree before
-- it runs, and refuses what would disarm a protected relation;
-- ddl_command_end (above) keeps protection with the data; sql_drop keeps
-- the registry in step with DROP; table_rewrite (below) sees rewrites.
-- All ENABLE ALWAYS.
--
CREATE FUNCTION fence_ddl_command_start()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'fence_ddl_command_start'
LANGUAGE C;

CREATE EVENT TRIGGER fence_ddl_command_start ON ddl_command_start
	EXECUTE FUNCTION fence_ddl_command_start();
ALTER EVENT TRIGGER fence_ddl_command_start ENABLE ALWAYS;

CREATE FUNCTION fence_sql_drop()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'fence_sql_drop'
LANGUAGE C;

CREATE EVENT TRIGGER fence_sql_drop ON sql_drop
	EXECUTE FUNCTION fence_sql_drop();
ALTER EVENT TRIGGER fence_sql_drop ENABLE ALWAYS;

-- table_rewrite: a change of a column's type that converts every stored
-- value of a protected table.
CREATE FUNCTION fence_table_rewrite()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'fence_table_rewrite'
LANGUAGE C;

CREATE EVENT TRIGGER fence_table_rewrite ON table_rewrite
	EXECUTE FUNCTION fence_table_rewrite();
ALTER EVENT TRIGGER fence_table_rewrite ENABLE ALWAYS;


--
-- Writers that are not jobs: a fresh token for this transaction only.
--
CREATE FUNCTION fence_begin_fresh(reason pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_begin_fresh'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

--
-- The claim API trusts no stranger.  Each claim records the role that made
-- it; fence_renew and fence_release of it need membership in that role,
-- superuser, or EXECUTE on the *_any functions, which are for supervisors
-- and so not granted to PUBLIC.  Claims made before 1.1 (NULL) stay
-- unrestricted.
--
ALTER TABLE fence_claims ADD COLUMN claimed_by pg_catalog.text;

CREATE FUNCTION fence_release_any(job pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_release_any'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_renew_any(job pg_catalog.text,
								lease pg_catalog.interval DEFAULT '5 minutes')
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'fence_renew_any'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Granted on purpose, to supervisors: they end or extend others' claims.
REVOKE ALL ON FUNCTION fence_release_any(pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION fence_renew_any(pg_catalog.text, pg_catalog.interval) FROM PUBLIC;
