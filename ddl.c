/*-------------------------------------------------------------------------
 *
 * ddl.c
 *	  The event triggers that keep DDL from disarming a protected relation,
 *	  and the declaration that lets a migration or a restore through:
 *	  fence_ddl_command_start(), fence_ddl_command_end(), fence_sql_drop(),
 *	  fence_allow_ddl() and the setting fence.allow_ddl.
 *
 * ddl_command_start sees each command's parse tree before it runs, and
 * refuses (5F006) what would let rows of a protected relation be written
 * without a token, or make it forget what it checked: disabling, dropping,
 * renaming or replacing fence's triggers, rewriting values (ALTER COLUMN
 * ... TYPE ... USING), changing the epoch column, rules, SET UNLOGGED,
 * bringing unchecked rows in (ATTACH, INHERIT), triggers planted by a role
 * that does not own the table, DROP EXTENSION (or DROP OWNED BY fence's
 * owner) while anything is protected, and ALTER SEQUENCE of the token
 * counter.  Event triggers fire for superusers too, so the refusals hold
 * for every role.
 *
 * ddl_command_end keeps protection with the data (follow.c), then checks,
 * from the catalog, that every relation the command touched is still
 * intact (intact.c): what the start could not foresee is refused there.
 * sql_drop forgets dropped relations; table_rewrite refuses a rewrite
 * that computes values (a change of type, SET EXPRESSION, a volatile
 * default).
 *
 * PostgreSQL quirks designed around, the same on 15 to 19: DETACH drops
 * the cloned guard without an sql_drop event (ddl_command_end puts it
 * back); sql_drop can no longer read a dropped trigger's row (the drop is
 * refused at the start instead); DROP EXTENSION, and DROP OWNED BY its
 * owner, fire only fence's own ddl_command_start (the rest of fence's
 * event triggers are gone by then, so that is where they are refused).
 *
 * A declaration (fence_allow_ddl for a transaction, the superuser setting
 * fence.allow_ddl for a session) lets the refused DDL of a protected table
 * through and leaves a row in the audit log.  fence's own install and
 * update scripts, and the DDL fence runs itself, are not checked.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/primnodes.h"
#include "parser/parse_func.h"
#include "parser/parse_type.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(fence_ddl_command_start);
PG_FUNCTION_INFO_V1(fence_ddl_command_end);
PG_FUNCTION_INFO_V1(fence_sql_drop);
PG_FUNCTION_INFO_V1(fence_table_rewrite);
PG_FUNCTION_INFO_V1(fence_allow_ddl);

/*
 * Relations whose triggers or columns sql_drop saw dropped (DROP EXTENSION
 * of an extension a guard was made to depend on, say), for the end of the
 * same command to check.  Kept in the transaction's memory: forgotten with
 * it (drop_touched_reset).
 */
static List *drop_touched = NIL;


/*
 * Is fence's own install or update script running?  Only fence's: another
 * extension's script is DDL like any other.
 */
static bool
in_fence_script(void)
{
	return creating_extension &&
		CurrentExtensionObject == get_extension_oid("fence", true);
}

static void
check_called_as_event_trigger(FunctionCallInfo fcinfo, const char *fname)
{
	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by event trigger manager",
						fname)));
}

/*
 * Is the trigger of that name on the relation one of fence's, on a
 * protected relation?  (On any other table it is a stray its owner may
 * drop.)
 */
static bool
is_fence_trigger(FenceCatalog *cat, Oid relid, const char *tgname)
{
	Relation	rel;
	TriggerDesc *trigdesc;
	bool		found = false;
	int			i;

	if (!OidIsValid(relid) || tgname == NULL)
		return false;
	rel = relation_open(relid, AccessShareLock);
	trigdesc = rel->trigdesc;
	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (strcmp(trigger->tgname, tgname) == 0)
		{
			found = (trigger->tgfoid == cat->guard_fn ||
					 trigger->tgfoid == cat->refuse_truncate_fn ||
					 trigger->tgfoid == cat->guard_after_fn);
			break;
		}
	}
	relation_close(rel, AccessShareLock);
	return found && fence_protected_lookup(cat, relid, NULL);
}

/* Is the expression a constant 0 or NULL (a harmless epoch default)? */
static bool
is_zero_or_null(Node *expr)
{
	A_Const    *con;

	while (expr && IsA(expr, TypeCast))
		expr = ((TypeCast *) expr)->arg;
	if (expr == NULL || !IsA(expr, A_Const))
		return false;
	con = (A_Const *) expr;
	if (con->isnull)
		return true;
	if (IsA(&con->val, Integer))
		return intVal(&con->val) == 0;
	if (IsA(&con->val, String))		/* '0', '0'::bigint */
		return strcmp(strVal(&con->val), "0") == 0;
	return false;
}

/* Does the ALTER COLUMN ... TYPE name bigint? */
static bool
is_bigint_type(ColumnDef *def)
{
	Oid			typid;
	int32		typmod;

	typenameTypeIdAndMod(NULL, def->typeName, &typid, &typmod);
	return typid == INT8OID;
}

/* Is the relation one of fence's own (registry, counter, logs)? */
static bool
is_fence_relation(FenceCatalog *cat, Oid relid)
{
	static const char *const names[] = {"fence_token_seq", "fence_claims",
	"fence_protected", "fence_audit_log"};
	size_t		i;

	for (i = 0; i < lengthof(names); i++)
		if (OidIsValid(relid) && relid == get_relname_relid(names[i], cat->nspid))
			return true;
	return false;
}

/* ALTER SEQUENCE (or ALTER TABLE) of the token counter: never. */
static void
refuse_counter_change(void)
{
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
			 errmsg("cannot alter fence's token counter"),
			 errdetail("Every token must stay above every token issued before it.")));
}

