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
 *	- it has no rule: a DO INSTEAD rule turns a write into one the guard
 *	  never sees (and the writer is told it succeeded), and any other rule
 *	  adds writes that run as the table's owner;
 *	- every partition and inheritance child, at every level, is registered
 *	  with the same column, mode and form, and is intact itself;
 *	- fence's four event triggers exist, each on its event, unfiltered and
 *	  ENABLE ALWAYS (they are the database's, not the relation's: ddl.c
 *	  checks them once per command that touches a protected relation).
 *
 * The checks read the catalogs as they are now (pg_class, pg_attribute,
 * pg_attrdef, pg_trigger, pg_constraint, pg_rewrite, pg_depend,
 * pg_event_trigger), and
 * lock no relation: ddl.c calls them after its command has done its work
 * under its own locks, protect.c under fence_protect's, and fence_audit
 * (audit.c), which any role may run, under none.  Each way in which a
 * relation falls short is a finding (a kind, the relation, the trigger,
 * what was expected), in the order of the list above; the callers word
 * them: the end of a DDL command and fence_protect raise the first one in
 * fence_finding_detail's words, fence_audit returns a row for each.
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
#include "access/transam.h"
#include "catalog/indexing.h"
#include "catalog/pg_attrdef.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_event_trigger.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "nodes/nodeFuncs.h"
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

/* Is the node a non-NULL Const of the type? */
static bool
is_const_of(Node *node, Oid type)
{
	Const	   *con = (Const *) node;

	return node != NULL && IsA(node, Const) && con->consttype == type &&
		!con->constisnull;
}

/* Is the node the name constant value? */
static bool
is_const_name(Node *node, const char *value)
{
	return is_const_of(node, NAMEOID) &&
		strcmp(NameStr(*DatumGetName(((Const *) node)->constvalue)), value) == 0;
}

/* Is the node a text constant that names the mode? */
static bool
is_const_mode(Node *node, FenceMode mode)
{
	FenceMode	named;

	return is_const_of(node, TEXTOID) &&
		fence_mode_lookup(TextDatumGetCString(((Const *) node)->constvalue), &named) &&
		named == mode;
}

/*
 * Is the stored WHEN clause of the after form's trigger the one fence
 * creates: NOT fence_update_allowed(NEW.col, OLD.col, NEW.tableoid, 'col',
 * 'mode'), with the column and mode given?  Compared as the expression
 * tree, not as text.
 */
static bool
when_is_canonical(FenceCatalog *cat, Oid relid, const char *tgqual,
				  const FenceRegistration *reg)
{
	Oid			argtypes[5] = {INT8OID, INT8OID, OIDOID, NAMEOID, TEXTOID};
	Oid			allowed_fn;
	AttrNumber	attnum = get_attnum(relid, reg->column);
	Node	   *qual;
	BoolExpr   *not;
	FuncExpr   *call;

	if (tgqual == NULL || attnum <= 0)
		return false;
	allowed_fn = fence_find_function(cat->nspid, "fence_update_allowed", 5, argtypes);
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
		is_const_name(list_nth(call->args, 3), reg->column) &&
		is_const_mode(list_nth(call->args, 4), reg->mode);
}

/*
 * What a guard's trigger arguments name, the defaults for those it leaves
 * out, as *reg in the given form: the text of its arguments is read here.
 * False if its mode is not one fence knows (reg->mode is then the default).
 */
static bool
trigger_registration(FenceTrigger *t, FenceForm form, FenceRegistration *reg)
{
	reg->column = t->nargs >= 1 ? t->args[0] : FENCE_DEFAULT_EPOCH_COLUMN;
	reg->mode = FENCE_DEFAULT_MODE;
	reg->form = form;
	return t->nargs < 2 || fence_mode_lookup(t->args[1], &reg->mode);
}

/*
 * The relation's triggers, as pg_trigger holds them, in name order (the
 * order in which they fire).  Read from the catalog, not the relcache, so
 * that a caller holding no lock on the relation (fence_audit, run by any
 * role) takes none.
 */
