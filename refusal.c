/*-------------------------------------------------------------------------
 *
 * refusal.c
 *	  What the DDL checks share: the refusal of a command on a protected
 *	  relation (5F006) unless it was declared, the test of a CREATE
 *	  TRIGGER of fence's function against what fence itself creates, and
 *	  the relations and triggers a command touched, read from
 *	  pg_event_trigger_ddl_commands().
 *
 * ddl.c (the event triggers) and follow.c (protection following the data)
 * both refuse and both inspect the command; these helpers sit below the
 * two, so that ddl.c dispatches into follow.c and neither calls back up
 * into the other.
 *
 * A declaration is fence_allow_ddl() in the transaction, or the session's
 * fence.allow_ddl (a superuser's setting), recorded in the audit log the
 * first time it lets a relation's DDL through in a transaction.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* fence.allow_ddl: a superuser's session declares its DDL (fence.c). */
bool		fence_allow_ddl_setting = false;

/* The relation a RangeVar names now, or InvalidOid. */
Oid
fence_rangevar_relid(RangeVar *rv)
{
	return rv ? RangeVarGetRelid(rv, NoLock, true) : InvalidOid;
}

/*
 * Is the relation's refused DDL declared, by fence_allow_ddl in this
 * transaction or by the session's fence.allow_ddl (recorded the first time
 * it lets a table's DDL through)?
 */
bool
fence_ddl_declared(FenceCatalog *cat, Oid relid, const char *command)
{
	if (fence_xact_ddl_allowed(relid))
		return true;
	if (fence_allow_ddl_setting)
	{
		if (!fence_xact_setting_recorded(relid))
		{
			fence_audit_log_append(cat, "allow_ddl_setting", relid, NULL, command,
								   "fence.allow_ddl = on");
			fence_xact_note_setting_recorded(relid);
		}
		return true;
	}
	return false;
}

/*
 * Refuse a command on a relation, unless it was declared; message is the
 * primary message (NULL: "cannot run <command> on protected table").
 */
void
fence_ddl_refuse_with(FenceCatalog *cat, Oid relid, const char *command,
					  const char *message, const char *why)
{
	bool		protected;

	if (fence_ddl_declared(cat, relid, command))
		return;
	protected = fence_protected_lookup(cat, relid, NULL);
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
			 message ? errmsg_internal("%s", message) :
			 errmsg("cannot run %s on protected table \"%s\"", command,
					fence_rel_display_name(relid)),
			 errdetail("%s", why),
			 protected ?
			 errhint("If this is intended, declare it first in the same transaction: SELECT fence_allow_ddl('%s', 'why'); or remove protection with fence_unprotect().",
					 fence_rel_query_name(relid)) :
			 errhint("Protect the table with fence_protect(), which creates fence's triggers.")));
}

/*
 * Refuse a CREATE TRIGGER of a trigger calling fence's function fnoid,
 * unless it was declared.
 */
void
fence_ddl_refuse_trigger(FenceCatalog *cat, Oid relid, const char *trigname,
						 Oid fnoid, const char *why)
{
	fence_ddl_refuse_with(cat, relid, "CREATE TRIGGER",
						  psprintf("cannot create trigger \"%s\" calling %s() on table \"%s\"",
								   trigname, get_func_name(fnoid),
								   fence_rel_display_name(relid)),
						  why);
}

/* Refuse a command on a protected relation, unless it was declared. */
void
fence_ddl_refuse(FenceCatalog *cat, Oid relid, const char *command, const char *why)
{
	fence_ddl_refuse_with(cat, relid, command, NULL, why);
}

/* Are a guard trigger's arguments a bigint column of the table and a mode? */
static bool
guard_args_ok(List *args, Oid relid)
{
	if (list_length(args) > 2)
		return false;
	if (list_length(args) >= 1)
	{
		AttrNumber	attnum = get_attnum(relid, strVal(linitial(args)));

		if (attnum <= 0 || get_atttype(relid, attnum) != INT8OID)
			return false;
	}
	if (list_length(args) == 2)
	{
		const char *mode = strVal(lsecond(args));

		if (!fence_mode_lookup(mode, NULL))
			return false;
	}
	return true;
}

/*
 * Is the CREATE TRIGGER of fence's function exactly what fence creates?
 * The after form's WHEN clause is compared once the trigger exists
 * (fence_after_when_is_canonical): here it need only have one.
 */
bool
fence_trigger_is_canonical(FenceCatalog *cat, CreateTrigStmt *stmt, Oid fnoid,
						   Oid relid)
{
	if (stmt->columns != NIL || stmt->isconstraint || stmt->transitionRels != NIL)
		return false;
	if (OidIsValid(cat->guard_after_fn) && fnoid == cat->guard_after_fn)
		return strcmp(stmt->trigname, FENCE_GUARD_UPDATE_TRIGGER) == 0 &&
			stmt->row && stmt->timing == TRIGGER_TYPE_AFTER &&
			stmt->events == TRIGGER_TYPE_UPDATE && stmt->whenClause != NULL &&
			guard_args_ok(stmt->args, relid);
	if (stmt->whenClause != NULL || stmt->timing != TRIGGER_TYPE_BEFORE)
		return false;
	if (fnoid == cat->refuse_truncate_fn)
		return strcmp(stmt->trigname, FENCE_TRUNCATE_TRIGGER) == 0 &&
			!stmt->row && stmt->events == TRIGGER_TYPE_TRUNCATE &&
			stmt->args == NIL;

	/* the guard: of the before form, or of the after form (no UPDATE) */
	return strcmp(stmt->trigname, FENCE_GUARD_TRIGGER) == 0 && stmt->row &&
		(stmt->events == (TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE) ||
		 (OidIsValid(cat->guard_after_fn) &&
		  stmt->events == (TRIGGER_TYPE_INSERT | TRIGGER_TYPE_DELETE))) &&
		guard_args_ok(stmt->args, relid);
}


