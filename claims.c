/*-------------------------------------------------------------------------
 *
 * claims.c
 *	  The claims registry: issuing fencing tokens, renewing and releasing
 *	  claims, answering who holds a job, and so whether a token is its
 *	  job's current claim (fence_hold_token, with the 5F001 and 5F004
 *	  reports and the caller's-bug 5G001 and 5G002).  Every write of
 *	  fence_claims happens here (fence_prune's deletes too,
 *	  claims_prune_row), and so does every read that decides or checks a
 *	  claim.  Three readers that decide nothing read it elsewhere, through
 *	  SPI as the caller: fence_prune's scan for candidates (prune.c, each
 *	  then checked again here under its locks), fence_advance's largest
 *	  token (token.c) and fence_audit (audit.c).
 *
 * The locks that order a write against a takeover, and the counter the
 * tokens come from, are token.c's, below this file: it takes them there
 * and reads the registry here, so the question "is this token current?"
 * has one owner.
 *
 * fence_claims holds one row per job, whose token is that job's current
 * claim.  Tokens come from one sequence for the whole database, so every
 * token is greater than every token issued before it, for any job, and a
 * token above the sequence's last value was never issued at all.
 *
 * Who may act on a claim is one rule (claims_caller_may): the role that
 * made it and its members, superusers, and supervisors.  It is checked
 * before renewing or releasing the claim and before taking its token's
 * lock for a transaction (fence_hold_token: fence_begin, the guard,
 * fence_once), so no stranger can end, extend or hold another's claim.
 *
 * One snapshot rule for every read and write that decides or records a
 * claim: the latest snapshot, never the transaction's.  fence's own job and
 * token locks (token.c) give the order, and a REPEATABLE READ or
 * SERIALIZABLE caller whose snapshot predates a claim must still see it, or
 * it would report a current token as superseded.
 *
 * Writes go through the executor, so that every index, constraint and
 * trigger a DBA adds to fence_claims behaves as for any UPDATE.  A claim
 * row is changed the way logical replication's apply changes a row
 * (execReplication.c): find it with the latest snapshot, check the
 * conditions on that version, and replace it as ExecSimpleRelationUpdate
 * does, running constraints and triggers and maintaining the indexes
 * (claims_write_row).  A takeover does not lock the row first: the write
 * itself waits for anyone changing it, and if they changed it, writes
 * nothing, and the row is read and checked again on what they committed,
 * so the version replaced is always the one checked.  Renewals, releases,
 * and a takeover under a DBA's BEFORE ROW UPDATE trigger lock the version
 * first with table_tuple_lock and update it with ExecSimpleRelationUpdate
 * itself (claims_update_once says why).  Unlike an UPDATE statement, this
 * never raises a serialization failure at REPEATABLE READ merely because
 * someone changed the row after the transaction's snapshot.  A job's first
 * claim is an INSERT ... ON CONFLICT DO NOTHING through SPI.
 *
 * Only a change locks the row.  The conditions are checked first on the
 * latest version, unlocked, and a call they refuse (a release with another
 * token, a takeover of a lease renewed meanwhile) returns with no row lock,
 * no transaction id and no lock on fence_claims: anything it kept would
 * make the holder's own release, and every takeover of the job, wait for a
 * transaction that changed nothing.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(fence_claim);
PG_FUNCTION_INFO_V1(fence_renew);
PG_FUNCTION_INFO_V1(fence_release);
PG_FUNCTION_INFO_V1(fence_current);
PG_FUNCTION_INFO_V1(fence_is_current);
PG_FUNCTION_INFO_V1(fence_release_any);
PG_FUNCTION_INFO_V1(fence_renew_any);

/* What the registry's index read of one claim row returns */
typedef struct ClaimRow
{
	char	   *job;
	int64		token;
	bool		released;
	TimestampTz lease_expires_at;
	char	   *claimed_by;		/* the role that made it, or NULL */
	ItemPointerData tid;		/* where the version read lies */
} ClaimRow;

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
	int64		last_issued;	/* the counter's value (NEVER_ISSUED, and for
								 * a job named) */
	const char *listed_job;		/* NEVER_ISSUED, but fence_claims lists it */
	const char *other_job;		/* the job whose claim row holds the token,
								 * when another than the one named */
} FenceTokenCheck;

/*
 * A value the counter has reached, for this catalog generation: a token at
 * or below it was issued.  Read again only for a token above it, so most
 * checks read no sequence.
 */
static int64 issued_floor = 0;
static uint64 issued_floor_generation = 0;

pg_noreturn static void report_not_current(FenceCatalog *cat, int64 token,
										   const char *job);
pg_noreturn static void report_token(int64 token, const char *job,
									 FenceTokenCheck *check);


/* fence.notify_superseded */
bool		fence_notify_superseded = false;

static void claims_notify_superseded(const char *job, int64 superseded,
									 int64 new_token);

/* The first claim of a job, prepared once per backend. */
static SPIPlanPtr claim_new_plan = NULL;
static uint64 claim_new_plan_generation = 0;

/* The changes fence makes to an existing claim row. */
typedef enum ClaimChange
{
	CLAIM_TAKE_OVER,			/* a new claim replaces an ended one */
	CLAIM_RENEW,				/* the lease moves */
	CLAIM_RELEASE,				/* the claim ends */
	CLAIM_RENEW_ANY,			/* a supervisor moves the current lease */
	CLAIM_RELEASE_ANY,			/* a supervisor ends the current claim */
	CLAIM_PRUNE					/* fence_prune deletes a finished claim */
} ClaimChange;

/*
 * Find the claim row by job or by token through its index, with the latest
 * snapshot, and store it in slot.  No SPI: this is the guard's path, once
 * per transaction.
 */
static bool
claims_lookup(FenceCatalog *cat, Relation rel, bool by_token, Datum key,
			  TupleTableSlot *slot)
{
	return fence_index_fetch(rel,
							 by_token ? cat->claims_token_index : cat->claims_job_index,
							 by_token ? F_INT8EQ : F_TEXTEQ, key, slot);
}

/* Does the slot hold the claim row of this job? */
static bool
claims_slot_is_job(FenceCatalog *cat, TupleTableSlot *slot, const char *job)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, cat->att_job, &isnull);

	return !isnull && strcmp(TextDatumGetCString(d), job) == 0;
}