List *
fence_rel_triggers(Oid relid)
{
	Relation	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *result = NIL;

	ScanKeyInit(&key, Anum_pg_trigger_tgrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(tgrel, TriggerRelidNameIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_trigger tg = (Form_pg_trigger) GETSTRUCT(tup);
		FenceTrigger *t = palloc0(sizeof(FenceTrigger));
		Datum		d;
		bool		isnull;

		t->oid = tg->oid;
		t->name = pstrdup(NameStr(tg->tgname));
		t->fnoid = tg->tgfoid;
		t->type = tg->tgtype;
		t->enabled = tg->tgenabled;
		t->parentid = tg->tgparentid;
		t->constraint = tg->tgconstraint;
		t->nattr = tg->tgattr.dim1;
		t->nargs = tg->tgnargs;
		if (t->nargs > 0)
		{
			bytea	   *val;
			char	   *p;
			char	   *end;
			int			i;

			d = heap_getattr(tup, Anum_pg_trigger_tgargs, RelationGetDescr(tgrel), &isnull);
			val = DatumGetByteaPP(d);
			p = VARDATA_ANY(val);
			end = p + VARSIZE_ANY_EXHDR(val);
			t->args = palloc0(sizeof(char *) * t->nargs);
			for (i = 0; i < t->nargs && p < end; i++)
			{
				t->args[i] = pstrdup(p);
				p += strlen(p) + 1;
			}
			for (; i < t->nargs; i++)
				t->args[i] = pstrdup("");
		}
		d = heap_getattr(tup, Anum_pg_trigger_tgqual, RelationGetDescr(tgrel), &isnull);
		t->qual = isnull ? NULL : TextDatumGetCString(d);
		(void) heap_getattr(tup, Anum_pg_trigger_tgoldtable, RelationGetDescr(tgrel), &isnull);
		t->transition = !isnull;
		(void) heap_getattr(tup, Anum_pg_trigger_tgnewtable, RelationGetDescr(tgrel), &isnull);
		t->transition = t->transition || !isnull;
		result = lappend(result, t);
	}
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);
	return result;
}

/*
 * fence_after_when_is_canonical: the after form's WHEN clause of the
 * table's trigger tgname, for the trigger's own column and mode (what a
 * restored or re-created trigger is compared with before it is trusted).
 */
bool
fence_after_when_is_canonical(FenceCatalog *cat, Oid relid, const char *tgname)
{
	ListCell   *lc;

	foreach(lc, fence_rel_triggers(relid))
	{
		FenceTrigger *t = (FenceTrigger *) lfirst(lc);
		FenceRegistration targs;

		if (strcmp(t->name, tgname) == 0)
			return t->nargs <= 2 &&
				trigger_registration(t, FENCE_FORM_AFTER, &targs) &&
				when_is_canonical(cat, relid, t->qual, &targs);
	}
	return false;
}

/*
 * The extension an object (classid, objid) depends on, or InvalidOid: with
 * deptype '\0' by any dependency (a trigger's ALTER TRIGGER ... DEPENDS ON
 * EXTENSION, or membership), else only by that kind.
 */
Oid
fence_object_extension(Oid classid, Oid objid, char deptype)
{
	Relation	depRel = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			extoid = InvalidOid;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(classid));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(objid));
	scan = systable_beginscan(depRel, DependDependerIndexId, true, NULL, 2, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);

		if (dep->refclassid == ExtensionRelationId &&
			(deptype == '\0' || dep->deptype == deptype))
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
 * A new finding about relid, protected as reg says (NULL for none),
 * appended to *findings.
 */
static FenceFinding *
add_finding(List **findings, FenceFindingKind kind, Oid relid,
			const FenceRegistration *reg)
{
	FenceFinding *f = palloc0(sizeof(FenceFinding));

	f->kind = kind;
	f->relid = relid;
	if (reg != NULL)
		f->reg = *reg;
	*findings = lappend(*findings, f);
	return f;
}

/* Is the column of the relation a bigint column? */
static bool
is_bigint_column(Oid relid, const char *column)
{
	AttrNumber	attnum = get_attnum(relid, column);

	return attnum > 0 && get_atttype(relid, attnum) == INT8OID;
}

/*
 * How one of fence's triggers differs in form from the one fence_protect
 * creates for the registry's column and mode: the first difference, or
 * -1.  (Its firing state and its dependencies are findings of their own.)
 */
