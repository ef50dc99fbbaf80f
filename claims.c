/*-------------------------------------------------------------------------
 *
 * claims.c
 *	  The claims registry: issuing fencing tokens, renewing and releasing
 *	  claims, answering whether a token is current, and the token locks
 *	  that keep a write and a takeover of the same job from interleaving.
 *
 * fence_claims holds one row per job, whose token is that job's current
 * claim.  Tokens come from one sequence for the whole database, so every
 * token is greater than every token issued before it, for any job, and a
 * token above the sequence's last value was never issued at all.
 *
 * Serialising writers against takeovers.  A writer (fence_begin, or the
 * guard validating a token) takes the token's lock in share mode before it
 * reads fence_claims, and holds it to the end of its transaction.  A claim
 * that would replace the token takes the same lock in exclusive mode without
 * waiting, and answers NULL if it cannot have it.  So either the claim comes
 * first, and the writer, once its lock is granted, reads the new token with
 * a fresh snapshot and is fenced; or the writer comes first, and the claim
 * fails until the writer's transaction ends.  The locks live in the lock
 * manager, not on the claim row: taking one writes no WAL and dirties no
 * page.  A second lock on the job name keeps two claims of the same job
 * from queueing behind each other.
 *
 * The writer's read uses the latest snapshot, not the transaction's: a
 * REPEATABLE READ writer whose snapshot predates a takeover must still see
 * it.  ri_triggers.c reads with GetLatestSnapshot() for the same reason.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/indexing.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(fence_claim);
PG_FUNCTION_INFO_V1(fence_renew);
PG_FUNCTION_INFO_V1(fence_release);
PG_FUNCTION_INFO_V1(fence_current);
PG_FUNCTION_INFO_V1(fence_is_current);
PG_FUNCTION_INFO_V1(fence_begin);

/* The registry's statements, prepared once per backend. */
typedef enum ClaimsPlan
{
	PLAN_CLAIM_NEW,				/* first claim of a job */
	PLAN_RENEW,
	PLAN_RELEASE,
	N_CLAIMS_PLANS
} ClaimsPlan;

static SPIPlanPtr claims_plans[N_CLAIMS_PLANS];
static uint64 claims_plans_generation = 0;

/* What the registry says about a token. */
typedef enum FenceTokenState
{
	FENCE_TOKEN_CURRENT,		/* the current, unreleased claim of its job */
	FENCE_TOKEN_SUPERSEDED,		/* issued once, no longer current */
	FENCE_TOKEN_NEVER_ISSUED	/* above the last token issued */
} FenceTokenState;

/* A token's validation result with what the error messages need. */
typedef struct FenceTokenCheck
{
	FenceTokenState state;
	char	   *job;			/* the job it is current for (CURRENT) */
	char	   *released_job;	/* the job whose released claim it is */
	bool		job_found;		/* the expected job has a claim row */
	int64		job_token;		/* that row's token */
	bool		job_released;	/* and whether it is released */
	int64		last_issued;	/* NEVER_ISSUED: the counter's value */
} FenceTokenCheck;

/* What the index lookup of a claim row returns. */
typedef struct ClaimRow
{
	char	   *job;
	int64		token;
	bool		released;
	TimestampTz lease_expires_at;
} ClaimRow;

static void report_token(int64 token, const char *job, FenceTokenCheck *check,
						 bool never_issued_is_invalid) pg_attribute_noreturn();

/*
 * Lock tags.  Tokens are unique bigints, so the token lock is exact.  The
 * job lock hashes the name to 64 bits; a collision can only make a claim
 * answer NULL while an unrelated claim is in flight, never let two through.
 */
static void
set_token_locktag(LOCKTAG *tag, int64 token)
{
	uint64		key = (uint64) token;

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, FENCE_LOCKTAG_TOKEN);
}

/*
 * Take a token's lock in share mode to the end of the transaction, waiting
 * for a claim in flight if need be: no takeover of the job can succeed
 * until the transaction ends.
 */
