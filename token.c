/*-------------------------------------------------------------------------
 *
 * token.c
 *	  The token arbiter: what the guard and fence_begin ask before a write.
 *	  It owns the lock tags that keep a write and a takeover of the same job
 *	  from interleaving, the answer to "is this token its job's current
 *	  claim?" (fence_hold_token), the errors for a token that is not, the
 *	  counter's timeline ranges and crash gap, and fence_advance().
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
#include "access/xlog.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

PG_FUNCTION_INFO_V1(fence_advance);

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
	const char *listed_job;		/* NEVER_ISSUED, but fence_claims lists it */
} FenceTokenCheck;

/*
 * A value the counter has reached, for this catalog generation: a token at
 * or below it was issued.  Read again only for a token above it, so most
 * checks read no sequence.
 */
static int64 issued_floor = 0;
static uint64 issued_floor_generation = 0;

static void token_counter_gap_taken(FenceCatalog *cat);
pg_noreturn static void report_token(int64 token, const char *job,
									 FenceTokenCheck *check,
									 bool never_issued_is_invalid);

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

/* Give back the exclusive lock token_try_lock_for_takeover took. */
void
token_unlock_takeover(int64 token)
{
	LOCKTAG		tag;

	set_token_locktag(&tag, token);
	(void) LockRelease(&tag, ExclusiveLock, false);
}

static void
set_job_locktag(LOCKTAG *tag, const char *job)
{
	uint64		key = hash_bytes_extended((const unsigned char *) job,
										  strlen(job), 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, FENCE_LOCKTAG_JOB);
}

/* Take the job name's lock if no other claim of it is in flight. */
bool
token_try_lock_job_for_claim(const char *job)
{
	LOCKTAG		tag;

	set_job_locktag(&tag, job);
	fence_xact_note_lock();
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Give back the job name's lock (fence_prune, skipping the job). */
void
token_unlock_job(const char *job)
{
	LOCKTAG		tag;

	set_job_locktag(&tag, job);
	(void) LockRelease(&tag, ExclusiveLock, false);
}

/*
 * Timeline ranges.  After a failover to an asynchronous standby, or a
 * point-in-time recovery, the new primary cannot know which tokens the old
 * one handed out after the last WAL it received.  It does know that its
 * timeline is newer: so every token of timeline T lies in
 * [(T - 1) * 2^40, T * 2^40), above every range of a lower timeline, and
 * the first claim a backend makes on a timeline moves the counter to the
 * range's start if it is below it (timeline 1 starts at 0: nothing moves
 * there).  2^40 tokens per timeline: at a million claims a second, 12 days;
 * at a thousand, 35 years.  At the end of a range fence refuses to issue
 * (54000) rather than step into the next timeline's.
 */
static uint64
timeline_range_start(TimeLineID tl)
{
	return ((uint64) (tl > 0 ? tl - 1 : 0)) << FENCE_TIMELINE_BITS;
}

/* The counter's timeline this backend has already checked. */
static TimeLineID counter_checked_tl = 0;

/*
 * Set the counter's last value to last_value (never lower than it is):
 * as the counter's owner, durable before any token of it leaves, and
 * recorded (a LOG line, and an audit row where the log exists).
 */
void
token_move_counter(FenceCatalog *cat, int64 last_value, const char *why)
{
	FenceSavedUser saved;
	int64		before = fence_last_token_issued(cat);

	if (last_value <= before)
		return;
	fence_become_owner(cat->token_seq_owner, &saved);
	(void) DirectFunctionCall3(setval3_oid,
							   ObjectIdGetDatum(cat->token_seq_relid),
							   Int64GetDatum(last_value),
							   BoolGetDatum(true));
	fence_restore_user(&saved);
	/*
	 * setval() is WAL-logged and not transactional: make it durable now, up
	 * to the end of its record.  (Not GetXLogInsertRecPtr(): when a record
	 * ends on a page boundary, that is the position after the next page's
	 * header, which is not yet written, and XLogFlush() would fail.)
	 */
	XLogFlush(XactLastRecEnd);

	ereport(LOG,
			(errmsg("fence moved its token counter from " INT64_FORMAT " to " INT64_FORMAT,
					before, last_value),
			 errdetail("%s", why)));
	if (OidIsValid(get_relname_relid("fence_audit_log", cat->nspid)))
		fence_audit_log_append(cat, "counter_move", InvalidOid, NULL,
							   psprintf("from " INT64_FORMAT " to " INT64_FORMAT, before, last_value),
							   why);
}

/*
 * Before a token is issued: is the counter in this timeline's range?  Once
 * per backend and timeline; under a lock of fence's own, checked again.
 */
void
token_counter_to_timeline(FenceCatalog *cat)
{
	TimeLineID	tl;
	int64		start;
	LOCKTAG		tag;

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("fence issues no tokens on a standby"),
				 errhint("Claim jobs on the primary.")));
	tl = GetWALInsertionTimeLine();
	if (tl == counter_checked_tl)
		return;
	start = (int64) timeline_range_start(tl);
	if (start > 0 && fence_last_token_issued(cat) < start)
	{
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, FENCE_LOCKTAG_COUNTER);
		fence_xact_note_lock();
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		token_move_counter(cat, start,
						   psprintf("Timeline %u begins: its tokens start at " INT64_FORMAT ", above every token of an earlier timeline.",
									tl, start));
		/* No token of this range was issued yet: none can have been lost. */
		token_counter_gap_taken(cat);
	}
	counter_checked_tl = tl;
}

