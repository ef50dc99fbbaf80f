/*-------------------------------------------------------------------------
 *
 * intact.c
 *	  What "protected" means, written once: the state a protected relation
 *	  and its whole tree must be in for every write to be checked.
 *
 * fence_protect() makes a relation so (protect.c), the end of every DDL
 * command checks that it still is (ddl.c), and whatever is not is a hole
 * through which a row can be written with no token checked.  A relation
 * registered in fence_protected with an epoch column, a mode and a form is
 * intact when:
 *
 *	- it is an ordinary or partitioned table (not foreign), and not
 *	  unlogged (a crash would lose writes fence accepted);
 *	- its epoch column exists, is bigint, is neither generated nor an
 *	  identity column, and has no default but the constant 0 or NULL (any
 *	  other default is a token every INSERT would carry unchecked);
 *	- it carries exactly fence's triggers for the form, as fence_protect
 *	  creates them: name, timing, events, function, arguments (the
 *	  registry's column and mode), no column list, no transition tables,
 *	  not a constraint trigger, the after form's WHEN clause, ENABLE
 *	  ALWAYS, and no dependency on an extension (DROP EXTENSION of it would
 *	  drop the guard); and no other trigger of it calls a fence trigger
 *	  function;
 *	- in the after form, no foreign key updates its rows by itself (ON
 *	  UPDATE CASCADE, SET NULL or SET DEFAULT): such an UPDATE cannot write
 *	  a token into the epoch column, so the after form cannot check it;
 *	- every partition and inheritance child, at every level, is registered
 *	  with the same column, mode and form, and is intact itself.
 *
 * The checks read the catalogs as they are now (the relcache's trigger
 * list, the syscaches, pg_depend), after the caller's command has done its
 * work under its own locks.  Each answers with what broke, in words for an
 * errdetail, or NULL.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "nodes/primnodes.h"
#include "optimizer/optimizer.h"
#include "rewrite/prs2lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* tgtype of each of fence's triggers, as fence_protect creates them */
#define GUARD_TYPE_BEFORE_FORM \
	(TRIGGER_TYPE_ROW | TRIGGER_TYPE_BEFORE | TRIGGER_TYPE_INSERT | \
	 TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE)
#define GUARD_TYPE_AFTER_FORM \
	(TRIGGER_TYPE_ROW | TRIGGER_TYPE_BEFORE | TRIGGER_TYPE_INSERT | \
	 TRIGGER_TYPE_DELETE)
#define GUARD_UPDATE_TYPE	(TRIGGER_TYPE_ROW | TRIGGER_TYPE_AFTER | TRIGGER_TYPE_UPDATE)
#define TRUNCATE_TYPE		(TRIGGER_TYPE_BEFORE | TRIGGER_TYPE_TRUNCATE)

/* Is the node a Var of the trigger's NEW or OLD row, column attnum? */
static bool
is_row_var(Node *node, int varno, AttrNumber attnum)
{
	return node != NULL && IsA(node, Var) &&
		((Var *) node)->varno == varno && ((Var *) node)->varattno == attnum &&
		((Var *) node)->varlevelsup == 0;
}

/* Is the node a non-NULL Const of the type whose text is value? */
static bool
is_const_text(Node *node, Oid type, const char *value)
{
	Const	   *con = (Const *) node;

	if (node == NULL || !IsA(node, Const) || con->consttype != type || con->constisnull)
		return false;
	if (type == NAMEOID)
		return strcmp(NameStr(*DatumGetName(con->constvalue)), value) == 0;
	return strcmp(TextDatumGetCString(con->constvalue), value) == 0;
}

/*
 * Is the stored WHEN clause of the after form's trigger the one fence
 * creates: NOT fence_update_allowed(NEW.col, OLD.col, NEW.tableoid, 'col',
 * 'mode'), with the column and mode given?  Compared as the expression
 * tree, not as text.
 */