static void
lock_token_against_takeover(int64 token)
{
	LOCKTAG		tag;

	set_token_locktag(&tag, token);
	fence_xact_note_lock();
	(void) LockAcquire(&tag, ShareLock, false, false);
}

/* Take a token's lock in exclusive mode if no writer holds it. */
static bool
try_lock_token_for_takeover(int64 token)
{
	LOCKTAG		tag;

	set_token_locktag(&tag, token);
	fence_xact_note_lock();
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Take the job name's lock if no other claim of it is in flight. */
static bool
try_lock_job_for_claim(const char *job)
{
	LOCKTAG		tag;
	uint64		key = hash_bytes_extended((const unsigned char *) job,
										  strlen(job), 0);

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, FENCE_LOCKTAG_JOB);
	fence_xact_note_lock();
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Find the claim row by job or by token through its index, with the latest
 * snapshot, and store it in slot.  No SPI: this is the guard's path, once
 * per transaction.  The slot keeps its own buffer pin after the scan ends.
 */
static bool
claims_lookup(FenceCatalog *cat, Relation rel, bool by_token, Datum key,
			  TupleTableSlot *slot)
{
	Relation	idx;
	Snapshot	snapshot;
	ScanKeyData skey;
	IndexScanDesc scan;
	bool		found;

	idx = index_open(by_token ? cat->claims_token_index : cat->claims_job_index,
					 AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());

	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber,
						   InvalidOid, idx->rd_indcollation[0],
						   by_token ? F_INT8EQ : F_TEXTEQ, key);
#if PG_VERSION_NUM >= 180000
	scan = index_beginscan(rel, idx, snapshot, NULL, 1, 0);
#else
	scan = index_beginscan(rel, idx, snapshot, 1, 0);
#endif
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);

	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	index_close(idx, AccessShareLock);
	return found;
}

