/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  fence_guard(), the row trigger that makes a protected table check
 *	  every write's fencing token itself; the after form's UPDATE check,
 *	  fence_update_allowed() and fence_guard_after() (see "The after form"
 *	  below); and fence_refuse_truncate().
 *
 * fence_guard([epoch_column [, mode]]) runs BEFORE INSERT OR UPDATE OR
 * DELETE FOR EACH ROW, after every other BEFORE ROW trigger (it checks the
 * row that will really be written).  For each row it:
 *
 *	1. finds the write's token: the one bound by fence_begin before the
 *	   statement began, or the value the statement itself writes into the
 *	   epoch column (on UPDATE only if the SET list assigns it, per
 *	   tg_updatedcols; on INSERT any value but 0 or NULL; on the DELETE half
 *	   of a row moving partitions, the UPDATE's).  None: 5F003, also when
 *	   the only binding was made while the statement ran, by a function it
 *	   calls (xact.c).  Both, and different: 5F004, except an INSERT under a
 *	   binding whose epoch is below the bound token: copied rows, stamped.
 *	2. asks the arbiter whether the token is its job's current claim, under
 *	   the token's lock (token.c).  Superseded: 5F001; never issued: 5G002,
 *	   the caller's bug (claims.c).
 *	   The answer holds until the transaction ends, so it is asked once per
 *	   transaction and remembered (xact.c); later rows compare one number.
 *	   A token this transaction claimed during the very statement being
 *	   guarded (a BEFORE trigger laundering a write) is refused: 5F004.
 *	3. compares the token with the row's stored epoch: strict mode needs it
 *	   greater, repeat mode at least equal, shared mode does not compare.
 *	   Failing: 5F002; in strict mode, a row that holds the token itself
 *	   (this execution wrote it already): 5G003, the caller's bug.
 *	4. stamps the epoch column with the token, unless the statement already
 *	   wrote it there, in which case the row is returned as it is.
 *
 * One writer passes without a token: logical replication applying a change
 * the publisher already arbitrated, by a subscription (or an origin
 * session) of a superuser's or of a role fence_grant_replication trusts
 * with the table (guard_applying_replicated).  The row is written as it
 * arrived, its epoch the publisher's.
 *
 * Steps 1 to 3 are one function, guard_check_write, of plain values (a
 * GuardRow: the event, the epoch written and whether the statement writes
 * it, the epoch the row held); fence_guard reads those from its tuples
 * (guard_read_row) and does step 4 itself.  The rules read no tuple and no
 * trigger, so a check that is not a trigger can make the same decision
 * with the same errors.
 *
 * What does not change within a statement (the column's number, the mode,
 * whether another trigger fires after the guard) is worked out on the first
 * row and kept in fn_extra, which lives as long as the statement.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/sysattr.h"
#include "catalog/partition.h"
#include "catalog/pg_subscription.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "replication/logicalworker.h"
#include "replication/origin.h"
#include "replication/worker_internal.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(fence_guard);
PG_FUNCTION_INFO_V1(fence_refuse_truncate);
PG_FUNCTION_INFO_V1(fence_update_allowed);
PG_FUNCTION_INFO_V1(fence_guard_after);
PG_FUNCTION_INFO_V1(fence_inline_guard);
PG_FUNCTION_INFO_V1(fence_inline_stamp);
PG_FUNCTION_INFO_V1(fence_inline_delete);

/* Per-statement facts about one guard trigger, kept in fn_extra. */
typedef struct GuardConfig
{
	Oid			tgoid;			/* the trigger this was worked out for */
	AttrNumber	attnum;			/* the epoch column */
	FenceMode	mode;
	bool		order_checked[3];	/* fires-last checked for I, U, D */
} GuardConfig;

#define GUARD_HINT \
	"Attach the guard with fence_protect(), which creates it BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW."

/*
 * Reject any way of firing the guard but the one it is built for, in the
 * manner of ri_CheckTrigger.
 */
static void
guard_check_trigger(FunctionCallInfo fcinfo)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						"fence_guard"),
				 errhint(GUARD_HINT)));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired BEFORE ... FOR EACH ROW",
						"fence_guard"),
				 errhint(GUARD_HINT)));
	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired for INSERT, UPDATE or DELETE",
						"fence_guard"),
				 errhint(GUARD_HINT)));
}

/* Index into order_checked[] for the event being fired. */
static int
guard_event_index(TriggerEvent event)
{
	if (TRIGGER_FIRED_BY_INSERT(event))
		return 0;
	if (TRIGGER_FIRED_BY_UPDATE(event))
		return 1;
	return 2;
}

/*
 * Would the trigger fire in this session?  The same test as trigger.c's
 * TriggerEnabled, less the WHEN clause: a trigger that may fire counts.
 */
static bool
guard_trigger_may_fire(Trigger *trigger)
{
	if (trigger->tgenabled == TRIGGER_DISABLED)
		return false;
	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return trigger->tgenabled != TRIGGER_FIRES_ON_ORIGIN;
	return trigger->tgenabled != TRIGGER_FIRES_ON_REPLICA;
}

/*
 * The guard must fire last among the BEFORE ROW triggers for this event:
 * one firing after it could rewrite the row it has just checked and
 * stamped.  Triggers fire in name order, the order of trigdesc.
 */
static void
guard_check_fires_last(TriggerData *trigdata)
{
	TriggerDesc *trigdesc = trigdata->tg_relation->trigdesc;
	TriggerEvent event = trigdata->tg_event & TRIGGER_EVENT_OPMASK;
	int16		event_type;
	bool		after_guard = false;
	int			i;

	event_type = (event == TRIGGER_EVENT_INSERT) ? TRIGGER_TYPE_INSERT :
		(event == TRIGGER_EVENT_UPDATE) ? TRIGGER_TYPE_UPDATE : TRIGGER_TYPE_DELETE;

	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (trigger->tgoid == trigdata->tg_trigger->tgoid)
		{
			after_guard = true;
			continue;
		}
		if (!after_guard ||
			!TRIGGER_TYPE_MATCHES(trigger->tgtype, TRIGGER_TYPE_ROW,
								  TRIGGER_TYPE_BEFORE, event_type) ||
			!guard_trigger_may_fire(trigger))
			continue;

		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" on table \"%s\" fires after the fence guard \"%s\"",
						trigger->tgname,
						RelationGetRelationName(trigdata->tg_relation),
						trigdata->tg_trigger->tgname),
				 errdetail("Triggers fire in name order, and a BEFORE ROW trigger firing after the guard could change the row the guard has checked."),
				 errhint("Rename trigger \"%s\" so that its name sorts before \"%s\".",
						 trigger->tgname, trigdata->tg_trigger->tgname)));
	}
}

