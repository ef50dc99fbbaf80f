/*-------------------------------------------------------------------------
 *
 * ddl.c
 *	  Attaching protection to tables, and keeping it on what DDL adds to a
 *	  protected table: fence_protect() and the ddl_command_end event
 *	  trigger fence_ddl_command_end().
 *
 * A protected table has two triggers of fence's, both ENABLE ALWAYS: the
 * row guard (fence_guard, BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW)
 * and the TRUNCATE refusal (fence_refuse_truncate, BEFORE TRUNCATE FOR EACH
 * STATEMENT).  They are recognised by their function, not by their name.
 * PostgreSQL clones a row trigger of a partitioned table to every
 * partition, present and future, but not a statement trigger, so each
 * member of a protected partition tree needs a TRUNCATE refusal of its own.
 * cover_truncate() gives it one; fence_protect() calls it for the tree it
 * protects, and the event trigger for a partition created in, or attached
 * to, a protected tree.
 *
 * The event trigger creates refusals after those commands only, read from
 * the parse tree.  In particular it creates none after the ALTER TABLE ...
 * ENABLE ALWAYS TRIGGER that pg_dump writes after each trigger it restores:
 * the dump restores the TRUNCATE refusals itself, and one created early
 * would make the dump's own CREATE TRIGGER fail.  After any other ALTER
 * TABLE of a protected table it sets existing refusals back to ALWAYS.
 *
 * A foreign table cannot have a TRUNCATE trigger, so TRUNCATE of a foreign
 * partition would remove rows without a token: a foreign table is refused
 * as a member of a protected tree, whichever way it would get there.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(fence_protect);
PG_FUNCTION_INFO_V1(fence_ddl_command_end);

#define GUARD_TRIGGER_NAME		"zz_fence_guard"
#define TRUNCATE_TRIGGER_NAME	"zz_fence_truncate"

/*
 * fence's trigger functions, found in the schema of the function running.
 * The event trigger needs nothing else of fence's catalog, and does not
 * build it: DDL on other tables must not depend on fence_claims.
 */
typedef struct FenceTriggerFns
{
	char	   *nspname;
	Oid			guard_fn;		/* fence_guard() */
	Oid			refuse_truncate_fn; /* fence_refuse_truncate() */
} FenceTriggerFns;

static void
fence_trigger_fns(Oid fn_oid, FenceTriggerFns *fns)
{
	fns->nspname = get_namespace_name(get_func_namespace(fn_oid));
	fns->guard_fn = fence_lookup_function(fns->nspname, "fence_guard");
	fns->refuse_truncate_fn = fence_lookup_function(fns->nspname,
													"fence_refuse_truncate");
}

/* The relation's schema-qualified name, quoted where needed, for query text. */
static char *
rel_query_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/*
 * The relation's name for messages: qualified unless it is in pg_catalog or
 * the session's temporary schema, as regclass prints it with search_path
 * set to pg_catalog, pg_temp (so messages read as they did in fence 1.0).
 */
static char *
rel_display_name(Oid relid)
{
	Oid			nspid = get_rel_namespace(relid);

	if (nspid == PG_CATALOG_NAMESPACE || isTempNamespace(nspid))
		return pstrdup(quote_identifier(get_rel_name(relid)));
	return rel_query_name(relid);
}

/*
 * Does the relation have a trigger calling fnoid?  If so, *tgenabled gets
 * its firing state.  The relcache's trigger list is the catalog's.
 */
static bool
rel_has_fence_trigger(Oid relid, Oid fnoid, char *tgenabled)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	TriggerDesc *trigdesc = rel->trigdesc;
	bool		found = false;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		if (trigdesc->triggers[i].tgfoid == fnoid)
		{
			found = true;
			if (tgenabled)
				*tgenabled = trigdesc->triggers[i].tgenabled;
			break;
		}
	}
	relation_close(rel, AccessShareLock);
	return found;
}

