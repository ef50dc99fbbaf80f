/*-------------------------------------------------------------------------
 *
 * claims.c
 *	  The claims registry: issuing fencing tokens, renewing and releasing
 *	  claims, and answering who holds a job.  Every read and write of
 *	  fence_claims happens here.
 *
 * fence_claims holds one row per job, whose token is that job's current
 * claim.  Tokens come from one sequence for the whole database, so every
 * token is greater than every token issued before it, for any job, and a
 * token above the sequence's last value was never issued at all.
 *
 * One snapshot rule for every read and write that decides or records a
 * claim: the latest snapshot, never the transaction's.  fence's own job and
 * token locks (token.c) give the order, and a REPEATABLE READ or
 * SERIALIZABLE caller whose snapshot predates a claim must still see it, or
 * it would report a current token as superseded.  The writes run through
 * SPI with that snapshot and no crosscheck snapshot, as ri_triggers.c runs
 * its checks: through the executor, so that every index, constraint and
 * trigger a DBA adds to fence_claims behaves as for any UPDATE, and a
 * concurrent change of the row by anyone else is waited for and its
 * conditions checked again (EvalPlanQual) rather than overwritten.
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
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
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

/* The registry's statements, prepared once per backend. */
typedef enum ClaimsPlan
{
	PLAN_CLAIM_NEW,				/* first claim of a job */
	PLAN_TAKE_OVER,				/* a new claim replaces an ended one */
	PLAN_RENEW,
	PLAN_RELEASE,
	N_CLAIMS_PLANS
} ClaimsPlan;

static SPIPlanPtr claims_plans[N_CLAIMS_PLANS];
static uint64 claims_plans_generation = 0;

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
bool
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

/* The registry statements' parameters, in this order. */
typedef struct ClaimsParams
{
	const char *job;			/* $1 */
	Interval   *lease;			/* $2, or NULL */
	text	   *holder;			/* $3, or NULL */
	int64		token;			/* $4: the claim's current token */
	int64		new_token;		/* $5: the token a new claim gets */
	TimestampTz now;			/* $6: the time the claim decides by */
} ClaimsParams;

#define N_CLAIMS_PARAMS 6