/* Read one claim row, by job or by token, into *row. */
static bool
claims_fetch(FenceCatalog *cat, bool by_token, Datum key, ClaimRow *row)
{
	Relation	rel = fence_open_claims(cat, AccessShareLock);
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
		row->claimed_by = NULL;
		if (cat->att_claimed_by != InvalidAttrNumber)
		{
			Datum		d = slot_getattr(slot, cat->att_claimed_by, &isnull);

			if (!isnull)
				row->claimed_by = TextDatumGetCString(d);
		}
		row->tid = slot->tts_tid;
	}

	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, AccessShareLock);
	return found;
}


/*
 * Is this token current?  The answer the guard, fence_begin and fence_once
 * get before a write, from this registry, under the token's lock (token.c).
 */
/*
 * Did this counter issue the token?  A registry row can name a token the
 * counter never reached: one written by hand, or replicated from another
 * database's fence_claims.  Such a token is forged here, whatever the row
 * says.
 */
static bool
token_was_issued(FenceCatalog *cat, int64 token)
{
	if (issued_floor_generation != cat->generation)
	{
		issued_floor = 0;
		issued_floor_generation = cat->generation;
	}
	if (token <= issued_floor)
		return true;
	issued_floor = fence_last_token_issued(cat);
	return token <= issued_floor;
}

/*
 * Ask the registry about a token.  If expected_job is given, the token
 * is current only if it is that job's claim, and the job's row is reported
 * for the error message.  The caller must already hold the token's lock, or
 * the answer may be stale by the time it acts on it.
 */
static void
check_token(FenceCatalog *cat, int64 token, const char *expected_job,
			FenceTokenCheck *result)
{
	ClaimRow	row;
	const char *token_row_job = NULL;

	memset(result, 0, sizeof(*result));

	if (claims_fetch(cat, true, Int64GetDatum(token), &row))
	{
		if (!row.released &&
			(expected_job == NULL || strcmp(row.job, expected_job) == 0))
		{
			if (token_was_issued(cat, token))
			{
				result->state = FENCE_TOKEN_CURRENT;
				result->job = row.job;
				return;
			}
			result->state = FENCE_TOKEN_NEVER_ISSUED;
			result->listed_job = row.job;
			result->last_issued = issued_floor;
			return;
		}
		if (row.released)
			result->released_job = row.job;
		if (expected_job != NULL && strcmp(row.job, expected_job) != 0)
			result->other_job = row.job;
		token_row_job = row.job;
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
	/* a released (or another job's) claim row still lists the token */
	if (result->state == FENCE_TOKEN_NEVER_ISSUED)
		result->listed_job = token_row_job;
}

/*
 * Raise the caller's-bug error for a token that is not its job's current
 * claim, if it is one (class 5G, outside 5F: such a caller was not fenced,
 * and must fail loudly rather than drop its job as fenced):
 *
 * 5G002: the counter never issued the token, and no claim row lists it.
 *
 * 5G001: the token was issued for another job than the one named.  Known
 * when the token's claim row names another job, or when the named job's own
 * row holds a lower token: a job's tokens only rise, and its row holds the
 * latest, so an issued token above it was some other job's.  A token whose
 * row is gone and that is below the job's (superseded, or pruned) proves
 * nothing, and reads as superseded.
 */
static void
report_if_caller_bug(int64 token, const char *job, FenceTokenCheck *check)
{
	if (check->state == FENCE_TOKEN_NEVER_ISSUED && check->listed_job == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_NEVER_ISSUED),
				 job ?
				 errmsg("fencing token " INT64_FORMAT " passed for job \"%s\" was never issued",
						token, job) :
				 errmsg("fencing token " INT64_FORMAT " was never issued", token),
				 errdetail("The last token this database issued is " INT64_FORMAT ".",
						   check->last_issued),
				 errhint("Pass the value fence_claim() returned, unchanged: this is a bug in the caller, not a fenced write.  (After a restore to an earlier point, or a re-created extension, tokens issued since are unknown here: claim the job again.)")));
	if (job == NULL || check->state != FENCE_TOKEN_SUPERSEDED)
		return;
	if (check->other_job != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_WRONG_JOB),
				 errmsg("fencing token " INT64_FORMAT " was issued for job \"%s\", not \"%s\"",
						token, check->other_job, job),
				 check->job_found ?
				 errdetail("Job \"%s\" is held by token " INT64_FORMAT ".",
						   job, check->job_token) :
				 errdetail("Job \"%s\" has no claim.", job),
				 errhint("Is the job name the one used at claim time?  This is a bug in the caller, not a fenced write.")));
	if (check->job_found && check->job_token < token)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_WRONG_JOB),
				 errmsg("fencing token " INT64_FORMAT " was not issued for job \"%s\"",
						token, job),
				 errdetail("The latest claim of job \"%s\" has token " INT64_FORMAT "; a job's tokens only rise, so token " INT64_FORMAT " was never this job's.",
						   job, check->job_token, token),
				 errhint("Is the job name the one used at claim time?  This is a bug in the caller, not a fenced write.")));
}

/*
 * Raise the error for a token that is not its job's current claim: the
 * caller's bugs first (report_if_caller_bug), then a claim row that lists a
 * token the counter never issued (5F004: forged, or replicated from another
 * database), then superseded (5F001).
 *
 * The primary message names the job whenever fence knows it (job queues
 * often keep only the message of a failed job), in one wording per
 * condition; the detail says what the registry holds instead.
 */
static void
report_token(int64 token, const char *job, FenceTokenCheck *check)
{
	const char *known_job = job ? job : check->released_job;

	report_if_caller_bug(token, job, check);
	if (check->state == FENCE_TOKEN_NEVER_ISSUED)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
				 errmsg("invalid fencing token " INT64_FORMAT " of job \"%s\"",
						token, check->listed_job),
				 errdetail("fence_claims lists it as the claim of job \"%s\", but this database's counter never issued it: the last token issued is " INT64_FORMAT ".",
						   check->listed_job, check->last_issued),
				 errhint("A claim row written by hand, or replicated from another database, is not a claim here; see \"Logical replication\" in doc/fence.md.")));

	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_SUPERSEDED)),
			 known_job ?
			 errmsg("fencing token " INT64_FORMAT " of job \"%s\" has been superseded",
					token, known_job) :
			 errmsg("fencing token " INT64_FORMAT " has been superseded", token),
			 job == NULL && check->released_job != NULL ?
			 errdetail("The claim of job \"%s\" by token " INT64_FORMAT " was released.",
					   check->released_job, token) :
			 job == NULL ?
			 errdetail("No claim holds token " INT64_FORMAT ": a newer claim of its job replaced it, its claim was deleted, or the transaction that claimed it did not commit.",
					   token) :
			 !check->job_found ?
			 errdetail("Job \"%s\" has no claim.", job) :
			 check->job_released ?
			 errdetail("The claim of job \"%s\" by token " INT64_FORMAT " was released.",
					   job, check->job_token) :
			 errdetail("Job \"%s\" is now held by token " INT64_FORMAT ".",
					   job, check->job_token),
			 errhint(FENCE_STOP_HINT)));
	pg_unreachable();
}

