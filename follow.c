/*-------------------------------------------------------------------------
 *
 * follow.c
 *	  Protection follows the data: what the end of a DDL command does to
 *	  keep a protected tree whole (called from fence_ddl_command_end, ddl.c).
 *
 * A partition or child created in, attached to, or inherited into a
 * protected tree is protected too, once the table that joined is shown to
 * hold no row that no token checked; a detached partition stays protected
 * (DETACH drops the cloned guard without an sql_drop event: it is put
 * back); ENABLE TRIGGER ALL leaves fence's triggers ENABLE ALWAYS; the
 * canonical CREATE TRIGGER of the guard (what pg_dump writes) protects its
 * table, and the after form's UPDATE check must carry the WHEN clause
 * fence_protect makes; a rename or a move to another schema is recorded.
 * No TRUNCATE refusal is created after the ALTER TABLE ... ENABLE ALWAYS
 * TRIGGER of a restore: the dump restores those itself.
 *
 * The registry and the triggers are written by protect.c; what the tree
 * must look like afterwards is intact.c's, checked by ddl.c at the end of
 * every command.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "catalog/pg_class.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

/*
 * Does the relation (its whole tree) hold no row?  Read with the latest
 * snapshot (the caller has just waited for its lock, and rows committed
 * meanwhile count), as the table's owner with row-level security off: a
 * policy that hides rows must not make a table look empty.
 */
static bool
rel_is_empty(Oid relid)
{
	bool		empty;
	SPIPlanPtr	plan;
	FenceSavedUser saved;
	int			ret;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_become_owner(fence_rel_owner(relid), &saved);
	plan = SPI_prepare(psprintf("SELECT FROM %s LIMIT 1", fence_rel_query_name(relid)),
					   0, NULL);
	ret = plan ? SPI_execute_snapshot(plan, NULL, NULL, GetLatestSnapshot(),
									  InvalidSnapshot, true, false, 1) : SPI_ERROR_ARGUMENT;
	fence_restore_user(&saved);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read relation %u", relid);
	empty = (SPI_processed == 0);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return empty;
}

/*
 * At the end of ATTACH or INHERIT into a protected tree: the table that
 * joined may keep its rows if a guard of the same column, mode and form
 * checked them, or if it has none.  Read with the latest snapshot, under
 * the command's own lock, as the table's owner with row-level security
 * off: a policy that hides rows must not make a table look empty.
 */
static void
end_incoming(FenceCatalog *cat, Oid parent, Oid child,
			 const FenceRegistration *reg, const char *command)
{
	FenceRegistration creg;

	/* A foreign table is refused as a member (fence_protect_tree, 42809). */
	if (get_rel_relkind(child) == RELKIND_FOREIGN_TABLE)
		return;
	if (fence_protected_lookup(cat, child, &creg) &&
		!fence_registration_differs(&creg, reg))
		return;
	if (rel_is_empty(child))
		return;
	fence_ddl_refuse(cat, parent, command,
					 psprintf("Table \"%s\" has rows that no fencing token checked; only an empty table, or one protected with the same epoch column, mode and form, may join a protected table.",
							  fence_rel_display_name(child)));
}

/* A relation created as a child of a protected one is protected the same way. */
void
fence_follow_new_children(FenceCatalog *cat)
{
	List	   *relids = fence_ddl_command_relids(false);
	ListCell   *lc;

	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);
		char		relkind = get_rel_relkind(relid);
		ListCell   *plc;

		if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE &&
			relkind != RELKIND_FOREIGN_TABLE)
			continue;
		foreach(plc, fence_rel_parents(relid))
		{
			FenceRegistration reg;

			if (fence_protected_lookup(cat, lfirst_oid(plc), &reg))
			{
				fence_protect_tree(cat, relid, &reg);
				break;
			}
		}
	}
}

/* A table joined or left a protected tree: protect its tree, and record it. */
static void
protect_and_record(FenceCatalog *cat, Oid relid, const FenceRegistration *reg,
				   const char *action, const char *detail)
{
	fence_protect_tree(cat, relid, reg);
	fence_audit_log_append(cat, action, relid, NULL, detail, NULL);
}

void
fence_follow_alter_table(FenceCatalog *cat, AlterTableStmt *stmt)
{
	Oid			relid = fence_rangevar_relid(stmt->relation);
	FenceRegistration reg;
	bool		protected;
	ListCell   *lc;

	if (!OidIsValid(relid))
		return;
	foreach(lc, stmt->cmds)
	{
		AlterTableType subtype = ((AlterTableCmd *) lfirst(lc))->subtype;

		if (subtype == AT_AttachPartition || subtype == AT_DetachPartition ||
			subtype == AT_DetachPartitionFinalize ||
			subtype == AT_AddInherit || subtype == AT_EnableTrigAll ||
			subtype == AT_EnableTrigUser)
			break;
	}
	if (lc == NULL)
		return;
	protected = fence_protected_lookup(cat, relid, &reg);

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);
		Oid			child;

		switch (cmd->subtype)
		{
			case AT_AttachPartition:
				child = fence_rangevar_relid(((PartitionCmd *) cmd->def)->name);
				if (protected && OidIsValid(child))
				{
					end_incoming(cat, relid, child, &reg, "ATTACH PARTITION");
					protect_and_record(cat, child, &reg, "attach",
									   psprintf("ATTACH PARTITION to %s",
												fence_rel_query_name(relid)));
				}
				break;
			case AT_DetachPartition:
			case AT_DetachPartitionFinalize:
				{
					FenceRegistration creg;

					child = fence_rangevar_relid(((PartitionCmd *) cmd->def)->name);
					/* DETACH dropped the cloned guard: the data keeps its protection. */
					if (OidIsValid(child) &&
						fence_protected_lookup(cat, child, &creg))
						protect_and_record(cat, child, &creg, "detach",
										   psprintf("DETACH PARTITION from %s",
													fence_rel_query_name(relid)));
				}
				break;
			case AT_AddInherit:
				{
					Oid			parent = fence_rangevar_relid((RangeVar *) cmd->def);
					FenceRegistration preg;

					if (OidIsValid(parent) &&
						fence_protected_lookup(cat, parent, &preg))
					{
						end_incoming(cat, parent, relid, &preg, "INHERIT");
						/* its own guard, of whatever settings, becomes the tree's */
						fence_drop_guards(cat, relid);
						protect_and_record(cat, relid, &preg, "attach",
										   psprintf("INHERIT %s",
													fence_rel_query_name(parent)));
					}
				}
				break;
			case AT_EnableTrigAll:
			case AT_EnableTrigUser:
				if (protected)
					fence_heal_triggers(cat, relid);
				break;
			default:
				break;
		}
	}
}