static bool
when_is_canonical(FenceTriggerFns *fns, Oid relid, const char *tgqual,
				  const char *column, const char *mode)
{
	Oid			argtypes[5] = {INT8OID, INT8OID, OIDOID, NAMEOID, TEXTOID};
	Oid			allowed_fn;
	AttrNumber	attnum = get_attnum(relid, column);
	Node	   *qual;
	BoolExpr   *not;
	FuncExpr   *call;

	if (tgqual == NULL || attnum <= 0)
		return false;
	allowed_fn = fence_find_function(fns->nspid, "fence_update_allowed", 5, argtypes);
	if (!OidIsValid(allowed_fn))
		return false;
	qual = stringToNode(tgqual);
	/* a WHEN clause is stored as an implicit-AND list */
	if (IsA(qual, List) && list_length((List *) qual) == 1)
		qual = (Node *) linitial((List *) qual);
	not = (BoolExpr *) qual;
	if (!IsA(not, BoolExpr) || not->boolop != NOT_EXPR ||
		list_length(not->args) != 1 || !IsA(linitial(not->args), FuncExpr))
		return false;
	call = (FuncExpr *) linitial(not->args);
	return call->funcid == allowed_fn && list_length(call->args) == 5 &&
		is_row_var(list_nth(call->args, 0), PRS2_NEW_VARNO, attnum) &&
		is_row_var(list_nth(call->args, 1), PRS2_OLD_VARNO, attnum) &&
		is_row_var(list_nth(call->args, 2), PRS2_NEW_VARNO, TableOidAttributeNumber) &&
		is_const_text(list_nth(call->args, 3), NAMEOID, column) &&
		is_const_text(list_nth(call->args, 4), TEXTOID, mode);
}

/* The trigger of that name on relid, from the relcache, or NULL. */
static Trigger *
find_trigger(Relation rel, const char *tgname)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
		if (strcmp(trigdesc->triggers[i].tgname, tgname) == 0)
			return &trigdesc->triggers[i];
	return NULL;
}

/*
 * fence_after_when_is_canonical: the after form's WHEN clause of the
 * table's trigger tgname, for the trigger's own column and mode (what a
 * restored or re-created trigger is compared with before it is trusted).
 */
bool
fence_after_when_is_canonical(FenceTriggerFns *fns, Oid relid, const char *tgname)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	Trigger    *trigger = find_trigger(rel, tgname);
	bool		ok = false;

	if (trigger != NULL && trigger->tgnargs <= 2)
		ok = when_is_canonical(fns, relid, trigger->tgqual,
							   trigger->tgnargs >= 1 ? trigger->tgargs[0] : FENCE_DEFAULT_EPOCH_COLUMN,
							   trigger->tgnargs >= 2 ? trigger->tgargs[1] : FENCE_DEFAULT_MODE);
	relation_close(rel, AccessShareLock);
	return ok;
}

/*
 * The extension a trigger depends on (ALTER TRIGGER ... DEPENDS ON
 * EXTENSION, or created by an extension's script), or InvalidOid.
 */
static Oid
trigger_extension(Oid trigoid)
{
	Relation	depRel = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			extoid = InvalidOid;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(TriggerRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(trigoid));
	scan = systable_beginscan(depRel, DependDependerIndexId, true, NULL, 2, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);

		if (dep->refclassid == ExtensionRelationId)
		{
			extoid = dep->refobjid;
			break;
		}
	}
	systable_endscan(scan);
	table_close(depRel, AccessShareLock);
	return extoid;
}

/*
 * What is wrong with one of fence's triggers, compared with the one
 * fence_protect creates for this column and mode, or NULL.
 */
static char *
trigger_broken(FenceTriggerFns *fns, Oid relid, Trigger *trigger,
			   int16 want_type, bool want_args, bool want_when,
			   const char *column, const char *mode)
{
	const char *name = trigger->tgname;
	Oid			extoid;

	if (trigger->tgtype != want_type)
		return psprintf("trigger \"%s\" does not fire as fence_protect creates it", name);
	if (trigger->tgnattr > 0)
		return psprintf("trigger \"%s\" has a column list", name);
	if (OidIsValid(trigger->tgconstraint))
		return psprintf("trigger \"%s\" is a constraint trigger", name);
	if (trigger->tgoldtable != NULL || trigger->tgnewtable != NULL)
		return psprintf("trigger \"%s\" has transition tables", name);
	if (want_args)
	{
		const char *argcol = trigger->tgnargs >= 1 ? trigger->tgargs[0] : FENCE_DEFAULT_EPOCH_COLUMN;
		const char *argmode = trigger->tgnargs >= 2 ? trigger->tgargs[1] : FENCE_DEFAULT_MODE;

		if (trigger->tgnargs > 2 || strcmp(argcol, column) != 0 ||
			strcmp(argmode, mode) != 0)
			return psprintf("trigger \"%s\" checks (%s, %s), not fence_protected's (%s, %s)",
							name, quote_literal_cstr(argcol), quote_literal_cstr(argmode),
							quote_literal_cstr(column), quote_literal_cstr(mode));
	}
	else if (trigger->tgnargs != 0)
		return psprintf("trigger \"%s\" has arguments", name);
	if (want_when)
	{
		if (!when_is_canonical(fns, relid, trigger->tgqual, column, mode))
			return psprintf("trigger \"%s\" has another WHEN clause than NOT fence_update_allowed(NEW.%s, OLD.%s, NEW.tableoid, %s, %s)",
							name, quote_identifier(column), quote_identifier(column),
							quote_literal_cstr(column), quote_literal_cstr(mode));
	}
	else if (trigger->tgqual != NULL)
		return psprintf("trigger \"%s\" has a WHEN clause", name);
	if (trigger->tgenabled != TRIGGER_FIRES_ALWAYS)
		return psprintf("trigger \"%s\" is %s, not ENABLE ALWAYS", name,
						trigger->tgenabled == TRIGGER_DISABLED ? "disabled" :
						trigger->tgenabled == TRIGGER_FIRES_ON_REPLICA ? "ENABLE REPLICA" :
						"ENABLE");
	extoid = trigger_extension(trigger->tgoid);
	if (OidIsValid(extoid))
	{
		char	   *extname = get_extension_name(extoid);

		return psprintf("trigger \"%s\" depends on extension \"%s\", and DROP EXTENSION would drop it",
						name, extname ? extname : "?");
	}
	return NULL;
}