/*
 * Refuse every write while a trigger of fence's is not ENABLE ALWAYS: it
 * would be skipped under session_replication_role = replica.  That happens
 * when ENABLE TRIGGER ALL follows DISABLE TRIGGER ALL (as pg_restore
 * --disable-triggers does): fail closed until the table is protected
 * again, rather than guard it in one session role only.
 */
static void
guard_refuse_not_always(Trigger *trigger, Relation rel)
{
	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("fence guard \"%s\" on table \"%s\" is not enabled ALWAYS",
					trigger->tgname, RelationGetRelationName(rel)),
			 errdetail("Under session_replication_role = replica it would not fire."),
			 errhint("Run fence_protect() on the table again.")));
}

/*
 * Work out the trigger's arguments for this statement: the epoch column
 * (default writer_epoch, a bigint) and the mode (default strict).
 */
static GuardConfig *
guard_config(FunctionCallInfo fcinfo)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	GuardConfig *cfg = (GuardConfig *) fcinfo->flinfo->fn_extra;
	const char *colname = FENCE_DEFAULT_EPOCH_COLUMN;
	const char *modename = fence_mode_name(FENCE_DEFAULT_MODE);
	int			attnum;
	int			ev;

	if (cfg == NULL || cfg->tgoid != trigger->tgoid)
	{
		if (trigger->tgnargs > 2)
			ereport(ERROR,
					(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
					 errmsg("function \"%s\" takes at most two trigger arguments",
							"fence_guard"),
					 errhint(GUARD_HINT)));
		if (trigger->tgnargs >= 1)
			colname = trigger->tgargs[0];
		if (trigger->tgnargs >= 2)
			modename = trigger->tgargs[1];

		attnum = SPI_fnumber(RelationGetDescr(rel), colname);
		if (attnum == SPI_ERROR_NOATTRIBUTE || attnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of relation \"%s\" does not exist",
							colname, RelationGetRelationName(rel))));
		if (SPI_gettypeid(RelationGetDescr(rel), attnum) != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of relation \"%s\" is not of type bigint",
							colname, RelationGetRelationName(rel)),
					 errhint("Change its type: ALTER TABLE %s ALTER COLUMN %s TYPE bigint;",
							 fence_rel_query_name(RelationGetRelid(rel)),
							 quote_identifier(colname))));

		cfg = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(GuardConfig));
		cfg->mode = fence_mode_parse(modename);
		cfg->tgoid = trigger->tgoid;
		cfg->attnum = (AttrNumber) attnum;
		fcinfo->flinfo->fn_extra = cfg;
	}

	/* A guard that is merely ENABLE'd fails closed (see the function). */
	if (trigger->tgenabled != TRIGGER_FIRES_ALWAYS)
		guard_refuse_not_always(trigger, rel);

	ev = guard_event_index(trigdata->tg_event);
	if (TRIGGER_FIRED_BEFORE(trigdata->tg_event) && !cfg->order_checked[ev])
	{
		guard_check_fires_last(trigdata);
		cfg->order_checked[ev] = true;
	}
	return cfg;
}

/* relid and the partitioned tables it belongs to, nearest first. */
static List *
guard_lineage(Oid relid)
{
	List	   *rels = list_make1_oid(relid);

	if (get_rel_relispartition(relid))
		rels = list_concat(rels, get_partition_ancestors(relid));
	return rels;
}

/*
 * Is a relation of rels (guard_lineage) replicated by this subscription
 * (syncrelid invalid), or the table being synchronised?
 */
static bool
guard_subscribed(List *rels, Oid subid, Oid syncrelid)
{
	ListCell   *lc;

	foreach(lc, rels)
	{
		Oid			candidate = lfirst_oid(lc);

		if (OidIsValid(syncrelid) ? candidate == syncrelid :
			SearchSysCacheExists2(SUBSCRIPTIONRELMAP,
								  ObjectIdGetDatum(candidate),
								  ObjectIdGetDatum(subid)))
			return true;
	}
	return false;
}

/*
 * Is a relation of rels (guard_lineage) granted to roleid for replication
 * (fence_grant_replication)?
 */
static bool
guard_replication_granted(Oid fn_oid, List *rels, Oid roleid)
{
	FenceCatalog *cat = fence_catalog(fn_oid);
	ListCell   *lc;

	foreach(lc, rels)
	{
		if (fence_replication_granted(cat, lfirst_oid(lc), roleid))
			return true;
	}
	return false;
}

/*
 * Is this write logical replication applying a change to the relation it
 * replicates, by a writer fence trusts?  The publisher's guard arbitrated
 * the change; the subscriber must apply changes in the publisher's commit
 * order, and one it refused would stop the subscription for good (the
 * apply worker retries forever while the publisher's slot holds WAL).
 *
 * A logical-replication writer is a built-in apply or table-sync worker, or
 * a session with a replication origin set up (pg_replication_origin_session_setup,
 * superuser or an explicit grant; pglogical's apply worker writes this way).
 * Never a session that merely sets session_replication_role: any role may
 * do that for itself.  Only the write the worker itself makes, seen at
 * trigger depth depth (1 in a row trigger, 0 in a WHEN clause): a trigger
 * firing in the worker that writes another protected table is guarded like
 * any other writer.  A built-in worker's write must
 * also be to a table of its subscription (the table-sync worker's own table
 * during the initial copy), or a partition of one.
 *
 * The trust is the writer's role's, not the process's: the subscription's
 * owner for a built-in worker (whoever the apply runs as: on 16 and later
 * a role with pg_create_subscription can own one, publishing from a server
 * it controls), the session user for an origin session.  A superuser is
 * trusted; any other role only where fence_grant_replication granted it
 * the table, or a partitioned table the table belongs to.  An untrusted
 * writer is guarded like any other: its apply stops at the first row
 * without a current token, and nothing lands unchecked.
 */
