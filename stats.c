/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Counts of refused writes, by SQLSTATE and database, in shared memory.
 *
 * A fenced write's transaction ends in its error, taking anything it wrote
 * with it, so the counts must live outside the database: in shared memory.
 * A library in shared_preload_libraries reserves it at server start, on
 * every major.  On PostgreSQL 17 and later a backend that loads fence
 * without preloading finds or makes the same struct in the DSM registry
 * (GetNamedDSMSegment), so the counts work without preloading there.  On 15
 * and 16 without preloading nothing is counted and fence_refusal_counts()
 * says so (NULL); everything else in fence works as before.  The counts
 * start at zero when the server starts and are lost when it stops, as
 * pg_stat_database's are after a crash.
 *
 * Every ereport of a 5F error wraps its code in fence_refused(), which adds
 * one to the database's counter and returns the code.  It runs while the
 * error is being raised, so it takes no lock that can fail and allocates
 * nothing: a spinlock to find or claim the database's slot (once per
 * backend), then an atomic add.  That is why the DSM segment is attached
 * when the library loads, not on the first refusal.  The claim registry's own counters (claims,
 * takeovers, renewals, releases) are columns of fence_claims, not here:
 * they belong to the transactions that make them.
 *
 * The repeats fence_once absorbed (its false answers) are counted here too,
 * in the same slot: a repeat writes nothing, so there is no row of its own
 * to count it in, and a counter row would serialise every repeat.  So are
 * the UPDATE statements the guard's inline form took or left to the
 * trigger, by reason (inline.c): only a preloaded fence has the inline
 * form, and a preloaded fence always has the shared memory.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/array.h"

PG_FUNCTION_INFO_V1(fence_refusal_counts);
PG_FUNCTION_INFO_V1(fence_repeat_count);
PG_FUNCTION_INFO_V1(fence_inline_counts);

/* 5F001 .. 5F006 */
#define FENCE_N_REFUSALS	6
/* The name of the counts in shared memory and in the DSM registry. */
#define FENCE_STATS_SHMEM_NAME	"fence refusal counts"
/* Databases counted; refusals in further databases are not counted. */
#define FENCE_STATS_DATABASES	256

typedef struct FenceRefusalSlot
{
	Oid			dboid;			/* InvalidOid: free */
	pg_atomic_uint64 refused[FENCE_N_REFUSALS];
	pg_atomic_uint64 repeats;	/* fence_once calls that answered false */
	pg_atomic_uint64 inline_outcomes[FENCE_INLINE_N_OUTCOMES];	/* inline.c */
} FenceRefusalSlot;

typedef struct FenceStatsShared
{
	slock_t		mutex;			/* protects the dboid of every slot */
	FenceRefusalSlot slots[FENCE_STATS_DATABASES];
} FenceStatsShared;

static FenceStatsShared *fence_stats = NULL;
static FenceRefusalSlot *my_slot = NULL;	/* this backend's database's */
static Oid	my_slot_db = InvalidOid;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;

static void
fence_stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(FenceStatsShared)));
}

/* Zero counts, whichever kind of shared memory holds them. */
static void
stats_init_shared(FenceStatsShared *shared)
{
	int			i,
				j;

	SpinLockInit(&shared->mutex);
	for (i = 0; i < FENCE_STATS_DATABASES; i++)
	{
		shared->slots[i].dboid = InvalidOid;
		for (j = 0; j < FENCE_N_REFUSALS; j++)
			pg_atomic_init_u64(&shared->slots[i].refused[j], 0);
		pg_atomic_init_u64(&shared->slots[i].repeats, 0);
	}
}

static void
fence_stats_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	fence_stats = ShmemInitStruct(FENCE_STATS_SHMEM_NAME,
								  sizeof(FenceStatsShared), &found);
	if (!found)
		stats_init_shared(fence_stats);
	LWLockRelease(AddinShmemInitLock);
}

#ifdef FENCE_HAVE_DSM_REGISTRY
/* The DSM registry's initialiser, run once, by the first backend. */
static void
stats_init_dsm(FENCE_DSM_INIT_PARAMS)
{
	stats_init_shared((FenceStatsShared *) ptr);
}
#endif

/*
 * Called from _PG_init.  While the postmaster loads shared_preload_libraries
 * it reserves fixed shared memory, which every backend inherits.  A backend
 * that loads fence itself attaches the DSM registry's segment where the
 * major has one: here, outside any error, so that fence_refused() never has
 * to.
 */
void
fence_stats_init(void)
{
	if (process_shared_preload_libraries_in_progress)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = fence_stats_shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = fence_stats_shmem_startup;
		return;
	}
#ifdef FENCE_HAVE_DSM_REGISTRY
	if (IsUnderPostmaster && fence_stats == NULL)
	{
		bool		found;

		fence_stats = GetNamedDSMSegment_compat(FENCE_STATS_SHMEM_NAME,
												sizeof(FenceStatsShared),
												stats_init_dsm, &found);
	}
#endif
}

/*
 * This database's slot, claiming a free one the first time; NULL if
 * refusals are not counted (not preloaded, or every slot taken).
 */
