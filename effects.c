/*-------------------------------------------------------------------------
 *
 * effects.c
 *	  Effect keys: fence_once() and every write of fence_effects.
 *
 * Fencing refuses a stale writer.  It cannot see the other duplicate: an
 * execution that committed its effect while its claim was current and died
 * before it released the claim.  The queue delivers the job again, the next
 * execution claims it with a newer token and, being current, would apply
 * the effect a second time.  fence_once(key) records the key in
 * fence_effects as part of the caller's transaction, with the job and
 * token of the binding in force; the answer says whether this transaction
 * is the first to record it (go ahead) or a committed one already did (skip
 * it: it happened).
 *
 * The record is an INSERT ... ON CONFLICT DO NOTHING through SPI, as the
 * table's owner, with the latest snapshot: a DBA's indexes, constraints and
 * triggers on fence_effects behave as for any INSERT, and a rollback, or a
 * rollback to a savepoint taken before the call, takes the record away.
 * Before it, the caller takes a lock on the key (an advisory-method lock of
 * fence's own class, on a 64-bit hash of the key) to the end of its
 * (sub)transaction.  Whoever recorded the key and has not finished holds
 * that lock, so a second caller waits there, as at a unique index, and
 * takes its snapshot only once the first has committed or rolled back.  The
 * insert then decides on what the first left: its committed row (false), or
 * nothing (true).  Deciding on a snapshot taken after the wait is what
 * keeps a REPEATABLE READ caller from the serialization failure that ON
 * CONFLICT raises for a conflicting row its own snapshot cannot see, and a
 * REPEATABLE READ snapshot older than the committed record from answering
 * true.  A hash collision between two keys only makes one wait for the
 * other's transaction.
 *
 * fence_once vouches for the binding's token the way a write does: the
 * binding in force for the statement (one made by a function the statement
 * itself calls does not count, xact.c), validated and locked against a
 * takeover as the guard would (token.c).  Like fence_begin it refuses to
 * run in a trigger: a trigger's key would be recorded for a statement no
 * token vouched for.
 *
 * Repeats absorbed are counted in shared memory (stats.c); keys recorded
 * are the rows of fence_effects plus those fence_prune_effects deleted.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(fence_once);

#define N_ONCE_PARAMS 3

/* The record statement, prepared once per backend and catalog generation. */
static SPIPlanPtr once_plan = NULL;
static uint64 once_plan_generation = 0;

/*
 * The key argument: not NULL (22004), not empty, and short enough to be a
 * btree key (22023).
 */
static text *
effects_key_arg(FunctionCallInfo fcinfo)
{
	text	   *key;
	int			len;

	fence_require_arg(fcinfo, 0, "key");
	key = PG_GETARG_TEXT_PP(0);
	len = VARSIZE_ANY_EXHDR(key);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("effect key must not be empty")));
	if (len > FENCE_MAX_EFFECT_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("effect key is too long"),
				 errdetail("An effect key may be at most %d bytes; this one is %d bytes.",
						   FENCE_MAX_EFFECT_KEY_BYTES, len)));
	return key;
}

/*
 * Take the key's lock to the end of the (sub)transaction, waiting for a
 * transaction that recorded the same key (or one of the same hash) and has
 * not ended.
 */
static void
effects_lock_key(text *key)
{
	LOCKTAG		tag;
	uint64		h = hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
										VARSIZE_ANY_EXHDR(key), 0);

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 FENCE_LOCKTAG_EFFECT);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * The record statement.  Rebuilt when the catalog is (a new extension
 * schema means new query text), and when the plan cache says it can no
 * longer be used.
 */