static bool
guard_applying_replicated(Oid fn_oid, Oid relid, int depth)
{
	bool		builtin = IsLogicalWorker();
	List	   *rels = NIL;
	Oid			writer;
	bool		trusted;

	if (!builtin && replorigin_session_origin_compat() == InvalidReplOriginId)
		return false;
	if (fence_trigger_depth() != depth)
		return false;
	if (builtin)
	{
		rels = guard_lineage(relid);
		if (!guard_subscribed(rels, MySubscription->oid,
							  am_tablesync_worker() ? MyLogicalRepWorker->relid : InvalidOid))
		{
			list_free(rels);
			return false;
		}
		writer = MySubscription->owner;
	}
	else
		writer = GetSessionUserId();
	if (superuser_arg(writer))
		trusted = true;
	else
	{
		if (rels == NIL)
			rels = guard_lineage(relid);
		trusted = guard_replication_granted(fn_oid, rels, writer);
	}
	list_free(rels);
	return trusted;
}

/* Which row event a write is, as the guard's rules see it. */
typedef enum GuardEvent
{
	GUARD_INSERT,
	GUARD_UPDATE,
	GUARD_DELETE
} GuardEvent;

/*
 * One row's write, as plain values: what guard_check_write() decides from.
 * fence_guard reads it from the trigger's tuples (guard_read_row); nothing
 * in the rules looks at a tuple, a TriggerData or a relation, so any caller
 * that knows these values gets the trigger's decision and its errors.
 */
typedef struct GuardRow
{
	Oid			relid;			/* the relation written */
	const char *colname;		/* its epoch column, for messages */
	FenceMode	mode;
	GuardEvent	event;
	bool		after_form;		/* a DELETE checked for the after form */
	bool		writes_epoch;	/* the statement writes the epoch column:
								 * INSERT, a value but 0 or NULL; UPDATE,
								 * the SET list assigns it */
	int64		epoch;			/* ... this value (0 for NULL) */
	bool		epoch_isnull;	/* ... which is NULL */
	bool		has_old;		/* UPDATE, DELETE: the row written before */
	int64		old_epoch;		/* ... its epoch (0 for NULL) */
	bool		old_isnull;		/* ... which is NULL */
	int64		moving_token;	/* DELETE: the token of the UPDATE moving
								 * this row to another partition, or 0 */
} GuardRow;

/* What the rules decided about one write, and why. */
typedef struct GuardWrite
{
	bool		has_stmt_token; /* the statement writes a token ... */
	int64		stmt_token;		/* ... this one (0 for NULL) */
	bool		stmt_token_null;	/* ... which is NULL */
	const char *bound_job;		/* the job fence_begin bound, or NULL */
	int64		bound_token;	/* ... and its token, 0 if none */
	int64		late_token;		/* a binding made during the statement */
	const char *late_job;		/* ... and its job (no token for it) */
	int64		token;			/* the write's token */
	const char *job;			/* its job, once the arbiter has said */
} GuardWrite;

/* The name of the epoch column, for messages. */
static const char *
guard_column_name(TriggerData *trigdata, GuardConfig *cfg)
{
	return NameStr(TupleDescAttr(RelationGetDescr(trigdata->tg_relation),
								 cfg->attnum - 1)->attname);
}

/*
 * The relation's name, for messages.  The after form's WHEN clause is also
 * evaluated for the partitioned table of an UPDATE that moves a row to
 * another partition, with no tableoid in its NEW row.
 */
static const char *
guard_rel_name(Oid relid)
{
	const char *name = OidIsValid(relid) ? get_rel_name(relid) : NULL;

	return name ? name : "(a partitioned table)";
}

/* 5F004: the statement writes NULL, 0 or a negative number as its token. */
static void
guard_refuse_invalid_token(const char *colname, bool isnull, int64 value)
{
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
			 isnull ? errmsg("invalid fencing token NULL") :
			 errmsg("invalid fencing token " INT64_FORMAT, value),
			 errdetail("The statement sets column \"%s\" to %s; fence_claim issues only positive tokens.",
					   colname, isnull ? "NULL" : "a value that is not positive"),
			 errhint(FENCE_STOP_HINT)));
}

/*
 * 5F003: the write's only token is a binding made while its own statement
 * ran.  A function the statement calls bound it after the statement had
 * begun without a token: it covers the statements after it, not this one
 * (xact.c).  The write carries no token, as it would without the binding;
 * the message says where the binding came from.
 */
static void
guard_refuse_bound_in_statement(const char *relname, GuardWrite *w)
{
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_NO_TOKEN)),
			 w->late_job ?
			 errmsg("fencing token " INT64_FORMAT " of job \"%s\" was bound during the statement that writes \"%s\"",
					w->late_token, w->late_job, relname) :
			 errmsg("fresh fencing token " INT64_FORMAT " was bound during the statement that writes \"%s\"",
					w->late_token, relname),
			 errdetail("A binding made while a statement runs, by a function the statement calls (from a WHEN clause, a default, a constraint, a policy or a CTE, say), covers only the statements after it; this write carries no token of its own."),
			 w->late_job ?
			 errhint("Call fence_begin in the transaction before the statement that writes.") :
			 errhint("Call fence_begin_fresh in the transaction before the statement that writes.")));
}

/*
 * Step 1: where the write's token comes from.  The statement's own value
 * (INSERT: any but 0 or NULL; UPDATE: only if the SET list assigns the
 * column, since a repeat-mode write may set the same value again; the
 * DELETE half of a row moving partitions: the UPDATE's), or the binding in
 * force when the statement began.  Both and different, or neither:
 * refused.
 */
