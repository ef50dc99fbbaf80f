/*-------------------------------------------------------------------------
 *
 * inline.c
 *	  The guard's inline form: a planner hook that puts the guard's check
 *	  into an UPDATE's or DELETE's plan, and an ExecutorStart hook that then
 *	  skips the guard trigger's event for that one execution.
 *
 * Any BEFORE ROW UPDATE or DELETE trigger costs a row lock: trigger.c locks
 * the old row (GetTupleForTrigger) before the trigger runs, whether or not
 * its function is ever called, and that lock is most of what the guard
 * costs a bulk write (doc/benchmarks.md, "the guard in instructions").  The
 * inline form checks the same rows with the same rules without it:
 *
 *	1. The planner hook.  For an UPDATE or DELETE of one ordinary table (no
 *	   inheritance children) protected in the before form, whose only
 *	   BEFORE ROW trigger for the event is fence's guard, ENABLE ALWAYS, it
 *	   puts one of guard.c's checks into the statement, each reading the
 *	   epoch column as the row was (the first col below):
 *
 *		SET col = fence_inline_guard(col, <value written>, tbl, 'col', 'mode')
 *			where the SET list assigns the column (the token in the
 *			statement);
 *		SET col = fence_inline_stamp(col, tbl, 'col', 'mode')
 *			where it does not (fence_begin's token, which the trigger
 *			would stamp), unless the SET list holds a multiple assignment
 *			or the table a stored generated column;
 *		a junk column fence_inline_delete(col, ctid, tbl, 'col', 'mode')
 *			for a DELETE.
 *
 *	   The check is evaluated for every row the statement writes, after
 *	   every qual (row security's included), and EvalPlanQual evaluates it
 *	   again on the newest version of a row a concurrent writer changed
 *	   before the statement retries: the row the trigger would have seen,
 *	   checked by the rules it would have applied (guard_check_write).  The
 *	   stamp's column joins the plan's new values, not the statement's
 *	   updated columns, just as the trigger's stamp does not: column
 *	   privileges and UPDATE OF triggers see the statement as written.
 *	2. The ExecutorStart hook.  Once the executor is set up (the plan's
 *	   locks are taken, and each result relation has its own copy of the
 *	   relation's trigger descriptor, from InitResultRelInfo), it looks for
 *	   that check at the top of the ModifyTable's subplan, and compares it
 *	   with the live trigger set: the same relation, column and mode, the
 *	   guard still fence's, still ENABLE ALWAYS and still the only BEFORE
 *	   ROW trigger of the event, session_replication_role not replica.
 *	   Then, and only then, it clears trig_update_before_row (or
 *	   trig_delete_before_row) in that execution's copy.
 *
 * It fails closed.  Anything else (no preload, fence.inline off, a
 * partitioned or inherited table, the after form, INSERT, MERGE, ON
 * CONFLICT, a data-modifying CTE, another BEFORE ROW trigger, a plan whose
 * top node another extension changed) keeps the trigger, and a plan whose
 * check no longer matches checks every row twice, never zero times.
 *
 * The marker.  A check the hook built is a FuncExpr of one of the checks
 * whose funcformat is COERCE_SQL_SYNTAX.  The parser gives that format only
 * to the SQL standard's special syntaxes (EXTRACT, OVERLAY, ...), which
 * call functions named in pg_catalog (SystemFuncName), never one in
 * fence's schema; views, rules and SQL functions are all parse trees.  So
 * no user SQL can produce it: a hand-written fence_inline_guard(...) in a
 * SET list checks its own arguments and skips nothing.  This is a use of
 * funcformat core does not document (it decides only how ruleutils.c
 * prints the call, and for an OID it does not know, ruleutils prints an
 * ordinary call, so EXPLAIN VERBOSE shows the check);
 * sql/preload_inline.sql's forged call is the test that would catch a
 * change.
 *
 * fence's functions are recognised by what they are (C functions of
 * fence's library with the guard's C symbols), from the syscache, so this
 * file calls no other part of fence: it sits below all of them.
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
#include "catalog/pg_collation.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/planner.h"
#include "parser/parsetree.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* The library fence's C functions are in, as CREATE FUNCTION names it. */
#define FENCE_LIBRARY			"$libdir/fence"

/* The inline checks (guard.c), each by its name and arguments. */
typedef enum InlineCheck
{
	INLINE_GUARD,				/* UPDATE writing its token */
	INLINE_STAMP,				/* UPDATE the guard stamps */
	INLINE_DELETE,				/* DELETE */
	INLINE_N_CHECKS
} InlineCheck;

