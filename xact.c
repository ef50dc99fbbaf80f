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
 * Both arrays live in TopTransactionContext and are forgotten at the end of
 * the transaction.  They stay tiny: a handler uses one token, perhaps a few.
 * The bindings form a stack, in the order they were made, so their command
 * IDs never decrease from the bottom up; the innermost live one is in force
 * for the statements that begin after it.
 */
static FenceHeldToken *held_tokens = NULL;
static int	n_held_tokens = 0;
static int	max_held_tokens = 0;

static FenceBinding *bindings = NULL;
static int	n_bindings = 0;
static int	max_bindings = 0;

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

static FenceAllowedDdl *allowed_ddl = NULL;
static int	n_allowed_ddl = 0;
static int	max_allowed_ddl = 0;

/*
 * Tokens this transaction's fence_claim issued, each with the command ID
 * current when it was issued: a statement whose snapshot's command ID is
 * no greater began before the token existed.
 */
typedef struct FenceIssuedToken
{
	int64		token;
	CommandId	cid;
	char	   *job;
} FenceIssuedToken;

static FenceIssuedToken *issued = NULL;
static int	n_issued = 0;
static int	max_issued = 0;

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

void
fence_xact_init(void)
{
	RegisterXactCallback(fence_xact_callback, NULL);
	RegisterSubXactCallback(fence_subxact_callback, NULL);
}

static void
fence_xact_forget_all(void)
{
	/* The memory goes with TopTransactionContext. */
	held_tokens = NULL;
	n_held_tokens = max_held_tokens = 0;
	bindings = NULL;
	n_bindings = max_bindings = 0;
	allowed_ddl = NULL;
	n_allowed_ddl = max_allowed_ddl = 0;
	issued = NULL;
	n_issued = max_issued = 0;
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
	int			i;
	int			kept;

	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/* Its locks now belong to the parent, and so do our entries. */
		for (i = 0; i < n_held_tokens; i++)
			if (held_tokens[i].subid == mySubid)
				held_tokens[i].subid = parentSubid;
		for (i = 0; i < n_bindings; i++)
			if (bindings[i].subid == mySubid)
				bindings[i].subid = parentSubid;
		for (i = 0; i < n_allowed_ddl; i++)
			if (allowed_ddl[i].subid == mySubid)
				allowed_ddl[i].subid = parentSubid;
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		moving_row.token = 0;

		/* Its locks are released: forget what they protected. */
		kept = 0;
		for (i = 0; i < n_held_tokens; i++)
			if (held_tokens[i].subid != mySubid)
				held_tokens[kept++] = held_tokens[i];
		n_held_tokens = kept;

		kept = 0;
		for (i = 0; i < n_bindings; i++)
			if (bindings[i].subid != mySubid)
				bindings[kept++] = bindings[i];
		n_bindings = kept;

		kept = 0;
		for (i = 0; i < n_allowed_ddl; i++)
			if (allowed_ddl[i].subid != mySubid)
				allowed_ddl[kept++] = allowed_ddl[i];
		n_allowed_ddl = kept;
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
	int			i;

	for (i = n_held_tokens - 1; i >= 0; i--)
		if (held_tokens[i].token == token &&
			(held_tokens[i].generation == generation ||
			 held_tokens[i].generation == FENCE_ANY_GENERATION))
		{
			if (job)
				*job = held_tokens[i].job;
			return true;
		}
	return false;
}

/* Record that the token of job is validated and its lock is held. */
void
fence_xact_remember_token(int64 token, uint64 generation, const char *job)
{
	if (fence_xact_token_validated(token, generation, NULL))
		return;
	if (n_held_tokens >= max_held_tokens)
	{
		max_held_tokens = Max(4, max_held_tokens * 2);
		if (held_tokens == NULL)
			held_tokens = MemoryContextAlloc(TopTransactionContext,
											 max_held_tokens * sizeof(FenceHeldToken));
		else
			held_tokens = repalloc(held_tokens,
								   max_held_tokens * sizeof(FenceHeldToken));
	}
	held_tokens[n_held_tokens].token = token;
	held_tokens[n_held_tokens].generation = generation;
	held_tokens[n_held_tokens].job = job ?
		MemoryContextStrdup(TopTransactionContext, job) : NULL;
	held_tokens[n_held_tokens].subid = GetCurrentSubTransactionId();
	n_held_tokens++;
}

