/* fence/fence--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION fence" to load this file. \quit

--
-- The token counter: one for the whole database.  A sequence is neither
-- transactional nor a clock: a value once handed out is never handed out
-- again, crash and restart included (nextval logs ahead of what it issues).
--
CREATE SEQUENCE fence_token_seq AS pg_catalog.int8 MINVALUE 1 NO CYCLE;

--
-- The claims registry: one row per job, holding that job's current claim.
-- A new claim replaces the row's token, so an older token of the job is no
-- longer found anywhere and reads as superseded.
--
CREATE TABLE fence_claims (
	job pg_catalog.text NOT NULL,
	token pg_catalog.int8 NOT NULL,
	holder pg_catalog.text,
	claimed_at pg_catalog.timestamptz NOT NULL,
	lease_expires_at pg_catalog.timestamptz NOT NULL,
	released pg_catalog.bool NOT NULL DEFAULT false,
	CONSTRAINT fence_claims_pkey PRIMARY KEY (job),
	CONSTRAINT fence_claims_token_key UNIQUE (token),
	CONSTRAINT fence_claims_job_check CHECK (job OPERATOR(pg_catalog.<>) ''),
	CONSTRAINT fence_claims_token_check CHECK (token OPERATOR(pg_catalog.>) 0)
);

-- Keep claims and the counter in pg_dump output: after a restore, the
-- counter must stay above every token already issued.
SELECT pg_catalog.pg_extension_config_dump('fence_claims', '');
SELECT pg_catalog.pg_extension_config_dump('fence_token_seq', '');

-- The functions below are the only way to obtain work or move the counter.
-- Anyone may read the registry and the counter; nobody but a superuser may
-- write them directly, or a role could forge a claim or skip ahead.
REVOKE ALL ON fence_claims FROM PUBLIC;
GRANT SELECT ON fence_claims TO PUBLIC;
REVOKE ALL ON SEQUENCE fence_token_seq FROM PUBLIC;
GRANT SELECT ON SEQUENCE fence_token_seq TO PUBLIC;

--
-- Claims.  fence_claim, fence_renew and fence_release write fence_claims,
-- which their callers cannot.  They are not SECURITY DEFINER: their C code
-- switches to the table's owner for its own statements only, as the
-- foreign-key triggers do, and those statements are qualified down to the
-- last operator, so the caller's search_path cannot redirect them.
--
CREATE FUNCTION fence_claim(job pg_catalog.text,
							lease pg_catalog.interval DEFAULT '5 minutes',
							holder pg_catalog.text DEFAULT NULL)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_renew(job pg_catalog.text,
							token pg_catalog.int8,
							lease pg_catalog.interval DEFAULT '5 minutes')
RETURNS pg_catalog.timestamptz
AS 'MODULE_PATHNAME', 'fence_renew'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_release(job pg_catalog.text, token pg_catalog.int8)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_release'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Read-only: these run as the caller.
CREATE FUNCTION fence_current(job pg_catalog.text)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_current'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_is_current(job pg_catalog.text, token pg_catalog.int8)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_is_current'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- Binds a token to the caller's transaction; writes nothing.
CREATE FUNCTION fence_begin(job pg_catalog.text, token pg_catalog.int8)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_begin'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

--
-- The guard.  It runs as the writer, never as a definer: it reads
-- fence_claims directly in C and needs no privilege to do so.
--
CREATE FUNCTION fence_guard()
RETURNS trigger
AS 'MODULE_PATHNAME', 'fence_guard'
LANGUAGE C;

CREATE FUNCTION fence_refuse_truncate()
RETURNS trigger
AS 'MODULE_PATHNAME', 'fence_refuse_truncate'
LANGUAGE C;

--
-- TRUNCATE fires no row triggers, so each protected table, and each of its
-- partitions, gets a BEFORE TRUNCATE trigger that refuses it.  Statement
-- triggers are not cloned to partitions the way row triggers are, so
-- fence_cover_truncate() adds one to every member of the table's partition
-- tree that has the guard, and an event trigger runs it again whenever a
-- partition is created or attached.
--
CREATE FUNCTION fence_cover_truncate(tbl pg_catalog.regclass)
RETURNS pg_catalog.void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	part pg_catalog.regclass;
	enabled pg_catalog.char;
BEGIN
	-- pg_partition_tree() is empty for a table outside any partition tree.
	FOR part IN
		SELECT p.relid
		  FROM (SELECT tbl AS relid
				UNION SELECT pt.relid FROM pg_catalog.pg_partition_tree(tbl) pt) p
		 WHERE EXISTS (SELECT FROM pg_catalog.pg_trigger t
						WHERE t.tgrelid OPERATOR(pg_catalog.=) p.relid
						  AND t.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard')
	LOOP
		-- Checked here, not in the query above: the ALTER TABLE below fires
		-- the event trigger, which may already have covered this partition.
		-- An existing trigger that lost ENABLE ALWAYS (DISABLE TRIGGER ALL,
		-- then ENABLE TRIGGER ALL) is set back to it.
		SELECT t.tgenabled INTO enabled
		  FROM pg_catalog.pg_trigger t
		 WHERE t.tgrelid OPERATOR(pg_catalog.=) part
		   AND t.tgname OPERATOR(pg_catalog.=) 'zz_fence_truncate';
		IF NOT FOUND THEN
			enabled := NULL;
			EXECUTE pg_catalog.format(
				'CREATE TRIGGER zz_fence_truncate BEFORE TRUNCATE ON %s '
				'FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.fence_refuse_truncate()',
				part);
		END IF;
		IF enabled IS DISTINCT FROM 'A' THEN
			EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_fence_truncate', part);
		END IF;
	END LOOP;
END
$$;

CREATE FUNCTION fence_cover_new_partitions()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rel pg_catalog.oid;
BEGIN
	FOR rel IN
		SELECT DISTINCT c.objid
		  FROM pg_catalog.pg_event_trigger_ddl_commands() c
		 WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
		   AND c.object_type OPERATOR(pg_catalog.=) 'table'
	LOOP
		PERFORM @extschema@.fence_cover_truncate(rel::pg_catalog.regclass);
	END LOOP;
END
$$;

CREATE EVENT TRIGGER fence_cover_new_partitions ON ddl_command_end
	WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
	EXECUTE FUNCTION fence_cover_new_partitions();
ALTER EVENT TRIGGER fence_cover_new_partitions ENABLE ALWAYS;

--
-- fence_protect(tbl, epoch_column, mode) attaches the guard.
--
-- The triggers' names start with "zz_" so that they sort, and so fire,
-- after the table's other BEFORE triggers; the guard also refuses to run
-- while any BEFORE ROW trigger sorts after it.  Both are ENABLE ALWAYS, so
-- session_replication_role = replica does not switch them off.  A row
-- trigger on a partitioned table is cloned to every partition, present and
-- future.  The function runs as the caller: only the table's owner (or a
-- member of the owning role, or a superuser) can create or drop triggers.
--
CREATE FUNCTION fence_protect(tbl pg_catalog.regclass,
							  epoch_column pg_catalog.name DEFAULT 'writer_epoch',
							  mode pg_catalog.text DEFAULT 'strict')
RETURNS pg_catalog.void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rel record;
	col record;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'table must not be null' USING ERRCODE = '22004';
	END IF;
	IF epoch_column IS NULL THEN
		RAISE EXCEPTION 'epoch column must not be null' USING ERRCODE = '22004';
	END IF;
	IF mode IS NULL THEN
		RAISE EXCEPTION 'mode must not be null' USING ERRCODE = '22004';
	END IF;

	SELECT c.relkind, c.relowner INTO rel
	  FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) tbl;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'relation with OID % does not exist', tbl::pg_catalog.oid
			USING ERRCODE = '42P01';
	END IF;
	IF rel.relkind NOT IN ('r', 'p') THEN
		RAISE EXCEPTION '"%" is not a table', tbl
			USING ERRCODE = '42809',
				  HINT = 'fence protects ordinary and partitioned tables.';
	END IF;
	IF NOT pg_catalog.pg_has_role(rel.relowner, 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = '42501';
	END IF;
	IF tbl OPERATOR(pg_catalog.=) '@extschema@.fence_claims'::pg_catalog.regclass THEN
		RAISE EXCEPTION 'cannot protect fence''s own registry %', tbl
			USING ERRCODE = '42809';
	END IF;
	IF mode NOT IN ('strict', 'repeat', 'shared') THEN
		RAISE EXCEPTION 'unrecognized fence mode "%"', pg_catalog.left(mode, 64)
			USING ERRCODE = '22023',
				  HINT = 'The mode is one of strict, repeat or shared.';
	END IF;

	SELECT a.atttypid INTO col
	  FROM pg_catalog.pg_attribute a
	 WHERE a.attrelid OPERATOR(pg_catalog.=) tbl
	   AND a.attname OPERATOR(pg_catalog.=) epoch_column
	   AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'column "%" of relation "%" does not exist', epoch_column, tbl
			USING ERRCODE = '42703',
				  HINT = 'Add it with ALTER TABLE ... ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0.';
	END IF;
	IF col.atttypid OPERATOR(pg_catalog.<>) 'pg_catalog.int8'::pg_catalog.regtype THEN
		RAISE EXCEPTION 'column "%" of relation "%" is not of type bigint', epoch_column, tbl
			USING ERRCODE = '42804';
	END IF;

	-- Protecting a protected table again replaces its guard.
	IF EXISTS (SELECT FROM pg_catalog.pg_trigger t
			   WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl
				 AND t.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard') THEN
		EXECUTE pg_catalog.format('DROP TRIGGER zz_fence_guard ON %s', tbl);
	END IF;
	EXECUTE pg_catalog.format(
		'CREATE TRIGGER zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE ON %s '
		'FOR EACH ROW EXECUTE FUNCTION @extschema@.fence_guard(%L, %L)',
		tbl, epoch_column, mode);
	EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_fence_guard', tbl);
	PERFORM @extschema@.fence_cover_truncate(tbl);
END
$$;

CREATE FUNCTION fence_unprotect(tbl pg_catalog.regclass)
RETURNS pg_catalog.void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	owner pg_catalog.oid;
	part pg_catalog.regclass;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'table must not be null' USING ERRCODE = '22004';
	END IF;
	SELECT c.relowner INTO owner
	  FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) tbl;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'relation with OID % does not exist', tbl::pg_catalog.oid
			USING ERRCODE = '42P01';
	END IF;
	IF NOT pg_catalog.pg_has_role(owner, 'USAGE') THEN
		RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = '42501';
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
				   WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl
					 AND t.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard') THEN
		RAISE EXCEPTION 'table % is not protected by fence', tbl
			USING ERRCODE = '42704';
	END IF;
	EXECUTE pg_catalog.format('DROP TRIGGER zz_fence_guard ON %s', tbl);
	FOR part IN
		SELECT t.tgrelid::pg_catalog.regclass
		  FROM (SELECT tbl AS relid
				UNION SELECT pt.relid FROM pg_catalog.pg_partition_tree(tbl) pt) p
		  JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) p.relid
		 WHERE t.tgname OPERATOR(pg_catalog.=) 'zz_fence_truncate'
	LOOP
		EXECUTE pg_catalog.format('DROP TRIGGER zz_fence_truncate ON %s', part);
	END LOOP;
END
$$;