#define INLINE_MAX_ARGS			5

typedef struct InlineCheckDef
{
	const char *name;			/* its name, and its C symbol */
	int			nargs;
	Oid			argtypes[INLINE_MAX_ARGS];
	int			tbl_arg;		/* (tbl, epoch_column, mode) from here */
} InlineCheckDef;

static const InlineCheckDef inline_checks[INLINE_N_CHECKS] = {
	{"fence_inline_guard", 5, {INT8OID, INT8OID, OIDOID, NAMEOID, TEXTOID}, 2},
	{"fence_inline_stamp", 4, {INT8OID, OIDOID, NAMEOID, TEXTOID}, 1},
	{"fence_inline_delete", 5, {INT8OID, TIDOID, OIDOID, NAMEOID, TEXTOID}, 2},
};

static planner_hook_type prev_planner_hook = NULL;
static ExecutorStart_hook_type prev_ExecutorStart_hook = NULL;

/*
 * The last guard function recognised, and its schema's check functions:
 * forgotten whenever any function changes (PROCOID invalidation).
 */
static Oid	known_guard_fn = InvalidOid;
static Oid	known_check_fns[INLINE_N_CHECKS];

/* Is fnoid a C function of fence's library whose C symbol is symbol? */
static bool
inline_is_fence_function(Oid fnoid, const char *symbol, Oid *nspid)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fnoid));
	Form_pg_proc proc;
	Datum		datum;
	bool		isnull;
	bool		match = false;

	if (!HeapTupleIsValid(tuple))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	if (proc->prolang == ClanguageId)
	{
		datum = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_prosrc, &isnull);
		if (!isnull && strcmp(TextDatumGetCString(datum), symbol) == 0)
		{
			datum = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_probin, &isnull);
			match = !isnull && strcmp(TextDatumGetCString(datum), FENCE_LIBRARY) == 0;
		}
	}
	if (nspid)
		*nspid = proc->pronamespace;
	ReleaseSysCache(tuple);
	return match;
}

/*
 * The check function of kind beside the guard function guard_fn, if
 * guard_fn is fence's guard and its schema has one (1.1's objects); else
 * InvalidOid.
 */
static Oid
inline_check_function(Oid guard_fn, InlineCheck kind)
{
	Oid			nspid;
	int			k;

	if (OidIsValid(known_guard_fn) && known_guard_fn == guard_fn)
		return known_check_fns[kind];
	if (!inline_is_fence_function(guard_fn, "fence_guard", &nspid))
		return InvalidOid;
	for (k = 0; k < INLINE_N_CHECKS; k++)
	{
		const InlineCheckDef *def = &inline_checks[k];
		Oid			check_fn;

		check_fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
								   CStringGetDatum(def->name),
								   PointerGetDatum(buildoidvector(def->argtypes, def->nargs)),
								   ObjectIdGetDatum(nspid));
		if (OidIsValid(check_fn) &&
			!inline_is_fence_function(check_fn, def->name, NULL))
			check_fn = InvalidOid;
		known_check_fns[k] = check_fn;
	}
	known_guard_fn = guard_fn;
	return known_check_fns[kind];
}

static void
inline_forget_functions(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
						uint32 hashvalue pg_attribute_unused())
{
	known_guard_fn = InvalidOid;
}

/* What the inline form needs of a relation's guard. */
typedef struct InlineGuard
{
	Oid			guard_fn;		/* fence_guard */
	AttrNumber	attnum;			/* the epoch column */
	const char *colname;		/* ... by name, as the trigger names it */
	const char *modename;		/* the mode, as the trigger names it */
} InlineGuard;

/*
 * Is fence's before-form guard the only BEFORE ROW trigger of rel for event
 * (TRIGGER_TYPE_UPDATE or TRIGGER_TYPE_DELETE) that can fire, ENABLE
 * ALWAYS, with its two arguments, on a bigint column?  Then fill in g.
 * trigdesc is the relation's, or one execution's copy.
 */