/*
 * The rule for who may act on a claim: the role that made it (maker) and
 * its members, superusers, and the supervisors of that kind of act (roles
 * granted EXECUTE on any_fn, fence_renew_any or fence_release_any).  A
 * claim made before 1.1 (no maker) is anyone's, as it was.
 */
static bool
claims_caller_may(const char *maker, Oid caller, Oid any_fn)
{
	Oid			maker_oid;

	if (maker == NULL || superuser_arg(caller))
		return true;
	maker_oid = get_role_oid(maker, true);
	if (OidIsValid(maker_oid) && is_member_of_role(caller, maker_oid))
		return true;
	return OidIsValid(any_fn) &&
		object_aclcheck_proc_compat(any_fn, caller, ACL_EXECUTE) == ACLCHECK_OK;
}

/*
 * May the caller hold this token's lock for the rest of its transaction
 * (fence_begin, a write that carries the token, fence_once)?  Holding it
 * keeps every takeover of the job waiting, so it takes what renewing the
 * claim takes (claims_caller_may, with fence_renew_any for the
 * supervisors).  Decided before the lock is taken, so that a refused
 * caller holds nothing, on the claim row the token's index finds: its
 * maker never changes, and a token whose row is gone, released, never
 * written or another job's than the one named is not current, which the
 * check under the lock then reports (and the error ends the lock).
 */
static void
claims_check_holder(FenceCatalog *cat, int64 token, const char *job)
{
	ClaimRow	row;
	Oid			caller;

	if (cat->att_claimed_by == InvalidAttrNumber ||
		!claims_fetch(cat, true, Int64GetDatum(token), &row) ||
		row.released || row.claimed_by == NULL ||
		(job != NULL && strcmp(row.job, job) != 0))
		return;
	caller = GetUserId();
	if (claims_caller_may(row.claimed_by, caller, cat->renew_any_fn))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to hold fencing token " INT64_FORMAT " of job \"%s\"",
					token, row.job),
			 errdetail("The claim was made by role \"%s\"; role \"%s\" is not a member of it.",
					   row.claimed_by, GetUserNameFromId(caller, false)),
			 errhint("Holding a token (fence_begin, a write that carries it, fence_once) keeps takeovers of its job waiting. Members of the claiming role may, and so may superusers and roles granted EXECUTE on fence_renew_any(text, interval).")));
}

/*
 * Make sure the token is current, and the current claim of job if one is
 * given, and that it stays so until the transaction ends: take its lock,
 * ask the registry, raise the error if it is not, and remember it so the
 * guard's later rows need not ask again.  Returns the token's job, in
 * TopTransactionContext.
 */
const char *
fence_hold_token(FenceCatalog *cat, int64 token, const char *job)
{
	FenceTokenCheck check;
	const char *held_job;

	claims_check_holder(cat, token, job);
	token_lock_against_takeover(token);
	check_token(cat, token, job, &check);
	if (check.state != FENCE_TOKEN_CURRENT)
		report_token(token, job, &check);
	fence_xact_remember_token(token, cat->generation, check.job);
	(void) fence_xact_token_validated(token, cat->generation, &held_job);
	return held_job;
}

/*
 * Report, as fence_hold_token would, a token that the caller found is not
 * the current claim of job (fence_renew, whose UPDATE matched nothing).
 */
static void
report_not_current(FenceCatalog *cat, int64 token, const char *job)
{
	FenceTokenCheck check;

	check_token(cat, token, job, &check);
	report_token(token, job, &check);
}


/* The registry functions' arguments, and the time they decide by. */
typedef struct ClaimsParams
{
	const char *job;
	Interval   *lease;			/* or NULL */
	text	   *holder;			/* or NULL */
	int64		token;			/* the claim's current token */
	int64		new_token;		/* the token a new claim gets */
	TimestampTz now;
	Oid			caller;			/* the calling role */
	const char *caller_name;	/* ... its name, recorded as claimed_by */
	ItemPointerData seen;		/* where a read of the row found it, or invalid */
	bool		took_live;		/* out: a takeover found the claim unreleased */
} ClaimsParams;

#define N_CLAIM_NEW_PARAMS 6

/* Start the arguments of a call: nothing yet, and who is calling. */
static void
claims_params_init(ClaimsParams *p)
{
	memset(p, 0, sizeof(*p));
	ItemPointerSetInvalid(&p->seen);
	p->caller = GetUserId();
	p->caller_name = GetUserNameFromId(p->caller, false);
}

/*
 * The first claim's statement.  It is rebuilt when the catalog is (a new
 * extension schema means new query text), and when the plan cache says it
 * can no longer be used, as ri_FetchPreparedPlan does.
 */