static void
guard_decide_token(const GuardRow *row, GuardWrite *w)
{
	memset(w, 0, sizeof(*w));
	if (row->writes_epoch)
	{
		w->has_stmt_token = true;
		w->stmt_token = row->epoch;
		w->stmt_token_null = row->epoch_isnull;
	}

	w->bound_token = fence_xact_statement_binding(&w->bound_job,
												  &w->late_token, &w->late_job);

	/*
	 * Rows copied from elsewhere in the table carry their old epoch into an
	 * INSERT (pg_partman moving rows out of a default partition: DELETE ...
	 * RETURNING feeding an INSERT).  Under a binding, an inserted epoch below
	 * the bound token is such a copy, not a second token: the row is stamped
	 * with the bound token, which the arbiter checks as usual.  A higher
	 * epoch is still another token.
	 */
	if (w->has_stmt_token && row->event == GUARD_INSERT && w->bound_token != 0 &&
		w->stmt_token > 0 && w->stmt_token < w->bound_token)
		w->has_stmt_token = false;

	/* The DELETE half of a row moving partitions carries the UPDATE's token. */
	if (row->event == GUARD_DELETE && w->bound_token == 0)
	{
		w->stmt_token = row->moving_token;
		w->has_stmt_token = (w->stmt_token != 0);
	}

	if (w->has_stmt_token && w->bound_token != 0 && w->stmt_token != w->bound_token)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
				 w->bound_job ?
				 errmsg("write to \"%s\" carries a fencing token other than token " INT64_FORMAT " of job \"%s\"",
						guard_rel_name(row->relid),
						w->bound_token, w->bound_job) :
				 errmsg("write to \"%s\" carries a fencing token other than fresh token " INT64_FORMAT,
						guard_rel_name(row->relid), w->bound_token),
				 w->bound_job ?
				 errdetail("The statement sets column \"%s\" to " INT64_FORMAT ", but the transaction is bound to token " INT64_FORMAT " of job \"%s\".",
						   row->colname,
						   w->stmt_token, w->bound_token, w->bound_job) :
				 errdetail("The statement sets column \"%s\" to " INT64_FORMAT ", but the transaction is bound to token " INT64_FORMAT ".",
						   row->colname,
						   w->stmt_token, w->bound_token),
				 errhint(FENCE_STOP_HINT)));
	if (!w->has_stmt_token && w->bound_token == 0 && w->late_token != 0)
		guard_refuse_bound_in_statement(guard_rel_name(row->relid), w);
	if (!w->has_stmt_token && w->bound_token == 0)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_NO_TOKEN)),
				 errmsg("write to \"%s\" carries no fencing token",
						guard_rel_name(row->relid)),
				 row->event == GUARD_DELETE && row->after_form ?
				 errdetail("The table is protected by fence in the after form: a DELETE, like an UPDATE moving a row to another partition (which deletes it from the old one), carries a token only through fence_begin, and none is bound to the transaction.") :
				 errdetail("The table is protected by fence; the statement does not set column \"%s\" and no token is bound to the transaction.",
						   row->colname),
				 errhint("Call fence_begin(job, token) first, in the same transaction block (outside one, its binding ends with its own statement), or write the job's token into column \"%s\".  A writer that is not a job (a migration, a repair) calls fence_begin_fresh() instead.",
						 row->colname)));

	w->token = w->has_stmt_token ? w->stmt_token : w->bound_token;
	if (w->token <= 0)
		guard_refuse_invalid_token(row->colname, w->stmt_token_null, w->token);
}

/*
 * Step 2: the arbiter.  Is the token its job's current claim, and does it
 * stay so?  Asked once per token per transaction (and catalog generation);
 * later rows find the answer in xact.c and compare one number.
 */
static void
guard_ask_arbiter(Oid fn_oid, Oid relid, GuardWrite *w)
{
	FenceCatalog *cat = fence_catalog(fn_oid);
	const char *minted_job;

	/*
	 * A token this transaction claimed during the very statement being
	 * guarded cannot vouch for it: a BEFORE trigger that claims a job and
	 * writes the token into NEW would otherwise launder any write, stale or
	 * not.  (fence_renew and fence_release of it change nothing here.)
	 */
	if (fence_xact_issued_in_statement(w->token, &minted_job))
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
				 minted_job ?
				 errmsg("fencing token " INT64_FORMAT " of job \"%s\" was issued during the statement that writes \"%s\" with it",
						w->token, minted_job, guard_rel_name(relid)) :
				 errmsg("fencing token " INT64_FORMAT " was issued during the statement that writes \"%s\" with it",
						w->token, guard_rel_name(relid)),
				 errdetail("A token claimed while a statement runs, by a trigger for example, cannot vouch for that statement."),
				 errhint("Claim the job in an earlier statement, then write with its token.")));

	if (!fence_xact_token_validated(w->token, cat->generation, &w->job))
		w->job = fence_hold_token(cat, w->token,
								  w->token == w->bound_token ? w->bound_job : NULL);
}

/*
 * Step 3: the row.  No execution may write over a newer one's row: strict
 * mode needs a token greater than the stored epoch, repeat mode at least
 * equal, shared mode does not compare (tokens of different jobs carry no
 * order; the arbiter alone keeps stale writers out).
 */