static bool
inline_guard_alone(Relation rel, TriggerDesc *trigdesc, int16 event,
				   InlineGuard *g)
{
	Trigger    *guard = NULL;
	int			i;

	if (trigdesc == NULL)
		return false;
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (!TRIGGER_TYPE_MATCHES(trigger->tgtype, TRIGGER_TYPE_ROW,
								  TRIGGER_TYPE_BEFORE, event) ||
			trigger->tgenabled == TRIGGER_DISABLED)
			continue;
		if (guard != NULL || strcmp(trigger->tgname, FENCE_GUARD_TRIGGER) != 0)
			return false;		/* another BEFORE ROW trigger of the event */
		guard = trigger;
	}
	/* the before form's guard fires for UPDATE and DELETE alike */
	if (guard == NULL || guard->tgenabled != TRIGGER_FIRES_ALWAYS ||
		guard->tgnargs != 2 || !TRIGGER_FOR_UPDATE(guard->tgtype) ||
		!TRIGGER_FOR_DELETE(guard->tgtype))
		return false;
	g->guard_fn = guard->tgfoid;
	g->colname = guard->tgargs[0];
	g->modename = guard->tgargs[1];
	g->attnum = get_attnum(RelationGetRelid(rel), g->colname);
	return g->attnum > 0 &&
		get_atttype(RelationGetRelid(rel), g->attnum) == INT8OID;
}

/* Does the expression hold a multiple assignment's Param (SET (a, b) = ...)? */
static bool
inline_has_multiexpr(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Param) && ((Param *) node)->paramkind == PARAM_MULTIEXPR)
		return true;
	return expression_tree_walker(node, inline_has_multiexpr, context);
}

/* Has rel a stored generated column? */
static bool
inline_has_generated(Relation rel)
{
	return rel->rd_att->constr != NULL &&
		rel->rd_att->constr->has_generated_stored;
}

/*
 * A check of kind for relation rte->relid's guard g, on the row as it was
 * (rti's Vars), with first_args before (tbl, 'col', 'mode'), marked as the
 * planner hook's (the header).
 */
static Expr *
inline_make_check(InlineCheck kind, const InlineGuard *g, Index rti,
				  RangeTblEntry *rte, List *first_args)
{
	Oid			check_fn = inline_check_function(g->guard_fn, kind);
	List	   *args;

	if (!OidIsValid(check_fn))
		return NULL;
	args = lcons(makeVar(rti, g->attnum, INT8OID, -1, InvalidOid, 0), first_args);
	args = lappend(args, makeConst(OIDOID, -1, InvalidOid, sizeof(Oid),
								   ObjectIdGetDatum(rte->relid), false, true));
	args = lappend(args, makeConst(NAMEOID, -1, C_COLLATION_OID, NAMEDATALEN,
								   DirectFunctionCall1(namein, CStringGetDatum(g->colname)),
								   false, false));
	args = lappend(args, makeConst(TEXTOID, -1, DEFAULT_COLLATION_OID, -1,
								   CStringGetTextDatum(g->modename), false, false));
	return (Expr *) makeFuncExpr(check_fn,
								 kind == INLINE_DELETE ? BOOLOID : INT8OID,
								 args, InvalidOid, InvalidOid, COERCE_SQL_SYNTAX);
}

/*
 * The statement's result relation, if it is one ordinary table without
 * inheritance children whose guard alone fires for event; then g is filled
 * in.  The parser and the rewriter have locked it.
 */
static RangeTblEntry *
inline_result_table(Query *parse, int16 event, InlineGuard *g,
					bool *has_generated)
{
	RangeTblEntry *rte;
	Relation	rel;
	bool		alone;
	bool		children;

	if (parse->resultRelation <= 0)
		return NULL;
	rte = rt_fetch(parse->resultRelation, parse->rtable);
	if (rte->rtekind != RTE_RELATION || rte->relkind != RELKIND_RELATION)
		return NULL;

	rel = relation_open(rte->relid, NoLock);
	alone = inline_guard_alone(rel, rel->trigdesc, event, g);
	children = rel->rd_rel->relhassubclass;
	*has_generated = inline_has_generated(rel);
	relation_close(rel, NoLock);
	return alone && !children ? rte : NULL;
}

/*
 * Step 1, UPDATE: where the statement qualifies (the header), its SET
 * list's value for the epoch column is wrapped in fence_inline_guard; or,
 * if the SET list leaves the column out, the column gets the value
 * fence_inline_stamp gives, as the trigger would stamp it.  The stamp is
 * not planned where the SET list holds a multiple assignment (its junk
 * columns) or where a stored generated column might have to be computed
 * again from the stamp: PostgreSQL 16 on recomputes only those depending
 * on the SET list's columns unless a BEFORE ROW UPDATE trigger might change
 * others, and which trigger descriptor it asks (today the relation's, not
 * the execution's copy this file changes) is not a promise to rely on.
 */
