/*-------------------------------------------------------------------------
 *
 * xact.c
 *	  Per-transaction state of fence: the token bound by fence_begin, the
 *	  tokens this transaction has already validated and locked, and the
 *	  relations whose DDL it declared with fence_allow_ddl.
 *
 * Validating a token means taking its token lock (which a takeover of the
 * job conflicts with) and then finding it current in fence_claims.  Once
 * both are done, nothing can supersede the token until the lock goes away,
 * so the guard need not validate it again for every row: it remembers the
 * token here and checks it with a comparison.
 *
 * The lock goes away with the (sub)transaction that took it, so each entry
 * remembers the SubTransactionId it was made in, in the manner of
 * postgres_fdw's connection.c: an entry is dropped when that subtransaction
 * rolls back, and handed to the parent when it commits.  The binding made
 * by fence_begin follows the same rule, so ROLLBACK TO SAVEPOINT undoes it.
 * Nothing survives the top-level transaction, which is what lets fence work
 * through a transaction-mode connection pooler.
 *
 * A binding vouches only for the statements that begin after it.  A
 * statement written without a token can call a function that calls
 * fence_begin while it runs: from a trigger's WHEN clause, a DEFAULT, a
 * CHECK constraint, a row-level security policy, its SET list, WHERE
 * clause or RETURNING list, a CTE.  Taken as the statement's token, such a
 * binding would stamp rows with a token the statement was never written
 * with.  So each binding keeps the command ID it was made at, and the guard
 * takes the innermost binding made before the writing statement began (its
 * snapshot, the active one, carries the command ID it began at): the one
 * in force when the statement began.  A binding made later covers the
 * statements after it, not this one.  "Statement" is the one whose
 * snapshot is active where the guard runs, not the top-level statement:
 * each statement of a PL/pgSQL or SQL function, DO block or procedure runs
 * at a command ID after the one before it, so a function that calls
 * fence_begin and then writes in a later statement of its own is covered,
 * as the same two statements sent by a client are.  So are the statements
 * a trigger body runs, and a foreign key's cascades: a binding made before
 * they began covers them (fence_begin refuses to run in a trigger body).
 * The tokens fence_claim issues during a statement are told apart the same
 * way.
 *
 * PREPARE TRANSACTION is refused once a transaction has taken any of
 * fence's locks (a claim, a renewal, a release, a validated token): a
 * prepared transaction would keep the job's takeover blocked for as long as
 * it stays prepared, with no session left to end it.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

/*
 * A growable array of entries, in the manner of core's arrays that track
 * nused/nalloc and grow with repalloc.  Every array here lives in
 * TopTransactionContext: it is allocated there on first use, and merely
 * forgotten at the end of the transaction, whose context frees it.
 *
 * Entries that remember the subtransaction they were made in say where their
 * SubTransactionId is (subid_offset), so that one pair of helpers can hand
 * them to the parent when it commits and drop them when it rolls back; -1
 * for an array whose entries outlive a subtransaction's rollback.
 */
typedef struct XactArray
{
	void	   *items;			/* NULL until the first entry */
	Size		itemsize;		/* sizeof an entry */
	int			subid_offset;	/* offsetof its SubTransactionId, or -1 */
	int			nused;			/* entries in use */
	int			nalloc;			/* entries allocated */
} XactArray;

#define XACT_ARRAY_INIT(type, subid_offset) \
	{NULL, sizeof(type), (subid_offset), 0, 0}

#define xact_array_entry(arr, i) \
	((char *) (arr)->items + (Size) (i) * (arr)->itemsize)

#define xact_array_subid(arr, i) \
	((SubTransactionId *) (xact_array_entry(arr, i) + (arr)->subid_offset))

/*
 * A token validated and locked by this transaction.  The answer holds only
 * for the registry it came from: DROP EXTENSION and CREATE EXTENSION within
 * the transaction make a new counter, in which the token may never have
 * been issued.  So each entry keeps the generation of the catalog it was
 * validated against (fence.c bumps it at every rebuild), and an entry of
 * another generation is no entry.
 */
typedef struct FenceHeldToken
{
	int64		token;
	uint64		generation;		/* the catalog it was validated against */
	char	   *job;			/* its job, for error messages */
	SubTransactionId subid;		/* the subtransaction holding its lock */
} FenceHeldToken;

/* A binding made by fence_begin or fence_begin_fresh. */
typedef struct FenceBinding
{
	int64		token;
	char	   *job;			/* NULL for a fresh token */
	SubTransactionId subid;		/* the subtransaction that made it */
	CommandId	cid;			/* the command ID it was made at */
} FenceBinding;

/*
 * Both arrays stay tiny: a handler uses one token, perhaps a few.  The
 * bindings form a stack, in the order they were made, so their command IDs
 * never decrease from the bottom up; the innermost live one is in force for
 * the statements that begin after it.
 */