/* What is wrong with the epoch column, or NULL. */
static char *
column_broken(Relation rel, const char *column)
{
	Oid			relid = RelationGetRelid(rel);
	AttrNumber	attnum = get_attnum(relid, column);
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute att;
	int			i;

	if (attnum <= 0)
		return psprintf("its epoch column \"%s\" does not exist", column);
	att = TupleDescAttr(desc, attnum - 1);
	if (att->atttypid != INT8OID)
		return psprintf("its epoch column \"%s\" is not of type bigint", column);
	if (att->attgenerated != '\0')
		return psprintf("its epoch column \"%s\" is generated", column);
	if (att->attidentity != '\0')
		return psprintf("its epoch column \"%s\" is an identity column", column);
	if (!att->atthasdef || desc->constr == NULL)
		return NULL;
	for (i = 0; i < desc->constr->num_defval; i++)
	{
		AttrDefault *def = &desc->constr->defval[i];
		Node	   *expr;

		if (def->adnum != attnum)
			continue;
		/* DEFAULT 0 is stored as int8(0): fold it, as the planner would */
		expr = eval_const_expressions(NULL, stringToNode(def->adbin));
		if (IsA(expr, Const) &&
			(((Const *) expr)->constisnull ||
			 (((Const *) expr)->consttype == INT8OID &&
			  DatumGetInt64(((Const *) expr)->constvalue) == 0)))
			return NULL;
		return psprintf("its epoch column \"%s\" has a default other than 0: every INSERT would carry it as a token",
						column);
	}
	return NULL;
}

/*
 * In the after form, a foreign key of the table whose action updates the
 * table's rows (ON UPDATE CASCADE, SET NULL, SET DEFAULT; ON DELETE SET
 * NULL, SET DEFAULT): its name, or NULL.
 */
static char *
updating_foreign_key(Relation rel)
{
	List	   *fkeys = RelationGetFKeyList(rel);
	ListCell   *lc;

	foreach(lc, fkeys)
	{
		ForeignKeyCacheInfo *fk = (ForeignKeyCacheInfo *) lfirst(lc);
		HeapTuple	tup;
		char	   *name = NULL;

		if (fk->conrelid != RelationGetRelid(rel))
			continue;
		tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(fk->conoid));
		if (!HeapTupleIsValid(tup))
			continue;
		{
			Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tup);

			if (con->confupdtype == FKCONSTR_ACTION_CASCADE ||
				con->confupdtype == FKCONSTR_ACTION_SETNULL ||
				con->confupdtype == FKCONSTR_ACTION_SETDEFAULT ||
				con->confdeltype == FKCONSTR_ACTION_SETNULL ||
				con->confdeltype == FKCONSTR_ACTION_SETDEFAULT)
				name = pstrdup(NameStr(con->conname));
		}
		ReleaseSysCache(tup);
		if (name)
			return name;
	}
	return NULL;
}

/*
 * What is wrong with one relation protected with this column, mode and
 * form, on its own (its tree: fence_tree_broken), or NULL if it is intact.
 * A relation that no longer exists is nobody's concern here.
 */