static void
inline_wrap_update(Query *parse)
{
	RangeTblEntry *rte;
	InlineGuard g;
	bool		no_stamp;		/* a stored generated column, or SET (a, b) = */
	ListCell   *lc;
	ListCell   *before = NULL;
	Expr	   *check;
	TargetEntry *stamp;

	rte = inline_result_table(parse, TRIGGER_TYPE_UPDATE, &g, &no_stamp);
	if (rte == NULL)
		return;

	foreach(lc, parse->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		/* a multiple assignment: its junk column, or a column it sets */
		if (tle->resjunk)
		{
			no_stamp = true;
			continue;
		}
		if (inline_has_multiexpr((Node *) tle->expr, NULL))
		{
			if (tle->resno == g.attnum)
				return;
			no_stamp = true;
			continue;
		}
		if (tle->resno < g.attnum)
			before = lc;
		if (tle->resno != g.attnum)
			continue;
		check = inline_make_check(INLINE_GUARD, &g, parse->resultRelation, rte,
								  list_make1(tle->expr));
		if (check)
			tle->expr = check;
		return;
	}

	/* No value for the column: the stamp, in its place by column number. */
	if (no_stamp)
		return;
	check = inline_make_check(INLINE_STAMP, &g, parse->resultRelation, rte, NIL);
	if (check == NULL)
		return;
	stamp = makeTargetEntry(check, g.attnum, pstrdup(g.colname), false);
	if (before == NULL)
		parse->targetList = lcons(stamp, parse->targetList);
	else
		parse->targetList = list_insert_nth(parse->targetList,
											list_cell_number(parse->targetList, before) + 1,
											stamp);
}

/*
 * Step 1, DELETE: where the statement qualifies, its plan gets a junk
 * column, fence_inline_delete(col, ctid, ...), evaluated for every row the
 * DELETE removes, after every qual, and again by EvalPlanQual on the
 * newest version of a row a concurrent writer changed.
 */
static void
inline_wrap_delete(Query *parse)
{
	RangeTblEntry *rte;
	InlineGuard g;
	bool		has_generated;
	Expr	   *check;

	rte = inline_result_table(parse, TRIGGER_TYPE_DELETE, &g, &has_generated);
	if (rte == NULL)
		return;
	check = inline_make_check(INLINE_DELETE, &g, parse->resultRelation, rte,
							  list_make1(makeVar(parse->resultRelation,
												 SelfItemPointerAttributeNumber,
												 TIDOID, -1, InvalidOid, 0)));
	if (check == NULL)
		return;
	parse->targetList = lappend(parse->targetList,
								makeTargetEntry(check,
												list_length(parse->targetList) + 1,
												pstrdup(inline_checks[INLINE_DELETE].name),
												true));
}

static PlannedStmt *
inline_planner(FENCE_PLANNER_HOOK_PARAMS)
{
	if (fence_inline_enabled && parse->commandType == CMD_UPDATE)
		inline_wrap_update(parse);
	else if (fence_inline_enabled && parse->commandType == CMD_DELETE)
		inline_wrap_delete(parse);
	if (prev_planner_hook)
		return prev_planner_hook(FENCE_PLANNER_HOOK_ARGS);
	return standard_planner(FENCE_PLANNER_HOOK_ARGS);
}

/* Is expr a check of kind the planner hook built, for relation relid? */
static bool
inline_is_marked(Expr *expr, InlineCheck kind, const InlineGuard *g, Oid relid)
{
	FuncExpr   *check = (FuncExpr *) expr;
	int			first = inline_checks[kind].tbl_arg;
	Const	   *tbl;
	Const	   *col;
	Const	   *mode;

	if (!IsA(expr, FuncExpr) ||
		check->funcid != inline_check_function(g->guard_fn, kind) ||
		!OidIsValid(check->funcid) ||
		check->funcformat != COERCE_SQL_SYNTAX ||
		list_length(check->args) != inline_checks[kind].nargs)
		return false;
	tbl = (Const *) list_nth(check->args, first);
	col = (Const *) list_nth(check->args, first + 1);
	mode = (Const *) list_nth(check->args, first + 2);
	return IsA(tbl, Const) && !tbl->constisnull &&
		DatumGetObjectId(tbl->constvalue) == relid &&
		IsA(col, Const) && !col->constisnull &&
		strcmp(NameStr(*DatumGetName(col->constvalue)), g->colname) == 0 &&
		IsA(mode, Const) && !mode->constisnull &&
		strcmp(TextDatumGetCString(mode->constvalue), g->modename) == 0;
}

