/*-------------------------------------------------------------------------
 *
 * prune.c
 *	  fence_prune_batch(): delete finished claims from fence_claims, one
 *	  batch per transaction (the procedure fence_prune commits between
 *	  batches).
 *
 * A claim row may go once its job is done with it: released, or its lease
 * expired longer ago than the caller says.  Deleting is safe because tokens
 * are global: a pruned job's old token is at or below the counter and in no
 * row, so it reads as superseded (5F001), never as someone else's, and the
 * job's next claim is a first claim with a new, higher token.
 *
 * What must not happen is a delete under a writer that still holds the
 * token.  The job's next claim would take the insert path, which takes no
 * token lock, and a takeover would then interleave with that writer's
 * transaction.  So each row is pruned as a takeover would take it: try the
 * job's lock and the token's lock in takeover mode, skip the row if either
 * is busy (a claim in flight, a writer in an open transaction), then find
 * and lock the row with the latest snapshot, check again that it holds the
 * same token and is still finished, and delete it through the executor
 * (claims_prune_row), so that a DBA's triggers and foreign keys on
 * fence_claims see the delete.  The locks of deleted rows are held to the
 * end of the batch's transaction; a skipped row's are given back at once.
 *
 * The deleted rows' counters (n_claims ...) are added to fence_pruned, so
 * fence_stats keeps counting them; each batch that deletes leaves one
 * 'prune' row in fence_audit_log.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(fence_prune_batch);

#define PRUNE_MAX_BATCH 100000

/* One candidate row, as read before its locks are taken. */
typedef struct PruneCandidate
{
	char	   *job;
	int64		token;
} PruneCandidate;

/*
 * Up to batch candidates after after_job, in job order: released claims,
 * and claims whose lease expired before cutoff.  fence_claims is readable
 * by everyone; each row is checked again under its locks.
 */
static int
prune_candidates(FenceCatalog *cat, const char *after_job, TimestampTz cutoff,
				 int batch, PruneCandidate *out)
{
	Oid			argtypes[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];
	char	   *sql;
	int			n;
	uint64		i;

	MemoryContext callercxt = CurrentMemoryContext;

	values[0] = CStringGetTextDatum(after_job);
	values[1] = TimestampTzGetDatum(cutoff);
	values[2] = Int32GetDatum(batch);
	sql = psprintf("SELECT job, token FROM %s"
				   " WHERE job OPERATOR(pg_catalog.>) $1"
				   " AND (released OR lease_expires_at OPERATOR(pg_catalog.<) $2)"
				   " ORDER BY job LIMIT $3",
				   quote_qualified_identifier(cat->nspname, "fence_claims"));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(sql, 3, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "fence_prune's candidate query failed");
	n = (int) SPI_processed;
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		/* SPI_getvalue's copy is in SPI's context: keep one in the caller's. */
		out[i].job = MemoryContextStrdup(callercxt, SPI_getvalue(tup, desc, 1));
		out[i].token = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	pfree(sql);
	return n;
}

/* Add the deleted rows' counters to fence_pruned; record the batch. */
static void
prune_record(FenceCatalog *cat, int64 deleted, int64 skipped,
			 const int64 sums[4], const char *last_job)
{
	const char *args[5];
	char	   *sql;

	args[0] = psprintf(INT64_FORMAT, deleted);
	args[1] = psprintf(INT64_FORMAT, sums[0]);
	args[2] = psprintf(INT64_FORMAT, sums[1]);
	args[3] = psprintf(INT64_FORMAT, sums[2]);
	args[4] = psprintf(INT64_FORMAT, sums[3]);
	sql = psprintf("INSERT INTO %1$s AS p (pruned, claims, takeovers, renewals, releases)"
				   " VALUES ($1::pg_catalog.int8, $2::pg_catalog.int8, $3::pg_catalog.int8,"
				   " $4::pg_catalog.int8, $5::pg_catalog.int8)"
				   " ON CONFLICT (only_row) DO UPDATE SET"
				   " pruned = p.pruned OPERATOR(pg_catalog.+) EXCLUDED.pruned,"
				   " claims = p.claims OPERATOR(pg_catalog.+) EXCLUDED.claims,"
				   " takeovers = p.takeovers OPERATOR(pg_catalog.+) EXCLUDED.takeovers,"
				   " renewals = p.renewals OPERATOR(pg_catalog.+) EXCLUDED.renewals,"
				   " releases = p.releases OPERATOR(pg_catalog.+) EXCLUDED.releases",
				   quote_qualified_identifier(cat->nspname, "fence_pruned"));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_spi_as_owner(cat, "fence_pruned", sql, 5, args);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	fence_audit_log_append(cat, "prune", InvalidOid, NULL,
						   psprintf(INT64_FORMAT " claims deleted, " INT64_FORMAT " skipped, up to job \"%s\"",
									deleted, skipped, last_job),
						   NULL);
}