static void
guard_check_stored(Oid fn_oid, Oid relid, const char *colname,
				   FenceMode mode, GuardWrite *w, int64 stored)
{
	int64		last_issued;

	if (mode == FENCE_MODE_SHARED ||
		(mode == FENCE_MODE_STRICT ? w->token > stored : w->token >= stored))
		return;

	/*
	 * The row holds this very token: this execution wrote it already.  Not
	 * fencing (no newer execution is in the way) but the caller's choice of
	 * mode, so class 5G, not 5F: a handler that writes a row twice (mark
	 * running, then mark done) needs repeat mode.
	 */
	if (mode == FENCE_MODE_STRICT && w->token == stored)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_WRITTEN_BY_SELF),
				 w->job ?
				 errmsg("this execution already wrote this row of \"%s\" with fencing token " INT64_FORMAT " of job \"%s\"",
						guard_rel_name(relid), w->token, w->job) :
				 errmsg("this execution already wrote this row of \"%s\" with fresh fencing token " INT64_FORMAT,
						guard_rel_name(relid), w->token),
				 errdetail("Column \"%s\" holds " INT64_FORMAT ", the token this write carries; strict mode allows one write per execution per row.",
						   colname, stored),
				 errhint("A handler that writes a row more than once needs the table protected with mode => 'repeat' (fence_protect(tbl, mode => 'repeat')).  This is a bug in the caller, not a fenced write.")));

	/* An epoch no token of this counter wrote: a restore, or a copy. */
	last_issued = fence_last_token_issued(fence_catalog(fn_oid));
	if (stored > last_issued)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_ROW_NEWER)),
				 errmsg("row of \"%s\" holds epoch " INT64_FORMAT " from the future: fence has issued no token that high",
						guard_rel_name(relid), stored),
				 errdetail("Column \"%s\" holds " INT64_FORMAT "; the last token issued is " INT64_FORMAT ".",
						   colname, stored, last_issued),
				 errhint("After a restore, or rows copied from another database, a superuser runs SELECT fence_advance(); see \"Reset and restore hazards\" in doc/fence.md.")));

	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_ROW_NEWER)),
			 w->job ?
			 errmsg("row of \"%s\" is newer than fencing token " INT64_FORMAT " of job \"%s\"",
					guard_rel_name(relid), w->token, w->job) :
			 errmsg("row of \"%s\" is newer than fresh fencing token " INT64_FORMAT,
					guard_rel_name(relid), w->token),
			 errdetail("Column \"%s\" holds " INT64_FORMAT "; in %s mode a write needs a token %s it.",
					   colname, stored,
					   fence_mode_name(mode),
					   mode == FENCE_MODE_STRICT ? "greater than" : "no lower than"),
			 errhint(FENCE_STOP_HINT)));
}

/*
 * The guard's rules for one write, steps 1 to 3: the token it carries,
 * the arbiter's answer, the row's stored epoch.  Raises the guard's error,
 * or leaves in w the token the row is to hold.
 */
static void
guard_check_write(Oid fn_oid, const GuardRow *row, GuardWrite *w)
{
	guard_decide_token(row, w);
	guard_ask_arbiter(fn_oid, row->relid, w);
	if (row->has_old && !row->old_isnull && row->mode != FENCE_MODE_SHARED)
		guard_check_stored(fn_oid, row->relid, row->colname, row->mode, w,
						   row->old_epoch);
}

/* The write a guard trigger fired for, as guard_check_write reads it. */
static void
guard_read_row(TriggerData *trigdata, GuardConfig *cfg, GuardRow *row)
{
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	Datum		datum;
	bool		isnull;

	memset(row, 0, sizeof(*row));
	row->relid = RelationGetRelid(trigdata->tg_relation);
	row->colname = guard_column_name(trigdata, cfg);
	row->mode = cfg->mode;
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		row->event = GUARD_INSERT;
		datum = heap_getattr(trigdata->tg_trigtuple, cfg->attnum, tupdesc, &isnull);
		row->writes_epoch = !isnull && DatumGetInt64(datum) != 0;
		row->epoch = isnull ? 0 : DatumGetInt64(datum);
		return;
	}

	row->has_old = true;
	datum = heap_getattr(trigdata->tg_trigtuple, cfg->attnum, tupdesc, &isnull);
	row->old_epoch = isnull ? 0 : DatumGetInt64(datum);
	row->old_isnull = isnull;
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		row->event = GUARD_UPDATE;
		if (bms_is_member(cfg->attnum - FirstLowInvalidHeapAttributeNumber,
						  trigdata->tg_updatedcols))
		{
			row->writes_epoch = true;
			datum = heap_getattr(trigdata->tg_newtuple, cfg->attnum, tupdesc, &isnull);
			row->epoch = isnull ? 0 : DatumGetInt64(datum);
			row->epoch_isnull = isnull;
		}
	}
	else
	{
		row->event = GUARD_DELETE;
		row->after_form = !TRIGGER_FOR_UPDATE(trigdata->tg_trigger->tgtype);
		row->moving_token = fence_xact_moving_row_token(row->relid,
														&trigdata->tg_trigtuple->t_self);
	}
}

/*
 * Step 4: the row to write.  Stamp the epoch column with the token, unless
 * the statement already wrote it there.  An UPDATE that carried its own
 * token notes it, in case the row is moving to another partition.
 */
static HeapTuple
guard_stamp(TriggerData *trigdata, GuardConfig *cfg, GuardWrite *w)
{
	Datum		value = Int64GetDatum(w->token);
	bool		value_isnull = false;
	int			attnum = cfg->attnum;

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		return trigdata->tg_trigtuple;
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		if (w->has_stmt_token)
			return trigdata->tg_trigtuple;
		return heap_modify_tuple_by_cols(trigdata->tg_trigtuple,
										 RelationGetDescr(trigdata->tg_relation),
										 1, &attnum, &value, &value_isnull);
	}
	if (w->has_stmt_token && w->bound_token == 0)
		fence_xact_note_update(RelationGetRelid(trigdata->tg_relation),
							   &trigdata->tg_trigtuple->t_self, w->token);
	if (w->has_stmt_token)
		return trigdata->tg_newtuple;
	return heap_modify_tuple_by_cols(trigdata->tg_newtuple,
									 RelationGetDescr(trigdata->tg_relation),
									 1, &attnum, &value, &value_isnull);
}