/* Read one claim row, by job or by token, into *row. */
static bool
claims_fetch(FenceCatalog *cat, bool by_token, Datum key, ClaimRow *row)
{
	Relation	rel = table_open(cat->claims_relid, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	bool		found = claims_lookup(cat, rel, by_token, key, slot);

	if (found)
	{
		bool		isnull;

		row->job = TextDatumGetCString(slot_getattr(slot, cat->att_job, &isnull));
		row->token = DatumGetInt64(slot_getattr(slot, cat->att_token, &isnull));
		row->released = DatumGetBool(slot_getattr(slot, cat->att_released, &isnull));
		row->lease_expires_at = DatumGetTimestampTz(slot_getattr(slot, cat->att_lease_expires_at,
																 &isnull));
	}

	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * What the registry says about a token.  If expected_job is given, the token
 * is current only if it is that job's claim, and the job's row is reported
 * for the error message.  The caller must already hold the token's lock, or
 * the answer may be stale by the time it acts on it.
 */
static void
check_token(FenceCatalog *cat, int64 token, const char *expected_job,
			FenceTokenCheck *result)
{
	ClaimRow	row;

	memset(result, 0, sizeof(*result));

	if (claims_fetch(cat, true, Int64GetDatum(token), &row))
	{
		if (!row.released &&
			(expected_job == NULL || strcmp(row.job, expected_job) == 0))
		{
			result->state = FENCE_TOKEN_CURRENT;
			result->job = row.job;
			return;
		}
		if (row.released)
			result->released_job = row.job;
	}

	/* Not current: gather what the error message will say. */
	if (expected_job != NULL &&
		claims_fetch(cat, false, CStringGetTextDatum(expected_job), &row))
	{
		result->job_found = true;
		result->job_token = row.token;
		result->job_released = row.released;
	}
	result->last_issued = fence_last_token_issued(cat);
	result->state = (token > result->last_issued) ?
		FENCE_TOKEN_NEVER_ISSUED : FENCE_TOKEN_SUPERSEDED;
}

/*
 * Raise the error for a token that is not its job's current claim.  The
 * guard reports a never-issued token as invalid (5F004); the functions that
 * name a job report every non-current token as superseded (5F001).
 */
static void
report_token(int64 token, const char *job, FenceTokenCheck *check,
			 bool never_issued_is_invalid)
{
	if (check->state == FENCE_TOKEN_NEVER_ISSUED && never_issued_is_invalid)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_INVALID_TOKEN),
				 errmsg("invalid fencing token " INT64_FORMAT, token),
				 errdetail("No claim issued this token: the last token issued is " INT64_FORMAT ".",
						   check->last_issued),
				 errhint(FENCE_STOP_HINT)));

	if (job == NULL && check->released_job != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_SUPERSEDED),
				 errmsg("fencing token " INT64_FORMAT " has been superseded", token),
				 errdetail("The claim of job \"%s\" by token " INT64_FORMAT " was released.",
						   check->released_job, token),
				 errhint(FENCE_STOP_HINT)));
	else if (job == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_SUPERSEDED),
				 errmsg("fencing token " INT64_FORMAT " has been superseded", token),
				 errdetail("Token " INT64_FORMAT " is no longer the current claim of any job: a newer claim of its job has replaced it.",
						   token),
				 errhint(FENCE_STOP_HINT)));
	else if (!check->job_found)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_SUPERSEDED),
				 errmsg("fencing token " INT64_FORMAT " is not the current claim of job \"%s\"",
						token, job),
				 errdetail("Job \"%s\" has no claim.", job),
				 errhint(FENCE_STOP_HINT)));
	else if (check->job_released)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_SUPERSEDED),
				 errmsg("fencing token " INT64_FORMAT " is not the current claim of job \"%s\"",
						token, job),
				 errdetail("The claim of job \"%s\" by token " INT64_FORMAT " was released.",
						   job, check->job_token),
				 errhint(FENCE_STOP_HINT)));
	else
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_SUPERSEDED),
				 errmsg("fencing token " INT64_FORMAT " is not the current claim of job \"%s\"",
						token, job),
				 errdetail("Job \"%s\" is now held by token " INT64_FORMAT ".",
						   job, check->job_token),
				 errhint(FENCE_STOP_HINT)));
}

/*
 * Make sure the token is current, and the current claim of job if one is
 * given, and that it stays so until the transaction ends: take its lock,
 * ask the registry, raise the error if it is not, and remember it so the
 * guard's later rows need not ask again.
 */
void
fence_hold_token(FenceCatalog *cat, int64 token, const char *job,
				 bool never_issued_is_invalid)
{
	FenceTokenCheck check;

	lock_token_against_takeover(token);
	check_token(cat, token, job, &check);
	if (check.state != FENCE_TOKEN_CURRENT)
		report_token(token, job, &check, never_issued_is_invalid);
	fence_xact_remember_token(token);
}

/*
 * Prepared statements of the registry.  They are rebuilt when the catalog
 * is (a new extension schema means new query text), and when the plan cache
 * says a plan can no longer be used, as ri_FetchPreparedPlan does.
 */
static void
reset_claims_plans(void)
{
	int			i;

	for (i = 0; i < N_CLAIMS_PLANS; i++)
	{
		if (claims_plans[i])
			SPI_freeplan(claims_plans[i]);
		claims_plans[i] = NULL;
	}
}