static SPIPlanPtr
claims_new_plan(FenceCatalog *cat)
{
	/* $1 job, $2 lease, $3 holder, $4 new token, $5 now, $6 claimed_by */
	static Oid	argtypes[N_CLAIM_NEW_PARAMS] = {TEXTOID, INTERVALOID, TEXTOID,
	INT8OID, TIMESTAMPTZOID, TEXTOID};
	char	   *sql;
	SPIPlanPtr	plan;

	if (claim_new_plan_generation != cat->generation && claim_new_plan)
	{
		SPI_freeplan(claim_new_plan);
		claim_new_plan = NULL;
	}
	claim_new_plan_generation = cat->generation;
	if (claim_new_plan && SPI_plan_is_valid(claim_new_plan))
		return claim_new_plan;

	/* Under 1.0's SQL objects (before ALTER EXTENSION) there is no claimed_by. */
	sql = psprintf("INSERT INTO %s (job, token, holder, claimed_at, lease_expires_at%s)"
				   " VALUES ($1, $4, $3, $5, $5 OPERATOR(pg_catalog.+) $2%s)"
				   " ON CONFLICT (job) DO NOTHING RETURNING token",
				   quote_qualified_identifier(cat->nspname, "fence_claims"),
				   cat->att_claimed_by != InvalidAttrNumber ? ", claimed_by" : "",
				   cat->att_claimed_by != InvalidAttrNumber ? ", $6" : "");
	plan = SPI_prepare(sql, N_CLAIM_NEW_PARAMS, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	if (claim_new_plan)
		SPI_freeplan(claim_new_plan);
	claim_new_plan = plan;
	pfree(sql);
	return plan;
}

/*
 * The job's first claim: INSERT ... ON CONFLICT DO NOTHING, with the
 * latest snapshot and no crosscheck snapshot.  Returns whether it inserted.
 * fire_triggers: a DBA's AFTER trigger on fence_claims fires at the end of
 * the statement (ri_triggers.c passes false because it runs inside a
 * trigger already; a plain SELECT fence_claim() has no after-trigger level
 * to queue to).
 */
static bool
claims_insert(FenceCatalog *cat, const ClaimsParams *p)
{
	Datum		values[N_CLAIM_NEW_PARAMS];
	char		nulls[N_CLAIM_NEW_PARAMS] = {' ', ' ', ' ', ' ', ' ', ' '};
	FenceSavedUser saved;
	int			ret;
	bool		inserted;

	values[0] = CStringGetTextDatum(p->job);
	values[1] = IntervalPGetDatum(p->lease);
	values[2] = p->holder ? PointerGetDatum(p->holder) : (Datum) 0;
	nulls[2] = p->holder ? ' ' : 'n';
	values[3] = Int64GetDatum(p->new_token);
	values[4] = TimestampTzGetDatum(p->now);
	values[5] = CStringGetTextDatum(p->caller_name);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_become_owner(cat->claims_owner, &saved);
	ret = SPI_execute_snapshot(claims_new_plan(cat), values, nulls,
							   GetLatestSnapshot(), InvalidSnapshot,
							   false, true, 0);
	fence_restore_user(&saved);
	if (ret != SPI_OK_INSERT_RETURNING || SPI_processed > 1)
		elog(ERROR, "fence's first-claim statement returned %s, " UINT64_FORMAT " rows",
			 SPI_result_code_string(ret), SPI_processed);
	inserted = (SPI_processed == 1);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return inserted;
}

/* Do the row's values allow the change?  See ClaimChange. */
static bool
claims_row_allows(FenceCatalog *cat, ClaimChange change, const ClaimsParams *p,
				  TupleTableSlot *slot)
{
	bool		isnull;
	int64		token = DatumGetInt64(slot_getattr(slot, cat->att_token, &isnull));
	bool		released = DatumGetBool(slot_getattr(slot, cat->att_released, &isnull));
	TimestampTz expires = DatumGetTimestampTz(slot_getattr(slot, cat->att_lease_expires_at,
														   &isnull));

	/*
	 * (The *_ANY changes set p->token to the token they read and locked; a
	 * prune, to the token it read, and p->now to its cutoff.)
	 */
	if (token != p->token)
		return false;
	if (change == CLAIM_TAKE_OVER || change == CLAIM_PRUNE)
		return released || expires < p->now;
	return !released;
}

/*
 * May the caller renew or release this claim?  claims_caller_may's rule,
 * with fence_renew_any or fence_release_any for the supervisors.
 */
static void
claims_check_caller(FenceCatalog *cat, ClaimChange change, const ClaimsParams *p,
					TupleTableSlot *slot)
{
	bool		renew = (change == CLAIM_RENEW);
	bool		isnull;
	Datum		datum;
	char	   *maker;

	if ((change != CLAIM_RENEW && change != CLAIM_RELEASE) ||
		cat->att_claimed_by == InvalidAttrNumber)
		return;
	datum = slot_getattr(slot, cat->att_claimed_by, &isnull);
	if (isnull)
		return;
	maker = TextDatumGetCString(datum);
	if (claims_caller_may(maker, p->caller,
						  renew ? cat->renew_any_fn : cat->release_any_fn))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s the claim of job \"%s\"",
					renew ? "renew" : "release", p->job),
			 errdetail("The claim was made by role \"%s\".", maker),
			 errhint("Members of that role may, and so may superusers and roles granted EXECUTE on %s.",
					 renew ? "fence_renew_any(text, interval)" : "fence_release_any(text)")));
}

/*
 * Find the job's claim row with the latest snapshot and, if that version
 * allows the change (and the caller may make it), lock it, as
 * RelationFindReplTupleByIndex does: if someone is changing it, wait, and
 * if they changed or deleted it, look again, and decide again on what they
 * committed.  A version that refuses the change is not locked: see the
 * header comment.  The conditions are checked once more on the locked
 * version, which is the one the change is made to.
 *
 * Without lock, only the first part: slot gets the latest version, if it
 * allows the change, and nothing is locked (claims_update then replaces it
 * with a write that fails if someone changed it meanwhile).
 *
 * Returns whether slot holds the locked version, which allows the change;
 * false if the job has no row or the change is refused.  *locked says
 * whether a version was locked.  It is true with a false result only if the
 * check on the locked version refuses, which heap never does: a version it
 * locks with TM_Ok is the very one that was checked.
 */
static bool
claims_lock_row(FenceCatalog *cat, Relation rel, ClaimChange change,
				const ClaimsParams *p, bool lock, TupleTableSlot *slot,
				bool *locked)
{
	ItemPointerData seen = p->seen;

	*locked = false;
	for (;;)
	{
		TM_FailureData tmfd;
		TM_Result	res;

		/*
		 * The first time round, the version the caller read may still be the
		 * latest: fetch it where it lies, without the index.  If it is not
		 * (or the slot now holds another row, or a lock finds it changed),
		 * look the job up again.
		 */
		if (!(ItemPointerIsValid(&seen) &&
			  table_tuple_fetch_row_version(rel, &seen, GetLatestSnapshot(), slot) &&
			  claims_slot_is_job(cat, slot, p->job)) &&
			!claims_lookup(cat, rel, false, CStringGetTextDatum(p->job), slot))
			return false;
		ItemPointerSetInvalid(&seen);
		if (!claims_row_allows(cat, change, p, slot))
			return false;
		claims_check_caller(cat, change, p, slot);
		if (!lock)
			return true;

		res = table_tuple_lock(rel, &slot->tts_tid, GetLatestSnapshot(), slot,
							   GetCurrentCommandId(false), LockTupleExclusive,
							   LockWaitBlock, 0, &tmfd);
		switch (res)
		{
			case TM_Ok:
				*locked = true;
				if (!claims_row_allows(cat, change, p, slot))
					return false;
				claims_check_caller(cat, change, p, slot);
				return true;
			case TM_Updated:
			case TM_Deleted:
				continue;		/* changed meanwhile: read the new version */
			case TM_Invisible:
				elog(ERROR, "attempted to lock invisible tuple");
				break;
			default:
				elog(ERROR, "unexpected table_tuple_lock status: %u", res);
				break;
		}
	}
}