static SPIPlanPtr
claims_plan(FenceCatalog *cat, ClaimsPlan which)
{
	static Oid	argtypes[N_CLAIMS_PARAMS] = {TEXTOID, INTERVALOID, TEXTOID,
	INT8OID, INT8OID, TIMESTAMPTZOID};
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
						   " VALUES ($1, $5, $3, $6, $6 OPERATOR(pg_catalog.+) $2)"
						   " ON CONFLICT (job) DO NOTHING RETURNING token",
						   claims);
			break;
		case PLAN_TAKE_OVER:

			/*
			 * The conditions fence_claim read are checked again on the row
			 * version the UPDATE locks: if anyone changed the row meanwhile,
			 * EvalPlanQual re-evaluates them on the new version.
			 */
			sql = psprintf("UPDATE %s SET token = $5, holder = $3, claimed_at = $6,"
						   " lease_expires_at = $6 OPERATOR(pg_catalog.+) $2, released = false"
						   " WHERE job OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $4"
						   " AND (released OR lease_expires_at OPERATOR(pg_catalog.<) $6)"
						   " RETURNING token",
						   claims);
			break;
		case PLAN_RENEW:
			sql = psprintf("UPDATE %s SET lease_expires_at = $6 OPERATOR(pg_catalog.+) $2"
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

	plan = SPI_prepare(sql, N_CLAIMS_PARAMS, argtypes);
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
 * Run one of the registry's statements in its own SPI connection, with the
 * latest snapshot (see the header comment).  Returns whether it affected
 * the row; if so, *result gets the int8 or timestamptz it returned.
 *
 * The statement runs as the owner of fence_claims, which callers cannot
 * write, in the way ri_triggers.c runs its queries as a table's owner.
 * That keeps the functions SECURITY INVOKER: no GUC save and restore on
 * every claim, and the query text, qualified to the last operator, does
 * not depend on the caller's search_path anyway.
 */
static bool
claims_execute(FenceCatalog *cat, ClaimsPlan which, const ClaimsParams *p,
			   int64 *result)
{
	Datum		values[N_CLAIMS_PARAMS];
	char		nulls[N_CLAIMS_PARAMS] = {' ', ' ', ' ', ' ', ' ', ' '};
	int			ret;
	int			expected;
	Oid			save_userid;
	int			save_sec_context;
	bool		done = false;

	values[0] = CStringGetTextDatum(p->job);
	values[1] = p->lease ? IntervalPGetDatum(p->lease) : (Datum) 0;
	nulls[1] = p->lease ? ' ' : 'n';
	values[2] = p->holder ? PointerGetDatum(p->holder) : (Datum) 0;
	nulls[2] = p->holder ? ' ' : 'n';
	values[3] = Int64GetDatum(p->token);
	values[4] = Int64GetDatum(p->new_token);
	values[5] = TimestampTzGetDatum(p->now);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	expected = (which == PLAN_CLAIM_NEW) ? SPI_OK_INSERT_RETURNING : SPI_OK_UPDATE_RETURNING;
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(cat->claims_owner,
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_NOFORCE_RLS);
	/*
	 * fire_triggers: a DBA's AFTER trigger (an audit trigger, a foreign key)
	 * on fence_claims fires at the end of the statement, as for any UPDATE.
	 * ri_triggers.c passes false because it runs inside a trigger already;
	 * a plain SELECT fence_claim() has no after-trigger level to queue to.
	 */
	ret = SPI_execute_snapshot(claims_plan(cat, which), values, nulls,
							   GetLatestSnapshot(), InvalidSnapshot,
							   false, true, 0);
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

/*
 * fence_claim(job, lease, holder) returns bigint
 *
 * Issue a new token for the job if it has no claim, or its claim was
 * released or has expired; otherwise NULL.  Never waits for another claim
 * or a writer: if another claim of the job is in flight, or a transaction
 * is writing with the job's current token, the answer is NULL at once and
 * the worker tries again later.  (A foreign write to the claim row, say a
 * DBA's UPDATE, is waited for like any row lock, and the takeover's
 * conditions are checked again on what it committed.)
 */
Datum
fence_claim(PG_FUNCTION_ARGS)
{
	ClaimsParams p;
	FenceCatalog *cat;
	ClaimRow	row;
	int64		claimed_token;

	memset(&p, 0, sizeof(p));
	p.job = fence_job_arg(fcinfo, 0);
	p.lease = fence_lease_arg(fcinfo, 1);
	p.holder = PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2);
	p.now = GetCurrentTimestamp();
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	if (!token_try_lock_job_for_claim(p.job))
		PG_RETURN_NULL();

	/* Held, or being written with its token: not ours to take. */
	if (claims_fetch(cat, false, CStringGetTextDatum(p.job), &row))
	{
		if (!row.released && row.lease_expires_at >= p.now)
			PG_RETURN_NULL();
		if (!token_try_lock_for_takeover(row.token))
			PG_RETURN_NULL();

		/* If the conditions changed since the read, the token stays unused. */
		p.token = row.token;
		p.new_token = issue_token(cat);
		if (!claims_execute(cat, PLAN_TAKE_OVER, &p, &claimed_token))
			PG_RETURN_NULL();

		/* If this transaction wrote with the old token, it may not any more. */
		fence_xact_forget_token(row.token);
		PG_RETURN_INT64(p.new_token);
	}

	/* The job's first claim. */
	p.new_token = issue_token(cat);
	if (!claims_execute(cat, PLAN_CLAIM_NEW, &p, &claimed_token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(p.new_token);
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
	ClaimsParams p;
	FenceCatalog *cat;
	int64		expiry;

	memset(&p, 0, sizeof(p));
	p.job = fence_job_arg(fcinfo, 0);
	p.token = fence_token_arg(fcinfo, 1);
	p.lease = fence_lease_arg(fcinfo, 2);
	p.now = GetCurrentTimestamp();
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	token_lock_against_takeover(p.token);

	if (!claims_execute(cat, PLAN_RENEW, &p, &expiry))
		token_report_not_current(cat, p.token, p.job);

	fence_xact_remember_token(p.token, cat->generation, p.job);
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
	ClaimsParams p;
	FenceCatalog *cat;
	int64		released_token;
	bool		released;

	memset(&p, 0, sizeof(p));
	p.job = fence_job_arg(fcinfo, 0);
	p.token = fence_token_arg(fcinfo, 1);
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	/* Like fence_renew: a claim must not queue behind our row lock. */
	token_lock_against_takeover(p.token);

	released = claims_execute(cat, PLAN_RELEASE, &p, &released_token);

	/* Later writes in this transaction must see the release. */
	fence_xact_forget_token(p.token);
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