static void
refuse_fence_relation(Oid relid)
{
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
			 errmsg("cannot alter fence's own relation \"%s\"",
					fence_rel_display_name(relid)),
			 errdetail("fence finds its relations by name, and every token must stay above every token issued before it.")));
}

/*
 * A table entering a protected tree (ATTACH PARTITION, INHERIT) brings
 * rows no token checked, unless it is empty or already protected the same
 * way: decided at the end of the command (end_incoming), once PostgreSQL
 * has checked that the caller owns both tables and taken its locks.  Until
 * then fence neither locks nor reads a table the caller may not own: the
 * answer would tell a stranger whether it is empty, and the lock would
 * queue everyone behind it.  Here only what can be refused from the
 * catalog: an unlogged table.
 */
static void
check_incoming(FenceCatalog *cat, Oid parent, Oid child, const char *command,
			   bool attach)
{
	/* A foreign table is refused at the end of the command (42809). */
	if (!OidIsValid(child) || get_rel_relkind(child) == RELKIND_FOREIGN_TABLE)
		return;
	if (!fence_may_manage(child) || !fence_may_manage(parent))
		return;
	if (get_rel_persistence(child) == RELPERSISTENCE_UNLOGGED)
		fence_ddl_refuse(cat, parent, command,
						 psprintf("Table \"%s\" is unlogged: a crash would lose writes that fence accepted.",
								  fence_rel_display_name(child)));

	/*
	 * A partition gets the parent's guard as a clone, which would clash with
	 * a protected table's own: drop that one (the clone replaces it in the
	 * same command; if the end of the command refuses the table, the drop
	 * rolls back with it).
	 */
	if (attach && fence_protected_lookup(cat, child, NULL))
		fence_drop_guards(cat, child);
}

/* Is the ALTER TABLE subcommand one that check_alter_table looks at? */
static bool
alter_cmd_checked(AlterTableType subtype)
{
	switch (subtype)
	{
		case AT_AddInherit:
		case AT_DisableTrig:
		case AT_DisableTrigAll:
		case AT_DisableTrigUser:
		case AT_EnableTrig:
		case AT_EnableReplicaTrig:
		case AT_AlterColumnType:
		case AT_SetUnLogged:
		case AT_DropColumn:
		case AT_ColumnDefault:
		case AT_AddIdentity:
		case AT_SetIdentity:
		case AT_AttachPartition:
			return true;
		default:
			return false;
	}
}

static void
check_alter_table(FenceCatalog *cat, AlterTableStmt *stmt)
{
	Oid			relid = fence_rangevar_relid(stmt->relation);
	FenceRegistration reg;
	bool		protected;
	ListCell   *lc;

	if (!OidIsValid(relid))
		return;
	if (relid == cat->token_seq_relid)
		refuse_counter_change();

	/* Most ALTER TABLEs change nothing fence looks at: no lookup for them. */
	foreach(lc, stmt->cmds)
		if (alter_cmd_checked(((AlterTableCmd *) lfirst(lc))->subtype))
			break;
	if (lc == NULL)
		return;
	protected = fence_protected_lookup(cat, relid, &reg);

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);

		if (cmd->subtype == AT_AddInherit)
		{
			Oid			parent = fence_rangevar_relid((RangeVar *) cmd->def);

			if (OidIsValid(parent) && fence_protected_lookup(cat, parent, NULL))
				check_incoming(cat, parent, relid, "INHERIT", false);
			continue;
		}
		if (!protected)
			continue;

		switch (cmd->subtype)
		{
			case AT_DisableTrig:
				if (is_fence_trigger(cat, relid, cmd->name))
					fence_ddl_refuse(cat, relid, "DISABLE TRIGGER",
									 "Writes would then go through without a fencing token.");
				break;
			case AT_DisableTrigAll:
				fence_ddl_refuse(cat, relid, "DISABLE TRIGGER ALL",
								 "fence's triggers would be disabled, and writes would go through without a fencing token.  A data-only restore with --disable-triggers runs this: run it as a superuser with PGOPTIONS='-c fence.allow_ddl=on' (doc/fence.md, \"Example: pg_restore --disable-triggers\").");
				break;
			case AT_DisableTrigUser:
				fence_ddl_refuse(cat, relid, "DISABLE TRIGGER USER",
								 "fence's triggers would be disabled, and writes would go through without a fencing token.");
				break;
			case AT_EnableTrig:
			case AT_EnableReplicaTrig:
				if (is_fence_trigger(cat, relid, cmd->name))
					fence_ddl_refuse(cat, relid,
									 cmd->subtype == AT_EnableTrig ? "ENABLE TRIGGER" : "ENABLE REPLICA TRIGGER",
									 "fence's triggers are ENABLE ALWAYS; otherwise they do not fire for some values of session_replication_role.");
				break;
			case AT_AlterColumnType:
				if (((ColumnDef *) cmd->def)->raw_default != NULL)
					fence_ddl_refuse(cat, relid, "ALTER COLUMN ... TYPE ... USING",
									 "It rewrites stored values without a fencing token.");
				else if (strcmp(cmd->name, reg.column) == 0 &&
						 !is_bigint_type((ColumnDef *) cmd->def))
					fence_ddl_refuse(cat, relid, "ALTER COLUMN ... TYPE on the epoch column",
									 "The epoch column must stay bigint.");
				break;
			case AT_AddIdentity:
			case AT_SetIdentity:
				if (strcmp(cmd->name, reg.column) == 0)
					fence_ddl_refuse(cat, relid, "ADD/SET GENERATED ... AS IDENTITY on the epoch column",
									 "It would stamp rows with an epoch no token vouched for.");
				break;
			case AT_SetUnLogged:
				fence_ddl_refuse(cat, relid, "SET UNLOGGED",
								 "A crash would then lose writes that fence accepted, and the rows would move backwards.");
				break;
			case AT_DropColumn:
				if (strcmp(cmd->name, reg.column) == 0)
					fence_ddl_refuse(cat, relid, "DROP COLUMN on the epoch column",
									 "Every row would forget which execution wrote it last.");
				break;
			case AT_ColumnDefault:
				if (strcmp(cmd->name, reg.column) == 0 && cmd->def != NULL &&
					!is_zero_or_null(cmd->def))
					fence_ddl_refuse(cat, relid, "SET DEFAULT on the epoch column",
									 "A default other than 0 or NULL would stamp rows with an epoch no token vouched for.");
				break;
			case AT_AttachPartition:
				check_incoming(cat, relid,
							   fence_rangevar_relid(((PartitionCmd *) cmd->def)->name),
							   "ATTACH PARTITION", true);
				break;
			default:
				break;
		}
	}
}