static int
trigger_form_finding(FenceCatalog *cat, Oid relid, FenceTrigger *t,
					 const char *want, int16 want_type, bool is_truncate,
					 bool want_when, const FenceRegistration *reg)
{
	if (strcmp(t->name, want) != 0)
		return FENCE_FOUND_TRIGGER_NAME;
	if (t->type != want_type)
		return FENCE_FOUND_TRIGGER_TYPE;
	if (!want_when && t->qual != NULL)
		return FENCE_FOUND_TRIGGER_WHEN;
	if (t->nattr > 0)
		return FENCE_FOUND_TRIGGER_COLUMNS;
	if (OidIsValid(t->constraint))
		return FENCE_FOUND_TRIGGER_CONSTRAINT;
	if (t->transition)
		return FENCE_FOUND_TRIGGER_TRANSITION;
	if (is_truncate)
		return t->nargs != 0 ? FENCE_FOUND_TRIGGER_NARGS : -1;
	if (t->nargs > 2)
		return FENCE_FOUND_TRIGGER_NARGS;
	{
		FenceRegistration targs;
		bool		mode_known = trigger_registration(t, reg->form, &targs);

		if (!is_bigint_column(relid, targs.column))
			return FENCE_FOUND_TRIGGER_EPOCH_COLUMN;
		if (!mode_known)
			return FENCE_FOUND_TRIGGER_MODE;
		if (strcmp(targs.column, reg->column) != 0 || targs.mode != reg->mode)
			return FENCE_FOUND_TRIGGER_ARGS;
	}
	if (want_when && !when_is_canonical(cat, relid, t->qual, reg))
		return FENCE_FOUND_TRIGGER_UPDATE_WHEN;
	return -1;
}

static bool
is_user_function(Oid func_id, void *context pg_attribute_unused())
{
	return func_id >= FirstNormalObjectId;
}

/* Does the expression call a function that is not built in? */
static bool
calls_user_function(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, is_user_function, context))
		return true;
	return expression_tree_walker(node, calls_user_function, context);
}

/* The findings about the epoch column, appended to *findings. */
static void
column_findings(List **findings, Oid relid, const FenceRegistration *reg)
{
	HeapTuple	tup = SearchSysCacheAttName(relid, reg->column);
	Form_pg_attribute att;
	FenceFindingKind kind = FENCE_FOUND_COLUMN_MISSING;
	bool		found = true;

	if (!HeapTupleIsValid(tup))
	{
		add_finding(findings, kind, relid, reg);
		return;
	}
	att = (Form_pg_attribute) GETSTRUCT(tup);
	if (att->attnum <= 0)
		kind = FENCE_FOUND_COLUMN_MISSING;
	else if (att->atttypid != INT8OID)
		kind = FENCE_FOUND_COLUMN_TYPE;
	else if (att->attgenerated != '\0')
		kind = FENCE_FOUND_COLUMN_GENERATED;
	else if (att->attidentity != '\0')
		kind = FENCE_FOUND_COLUMN_IDENTITY;
	else if (att->atthasdef)
	{
		/* the default, from pg_attrdef */
		Relation	adrel = table_open(AttrDefaultRelationId, AccessShareLock);
		ScanKeyData key[2];
		SysScanDesc scan;
		HeapTuple	adtup;

		found = false;
		ScanKeyInit(&key[0], Anum_pg_attrdef_adrelid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(relid));
		ScanKeyInit(&key[1], Anum_pg_attrdef_adnum, BTEqualStrategyNumber,
					F_INT2EQ, Int16GetDatum(att->attnum));
		scan = systable_beginscan(adrel, AttrDefaultIndexId, true, NULL, 2, key);
		if (HeapTupleIsValid(adtup = systable_getnext(scan)))
		{
			bool		isnull;
			Datum		d = heap_getattr(adtup, Anum_pg_attrdef_adbin,
										 RelationGetDescr(adrel), &isnull);
			Node	   *expr;

			/*
			 * DEFAULT 0 is stored as int8(0): fold it, as the planner would,
			 * but only if it calls built-in functions alone.  fence_audit
			 * runs this as whoever calls it, a superuser say, and must not
			 * run the table owner's functions.
			 */
			expr = isnull ? NULL : stringToNode(TextDatumGetCString(d));
			if (expr != NULL && !calls_user_function(expr, NULL))
				expr = eval_const_expressions(NULL, expr);
			found = !(expr != NULL && IsA(expr, Const) &&
					  (((Const *) expr)->constisnull ||
					   (((Const *) expr)->consttype == INT8OID &&
						DatumGetInt64(((Const *) expr)->constvalue) == 0)));
			kind = FENCE_FOUND_COLUMN_DEFAULT;
		}
		systable_endscan(scan);
		table_close(adrel, AccessShareLock);
	}
	else
		found = false;
	ReleaseSysCache(tup);
	if (found)
		add_finding(findings, kind, relid, reg);
}