/*
 * Forget a token whose claim this transaction has just released or taken
 * over: the next write with it must consult the registry again.
 */
void
fence_xact_forget_token(int64 token)
{
	int			i;
	int			kept = 0;

	for (i = 0; i < n_held_tokens; i++)
		if (held_tokens[i].token != token)
			held_tokens[kept++] = held_tokens[i];
	n_held_tokens = kept;
}

/* Bind a validated token (fence_begin, fence_begin_fresh). */
void
fence_xact_bind(const char *job, int64 token)
{
	if (n_bindings >= max_bindings)
	{
		max_bindings = Max(2, max_bindings * 2);
		if (bindings == NULL)
			bindings = MemoryContextAlloc(TopTransactionContext,
										  max_bindings * sizeof(FenceBinding));
		else
			bindings = repalloc(bindings, max_bindings * sizeof(FenceBinding));
	}
	bindings[n_bindings].token = token;
	bindings[n_bindings].job = job ?
		MemoryContextStrdup(TopTransactionContext, job) : NULL;
	bindings[n_bindings].subid = GetCurrentSubTransactionId();

	/*
	 * Mark the command ID used, so that the next statement runs at a later
	 * one even if nothing in this one writes: a statement that began at this
	 * command ID or an earlier one was already running when the binding was
	 * made (fence_xact_statement_binding).
	 */
	bindings[n_bindings].cid = GetCurrentCommandId(true);
	n_bindings++;
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
	CommandId	stmt_cid;
	int			i;

	*job = NULL;
	*late_token = 0;
	*late_job = NULL;
	if (n_bindings == 0)
		return 0;

	stmt_cid = statement_command_id();
	for (i = n_bindings - 1; i >= 0; i--)
	{
		if (bindings[i].cid < stmt_cid)
		{
			*job = bindings[i].job;
			return bindings[i].token;
		}
		if (*late_token == 0)
		{
			*late_token = bindings[i].token;
			*late_job = bindings[i].job;
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
	if (n_bindings == 0)
	{
		if (job)
			*job = NULL;
		return 0;
	}
	if (job)
		*job = bindings[n_bindings - 1].job;
	return bindings[n_bindings - 1].token;
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
	if (n_allowed_ddl >= max_allowed_ddl)
	{
		max_allowed_ddl = Max(4, max_allowed_ddl * 2);
		if (allowed_ddl == NULL)
			allowed_ddl = MemoryContextAlloc(TopTransactionContext,
											 max_allowed_ddl * sizeof(FenceAllowedDdl));
		else
			allowed_ddl = repalloc(allowed_ddl,
								   max_allowed_ddl * sizeof(FenceAllowedDdl));
	}
	allowed_ddl[n_allowed_ddl].relid = relid;
	allowed_ddl[n_allowed_ddl].subid = GetCurrentSubTransactionId();
	n_allowed_ddl++;
}

/* Has this transaction declared the relation's DDL? */
bool
fence_xact_ddl_allowed(Oid relid)
{
	int			i;

	for (i = 0; i < n_allowed_ddl; i++)
		if (allowed_ddl[i].relid == relid)
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
	if (n_issued >= max_issued)
	{
		max_issued = Max(4, max_issued * 2);
		if (issued == NULL)
			issued = MemoryContextAlloc(TopTransactionContext,
										max_issued * sizeof(FenceIssuedToken));
		else
			issued = repalloc(issued, max_issued * sizeof(FenceIssuedToken));
	}
	issued[n_issued].token = token;
	/*
	 * Mark the command ID used, so that the next statement runs at a later
	 * one even if nothing else in this one writes (fence_begin_fresh).
	 */
	issued[n_issued].cid = GetCurrentCommandId(true);
	issued[n_issued].job = job ?
		MemoryContextStrdup(TopTransactionContext, job) : NULL;
	n_issued++;
}

/*
 * Did this transaction's fence_claim issue the token while the statement
 * now running was under way?  The statement's snapshot (the active one)
 * carries the command ID it began at.  If so, *job gets the token's job.
 */
bool
fence_xact_issued_in_statement(int64 token, const char **job)
{
	int			i;

	if (n_issued == 0 || !ActiveSnapshotSet())
		return false;
	for (i = n_issued - 1; i >= 0; i--)
		if (issued[i].token == token)
		{
			if (issued[i].cid < GetActiveSnapshot()->curcid)
				return false;
			*job = issued[i].job;
			return true;
		}
	return false;
}