static XactArray held_tokens =
XACT_ARRAY_INIT(FenceHeldToken, offsetof(FenceHeldToken, subid));

static XactArray bindings =
XACT_ARRAY_INIT(FenceBinding, offsetof(FenceBinding, subid));

/*
 * Relations whose otherwise refused DDL fence_allow_ddl declared for this
 * transaction, each with the subtransaction that declared it: a rollback
 * to a savepoint before the declaration undoes it.
 */
typedef struct FenceAllowedDdl
{
	Oid			relid;
	SubTransactionId subid;
} FenceAllowedDdl;

static XactArray allowed_ddl =
XACT_ARRAY_INIT(FenceAllowedDdl, offsetof(FenceAllowedDdl, subid));

/*
 * Tokens this transaction's fence_claim issued, each with the command ID
 * current when it was issued: a statement whose snapshot's command ID is
 * no greater began before the token existed.  They are kept until the end
 * of the transaction, through any savepoint rollback.
 */
typedef struct FenceIssuedToken
{
	int64		token;
	CommandId	cid;
	char	   *job;
} FenceIssuedToken;

static XactArray issued = XACT_ARRAY_INIT(FenceIssuedToken, -1);

/*
 * Relations for which the setting fence.allow_ddl let DDL through and wrote
 * the audit row: in this transaction (pending), and in committed ones of
 * this session.  A rolled-back transaction's rows are gone, so its
 * relations are recorded again next time.
 */
static List *setting_pending = NIL;
static List *setting_committed = NIL;

/* Has the transaction taken any of fence's locks?  Then it cannot PREPARE. */
static bool holds_fence_locks = false;

/*
 * A cross-partition UPDATE runs as the UPDATE's BEFORE ROW triggers on the
 * old partition, then a DELETE there and an INSERT into the new one.  The
 * INSERT carries the statement's token in the row; the DELETE carries
 * none, so the guard notes the token that the UPDATE half was checked with,
 * and the DELETE of the very same row version by the same command takes it
 * over.  Forgotten at every subtransaction abort and at transaction end.
 */
static struct
{
	Oid			relid;
	ItemPointerData tid;
	CommandId	cid;
	int64		token;
} moving_row;

static void fence_xact_callback(XactEvent event, void *arg);
static void fence_subxact_callback(SubXactEvent event,
								   SubTransactionId mySubid,
								   SubTransactionId parentSubid,
								   void *arg);

/*
 * Make room for one more entry at the end of the array and return it, not
 * yet counted as used: the caller fills it in, then calls
 * xact_array_push.
 */
static void *
xact_array_next(XactArray *arr)
{
	if (arr->nused >= arr->nalloc)
	{
		int			newalloc = Max(4, arr->nalloc * 2);

		if (arr->items == NULL)
			arr->items = MemoryContextAlloc(TopTransactionContext,
											newalloc * arr->itemsize);
		else
			arr->items = repalloc(arr->items, newalloc * arr->itemsize);
		arr->nalloc = newalloc;
	}
	return xact_array_entry(arr, arr->nused);
}

/* Count the entry xact_array_next returned as used. */
static inline void
xact_array_push(XactArray *arr)
{
	Assert(arr->nused < arr->nalloc);
	arr->nused++;
}

/* Keep only the first nkeep entries. */
static inline void
xact_array_truncate(XactArray *arr, int nkeep)
{
	Assert(nkeep >= 0 && nkeep <= arr->nused);
	arr->nused = nkeep;
}

/* Forget the array; its memory goes with TopTransactionContext. */
static void
xact_array_forget(XactArray *arr)
{
	arr->items = NULL;
	arr->nused = arr->nalloc = 0;
}

/* A subtransaction committed: its entries now belong to its parent. */
static void
xact_array_subxact_commit(XactArray *arr, SubTransactionId mySubid,
						  SubTransactionId parentSubid)
{
	int			i;

	if (arr->subid_offset < 0)
		return;
	for (i = 0; i < arr->nused; i++)
		if (*xact_array_subid(arr, i) == mySubid)
			*xact_array_subid(arr, i) = parentSubid;
}

/*
 * A subtransaction rolled back: drop its entries, keeping the others in
 * their order.
 */
static void
xact_array_subxact_abort(XactArray *arr, SubTransactionId mySubid)
{
	int			i;
	int			kept = 0;

	if (arr->subid_offset < 0)
		return;
	for (i = 0; i < arr->nused; i++)
	{
		if (*xact_array_subid(arr, i) == mySubid)
			continue;
		if (kept != i)
			memcpy(xact_array_entry(arr, kept), xact_array_entry(arr, i),
				   arr->itemsize);
		kept++;
	}
	xact_array_truncate(arr, kept);
}