/* Run one utility statement through SPI, as the current user. */
static void
run_ddl(const char *sql)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute failed for \"%s\"", sql);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/* A foreign table in a protected tree: refused, see the header comment. */
static void
refuse_foreign_member(Oid relid)
{
	Oid			parent = InvalidOid;

	if (get_rel_relispartition(relid))
#if PG_VERSION_NUM >= 140000
		parent = get_partition_parent(relid, true);
#else
		parent = get_partition_parent(relid);
#endif

	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 OidIsValid(parent) ?
			 errmsg("foreign table \"%s\" cannot be a partition of protected table \"%s\"",
					rel_display_name(relid), rel_display_name(parent)) :
			 errmsg("foreign table \"%s\" cannot be protected by fence",
					rel_display_name(relid)),
			 errdetail("A foreign table cannot have a TRUNCATE trigger, so TRUNCATE of it would remove rows without checking a fencing token."),
			 errhint("Keep foreign tables out of protected partition trees; protect the local partitions one by one instead.")));
}

/*
 * Give every member of relid's inheritance tree that has fence's row guard
 * (relid itself included) an ENABLE ALWAYS TRUNCATE refusal, and refuse a
 * foreign table among them.  The triggers are created as the current
 * user, who owns the tables: whoever may create or attach a partition owns
 * it.
 *
 * Without create_missing, only set existing refusals back to ALWAYS (after
 * DISABLE TRIGGER ALL and ENABLE TRIGGER ALL, or a DISABLE of the refusal
 * itself): that is what any other ALTER TABLE of a protected table gets.
 * It creates nothing, so it cannot get ahead of a restore, and it passes
 * over a foreign partition (protected under 1.0) rather than fail an
 * unrelated command.
 */
static void
cover_truncate(FenceTriggerFns *fns, Oid relid, bool create_missing)
{
	List	   *members = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		char		tgenabled = TRIGGER_DISABLED;

		if (!rel_has_fence_trigger(member, fns->guard_fn, NULL))
			continue;
		if (get_rel_relkind(member) == RELKIND_FOREIGN_TABLE)
		{
			if (create_missing)
				refuse_foreign_member(member);
			continue;
		}

		if (!rel_has_fence_trigger(member, fns->refuse_truncate_fn, &tgenabled))
		{
			if (!create_missing)
				continue;
			run_ddl(psprintf("CREATE TRIGGER " TRUNCATE_TRIGGER_NAME
							 " BEFORE TRUNCATE ON %s FOR EACH STATEMENT"
							 " EXECUTE FUNCTION %s()",
							 rel_query_name(member),
							 quote_qualified_identifier(fns->nspname,
														"fence_refuse_truncate")));
			(void) rel_has_fence_trigger(member, fns->refuse_truncate_fn,
										 &tgenabled);
		}
		/* Set back to ALWAYS after DISABLE/ENABLE TRIGGER ALL, too. */
		if (tgenabled != TRIGGER_FIRES_ALWAYS)
			run_ddl(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s",
							 rel_query_name(member),
							 quote_identifier(TRUNCATE_TRIGGER_NAME)));
	}
	list_free(members);
}

/*
 * fence_protect(tbl regclass, epoch_column name, mode text) returns void
 *
 * Attach the guard.  The triggers' names start with "zz_" so that they
 * sort, and so fire, after the table's other BEFORE triggers; the guard
 * also refuses to run while any BEFORE ROW trigger sorts after it.  Both
 * are ENABLE ALWAYS, so session_replication_role = replica does not switch
 * them off.  It runs as the caller: only the table's owner (or a member of
 * the owning role, or a superuser) can create or drop triggers.
 * Protecting a protected table again replaces its guard.
 */