/* A token must stay inside its timeline's range. */
void
token_check_range(int64 token)
{
	TimeLineID	tl = GetWALInsertionTimeLine();

	if ((uint64) token >= timeline_range_start(tl + 1))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fence has issued every token of timeline %u", tl),
				 errdetail("Tokens of timeline %u end below " UINT64_FORMAT "; the next would fall in the next timeline's range.",
						   tl, timeline_range_start(tl + 1))));
}

/*
 * Crash gaps.  A token must never be handed out twice, and nextval() makes
 * a value durable only through a WAL record (it logs 32 values ahead of
 * what it returns).  A claim committed with synchronous_commit off, or one
 * inside a transaction still open, may leave that record unflushed while
 * the client already holds the token; a crash would then hand it out again.
 * Flushing the record before the token leaves is correct but costs a WAL
 * flush every 32 claims.  Instead fence keeps two rules:
 *
 * 1. After a crash, before any token is issued, the counter moves
 *	  FENCE_CRASH_GAP above the value recovery restored
 *	  (token_counter_past_crash).
 * 2. No backend hands out a token FENCE_CRASH_GAP or more above the largest
 *	  token it knows to be durable without flushing the WAL first
 *	  (token_make_durable).
 *
 * Recovery restores the counter at or above every token known durable, so
 * every token a crash may have lost lies below the restored value plus the
 * gap, and rule 1 issues none of them again.  The WAL writer flushes within
 * a fraction of a second under any load, so rule 2 rarely flushes: once
 * after a backend's first claim, once the counter has moved a gap past what
 * it last saw flushed.
 *
 * fence_token_gap, an unlogged sequence, says whether rule 1 has run since
 * the last crash: PostgreSQL resets an unlogged relation in crash recovery,
 * and at a promotion, and never at a clean shutdown, which flushes all WAL.
 * A clean restart thus keeps the counter where it was.  After a promotion
 * the move into the new timeline's range sets it instead: that move is
 * past every token of the old timeline already.  Under 1.0's objects,
 * which lack it, every token is flushed before it leaves.
 */

/* fence_token_gap, once this backend has seen the gap taken. */
static Oid	crash_gap_seen = InvalidOid;

/*
 * What this backend knows of the counter's WAL: the largest token whose
 * record it has seen flushed (durable_token), and one token whose record
 * it has seen written but not yet flushed (pending_*), the next candidate.
 * For the counter durable_relid; reset if the counter changes or goes
 * backwards (a setval by hand).
 */
static Oid	durable_relid = InvalidOid;
static int64 durable_token = 0;
static int64 pending_token = 0;
static XLogRecPtr pending_lsn = InvalidXLogRecPtr;

/*
 * Record in fence_token_gap that the counter is past every token a crash
 * may have lost: after rule 1's move, or a move into a new timeline's
 * range, which no token of that range precedes.  The caller holds the
 * counter's lock, and the move is flushed.
 */
static void
token_counter_gap_taken(FenceCatalog *cat)
{
	FenceSavedUser saved;

	if (!OidIsValid(cat->token_gap_relid))
		return;
	fence_become_owner(cat->token_gap_owner, &saved);
	(void) nextval_internal(cat->token_gap_relid, false);
	fence_restore_user(&saved);
}

/*
 * Before a token is issued: rule 1.  Once per backend; only a backend that
 * finds the gap not yet taken takes the counter's lock and looks again.
 */
void
token_counter_past_crash(FenceCatalog *cat)
{
	int64		taken;
	LOCKTAG		tag;

	if (!OidIsValid(cat->token_gap_relid) || crash_gap_seen == cat->token_gap_relid)
		return;
	if (!fence_sequence_last_value(cat->token_gap_relid, cat->token_gap_owner, &taken))
	{
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, FENCE_LOCKTAG_COUNTER);
		fence_xact_note_lock();
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		if (!fence_sequence_last_value(cat->token_gap_relid, cat->token_gap_owner,
									   &taken))
		{
			/* the move is flushed before the mark is set */
			token_move_counter(cat, fence_last_token_issued(cat) + FENCE_CRASH_GAP,
							   psprintf("The server restarted after a crash: the counter moves " INT64_FORMAT " above the value recovery restored, past every token the crash may have lost.",
										FENCE_CRASH_GAP));
			token_counter_gap_taken(cat);
		}
	}
	crash_gap_seen = cat->token_gap_relid;
}

/*
 * After nextval() returned token and left the counter's page at lsn: rule
 * 2.  Flush the WAL up to lsn only if token is a gap or more above the
 * largest token this backend knows is durable.
 */