static void
check_rename(FenceCatalog *cat, RenameStmt *stmt)
{
	Oid			relid;
	FenceRegistration reg;

	if ((stmt->renameType == OBJECT_TABLE || stmt->renameType == OBJECT_SEQUENCE ||
		 stmt->renameType == OBJECT_COLUMN || stmt->renameType == OBJECT_INDEX) &&
		stmt->relation != NULL &&
		is_fence_relation(cat, fence_rangevar_relid(stmt->relation)))
		refuse_fence_relation(fence_rangevar_relid(stmt->relation));

	switch (stmt->renameType)
	{
		case OBJECT_TRIGGER:
			relid = fence_rangevar_relid(stmt->relation);
			if (is_fence_trigger(cat, relid, stmt->subname))
				fence_ddl_refuse(cat, relid, "ALTER TRIGGER ... RENAME",
								 "fence's triggers keep their names, so that they fire last.");
			break;
		case OBJECT_COLUMN:
			relid = fence_rangevar_relid(stmt->relation);
			if (OidIsValid(relid) &&
				fence_protected_lookup(cat, relid, &reg) &&
				strcmp(stmt->subname, reg.column) == 0)
				fence_ddl_refuse(cat, relid, "RENAME COLUMN on the epoch column",
								 "The guard finds the epoch column by its name.");
			break;
		default:
			break;
	}
}

static void
check_create_trigger(FenceCatalog *cat, CreateTrigStmt *stmt)
{
	Oid			relid = fence_rangevar_relid(stmt->relation);
	Oid			fnoid;
	bool		fence_fn;

	if (!OidIsValid(relid))
		return;
	fnoid = LookupFuncName(stmt->funcname, 0, NULL, true);
	fence_fn = (fnoid == cat->guard_fn || fnoid == cat->refuse_truncate_fn ||
				(OidIsValid(cat->guard_after_fn) && fnoid == cat->guard_after_fn));

	if (stmt->replace && is_fence_trigger(cat, relid, stmt->trigname))
		fence_ddl_refuse(cat, relid, "CREATE OR REPLACE TRIGGER",
						 "It would replace one of fence's triggers.");
	if (fence_fn && !fence_trigger_is_canonical(cat, stmt, fnoid, relid))
		fence_ddl_refuse_trigger(cat, relid, stmt->trigname, fnoid,
								 "A trigger calling fence's functions must be one fence_protect() creates: "
								 "zz_fence_guard BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW (BEFORE INSERT OR DELETE in the after form) with no WHEN clause or column list, "
								 "zz_fence_guard_update AFTER UPDATE FOR EACH ROW with fence_update_allowed in its WHEN clause, "
								 "or zz_fence_truncate BEFORE TRUNCATE FOR EACH STATEMENT.");
	if ((fence_fn || fence_protected_lookup(cat, relid, NULL)) &&
		!fence_may_manage(relid))
		fence_ddl_refuse(cat, relid, "CREATE TRIGGER",
						 "Only the table's owner or a superuser may create triggers on a protected table: "
						 "a BEFORE trigger runs before the guard's check and can change the row.");

	/*
	 * The canonical trigger replaces fence's own of the same name and kind.
	 * A restore creates the guard, which protects the tree and so gives
	 * every member its TRUNCATE refusal (and a legacy child its guard), and
	 * then creates those very triggers from the dump: each must take the
	 * place of the one fence made.  (A partition's guard is the parent's
	 * clone and cannot be replaced; PostgreSQL refuses that itself.)
	 *
	 * The command becomes CREATE OR REPLACE TRIGGER, which updates the
	 * trigger (and a partitioned table's clones) in place under the lock
	 * CREATE TRIGGER takes anyway, ShareRowExclusiveLock.  Dropping it first
	 * would take AccessExclusiveLock on the table and on every partition,
	 * which a parallel restore does not expect of a trigger: its ALTER INDEX
	 * ... ATTACH PARTITION holds a partition and then waits for the
	 * partitioned table, and the two deadlock.  (The parse tree is
	 * standard_ProcessUtility's own copy, which CreateTrigger reads next.)
	 */
	if (fence_fn && !stmt->replace &&
		!(fnoid != cat->refuse_truncate_fn && get_rel_relispartition(relid)))
	{
		char	   *tgname;

		/*
		 * Lock before looking: a parallel restore may be giving this table
		 * fence's trigger in another session right now, and its row must be
		 * seen (and replaced), not collided with.
		 */
		LockRelationOid(relid, ShareRowExclusiveLock);
		if (fence_rel_trigger(relid, fnoid, NULL, &tgname) &&
			strcmp(tgname, stmt->trigname) == 0)
			stmt->replace = true;
	}
}