Datum
fence_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	GuardConfig *cfg;			/* per-statement facts */
	GuardRow	row;			/* this row's write */
	GuardWrite	w;				/* ... and what the rules made of it */

	guard_check_trigger(fcinfo);
	if (guard_applying_replicated(fcinfo->flinfo->fn_oid, RelationGetRelid(trigdata->tg_relation), 1))
		return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
							   trigdata->tg_newtuple : trigdata->tg_trigtuple);
	cfg = guard_config(fcinfo);

	guard_read_row(trigdata, cfg, &row);
	guard_check_write(fcinfo->flinfo->fn_oid, &row, &w);
	return PointerGetDatum(guard_stamp(trigdata, cfg, &w));
}

/*
 * The after form (fence_protect(..., form => 'after')).
 *
 * A BEFORE ROW UPDATE trigger, any at all, costs a row lock: trigger.c's
 * GetTupleForTrigger locks the old row (one XLOG_HEAP_LOCK record per row)
 * before the trigger or its WHEN clause runs.  An AFTER ROW trigger reads
 * the old row without one, and trigger.c evaluates its WHEN clause as the
 * row is written (AfterTriggerSaveEvent), queueing nothing when it is
 * false.  So the after form checks UPDATEs in the WHEN clause of an AFTER
 * UPDATE trigger, zz_fence_guard_update:
 *
 *	WHEN (NOT fence_update_allowed(NEW.col, OLD.col, NEW.tableoid, 'col', 'mode'))
 *	EXECUTE FUNCTION fence_guard_after('col', 'mode')
 *
 * fence_update_allowed() makes the guard's checks on the values as
 * written and raises the 5F error itself, at the row, so the WHEN clause
 * is false for every write it lets through and the trigger never fires.
 * fence_guard_after(), the body, makes the same check again if it ever
 * does fire (its WHEN clause removed by declared DDL, say).  INSERT and
 * DELETE stay with zz_fence_guard, BEFORE INSERT OR DELETE: an INSERT
 * locks nothing anyway, and keeps its stamping.
 *
 * What the WHEN clause cannot see is which columns the SET list assigned:
 * an UPDATE that leaves the epoch alone looks like one that assigns it the
 * value it holds.  So the after form does not stamp, and reads an
 * unchanged epoch as no token at all (5F003): the statement writes its
 * token into the epoch column; under fence_begin, that token.  It refuses
 * what the BEFORE guard would stamp, and a write that carries, as its
 * statement's token, the very token the row holds (a repeat-mode or
 * shared-mode write again by the same execution), which passes under
 * fence_begin (called before the statement began, as for the BEFORE
 * guard).  A row moving to another partition is deleted and inserted
 * before any AFTER UPDATE trigger could see it: its DELETE half finds no
 * token unless one is bound.
 */

/* Per-statement facts about one after-form check, kept in fn_extra. */
typedef struct AfterCheckConfig
{
	Oid			relid;			/* the relation this was worked out for */
	FenceMode	mode;
} AfterCheckConfig;

#define AFTER_HINT \
	"Attach the guard with fence_protect(..., form => 'after'), which creates it AFTER UPDATE FOR EACH ROW."

/*
 * Fail closed while the relation's after-form trigger is not ENABLE
 * ALWAYS, as guard_config does for the guard.  (Called directly, with no
 * such trigger, the function only answers.)
 */
static void
guard_after_check_enabled(Oid fn_oid, Oid relid)
{
	Oid			body_fn = fence_find_function(get_func_namespace(fn_oid),
											  "fence_guard_after", 0, NULL);
	Relation	rel;
	TriggerDesc *trigdesc;
	int			i;

	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	rel = relation_open(relid, AccessShareLock);
	trigdesc = rel->trigdesc;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (trigger->tgfoid == body_fn && trigger->tgenabled != TRIGGER_FIRES_ALWAYS)
			guard_refuse_not_always(trigger, rel);
	}
	relation_close(rel, AccessShareLock);
}

/*
 * The after form's check of one UPDATE, from the epoch as written and as
 * it was: steps 1 to 3 of the guard, raising the same errors.
 */
static void
guard_check_update(Oid fn_oid, Oid relid, const char *colname, FenceMode mode,
				   bool new_isnull, int64 new_epoch, bool old_isnull, int64 old_epoch)
{
	GuardWrite	w;
	bool		unchanged = new_isnull ? old_isnull :
		(!old_isnull && new_epoch == old_epoch);

	memset(&w, 0, sizeof(w));
	w.bound_token = fence_xact_statement_binding(&w.bound_job,
												 &w.late_token, &w.late_job);

	/* Step 1, without stamping: the epoch as written is the token. */
	if (w.bound_token != 0 && unchanged &&
		(new_isnull || new_epoch != w.bound_token))
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_NO_TOKEN)),
				 errmsg("write to \"%s\" does not write its fencing token into column \"%s\"",
						guard_rel_name(relid), colname),
				 new_isnull ?
				 errdetail("The table's guard is the after form, which checks the row as written and does not stamp it; the row keeps NULL, and the transaction is bound to token " INT64_FORMAT ".",
						   w.bound_token) :
				 errdetail("The table's guard is the after form, which checks the row as written and does not stamp it; the row keeps " INT64_FORMAT ", and the transaction is bound to token " INT64_FORMAT ".",
						   new_epoch, w.bound_token),
				 errhint("Set the column in the statement: SET %s = " INT64_FORMAT ".",
						 quote_identifier(colname), w.bound_token)));
	if (w.bound_token != 0 && (new_isnull || new_epoch != w.bound_token))
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_INVALID_TOKEN)),
				 w.bound_job ?
				 errmsg("write to \"%s\" carries a fencing token other than token " INT64_FORMAT " of job \"%s\"",
						guard_rel_name(relid), w.bound_token, w.bound_job) :
				 errmsg("write to \"%s\" carries a fencing token other than fresh token " INT64_FORMAT,
						guard_rel_name(relid), w.bound_token),
				 new_isnull ?
				 errdetail("The statement sets column \"%s\" to NULL, but the transaction is bound to token " INT64_FORMAT ".",
						   colname, w.bound_token) :
				 errdetail("The statement sets column \"%s\" to " INT64_FORMAT ", but the transaction is bound to token " INT64_FORMAT ".",
						   colname, new_epoch, w.bound_token),
				 errhint(FENCE_STOP_HINT)));
	if (w.bound_token == 0 && unchanged && w.late_token != 0)
		guard_refuse_bound_in_statement(guard_rel_name(relid), &w);
	if (w.bound_token == 0 && unchanged)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_NO_TOKEN)),
				 errmsg("write to \"%s\" carries no fencing token",
						guard_rel_name(relid)),
				 errdetail("The table's guard is the after form, which sees only the row as written: the statement leaves column \"%s\" as it was, and no token is bound to the transaction.",
						   colname),
				 mode == FENCE_MODE_STRICT ?
				 errhint("Write the job's token into column \"%s\", or call fence_begin(job, token) first and write it there.",
						 colname) :
				 errhint("Write the job's token into column \"%s\", or call fence_begin(job, token) first and write it there (a write again with the token the row holds needs fence_begin).",
						 colname)));
	if (w.bound_token == 0 && (new_isnull || new_epoch <= 0))
		guard_refuse_invalid_token(colname, new_isnull, new_epoch);
	w.token = w.bound_token != 0 ? w.bound_token : new_epoch;

	/* Steps 2 and 3. */
	guard_ask_arbiter(fn_oid, relid, &w);
	if (!old_isnull)
		guard_check_stored(fn_oid, relid, colname, mode, &w, old_epoch);
}

