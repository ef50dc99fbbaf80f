/*-------------------------------------------------------------------------
 *
 * token.c
 *	  The token arbiter: what the guard and fence_begin ask before a write.
 *	  It owns the lock tags that keep a write and a takeover of the same job
 *	  from interleaving, the answer to "is this token its job's current
 *	  claim?", the errors for a token that is not, and fence_begin().
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
 * The registry is read with the latest snapshot, not the transaction's
 * (claims.c): a REPEATABLE READ writer whose snapshot predates a takeover
 * must still see it.  ri_triggers.c reads with GetLatestSnapshot() for the
 * same reason.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

PG_FUNCTION_INFO_V1(fence_begin);
PG_FUNCTION_INFO_V1(fence_begin_fresh);

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
 * until the transaction ends.  Returns whether this call took it (rather
 * than finding it held already).
 */
bool
token_lock_against_takeover(int64 token)
{
	LOCKTAG		tag;

	set_token_locktag(&tag, token);
	fence_xact_note_lock();
	return LockAcquire(&tag, ShareLock, false, false) == LOCKACQUIRE_OK;
}

/*
 * Give back the share lock this call took (token_lock_against_takeover
 * said it was new): the caller found the token is not the job's.
 */
void
token_unlock(int64 token)
{
	LOCKTAG		tag;

	set_token_locktag(&tag, token);
	(void) LockRelease(&tag, ShareLock, false);
}

/* Take a token's lock in exclusive mode if no writer holds it. */
bool
token_try_lock_for_takeover(int64 token)
{
	LOCKTAG		tag;

	set_token_locktag(&tag, token);
	fence_xact_note_lock();
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Take the job name's lock if no other claim of it is in flight. */
bool
token_try_lock_job_for_claim(const char *job)
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
 *
 * The primary message names the job whenever fence knows it (job queues
 * often keep only the message of a failed job), in one wording per
 * condition; the detail says what the registry holds instead.
 */
static void
report_token(int64 token, const char *job, FenceTokenCheck *check,
			 bool never_issued_is_invalid)
{
	const char *known_job = job ? job : check->released_job;

	if (check->state == FENCE_TOKEN_NEVER_ISSUED && never_issued_is_invalid)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_INVALID_TOKEN),
				 known_job ?
				 errmsg("invalid fencing token " INT64_FORMAT " of job \"%s\"",
						token, known_job) :
				 errmsg("invalid fencing token " INT64_FORMAT, token),
				 errdetail("No claim issued this token: the last token issued is " INT64_FORMAT ".",
						   check->last_issued),
				 errhint(FENCE_STOP_HINT)));

	ereport(ERROR,
			(errcode(ERRCODE_FENCE_SUPERSEDED),
			 known_job ?
			 errmsg("fencing token " INT64_FORMAT " of job \"%s\" has been superseded",
					token, known_job) :
			 errmsg("fencing token " INT64_FORMAT " has been superseded", token),
			 job == NULL && check->released_job != NULL ?
			 errdetail("The claim of job \"%s\" by token " INT64_FORMAT " was released.",
					   check->released_job, token) :
			 job == NULL ?
			 errdetail("Token " INT64_FORMAT " is no longer the current claim of any job: a newer claim of its job has replaced it.",
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
 * Make sure the token is current, and the current claim of job if one is
 * given, and that it stays so until the transaction ends: take its lock,
 * ask the registry, raise the error if it is not, and remember it so the
 * guard's later rows need not ask again.  Returns the token's job, in
 * TopTransactionContext.
 *
 * For the guard (for_guard), a never-issued token is invalid (5F004).
 */
const char *
fence_hold_token(FenceCatalog *cat, int64 token, const char *job,
				 bool for_guard)
{
	FenceTokenCheck check;
	const char *held_job;

	token_lock_against_takeover(token);
	check_token(cat, token, job, &check);
	if (check.state != FENCE_TOKEN_CURRENT)
		report_token(token, job, &check, for_guard);
	fence_xact_remember_token(token, cat->generation, check.job);
	(void) fence_xact_token_validated(token, cat->generation, &held_job);
	return held_job;
}

/*
 * Report, as fence_hold_token would, a token that the caller found is not
 * the current claim of job (fence_renew, whose UPDATE matched nothing).
 */
void
token_report_not_current(FenceCatalog *cat, int64 token, const char *job)
{
	FenceTokenCheck check;

	check_token(cat, token, job, &check);
	report_token(token, job, &check, false);
}

/* Is a trigger running (pg_trigger_depth() > 0)? */
static bool
in_trigger(void)
{
	LOCAL_FCINFO(depthinfo, 0);

	InitFunctionCallInfoData(*depthinfo, NULL, 0, InvalidOid, NULL, NULL);
	return DatumGetInt32(pg_trigger_depth(depthinfo)) > 0;
}

/*
 * fence_begin(job, token) returns void
 *
 * Bind the token to the transaction: every write to a protected table until
 * it ends carries the token, and no claim of the job can succeed meanwhile.
 *
 * Outside a transaction block the transaction is the statement's own, so
 * the binding ends with it.  That is right for a PL/pgSQL handler called
 * in autocommit, and a surprise for a driver in autocommit mode, whose next
 * statement then carries no token: warn, as PostgreSQL does for SET LOCAL.
 */
Datum
fence_begin(PG_FUNCTION_ARGS)
{
	char	   *job = fence_job_arg(fcinfo, 0);
	int64		token = fence_token_arg(fcinfo, 1);
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);

	/*
	 * A trigger that binds a token vouches for the statement that fired it,
	 * which it cannot: that statement was not written with the token.
	 */
	if (in_trigger())
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_DDL_REFUSED),
				 errmsg("fence_begin cannot be called from a trigger"),
				 errdetail("A binding made by a trigger would cover the statement that fired it, which no token vouched for."),
				 errhint("Call fence_begin in the transaction before the statements that write; a trigger may call fence_claim and fence_renew.")));

	fence_hold_token(cat, token, job, false);
	fence_xact_bind(job, token);

	if (!IsTransactionBlock())
		ereport(WARNING,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fence_begin outside a transaction block binds the token for this statement only"),
				 errdetail("The binding of token " INT64_FORMAT " of job \"%s\" ends when this statement's transaction ends.",
						   token, job),
				 errhint("Call fence_begin after BEGIN, in the transaction that makes the writes.")));
	PG_RETURN_VOID();
}