void
fence_xact_init(void)
{
	RegisterXactCallback(fence_xact_callback, NULL);
	RegisterSubXactCallback(fence_subxact_callback, NULL);
}

static void
fence_xact_forget_all(void)
{
	xact_array_forget(&held_tokens);
	xact_array_forget(&bindings);
	xact_array_forget(&allowed_ddl);
	xact_array_forget(&issued);
	setting_pending = NIL;		/* in TopTransactionContext */
	moving_row.token = 0;
	holds_fence_locks = false;
}

static void
fence_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (holds_fence_locks)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that has used a fencing token"),
						 errdetail("A prepared transaction would keep the job's takeover blocked until it is committed or rolled back.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (setting_pending != NIL)
			{
				MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);

				setting_committed = list_concat_unique_oid(setting_committed,
														   setting_pending);
				MemoryContextSwitchTo(oldcxt);
			}
			fence_xact_forget_all();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			fence_xact_forget_all();
			break;
		default:
			break;
	}
}

static void
fence_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg pg_attribute_unused())
{
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/* Its locks now belong to the parent, and so do our entries. */
		xact_array_subxact_commit(&held_tokens, mySubid, parentSubid);
		xact_array_subxact_commit(&bindings, mySubid, parentSubid);
		xact_array_subxact_commit(&allowed_ddl, mySubid, parentSubid);
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		moving_row.token = 0;

		/*
		 * Its locks are released: forget what they protected.  The tokens
		 * it issued stay (issued has no subid).
		 */
		xact_array_subxact_abort(&held_tokens, mySubid);
		xact_array_subxact_abort(&bindings, mySubid);
		xact_array_subxact_abort(&allowed_ddl, mySubid);
	}
}

/*
 * Has this transaction validated and locked the token against this
 * generation of the catalog?  If so, *job gets the token's job.  This is
 * the guard's per-row test, so it is a short scan, the most recent entry
 * first.
 */
bool
fence_xact_token_validated(int64 token, uint64 generation, const char **job)
{
	FenceHeldToken *held = held_tokens.items;
	int			i;

	for (i = held_tokens.nused - 1; i >= 0; i--)
		if (held[i].token == token &&
			(held[i].generation == generation ||
			 held[i].generation == FENCE_ANY_GENERATION))
		{
			if (job)
				*job = held[i].job;
			return true;
		}
	return false;
}

/* Record that the token of job is validated and its lock is held. */
void
fence_xact_remember_token(int64 token, uint64 generation, const char *job)
{
	FenceHeldToken *held;

	if (fence_xact_token_validated(token, generation, NULL))
		return;
	held = xact_array_next(&held_tokens);
	held->token = token;
	held->generation = generation;
	held->job = job ?
		MemoryContextStrdup(TopTransactionContext, job) : NULL;
	held->subid = GetCurrentSubTransactionId();
	xact_array_push(&held_tokens);
}

/*
 * Forget a token whose claim this transaction has just released or taken
 * over: the next write with it must consult the registry again.
 */
void
fence_xact_forget_token(int64 token)
{
	FenceHeldToken *held = held_tokens.items;
	int			i;
	int			kept = 0;

	for (i = 0; i < held_tokens.nused; i++)
		if (held[i].token != token)
			held[kept++] = held[i];
	xact_array_truncate(&held_tokens, kept);
}

/* Bind a validated token (fence_begin, fence_begin_fresh). */
void
fence_xact_bind(const char *job, int64 token)
{
	FenceBinding *binding = xact_array_next(&bindings);

	binding->token = token;
	binding->job = job ?
		MemoryContextStrdup(TopTransactionContext, job) : NULL;
	binding->subid = GetCurrentSubTransactionId();

	/*
	 * Mark the command ID used, so that the next statement runs at a later
	 * one even if nothing in this one writes: a statement that began at this
	 * command ID or an earlier one was already running when the binding was
	 * made (fence_xact_statement_binding).
	 */
	binding->cid = GetCurrentCommandId(true);
	xact_array_push(&bindings);
}

/*
 * The command ID the statement now running began at, which its snapshot
 * (the active one) carries.  Without an active snapshot, the current
 * command ID: a binding made in this very command is still one made during
 * the statement.
 */
static CommandId
statement_command_id(void)
{
	if (ActiveSnapshotSet())
		return GetActiveSnapshot()->curcid;
	return GetCurrentCommandId(false);
}

/*
 * The binding that vouches for the statement now running: the innermost
 * live binding made before the statement began.  Returns its token, 0 if
 * there is none; *job gets its job (NULL for a fresh token).
 *
 * Bindings made while the statement was running (see the header comment)
 * are passed over.  If there are any, *late_token and *late_job get the
 * innermost, the one the write would otherwise have carried, so that the
 * guard can say why it finds no token; otherwise 0 and NULL.
 */