static SPIPlanPtr
claims_plan(FenceCatalog *cat, ClaimsPlan which)
{
	/* $1 job, $2 lease, $3 holder, $4 current token, $5 new token */
	static Oid	argtypes[5] = {TEXTOID, INTERVALOID, TEXTOID, INT8OID, INT8OID};
	const char *claims;
	char	   *sql;
	SPIPlanPtr	plan;

	if (claims_plans_generation != cat->generation)
	{
		reset_claims_plans();
		claims_plans_generation = cat->generation;
	}
	if (claims_plans[which] && SPI_plan_is_valid(claims_plans[which]))
		return claims_plans[which];

	claims = quote_qualified_identifier(cat->nspname, "fence_claims");
	switch (which)
	{
		case PLAN_CLAIM_NEW:
			sql = psprintf("INSERT INTO %s (job, token, holder, claimed_at, lease_expires_at)"
						   " VALUES ($1, $5, $3, pg_catalog.clock_timestamp(),"
						   " pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $2)"
						   " ON CONFLICT (job) DO NOTHING RETURNING token",
						   claims);
			break;
		case PLAN_RENEW:
			sql = psprintf("UPDATE %s SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $2"
						   " WHERE job OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $4"
						   " AND NOT released RETURNING lease_expires_at",
						   claims);
			break;
		case PLAN_RELEASE:
			sql = psprintf("UPDATE %s SET released = true"
						   " WHERE job OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $4"
						   " AND NOT released RETURNING token",
						   claims);
			break;
		default:
			elog(ERROR, "unrecognized fence plan %d", (int) which);
			sql = NULL;			/* keep compiler quiet */
	}

	plan = SPI_prepare(sql, lengthof(argtypes), argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	if (claims_plans[which])
		SPI_freeplan(claims_plans[which]);
	claims_plans[which] = plan;
	pfree(sql);
	return plan;
}

/*
 * Run one of the registry's statements in its own SPI connection.  Returns
 * whether it affected the row; if so, *result gets the int8 or timestamptz
 * it returned.
 *
 * The statement runs as the owner of fence_claims, which callers cannot
 * write, in the way ri_triggers.c runs its queries as a table's owner.
 * That keeps the functions SECURITY INVOKER: no GUC save and restore on
 * every claim, and the query text, qualified to the last operator, does
 * not depend on the caller's search_path anyway.
 */
static bool
claims_execute(FenceCatalog *cat, ClaimsPlan which, const char *job,
			   Interval *lease, text *holder, int64 token, int64 new_token,
			   int64 *result)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			ret;
	int			expected;
	Oid			save_userid;
	int			save_sec_context;
	bool		done = false;

	values[0] = CStringGetTextDatum(job);
	values[1] = lease ? IntervalPGetDatum(lease) : (Datum) 0;
	nulls[1] = lease ? ' ' : 'n';
	values[2] = holder ? PointerGetDatum(holder) : (Datum) 0;
	nulls[2] = holder ? ' ' : 'n';
	values[3] = Int64GetDatum(token);
	values[4] = Int64GetDatum(new_token);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	expected = (which == PLAN_CLAIM_NEW) ? SPI_OK_INSERT_RETURNING : SPI_OK_UPDATE_RETURNING;
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(cat->claims_owner,
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_NOFORCE_RLS);
	ret = SPI_execute_plan(claims_plan(cat, which), values, nulls, false, 0);
	SetUserIdAndSecContext(save_userid, save_sec_context);

	if (ret != expected)
		elog(ERROR, "fence registry statement %d returned %s", (int) which,
			 SPI_result_code_string(ret));
	if (SPI_processed > 1)
		elog(ERROR, "fence registry statement %d affected " UINT64_FORMAT " rows",
			 (int) which, SPI_processed);
	if (SPI_processed == 1)
	{
		bool		isnull;

		/* int8 and timestamptz alike; read before SPI_finish frees it */
		*result = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
		done = !isnull;
	}

	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return done;
}

/*
 * Replace the job's released or expired claim with new_token, if it still
 * holds old_token.  Returns whether it did.
 *
 * This is the claim's hot path, so it updates the row directly, the way
 * catalog code does, instead of planning and running an UPDATE: nothing
 * else can write the row meanwhile (other claims hold the job's lock, and
 * fence_renew and fence_release the token's, which the caller holds
 * exclusively), and fence_claims has no triggers, and no expression or
 * partial indexes.  The row is read again with a fresh snapshot, now that
 * the token's lock is held: a renewal may have committed since the first
 * read.
 */