/* Set one column of a virtual slot being built. */
static void
claims_set(TupleTableSlot *slot, Bitmapset **updated, AttrNumber attnum,
		   Datum value, bool isnull)
{
	slot->tts_values[attnum - 1] = value;
	slot->tts_isnull[attnum - 1] = isnull;
	*updated = bms_add_member(*updated, attnum - FirstLowInvalidHeapAttributeNumber);
}

/*
 * Add one to a counter column of the claim row (n_claims, n_takeovers,
 * n_renewals, n_releases: fence_stats sums them).  Under 1.0's SQL objects
 * there are none.
 */
static void
claims_count(TupleTableSlot *slot, Bitmapset **updated, AttrNumber attnum)
{
	int64		n;

	if (attnum == InvalidAttrNumber)
		return;
	n = slot->tts_isnull[attnum - 1] ? 0 : DatumGetInt64(slot->tts_values[attnum - 1]);
	claims_set(slot, updated, attnum, Int64GetDatum(n + 1), false);
}

/*
 * An executor state for one change to fence_claims, as logical
 * replication's apply builds one: the relation as the only range table
 * entry (with the columns an UPDATE sets, for UPDATE OF triggers and
 * tg_updatedcols), its indexes open, and an after-trigger level so that a
 * DBA's AFTER triggers and foreign keys fire when the change is done.
 */
typedef struct ClaimsExec
{
	Relation	rel;			/* fence_claims, open as its owner */
	FenceSavedUser saved;		/* the caller, restored by claims_exec_close */
	EState	   *estate;
	ResultRelInfo *rri;
	EPQState	epqstate;
} ClaimsExec;

/* Become fence_claims' owner, open it, and make an executor state. */
static void
claims_exec_open(FenceCatalog *cat, ClaimsExec *x)
{
	memset(x, 0, sizeof(*x));
	fence_become_owner(cat->claims_owner, &x->saved);
	x->rel = fence_open_claims(cat, RowExclusiveLock);
	x->estate = CreateExecutorState();
}

/*
 * Undo claims_exec_open; make a change visible to the rest of the
 * transaction.  A call that locked no row gives back the lock on
 * fence_claims it took, as claims_fetch does: it wrote nothing, and a
 * transaction left open must not keep a DBA's CREATE INDEX or ALTER TABLE
 * waiting for it (a lock the transaction held already stays).
 */
static void
claims_exec_close(ClaimsExec *x, bool changed, bool locked)
{
	ExecResetTupleTable(x->estate->es_tupleTable, false);
	FreeExecutorState(x->estate);
	table_close(x->rel, locked ? NoLock : RowExclusiveLock);
	fence_restore_user(&x->saved);
	if (changed)
		CommandCounterIncrement();
}

/*
 * fence_claims' CHECK constraints, parsed and planned once per catalog
 * generation.  ExecRelCheck builds them lazily from their stored text for
 * each ResultRelInfo, and every claim has a fresh one: that parse was 5% of
 * a claim's time (doc/benchmarks.md, claims at queue scale).  What is
 * handed to the executor is exactly what ExecRelCheck would build,
 * ExecInitExpr of the planned expression, and only if the relation's
 * constraints are still the ones planned (same number, same names, in
 * order); otherwise the executor builds them itself.
 */
static MemoryContext claims_checks_cxt = NULL;
static List *claims_checks = NIL;	/* planned Expr for each check[i] */
static List *claims_check_names = NIL;
static uint64 claims_checks_generation = 0;

static void
claims_prepare_checks(FenceCatalog *cat, ResultRelInfo *rri, EState *estate)
{
	TupleConstr *constr = RelationGetDescr(rri->ri_RelationDesc)->constr;
	MemoryContext oldcxt;
	int			i;

	if (constr == NULL || constr->num_check == 0)
		return;
	if (claims_checks_cxt == NULL)
		claims_checks_cxt = AllocSetContextCreate(CacheMemoryContext,
												  "fence claims checks",
												  ALLOCSET_SMALL_SIZES);
	if (claims_checks_generation != cat->generation ||
		list_length(claims_checks) != constr->num_check)
	{
		MemoryContextReset(claims_checks_cxt);
		claims_checks = NIL;
		claims_check_names = NIL;
		claims_checks_generation = 0;
		oldcxt = MemoryContextSwitchTo(claims_checks_cxt);
		for (i = 0; i < constr->num_check; i++)
		{
			claims_checks = lappend(claims_checks,
									expression_planner(stringToNode(constr->check[i].ccbin)));
			claims_check_names = lappend(claims_check_names,
										 pstrdup(constr->check[i].ccname));
		}
		MemoryContextSwitchTo(oldcxt);
		claims_checks_generation = cat->generation;
	}
	for (i = 0; i < constr->num_check; i++)
		if (strcmp(constr->check[i].ccname, (char *) list_nth(claims_check_names, i)) != 0)
			return;

	oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);
	rri->ri_CheckConstraintExprs = palloc(sizeof(ExprState *) * constr->num_check);
	for (i = 0; i < constr->num_check; i++)
		rri->ri_CheckConstraintExprs[i] = ExecInitExpr((Expr *) list_nth(claims_checks, i), NULL);
	MemoryContextSwitchTo(oldcxt);
}

static void
claims_exec_begin(FenceCatalog *cat, ClaimsExec *x, Bitmapset *updated)
{
	Relation	rel = x->rel;
	EState	   *estate = x->estate;
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	ExecInitRangeTable_single_compat(estate, rte, updated);
	x->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(x->rri, rel, 1, NULL, 0);
	claims_prepare_checks(cat, x->rri, estate);
	estate->es_output_cid = GetCurrentCommandId(true);
	ExecOpenIndices(x->rri, false);
	EvalPlanQualInit_compat(&x->epqstate, estate, NULL, NIL, -1, NIL);
	AfterTriggerBeginQuery();
}