/*
 * fence_begin_fresh(reason) returns bigint
 *
 * The sanctioned path for a writer that is not a job (the web application,
 * an admin fix, a cron script, a migration): a new token from the counter,
 * newer than every token issued before it, bound to this transaction as
 * fence_begin binds one.  No claim holds it, so no other transaction can
 * present it as current (5F001); this one holds it until it ends.  In
 * strict and repeat mode the fresh writer is the newest writer: a stale
 * execution writing a row after it is fenced (5F002).  With a reason, the
 * call is recorded in fence_audit_log.
 */
Datum
fence_begin_fresh(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	char	   *reason = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	int64		token;

	if (reason != NULL && reason[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be empty"),
				 errdetail("Pass NULL to record nothing; a reason is kept in fence_audit_log.")));
	if (in_trigger())
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_DDL_REFUSED),
				 errmsg("fence_begin_fresh cannot be called from a trigger"),
				 errdetail("A binding made by a trigger would cover the statement that fired it, which no token vouched for."),
				 errhint("Call fence_begin_fresh in the transaction before the statements that write.")));

	token = claims_issue_token(cat, NULL);
	/* As fence_begin: PREPARE TRANSACTION is refused from here on. */
	fence_xact_note_lock();
	fence_xact_remember_token(token, FENCE_ANY_GENERATION, NULL);
	fence_xact_bind(NULL, token);
	if (reason != NULL)
	{
		FenceTriggerFns fns;

		fence_trigger_fns(fcinfo->flinfo->fn_oid, &fns);
		fence_audit(&fns, "begin_fresh", InvalidOid, NULL,
					psprintf("token " INT64_FORMAT, token), reason);
	}

	if (!IsTransactionBlock())
		ereport(WARNING,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fence_begin_fresh outside a transaction block binds the token for this statement only"),
				 errhint("Call fence_begin_fresh after BEGIN, in the transaction that makes the writes.")));
	PG_RETURN_INT64(token);
}