static bool
claims_take_over(FenceCatalog *cat, const char *job, int64 old_token,
				 int64 new_token, Interval *lease, text *holder)
{
	Relation	rel;
	TupleTableSlot *slot;
	bool		replaced = false;

	rel = table_open(cat->claims_relid, RowExclusiveLock);
	slot = table_slot_create(rel, NULL);

	if (claims_lookup(cat, rel, false, CStringGetTextDatum(job), slot))
	{
		TupleDesc	tupdesc = RelationGetDescr(rel);
		TimestampTz now = GetCurrentTimestamp();
		bool		isnull;
		int64		token;
		bool		released;
		TimestampTz expires;

		token = DatumGetInt64(slot_getattr(slot, cat->att_token, &isnull));
		released = DatumGetBool(slot_getattr(slot, cat->att_released, &isnull));
		expires = DatumGetTimestampTz(slot_getattr(slot, cat->att_lease_expires_at,
												   &isnull));
		if (token == old_token && (released || expires < now))
		{
			Datum	   *values = palloc0(tupdesc->natts * sizeof(Datum));
			bool	   *nulls = palloc0(tupdesc->natts * sizeof(bool));
			bool	   *replace = palloc0(tupdesc->natts * sizeof(bool));
			bool		should_free;
			HeapTuple	oldtup = ExecFetchSlotHeapTuple(slot, true, &should_free);
			HeapTuple	newtup;

			values[cat->att_token - 1] = Int64GetDatum(new_token);
			replace[cat->att_token - 1] = true;
			values[cat->att_holder - 1] = PointerGetDatum(holder);
			nulls[cat->att_holder - 1] = (holder == NULL);
			replace[cat->att_holder - 1] = true;
			values[cat->att_claimed_at - 1] = TimestampTzGetDatum(now);
			replace[cat->att_claimed_at - 1] = true;
			values[cat->att_lease_expires_at - 1] =
				DirectFunctionCall2(timestamptz_pl_interval,
									TimestampTzGetDatum(now),
									IntervalPGetDatum(lease));
			replace[cat->att_lease_expires_at - 1] = true;
			values[cat->att_released - 1] = BoolGetDatum(false);
			replace[cat->att_released - 1] = true;

			newtup = heap_modify_tuple(oldtup, tupdesc, values, nulls, replace);
			CatalogTupleUpdate(rel, &slot->tts_tid, newtup);
			/* Make the new claim visible to the rest of this transaction. */
			CommandCounterIncrement();
			replaced = true;
		}
	}

	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	return replaced;
}

/*
 * Take the next token from the counter.
 *
 * The client must never see a token that a crash could hand out again,
 * whether or not the claim's transaction commits, and whatever
 * synchronous_commit says.  nextval() WAL-logs a value some way ahead of
 * what it returns (every 32 values, and on the first call after a
 * checkpoint) and stamps the sequence page with that record; once the
 * record is flushed, recovery restarts the counter above every value
 * returned so far.  So flush up to the page's LSN: usually it is flushed
 * already and this costs a comparison.
 */
static int64
issue_token(FenceCatalog *cat)
{
	int64		token = nextval_internal(cat->token_seq_relid, false);
	Relation	seqrel;
	Buffer		buf;
	XLogRecPtr	lsn;

	seqrel = relation_open(cat->token_seq_relid, NoLock);	/* nextval locked it */
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);

	XLogFlush(lsn);
	return token;
}

/*
 * fence_claim(job, lease, holder) returns bigint
 *
 * Issue a new token for the job if it has no claim, or its claim was
 * released or has expired; otherwise NULL.  Never waits: if another claim of
 * the job is in flight, or a transaction is writing with the job's current
 * token, the answer is NULL at once and the worker tries again later.
 */
