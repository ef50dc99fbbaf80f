/*-------------------------------------------------------------------------
 *
 * token.c
 *	  The token counter and its locks: the lock tags that keep a write and
 *	  a takeover of the same job from interleaving, the counter's
 *	  histories (how it moves at a restart, a promotion, a restore or an
 *	  upgrade, so that no token is issued twice), its crash gap and
 *	  durability, and fence_advance().  Whether a token is its job's
 *	  current claim is the claims registry's to say (claims.c, above this
 *	  file): nothing here reads fence_claims but fence_advance's largest
 *	  token.
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
#include "commands/extension.h"
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
PG_FUNCTION_INFO_V1(fence_history_created);

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
 * Histories.  A token must never be handed out twice, by this server or by
 * any other that ever held this database's counter, and fence must never
 * refuse to issue one.  The counter's history changes under it in ways no
 * server can fully see: a crash loses what the WAL had not flushed; a
 * promoted standby has not replayed what its old primary issued last; and
 * two servers can start from the same replicated counter (a double
 * failover onto a standby that never saw the interim primary, whose
 * timeline number is then used twice; a restore of a backup while its
 * source goes on), so that neither can know what the other issued.  The
 * timeline's number orders none of this: a repeated promotion reuses it,
 * and a restore, a pg_upgrade or a pg_resetwal starts again at 1 or keeps
 * it.
 *
 * So fence orders histories by what can be stated, not by the number.  A
 * history is the counter's run on one server (its system identifier), on
 * one timeline, since one start of its postmaster or one crash recovery;
 * fence_token_history holds a hash of the history that last moved the
 * counter.  It is an unlogged sequence: crash recovery resets it, even one
 * the postmaster runs without restarting (restart_after_crash keeps
 * PgStartTime), and so does a promotion, and a reset sequence records no
 * history.
 * Before the first token of any other history the counter moves to
 *
 *	 max(counter + FENCE_CRASH_GAP, clock_floor(now + 2 * fence.max_clock_skew))
 *
 * and no server ever issues a token above clock_floor(now), its clock's
 * reading in tokens (token_wait_for_clock).  The two terms answer two
 * kinds of history:
 *
 * 1. A history that continues this server's counter: a restart after a
 *	  crash, or a standby promoted after replaying its old primary's last
 *	  move.  What the previous history issued beyond what reached this one
 *	  is at most a gap: rule 2 below bounds what a crash loses, and a
 *	  replication lag of a million claims is far past what a failover takes
 *	  (Patroni's maximum_lag_on_failover).  This term rests on no clock.
 * 2. A sibling history, or one whose last move never reached this server:
 *	  nothing inside it can tell what the other issued.  Every token the
 *	  other issued lies below the floor of its clock when it issued it,
 *	  which, if no two clocks differ by more than fence.max_clock_skew, is
 *	  below clock_floor(now + 2 * skew) here.  The first claim waits about
 *	  2 * skew for its own clock to pass that (so that the rule holds for
 *	  this history too).  This term rests on the clocks' bound; it is
 *	  the only one that does.
 *
 * A history change is the only time the counter moves by itself, so a
 * lower or reset timeline moves it up, never down, and nothing runs out:
 * the floor reaches 2^53 in 2278.  A new database's first claim counts as
 * a new history too: an empty counter on a standby cannot tell a fence that
 * never claimed from one whose first claims were lost.  The one exception
 * is a counter the install script made in this very history, unused since
 * (fence_history_created): its tokens start at 1.  Under 1.0's objects
 * (fence_token_history missing) each backend applies the clock's term at
 * its first claim, and every token is flushed.
 */

/* Milliseconds since 2000-01-01 that a timestamp lies at, never negative. */
static int64
clock_ms(TimestampTz t)
{
	return t > 0 ? t / 1000 : 0;
}

/* The clock floor of a reading in milliseconds: its tokens start there. */
static int64
clock_floor(int64 ms)
{
	if (ms >= (PG_INT64_MAX >> FENCE_CLOCK_SHIFT))
		return PG_INT64_MAX;
	return ms << FENCE_CLOCK_SHIFT;
}

/*
 * The history this backend runs in, as the value fence_token_history holds
 * for it: a hash of the server's system identifier, its timeline and the
 * postmaster's start, in [1, 2^63).  With created, the value the install
 * script records for a counter made in this history and not yet used: a
 * first claim that finds it, and a counter that never issued, moves
 * nothing.
 */
static int64
history_marker(TimeLineID tl, bool created)
{
	struct
	{
		uint64		system_identifier;
		TimestampTz started;
		TimeLineID	timeline;
	}			history;
	uint64		hash;

	memset(&history, 0, sizeof(history));
	history.system_identifier = GetSystemIdentifier();
	history.started = PgStartTime;
	history.timeline = tl;
	hash = hash_bytes_extended((const unsigned char *) &history,
							   sizeof(history), created ? 1 : 0);
	hash &= (uint64) PG_INT64_MAX;
	return hash == 0 ? 1 : (int64) hash;
}