static void
claims_exec_end(ClaimsExec *x)
{
	AfterTriggerEndQuery(x->estate);
	EvalPlanQualEnd(&x->epqstate);
	ExecCloseIndices(x->rri);
	/* AFTER triggers may have opened the relation again: close that. */
	ExecCloseResultRelations(x->estate);
	ExecCloseRangeTableRelations(x->estate);
}

/*
 * A standby cannot change fence_claims: say so, rather than let the
 * executor fail on the transaction id it cannot assign.
 */
void
claims_refuse_on_standby(const char *what)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("fence cannot %s on a standby", what),
				 errhint("Claims are made, renewed and released on the primary.")));
}

/*
 * Replace the claim row version in oldslot by newslot, as
 * ExecSimpleRelationUpdate does (the replica identity check, stored
 * generated columns, constraints, the new version, its index entries, the
 * AFTER ROW triggers), but without locking the row first and without an
 * error if someone changed it since it was read: the result is TM_Updated
 * or TM_Deleted then, nothing was written, and claims_update reads the row
 * again.  table_tuple_update waits for a writer still in progress, as
 * table_tuple_lock did.  Not locking first saves the heap LOCK record, 54
 * of a takeover's 391 WAL bytes (doc/benchmarks.md).  Only for a relation
 * with no BEFORE ROW UPDATE trigger: those need the locked version
 * (GetTupleForTrigger), and take the locking path.
 */
static TM_Result
claims_write_row(ClaimsExec *x, TupleTableSlot *oldslot, TupleTableSlot *newslot)
{
	Relation	rel = x->rel;
	ResultRelInfo *rri = x->rri;
	EState	   *estate = x->estate;
	TM_FailureData tmfd;
	TM_Result	res;
	bool		update_indexes;
	bool		only_summarizing;
	List	   *recheck = NIL;

	CheckCmdReplicaIdentity(rel, CMD_UPDATE);
	if (rel->rd_att->constr && rel->rd_att->constr->has_generated_stored)
		ExecComputeStoredGenerated(rri, estate, newslot, CMD_UPDATE);
	if (rel->rd_att->constr)
		ExecConstraints(rri, newslot, estate);
	if (rel->rd_rel->relispartition)
		ExecPartitionCheck(rri, newslot, estate, true);

	res = table_tuple_update_compat(rel, &oldslot->tts_tid, newslot,
									estate->es_output_cid, estate->es_snapshot,
									&tmfd, &update_indexes, &only_summarizing);
	switch (res)
	{
		case TM_Ok:
			break;
		case TM_Updated:
		case TM_Deleted:
			return res;			/* changed meanwhile: read the new version */
		case TM_SelfModified:
			elog(ERROR, "claim row already modified by this command");
			break;
		default:
			elog(ERROR, "unexpected table_tuple_update status: %u", res);
			break;
	}
	if (rri->ri_NumIndices > 0 && update_indexes)
		recheck = ExecInsertIndexTuples_update_compat(rri, newslot, estate,
													  only_summarizing);
	ExecARUpdateTriggers(estate, rri, NULL, NULL, &oldslot->tts_tid, NULL,
						 newslot, recheck, NULL, false);
	list_free(recheck);
	return TM_Ok;
}

/* What one attempt of claims_update_once did. */
typedef enum ClaimsAttempt
{
	CLAIMS_REFUSED,				/* no row, or the row refuses the change */
	CLAIMS_DONE,				/* changed */
	CLAIMS_RETRY				/* the row changed under the write: again */
} ClaimsAttempt;

/*
 * One attempt of claims_update: read the latest version, check it, build
 * the new one and write it.  A takeover writes it unlocked
 * (claims_write_row), and if someone changed the row meanwhile, the attempt
 * writes nothing, gives back what it took, and is made again on what they
 * committed.  Only a foreign write can meet it there: the takeover holds
 * the job's lock and the old token's lock in takeover mode, which every
 * other change of the row takes too.  Every other change locks the version
 * first and updates it with ExecSimpleRelationUpdate, as does a takeover
 * under a DBA's BEFORE ROW UPDATE trigger on fence_claims: heap_update takes
 * a transaction id before it learns of a concurrent change, and a renewal
 * or release refused after waiting must leave none (renewals and releases
 * are HOT updates, and their LOCK record is not what a claim costs); a
 * takeover has one already, from its token.
 */
static ClaimsAttempt
claims_update_once(FenceCatalog *cat, ClaimChange change, ClaimsParams *p,
				   int64 *result)
{
	Relation	rel;
	ClaimsExec	x;
	TupleTableSlot *oldslot;
	TupleTableSlot *newslot;
	Bitmapset  *updated = NULL;
	bool		lock_first;
	bool		locked;
	ClaimsAttempt attempt = CLAIMS_REFUSED;

	claims_exec_open(cat, &x);
	rel = x.rel;
	lock_first = (change != CLAIM_TAKE_OVER ||
				  (rel->trigdesc != NULL && rel->trigdesc->trig_update_before_row));
	oldslot = table_slot_create(rel, &x.estate->es_tupleTable);
	newslot = table_slot_create(rel, &x.estate->es_tupleTable);

	if (claims_lock_row(cat, rel, change, p, lock_first, oldslot, &locked))
	{
		slot_getallattrs(oldslot);
		ExecClearTuple(newslot);
		memcpy(newslot->tts_values, oldslot->tts_values,
			   sizeof(Datum) * RelationGetDescr(rel)->natts);
		memcpy(newslot->tts_isnull, oldslot->tts_isnull,
			   sizeof(bool) * RelationGetDescr(rel)->natts);
		switch (change)
		{
			case CLAIM_TAKE_OVER:
				/* A claim after a release is a claim; over a live holder's, a takeover. */
				claims_count(newslot, &updated, cat->att_n_claims);
				p->took_live = !DatumGetBool(newslot->tts_values[cat->att_released - 1]);
				if (p->took_live)
					claims_count(newslot, &updated, cat->att_n_takeovers);
				claims_set(newslot, &updated, cat->att_token,
						   Int64GetDatum(p->new_token), false);
				claims_set(newslot, &updated, cat->att_holder,
						   PointerGetDatum(p->holder), p->holder == NULL);
				claims_set(newslot, &updated, cat->att_claimed_at,
						   TimestampTzGetDatum(p->now), false);
				claims_set(newslot, &updated, cat->att_released,
						   BoolGetDatum(false), false);
				if (cat->att_claimed_by != InvalidAttrNumber)
					claims_set(newslot, &updated, cat->att_claimed_by,
							   CStringGetTextDatum(p->caller_name), false);
				pg_fallthrough;
			case CLAIM_RENEW:
			case CLAIM_RENEW_ANY:
				if (change != CLAIM_TAKE_OVER)
					claims_count(newslot, &updated, cat->att_n_renewals);
				claims_set(newslot, &updated, cat->att_lease_expires_at,
						   DirectFunctionCall2(timestamptz_pl_interval,
											   TimestampTzGetDatum(p->now),
											   IntervalPGetDatum(p->lease)),
						   false);
				break;
			case CLAIM_RELEASE:
			case CLAIM_RELEASE_ANY:
				claims_set(newslot, &updated, cat->att_released,
						   BoolGetDatum(true), false);
				claims_count(newslot, &updated, cat->att_n_releases);
				break;
			case CLAIM_PRUNE:
				elog(ERROR, "claims_update cannot prune");
				break;
		}
		ExecStoreVirtualTuple(newslot);

		claims_exec_begin(cat, &x, updated);
		if (lock_first)
		{
			ExecSimpleRelationUpdate(x.rri, x.estate, &x.epqstate, oldslot, newslot);
			attempt = CLAIMS_DONE;
		}
		else
			attempt = (claims_write_row(&x, oldslot, newslot) == TM_Ok) ?
				CLAIMS_DONE : CLAIMS_RETRY;
		claims_exec_end(&x);
		if (attempt == CLAIMS_DONE)
			*result = (change == CLAIM_RENEW || change == CLAIM_RENEW_ANY) ?
				DatumGetInt64(newslot->tts_values[cat->att_lease_expires_at - 1]) :
				p->new_token;
	}

	claims_exec_close(&x, attempt == CLAIMS_DONE,
					  locked || attempt == CLAIMS_DONE);
	return attempt;
}

