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

--
-- The inline form's checks (guard.c, inline.c).  With fence preloaded, the
-- planner puts one into an UPDATE or DELETE of a protected table, and the
-- guard trigger's event is skipped for that execution.  Each makes the
-- guard's checks on the row as it was and as written, raises the guard's
-- error when they fail, and gives what the row is to hold:
-- fence_inline_guard, around the epoch column's new value in an UPDATE
-- that writes its token, the value written; fence_inline_stamp, the epoch
-- column's new value in an UPDATE under fence_begin, the token the trigger
-- would stamp; fence_inline_delete, a junk column of a DELETE, true.
-- Called by hand they only check: they mark no plan.
--
CREATE FUNCTION fence_inline_guard(old_epoch pg_catalog.int8, new_epoch pg_catalog.int8,
								   tbl pg_catalog.oid, epoch_column pg_catalog.name,
								   mode pg_catalog.text)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_inline_guard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_inline_stamp(old_epoch pg_catalog.int8, tbl pg_catalog.oid,
								   epoch_column pg_catalog.name, mode pg_catalog.text)
RETURNS pg_catalog.int8
AS 'MODULE_PATHNAME', 'fence_inline_stamp'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_inline_delete(old_epoch pg_catalog.int8, "row" pg_catalog.tid,
									tbl pg_catalog.oid, epoch_column pg_catalog.name,
									mode pg_catalog.text)
RETURNS pg_catalog.bool
AS 'MODULE_PATHNAME', 'fence_inline_delete'
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
-- fence_audit(scan_rows): what fence cannot refuse, reported (audit.c).
-- A superuser can disable fence's event triggers, declare DDL that disarms
-- a table and leave it so, write fence_claims or fence_protected, or setval
-- the counter; none of this is DDL that fence's event triggers can refuse.
-- One row for each problem found: severity 'error' (protection is broken:
-- some write, TRUNCATE or DDL goes through unchecked, or every write fails)
-- or 'warning' (worth a look); the relation concerned (NULL for the
-- database as a whole); the problem; and, in one sentence, the fix.  What
-- a protected relation must be is intact.c's definition, the one the end
-- of every DDL command and fence_protect check.  It runs as the caller,
-- locks no relation, and needs no privilege beyond what PUBLIC has, except
-- SELECT on the epoch columns for scan_rows.  The search_path is pinned
-- because the rows name functions and relations as regprocedure and
-- regclass print them under it.
--
CREATE FUNCTION fence_audit(scan_rows pg_catalog.bool DEFAULT false)
RETURNS TABLE (severity pg_catalog.text, relation pg_catalog.regclass,
			   problem pg_catalog.text, fix pg_catalog.text)
AS 'MODULE_PATHNAME', 'fence_audit_report'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

--
-- The counter's histories (token.c): a restart, a promotion, a restore or
-- an upgrade moves the counter by itself.  fence_advance(margin) is the
-- runbook step for what fence cannot see: epochs loaded from another
-- database with pg_dump -t, an epoch set by hand.  It moves the counter to
-- the largest token or epoch it finds plus the margin (by default one crash
-- gap, 2^20 tokens, about a second of the clock's floor).  Superusers only.
--
CREATE FUNCTION fence_advance(margin pg_catalog.int8 DEFAULT 1048576)
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

-- UPDATE statements of tables with fence's guard in this database since
-- the server started: the guard's inline form used, then the trigger kept
-- for fence.inline off, no check in the plan, the triggers,
-- session_replication_role (stats.c); NULL when not counted.
CREATE FUNCTION fence_inline_counts()
RETURNS pg_catalog.int8[]
AS 'MODULE_PATHNAME', 'fence_inline_counts'
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
	   @extschema@.fence_repeat_count() AS repeats_absorbed,
	   i.c[1] AS inline_writes, i.c[2] AS trigger_writes_inline_off,
	   i.c[3] AS trigger_writes_unplanned, i.c[4] AS trigger_writes_triggers,
	   i.c[5] AS trigger_writes_replica
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
 CROSS JOIN (SELECT pg_catalog.count(*) AS n FROM @extschema@.fence_effects) e
 CROSS JOIN (SELECT @extschema@.fence_inline_counts() AS c) i;

-- One row per claim.  An expired claim is blocked while a transaction
-- holds its token's lock (a writer that validated the token: a takeover
-- waits for it to end, and fence_claim answers NULL meanwhile); the lock is
-- the advisory lock (database, token >> 32, token & 0xffffffff, class),
-- whose class fence.h defines and fence_token_lock_class() returns.
CREATE FUNCTION fence_token_lock_class()
RETURNS pg_catalog.int4
AS 'MODULE_PATHNAME', 'fence_token_lock_class'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE VIEW fence_status AS
WITH token_locks AS (
	SELECT (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
			   OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS token,
		   pg_catalog.min(l.pid) AS pid
	  FROM pg_catalog.pg_locks l
	 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
	   AND l.objsubid OPERATOR(pg_catalog.=) @extschema@.fence_token_lock_class()
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

--
-- The counter's histories (token.c, "Histories").  Before the first token
-- after a restart, a crash, a promotion, a restore or an upgrade, the
-- counter moves past what any earlier or other history can have issued.
-- This sequence holds a hash of the history (the server's system
-- identifier, timeline and postmaster start) that last moved it.  It is
-- unlogged: crash recovery, even one the postmaster runs without
-- restarting (restart_after_crash), and a promotion reset it, so the first
-- claim after either finds no history recorded and moves the counter.  It
-- is dumped with the counter, so a restored database holds its source's
-- history, never its own.  Nobody but fence reads or writes it.
--
CREATE UNLOGGED SEQUENCE fence_token_history AS pg_catalog.int8 MINVALUE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE fence_token_history FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('fence_token_history', '');
-- A new counter has issued nothing: its first claim, in this history, need
-- not move it (a standby promoted since, or a restore, still moves it).
CREATE FUNCTION fence_history_created() RETURNS pg_catalog.void
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT;
SELECT @extschema@.fence_history_created();
DROP FUNCTION fence_history_created();

--
-- Workers.  The worker API is the functions that claim, renew, bind, take
-- over, release or record an effect key: whoever may call them may take a
-- job from its worker or keep it from one.  fence_worker_functions() is
-- that list, written once: by name, so that every overload of these names,
-- in this version and later ones, belongs to it.  fence_grant_worker and
-- fence_revoke_worker grant or revoke EXECUTE on exactly that list, and
-- only a superuser or fence's owner (the role that owns fence_claims, or a
-- role with its privileges) may call them; each call leaves a row in
-- fence_audit_log.  They run as the caller: GRANT itself then checks that
-- the caller may grant.
--
CREATE FUNCTION fence_worker_functions()
RETURNS SETOF pg_catalog.regprocedure
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT p.oid::pg_catalog.regprocedure
	  FROM pg_catalog.pg_proc p
	 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
	   AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['fence_claim', 'fence_renew',
		   'fence_release', 'fence_begin', 'fence_once']::pg_catalog.name[])
	 ORDER BY p.proname, p.oid