/*
 * The arguments fence_update_allowed and the inline checks end with, from
 * argument first: (tbl oid, epoch_column name, mode text), none NULL.
 * Returns tbl.
 */
static Oid
guard_check_function_args(FunctionCallInfo fcinfo, int first)
{
	fence_require_arg(fcinfo, first, "table");
	fence_require_arg(fcinfo, first + 1, "epoch column");
	fence_require_arg(fcinfo, first + 2, "mode");
	return PG_GETARG_OID(first);
}

/*
 * fence_update_allowed(new_epoch bigint, old_epoch bigint, tbl oid,
 *						epoch_column name, mode text) returns boolean
 *
 * The WHEN clause of the after form's trigger: true when the UPDATE of the
 * row may stand; otherwise it raises the guard's error.  Any role may call
 * it: it answers what a write would be told, and holds the token's lock as
 * the write would (fence_begin does as much).
 */
Datum
fence_update_allowed(PG_FUNCTION_ARGS)
{
	AfterCheckConfig *cfg = (AfterCheckConfig *) fcinfo->flinfo->fn_extra;
	Oid			relid;
	FenceMode	mode;

	relid = guard_check_function_args(fcinfo, 2);

	if (guard_applying_replicated(fcinfo->flinfo->fn_oid, relid, 0))
		PG_RETURN_BOOL(true);

	/* The trigger's state, once per statement, relation and mode. */
	mode = fence_mode_parse_text(PG_GETARG_TEXT_PP(4));
	if (cfg == NULL || cfg->relid != relid || cfg->mode != mode)
	{
		if (cfg == NULL)
			cfg = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt,
										 sizeof(AfterCheckConfig));
		cfg->relid = InvalidOid;
		cfg->mode = mode;
		/* (no tableoid: the partitioned table of a row moving partitions) */
		if (OidIsValid(relid))
			guard_after_check_enabled(fcinfo->flinfo->fn_oid, relid);
		cfg->relid = relid;
		fcinfo->flinfo->fn_extra = cfg;
	}

	guard_check_update(fcinfo->flinfo->fn_oid, relid,
					   NameStr(*PG_GETARG_NAME(3)), cfg->mode,
					   PG_ARGISNULL(0), PG_ARGISNULL(0) ? 0 : PG_GETARG_INT64(0),
					   PG_ARGISNULL(1), PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1));
	PG_RETURN_BOOL(true);
}

/*
 * fence_guard_after([epoch_column [, mode]]) returns trigger
 *
 * The after form's trigger body, AFTER UPDATE FOR EACH ROW: the WHEN
 * clause's check, made again on the row.  It runs only if the WHEN clause
 * let a write through without raising, which the canonical one never does.
 */
Datum
fence_guard_after(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	GuardConfig *cfg;
	TupleDesc	tupdesc;
	Datum		new_epoch;
	Datum		old_epoch;
	bool		new_isnull;
	bool		old_isnull;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						"fence_guard_after"),
				 errhint(AFTER_HINT)));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired AFTER UPDATE ... FOR EACH ROW",
						"fence_guard_after"),
				 errhint(AFTER_HINT)));
	if (guard_applying_replicated(fcinfo->flinfo->fn_oid, RelationGetRelid(trigdata->tg_relation), 1))
		return PointerGetDatum(NULL);
	cfg = guard_config(fcinfo);

	tupdesc = RelationGetDescr(trigdata->tg_relation);
	new_epoch = heap_getattr(trigdata->tg_newtuple, cfg->attnum, tupdesc, &new_isnull);
	old_epoch = heap_getattr(trigdata->tg_trigtuple, cfg->attnum, tupdesc, &old_isnull);
	guard_check_update(fcinfo->flinfo->fn_oid, RelationGetRelid(trigdata->tg_relation),
					   guard_column_name(trigdata, cfg), cfg->mode,
					   new_isnull, new_isnull ? 0 : DatumGetInt64(new_epoch),
					   old_isnull, old_isnull ? 0 : DatumGetInt64(old_epoch));
	return PointerGetDatum(NULL);
}

/*
 * The inline form (inline.c).
 *
 * With fence preloaded, an UPDATE or DELETE of a table protected in the
 * before form may be planned with one of these checks in it, evaluated for
 * every row the statement writes, after every qual:
 *
 *	UPDATE that writes its token:
 *		SET col = fence_inline_guard(<col as it was>, <value written>, tbl, 'col', 'mode')
 *	UPDATE that leaves the column to the guard (under fence_begin):
 *		SET col = fence_inline_stamp(<col as it was>, tbl, 'col', 'mode')
 *	DELETE:
 *		a junk column fence_inline_delete(<col as it was>, ctid, tbl, 'col', 'mode')
 *
 * Each makes the guard's checks (guard_check_write, the very rules
 * fence_guard applies to the same write) and gives the value the row is to
 * hold: the statement's own, which the trigger leaves as it is; the token
 * the trigger would stamp; or, for a DELETE, true.  Where inline.c proves
 * the check is in the plan, it skips the trigger's event for that one
 * execution; otherwise both run, and the row is checked twice.  A stamped
 * column is not added to the statement's updated columns, as the trigger's
 * stamp is not: column privileges and UPDATE OF triggers see the statement
 * as written either way.
 */