static SPIPlanPtr
effects_once_plan(FenceCatalog *cat)
{
	/* $1 key, $2 job, $3 token */
	static Oid	argtypes[N_ONCE_PARAMS] = {TEXTOID, TEXTOID, INT8OID};
	char	   *sql;
	SPIPlanPtr	plan;

	if (once_plan_generation != cat->generation && once_plan)
	{
		SPI_freeplan(once_plan);
		once_plan = NULL;
	}
	once_plan_generation = cat->generation;
	if (once_plan && SPI_plan_is_valid(once_plan))
		return once_plan;

	sql = psprintf("INSERT INTO %s (key, job, token) VALUES ($1, $2, $3)"
				   " ON CONFLICT (key) DO NOTHING RETURNING true",
				   quote_qualified_identifier(cat->nspname, "fence_effects"));
	plan = SPI_prepare(sql, N_ONCE_PARAMS, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	if (once_plan)
		SPI_freeplan(once_plan);
	once_plan = plan;
	pfree(sql);
	return plan;
}

/*
 * Record the key for job and token, as the owner of fence_effects, with a
 * snapshot taken now.  Returns whether this call inserted it.
 */
static bool
effects_record(FenceCatalog *cat, text *key, const char *job, int64 token)
{
	Oid			relid = get_relname_relid("fence_effects", cat->nspid);
	Datum		values[N_ONCE_PARAMS];
	char		nulls[N_ONCE_PARAMS] = {' ', ' ', ' '};
	FenceSavedUser saved;
	int			ret;
	bool		inserted;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.fence_effects\" of extension \"fence\" does not exist",
						cat->nspname),
				 errhint("Update the extension with ALTER EXTENSION fence UPDATE.")));

	values[0] = PointerGetDatum(key);
	values[1] = job ? CStringGetTextDatum(job) : (Datum) 0;
	nulls[1] = job ? ' ' : 'n';
	values[2] = Int64GetDatum(token);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_become_owner(fence_rel_owner(relid), &saved);
	ret = SPI_execute_snapshot(effects_once_plan(cat), values, nulls,
							   GetLatestSnapshot(), InvalidSnapshot,
							   false, true, 0);
	fence_restore_user(&saved);
	if (ret != SPI_OK_INSERT_RETURNING || SPI_processed > 1)
		elog(ERROR, "fence's effect-key statement returned %s, " UINT64_FORMAT " rows",
			 SPI_result_code_string(ret), SPI_processed);
	inserted = (SPI_processed == 1);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return inserted;
}

/*
 * fence_once(key text) returns boolean
 *
 * Record the effect key with the binding's job and token, in the caller's
 * transaction.  True: this transaction is the first to record it, so make
 * the effect.  False: a committed transaction recorded it (or this one did
 * already), so the effect has happened.
 */
Datum
fence_once(PG_FUNCTION_ARGS)
{
	text	   *key;
	FenceCatalog *cat;
	const char *job;
	int64		token;
	int64		late_token;
	const char *late_job;
	bool		first;

	fence_refuse_on_citus_worker("fence_once");
	key = effects_key_arg(fcinfo);

	if (fence_trigger_depth() > 0)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
				 errmsg("fence_once cannot be called from a trigger"),
				 errdetail("A key recorded by a trigger would be recorded for the statement that fired it, which no token vouched for."),
				 errhint("Call fence_once in the transaction, after fence_begin, before the statements that make the effect.")));

	token = fence_xact_statement_binding(&job, &late_token, &late_job);
	if (token == 0 && late_token != 0)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_NO_TOKEN)),
				 late_job ?
				 errmsg("fencing token " INT64_FORMAT " of job \"%s\" was bound during the statement that calls fence_once",
						late_token, late_job) :
				 errmsg("fresh fencing token " INT64_FORMAT " was bound during the statement that calls fence_once",
						late_token),
				 errdetail("A binding made while a statement runs covers only the statements after it."),
				 errhint("Call fence_begin in the transaction before the statement that calls fence_once.")));
	if (token == 0)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_NO_TOKEN)),
				 errmsg("fence_once needs a fencing token bound to the transaction"),
				 errdetail("An effect key is recorded with the job and token of the execution that makes the effect."),
				 errhint("Call fence_begin(job, token) or fence_begin_fresh() first, in the same transaction block.")));

	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	claims_refuse_on_standby("record an effect key");

	/*
	 * The binding's token is checked as a write's is: still current, and
	 * locked against a takeover until the transaction ends.  It normally is
	 * already; a release of it in this transaction, say, means it is not.
	 */
	if (!fence_xact_token_validated(token, cat->generation, NULL))
		job = fence_hold_token(cat, token, job);

	effects_lock_key(key);
	first = effects_record(cat, key, job, token);
	if (!first)
		fence_count_repeat();
	PG_RETURN_BOOL(first);
}