Datum
fence_claim(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	Interval   *lease = fence_lease_arg(fcinfo, 1);
	text	   *holder = PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	ClaimRow	row;
	int64		new_token;
	int64		claimed_token;

	if (!try_lock_job_for_claim(job))
		PG_RETURN_NULL();

	/* Held, or being written with its token: not ours to take. */
	if (claims_fetch(cat, false, CStringGetTextDatum(job), &row))
	{
		if (!row.released && row.lease_expires_at >= GetCurrentTimestamp())
			PG_RETURN_NULL();
		if (!try_lock_token_for_takeover(row.token))
			PG_RETURN_NULL();

		/* If the conditions changed since the read, the token stays unused. */
		new_token = issue_token(cat);
		if (!claims_take_over(cat, job, row.token, new_token, lease, holder))
			PG_RETURN_NULL();

		/* If this transaction wrote with the old token, it may not any more. */
		fence_xact_forget_token(row.token);
		PG_RETURN_INT64(new_token);
	}

	/* The job's first claim. */
	new_token = issue_token(cat);
	if (!claims_execute(cat, PLAN_CLAIM_NEW, job, lease, holder, 0, new_token,
						&claimed_token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(new_token);
}

/*
 * fence_renew(job, token, lease) returns timestamptz
 *
 * Extend the lease of the job's current claim.  The token's lock is taken
 * in share mode first, so the renewal and a takeover are ordered, and the
 * rest of the transaction may write with the token without checking again.
 */
Datum
fence_renew(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	int64		token = fence_token_arg(fcinfo, 1);
	Interval   *lease = fence_lease_arg(fcinfo, 2);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	int64		expiry;

	lock_token_against_takeover(token);

	if (!claims_execute(cat, PLAN_RENEW, job, lease, NULL, token, 0, &expiry))
	{
		FenceTokenCheck check;

		check_token(cat, token, job, &check);
		report_token(token, job, &check, false);
	}

	fence_xact_remember_token(token);
	PG_RETURN_TIMESTAMPTZ(expiry);
}

/*
 * fence_release(job, token) returns boolean
 *
 * Conditional acknowledgement: end the claim if the token is the job's
 * current one.  Writers already inside a transaction with the token keep
 * their lock, so a takeover still waits for them to finish.  The release
 * takes the token's lock in share mode too, so that a claim of the job
 * answers NULL while the release is uncommitted instead of waiting for it.
 */
Datum
fence_release(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	int64		token = fence_token_arg(fcinfo, 1);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	int64		released_token;
	bool		released;

	/* Like fence_renew: a claim must not queue behind our row lock. */
	lock_token_against_takeover(token);

	released = claims_execute(cat, PLAN_RELEASE, job, NULL, NULL, token, 0,
							  &released_token);

	/* Later writes in this transaction must see the release. */
	fence_xact_forget_token(token);
	PG_RETURN_BOOL(released);
}

/*
 * fence_current(job) returns bigint
 *
 * The job's current token; NULL if it has no claim or it was released.
 */
Datum
fence_current(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	ClaimRow	row;

	if (!claims_fetch(cat, false, CStringGetTextDatum(job), &row) || row.released)
		PG_RETURN_NULL();
	PG_RETURN_INT64(row.token);
}

/*
 * fence_is_current(job, token) returns boolean
 *
 * The handler's early check before doing damage.  It takes no lock: the
 * answer may change a moment later, and only a write is checked for real.
 */
Datum
fence_is_current(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	int64		token = fence_token_arg(fcinfo, 1);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	ClaimRow	row;

	PG_RETURN_BOOL(claims_fetch(cat, false, CStringGetTextDatum(job), &row) &&
				   !row.released && row.token == token);
}

/*
 * fence_begin(job, token) returns void
 *
 * Bind the token to the transaction: every write to a protected table until
 * it ends carries the token, and no claim of the job can succeed meanwhile.
 */
Datum
fence_begin(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	int64		token = fence_token_arg(fcinfo, 1);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);

	fence_hold_token(cat, token, job, false);
	fence_xact_bind(job, token);
	PG_RETURN_VOID();
}