/*
 * In the after form, the foreign keys of the table whose action updates
 * the table's rows (ON UPDATE CASCADE, SET NULL, SET DEFAULT; ON DELETE SET
 * NULL, SET DEFAULT), appended to *findings.
 */
static void
updating_fkey_findings(List **findings, Oid relid, const FenceRegistration *reg)
{
	Relation	conrel = table_open(ConstraintRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key, Anum_pg_constraint_conrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(conrel, ConstraintRelidTypidNameIndexId, true,
							  NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tup);

		if (con->contype != CONSTRAINT_FOREIGN)
			continue;
		if (con->confupdtype == FKCONSTR_ACTION_CASCADE ||
			con->confupdtype == FKCONSTR_ACTION_SETNULL ||
			con->confupdtype == FKCONSTR_ACTION_SETDEFAULT ||
			con->confdeltype == FKCONSTR_ACTION_SETNULL ||
			con->confdeltype == FKCONSTR_ACTION_SETDEFAULT)
			add_finding(findings, FENCE_FOUND_UPDATING_FKEY, relid,
						reg)->name = pstrdup(NameStr(con->conname));
	}
	systable_endscan(scan);
	table_close(conrel, AccessShareLock);
}

/* The relation's rules, in name order, appended to *findings. */
static void
rule_findings(List **findings, Oid relid, const FenceRegistration *reg)
{
	Relation	rwrel = table_open(RewriteRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key, Anum_pg_rewrite_ev_class, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(rwrel, RewriteRelRulenameIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
		add_finding(findings, FENCE_FOUND_RULE, relid, reg)->name =
			pstrdup(NameStr(((Form_pg_rewrite) GETSTRUCT(tup))->rulename));
	systable_endscan(scan);
	table_close(rwrel, AccessShareLock);
}

/*
 * Everything that keeps one relation, protected as reg says, from being
 * intact on its own (its tree: fence_member_finding), in the order of the
 * definition: the relation, its epoch column, its triggers in name order
 * (for each: its form, its firing state, its dependency on an extension),
 * the triggers it lacks, the after form's foreign keys, its rules.  NIL
 * when it is intact, or no longer exists.  Read from the catalogs, under
 * whatever locks the caller holds.
 */
List *
fence_rel_findings(FenceCatalog *cat, Oid relid, const FenceRegistration *reg)
{
	HeapTuple	classtup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	char		relkind;
	char		relpersistence;
	bool		after = (reg->form == FENCE_FORM_AFTER);
	bool		have_guard = false;
	bool		have_update = false;
	bool		have_truncate = false;
	List	   *findings = NIL;
	ListCell   *lc;

	if (!HeapTupleIsValid(classtup))
		return NIL;
	relkind = ((Form_pg_class) GETSTRUCT(classtup))->relkind;
	relpersistence = ((Form_pg_class) GETSTRUCT(classtup))->relpersistence;
	ReleaseSysCache(classtup);

	if (relkind == RELKIND_FOREIGN_TABLE)
		add_finding(&findings, FENCE_FOUND_FOREIGN, relid, reg);
	else if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		add_finding(&findings, FENCE_FOUND_NOT_TABLE, relid, reg);
	if (relpersistence == RELPERSISTENCE_UNLOGGED)
		add_finding(&findings, FENCE_FOUND_UNLOGGED, relid, reg);
	column_findings(&findings, relid, reg);

	foreach(lc, fence_rel_triggers(relid))
	{
		FenceTrigger *t = (FenceTrigger *) lfirst(lc);
		const char *want;
		int16		want_type;
		bool		is_truncate = false;
		bool		want_when = false;
		int			kind;
		Oid			extoid;
		FenceFinding *f;

		if (t->fnoid == cat->guard_fn)
		{
			have_guard = true;
			want = FENCE_GUARD_TRIGGER;
			want_type = after ? GUARD_TYPE_AFTER_FORM : GUARD_TYPE_BEFORE_FORM;
		}
		else if (OidIsValid(cat->guard_after_fn) && t->fnoid == cat->guard_after_fn)
		{
			have_update = true;
			want = FENCE_GUARD_UPDATE_TRIGGER;
			want_type = GUARD_UPDATE_TYPE;
			want_when = true;
		}
		else if (t->fnoid == cat->refuse_truncate_fn)
		{
			have_truncate = true;
			want = FENCE_TRUNCATE_TRIGGER;
			want_type = TRUNCATE_TYPE;
			is_truncate = true;
		}
		else
		{
			/* fence's name, another function */
			if (strcmp(t->name, FENCE_GUARD_TRIGGER) == 0)
				have_guard = true;
			else if (strcmp(t->name, FENCE_GUARD_UPDATE_TRIGGER) == 0)
				have_update = true;
			else if (strcmp(t->name, FENCE_TRUNCATE_TRIGGER) == 0)
				have_truncate = true;
			else
				continue;
			f = add_finding(&findings, FENCE_FOUND_TRIGGER_IMPOSTOR, relid, reg);
			f->trigger = t;
			f->want = t->name;
			continue;
		}

		if (want_when && !after)
			kind = FENCE_FOUND_TRIGGER_UPDATE_IN_BEFORE_FORM;
		else
			kind = trigger_form_finding(cat, relid, t, want, want_type,
										is_truncate, want_when, reg);
		if (kind >= 0)
		{
			f = add_finding(&findings, (FenceFindingKind) kind, relid, reg);
			f->trigger = t;
			f->want = want;
		}
		if (t->enabled != TRIGGER_FIRES_ALWAYS)
		{
			f = add_finding(&findings, FENCE_FOUND_TRIGGER_ENABLED, relid, reg);
			f->trigger = t;
			f->want = want;
		}
		extoid = fence_object_extension(TriggerRelationId, t->oid, '\0');
		if (OidIsValid(extoid))
		{
			char	   *extname = get_extension_name(extoid);

			f = add_finding(&findings, FENCE_FOUND_TRIGGER_EXTENSION, relid, reg);
			f->trigger = t;
			f->want = want;
			f->name = extname ? extname : "?";
		}
	}
	if (!have_guard)
		add_finding(&findings, FENCE_FOUND_NO_GUARD, relid, reg);
	if (after && !have_update)
		add_finding(&findings, FENCE_FOUND_NO_UPDATE_CHECK, relid, reg);
	if (!have_truncate)
		add_finding(&findings, FENCE_FOUND_NO_TRUNCATE, relid, reg);
	if (after)
		updating_fkey_findings(&findings, relid, reg);
	rule_findings(&findings, relid, reg);
	return findings;
}

/* Do two registrations differ? */
bool
fence_registration_differs(const FenceRegistration *a, const FenceRegistration *b)
{
	return strcmp(a->column, b->column) != 0 || a->mode != b->mode ||
		a->form != b->form;
}

/*
 * Is member, a partition or child of relid, in a tree protected as reg
 * says, registered alike?  NULL, or the finding.
 */
FenceFinding *
fence_member_finding(FenceCatalog *cat, Oid relid, Oid member,
					 const FenceRegistration *reg)
{
	FenceRegistration mreg;
	FenceFinding *f = palloc0(sizeof(FenceFinding));

	f->relid = relid;
	f->member = member;
	f->reg = *reg;
	if (!fence_protected_lookup(cat, member, &mreg))
		f->kind = FENCE_FOUND_MEMBER_UNREGISTERED;
	else if (fence_registration_differs(&mreg, reg))
	{
		f->kind = FENCE_FOUND_MEMBER_DIFFERS;
		f->mreg = mreg;
	}
	else
	{
		pfree(f);
		return NULL;
	}
	return f;
}

/*
 * fence's event triggers, found by their function: for each, one on its
 * event, unfiltered and ENABLE ALWAYS is enough; without one, each of the
 * function's event triggers is a finding, or its absence is.  (ALTER EVENT
 * TRIGGER fires no event trigger, so the end of a later command is the
 * first place where a change to them can be seen.)
 */
typedef struct FenceEventTrigger
{
	Oid			oid;
	char	   *name;
	char	   *event;
	Oid			fnoid;
	char		enabled;
	bool		filtered;
} FenceEventTrigger;

static int
event_trigger_name_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(((FenceEventTrigger *) lfirst(a))->name,
				  ((FenceEventTrigger *) lfirst(b))->name);
}

List *
fence_event_trigger_findings(Oid nspid)
{
	static const char *const functions[][2] = {
		/* in the order of the function's name */
		{"fence_ddl_command_end", "ddl_command_end"},
		{"fence_ddl_command_start", "ddl_command_start"},
		{"fence_sql_drop", "sql_drop"},
		{"fence_table_rewrite", "table_rewrite"},
	};
	Relation	evtrel = table_open(EventTriggerRelationId, AccessShareLock);
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *all = NIL;
	List	   *findings = NIL;
	size_t		i;

	scan = systable_beginscan(evtrel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_event_trigger evt = (Form_pg_event_trigger) GETSTRUCT(tup);
		FenceEventTrigger *e = palloc(sizeof(FenceEventTrigger));
		bool		isnull;

		e->oid = evt->oid;
		e->name = pstrdup(NameStr(evt->evtname));
		e->event = pstrdup(NameStr(evt->evtevent));
		e->fnoid = evt->evtfoid;
		e->enabled = evt->evtenabled;
		(void) heap_getattr(tup, Anum_pg_event_trigger_evttags,
							RelationGetDescr(evtrel), &isnull);
		e->filtered = !isnull;
		all = lappend(all, e);
	}
	systable_endscan(scan);
	table_close(evtrel, AccessShareLock);
	list_sort(all, event_trigger_name_cmp);

	for (i = 0; i < lengthof(functions); i++)
	{
		const char *fn = functions[i][0];
		const char *event = functions[i][1];
		Oid			fnoid = fence_find_function(nspid, fn, 0, NULL);
		List	   *mine = NIL;
		bool		ok = false;
		ListCell   *lc;
		FenceFinding *f;

		if (!OidIsValid(fnoid))
		{
			f = add_finding(&findings, FENCE_FOUND_EVENT_FUNCTION_MISSING, InvalidOid,
							NULL);
			f->event = event;
			f->evtfn = fn;
			continue;
		}
		foreach(lc, all)
		{
			FenceEventTrigger *e = (FenceEventTrigger *) lfirst(lc);

			if (e->fnoid != fnoid)
				continue;
			mine = lappend(mine, e);
			if (strcmp(e->event, event) == 0 && !e->filtered &&
				e->enabled == TRIGGER_FIRES_ALWAYS)
				ok = true;
		}
		if (ok)
			continue;
		if (mine == NIL)
		{
			f = add_finding(&findings, FENCE_FOUND_EVENT_MISSING, InvalidOid,
							NULL);
			f->event = event;
			f->evtfn = fn;
			continue;
		}
		foreach(lc, mine)
		{
			FenceEventTrigger *e = (FenceEventTrigger *) lfirst(lc);

			f = add_finding(&findings,
							strcmp(e->event, event) != 0 ? FENCE_FOUND_EVENT_WRONG_EVENT :
							e->filtered ? FENCE_FOUND_EVENT_FILTERED :
							FENCE_FOUND_EVENT_ENABLED,
							InvalidOid, NULL);
			f->event = event;
			f->evtfn = fn;
			f->name = e->name;
			f->evtoid = e->oid;
			f->evtevent = e->event;
			f->evtenabled = e->enabled;
		}
	}
	return findings;
}

/* A firing state as ALTER ... TRIGGER names it. */
static const char *
enabled_word(char enabled)
{
	switch (enabled)
	{
		case TRIGGER_DISABLED:
			return "disabled";
		case TRIGGER_FIRES_ON_REPLICA:
			return "ENABLE REPLICA";
		case TRIGGER_FIRES_ON_ORIGIN:
			return "ENABLE";
		default:
			return "ENABLE ALWAYS";
	}
}

/*
 * A finding in words, for an errdetail (lower-case, no final period): what
 * the end of a DDL command and fence_protect report.
 */
char *
fence_finding_detail(FenceFinding *f)
{
	FenceTrigger *t = f->trigger;
	const char *tgname;

	if ((t == NULL || f->want == NULL) && f->kind >= FENCE_FOUND_TRIGGER_IMPOSTOR &&
		f->kind <= FENCE_FOUND_TRIGGER_EXTENSION)
		elog(ERROR, "fence finding %d names no trigger", (int) f->kind);
	tgname = t ? t->name : NULL;

	switch (f->kind)
	{
		case FENCE_FOUND_FOREIGN:
			return pstrdup("it is a foreign table, which cannot refuse TRUNCATE");
		case FENCE_FOUND_NOT_TABLE:
			return pstrdup("it is not a table");
		case FENCE_FOUND_UNLOGGED:
			return pstrdup("it is unlogged: a crash would lose writes that fence accepted");
		case FENCE_FOUND_COLUMN_MISSING:
			return psprintf("its epoch column \"%s\" does not exist", f->reg.column);
		case FENCE_FOUND_COLUMN_TYPE:
			return psprintf("its epoch column \"%s\" is not of type bigint", f->reg.column);
		case FENCE_FOUND_COLUMN_GENERATED:
			return psprintf("its epoch column \"%s\" is generated", f->reg.column);
		case FENCE_FOUND_COLUMN_IDENTITY:
			return psprintf("its epoch column \"%s\" is an identity column", f->reg.column);
		case FENCE_FOUND_COLUMN_DEFAULT:
			return psprintf("its epoch column \"%s\" has a default other than 0: every INSERT would carry it as a token",
							f->reg.column);
		case FENCE_FOUND_TRIGGER_IMPOSTOR:
			return psprintf("trigger \"%s\" calls %s(), not fence's %s()", tgname,
							get_func_name(t->fnoid),
							strcmp(tgname, FENCE_GUARD_TRIGGER) == 0 ? "fence_guard" :
							strcmp(tgname, FENCE_GUARD_UPDATE_TRIGGER) == 0 ? "fence_guard_after" :
							"fence_refuse_truncate");
		case FENCE_FOUND_TRIGGER_UPDATE_IN_BEFORE_FORM:
			return psprintf("trigger \"%s\" calls fence_guard_after(), but the table is protected in the before form",
							tgname);
		case FENCE_FOUND_TRIGGER_NAME:
			return psprintf("trigger \"%s\" calls %s() but is not the one fence_protect creates (%s)",
							tgname, get_func_name(t->fnoid), f->want);
		case FENCE_FOUND_TRIGGER_TYPE:
			return psprintf("trigger \"%s\" does not fire as fence_protect creates it", tgname);
		case FENCE_FOUND_TRIGGER_WHEN:
			return psprintf("trigger \"%s\" has a WHEN clause", tgname);
		case FENCE_FOUND_TRIGGER_COLUMNS:
			return psprintf("trigger \"%s\" has a column list", tgname);
		case FENCE_FOUND_TRIGGER_CONSTRAINT:
			return psprintf("trigger \"%s\" is a constraint trigger", tgname);
		case FENCE_FOUND_TRIGGER_TRANSITION:
			return psprintf("trigger \"%s\" has transition tables", tgname);
		case FENCE_FOUND_TRIGGER_NARGS:
			if (strcmp(f->want, FENCE_TRUNCATE_TRIGGER) == 0)
				return psprintf("trigger \"%s\" has arguments", tgname);
			pg_fallthrough;
		case FENCE_FOUND_TRIGGER_EPOCH_COLUMN:
		case FENCE_FOUND_TRIGGER_MODE:
		case FENCE_FOUND_TRIGGER_ARGS:
			{
				const char *argcol = t->nargs >= 1 ? t->args[0] : FENCE_DEFAULT_EPOCH_COLUMN;
				const char *argmode = t->nargs >= 2 ? t->args[1] : fence_mode_name(FENCE_DEFAULT_MODE);

				if (f->kind == FENCE_FOUND_TRIGGER_EPOCH_COLUMN &&
					strcmp(argcol, f->reg.column) == 0)
					return psprintf("trigger \"%s\" checks column \"%s\", which is not a bigint column of the table",
									tgname, argcol);
				return psprintf("trigger \"%s\" checks (%s, %s), not fence_protected's (%s, %s)",
								tgname, quote_literal_cstr(argcol), quote_literal_cstr(argmode),
								quote_literal_cstr(f->reg.column),
								quote_literal_cstr(fence_mode_name(f->reg.mode)));
			}
		case FENCE_FOUND_TRIGGER_UPDATE_WHEN:
			return psprintf("trigger \"%s\" has another WHEN clause than NOT fence_update_allowed(NEW.%s, OLD.%s, NEW.tableoid, %s, %s)",
							tgname, quote_identifier(f->reg.column),
							quote_identifier(f->reg.column),
							quote_literal_cstr(f->reg.column),
							quote_literal_cstr(fence_mode_name(f->reg.mode)));
		case FENCE_FOUND_TRIGGER_ENABLED:
			return psprintf("trigger \"%s\" is %s, not ENABLE ALWAYS", tgname,
							enabled_word(t->enabled));
		case FENCE_FOUND_TRIGGER_EXTENSION:
			return psprintf("trigger \"%s\" depends on extension \"%s\", and DROP EXTENSION would drop it",
							tgname, f->name);
		case FENCE_FOUND_NO_GUARD:
			return psprintf("it has no trigger \"%s\": writes are not checked", FENCE_GUARD_TRIGGER);
		case FENCE_FOUND_NO_UPDATE_CHECK:
			return psprintf("it has no trigger \"%s\": UPDATEs are not checked", FENCE_GUARD_UPDATE_TRIGGER);
		case FENCE_FOUND_NO_TRUNCATE:
			return psprintf("it has no trigger \"%s\": TRUNCATE empties it", FENCE_TRUNCATE_TRIGGER);
		case FENCE_FOUND_UPDATING_FKEY:
			return psprintf("its foreign key \"%s\" updates its rows by itself (a cascade cannot write a token into the epoch column), which the after form cannot check",
							f->name);
		case FENCE_FOUND_RULE:
			return psprintf("it has rule \"%s\": a rule can turn a write into one the guard never sees",
							f->name);
		case FENCE_FOUND_MEMBER_UNREGISTERED:
			return psprintf("its %s \"%s\" is not registered in fence_protected",
							get_rel_relispartition(f->member) ? "partition" : "child",
							fence_rel_display_name(f->member));
		case FENCE_FOUND_MEMBER_DIFFERS:
			return psprintf("its %s \"%s\" is protected as (%s, %s, %s), not as (%s, %s, %s)",
							get_rel_relispartition(f->member) ? "partition" : "child",
							fence_rel_display_name(f->member),
							quote_literal_cstr(f->mreg.column),
							quote_literal_cstr(fence_mode_name(f->mreg.mode)),
							quote_literal_cstr(fence_form_name(f->mreg.form)),
							quote_literal_cstr(f->reg.column),
							quote_literal_cstr(fence_mode_name(f->reg.mode)),
							quote_literal_cstr(fence_form_name(f->reg.form)));
		case FENCE_FOUND_EVENT_FUNCTION_MISSING:
			return psprintf("function %s(), which fence's event trigger on %s calls, is missing",
							f->evtfn, f->event);
		case FENCE_FOUND_EVENT_MISSING:
			return psprintf("no event trigger on %s calls %s()", f->event, f->evtfn);
		case FENCE_FOUND_EVENT_WRONG_EVENT:
			return psprintf("event trigger \"%s\" calls %s() on %s, not on %s",
							f->name, f->evtfn, f->evtevent, f->event);
		case FENCE_FOUND_EVENT_FILTERED:
			return psprintf("event trigger \"%s\" fires only for some command tags",
							f->name);
		case FENCE_FOUND_EVENT_ENABLED:
			return psprintf("event trigger \"%s\" is %s, not ENABLE ALWAYS",
							f->name, enabled_word(f->evtenabled));
	}
	return pstrdup("?");
}

/*
 * What is wrong with one relation protected as reg says, on its own (its
 * tree: fence_tree_broken), or NULL if it is intact: the first finding, in
 * words.
 */
char *
fence_rel_broken(FenceCatalog *cat, Oid relid, const FenceRegistration *reg)
{
	List	   *findings = fence_rel_findings(cat, relid, reg);

	if (findings == NIL)
		return NULL;
	return fence_finding_detail((FenceFinding *) linitial(findings));
}

/*
 * Is member, a partition or child in a tree protected as reg says,
 * registered alike?  NULL, or what is wrong.
 */
char *
fence_member_broken(FenceCatalog *cat, Oid member, const FenceRegistration *reg)
{
	FenceFinding *f = fence_member_finding(cat, InvalidOid, member, reg);

	return f ? fence_finding_detail(f) : NULL;
}

/*
 * What is wrong with relid's whole tree, protected as reg says: relid
 * itself, and every partition and child at every level, each registered
 * alike and intact.  *where gets the member that is not.
 */
char *
fence_tree_broken(FenceCatalog *cat, Oid relid, const FenceRegistration *reg,
				  Oid *where)
{
	List	   *members = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;
	char	   *problem = NULL;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);

		if (member != relid)
			problem = fence_member_broken(cat, member, reg);
		if (problem == NULL)
			problem = fence_rel_broken(cat, member, reg);
		if (problem != NULL)
		{
			*where = member;
			break;
		}
	}
	list_free(members);
	return problem;
}

/* fence's event triggers: NULL, or the first thing wrong with them. */
char *
fence_event_triggers_broken(Oid nspid)
{
	List	   *findings = fence_event_trigger_findings(nspid);

	if (findings == NIL)
		return NULL;
	return fence_finding_detail((FenceFinding *) linitial(findings));
}