static void
check_drop(FenceCatalog *cat, DropStmt *stmt)
{
	ListCell   *lc;

	if (stmt->removeType == OBJECT_TRIGGER)
	{
		foreach(lc, stmt->objects)
		{
			List	   *names = (List *) lfirst(lc);
			List	   *relnames;
			Oid			relid;

			if (list_length(names) < 2)
				continue;
			relnames = list_truncate(list_copy(names), list_length(names) - 1);
			relid = fence_rangevar_relid(makeRangeVarFromNameList(relnames));
			if (is_fence_trigger(cat, relid, strVal(llast(names))))
				fence_ddl_refuse(cat, relid, "DROP TRIGGER",
								 "Writes would then go through without a fencing token.");
		}
	}
	else if (stmt->removeType == OBJECT_SCHEMA)
	{
		foreach(lc, stmt->objects)
		{
			if (get_namespace_oid(strVal(lfirst(lc)), true) == cat->nspid &&
				stmt->behavior == DROP_CASCADE && fence_protected_any(cat))
				ereport(ERROR,
						(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
						 errmsg("cannot drop schema \"%s\", which holds extension fence, while tables are protected",
								strVal(lfirst(lc))),
						 errdetail("Dropping it would drop the extension: every guard, and the token counter."),
						 errhint("Run fence_unprotect() on each table in fence_protected first.")));
		}
	}
	else if (stmt->removeType == OBJECT_EXTENSION)
	{
		foreach(lc, stmt->objects)
		{
			if (strcmp(strVal(lfirst(lc)), "fence") == 0 &&
				fence_protected_any(cat))
				ereport(ERROR,
						(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
						 errmsg("cannot drop extension fence while tables are protected"),
						 errdetail("Dropping it would drop every guard and restart the token counter at 1."),
						 errhint("Run fence_unprotect() on each table in fence_protected first.")));
		}
	}
}

/*
 * The owner of extension fence, and of the schema it lives in: DROP OWNED BY
 * either drops fence (its schema with everything in it), whatever else the
 * role owns.
 */
static void
fence_owners(FenceCatalog *cat, Oid *extowner, Oid *nspowner)
{
	Relation	extrel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	*extowner = InvalidOid;
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("fence"));
	scan = systable_beginscan(extrel, ExtensionNameIndexId, true, NULL, 1, &key);
	if (HeapTupleIsValid(tup = systable_getnext(scan)))
		*extowner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(extrel, AccessShareLock);

	*nspowner = InvalidOid;
	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(cat->nspid));
	if (HeapTupleIsValid(tup))
	{
		*nspowner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
		ReleaseSysCache(tup);
	}
}

/*
 * DROP OWNED BY the owner of fence, or of its schema, drops fence with every
 * guard and the counter, as DROP EXTENSION fence would: refused the same
 * way while anything is protected.  (Like DROP EXTENSION, it drops fence's
 * own event triggers, so that no later event of the command fires: this is
 * the one place where it can be refused.)
 */
static void
check_drop_owned(FenceCatalog *cat, DropOwnedStmt *stmt)
{
	Oid			extowner;
	Oid			nspowner;
	ListCell   *lc;

	if (!fence_protected_any(cat))
		return;
	fence_owners(cat, &extowner, &nspowner);
	foreach(lc, stmt->roles)
	{
		RoleSpec   *spec = (RoleSpec *) lfirst(lc);
		Oid			roleid = get_rolespec_oid(spec, true);

		if (!OidIsValid(roleid) || (roleid != extowner && roleid != nspowner))
			continue;
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
				 errmsg("cannot drop the objects owned by role \"%s\" while tables are protected",
						GetUserNameFromId(roleid, false)),
				 roleid == extowner ?
				 errdetail("The role owns extension fence: dropping its objects would drop every guard, and the token counter.") :
				 errdetail("The role owns schema \"%s\", which holds extension fence: dropping its objects would drop every guard, and the token counter.",
						   cat->nspname),
				 errhint("Give the role's objects to another role first (REASSIGN OWNED BY %s TO ...), or run fence_unprotect() on each table in fence_protected.",
						 quote_identifier(GetUserNameFromId(roleid, false)))));
	}
}

static void
check_create_table(FenceCatalog *cat, CreateStmt *stmt)
{
	ListCell   *lc;

	if (stmt->relation->relpersistence != RELPERSISTENCE_UNLOGGED)
		return;
	foreach(lc, stmt->inhRelations)
	{
		Oid			parent = fence_rangevar_relid((RangeVar *) lfirst(lc));

		if (OidIsValid(parent) && fence_protected_lookup(cat, parent, NULL))
			fence_ddl_refuse(cat, parent,
							 stmt->partbound ? "CREATE UNLOGGED TABLE ... PARTITION OF" :
							 "CREATE UNLOGGED TABLE ... INHERITS",
							 "A crash would then lose writes that fence accepted, and the rows would move backwards.");
	}
}

/*
 * fence_ddl_command_start() returns event_trigger
 */
