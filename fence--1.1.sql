/* fence/fence--1.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION fence" to load this file. \quit

--
-- The install script of 1.1.  CREATE EXTENSION fence runs this file alone;
-- a database created at 1.0 reaches 1.1 through fence--1.0--1.1.sql.  Both
-- must leave the same objects, so a change to one of the two 1.1 scripts
-- belongs in the other as well: t/010_install_script.pl creates a database
-- each way and fails on any difference in their catalogs.  The sections
-- below are fence--1.0.sql's, then fence--1.0--1.1.sql's, in the same order
-- and words, without what 1.1 drops or replaces; a column that the update
-- script adds is in its table's CREATE TABLE, in the same place.
--

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
	-- the role that made the claim (the claim API, below)
	claimed_by pg_catalog.text,
	-- what happened to the claim (the metrics, below)
	n_claims pg_catalog.int8 NOT NULL DEFAULT 1,
	n_takeovers pg_catalog.int8 NOT NULL DEFAULT 0,
	n_renewals pg_catalog.int8 NOT NULL DEFAULT 0,
	n_releases pg_catalog.int8 NOT NULL DEFAULT 0,
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
RETURNS pg_catalog.trigger
AS 'MODULE_PATHNAME', 'fence_guard'
LANGUAGE C;

CREATE FUNCTION fence_refuse_truncate()
RETURNS pg_catalog.trigger
AS 'MODULE_PATHNAME', 'fence_refuse_truncate'
LANGUAGE C;

--
-- TRUNCATE fires no row triggers, so each protected table, and each of its
-- partitions, gets a BEFORE TRUNCATE trigger that refuses it.  Statement
-- triggers are not cloned to partitions the way row triggers are, so
-- fence_protect() adds one to every member of the table's partition tree,
-- and an event trigger, in C, adds it whenever a partition is created or
-- attached.  The event trigger reads the parse tree and acts only on
-- commands that add a partition (and on the others below); it also refuses
-- a foreign-table partition of a protected table.
--
CREATE FUNCTION fence_ddl_command_end()
RETURNS pg_catalog.event_trigger
AS 'MODULE_PATHNAME', 'fence_ddl_command_end'
LANGUAGE C;

-- No tag filter: the function reads the parse tree and returns at once
-- for commands it has nothing to do with.
CREATE EVENT TRIGGER fence_ddl_command_end ON ddl_command_end
	EXECUTE FUNCTION fence_ddl_command_end();
ALTER EVENT TRIGGER fence_ddl_command_end ENABLE ALWAYS;

--
-- fence_protect(tbl, epoch_column, mode, form) attaches the guard.  It is
-- in C, where it shares the TRUNCATE coverage of a partition tree with the
-- event trigger.  The form is 'before' (the guard) or 'after' (UPDATEs
-- checked in the WHEN clause of an AFTER trigger, see guard.c).
--
-- The triggers' names start with "zz_" so that they sort, and so fire,
-- after the table's other BEFORE triggers; the guard also refuses to run
-- while any BEFORE ROW trigger sorts after it.  They are ENABLE ALWAYS, so
-- session_replication_role = replica does not switch them off.  A row
-- trigger on a partitioned table is cloned to every partition, present and
-- future.  The function runs as the caller, so only a table's owner can
-- protect it.
--
CREATE FUNCTION fence_protect(tbl pg_catalog.regclass,
							  epoch_column pg_catalog.name DEFAULT 'writer_epoch',
							  mode pg_catalog.text DEFAULT 'strict',
							  form pg_catalog.text DEFAULT 'before')
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_protect'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

--
-- The after form's two functions (guard.c).  fence_update_allowed() is the
-- WHEN clause of zz_fence_guard_update: it makes the guard's checks on the
-- epoch as written and as it was, and raises the guard's error when they
-- fail, so it returns true or nothing.  fence_guard_after() is the
-- trigger's body, the same check made again should the trigger ever fire.
--
CREATE FUNCTION fence_update_allowed(new_epoch pg_catalog.int8, old_epoch pg_catalog.int8,
									 tbl pg_catalog.oid, epoch_column pg_catalog.name,
									 mode pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_update_allowed'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_guard_after()
RETURNS pg_catalog.trigger
AS 'MODULE_PATHNAME', 'fence_guard_after'
LANGUAGE C;

-- For fence_audit: is the after form's WHEN clause the one fence creates?
CREATE FUNCTION fence_after_when_is_canonical(tbl pg_catalog.regclass,
											  trigger_name pg_catalog.name)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_after_when_is_canonical_sql'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

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
	form pg_catalog.text NOT NULL DEFAULT 'before',
	CONSTRAINT fence_protected_pkey PRIMARY KEY (relation),
	CONSTRAINT fence_protected_mode_check
		CHECK (mode OPERATOR(pg_catalog.=) ANY (ARRAY['strict', 'repeat', 'shared'])),
	CONSTRAINT fence_protected_form_check
		CHECK (form OPERATOR(pg_catalog.=) ANY (ARRAY['before', 'after']))
);
-- Anyone may read it; a role that could write it could unprotect a table
-- behind fence's back, or make fence refuse DDL on one it does not own.
REVOKE ALL ON fence_protected FROM PUBLIC;
GRANT SELECT ON fence_protected TO PUBLIC;

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
-- Anyone may read it; a role that could write it could forge or erase
-- the record.
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

-- fence_unprotect is in C beside fence_protect (it runs DDL that the event
-- triggers refuse to anyone else), and records a reason.
CREATE FUNCTION fence_unprotect(tbl pg_catalog.regclass,
								reason pg_catalog.text DEFAULT NULL)
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
RETURNS pg_catalog.event_trigger
AS 'MODULE_PATHNAME', 'fence_ddl_command_start'
LANGUAGE C;

CREATE EVENT TRIGGER fence_ddl_command_start ON ddl_command_start
	EXECUTE FUNCTION fence_ddl_command_start();
ALTER EVENT TRIGGER fence_ddl_command_start ENABLE ALWAYS;

CREATE FUNCTION fence_sql_drop()
RETURNS pg_catalog.event_trigger
AS 'MODULE_PATHNAME', 'fence_sql_drop'
LANGUAGE C;

CREATE EVENT TRIGGER fence_sql_drop ON sql_drop
	EXECUTE FUNCTION fence_sql_drop();
ALTER EVENT TRIGGER fence_sql_drop ENABLE ALWAYS;

-- table_rewrite: a change of a column's type that converts every stored
-- value of a protected table.
CREATE FUNCTION fence_table_rewrite()
RETURNS pg_catalog.event_trigger
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
-- it (fence_claims.claimed_by); fence_renew and fence_release of it need
-- membership in that role, superuser, or EXECUTE on the *_any functions,
-- which are for supervisors and so not granted to PUBLIC.  Claims made
-- before 1.1 (NULL) stay unrestricted.
--
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

--
-- fence_audit(scan_rows): what fence cannot refuse, reported.  A superuser
-- can disable fence's event triggers, declare DDL that disarms a table and
-- leave it so, write fence_claims or fence_protected, or setval the
-- counter; none of this is DDL that fence's event triggers can refuse.
-- fence_audit() reads the catalogs, the registry, the claims and the
-- counter, and returns one row for each problem it finds: severity 'error'
-- (protection is broken: some write, TRUNCATE or DDL goes through
-- unchecked, or every write fails) or 'warning' (worth a look); the
-- relation concerned (NULL for the database as a whole); the problem; and
-- in one sentence, the fix.  A healthy database has no 'error' row.
--
-- The relations checked are those in fence_protected that exist, and every
-- partition and inheritance child of one, at every level, registered or
-- not: each is checked against its own registry row or, when it has none,
-- its nearest registered ancestor's.  A trigger that a partition has
-- because PostgreSQL cloned it from its parent has the parent's form: its
-- form is reported on the relation it comes from, its firing state
-- (which can be changed on the partition alone) on each relation.
--
-- Errors:
--  - a partition or child of a registered relation that is not registered
--    itself (fence's DDL checks do not cover it);
--  - a missing guard or TRUNCATE refusal; a trigger with fence's name that
--    calls another function; a trigger of fence's function in any form but
--    the canonical one (name, BEFORE ... FOR EACH ROW INSERT OR UPDATE OR
--    DELETE or BEFORE TRUNCATE FOR EACH STATEMENT, no WHEN clause, no column
--    list, arguments: an existing bigint column and a mode, equal to the
--    registry row's, defaults writer_epoch and strict; in the after form,
--    the guard is BEFORE INSERT OR DELETE, and zz_fence_guard_update AFTER
--    UPDATE FOR EACH ROW with the WHEN clause fence creates, compared as
--    a stored expression); one that is not ENABLE ALWAYS;
--  - a BEFORE ROW trigger that sorts after the guard (by name, as the
--    guard compares) and may fire: not disabled (an ENABLE or ENABLE
--    REPLICA trigger fires in some sessions);
--  - fence's four event triggers, found by their function: missing, not on
--    their event, filtered by tag, or not ENABLE ALWAYS;
--  - claims above the last token the counter issued (the counter below the
--    largest token in fence_claims): one row, naming the largest;
--  - a registry row whose relation does not exist.  fence_sql_drop removes
--    the registry row of a dropped table and writes its 'drop' row to
--    fence_audit_log in the same transaction, so a registry row left
--    behind is never covered by a recorded drop.  (The log names
--    relations, not OIDs, so it cannot be searched for this OID anyway.)
--  - with scan_rows, a stored epoch above the last token issued.
-- Warnings:
--  - a BEFORE ROW trigger that fires before the guard: it runs before the
--    check and can change the row.  Known harmless, and not reported: the
--    built-in pg_catalog.suppress_redundant_updates_trigger() (it skips an
--    UPDATE that changes nothing, and a skipped write writes nothing) and
--    pg_catalog.tsvector_update_trigger() and
--    tsvector_update_trigger_column() (they compute a tsvector column from
--    the row's own columns, and the epoch column is a bigint).  They are
--    named one by one: a superuser can create other functions in
--    pg_catalog, so the schema alone says nothing;
--  - a role other than the owner, not a member of the owning role and not
--    a superuser, or PUBLIC, holding TRIGGER on a protected relation: only
--    fence_ddl_command_start keeps it from adding such a trigger;
--  - with scan_rows, a relation that could not be scanned, or only in
--    part (no SELECT on the column, another session's temporary table,
--    row-level security).
--
-- It runs as the caller and needs no privilege beyond what PUBLIC has,
-- except SELECT on the epoch columns for scan_rows.
--
CREATE FUNCTION fence_audit(scan_rows pg_catalog.bool DEFAULT false)
RETURNS TABLE (severity pg_catalog.text, relation pg_catalog.regclass,
			   problem pg_catalog.text, fix pg_catalog.text)
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	guard_fn pg_catalog.oid := pg_catalog.to_regprocedure('@extschema@.fence_guard()');
	truncate_fn pg_catalog.oid := pg_catalog.to_regprocedure('@extschema@.fence_refuse_truncate()');
	after_fn pg_catalog.oid := pg_catalog.to_regprocedure('@extschema@.fence_guard_after()');
	harmless pg_catalog.oid[] := ARRAY[
		pg_catalog.to_regprocedure('pg_catalog.suppress_redundant_updates_trigger()'),
		pg_catalog.to_regprocedure('pg_catalog.tsvector_update_trigger()'),
		pg_catalog.to_regprocedure('pg_catalog.tsvector_update_trigger_column()')];
	last_issued pg_catalog.int8;
	members pg_catalog.oid[];
	m record;
	tg record;
	o record;
	ev record;
	n pg_catalog.int8;
	big record;
	args pg_catalog.text[];
	rest pg_catalog.bytea;
	pos pg_catalog.int4;
	argcol pg_catalog.text;
	argmode pg_catalog.text;
	tgwant pg_catalog.name;
	unchecked pg_catalog.text;
	why pg_catalog.text;
	protect_fix pg_catalog.text;
	drop_fix pg_catalog.text;
	found_fn pg_catalog.bool;
	found_name pg_catalog.bool;
	col_ok pg_catalog.bool;
	mx pg_catalog.int8;
	scannable pg_catalog.text;
BEGIN
	-- The last token issued: nextval has not run since a setval(.., false)
	-- (or ever, on a new counter) when is_called is false.
	SELECT CASE WHEN s.is_called THEN s.last_value
				ELSE s.last_value OPERATOR(pg_catalog.-) 1 END
	  INTO last_issued
	  FROM @extschema@.fence_token_seq s;

	--
	-- fence's own functions.
	--
	IF guard_fn IS NULL OR truncate_fn IS NULL THEN
		RETURN QUERY SELECT 'error'::pg_catalog.text, NULL::pg_catalog.regclass,
			pg_catalog.format('fence''s trigger function %s() is missing: protected tables are not guarded',
							  CASE WHEN guard_fn IS NULL THEN 'fence_guard' ELSE 'fence_refuse_truncate' END),
			pg_catalog.format('As a superuser, create @extschema@.%1$s() again as fence''s install script does, add it back with ALTER EXTENSION fence ADD FUNCTION @extschema@.%1$s(), and protect the tables again.',
							  CASE WHEN guard_fn IS NULL THEN 'fence_guard' ELSE 'fence_refuse_truncate' END);
	END IF;
	IF after_fn IS NULL AND EXISTS (SELECT FROM @extschema@.fence_protected p
									 WHERE p.form OPERATOR(pg_catalog.=) 'after') THEN
		RETURN QUERY SELECT 'error'::pg_catalog.text, NULL::pg_catalog.regclass,
			'fence''s trigger function fence_guard_after() is missing: tables protected in the after form do not check UPDATEs'::pg_catalog.text,
			'As a superuser, create @extschema@.fence_guard_after() again as fence''s update script does, add it back with ALTER EXTENSION fence ADD FUNCTION @extschema@.fence_guard_after(), and protect the tables again.'::pg_catalog.text;
	END IF;

	--
	-- fence's event triggers, found by their function.  One that is on
	-- its event, unfiltered and ENABLE ALWAYS is enough; without one, each
	-- of the function's event triggers is reported, or its absence.
	--
	FOR ev IN
		SELECT v.fn, v.event, v.consequence,
			   pg_catalog.to_regprocedure(pg_catalog.concat('@extschema@.', pg_catalog.quote_ident(v.fn), '()')) AS fnoid
		  FROM (VALUES
				('fence_ddl_command_start', 'ddl_command_start',
				 'DDL that disarms a protected table is not refused'),
				('fence_ddl_command_end', 'ddl_command_end',
				 'new partitions and children of protected tables are not protected'),
				('fence_sql_drop', 'sql_drop',
				 'drops of protected tables are neither recorded nor removed from fence_protected'),
				('fence_table_rewrite', 'table_rewrite',
				 'column type changes that rewrite a protected table are not refused')) v(fn, event, consequence)
		 ORDER BY v.fn
	LOOP
		IF ev.fnoid IS NULL THEN
			RETURN QUERY SELECT 'error'::pg_catalog.text, NULL::pg_catalog.regclass,
				pg_catalog.format('fence''s event trigger function %s() is missing: %s', ev.fn, ev.consequence),
				pg_catalog.format('As a superuser, create @extschema@.%1$s() and its event trigger again as fence''s install script does, and add both back with ALTER EXTENSION fence ADD.',
								  ev.fn);
			CONTINUE;
		END IF;
		IF EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
					WHERE e.evtfoid OPERATOR(pg_catalog.=) ev.fnoid
					  AND e.evtevent OPERATOR(pg_catalog.=) ev.event
					  AND e.evttags IS NULL
					  AND e.evtenabled OPERATOR(pg_catalog.=) 'A') THEN
			CONTINUE;
		END IF;
		IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
						WHERE e.evtfoid OPERATOR(pg_catalog.=) ev.fnoid) THEN
			RETURN QUERY SELECT 'error'::pg_catalog.text, NULL::pg_catalog.regclass,
				pg_catalog.format('fence''s event trigger on %s, calling %s(), is missing: %s',
								  ev.event, ev.fn, ev.consequence),
				pg_catalog.format('As a superuser, run CREATE EVENT TRIGGER %1$I ON %2$s EXECUTE FUNCTION @extschema@.%1$I(); ALTER EVENT TRIGGER %1$I ENABLE ALWAYS; ALTER EXTENSION fence ADD EVENT TRIGGER %1$I;',
								  ev.fn, ev.event);
			CONTINUE;
		END IF;
		RETURN QUERY
			SELECT 'error'::pg_catalog.text, NULL::pg_catalog.regclass,
				   CASE WHEN e.evtevent OPERATOR(pg_catalog.<>) ev.event
						THEN pg_catalog.format('event trigger "%s" calls %s() on %s, not on %s: %s',
											   e.evtname, ev.fn, e.evtevent, ev.event, ev.consequence)
						WHEN e.evttags IS NOT NULL
						THEN pg_catalog.format('event trigger "%s" fires only for some command tags: for the others, %s',
											   e.evtname, ev.consequence)
						WHEN e.evtenabled OPERATOR(pg_catalog.=) 'D'
						THEN pg_catalog.format('event trigger "%s" is disabled: %s', e.evtname, ev.consequence)
						WHEN e.evtenabled OPERATOR(pg_catalog.=) 'O'
						THEN pg_catalog.format('event trigger "%s" is ENABLE, not ENABLE ALWAYS: with session_replication_role = replica, %s',
											   e.evtname, ev.consequence)
						ELSE pg_catalog.format('event trigger "%s" is ENABLE REPLICA: except with session_replication_role = replica, %s',
											   e.evtname, ev.consequence)
				   END,
				   CASE WHEN e.evtevent OPERATOR(pg_catalog.<>) ev.event OR e.evttags IS NOT NULL
						THEN pg_catalog.format('As a superuser, run %4$sDROP EVENT TRIGGER %1$I; CREATE EVENT TRIGGER %1$I ON %2$s EXECUTE FUNCTION @extschema@.%3$I(); ALTER EVENT TRIGGER %1$I ENABLE ALWAYS; ALTER EXTENSION fence ADD EVENT TRIGGER %1$I;',
											   e.evtname, ev.event, ev.fn,
											   CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_depend d
																  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_event_trigger'::pg_catalog.regclass
																	AND d.objid OPERATOR(pg_catalog.=) e.oid
																	AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
																	AND d.deptype OPERATOR(pg_catalog.=) 'e')
													THEN pg_catalog.format('ALTER EXTENSION fence DROP EVENT TRIGGER %I; ', e.evtname)
													ELSE '' END)
						ELSE pg_catalog.format('As a superuser, run ALTER EVENT TRIGGER %I ENABLE ALWAYS.', e.evtname)
				   END
			  FROM pg_catalog.pg_event_trigger e
			 WHERE e.evtfoid OPERATOR(pg_catalog.=) ev.fnoid
			 ORDER BY e.evtname;
	END LOOP;

	--
	-- The counter and the claims: every token in fence_claims was issued,
	-- so none may be above the last token issued, or fence_claim hands out
	-- the same number again.
	--
	SELECT pg_catalog.count(*) INTO n
	  FROM @extschema@.fence_claims c
	 WHERE c.token OPERATOR(pg_catalog.>) last_issued;
	IF n OPERATOR(pg_catalog.>) 0 THEN
		SELECT c.job, c.token INTO big
		  FROM @extschema@.fence_claims c
		 ORDER BY c.token DESC LIMIT 1;
		RETURN QUERY SELECT 'error'::pg_catalog.text, NULL::pg_catalog.regclass,
			pg_catalog.format('the counter''s last token %s is below the largest token in fence_claims, %s of job "%s" (claims above it: %s): fence_claim will issue their numbers again',
							  last_issued, big.token, big.job, n),
			pg_catalog.format('Move the counter past it with setval as a superuser (doc/fence.md 9.4): SELECT setval(%L, %s);',
							  '@extschema@.fence_token_seq', big.token);
	END IF;

	--
	-- Registry rows of relations that do not exist (see the header).
	--
	RETURN QUERY
		SELECT 'error'::pg_catalog.text, p.relation,
			   'registered in fence_protected, but no relation has this OID and no drop of it was recorded: the registry or the catalog was written by hand, or the table was dropped while fence_sql_drop was off'::pg_catalog.text,
			   pg_catalog.format('As a superuser, remove the row: DELETE FROM @extschema@.fence_protected WHERE relation = %L;',
								 p.relation::pg_catalog.oid::pg_catalog.text)
		  FROM @extschema@.fence_protected p
		 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c
							WHERE c.oid OPERATOR(pg_catalog.=) p.relation::pg_catalog.oid)
		 ORDER BY p.relation::pg_catalog.oid;

	--
	-- The protected relations: the registered ones, and their partitions
	-- and children at every level.  Each gets its registry row's column
	-- and mode, or its nearest registered ancestor's, and "top": the
	-- topmost registered relation above it, the one to protect again.
	--
	SELECT pg_catalog.array_agg(c.oid) INTO members
	  FROM pg_catalog.pg_class c
	 WHERE c.oid IN (
			WITH RECURSIVE tree(relid) AS (
				SELECT p.relation::pg_catalog.oid FROM @extschema@.fence_protected p
				UNION
				SELECT i.inhrelid FROM tree t
				  JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.relid)
			SELECT t.relid FROM tree t);
	members := COALESCE(members, '{}');

	FOR m IN
		WITH RECURSIVE reg AS (
			SELECT p.relation::pg_catalog.oid AS relid, p.epoch_column::pg_catalog.text AS col, p.mode, p.form
			  FROM @extschema@.fence_protected p
			 WHERE p.relation::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (members)),
		tree(relid, col, mode, form, top, depth, registered) AS (
			SELECT r.relid, r.col, r.mode, r.form, r.relid, 0, true FROM reg r
			UNION ALL
			SELECT i.inhrelid, COALESCE(own.col, t.col), COALESCE(own.mode, t.mode),
				   COALESCE(own.form, t.form),
				   t.top, t.depth OPERATOR(pg_catalog.+) 1, own.relid IS NOT NULL
			  FROM tree t
			  JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.relid
			  LEFT JOIN reg own ON own.relid OPERATOR(pg_catalog.=) i.inhrelid)
		SELECT DISTINCT ON (t.relid)
			   t.relid::pg_catalog.regclass AS rel, t.col, t.mode, t.form, t.registered,
			   t.top::pg_catalog.regclass AS top, tr.col AS topcol, tr.mode AS topmode,
			   tr.form AS topform,
			   c.relkind, c.relowner, c.relacl, c.relpersistence, c.relnamespace
		  FROM tree t
		  JOIN reg tr ON tr.relid OPERATOR(pg_catalog.=) t.top
		  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid
		 ORDER BY t.relid, t.depth DESC, t.top
	LOOP
		protect_fix := pg_catalog.format('Run SELECT fence_protect(%L, %L, %L%s) again.',
										 m.top::pg_catalog.text, m.topcol, m.topmode,
										 CASE WHEN m.topform OPERATOR(pg_catalog.=) 'after'
											  THEN ', form => ''after''' ELSE '' END);

		IF NOT m.registered THEN
			RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
				pg_catalog.format('a partition or child of protected table %s that is not in fence_protected: fence''s DDL checks do not cover it',
								  m.top),
				protect_fix;
		END IF;

		--
		-- The guard and the TRUNCATE refusal: each trigger that calls
		-- fence's function or has fence's name.
		--
		FOR tg IN
			SELECT t.oid, t.tgname, t.tgfoid, t.tgtype, t.tgenabled, t.tgnargs, t.tgargs,
				   t.tgqual, t.tgattr, t.tgconstraint, t.tgparentid,
				   (t.tgfoid OPERATOR(pg_catalog.=) guard_fn
					OR (t.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard'
						AND t.tgfoid IS DISTINCT FROM truncate_fn)) AS is_guard,
				   -- a clone whose form is reported on its parent
				   (t.tgparentid OPERATOR(pg_catalog.<>) 0
					AND EXISTS (SELECT FROM pg_catalog.pg_trigger pt
								 WHERE pt.oid OPERATOR(pg_catalog.=) t.tgparentid
								   AND pt.tgrelid OPERATOR(pg_catalog.=) ANY (members))) AS cloned
			  FROM pg_catalog.pg_trigger t
			 WHERE t.tgrelid OPERATOR(pg_catalog.=) m.rel
			   AND (t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[guard_fn, truncate_fn, after_fn])
					OR t.tgname OPERATOR(pg_catalog.=) ANY (ARRAY['zz_fence_guard', 'zz_fence_truncate', 'zz_fence_guard_update']::pg_catalog.name[]))
			 ORDER BY t.tgname
		LOOP
			drop_fix := pg_catalog.format('Drop trigger %I on %s in a transaction that first calls fence_allow_ddl(%L, ''why''), then run SELECT fence_protect(%L, %L, %L%s) again.',
										  tg.tgname, m.rel, m.rel::pg_catalog.text,
										  m.top::pg_catalog.text, m.topcol, m.topmode,
										  CASE WHEN m.topform OPERATOR(pg_catalog.=) 'after'
											   THEN ', form => ''after''' ELSE '' END);
			IF tg.tgfoid IS DISTINCT FROM guard_fn AND tg.tgfoid IS DISTINCT FROM truncate_fn
			   AND tg.tgfoid IS DISTINCT FROM after_fn THEN
				-- fence's name, another function
				IF NOT tg.cloned THEN
					RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
						pg_catalog.format('trigger "%s" calls %s, not fence''s %s: %s',
										  tg.tgname, tg.tgfoid::pg_catalog.regprocedure,
										  CASE WHEN tg.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard_update' THEN 'fence_guard_after()'
											   WHEN tg.is_guard THEN 'fence_guard()' ELSE 'fence_refuse_truncate()' END,
										  CASE WHEN tg.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard_update' THEN 'UPDATEs are not checked'
											   WHEN tg.is_guard THEN 'writes are not checked'
											   ELSE 'TRUNCATE is not refused' END),
						drop_fix;
				END IF;
				CONTINUE;
			END IF;

			-- the arguments, split at their NUL bytes
			args := '{}';
			rest := tg.tgargs;
			FOR i IN 1 .. tg.tgnargs LOOP
				pos := pg_catalog.position(rest, pg_catalog.decode('00', 'hex'));
				EXIT WHEN pos OPERATOR(pg_catalog.<) 1;
				args := pg_catalog.array_append(args,
					pg_catalog.convert_from(pg_catalog.substr(rest, 1, pos OPERATOR(pg_catalog.-) 1),
											pg_catalog.getdatabaseencoding()));
				rest := pg_catalog.substr(rest, pos OPERATOR(pg_catalog.+) 1);
			END LOOP;

			IF tg.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[guard_fn, after_fn]) THEN
				-- the guard, or the after form's UPDATE check
				tgwant := CASE WHEN tg.tgfoid OPERATOR(pg_catalog.=) guard_fn
							   THEN 'zz_fence_guard' ELSE 'zz_fence_guard_update' END;
				unchecked := CASE WHEN tg.tgfoid OPERATOR(pg_catalog.=) guard_fn
								  THEN 'writes' ELSE 'UPDATEs' END;
				argcol := COALESCE(args[1], 'writer_epoch');
				argmode := COALESCE(args[2], 'strict');
				col_ok := EXISTS (SELECT FROM pg_catalog.pg_attribute a
								   WHERE a.attrelid OPERATOR(pg_catalog.=) m.rel
									 AND a.attname OPERATOR(pg_catalog.=) argcol
									 AND a.attnum OPERATOR(pg_catalog.>) 0
									 AND NOT a.attisdropped
									 AND a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype);
				-- A clone has its parent's form, reported there; only its
				-- arguments against this relation's registry row are its own.
				why := CASE
					WHEN tg.cloned
						THEN CASE WHEN argcol OPERATOR(pg_catalog.<>) m.col OR argmode OPERATOR(pg_catalog.<>) m.mode
								  THEN pg_catalog.format('its arguments (%L, %L) are not fence_protected''s (%L, %L)',
														 argcol, argmode, m.col, m.mode) END
					WHEN tg.tgfoid OPERATOR(pg_catalog.=) after_fn AND m.form OPERATOR(pg_catalog.<>) 'after'
						THEN 'the table is protected in the before form, which has no such trigger'
					WHEN tg.tgname OPERATOR(pg_catalog.<>) tgwant
						THEN CASE WHEN tg.tgfoid OPERATOR(pg_catalog.=) guard_fn
								  THEN 'its name is not zz_fence_guard, so it does not fire last'
								  ELSE 'its name is not zz_fence_guard_update' END
					-- ROW | BEFORE | INSERT | DELETE | UPDATE; the after form's guard
					-- without UPDATE; its UPDATE check ROW | UPDATE, AFTER
					WHEN tg.tgfoid OPERATOR(pg_catalog.=) after_fn AND tg.tgtype OPERATOR(pg_catalog.<>) 17
						THEN 'it is not AFTER UPDATE FOR EACH ROW'
					WHEN tg.tgfoid OPERATOR(pg_catalog.=) guard_fn AND m.form OPERATOR(pg_catalog.=) 'after'
						 AND tg.tgtype OPERATOR(pg_catalog.<>) 15
						THEN 'it is not BEFORE INSERT OR DELETE FOR EACH ROW, as the after form''s guard is'
					WHEN tg.tgfoid OPERATOR(pg_catalog.=) guard_fn AND m.form OPERATOR(pg_catalog.<>) 'after'
						 AND tg.tgtype OPERATOR(pg_catalog.<>) 31
						THEN 'it is not BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW'
					WHEN tg.tgfoid OPERATOR(pg_catalog.=) guard_fn AND tg.tgqual IS NOT NULL
						THEN 'it has a WHEN clause'
					WHEN pg_catalog.cardinality(tg.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.>) 0
						THEN 'it has an UPDATE OF column list'
					WHEN tg.tgconstraint OPERATOR(pg_catalog.<>) 0
						THEN 'it is a constraint trigger'
					WHEN tg.tgnargs OPERATOR(pg_catalog.>) 2
						THEN 'it has more than two arguments'
					WHEN NOT col_ok
						THEN pg_catalog.format('its epoch column %s is not a bigint column of the table',
											   pg_catalog.quote_ident(argcol))
					WHEN argmode NOT IN ('strict', 'repeat', 'shared')
						THEN pg_catalog.format('its mode %s is unknown', pg_catalog.quote_literal(argmode))
					WHEN argcol OPERATOR(pg_catalog.<>) m.col OR argmode OPERATOR(pg_catalog.<>) m.mode
						THEN pg_catalog.format('its arguments (%L, %L) are not fence_protected''s (%L, %L)',
											   argcol, argmode, m.col, m.mode)
					WHEN tg.tgfoid OPERATOR(pg_catalog.=) after_fn
						 AND NOT @extschema@.fence_after_when_is_canonical(m.rel, tg.tgname)
						THEN 'its WHEN clause is not NOT fence_update_allowed(NEW.col, OLD.col, NEW.tableoid, ''col'', ''mode'') for its own column and mode'
				END;
				IF why IS NOT NULL THEN
					RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
						pg_catalog.format('fence guard "%s" is not the one fence_protect creates: %s', tg.tgname, why),
						CASE WHEN NOT col_ok AND tg.tgname OPERATOR(pg_catalog.=) tgwant
								  AND m.col OPERATOR(pg_catalog.=) argcol
							 THEN pg_catalog.format('Add the bigint column %s back, or run SELECT fence_protect(%L, ''another_bigint_column'', %L%s) again.',
													pg_catalog.quote_ident(argcol), m.top::pg_catalog.text, m.topmode,
													CASE WHEN m.topform OPERATOR(pg_catalog.=) 'after'
														 THEN ', form => ''after''' ELSE '' END)
							 WHEN tg.tgname OPERATOR(pg_catalog.=) tgwant THEN protect_fix
							 ELSE drop_fix END;
				END IF;
				IF tg.tgenabled OPERATOR(pg_catalog.<>) 'A' THEN
					RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
						CASE tg.tgenabled
							WHEN 'D' THEN pg_catalog.format('fence guard "%s" is disabled: %s are not checked', tg.tgname, unchecked)
							WHEN 'O' THEN pg_catalog.format('fence guard "%s" is ENABLE, not ENABLE ALWAYS: every %s fails with 39P01, and with session_replication_role = replica %s are not checked',
															tg.tgname, pg_catalog.rtrim(unchecked, 's'), unchecked)
							ELSE pg_catalog.format('fence guard "%s" is ENABLE REPLICA: %s are not checked except with session_replication_role = replica', tg.tgname, unchecked)
						END,
						CASE WHEN tg.tgname OPERATOR(pg_catalog.=) tgwant THEN protect_fix ELSE drop_fix END;
				END IF;

				-- No BEFORE ROW trigger for the same events may sort after
				-- the guard while it may fire (the guard refuses every
				-- write then); those before it run before its check.  (A
				-- guard of another name is reported above, and its fix is
				-- to drop it: what sorts after it is not reported.)
				IF tg.tgfoid OPERATOR(pg_catalog.=) guard_fn
				   AND tg.tgenabled OPERATOR(pg_catalog.<>) 'D'
				   AND tg.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard' THEN
					FOR o IN
						SELECT t.tgname, t.tgfoid,
							   t.tgname OPERATOR(pg_catalog.>) tg.tgname AS after_guard
						  FROM pg_catalog.pg_trigger t
						 WHERE t.tgrelid OPERATOR(pg_catalog.=) m.rel
						   AND t.oid OPERATOR(pg_catalog.<>) tg.oid
						   AND t.tgenabled OPERATOR(pg_catalog.<>) 'D'
						   -- ROW | BEFORE
						   AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 3) OPERATOR(pg_catalog.=) 3
						   -- INSERT | DELETE | UPDATE, shared with the guard
						   AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) tg.tgtype::pg_catalog.int4
								OPERATOR(pg_catalog.&) 28) OPERATOR(pg_catalog.<>) 0
						   -- a clone is reported on its parent, unless its
						   -- firing state is its own
						   AND NOT (t.tgparentid OPERATOR(pg_catalog.<>) 0
									AND EXISTS (SELECT FROM pg_catalog.pg_trigger pt
												 WHERE pt.oid OPERATOR(pg_catalog.=) t.tgparentid
												   AND pt.tgrelid OPERATOR(pg_catalog.=) ANY (members)
												   AND pt.tgenabled OPERATOR(pg_catalog.=) t.tgenabled))
						 ORDER BY t.tgname
					LOOP
						IF o.after_guard THEN
							RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
								pg_catalog.format('BEFORE ROW trigger "%s" sorts after the fence guard "%s": writes it may fire for fail with 39P01',
												  o.tgname, tg.tgname),
								pg_catalog.format('Rename trigger "%s" so that its name sorts before "%s" (names compare byte by byte).',
												  o.tgname, tg.tgname);
						ELSIF o.tgfoid OPERATOR(pg_catalog.<>) ALL (harmless)
							  AND o.tgfoid OPERATOR(pg_catalog.<>) ALL (ARRAY[guard_fn, truncate_fn]) THEN
							RETURN QUERY SELECT 'warning'::pg_catalog.text, m.rel,
								pg_catalog.format('BEFORE ROW trigger "%s" (%s) fires before the fence guard: it runs before the check and can change the row',
												  o.tgname, o.tgfoid::pg_catalog.regprocedure),
								'If it need not change the row, make it an AFTER trigger; otherwise make sure it cannot change the epoch column or write elsewhere with no token checked.'::pg_catalog.text;
						END IF;
					END LOOP;
				END IF;
			ELSE
				-- fence_refuse_truncate
				why := CASE
					WHEN tg.tgname OPERATOR(pg_catalog.<>) 'zz_fence_truncate'
						THEN 'its name is not zz_fence_truncate'
					-- BEFORE | TRUNCATE, FOR EACH STATEMENT
					WHEN tg.tgtype OPERATOR(pg_catalog.<>) 34
						THEN 'it is not BEFORE TRUNCATE FOR EACH STATEMENT'
					WHEN tg.tgqual IS NOT NULL
						THEN 'it has a WHEN clause'
					WHEN tg.tgnargs OPERATOR(pg_catalog.<>) 0
						THEN 'it has arguments'
				END;
				IF why IS NOT NULL AND NOT tg.cloned THEN
					RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
						pg_catalog.format('TRUNCATE refusal "%s" is not the one fence_protect creates: %s', tg.tgname, why),
						drop_fix;
				END IF;
				IF tg.tgenabled OPERATOR(pg_catalog.<>) 'A' THEN
					RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
						CASE tg.tgenabled
							WHEN 'D' THEN pg_catalog.format('TRUNCATE refusal "%s" is disabled: TRUNCATE empties the table', tg.tgname)
							WHEN 'O' THEN pg_catalog.format('TRUNCATE refusal "%s" is ENABLE, not ENABLE ALWAYS: with session_replication_role = replica, TRUNCATE empties the table', tg.tgname)
							ELSE pg_catalog.format('TRUNCATE refusal "%s" is ENABLE REPLICA: except with session_replication_role = replica, TRUNCATE empties the table', tg.tgname)
						END,
						CASE WHEN tg.tgname OPERATOR(pg_catalog.=) 'zz_fence_truncate' THEN protect_fix ELSE drop_fix END;
				END IF;
			END IF;
		END LOOP;

		-- Missing: no trigger calls the function, and none has its name.
		SELECT pg_catalog.bool_or(t.tgfoid OPERATOR(pg_catalog.=) guard_fn),
			   pg_catalog.bool_or(t.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard')
		  INTO found_fn, found_name
		  FROM pg_catalog.pg_trigger t
		 WHERE t.tgrelid OPERATOR(pg_catalog.=) m.rel;
		IF NOT COALESCE(found_fn, false) AND NOT COALESCE(found_name, false) THEN
			RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
				'no fence guard (zz_fence_guard): writes are not checked'::pg_catalog.text,
				protect_fix;
		END IF;
		IF m.form OPERATOR(pg_catalog.=) 'after' THEN
			SELECT pg_catalog.bool_or(t.tgfoid OPERATOR(pg_catalog.=) after_fn),
				   pg_catalog.bool_or(t.tgname OPERATOR(pg_catalog.=) 'zz_fence_guard_update')
			  INTO found_fn, found_name
			  FROM pg_catalog.pg_trigger t
			 WHERE t.tgrelid OPERATOR(pg_catalog.=) m.rel;
			IF NOT COALESCE(found_fn, false) AND NOT COALESCE(found_name, false) THEN
				RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
					'no UPDATE check of the after form (zz_fence_guard_update): UPDATEs are not checked'::pg_catalog.text,
					protect_fix;
			END IF;
		END IF;
		SELECT pg_catalog.bool_or(t.tgfoid OPERATOR(pg_catalog.=) truncate_fn),
			   pg_catalog.bool_or(t.tgname OPERATOR(pg_catalog.=) 'zz_fence_truncate')
		  INTO found_fn, found_name
		  FROM pg_catalog.pg_trigger t
		 WHERE t.tgrelid OPERATOR(pg_catalog.=) m.rel;
		IF NOT COALESCE(found_fn, false) AND NOT COALESCE(found_name, false) THEN
			IF m.relkind OPERATOR(pg_catalog.=) 'f' THEN
				RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
					'a foreign table in a protected tree: it cannot carry the TRUNCATE refusal, and TRUNCATE empties the remote table'::pg_catalog.text,
					'Detach it from the protected tree, or unprotect the tree.'::pg_catalog.text;
			ELSE
				RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
					'no TRUNCATE refusal (zz_fence_truncate): TRUNCATE empties the table'::pg_catalog.text,
					protect_fix;
			END IF;
		END IF;

		--
		-- Roles that may create triggers on it without owning it.
		--
		RETURN QUERY
			SELECT 'warning'::pg_catalog.text, m.rel,
				   pg_catalog.format('%s holds TRIGGER on it: only fence_ddl_command_start keeps it from adding a BEFORE trigger that runs before the guard',
									 CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
										  ELSE pg_catalog.format('role %I', r.rolname) END),
				   pg_catalog.format('REVOKE TRIGGER ON %s FROM %s;', m.rel,
									 CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
										  ELSE pg_catalog.quote_ident(r.rolname) END)
			  FROM pg_catalog.aclexplode(m.relacl) x
			  LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) x.grantee
			 WHERE x.privilege_type OPERATOR(pg_catalog.=) 'TRIGGER'
			   AND x.grantee OPERATOR(pg_catalog.<>) m.relowner
			   AND (x.grantee OPERATOR(pg_catalog.=) 0
					OR (NOT r.rolsuper
						AND NOT pg_catalog.pg_has_role(x.grantee, m.relowner, 'MEMBER')))
			 ORDER BY 3;

		--
		-- On request, the stored epochs: none may be above the last token
		-- issued.  Each relation's own rows (ONLY): its partitions and
		-- children are members too.
		--
		IF scan_rows AND m.relkind OPERATOR(pg_catalog.=) 'r' THEN
			IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a
							WHERE a.attrelid OPERATOR(pg_catalog.=) m.rel
							  AND a.attname OPERATOR(pg_catalog.=) m.col
							  AND a.attnum OPERATOR(pg_catalog.>) 0
							  AND NOT a.attisdropped
							  AND a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype) THEN
				CONTINUE;	-- reported with the guard
			END IF;
			scannable := CASE
				WHEN m.relpersistence OPERATOR(pg_catalog.=) 't'
					 AND m.relnamespace IS DISTINCT FROM pg_catalog.pg_my_temp_schema()
					THEN 'it is another session''s temporary table'
				WHEN NOT pg_catalog.has_column_privilege(m.rel, m.col, 'SELECT')
					THEN pg_catalog.format('you may not read its column %s', pg_catalog.quote_ident(m.col))
			END;
			IF scannable IS NOT NULL THEN
				RETURN QUERY SELECT 'warning'::pg_catalog.text, m.rel,
					pg_catalog.format('its epochs were not scanned: %s', scannable),
					CASE WHEN m.relpersistence OPERATOR(pg_catalog.=) 't'
						 THEN 'Run fence_audit(scan_rows => true) in the session that owns the table.'
						 ELSE 'Run fence_audit(scan_rows => true) as a role that may read the table.' END;
				CONTINUE;
			END IF;
			EXECUTE pg_catalog.format('SELECT pg_catalog.max(%I) FROM ONLY %s', m.col, m.rel) INTO mx;
			IF mx OPERATOR(pg_catalog.>) last_issued THEN
				RETURN QUERY SELECT 'error'::pg_catalog.text, m.rel,
					pg_catalog.format('column %s holds %s, above the counter''s last token %s: no token wrote it%s',
									  pg_catalog.quote_ident(m.col), mx, last_issued,
									  CASE WHEN m.mode OPERATOR(pg_catalog.=) 'shared' THEN ''
										   ELSE pg_catalog.format(', and in %s mode writes of that row fail with 5F002 until the counter passes it', m.mode) END),
					pg_catalog.format('Move the counter past it with setval as a superuser (doc/fence.md 9.4): SELECT setval(%L, %s);',
									  '@extschema@.fence_token_seq', mx);
			END IF;
			IF pg_catalog.row_security_active(m.rel) THEN
				RETURN QUERY SELECT 'warning'::pg_catalog.text, m.rel,
					'its epochs were scanned only in the rows that row-level security lets you see'::pg_catalog.text,
					'Run fence_audit(scan_rows => true) as the table''s owner or a superuser.'::pg_catalog.text;
			END IF;
		END IF;
	END LOOP;
END
$$;

--
-- Tokens across timelines (token.c): every token of timeline T lies in
-- [(T - 1) * 2^40, T * 2^40).  fence_advance(margin) is the runbook step for
-- what PostgreSQL cannot see: a restore that stays on the same timeline, a
-- table loaded with pg_dump -t.  Superusers only.
--
CREATE FUNCTION fence_advance(margin pg_catalog.int8 DEFAULT 4294967296)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_advance'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
-- Not to PUBLIC: moving the counter ahead is the superuser's step.
REVOKE ALL ON FUNCTION fence_advance(pg_catalog.int8) FROM PUBLIC;

--
-- Metrics.  Each claim row counts what happened to it (fence_claims'
-- n_* columns): claims (the first one included), takeovers (claims over an
-- unreleased claim, the stale-worker case), renewals and releases.  No
-- single counter row sits on the claim path, where it would serialise
-- every claim.  Rows that existed before 1.1 start at one claim.
--
-- Refused writes by SQLSTATE (5F001 .. 5F006) in this database since the
-- server started; NULL unless fence is in shared_preload_libraries.
CREATE FUNCTION fence_refusal_counts()
RETURNS pg_catalog.int8[]
AS 'MODULE_PATHNAME', 'fence_refusal_counts'
LANGUAGE C VOLATILE PARALLEL SAFE;

--
-- fence_prune(older_than, batch): delete released claims and claims
-- whose lease expired longer ago than older_than, one batch per
-- transaction, skipping any row a writer or a claim in flight still holds
-- (prune.c).  The deleted rows' counters go to fence_pruned, so fence_stats
-- still counts them.  Owner of fence_claims or superuser; each batch that
-- deletes leaves a 'prune' row in fence_audit_log.
--
CREATE TABLE fence_pruned (
	only_row pg_catalog.bool PRIMARY KEY DEFAULT true CHECK (only_row),
	pruned pg_catalog.int8 NOT NULL DEFAULT 0,
	claims pg_catalog.int8 NOT NULL DEFAULT 0,
	takeovers pg_catalog.int8 NOT NULL DEFAULT 0,
	renewals pg_catalog.int8 NOT NULL DEFAULT 0,
	releases pg_catalog.int8 NOT NULL DEFAULT 0,
	-- keys deleted by fence_prune_effects, so fence_stats still counts them
	effects pg_catalog.int8 NOT NULL DEFAULT 0
);
-- Anyone may read it; a role that could write it could falsify the counts.
REVOKE ALL ON fence_pruned FROM PUBLIC;
GRANT SELECT ON fence_pruned TO PUBLIC;
-- no row until the first prune, so a restore's data is the only row
SELECT pg_catalog.pg_extension_config_dump('fence_pruned', '');

CREATE FUNCTION fence_prune_batch(older_than pg_catalog.interval,
								  batch pg_catalog.int4,
								  after_job pg_catalog.text,
								  OUT deleted pg_catalog.int8,
								  OUT skipped pg_catalog.int8,
								  OUT last_job pg_catalog.text)
RETURNS pg_catalog.record
AS 'MODULE_PATHNAME', 'fence_prune_batch'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- A procedure, so that it can commit after each batch: CALL it outside a
-- transaction block.  (No SET search_path: a procedure with one cannot
-- commit; every name is qualified instead.)
CREATE PROCEDURE fence_prune(older_than pg_catalog.interval,
							 batch pg_catalog.int4 DEFAULT 1000)
LANGUAGE plpgsql
AS $$
DECLARE
	after pg_catalog.text := NULL;
	b record;
	total_deleted pg_catalog.int8 := 0;
	total_skipped pg_catalog.int8 := 0;
BEGIN
	LOOP
		SELECT r.deleted, r.skipped, r.last_job INTO b
		  FROM @extschema@.fence_prune_batch(older_than, batch, after) r;
		total_deleted := total_deleted OPERATOR(pg_catalog.+) b.deleted;
		total_skipped := total_skipped OPERATOR(pg_catalog.+) b.skipped;
		COMMIT;
		EXIT WHEN b.last_job IS NULL;
		after := b.last_job;
	END LOOP;
	RAISE NOTICE 'fence_prune: % claims deleted, % skipped (held by a writer or a claim in flight)',
		total_deleted, total_skipped;
END
$$;

--
-- ======== Effect keys: fence_once and its registry ========
--
-- fence_once(key) records an effect key with the job and token of the
-- transaction's binding, as part of that transaction (effects.c): true if
-- this transaction is the first to record it, false if a committed one
-- did.  The registry is written only by fence_once, as the table's owner,
-- through the executor; nobody else may read it (a business key such as
-- 'charge:order-123' may say more than a job name).
--
CREATE TABLE fence_effects (
	key pg_catalog.text NOT NULL,
	job pg_catalog.text,			-- NULL under fence_begin_fresh
	token pg_catalog.int8 NOT NULL,
	recorded_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT fence_effects_pkey PRIMARY KEY (key),
	CONSTRAINT fence_effects_key_check CHECK (key OPERATOR(pg_catalog.<>) ''),
	CONSTRAINT fence_effects_token_check CHECK (token OPERATOR(pg_catalog.>) 0)
);
-- fence_prune_effects deletes the oldest first
CREATE INDEX fence_effects_recorded_at_idx ON fence_effects (recorded_at);
SELECT pg_catalog.pg_extension_config_dump('fence_effects', '');
REVOKE ALL ON fence_effects FROM PUBLIC;

CREATE FUNCTION fence_once(key pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_once'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- fence_once's false answers in this database since the server started;
-- NULL when not counted (fence_refusal_counts() says when).
CREATE FUNCTION fence_repeat_count()
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_repeat_count'
LANGUAGE C VOLATILE PARALLEL SAFE;

--
-- fence_prune_effects(older_than, batch): delete the keys recorded longer
-- ago than older_than, oldest first, one batch per transaction.  A repeat
-- that arrives after its key is deleted is not detected: keep keys longer
-- than the queue's longest redelivery delay.  Rows locked by someone else
-- are skipped, never waited for; a fence_once of a key being deleted waits
-- only for the batch's commit.  Needs DELETE on fence_effects (its owner,
-- or a superuser): PostgreSQL's own permission check refuses anyone else.
-- A procedure, so that it can commit after each batch; no SET search_path
-- (a procedure with one cannot commit), every name is qualified instead.
--
CREATE PROCEDURE fence_prune_effects(older_than pg_catalog.interval,
									 batch pg_catalog.int4 DEFAULT 1000)
LANGUAGE plpgsql
AS $$
DECLARE
	cutoff pg_catalog.timestamptz;
	n pg_catalog.int8;
	total pg_catalog.int8 := 0;
BEGIN
	IF older_than IS NULL OR batch IS NULL THEN
		RAISE EXCEPTION 'older_than and batch must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF older_than OPERATOR(pg_catalog.<) '0'::pg_catalog.interval THEN
		RAISE EXCEPTION 'older_than must not be negative'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF batch OPERATOR(pg_catalog.<) 1 OR batch OPERATOR(pg_catalog.>) 100000 THEN
		RAISE EXCEPTION 'batch must be between 1 and 100000'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	cutoff := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than;
	LOOP
		WITH doomed AS (
			SELECT e.key FROM @extschema@.fence_effects e
			 WHERE e.recorded_at OPERATOR(pg_catalog.<) cutoff
			 ORDER BY e.recorded_at
			 LIMIT batch
			 FOR UPDATE SKIP LOCKED),
		gone AS (
			DELETE FROM @extschema@.fence_effects e
			 USING doomed d
			 WHERE e.key OPERATOR(pg_catalog.=) d.key
			RETURNING 1)
		SELECT pg_catalog.count(*) INTO n FROM gone;
		IF n OPERATOR(pg_catalog.>) 0 THEN
			INSERT INTO @extschema@.fence_pruned AS p (effects) VALUES (n)
			ON CONFLICT (only_row) DO UPDATE
			   SET effects = p.effects OPERATOR(pg_catalog.+) EXCLUDED.effects;
		END IF;
		total := total OPERATOR(pg_catalog.+) n;
		COMMIT;
		EXIT WHEN n OPERATOR(pg_catalog.<) batch;
	END LOOP;
	RAISE NOTICE 'fence_prune_effects: % effect keys deleted', total;
END
$$;

-- fence_stats counts the effect keys too: those recorded now, every one
-- ever recorded (the pruned ones too), and the repeats absorbed.
CREATE VIEW fence_stats AS
SELECT s.jobs, s.live_claims, s.stuck_claims, s.released_claims,
	   s.claims OPERATOR(pg_catalog.+) COALESCE(p.claims, 0) AS claims,
	   s.takeovers OPERATOR(pg_catalog.+) COALESCE(p.takeovers, 0) AS takeovers,
	   s.renewals OPERATOR(pg_catalog.+) COALESCE(p.renewals, 0) AS renewals,
	   s.releases OPERATOR(pg_catalog.+) COALESCE(p.releases, 0) AS releases,
	   COALESCE(p.pruned, 0) AS pruned,
	   r.c IS NOT NULL AS refusals_counted,
	   r.c[1] AS refused_5f001, r.c[2] AS refused_5f002, r.c[3] AS refused_5f003,
	   r.c[4] AS refused_5f004, r.c[5] AS refused_5f005, r.c[6] AS refused_5f006,
	   e.n AS effect_keys,
	   e.n OPERATOR(pg_catalog.+) COALESCE(p.effects, 0) AS effects_recorded,
	   @extschema@.fence_repeat_count() AS repeats_absorbed
  FROM (SELECT pg_catalog.count(*) AS jobs,
			   pg_catalog.count(*) FILTER (WHERE NOT c.released
				   AND c.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS live_claims,
			   pg_catalog.count(*) FILTER (WHERE NOT c.released
				   AND c.lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()) AS stuck_claims,
			   pg_catalog.count(*) FILTER (WHERE c.released) AS released_claims,
			   COALESCE(pg_catalog.sum(c.n_claims), 0)::pg_catalog.int8 AS claims,
			   COALESCE(pg_catalog.sum(c.n_takeovers), 0)::pg_catalog.int8 AS takeovers,
			   COALESCE(pg_catalog.sum(c.n_renewals), 0)::pg_catalog.int8 AS renewals,
			   COALESCE(pg_catalog.sum(c.n_releases), 0)::pg_catalog.int8 AS releases
		  FROM @extschema@.fence_claims c) s
  LEFT JOIN @extschema@.fence_pruned p ON true
 CROSS JOIN (SELECT @extschema@.fence_refusal_counts() AS c) r
 CROSS JOIN (SELECT pg_catalog.count(*) AS n FROM @extschema@.fence_effects) e;

-- One row per claim.  An expired claim is blocked while a transaction
-- holds its token's lock (a writer that validated the token: a takeover
-- waits for it to end, and fence_claim answers NULL meanwhile); the lock is
-- the advisory lock (database, token >> 32, token & 0xffffffff, 17921).
CREATE VIEW fence_status AS
WITH token_locks AS (
	SELECT (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
			   OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS token,
		   pg_catalog.min(l.pid) AS pid
	  FROM pg_catalog.pg_locks l
	 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
	   AND l.objsubid OPERATOR(pg_catalog.=) 17921
	   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
			WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
	 GROUP BY 1)
SELECT c.job, c.token, c.holder, c.claimed_by, c.claimed_at, c.lease_expires_at,
	   CASE WHEN c.released THEN 'released'
			WHEN c.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN 'held'
			WHEN l.pid IS NOT NULL THEN 'expired_blocked'
			ELSE 'expired_claimable' END AS state,
	   l.pid AS lock_pid,
	   c.n_claims, c.n_takeovers, c.n_renewals, c.n_releases
  FROM @extschema@.fence_claims c
  LEFT JOIN token_locks l ON l.token OPERATOR(pg_catalog.=) c.token;

GRANT SELECT ON fence_stats, fence_status TO PUBLIC;