int64
fence_xact_statement_binding(const char **job, int64 *late_token,
							 const char **late_job)
{
	FenceBinding *binding = bindings.items;
	CommandId	stmt_cid;
	int			i;

	*job = NULL;
	*late_token = 0;
	*late_job = NULL;
	if (bindings.nused == 0)
		return 0;

	stmt_cid = statement_command_id();
	for (i = bindings.nused - 1; i >= 0; i--)
	{
		if (binding[i].cid < stmt_cid)
		{
			*job = binding[i].job;
			return binding[i].token;
		}
		if (*late_token == 0)
		{
			*late_token = binding[i].token;
			*late_job = binding[i].job;
		}
	}
	return 0;
}

/*
 * The token in force for this transaction, 0 if none; *job gets its job.
 * The guard asks fence_xact_statement_binding instead.
 */
int64
fence_xact_bound_token(const char **job)
{
	FenceBinding *innermost;

	if (bindings.nused == 0)
	{
		if (job)
			*job = NULL;
		return 0;
	}
	innermost = (FenceBinding *) bindings.items + (bindings.nused - 1);
	if (job)
		*job = innermost->job;
	return innermost->token;
}

/*
 * Note the token an UPDATE of this row version was checked with, in case
 * the row moves to another partition (see moving_row above).
 */
void
fence_xact_note_update(Oid relid, ItemPointer tid, int64 token)
{
	moving_row.relid = relid;
	ItemPointerCopy(tid, &moving_row.tid);
	moving_row.cid = GetCurrentCommandId(false);
	moving_row.token = token;
}

/*
 * The token a DELETE of this row version takes over from the UPDATE that
 * is moving it to another partition; 0 if it is not such a DELETE.
 */
int64
fence_xact_moving_row_token(Oid relid, ItemPointer tid)
{
	if (moving_row.token != 0 &&
		moving_row.relid == relid &&
		ItemPointerEquals(&moving_row.tid, tid) &&
		moving_row.cid == GetCurrentCommandId(false))
		return moving_row.token;
	return 0;
}

/*
 * Note that the transaction took one of fence's locks.  It stays noted even
 * if a savepoint rollback releases the lock: refusing PREPARE then is merely
 * cautious.
 */
void
fence_xact_note_lock(void)
{
	holds_fence_locks = true;
}

/* Declare the relation's otherwise refused DDL for this transaction. */
void
fence_xact_allow_ddl(Oid relid)
{
	FenceAllowedDdl *allowed = xact_array_next(&allowed_ddl);

	allowed->relid = relid;
	allowed->subid = GetCurrentSubTransactionId();
	xact_array_push(&allowed_ddl);
}

/* Has this transaction declared the relation's DDL? */
bool
fence_xact_ddl_allowed(Oid relid)
{
	FenceAllowedDdl *allowed = allowed_ddl.items;
	int			i;

	for (i = 0; i < allowed_ddl.nused; i++)
		if (allowed[i].relid == relid)
			return true;
	return false;
}

/* Has this session recorded the setting's use for the relation? */
bool
fence_xact_setting_recorded(Oid relid)
{
	return list_member_oid(setting_pending, relid) ||
		list_member_oid(setting_committed, relid);
}

/* The setting's use for the relation is recorded in this transaction. */
void
fence_xact_note_setting_recorded(Oid relid)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

	setting_pending = lappend_oid(setting_pending, relid);
	MemoryContextSwitchTo(oldcxt);
}

/* fence_claim issued the token to this transaction (for job). */
void
fence_xact_note_issued(int64 token, const char *job)
{
	FenceIssuedToken *entry = xact_array_next(&issued);

	entry->token = token;

	/*
	 * Mark the command ID used, so that the next statement runs at a later
	 * one even if nothing else in this one writes (fence_begin_fresh).
	 */
	entry->cid = GetCurrentCommandId(true);
	entry->job = job ?
		MemoryContextStrdup(TopTransactionContext, job) : NULL;
	xact_array_push(&issued);
}

/*
 * Did this transaction's fence_claim issue the token while the statement
 * now running was under way?  The statement's snapshot (the active one)
 * carries the command ID it began at.  If so, *job gets the token's job.
 */
bool
fence_xact_issued_in_statement(int64 token, const char **job)
{
	FenceIssuedToken *entry = issued.items;
	int			i;

	if (issued.nused == 0 || !ActiveSnapshotSet())
		return false;
	for (i = issued.nused - 1; i >= 0; i--)
		if (entry[i].token == token)
		{
			if (entry[i].cid < GetActiveSnapshot()->curcid)
				return false;
			*job = entry[i].job;
			return true;
		}
	return false;
}