/* Has one of the result relations of this ModifyTable fence's guard? */
static bool
inline_any_guard(ModifyTableState *mtstate, int16 event)
{
	int			r;
	int			i;

	for (r = 0; r < mtstate->mt_nrels; r++)
	{
		TriggerDesc *trigdesc = mtstate->resultRelInfo[r].ri_TrigDesc;

		for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
		{
			Trigger    *trigger = &trigdesc->triggers[i];

			if (TRIGGER_TYPE_MATCHES(trigger->tgtype, TRIGGER_TYPE_ROW,
									 TRIGGER_TYPE_BEFORE, event) &&
				strcmp(trigger->tgname, FENCE_GUARD_TRIGGER) == 0 &&
				OidIsValid(inline_check_function(trigger->tgfoid, INLINE_GUARD)))
				return true;
		}
	}
	return false;
}

/*
 * Step 2: skip the guard's UPDATE or DELETE event in this execution, if
 * its plan holds the check for the guard as it is now (the header); else
 * keep it.
 */
static FenceInlineOutcome
inline_skip_guard(ModifyTableState *mtstate)
{
	ModifyTable *mt = (ModifyTable *) mtstate->ps.plan;
	ResultRelInfo *rri = mtstate->resultRelInfo;
	Relation	rel = rri->ri_RelationDesc;
	bool		update = (mt->operation == CMD_UPDATE);
	InlineGuard g;
	List	   *colnos = NIL;
	ListCell   *lc;
	int			i = 0;

	if (!fence_inline_enabled)
		return FENCE_INLINE_OFF;
	if (mtstate->mt_nrels != 1 || outerPlan(mt) == NULL ||
		(update && list_length(mt->updateColnosLists) != 1) ||
		rel->rd_rel->relkind != RELKIND_RELATION)
		return FENCE_INLINE_UNPLANNED;
	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return FENCE_INLINE_REPLICA;
	if (!inline_guard_alone(rel, rri->ri_TrigDesc,
							update ? TRIGGER_TYPE_UPDATE : TRIGGER_TYPE_DELETE, &g))
		return FENCE_INLINE_TRIGGERS;

	/*
	 * UPDATE: the subplan's non-junk columns are the new values, in colnos'
	 * order, and the epoch column's must be the check or the stamp.  DELETE:
	 * a junk column must be the check.
	 */
	if (update)
		colnos = linitial(mt->updateColnosLists);
	foreach(lc, outerPlan(mt)->targetlist)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (!update)
		{
			if (tle->resjunk &&
				inline_is_marked(tle->expr, INLINE_DELETE, &g, RelationGetRelid(rel)))
			{
				rri->ri_TrigDesc->trig_delete_before_row = false;
				return FENCE_INLINE_USED;
			}
			continue;
		}
		if (tle->resjunk)
			continue;
		if (i >= list_length(colnos))
			break;
		/* (the stamp's conditions checked again: see inline_wrap_update) */
		if (list_nth_int(colnos, i) == g.attnum &&
			(inline_is_marked(tle->expr, INLINE_GUARD, &g, RelationGetRelid(rel)) ||
			 (inline_is_marked(tle->expr, INLINE_STAMP, &g, RelationGetRelid(rel)) &&
			  !inline_has_generated(rel))))
		{
			rri->ri_TrigDesc->trig_update_before_row = false;
			return FENCE_INLINE_USED;
		}
		i++;
	}
	return FENCE_INLINE_UNPLANNED;
}

static void
inline_executor_start(QueryDesc *queryDesc, int eflags)
{
	PlanState  *ps;
	CmdType		operation;

	if (prev_ExecutorStart_hook)
		prev_ExecutorStart_hook(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	/* The statement's own UPDATE or DELETE of a table with fence's guard */
	ps = queryDesc->planstate;
	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) || ps == NULL ||
		!IsA(ps, ModifyTableState) || !IsA(ps->plan, ModifyTable))
		return;
	operation = ((ModifyTable *) ps->plan)->operation;
	if ((operation != CMD_UPDATE && operation != CMD_DELETE) ||
		!inline_any_guard((ModifyTableState *) ps,
						  operation == CMD_UPDATE ? TRIGGER_TYPE_UPDATE : TRIGGER_TYPE_DELETE))
		return;
	fence_count_inline(inline_skip_guard((ModifyTableState *) ps));
}

/* Install the hooks: from _PG_init, when fence is preloaded. */
void
fence_inline_init(void)
{
	prev_planner_hook = planner_hook;
	planner_hook = inline_planner;
	prev_ExecutorStart_hook = ExecutorStart_hook;
	ExecutorStart_hook = inline_executor_start;
	CacheRegisterSyscacheCallback(PROCOID, inline_forget_functions, (Datum) 0);
}