/* Record a history in fence_token_history, as its owner. */
static void
history_record(FenceCatalog *cat, int64 marker)
{
	FenceSavedUser saved;

	fence_become_owner(cat->token_history_owner, &saved);
	(void) DirectFunctionCall3(setval3_oid,
							   ObjectIdGetDatum(cat->token_history_relid),
							   Int64GetDatum(marker),
							   BoolGetDatum(true));
	fence_restore_user(&saved);
}

/* The history this backend has checked: its timeline and marker sequence. */
static TimeLineID history_checked_tl = 0;
static Oid	history_checked_relid = InvalidOid;

/* The largest clock reading this backend has seen, in milliseconds. */
static int64 clock_seen_ms = 0;

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
 * Move the counter for a new history: past a crash gap above where it is,
 * and past what any server's clock could have issued by now.
 */
static void
token_move_for_history(FenceCatalog *cat, TimeLineID tl, bool recorded)
{
	int64		counter = fence_last_token_issued(cat);
	int64		now_ms = clock_ms(GetCurrentTimestamp());
	int64		skew = fence_max_clock_skew_ms;
	int64		by_count;
	int64		by_clock;

	by_count = counter > PG_INT64_MAX - FENCE_CRASH_GAP ?
		PG_INT64_MAX : counter + FENCE_CRASH_GAP;
	by_clock = clock_floor(now_ms + 2 * skew);
	token_move_counter(cat, Max(by_count, by_clock),
					   psprintf("A new history of the counter begins (%s, timeline %u): it moves %s, above every token an earlier history or, with clocks within fence.max_clock_skew (%d ms) of each other, any other server can have issued.",
								recorded ? "another recorded: a restart, a restore or an upgrade" : "none recorded: a crash, a promotion, a new database, a restore or the update from 1.0",
								tl,
								by_count >= by_clock ?
								psprintf("a crash gap (" INT64_FORMAT ") above the counter", FENCE_CRASH_GAP) :
								"to the clock's reading plus twice the skew",
								fence_max_clock_skew_ms));
}

/*
 * Before a token is issued: is this the counter's first token in this
 * backend's history?  Once per backend and timeline; under a lock of
 * fence's own, checked again.
 */
void
token_begin_history(FenceCatalog *cat)
{
	TimeLineID	tl;
	int64		marker;
	int64		recorded;
	bool		has_record;
	LOCKTAG		tag;

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("fence issues no tokens on a standby"),
				 errhint("Claim jobs on the primary.")));
	tl = GetWALInsertionTimeLine();
	if (tl == history_checked_tl &&
		cat->token_history_relid == history_checked_relid)
		return;

	marker = history_marker(tl, false);
	if (OidIsValid(cat->token_history_relid) &&
		fence_sequence_last_value(cat->token_history_relid,
								  cat->token_history_owner, &recorded) &&
		recorded == marker)
	{
		history_checked_tl = tl;
		history_checked_relid = cat->token_history_relid;
		return;
	}

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, FENCE_LOCKTAG_COUNTER);
	fence_xact_note_lock();
	(void) LockAcquire(&tag, ExclusiveLock, false, false);

	if (!OidIsValid(cat->token_history_relid))
	{
		/* 1.0's objects: no record of histories; the clock's term only */
		token_move_counter(cat, clock_floor(clock_ms(GetCurrentTimestamp()) +
											2 * (int64) fence_max_clock_skew_ms),
						   "A backend's first claim under fence 1.0's objects: the counter moves to the clock's reading plus twice fence.max_clock_skew.");
	}
	else
	{
		int64		unused;

		has_record = fence_sequence_last_value(cat->token_history_relid,
											   cat->token_history_owner,
											   &recorded);
		if (has_record && recorded == marker)
			;					/* another backend moved it */
		else if (has_record && recorded == history_marker(tl, true) &&
				 !fence_sequence_last_value(cat->token_seq_relid,
											cat->token_seq_owner, &unused))
			history_record(cat, marker);	/* made here, never used */
		else
		{
			token_move_for_history(cat, tl, has_record);
			/* the move is flushed before the history is recorded */
			history_record(cat, marker);
		}
	}
	history_checked_tl = tl;
	history_checked_relid = cat->token_history_relid;
}

/*
 * Before a token leaves: no token above the clock's floor.  A token at most
 * a few seconds ahead (the first after a move) waits for the clock; one
 * further ahead, which only fence_advance(), a setval() by hand or a clock
 * stepped back can make, is issued at once with a warning, once per
 * backend: a claim must not stall for what an operator did.
 */