/*
 * fence_prune_batch(older_than interval, batch int, after_job text,
 *					 OUT deleted bigint, OUT skipped bigint, OUT last_job text)
 *
 * Prune up to batch candidate rows whose job sorts after after_job (NULL:
 * from the start).  last_job is where the next batch starts, NULL when no
 * candidates are left.  Owner of fence_claims or superuser.
 */
Datum
fence_prune_batch(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat;
	Interval   *older_than;
	int32		batch;
	const char *after_job;
	TimestampTz cutoff;
	PruneCandidate *cands;
	int			ncands;
	int64		deleted = 0;
	int64		skipped = 0;
	int64		sums[4] = {0, 0, 0, 0};
	int			i;
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	fence_require_arg(fcinfo, 0, "older_than");
	fence_require_arg(fcinfo, 1, "batch");
	older_than = PG_GETARG_INTERVAL_P(0);
	batch = PG_GETARG_INT32(1);
	after_job = PG_ARGISNULL(2) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(2));

	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	claims_refuse_on_standby("prune claims");
	if (!superuser() && !has_privs_of_role(GetUserId(), cat->claims_owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to prune fence's claims"),
				 errdetail("Only the owner of \"%s.fence_claims\" or a superuser may delete claims.",
						   cat->nspname)));
	if (batch < 1 || batch > PRUNE_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch must be between 1 and %d", PRUNE_MAX_BATCH),
				 errhint("Each pruned claim holds two locks until its batch commits.")));
	if (older_than->month < 0 || older_than->day < 0 || older_than->time < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	/* Leases are judged against clock_timestamp(), as fence_claim does. */
	cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													 TimestampTzGetDatum(GetCurrentTimestamp()),
													 IntervalPGetDatum(older_than)));

	cands = palloc(sizeof(PruneCandidate) * batch);
	ncands = prune_candidates(cat, after_job, cutoff, batch, cands);
	for (i = 0; i < ncands; i++)
	{
		int64		counts[4];
		int			k;

		CHECK_FOR_INTERRUPTS();
		if (!token_try_lock_job_for_claim(cands[i].job))
		{
			skipped++;			/* a claim of the job is in flight */
			continue;
		}
		if (!token_try_lock_for_takeover(cands[i].token))
		{
			token_unlock_job(cands[i].job);
			skipped++;			/* a writer still holds the token */
			continue;
		}
		if (claims_prune_row(cat, cands[i].job, cands[i].token, cutoff, counts))
		{
			deleted++;
			for (k = 0; k < 4; k++)
				sums[k] += counts[k];
		}
		else
		{
			/* Claimed again, or renewed, since it was read: not finished. */
			token_unlock_takeover(cands[i].token);
			token_unlock_job(cands[i].job);
		}
	}

	if (deleted > 0)
		prune_record(cat, deleted, skipped, sums, cands[ncands - 1].job);

	values[0] = Int64GetDatum(deleted);
	values[1] = Int64GetDatum(skipped);
	if (ncands == batch)
		values[2] = CStringGetTextDatum(cands[ncands - 1].job);
	else
		nulls[2] = true;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}