/*
 * The canonical CREATE TRIGGER of the guard protects its table's tree, as
 * fence_protect() would: registry rows, a guard for each legacy child, a
 * TRUNCATE refusal for every member (check_create_trigger explains how a
 * restore's own CREATE TRIGGERs of those then take their place).  A guard
 * for INSERT OR DELETE only is the after form's, which gets its
 * zz_fence_guard_update the same way.  That trigger's WHEN clause is
 * compared here, now that it is stored: another one is refused.
 */
void
fence_follow_create_trigger(FenceCatalog *cat, CreateTrigStmt *stmt)
{
	Oid			relid = fence_rangevar_relid(stmt->relation);
	Oid			fnoid = LookupFuncName(stmt->funcname, 0, NULL, true);
	FenceRegistration reg;
	const char *args;

	if (!OidIsValid(relid) || !OidIsValid(fnoid))
		return;

	/*
	 * A restore creates fence's TRUNCATE refusal and the after form's UPDATE
	 * check in place of the ones fence made, and makes them ENABLE ALWAYS
	 * only in a later command: make them so now, as fence_protect does.
	 */
	if ((fnoid == cat->refuse_truncate_fn || fnoid == cat->guard_after_fn) &&
		fence_trigger_is_canonical(cat, stmt, fnoid, relid) &&
		fence_protected_lookup(cat, relid, NULL))
		fence_heal_triggers(cat, relid);
	if (fnoid != cat->guard_fn && fnoid != cat->guard_after_fn)
		return;
	if (fnoid == cat->guard_after_fn)
	{
		if (fence_trigger_is_canonical(cat, stmt, fnoid, relid) &&
			!fence_after_when_is_canonical(cat, relid, stmt->trigname))
			fence_ddl_refuse_trigger(cat, relid, stmt->trigname, fnoid,
									 "Its WHEN clause is not the one fence_protect(..., form => 'after') creates, "
									 "NOT fence_update_allowed(NEW.col, OLD.col, NEW.tableoid, 'col', 'mode') "
									 "with the trigger's column and mode.");
		return;
	}

	/* A declared odd trigger of fence's function protects nothing. */
	if (!fence_trigger_is_canonical(cat, stmt, fnoid, relid))
		return;
	reg.column = FENCE_DEFAULT_EPOCH_COLUMN;
	reg.mode = FENCE_DEFAULT_MODE;
	reg.form = (stmt->events & TRIGGER_TYPE_UPDATE) ? FENCE_FORM_BEFORE : FENCE_FORM_AFTER;
	if (list_length(stmt->args) >= 1)
		reg.column = strVal(linitial(stmt->args));
	/* (a canonical trigger's mode is one fence knows: no error here) */
	if (list_length(stmt->args) >= 2)
		reg.mode = fence_mode_parse(strVal(lsecond(stmt->args)));
	fence_protect_tree(cat, relid, &reg);
	fence_heal_triggers(cat, relid);
	args = psprintf("%s, %s", quote_literal_cstr(reg.column),
					quote_literal_cstr(fence_mode_name(reg.mode)));
	fence_audit_log_append(cat, "protect", relid, NULL,
						   reg.form == FENCE_FORM_AFTER ?
						   psprintf("CREATE TRIGGER %s (%s), form after", FENCE_GUARD_TRIGGER, args) :
						   psprintf("CREATE TRIGGER %s (%s)", FENCE_GUARD_TRIGGER, args),
						   NULL);
}

/* A protected relation renamed, or moved to another schema: recorded. */
void
fence_follow_rename(FenceCatalog *cat, const char *command)
{
	ListCell   *lc;

	foreach(lc, fence_ddl_command_relids(false))
	{
		Oid			relid = lfirst_oid(lc);

		if (fence_protected_lookup(cat, relid, NULL))
			fence_audit_log_append(cat, "rename", relid, NULL, command, NULL);
	}
}

/* Does the CREATE (TABLE, FOREIGN TABLE, SCHEMA) make a child of a table? */
bool
fence_creates_child(Node *parsetree)
{
	ListCell   *lc;

	if (IsA(parsetree, CreateStmt) || IsA(parsetree, CreateForeignTableStmt))
		return ((CreateStmt *) parsetree)->inhRelations != NIL;
	foreach(lc, ((CreateSchemaStmt *) parsetree)->schemaElts)
		if (IsA(lfirst(lc), CreateStmt) &&
			((CreateStmt *) lfirst(lc))->inhRelations != NIL)
			return true;
	return false;
}