$$;

CREATE FUNCTION fence_set_worker(role pg_catalog.regrole, grant_it pg_catalog.bool)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	owner pg_catalog.oid;
	fns pg_catalog.text;
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'role must not be null' USING ERRCODE = '22004';
	END IF;
	IF role OPERATOR(pg_catalog.=) 0 THEN
		RAISE EXCEPTION 'role must name a role' USING ERRCODE = '22023';
	END IF;
	SELECT c.relowner INTO owner FROM pg_catalog.pg_class c
	 WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.fence_claims'::pg_catalog.regclass;
	IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
			 WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
	   AND NOT pg_catalog.pg_has_role(CURRENT_USER, owner, 'USAGE') THEN
		RAISE EXCEPTION 'permission denied to % role %',
			CASE WHEN grant_it THEN 'grant the worker functions to'
				 ELSE 'revoke the worker functions from' END, role
			USING ERRCODE = '42501',
				  DETAIL = pg_catalog.format('Only superusers and fence''s owner, role %s, may.',
											 owner::pg_catalog.regrole),
				  HINT = 'Ask a superuser to run it.';
	END IF;
	SELECT pg_catalog.string_agg(f::pg_catalog.text, ', ') INTO fns
	  FROM @extschema@.fence_worker_functions() f;
	EXECUTE pg_catalog.format(CASE WHEN grant_it THEN 'GRANT EXECUTE ON FUNCTION %s TO %s'
								   ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM %s' END,
							  fns, role);
	INSERT INTO @extschema@.fence_audit_log (action, detail)
	VALUES (CASE WHEN grant_it THEN 'grant_worker' ELSE 'revoke_worker' END,
			pg_catalog.format('EXECUTE on %s %s role %s', fns,
							  CASE WHEN grant_it THEN 'granted to' ELSE 'revoked from' END,
							  role));
END
$$;

CREATE FUNCTION fence_grant_worker(role pg_catalog.regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.fence_set_worker(role, true) $$;

CREATE FUNCTION fence_revoke_worker(role pg_catalog.regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.fence_set_worker(role, false) $$;

-- Their own check refuses everyone else; no need to offer them to PUBLIC.
REVOKE ALL ON FUNCTION fence_set_worker(pg_catalog.regrole, pg_catalog.bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION fence_grant_worker(pg_catalog.regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION fence_revoke_worker(pg_catalog.regrole) FROM PUBLIC;

--
-- Replication grants.  The guard lets logical replication apply a change
-- without a token (the publisher's guard arbitrated it) only when the
-- writer is trusted: a subscription owned by a superuser, a session with a
-- replication origin whose session user is a superuser, or either whose
-- role (or a role it has the privileges of) has a row here for the table
-- or for a partitioned table it belongs to.  Any other subscription's
-- apply is guarded like any other writer.  fence_grant_replication and
-- fence_revoke_replication write it, for the table's owners and
-- superusers, each call recorded in fence_audit_log; nothing else does.
-- Dumped with the data: a grant is configuration, as the audit log is.
--
CREATE TABLE fence_replication_grants (
	relation pg_catalog.regclass NOT NULL,
	role pg_catalog.regrole NOT NULL,
	CONSTRAINT fence_replication_grants_pkey PRIMARY KEY (relation, role)
);
REVOKE ALL ON fence_replication_grants FROM PUBLIC;
GRANT SELECT ON fence_replication_grants TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('fence_replication_grants', '');

CREATE FUNCTION fence_grant_replication(tbl pg_catalog.regclass, role pg_catalog.regrole)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_grant_replication'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

CREATE FUNCTION fence_revoke_replication(tbl pg_catalog.regclass, role pg_catalog.regrole)
RETURNS pg_catalog.void
AS 'MODULE_PATHNAME', 'fence_revoke_replication'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

-- A new install grants the worker API to no role (as pg_cron and
-- pg_stat_statements_reset() do): a role that can merely log in cannot
-- claim, take over, hold or release a job.  fence_grant_worker(role) is the
-- one call that lets a worker role in.
DO $$
DECLARE
	f pg_catalog.regprocedure;
BEGIN
	FOR f IN SELECT * FROM @extschema@.fence_worker_functions() LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
	END LOOP;
END
$$;