char *
fence_rel_broken(FenceTriggerFns *fns, Oid relid, const char *column,
				 const char *mode, const char *form)
{
	Relation	rel = try_relation_open(relid, AccessShareLock);
	TriggerDesc *trigdesc;
	bool		after = fence_form_is_after(form);
	bool		have_guard = false;
	bool		have_update = false;
	bool		have_truncate = false;
	char	   *problem = NULL;
	int			i;

	if (rel == NULL)
		return NULL;
	if (rel->rd_rel->relkind == RELKIND_FOREIGN_TABLE)
		problem = pstrdup("it is a foreign table, which cannot refuse TRUNCATE");
	else if (rel->rd_rel->relkind != RELKIND_RELATION &&
			 rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		problem = pstrdup("it is not a table");
	else if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
		problem = pstrdup("it is unlogged: a crash would lose writes that fence accepted");
	if (problem == NULL)
		problem = column_broken(rel, column);

	trigdesc = rel->trigdesc;
	for (i = 0; problem == NULL && trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];
		bool	   *have;
		const char *want_name;
		int16		want_type;

		if (trigger->tgfoid == fns->guard_fn)
		{
			have = &have_guard;
			want_name = FENCE_GUARD_TRIGGER;
			want_type = after ? GUARD_TYPE_AFTER_FORM : GUARD_TYPE_BEFORE_FORM;
		}
		else if (OidIsValid(fns->guard_after_fn) && trigger->tgfoid == fns->guard_after_fn)
		{
			if (!after)
			{
				problem = psprintf("trigger \"%s\" calls fence_guard_after(), but the table is protected in the before form",
								   trigger->tgname);
				break;
			}
			have = &have_update;
			want_name = FENCE_GUARD_UPDATE_TRIGGER;
			want_type = GUARD_UPDATE_TYPE;
		}
		else if (trigger->tgfoid == fns->refuse_truncate_fn)
		{
			have = &have_truncate;
			want_name = FENCE_TRUNCATE_TRIGGER;
			want_type = TRUNCATE_TYPE;
		}
		else
			continue;

		if (*have || strcmp(trigger->tgname, want_name) != 0)
		{
			problem = psprintf("trigger \"%s\" calls %s() but is not the one fence_protect creates (%s)",
							   trigger->tgname, get_func_name(trigger->tgfoid), want_name);
			break;
		}
		*have = true;
		problem = trigger_broken(fns, relid, trigger, want_type,
								 trigger->tgfoid != fns->refuse_truncate_fn,
								 have == &have_update, column, mode);
	}
	if (problem == NULL && !have_guard)
		problem = psprintf("it has no trigger \"%s\": writes are not checked", FENCE_GUARD_TRIGGER);
	if (problem == NULL && after && !have_update)
		problem = psprintf("it has no trigger \"%s\": UPDATEs are not checked", FENCE_GUARD_UPDATE_TRIGGER);
	if (problem == NULL && !have_truncate)
		problem = psprintf("it has no trigger \"%s\": TRUNCATE empties it", FENCE_TRUNCATE_TRIGGER);
	if (problem == NULL && after)
	{
		char	   *fkname = updating_foreign_key(rel);

		if (fkname)
			problem = psprintf("its foreign key \"%s\" updates its rows by itself (a cascade cannot write a token into the epoch column), which the after form cannot check",
							   fkname);
	}
	relation_close(rel, AccessShareLock);
	return problem;
}

/*
 * Is member, a partition or child in a tree protected with this column,
 * mode and form, registered alike?  NULL, or what is wrong.
 */
char *
fence_member_broken(FenceTriggerFns *fns, Oid member, const char *column,
					const char *mode, const char *form)
{
	char	   *mcolumn;
	char	   *mmode;
	char	   *mform;
	const char *kind = get_rel_relispartition(member) ? "partition" : "child";

	if (!fence_registry_lookup(fns, member, &mcolumn, &mmode, &mform))
		return psprintf("its %s \"%s\" is not registered in fence_protected",
						kind, fence_rel_display_name(member));
	if (strcmp(mcolumn, column) != 0 || strcmp(mmode, mode) != 0 ||
		fence_form_is_after(mform) != fence_form_is_after(form))
		return psprintf("its %s \"%s\" is protected as (%s, %s, %s), not as (%s, %s, %s)",
						kind, fence_rel_display_name(member),
						quote_literal_cstr(mcolumn), quote_literal_cstr(mmode),
						quote_literal_cstr(mform), quote_literal_cstr(column),
						quote_literal_cstr(mode), quote_literal_cstr(form));
	return NULL;
}

/*
 * What is wrong with relid's whole tree, protected with this column, mode
 * and form: relid itself, and every partition and child at every level,
 * each registered alike and intact.  *where gets the member that is not.
 */
char *
fence_tree_broken(FenceTriggerFns *fns, Oid relid, const char *column,
				  const char *mode, const char *form, Oid *where)
{
	List	   *members = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;
	char	   *problem = NULL;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);

		if (member != relid)
			problem = fence_member_broken(fns, member, column, mode, form);
		if (problem == NULL)
			problem = fence_rel_broken(fns, member, column, mode, form);
		if (problem != NULL)
		{
			*where = member;
			break;
		}
	}
	list_free(members);
	return problem;
}