Datum
fence_ddl_command_start(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	FenceCatalog *cat;
	Node	   *parsetree;
	ListCell   *lc;

	check_called_as_event_trigger(fcinfo, "fence_ddl_command_start");
	if (in_fence_script() || fence_internal_ddl_active())
		PG_RETURN_VOID();

	parsetree = trigdata->parsetree;
	switch (nodeTag(parsetree))
	{
		case T_AlterTableStmt:
		case T_RenameStmt:
		case T_CreateTrigStmt:
		case T_DropStmt:
		case T_DropOwnedStmt:
		case T_RuleStmt:
		case T_CreateStmt:
		case T_CreateSchemaStmt:
		case T_AlterSeqStmt:
		case T_AlterObjectSchemaStmt:
			break;
		default:
			PG_RETURN_VOID();
	}
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	switch (nodeTag(parsetree))
	{
		case T_AlterTableStmt:
			check_alter_table(cat, (AlterTableStmt *) parsetree);
			break;
		case T_RenameStmt:
			check_rename(cat, (RenameStmt *) parsetree);
			break;
		case T_CreateTrigStmt:
			check_create_trigger(cat, (CreateTrigStmt *) parsetree);
			break;
		case T_DropStmt:
			check_drop(cat, (DropStmt *) parsetree);
			break;
		case T_DropOwnedStmt:
			check_drop_owned(cat, (DropOwnedStmt *) parsetree);
			break;
		case T_RuleStmt:
			{
				Oid			relid = fence_rangevar_relid(((RuleStmt *) parsetree)->relation);

				if (OidIsValid(relid) && fence_protected_lookup(cat, relid, NULL))
					fence_ddl_refuse(cat, relid, "CREATE RULE",
									 "A rule can rewrite a write into one the guard never sees, and the writer is told it succeeded.");
			}
			break;
		case T_CreateStmt:
			check_create_table(cat, (CreateStmt *) parsetree);
			break;
		case T_CreateSchemaStmt:
			foreach(lc, ((CreateSchemaStmt *) parsetree)->schemaElts)
				if (IsA(lfirst(lc), CreateStmt))
					check_create_table(cat, (CreateStmt *) lfirst(lc));
			break;
		case T_AlterSeqStmt:
			if (fence_rangevar_relid(((AlterSeqStmt *) parsetree)->sequence) ==
				cat->token_seq_relid)
				refuse_counter_change();
			break;
		case T_AlterObjectSchemaStmt:
			{
				AlterObjectSchemaStmt *stmt = (AlterObjectSchemaStmt *) parsetree;

				if (stmt->relation != NULL &&
					is_fence_relation(cat, fence_rangevar_relid(stmt->relation)))
					refuse_fence_relation(fence_rangevar_relid(stmt->relation));
			}
			break;
		default:
			break;
	}
	PG_RETURN_VOID();
}
/* The transaction's memory is gone: so is drop_touched. */
static void
drop_touched_reset(void *arg pg_attribute_unused())
{
	drop_touched = NIL;
}

/* Note a relation for the end-of-command check (from sql_drop). */
static void
note_drop_touched(Oid relid)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

	if (drop_touched == NIL)
	{
		MemoryContextCallback *cb = palloc(sizeof(MemoryContextCallback));

		cb->func = drop_touched_reset;
		cb->arg = NULL;
		MemoryContextRegisterResetCallback(TopTransactionContext, cb);
	}
	drop_touched = list_append_unique_oid(drop_touched, relid);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Is the command's change of relid declared, for it or for a table above it
 * in its tree (fence_allow_ddl on a partitioned table covers what the
 * command does to its partitions)?
 */
static bool
declared_in_tree(FenceCatalog *cat, Oid relid, const char *command)
{
	List	   *todo = list_make1_oid(relid);
	List	   *seen = NIL;

	while (todo != NIL)
	{
		Oid			r = linitial_oid(todo);

		todo = list_delete_first(todo);
		if (list_member_oid(seen, r))
			continue;
		seen = lappend_oid(seen, r);
		if (fence_ddl_declared(cat, r, command))
			return true;
		todo = list_concat(todo, fence_rel_parents(r));
	}
	return false;
}

/* The topmost registered relation above relid (relid itself if none). */
static Oid
registered_root(FenceCatalog *cat, Oid relid)
{
	bool		moved = true;

	while (moved)
	{
		ListCell   *lc;

		moved = false;
		foreach(lc, fence_rel_parents(relid))
			if (fence_protected_lookup(cat, lfirst_oid(lc), NULL))
			{
				relid = lfirst_oid(lc);
				moved = true;
				break;
			}
	}
	return relid;
}

/*
 * Refuse the command: it left relid not intact (problem says how), and did
 * not declare it.
 */
static void
refuse_broken(FenceCatalog *cat, Oid relid, const char *command,
			  const char *problem)
{
	char	   *detail = pstrdup(problem);
	Oid			root;
	FenceRegistration reg;

	if (declared_in_tree(cat, relid, command))
		return;
	root = registered_root(cat, relid);
	if (!fence_protected_lookup(cat, root, &reg))
		elog(ERROR, "relation %u is not registered", root);
	detail[0] = pg_toupper((unsigned char) detail[0]);
	ereport(ERROR,
			(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
			 errmsg("%s would leave protected table \"%s\" unguarded",
					command, fence_rel_display_name(relid)),
			 errdetail("%s.", detail),
			 errhint("If this is intended, declare it first in the same transaction: SELECT fence_allow_ddl(%s, 'why'). "
					 "If the table was like this before the command, repair its tree first: SELECT fence_protect(%s, %s, %s%s).",
					 quote_literal_cstr(fence_rel_query_name(relid)),
					 quote_literal_cstr(fence_rel_query_name(root)),
					 quote_literal_cstr(reg.column),
					 quote_literal_cstr(fence_mode_name(reg.mode)),
					 reg.form == FENCE_FORM_AFTER ? ", form => 'after'" : "")));
}

/*
 * The trigger tgoid was cloned from (CREATE TRIGGER on a partitioned table
 * gives each partition a clone), or InvalidOid.
 */
static Oid
trigger_parent(Oid tgoid)
{
	Relation	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			parent = InvalidOid;

	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(tgoid));
	scan = systable_beginscan(tgrel, TriggerOidIndexId, true, NULL, 1, &key);
	if (HeapTupleIsValid(tup = systable_getnext(scan)))
		parent = ((Form_pg_trigger) GETSTRUCT(tup))->tgparentid;
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);
	return parent;
}