/*
 * Change the job's claim row if it allows the change, checked again on the
 * version the change replaces; a row that refuses it is left unlocked
 * (claims_lock_row).  Returns whether it did; *result gets the new token
 * (take-over, release) or the new expiry (renew).
 */
static bool
claims_update(FenceCatalog *cat, ClaimChange change, ClaimsParams *p,
			  int64 *result)
{
	ClaimsAttempt attempt;

	claims_refuse_on_standby(change == CLAIM_RENEW || change == CLAIM_RENEW_ANY ?
							 "renew a claim" :
							 change == CLAIM_TAKE_OVER ? "take over a claim" :
							 "release a claim");
	while ((attempt = claims_update_once(cat, change, p, result)) == CLAIMS_RETRY)
	{
		/* The version read is gone: look the job up again. */
		ItemPointerSetInvalid(&p->seen);
		CHECK_FOR_INTERRUPTS();
	}
	return attempt == CLAIMS_DONE;
}

/*
 * Delete the job's claim row for fence_prune, if it holds this token and
 * is released or expired before cutoff, and still does once locked; a row
 * that no longer does (claimed again, or renewed, since fence_prune read
 * it) is left unlocked.  The caller holds the job's lock and the token's
 * lock in takeover mode.  counts[] gets the row's n_claims, n_takeovers,
 * n_renewals, n_releases (zeros where the columns do not exist).  Returns
 * whether it deleted.
 */
bool
claims_prune_row(FenceCatalog *cat, const char *job, int64 token,
				 TimestampTz cutoff, int64 counts[4])
{
	ClaimsExec	x;
	ClaimsParams p;
	TupleTableSlot *slot;
	bool		locked;
	bool		done = false;
	bool		live;
	bool		released_null;

	memset(&p, 0, sizeof(p));
	p.job = job;
	p.token = token;
	p.now = cutoff;
	claims_exec_open(cat, &x);
	slot = table_slot_create(x.rel, &x.estate->es_tupleTable);

	if (claims_lock_row(cat, x.rel, CLAIM_PRUNE, &p, true, slot, &locked))
	{
		AttrNumber	counters[4] = {cat->att_n_claims, cat->att_n_takeovers,
		cat->att_n_renewals, cat->att_n_releases};
		int			i;

		for (i = 0; i < 4; i++)
		{
			Datum		d = (Datum) 0;
			bool		isnull = true;

			if (counters[i] != InvalidAttrNumber)
				d = slot_getattr(slot, counters[i], &isnull);
			counts[i] = isnull ? 0 : DatumGetInt64(d);
		}
		live = !DatumGetBool(slot_getattr(slot, cat->att_released, &released_null));
		claims_exec_begin(cat, &x, NULL);
		ExecSimpleRelationDelete(x.rri, x.estate, &x.epqstate, slot);
		claims_exec_end(&x);
		done = true;

		/* An expired claim never released: its holder may still run. */
		if (live)
			claims_notify_superseded(job, token, 0);
	}

	claims_exec_close(&x, done, locked);
	return done;
}

/*
 * Take the next token from the counter.
 *
 * The client must never see a token that a crash could hand out again,
 * whether or not the claim's transaction commits, and whatever
 * synchronous_commit says.  nextval() WAL-logs a value some way ahead of
 * what it returns (every 32 values, and on the first call after a
 * checkpoint) and stamps the sequence page with that record; token.c's
 * crash gap decides whether that record must be flushed before the token
 * leaves (token_make_durable).
 *
 * Tokens are ordered across histories too (token.c): before the first token
 * after a restart, a promotion, a restore or an upgrade the counter moves
 * past what any earlier or other history can have issued
 * (token_begin_history), and no token leaves ahead of the clock's floor
 * (token_wait_for_clock).
 */
int64
claims_issue_token(FenceCatalog *cat, const char *job)
{
	int64		token;
	Relation	seqrel;
	Buffer		buf;
	XLogRecPtr	lsn;

	token_begin_history(cat);
	token = nextval_internal(cat->token_seq_relid, false);

	seqrel = relation_open(cat->token_seq_relid, NoLock);	/* nextval locked it */
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);

	token_make_durable(cat, token, lsn);
	token_wait_for_clock(token);
	fence_xact_note_issued(token, job);
	return token;
}

/*
 * Tell a superseded holder, if fence.notify_superseded is on: NOTIFY
 * fence_superseded with {"job", "superseded_token", "new_token"} (null for
 * a release, or a prune of a claim that was never released).  NOTIFY is transactional, so it is delivered when the change
 * commits, and not at all if it rolls back.  The payload stays under
 * NOTIFY's 8000 bytes: a job name is at most 1024 bytes, and JSON escapes a
 * byte as at most six.
 */