Datum
fence_protect(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	FenceTriggerFns fns;
	Oid			relid;
	const char *colname;
	char	   *mode;
	char		relkind;
	HeapTuple	tuple;
	AttrNumber	attnum;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("table must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("epoch column must not be null")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("mode must not be null")));
	relid = PG_GETARG_OID(0);
	colname = NameStr(*PG_GETARG_NAME(1));
	mode = text_to_cstring(PG_GETARG_TEXT_PP(2));

	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	relkind = ((Form_pg_class) GETSTRUCT(tuple))->relkind;
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
	{
		ReleaseSysCache(tuple);
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table", rel_display_name(relid)),
				 errhint("fence protects ordinary and partitioned tables.")));
	}
	if (!has_privs_of_role(GetUserId(), ((Form_pg_class) GETSTRUCT(tuple))->relowner))
	{
		ReleaseSysCache(tuple);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of table %s", rel_display_name(relid))));
	}
	ReleaseSysCache(tuple);

	if (relid == cat->claims_relid)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot protect fence's own registry %s",
						rel_display_name(relid))));
	if (strcmp(mode, "strict") != 0 && strcmp(mode, "repeat") != 0 &&
		strcmp(mode, "shared") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unrecognized fence mode \"%.*s\"",
						pg_mbcliplen(mode, strlen(mode), 64), mode),
				 errhint("The mode is one of strict, repeat or shared.")));

	attnum = get_attnum(relid, colname);
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						colname, rel_display_name(relid)),
				 errhint("Add it with ALTER TABLE ... ADD COLUMN writer_epoch bigint NOT NULL DEFAULT 0.")));
	if (get_atttype(relid, attnum) != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of relation \"%s\" is not of type bigint",
						colname, rel_display_name(relid))));

	if (OidIsValid(get_trigger_oid(relid, GUARD_TRIGGER_NAME, true)))
		run_ddl(psprintf("DROP TRIGGER " GUARD_TRIGGER_NAME " ON %s",
						 rel_query_name(relid)));
	run_ddl(psprintf("CREATE TRIGGER " GUARD_TRIGGER_NAME
					 " BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW"
					 " EXECUTE FUNCTION %s(%s, %s)",
					 rel_query_name(relid),
					 quote_qualified_identifier(cat->nspname, "fence_guard"),
					 quote_literal_cstr(colname), quote_literal_cstr(mode)));
	run_ddl(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER " GUARD_TRIGGER_NAME,
					 rel_query_name(relid)));
	fence_trigger_fns(fcinfo->flinfo->fn_oid, &fns);
	cover_truncate(&fns, relid, true);
	PG_RETURN_VOID();
}

/*
 * Does this command add a partition (or a child) to a table?  Only those
 * can bring a member without its TRUNCATE refusal into a protected tree.
 */
static bool
command_adds_members(Node *parsetree)
{
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_CreateStmt:
		case T_CreateForeignTableStmt:
		case T_CreateSchemaStmt:
			return true;
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) parsetree)->cmds)
			{
				AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);

				if (cmd->subtype == AT_AttachPartition)
					return true;
			}
			return false;
		default:
			return false;
	}
}

/*
 * fence_ddl_command_end() returns event_trigger
 *
 * After CREATE [FOREIGN] TABLE, CREATE SCHEMA and ALTER TABLE ... ATTACH
 * PARTITION: cover every relation the command created or altered that is
 * protected (a new partition has the guard's clone) with the TRUNCATE
 * refusal, and refuse a foreign table in a protected tree.  After another
 * ALTER TABLE: set the refusals of a protected tree back to ALWAYS.
 */
Datum
fence_ddl_command_end(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	FenceTriggerFns fns;
	List	   *relids = NIL;
	ListCell   *lc;
	MemoryContext oldcxt;
	bool		adds_members;
	uint64		i;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by event trigger manager",
						"fence_ddl_command_end")));

	/* fence's own install and update scripts */
	if (creating_extension)
		PG_RETURN_VOID();
	adds_members = command_adds_members(trigdata->parsetree);
	if (!adds_members && !IsA(trigdata->parsetree, AlterTableStmt))
		PG_RETURN_VOID();

	fence_trigger_fns(fcinfo->flinfo->fn_oid, &fns);

	/* The list outlives the SPI connection: build it in our context. */
	oldcxt = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT DISTINCT c.objid"
					"  FROM pg_catalog.pg_event_trigger_ddl_commands() c"
					" WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
					"   AND c.objsubid OPERATOR(pg_catalog.=) 0",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the commands of the event trigger");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		objid = SPI_getbinval(SPI_tuptable->vals[i],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
		{
			MemoryContext spicxt = MemoryContextSwitchTo(oldcxt);

			relids = lappend_oid(relids, DatumGetObjectId(objid));
			MemoryContextSwitchTo(spicxt);
		}
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);
		char		relkind = get_rel_relkind(relid);

		/* Dropped again by a later subcommand, or not a table. */
		if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE &&
			relkind != RELKIND_FOREIGN_TABLE)
			continue;
		if (rel_has_fence_trigger(relid, fns.guard_fn, NULL))
			cover_truncate(&fns, relid, adds_members);
	}
	PG_RETURN_VOID();
}