void
token_wait_for_clock(int64 token)
{
	static bool warned = false;
	int64		token_ms = token >> FENCE_CLOCK_SHIFT;
	int64		limit_ms;

	if (token_ms <= clock_seen_ms)
		return;
	clock_seen_ms = clock_ms(GetCurrentTimestamp());
	if (token_ms <= clock_seen_ms)
		return;

	limit_ms = 2 * (int64) fence_max_clock_skew_ms +
		(FENCE_CRASH_GAP >> FENCE_CLOCK_SHIFT) + 1000;
	if (token_ms - clock_seen_ms > limit_ms)
	{
		if (!warned)
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 errmsg("fence's token counter is ahead of this server's clock"),
					 errdetail("Token " INT64_FORMAT " belongs to the clock's reading " INT64_FORMAT " ms after 2000-01-01; the clock reads " INT64_FORMAT " ms.",
							   token, token_ms, clock_seen_ms),
					 errhint("Check the server's clock.  Until it passes the counter, a history that starts from an older copy of this database may issue this server's tokens again.")));
		warned = true;
		return;
	}
	while (token_ms > clock_seen_ms)
	{
		CHECK_FOR_INTERRUPTS();
		pg_usleep(Min(token_ms - clock_seen_ms, 100) * 1000L + 1000L);
		clock_seen_ms = clock_ms(GetCurrentTimestamp());
	}
}

/*
 * Crash gaps.  nextval() makes a value durable only through a WAL record
 * (it logs 32 values ahead of what it returns).  A claim committed with
 * synchronous_commit off, or one inside a transaction still open, may leave
 * that record unflushed while the client already holds the token; a crash
 * would then hand it out again.  Flushing the record before the token
 * leaves is correct but costs a WAL flush every 32 claims.  Instead fence
 * keeps two rules:
 *
 * 1. After a crash, before any token is issued, the counter moves at least
 *	  FENCE_CRASH_GAP above the value recovery restored: a restart begins a
 *	  new history (token_begin_history).
 * 2. No backend hands out a token FENCE_CRASH_GAP or more above the largest
 *	  token it knows to be durable without flushing the WAL first
 *	  (token_make_durable).
 *
 * Recovery restores the counter at or above every token known durable, so
 * every token a crash may have lost lies below the restored value plus the
 * gap, and rule 1 issues none of them again.  The WAL writer flushes within
 * a fraction of a second under any load, so rule 2 rarely flushes: once
 * after a backend's first claim, once the counter has moved a gap past what
 * it last saw flushed.  Under 1.0's objects every token is flushed before
 * it leaves.
 */

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
 * After nextval() returned token and left the counter's page at lsn: rule
 * 2.  Flush the WAL up to lsn only if token is a gap or more above the
 * largest token this backend knows is durable.
 */
void
token_make_durable(FenceCatalog *cat, int64 token, XLogRecPtr lsn)
{
	XLogRecPtr	flushed;

	if (!OidIsValid(cat->token_history_relid))
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
 * fence_advance(margin bigint) returns bigint
 *
 * The runbook step after what fence cannot see: a table loaded with pg_dump
 * -t from another database, an epoch set by hand, a history whose server's
 * clock is not trusted.  (A restart, a promotion, a restore or an upgrade
 * begins a new history, and the counter moves by itself.)  Moves the
 * counter to the largest token in fence_claims, every stored epoch of every
 * protected table and the counter itself, plus margin: the margin always
 * counts, and the counter never moves backwards.  Superusers only;
 * recorded.  Returns the counter's last value.
 */
Datum
fence_advance(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	int64		margin = PG_ARGISNULL(0) ? 0 : PG_GETARG_INT64(0);
	int64		highest;
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

	if (highest > PG_INT64_MAX - margin)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fence_advance would move the counter past its largest value"),
				 errdetail("The largest token or epoch found is " INT64_FORMAT ".", highest),
				 errhint("Use a smaller margin.")));
	token_move_counter(cat, highest + margin, "fence_advance()");
	PG_RETURN_INT64(fence_last_token_issued(cat));
}

/*
 * fence_history_created() returns void
 *
 * Run once, by the install script, and dropped at once: records that the
 * counter was made in this history and has issued nothing, so that its
 * first claim need not move it.  A standby promoted since, a restart, or a
 * restore that loads the counter (its first claim finds the counter used)
 * all still move it.
 */
Datum
fence_history_created(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);

	if (!creating_extension || !OidIsValid(cat->token_history_relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fence_history_created() runs only in fence's install script")));
	history_record(cat, history_marker(GetWALInsertionTimeLine(), true));
	PG_RETURN_VOID();
}