static void
claims_notify_superseded(const char *job, int64 superseded, int64 new_token)
{
	StringInfoData payload;

	if (!fence_notify_superseded)
		return;
	initStringInfo(&payload);
	appendStringInfoString(&payload, "{\"job\": ");
	escape_json(&payload, job);
	appendStringInfo(&payload, ", \"superseded_token\": " INT64_FORMAT
					 ", \"new_token\": ", superseded);
	if (new_token != 0)
		appendStringInfo(&payload, INT64_FORMAT "}", new_token);
	else
		appendStringInfoString(&payload, "null}");
	Async_Notify(FENCE_SUPERSEDED_CHANNEL, payload.data);
	pfree(payload.data);
}

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

	fence_refuse_on_citus_worker("fence_claim");
	claims_params_init(&p);
	p.job = fence_job_arg(fcinfo, 0);
	p.lease = fence_lease_arg(fcinfo, 1);
	p.holder = fence_holder_arg(fcinfo, 2);
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

		/*
		 * If the conditions changed since the read (a DBA's UPDATE extended
		 * the lease, say), the token stays unused, and the old token's lock
		 * goes: its claim is live again, and its holder's renewals and
		 * writes must not wait for this transaction.  The job's lock stays,
		 * as on every claim that answers NULL.
		 */
		p.token = row.token;
		p.seen = row.tid;
		p.new_token = claims_issue_token(cat, p.job);
		if (!claims_update(cat, CLAIM_TAKE_OVER, &p, &claimed_token))
		{
			token_unlock_takeover(row.token);
			PG_RETURN_NULL();
		}

		/* If this transaction wrote with the old token, it may not any more. */
		fence_xact_forget_token(row.token);
		if (p.took_live)
			claims_notify_superseded(p.job, row.token, p.new_token);
		PG_RETURN_INT64(p.new_token);
	}

	/* The job's first claim. */
	p.new_token = claims_issue_token(cat, p.job);
	if (!claims_insert(cat, &p))
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

	fence_refuse_on_citus_worker("fence_renew");
	claims_params_init(&p);
	p.job = fence_job_arg(fcinfo, 0);
	p.token = fence_token_arg(fcinfo, 1);
	p.lease = fence_lease_arg(fcinfo, 2);
	p.now = GetCurrentTimestamp();
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	token_lock_against_takeover(p.token);

	if (!claims_update(cat, CLAIM_RENEW, &p, &expiry))
		report_not_current(cat, p.token, p.job);

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
 *
 * Any token that is not the job's current claim answers false, another
 * job's or a never-issued one too: the answer is a boolean, often read in
 * a cleanup path, and the calls a handler makes before it (fence_begin,
 * fence_renew) raise the caller's-bug errors (5G001, 5G002) for the same
 * mistake.
 */
Datum
fence_release(PG_FUNCTION_ARGS)
{
	ClaimsParams p;
	FenceCatalog *cat;
	int64		released_token;
	bool		released;
	bool		newly_locked;

	fence_refuse_on_citus_worker("fence_release");
	claims_params_init(&p);
	p.job = fence_job_arg(fcinfo, 0);
	p.token = fence_token_arg(fcinfo, 1);
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	/*
	 * Like fence_renew: a claim must not queue behind our row lock.  But a
	 * call whose job and token do not match holds nothing it could need:
	 * the lock it took for this call goes at once, or a stranger's release
	 * of every token, left open, would block every takeover.
	 */
	newly_locked = token_lock_against_takeover(p.token);

	released = claims_update(cat, CLAIM_RELEASE, &p, &released_token);
	if (!released && newly_locked)
		token_unlock(p.token);

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

/*
 * fence_release_any(job) returns boolean
 *
 * A supervisor's release: end the job's current claim, whatever its token.
 * EXECUTE is not granted to PUBLIC.  The current token's lock is taken as
 * fence_release takes it, and given back in the same way if the claim
 * changed before it could be released (taken over, or released by its
 * holder, meanwhile).
 */
Datum
fence_release_any(PG_FUNCTION_ARGS)
{
	ClaimsParams p;
	FenceCatalog *cat;
	ClaimRow	row;
	int64		released_token;
	bool		newly_locked;

	fence_refuse_on_citus_worker("fence_release_any");
	claims_params_init(&p);
	p.job = fence_job_arg(fcinfo, 0);
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	claims_refuse_on_standby("release a claim");
	if (!claims_fetch(cat, false, CStringGetTextDatum(p.job), &row) || row.released)
		PG_RETURN_BOOL(false);
	p.token = row.token;
	newly_locked = token_lock_against_takeover(p.token);
	if (!claims_update(cat, CLAIM_RELEASE_ANY, &p, &released_token))
	{
		if (newly_locked)
			token_unlock(p.token);
		PG_RETURN_BOOL(false);
	}
	fence_xact_forget_token(p.token);
	claims_notify_superseded(p.job, p.token, 0);
	PG_RETURN_BOOL(true);
}

/*
 * fence_renew_any(job, lease) returns timestamptz
 *
 * A supervisor's renewal of the job's current claim, whatever its token.
 */
Datum
fence_renew_any(PG_FUNCTION_ARGS)
{
	ClaimsParams p;
	FenceCatalog *cat;
	ClaimRow	row;
	int64		expiry;

	fence_refuse_on_citus_worker("fence_renew_any");
	claims_params_init(&p);
	p.job = fence_job_arg(fcinfo, 0);
	p.lease = fence_lease_arg(fcinfo, 1);
	p.now = GetCurrentTimestamp();
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	claims_refuse_on_standby("renew a claim");
	if (!claims_fetch(cat, false, CStringGetTextDatum(p.job), &row) || row.released)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_SUPERSEDED)),
				 errmsg("job \"%s\" has no current claim", p.job),
				 errhint(FENCE_STOP_HINT)));
	p.token = row.token;
	(void) token_lock_against_takeover(p.token);
	if (!claims_update(cat, CLAIM_RENEW_ANY, &p, &expiry))
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_SUPERSEDED)),
				 errmsg("job \"%s\" has no current claim", p.job),
				 errhint(FENCE_STOP_HINT)));
	PG_RETURN_TIMESTAMPTZ(expiry);
}