static List *command_oids(SPIPlanPtr *plan, const char *query);

/*
 * A query of the relations in pg_event_trigger_ddl_commands(): the tables a
 * command created or altered (COMMAND_TABLES), or every relation it touched
 * (COMMAND_TOUCHED): those, and the relations of the triggers, defaults,
 * constraints and rules it created or altered, and the composite types it
 * altered.  Not read-only: the command's own catalog rows must be visible,
 * and the active snapshot predates them.
 */
#define COMMAND_TABLES \
	"SELECT DISTINCT c.objid" \
	"  FROM pg_catalog.pg_event_trigger_ddl_commands() c" \
	" WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass" \
	"   AND c.objsubid OPERATOR(pg_catalog.=) 0"
#define COMMAND_TOUCHED \
	"SELECT DISTINCT r.relid FROM (" \
	" SELECT CASE c.classid" \
	"   WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN c.objid" \
	"   WHEN 'pg_catalog.pg_trigger'::pg_catalog.regclass THEN (SELECT t.tgrelid" \
	"     FROM pg_catalog.pg_trigger t WHERE t.oid OPERATOR(pg_catalog.=) c.objid)" \
	"   WHEN 'pg_catalog.pg_attrdef'::pg_catalog.regclass THEN (SELECT d.adrelid" \
	"     FROM pg_catalog.pg_attrdef d WHERE d.oid OPERATOR(pg_catalog.=) c.objid)" \
	"   WHEN 'pg_catalog.pg_constraint'::pg_catalog.regclass THEN (SELECT k.conrelid" \
	"     FROM pg_catalog.pg_constraint k WHERE k.oid OPERATOR(pg_catalog.=) c.objid)" \
	"   WHEN 'pg_catalog.pg_rewrite'::pg_catalog.regclass THEN (SELECT w.ev_class" \
	"     FROM pg_catalog.pg_rewrite w WHERE w.oid OPERATOR(pg_catalog.=) c.objid)" \
	"   WHEN 'pg_catalog.pg_type'::pg_catalog.regclass THEN (SELECT y.typrelid" \
	"     FROM pg_catalog.pg_type y WHERE y.oid OPERATOR(pg_catalog.=) c.objid)" \
	"   END AS relid" \
	"  FROM pg_catalog.pg_event_trigger_ddl_commands() c) r" \
	" WHERE r.relid IS NOT NULL AND r.relid OPERATOR(pg_catalog.<>) 0"

/* The triggers a command created or altered, CREATE TRIGGER's say. */
#define COMMAND_TRIGGERS \
	"SELECT DISTINCT c.objid" \
	"  FROM pg_catalog.pg_event_trigger_ddl_commands() c" \
	" WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass"

/*
 * A query of the event trigger's, planned once per backend: a kept plan,
 * which the plan cache replans when a catalog it reads changes.
 */
SPIPlanPtr
fence_kept_plan(SPIPlanPtr *plan, const char *query)
{
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare(query, 0, NULL);

		if (p == NULL || SPI_keepplan(p) != 0)
			elog(ERROR, "could not prepare the query of the event trigger");
		*plan = p;
	}
	return *plan;
}

/*
 * The relations of the command, by one of the queries above (COMMAND_TOUCHED
 * if touched, else COMMAND_TABLES).
 */
List *
fence_ddl_command_relids(bool touched)
{
	static SPIPlanPtr tables_plan = NULL;
	static SPIPlanPtr touched_plan = NULL;

	return touched ? command_oids(&touched_plan, COMMAND_TOUCHED) :
		command_oids(&tables_plan, COMMAND_TABLES);
}

/* The triggers the command created or altered (COMMAND_TRIGGERS). */
List *
fence_ddl_command_triggers(void)
{
	static SPIPlanPtr triggers_plan = NULL;

	return command_oids(&triggers_plan, COMMAND_TRIGGERS);
}

/* The OIDs a query of the command's objects returns. */
static List *
command_oids(SPIPlanPtr *plan, const char *query)
{
	MemoryContext callercxt = CurrentMemoryContext;
	List	   *relids = NIL;
	uint64		i;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(fence_kept_plan(plan, query), NULL, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the commands of the event trigger");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		objid = SPI_getbinval(SPI_tuptable->vals[i],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
		{
			MemoryContext spicxt = MemoryContextSwitchTo(callercxt);

			relids = lappend_oid(relids, DatumGetObjectId(objid));
			MemoryContextSwitchTo(spicxt);
		}
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return relids;
}