/*
 * The triggers the command created or altered (created), and their clones,
 * may be left on a protected relation only by a role that may manage it,
 * as check_create_trigger requires of a CREATE TRIGGER that names it: a
 * BEFORE trigger runs before the guard and can change the row.  CREATE
 * TRIGGER on a partitioned table clones the trigger onto every partition,
 * checking the TRIGGER privilege on each but not who owns it, so a role
 * with TRIGGER on an unprotected parent and its partitions reached a
 * protected one.
 */
static void
check_command_triggers(FenceCatalog *cat, Oid relid, List *created,
					   const char *command)
{
	ListCell   *lc;

	if (created == NIL || fence_may_manage(relid))
		return;
	foreach(lc, fence_rel_triggers(relid))
	{
		FenceTrigger *t = (FenceTrigger *) lfirst(lc);
		Oid			tg;

		/* this trigger, or one it was cloned from, at any level */
		for (tg = t->oid; OidIsValid(tg); tg = trigger_parent(tg))
		{
			if (list_member_oid(created, tg))
			{
				fence_ddl_refuse_with(cat, relid, command,
									  psprintf("cannot create trigger \"%s\" on protected table \"%s\"",
											   t->name, fence_rel_display_name(relid)),
									  tg == t->oid ?
									  "Only the table's owner or a superuser may create triggers on a protected table: "
									  "a BEFORE trigger runs before the guard's check and can change the row." :
									  "The command would clone it from a partitioned table above it; only the table's owner or a superuser may create triggers on a protected table: "
									  "a BEFORE trigger runs before the guard's check and can change the row.");
				break;
			}
		}
	}
}