static FenceRefusalSlot *
stats_slot(void)
{
	FenceRefusalSlot *found = NULL;
	int			i;

	if (fence_stats == NULL || !OidIsValid(MyDatabaseId))
		return NULL;
	if (my_slot != NULL && my_slot_db == MyDatabaseId)
		return my_slot;

	SpinLockAcquire(&fence_stats->mutex);
	for (i = 0; i < FENCE_STATS_DATABASES && found == NULL; i++)
		if (fence_stats->slots[i].dboid == MyDatabaseId)
			found = &fence_stats->slots[i];
	for (i = 0; i < FENCE_STATS_DATABASES && found == NULL; i++)
		if (fence_stats->slots[i].dboid == InvalidOid)
		{
			found = &fence_stats->slots[i];
			found->dboid = MyDatabaseId;
		}
	SpinLockRelease(&fence_stats->mutex);

	if (found != NULL)
	{
		my_slot = found;
		my_slot_db = MyDatabaseId;
	}
	return found;
}

/* Index of a fence SQLSTATE in refused[], or -1. */
static int
stats_index(int sqlerrcode)
{
	switch (sqlerrcode)
	{
		case ERRCODE_FENCE_SUPERSEDED:
			return 0;
		case ERRCODE_FENCE_ROW_NEWER:
			return 1;
		case ERRCODE_FENCE_NO_TOKEN:
			return 2;
		case ERRCODE_FENCE_INVALID_TOKEN:
			return 3;
		case ERRCODE_FENCE_TRUNCATE:
			return 4;
		case ERRCODE_FENCE_OPERATION_REFUSED:
			return 5;
	}
	return -1;
}

/*
 * Count one refusal with this SQLSTATE in this database, and return the
 * code: errcode(fence_refused(ERRCODE_FENCE_...)) in every 5F ereport.
 */
int
fence_refused(int sqlerrcode)
{
	FenceRefusalSlot *slot = stats_slot();
	int			i = stats_index(sqlerrcode);

	if (slot != NULL && i >= 0)
		pg_atomic_fetch_add_u64(&slot->refused[i], 1);
	return sqlerrcode;
}

/*
 * fence_refusal_counts() RETURNS bigint[]
 *
 * This database's refusals since the server started, 5F001 to 5F006 in
 * order; NULL when they are not counted (on 15 and 16, fence is not in
 * shared_preload_libraries; or more databases than fence has room for).
 */
Datum
fence_refusal_counts(PG_FUNCTION_ARGS)
{
	FenceRefusalSlot *slot = stats_slot();
	Datum		counts[FENCE_N_REFUSALS];
	int			i;

	if (slot == NULL)
		PG_RETURN_NULL();
	for (i = 0; i < FENCE_N_REFUSALS; i++)
		counts[i] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->refused[i]));
	PG_RETURN_ARRAYTYPE_P(construct_array(counts, FENCE_N_REFUSALS, INT8OID,
										  sizeof(int64), FLOAT8PASSBYVAL,
										  TYPALIGN_DOUBLE));
}

/* Count one repeat fence_once absorbed (answered false) in this database. */
void
fence_count_repeat(void)
{
	FenceRefusalSlot *slot = stats_slot();

	if (slot != NULL)
		pg_atomic_fetch_add_u64(&slot->repeats, 1);
}

/*
 * fence_repeat_count() RETURNS bigint
 *
 * This database's fence_once calls that answered false since the server
 * started; NULL when they are not counted, as for fence_refusal_counts().
 */
Datum
fence_repeat_count(PG_FUNCTION_ARGS)
{
	FenceRefusalSlot *slot = stats_slot();

	if (slot == NULL)
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) pg_atomic_read_u64(&slot->repeats));
}

/* Count one UPDATE statement's outcome for the inline form (inline.c). */
void
fence_count_inline(FenceInlineOutcome outcome)
{
	FenceRefusalSlot *slot = stats_slot();

	if (slot != NULL)
		pg_atomic_fetch_add_u64(&slot->inline_outcomes[outcome], 1);
}

/*
 * fence_inline_counts() RETURNS bigint[]
 *
 * This database's UPDATE and DELETE statements of tables with fence's guard
 * since the server started, by FenceInlineOutcome in order: the inline
 * check used, then the trigger kept for fence.inline off, no check in the
 * plan, the triggers, session_replication_role; NULL when not counted.
 */
Datum
fence_inline_counts(PG_FUNCTION_ARGS)
{
	FenceRefusalSlot *slot = stats_slot();
	Datum		counts[FENCE_INLINE_N_OUTCOMES];
	int			i;

	if (slot == NULL)
		PG_RETURN_NULL();
	for (i = 0; i < FENCE_INLINE_N_OUTCOMES; i++)
		counts[i] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->inline_outcomes[i]));
	PG_RETURN_ARRAYTYPE_P(construct_array(counts, FENCE_INLINE_N_OUTCOMES, INT8OID,
										  sizeof(int64), FLOAT8PASSBYVAL,
										  TYPALIGN_DOUBLE));
}