void
token_make_durable(FenceCatalog *cat, int64 token, XLogRecPtr lsn)
{
	XLogRecPtr	flushed;

	if (!OidIsValid(cat->token_gap_relid))
	{
		XLogFlush(lsn);
		return;
	}
	if (durable_relid != cat->token_seq_relid || token <= durable_token)
	{
		durable_relid = cat->token_seq_relid;
		durable_token = 0;
		pending_lsn = InvalidXLogRecPtr;
	}

	flushed = GetFlushRecPtr(NULL);
	if (!XLogRecPtrIsInvalid(pending_lsn) && pending_lsn <= flushed)
	{
		durable_token = pending_token;
		pending_lsn = InvalidXLogRecPtr;
	}
	if (lsn <= flushed)
	{
		durable_token = token;
		pending_lsn = InvalidXLogRecPtr;
	}
	else if (token - durable_token >= FENCE_CRASH_GAP)
	{
		XLogFlush(lsn);
		durable_token = token;
		pending_lsn = InvalidXLogRecPtr;
	}
	else if (XLogRecPtrIsInvalid(pending_lsn))
	{
		pending_token = token;
		pending_lsn = lsn;
	}
}

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

	if (check->state == FENCE_TOKEN_NEVER_ISSUED && check->listed_job != NULL)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
				 errmsg("invalid fencing token " INT64_FORMAT " of job \"%s\"",
						token, check->listed_job),
				 errdetail("fence_claims lists it as the claim of job \"%s\", but this database's counter never issued it: the last token issued is " INT64_FORMAT ".",
						   check->listed_job, check->last_issued),
				 errhint("A claim row written by hand, or replicated from another database, is not a claim here; see \"Logical replication\" in doc/fence.md.")));
	if (check->state == FENCE_TOKEN_NEVER_ISSUED && never_issued_is_invalid)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
				 known_job ?
				 errmsg("invalid fencing token " INT64_FORMAT " of job \"%s\"",
						token, known_job) :
				 errmsg("invalid fencing token " INT64_FORMAT, token),
				 errdetail("No claim issued this token: the last token issued is " INT64_FORMAT ".",
						   check->last_issued),
				 errhint(FENCE_STOP_HINT)));

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

/*
 * fence_advance(margin bigint) returns bigint
 *
 * The runbook step after anything fence cannot see: a disk snapshot or a
 * base backup restored on the same timeline, a PITR whose history files
 * were lost, a table loaded with pg_dump -t.  Moves the counter past the
 * largest token in fence_claims and every stored epoch of every protected
 * table, plus margin; never backwards, never out of the timeline's range.
 * Superusers only; recorded.  Returns the counter's last value.
 */
Datum
fence_advance(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	int64		margin = PG_ARGISNULL(0) ? 0 : PG_GETARG_INT64(0);
	int64		highest;
	int64		target;
	TimeLineID	tl;
	LOCKTAG		tag;
	uint64		i;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be superuser to move fence's token counter")));
	if (PG_ARGISNULL(0) || margin < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("margin must be zero or positive")));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("fence issues no tokens on a standby")));

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, FENCE_LOCKTAG_COUNTER);
	fence_xact_note_lock();
	(void) LockAcquire(&tag, ExclusiveLock, false, false);

	/* The largest token and stored epoch anywhere fence looks. */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(psprintf("SELECT pg_catalog.max(token) FROM %s",
							 quote_qualified_identifier(cat->nspname, "fence_claims")),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read fence_claims");
	highest = fence_last_token_issued(cat);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull && DatumGetInt64(d) > highest)
			highest = DatumGetInt64(d);
	}
	if (SPI_execute(psprintf("SELECT pg_catalog.format('SELECT pg_catalog.max(%%I) FROM ONLY %%s', p.epoch_column, p.relation)"
							 "  FROM %s p JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) p.relation"
							 " WHERE c.relkind OPERATOR(pg_catalog.=) 'r'",
							 quote_qualified_identifier(cat->nspname, "fence_protected")),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read fence_protected");
	{
		List	   *queries = NIL;
		ListCell   *lc;

		for (i = 0; i < SPI_processed; i++)
			queries = lappend(queries,
							  SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		foreach(lc, queries)
		{
			bool		isnull;
			Datum		d;

			if (SPI_execute((char *) lfirst(lc), true, 1) != SPI_OK_SELECT)
				elog(ERROR, "could not read \"%s\"", (char *) lfirst(lc));
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
			if (!isnull && DatumGetInt64(d) > highest)
				highest = DatumGetInt64(d);
		}
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	tl = GetWALInsertionTimeLine();
	if (highest > PG_INT64_MAX - margin ||
		(uint64) (highest + margin) >= timeline_range_start(tl + 1))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fence_advance would move the counter out of timeline %u's range", tl),
				 errdetail("The largest token or epoch found is " INT64_FORMAT "; timeline %u's tokens end below " UINT64_FORMAT ".",
						   highest, tl, timeline_range_start(tl + 1)),
				 errhint("Use a smaller margin.")));
	target = Max(highest + margin, (int64) timeline_range_start(tl));
	token_move_counter(cat, target, "fence_advance()");
	counter_checked_tl = 0;
	PG_RETURN_INT64(fence_last_token_issued(cat));
}