/* The typed tables of a composite type (CREATE TABLE ... OF typid). */
static List *
typed_tables_of(Oid typid)
{
	Relation	classrel = table_open(RelationRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *result = NIL;

	/* pg_class has no index on reloftype: as find_typed_table_dependencies */
	ScanKeyInit(&key, Anum_pg_class_reloftype, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(typid));
	scan = systable_beginscan(classrel, InvalidOid, false, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
		result = lappend_oid(result, ((Form_pg_class) GETSTRUCT(tup))->oid);
	systable_endscan(scan);
	table_close(classrel, AccessShareLock);
	return result;
}

/*
 * The end of every DDL command: every protected relation the command
 * touched, in the tree of anything it touched, must still be intact
 * (intact.c), or the whole command is rolled back.  This is the guarantee;
 * the refusals at ddl_command_start only say it sooner, and more clearly.
 * It runs after PostgreSQL's own permission checks and while the command
 * still holds its locks, and reads the registry and the catalog as they
 * are now, so no session can change either between the check and the
 * command.
 *
 * What it reads: the relations of pg_event_trigger_ddl_commands() (and of
 * the triggers, defaults, constraints and rules in it), the typed tables
 * of the composite types in it, those sql_drop saw lose a trigger, and the
 * tables an ALTER TABLE attached, detached or inherited; then everything
 * above and below each of them, for a command on a parent recurses into
 * its children and a child's change is its parent tree's.  On a database
 * that protects nothing, nothing is read.
 */
static void
check_intact_at_end(FenceCatalog *cat, Node *parsetree, const char *command)
{
	List	   *touched;
	List	   *todo;
	ListCell   *lc;
	bool		event_triggers_checked = false;
	char	   *event_problem = NULL;
	List	   *created;

	if (!fence_protected_any(cat))
	{
		drop_touched = NIL;
		return;
	}
	touched = fence_ddl_command_relids(true);
	created = fence_ddl_command_triggers();
	foreach(lc, drop_touched)
		touched = list_append_unique_oid(touched, lfirst_oid(lc));
	drop_touched = NIL;
	if (IsA(parsetree, AlterTableStmt))
	{
		Oid			relid = fence_rangevar_relid(((AlterTableStmt *) parsetree)->relation);

		if (OidIsValid(relid))
			touched = list_append_unique_oid(touched, relid);
		foreach(lc, ((AlterTableStmt *) parsetree)->cmds)
		{
			AlterTableCmd *cmd = (AlterTableCmd *) lfirst(lc);
			Oid			other = InvalidOid;

			if (cmd->subtype == AT_AttachPartition || cmd->subtype == AT_DetachPartition ||
				cmd->subtype == AT_DetachPartitionFinalize)
				other = fence_rangevar_relid(((PartitionCmd *) cmd->def)->name);
			else if (cmd->subtype == AT_AddInherit || cmd->subtype == AT_DropInherit)
				other = fence_rangevar_relid((RangeVar *) cmd->def);
			if (OidIsValid(other))
				touched = list_append_unique_oid(touched, other);
		}
	}

	/*
	 * ALTER TYPE ... CASCADE changes the columns of every typed table of a
	 * composite type (CREATE TABLE ... OF), which the command reports only as
	 * the type: its typed tables are touched too.
	 */
	todo = NIL;
	foreach(lc, touched)
	{
		Oid			relid = lfirst_oid(lc);

		if (get_rel_relkind(relid) == RELKIND_COMPOSITE_TYPE)
			todo = list_concat(todo, typed_tables_of(get_rel_type_id(relid)));
	}
	touched = list_concat_unique_oid(touched, todo);

	/* Each touched relation, what is above it and what is below it, once. */
	todo = NIL;
	foreach(lc, touched)
	{
		Oid			relid = lfirst_oid(lc);
		List	   *up = list_make1_oid(relid);

		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
			continue;
		while (up != NIL)
		{
			Oid			r = linitial_oid(up);

			up = list_delete_first(up);
			if (list_member_oid(todo, r))
				continue;
			todo = lappend_oid(todo, r);
			up = list_concat(up, fence_rel_parents(r));
		}
		todo = list_concat_unique_oid(todo, find_all_inheritors(relid, NoLock, NULL));
	}

	foreach(lc, todo)
	{
		Oid			relid = lfirst_oid(lc);
		FenceRegistration reg;
		char	   *problem;
		ListCell   *clc;

		if (!fence_protected_lookup(cat, relid, &reg))
			continue;

		/*
		 * fence's event triggers are part of every protected relation's
		 * protection, and ALTER or DROP EVENT TRIGGER fires none: while one
		 * is missing or does not fire, every command that touches a
		 * protected relation is refused here (read once per command).
		 */
		if (!event_triggers_checked)
		{
			event_triggers_checked = true;
			event_problem = fence_event_triggers_broken(cat->nspid);
		}
		if (event_problem != NULL && !declared_in_tree(cat, relid, command))
		{
			event_problem[0] = pg_toupper((unsigned char) event_problem[0]);
			ereport(ERROR,
					(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
					 errmsg("cannot run %s on protected table \"%s\" while fence's event triggers are not intact",
							command, fence_rel_display_name(relid)),
					 errdetail("%s: fence's checks of DDL depend on it.", event_problem),
					 errhint("Repair it as a superuser (fence_audit() gives the commands), or declare the command first in the same transaction: SELECT fence_allow_ddl(%s, 'why').",
							 quote_literal_cstr(fence_rel_query_name(relid)))));
		}

		/*
		 * Every relation is read from the catalog as it is now, and none is
		 * locked (intact.c needs no lock, as fence_audit shows).  Waiting for
		 * a lock here, under the command's own locks, could deadlock with DDL
		 * on a sibling or a parent; and a check that read a relation only if
		 * a lock could be had at once would be switched off by anyone who
		 * queues for it (on 15, a queued LOCK TABLE makes the conditional
		 * request fail even though this command already holds the relation).
		 * The catalog shows this command's own changes; another session's
		 * uncommitted DDL of the relation is checked at the end of its own
		 * command.
		 */
		check_command_triggers(cat, relid, created, command);
		problem = fence_rel_broken(cat, relid, &reg);
		if (problem != NULL)
			refuse_broken(cat, relid, command, problem);
		/* its direct children: registered alike (each is in todo itself) */
		foreach(clc, find_inheritance_children(relid, NoLock))
		{
			Oid			child = lfirst_oid(clc);

			problem = fence_member_broken(cat, child, &reg);
			if (problem != NULL)
				refuse_broken(cat, relid, command, problem);
		}
	}
}

/*
 * fence_ddl_command_end() returns event_trigger
 */
Datum
fence_ddl_command_end(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	FenceCatalog *cat;
	Node	   *parsetree;

	check_called_as_event_trigger(fcinfo, "fence_ddl_command_end");
	if (in_fence_script() || fence_internal_ddl_active())
		PG_RETURN_VOID();

	parsetree = trigdata->parsetree;
	switch (nodeTag(parsetree))
	{
		case T_CreateStmt:
		case T_CreateForeignTableStmt:
		case T_CreateSchemaStmt:
			/* Only a child (PARTITION OF, INHERITS) can join a protected tree. */
			if (!fence_creates_child(parsetree))
				break;
			cat = fence_catalog(fcinfo->flinfo->fn_oid);
			fence_follow_new_children(cat);
			break;
		case T_AlterTableStmt:
			cat = fence_catalog(fcinfo->flinfo->fn_oid);
			fence_follow_alter_table(cat, (AlterTableStmt *) parsetree);
			break;
		case T_CreateTrigStmt:
			cat = fence_catalog(fcinfo->flinfo->fn_oid);
			fence_follow_create_trigger(cat, (CreateTrigStmt *) parsetree);
			break;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_TABLE)
			{
				cat = fence_catalog(fcinfo->flinfo->fn_oid);
				fence_follow_rename(cat, psprintf("RENAME TO %s",
												  quote_identifier(((RenameStmt *) parsetree)->newname)));
			}
			break;
		case T_AlterObjectSchemaStmt:
			if (((AlterObjectSchemaStmt *) parsetree)->objectType == OBJECT_TABLE)
			{
				cat = fence_catalog(fcinfo->flinfo->fn_oid);
				fence_follow_rename(cat, psprintf("SET SCHEMA %s",
												  quote_identifier(((AlterObjectSchemaStmt *) parsetree)->newschema)));
			}
			break;
		default:
			break;
	}
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	check_intact_at_end(cat, parsetree, GetCommandTagName(trigdata->tag));
	PG_RETURN_VOID();
}

/* sql_drop's queries, planned once per backend (fence_kept_plan). */
static SPIPlanPtr dropped_tables_plan = NULL;
static SPIPlanPtr dropped_parts_plan = NULL;

/*
 * fence_sql_drop() returns event_trigger
 *
 * A dropped protected relation leaves the registry, recorded.
 */
Datum
fence_sql_drop(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat;
	MemoryContext callercxt = CurrentMemoryContext;
	List	   *relids = NIL;
	List	   *names = NIL;
	uint64		i;
	int			j;

	check_called_as_event_trigger(fcinfo, "fence_sql_drop");
	if (in_fence_script())
		PG_RETURN_VOID();
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	if (!fence_protected_any(cat))
		PG_RETURN_VOID();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(fence_kept_plan(&dropped_tables_plan,
								   "SELECT d.objid, d.object_identity"
								   "  FROM pg_catalog.pg_event_trigger_dropped_objects() d"
								   " WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
								   "   AND d.objsubid OPERATOR(pg_catalog.=) 0"
								   "   AND d.object_type OPERATOR(pg_catalog.=) ANY (ARRAY['table', 'foreign table'])"),
						 NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dropped objects");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		objid = SPI_getbinval(SPI_tuptable->vals[i],
										  SPI_tuptable->tupdesc, 1, &isnull);
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		MemoryContext spicxt = MemoryContextSwitchTo(callercxt);

		relids = lappend_oid(relids, DatumGetObjectId(objid));
		names = lappend(names, pstrdup(name ? name : ""));
		MemoryContextSwitchTo(spicxt);
	}
	/* relations that lost a trigger or a column and are still there */
	if (SPI_execute_plan(fence_kept_plan(&dropped_parts_plan,
								   "SELECT DISTINCT pg_catalog.to_regclass(pg_catalog.quote_ident(d.address_names[1])"
								   "        OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||)"
								   "        pg_catalog.quote_ident(d.address_names[2]))::pg_catalog.oid"
								   "  FROM pg_catalog.pg_event_trigger_dropped_objects() d"
								   " WHERE d.object_type OPERATOR(pg_catalog.=) ANY (ARRAY['trigger', 'table column'])"
								   "   AND pg_catalog.cardinality(d.address_names) OPERATOR(pg_catalog.>=) 3"),
						 NULL, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dropped objects");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		objid = SPI_getbinval(SPI_tuptable->vals[i],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			note_drop_touched(DatumGetObjectId(objid));
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	for (j = 0; j < list_length(relids); j++)
	{
		Oid			relid = list_nth_oid(relids, j);

		if (fence_protected_lookup(cat, relid, NULL))
		{
			fence_protected_forget(cat, relid);
			fence_audit_log_append(cat, "drop", InvalidOid, (char *) list_nth(names, j),
								   "DROP", NULL);
		}
	}
	PG_RETURN_VOID();
}

/*
 * The rewrites that copy every row as it is: SET LOGGED (SET UNLOGGED was
 * refused at the start) and SET ACCESS METHOD.  Every other reason writes
 * values no token checked into every row, and so does a reason a later
 * major adds, until it is known.
 */
#define REWRITE_COPIES_ROWS (AT_REWRITE_ALTER_PERSISTENCE | AT_REWRITE_ACCESS_METHOD)

/*
 * fence_table_rewrite() returns event_trigger
 *
 * ALTER TABLE is about to rewrite a protected table.  A rewrite that
 * computes values writes every row with no token: a change of column type
 * converts each stored value (numeric rounds, timestamp loses its time),
 * SET EXPRESSION (17+) computes a generated column again, and a volatile
 * default or a stored generated column fills a new one.  Refused unless
 * declared, whatever the reason; a rewrite that copies the rows as they are
 * (REWRITE_COPIES_ROWS) goes through.  A change of type that needs no
 * rewrite (varchar(10) to varchar(20)) never gets here.
 */
Datum
fence_table_rewrite(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat;
	Oid			relid;
	int			reason;
	const char *command;

	check_called_as_event_trigger(fcinfo, "fence_table_rewrite");
	if (in_fence_script() || fence_internal_ddl_active())
		PG_RETURN_VOID();
	relid = DatumGetObjectId(DirectFunctionCall1(pg_event_trigger_table_rewrite_oid,
												 (Datum) 0));
	reason = DatumGetInt32(DirectFunctionCall1(pg_event_trigger_table_rewrite_reason,
											   (Datum) 0));
	if ((reason & ~REWRITE_COPIES_ROWS) == 0)
		PG_RETURN_VOID();
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	if (!fence_protected_lookup(cat, relid, NULL))
		PG_RETURN_VOID();

	/*
	 * A partitioned table is rewritten partition by partition: a declaration
	 * on a table above the partition covers it, as at the end of the command.
	 */
	command = (reason & AT_REWRITE_COLUMN_REWRITE) ?
		"ALTER COLUMN ... TYPE that rewrites the table" :
		"ALTER TABLE that computes new values for every row";
	if (declared_in_tree(cat, relid, command))
		PG_RETURN_VOID();
	if (reason & AT_REWRITE_COLUMN_REWRITE)
		fence_ddl_refuse(cat, relid, command,
						 "Every stored value of the column is converted without a fencing token, and a conversion can change it.");
	else
		fence_ddl_refuse(cat, relid, command,
						 "The rewrite writes values that no fencing token checked into every row: a generation expression's (SET EXPRESSION), or a new column's volatile default.");
	PG_RETURN_VOID();
}

/*
 * fence_allow_ddl(tbl regclass, reason text) returns void
 *
 * Declare, for the rest of this transaction, DDL on a protected table that
 * fence would otherwise refuse.  Its owners and superusers may; it is
 * recorded with the reason.
 */
Datum
fence_allow_ddl(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat;
	Oid			relid;
	char	   *reason;

	fence_require_arg(fcinfo, 0, "table");
	fence_require_arg(fcinfo, 1, "reason");
	relid = PG_GETARG_OID(0);
	reason = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (reason[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be empty"),
				 errdetail("The reason is recorded in fence_audit_log for whoever reads it later.")));
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	if (!fence_may_manage(relid))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of table %s", fence_rel_display_name(relid))));
	if (!fence_protected_lookup(cat, relid, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table %s is not protected by fence",
						fence_rel_display_name(relid))));

	fence_xact_allow_ddl(relid);
	fence_audit_log_append(cat, "allow_ddl", relid, NULL, "fence_allow_ddl", reason);
	if (!IsTransactionBlock())
		ereport(WARNING,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fence_allow_ddl outside a transaction block declares DDL for this statement only"),
				 errhint("Call fence_allow_ddl after BEGIN, in the transaction that runs the DDL.")));
	PG_RETURN_VOID();
}