/* Per-statement facts about one inline check, kept in fn_extra. */
typedef struct InlineCheckConfig
{
	Oid			relid;			/* the relation this was worked out for */
	FenceMode	mode;
	bool		mode_stable;	/* the mode argument is the same every call */
} InlineCheckConfig;

/*
 * The part the inline checks share: row's epochs and event are filled in,
 * the arguments from first are (tbl, epoch_column, mode).  Makes the
 * guard's checks and returns true, with the row's token in *token; or
 * false for a write logical replication applies, which passes as it
 * arrived.
 */
static bool
guard_inline_check(FunctionCallInfo fcinfo, int first, GuardRow *row,
				   int64 *token)
{
	InlineCheckConfig *cfg = (InlineCheckConfig *) fcinfo->flinfo->fn_extra;
	GuardWrite	w;

	row->relid = guard_check_function_args(fcinfo, first);

	/*
	 * The mode, parsed once per statement and relation when the argument is
	 * a constant (as in every check the planner builds); a hand-written call
	 * may pass another mode on every row.
	 */
	if (cfg == NULL || cfg->relid != row->relid || !cfg->mode_stable)
	{
		if (cfg == NULL)
			cfg = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt,
										 sizeof(InlineCheckConfig));
		cfg->relid = InvalidOid;
		cfg->mode = fence_mode_parse_text(PG_GETARG_TEXT_PP(first + 2));
		cfg->mode_stable = get_fn_expr_arg_stable(fcinfo->flinfo, first + 2);
		cfg->relid = row->relid;
		fcinfo->flinfo->fn_extra = cfg;
	}

	if (guard_applying_replicated(fcinfo->flinfo->fn_oid, row->relid, 0))
		return false;
	row->colname = NameStr(*PG_GETARG_NAME(first + 1));
	row->mode = cfg->mode;
	row->has_old = true;
	row->old_isnull = PG_ARGISNULL(0);
	row->old_epoch = row->old_isnull ? 0 : PG_GETARG_INT64(0);
	guard_check_write(fcinfo->flinfo->fn_oid, row, &w);
	*token = w.token;
	return true;
}

/*
 * fence_inline_guard(old_epoch bigint, new_epoch bigint, tbl oid,
 *					  epoch_column name, mode text) returns bigint
 * fence_inline_stamp(old_epoch bigint, tbl oid, epoch_column name,
 *					  mode text) returns bigint
 * fence_inline_delete(old_epoch bigint, row tid, tbl oid,
 *					   epoch_column name, mode text) returns boolean
 *
 * Any role may call them, as it may call fence_update_allowed(): they
 * answer what the write would be told (the value, or the guard's error),
 * holding the token's lock as the write would.  Called by hand they skip
 * nothing: only a check the planner hook built marks a plan (inline.c).
 */
Datum
fence_inline_guard(PG_FUNCTION_ARGS)
{
	GuardRow	row;
	int64		token;

	memset(&row, 0, sizeof(row));
	row.event = GUARD_UPDATE;
	row.writes_epoch = true;
	row.epoch_isnull = PG_ARGISNULL(1);
	row.epoch = row.epoch_isnull ? 0 : PG_GETARG_INT64(1);
	(void) guard_inline_check(fcinfo, 2, &row, &token);

	if (PG_ARGISNULL(1))
		PG_RETURN_NULL();
	PG_RETURN_INT64(PG_GETARG_INT64(1));
}

Datum
fence_inline_stamp(PG_FUNCTION_ARGS)
{
	GuardRow	row;
	int64		token;

	memset(&row, 0, sizeof(row));
	row.event = GUARD_UPDATE;
	if (guard_inline_check(fcinfo, 1, &row, &token))
		PG_RETURN_INT64(token);
	/* replicated: the trigger leaves the column as it was */
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	PG_RETURN_INT64(PG_GETARG_INT64(0));
}

Datum
fence_inline_delete(PG_FUNCTION_ARGS)
{
	GuardRow	row;
	int64		token;

	memset(&row, 0, sizeof(row));
	row.event = GUARD_DELETE;
	/* the before form: its trigger fires for UPDATE too (row.after_form) */
	if (!PG_ARGISNULL(1) && !PG_ARGISNULL(2))
		row.moving_token = fence_xact_moving_row_token(PG_GETARG_OID(2),
													   (ItemPointer) PG_GETARG_POINTER(1));
	(void) guard_inline_check(fcinfo, 2, &row, &token);
	PG_RETURN_BOOL(true);
}

/*
 * fence_refuse_truncate()
 *
 * BEFORE TRUNCATE trigger of a protected table.  TRUNCATE removes rows with
 * no row triggers at all, so no token could be checked against them.  A
 * TRUNCATE logical replication applies passes, as its rows do in the guard.
 */
Datum
fence_refuse_truncate(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired BEFORE TRUNCATE",
						"fence_refuse_truncate"),
				 errhint("fence_protect() attaches it.")));

	if (guard_applying_replicated(fcinfo->flinfo->fn_oid, RelationGetRelid(trigdata->tg_relation), 1))
		return PointerGetDatum(NULL);
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_TRUNCATE)),
			 errmsg("cannot truncate \"%s\" because it is protected by fence",
					RelationGetRelationName(trigdata->tg_relation)),
			 errdetail("TRUNCATE removes rows without checking a fencing token against them."),
			 errhint("Delete the rows inside a transaction that called fence_begin(), or remove the guard with fence_unprotect() first.")));
	PG_RETURN_NULL();			/* keep compiler quiet */
}
