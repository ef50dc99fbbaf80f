/*-------------------------------------------------------------------------
 *
 * inline.c
 *	  The guard's inline form: a planner hook that puts the guard's check
 *	  into an UPDATE's plan, and an ExecutorStart hook that then skips the
 *	  guard trigger's UPDATE event for that one execution.
 *
 * Any BEFORE ROW UPDATE trigger costs a row lock: trigger.c locks the old
 * row (GetTupleForTrigger) before the trigger runs, whether or not its
 * function is ever called, and that lock is most of what the guard costs a
 * bulk UPDATE (doc/benchmarks.md, "the guard in instructions").  The inline
 * form checks the same rows with the same rules without it:
 *
 *	1. The planner hook.  For an UPDATE of one ordinary table (no
 *	   inheritance children) protected in the before form, whose SET list
 *	   assigns the epoch column (the token in the statement), and whose only
 *	   BEFORE ROW UPDATE trigger is fence's guard, ENABLE ALWAYS, the new
 *	   value is wrapped in guard.c's check:
 *
 *		SET col = fence_inline_guard(col, <value written>, tbl, 'col', 'mode')
 *
 *	   where the first col is the row as it was.  The SET expression is
 *	   evaluated for every row the UPDATE writes, after every qual (row
 *	   security's included), and EvalPlanQual evaluates it again on the
 *	   newest version of a row a concurrent writer changed before the
 *	   UPDATE retries: the row the trigger would have seen, checked by the
 *	   rules it would have applied (guard_check_write).
 *	2. The ExecutorStart hook.  Once the executor is set up (the plan's
 *	   locks are taken, and each result relation has its own copy of the
 *	   relation's trigger descriptor, from InitResultRelInfo), it looks for
 *	   that check at the top of the ModifyTable's subplan, and compares it
 *	   with the live trigger set: the same relation, column and mode, the
 *	   guard still fence's, still ENABLE ALWAYS and still the only BEFORE
 *	   ROW UPDATE trigger, session_replication_role not replica.  Then, and
 *	   only then, it clears trig_update_before_row in that execution's copy.
 *
 * It fails closed.  Anything else (no preload, fence.inline off, a
 * partitioned or inherited table, the after form, fence_begin's stamping,
 * DELETE, INSERT, MERGE, ON CONFLICT, a data-modifying CTE, another
 * BEFORE ROW trigger, a plan another extension changed) keeps the trigger,
 * and a plan whose check no longer matches checks every row twice, never
 * zero times.
 *
 * The marker.  A check the hook built is a FuncExpr of fence_inline_guard
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
#define INLINE_CHECK_NAME		"fence_inline_guard"
#define INLINE_CHECK_NARGS		5

static planner_hook_type prev_planner_hook = NULL;
static ExecutorStart_hook_type prev_ExecutorStart_hook = NULL;

/*
 * The last guard function recognised, and its schema's check function:
 * forgotten whenever any function changes (PROCOID invalidation).
 */
static Oid	known_guard_fn = InvalidOid;
static Oid	known_check_fn = InvalidOid;

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
 * The check function beside the guard function guard_fn, if guard_fn is
 * fence's guard and its schema has one (1.1's objects); else InvalidOid.
 */
static Oid
inline_check_function(Oid guard_fn)
{
	Oid			argtypes[INLINE_CHECK_NARGS] = {INT8OID, INT8OID, OIDOID, NAMEOID, TEXTOID};
	Oid			nspid;
	Oid			check_fn;

	if (OidIsValid(known_guard_fn) && known_guard_fn == guard_fn)
		return known_check_fn;
	if (!inline_is_fence_function(guard_fn, "fence_guard", &nspid))
		return InvalidOid;
	check_fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
							   CStringGetDatum(INLINE_CHECK_NAME),
							   PointerGetDatum(buildoidvector(argtypes, INLINE_CHECK_NARGS)),
							   ObjectIdGetDatum(nspid));
	if (OidIsValid(check_fn) &&
		!inline_is_fence_function(check_fn, INLINE_CHECK_NAME, NULL))
		check_fn = InvalidOid;
	known_guard_fn = guard_fn;
	known_check_fn = check_fn;
	return check_fn;
}

static void
inline_forget_functions(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
						uint32 hashvalue pg_attribute_unused())
{
	known_guard_fn = InvalidOid;
	known_check_fn = InvalidOid;
}

/* What the inline form needs of a relation's guard. */
typedef struct InlineGuard
{
	Oid			check_fn;		/* fence_inline_guard */
	AttrNumber	attnum;			/* the epoch column */
	const char *colname;		/* ... by name, as the trigger names it */
	const char *modename;		/* the mode, as the trigger names it */
} InlineGuard;

/*
 * Is fence's before-form guard the only BEFORE ROW UPDATE trigger of rel
 * that can fire, ENABLE ALWAYS, with its two arguments, on a bigint column?
 * Then fill in g.  trigdesc is the relation's, or one execution's copy.
 */
static bool
inline_guard_alone(Relation rel, TriggerDesc *trigdesc, InlineGuard *g)
{
	Trigger    *guard = NULL;
	int			i;

	if (trigdesc == NULL)
		return false;
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (!TRIGGER_TYPE_MATCHES(trigger->tgtype, TRIGGER_TYPE_ROW,
								  TRIGGER_TYPE_BEFORE, TRIGGER_TYPE_UPDATE) ||
			trigger->tgenabled == TRIGGER_DISABLED)
			continue;
		if (guard != NULL || strcmp(trigger->tgname, FENCE_GUARD_TRIGGER) != 0)
			return false;		/* another BEFORE ROW UPDATE trigger */
		guard = trigger;
	}
	if (guard == NULL || guard->tgenabled != TRIGGER_FIRES_ALWAYS ||
		guard->tgnargs != 2)
		return false;
	g->check_fn = inline_check_function(guard->tgfoid);
	if (!OidIsValid(g->check_fn))
		return false;
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

/*
 * Step 1: wrap the epoch column's new value in the check, where the
 * UPDATE qualifies (the header).  The parser and the rewriter have locked
 * the result relation.
 */
static void
inline_wrap_update(Query *parse)
{
	RangeTblEntry *rte;
	Relation	rel;
	InlineGuard g;
	bool		alone;
	bool		children;
	ListCell   *lc;

	if (parse->resultRelation <= 0)
		return;
	rte = rt_fetch(parse->resultRelation, parse->rtable);
	if (rte->rtekind != RTE_RELATION || rte->relkind != RELKIND_RELATION)
		return;

	rel = relation_open(rte->relid, NoLock);
	alone = inline_guard_alone(rel, rel->trigdesc, &g);
	children = rel->rd_rel->relhassubclass;
	relation_close(rel, NoLock);
	if (!alone || children)
		return;

	foreach(lc, parse->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);
		Var		   *old_epoch;
		Const	   *tbl;
		Const	   *col;
		Const	   *mode;
		FuncExpr   *check;
		List	   *args;

		if (tle->resjunk || tle->resno != g.attnum)
			continue;
		if (inline_has_multiexpr((Node *) tle->expr, NULL))
			return;
		old_epoch = makeVar(parse->resultRelation, g.attnum, INT8OID, -1,
							InvalidOid, 0);
		tbl = makeConst(OIDOID, -1, InvalidOid, sizeof(Oid),
						ObjectIdGetDatum(rte->relid), false, true);
		col = makeConst(NAMEOID, -1, C_COLLATION_OID, NAMEDATALEN,
						DirectFunctionCall1(namein, CStringGetDatum(g.colname)),
						false, false);
		mode = makeConst(TEXTOID, -1, DEFAULT_COLLATION_OID, -1,
						 CStringGetTextDatum(g.modename), false, false);
		args = list_make1(old_epoch);
		args = lappend(args, tle->expr);
		args = lappend(args, tbl);
		args = lappend(args, col);
		args = lappend(args, mode);
		/* COERCE_SQL_SYNTAX is the marker (the header) */
		check = makeFuncExpr(g.check_fn, INT8OID, args, InvalidOid,
							 InvalidOid, COERCE_SQL_SYNTAX);
		tle->expr = (Expr *) check;
		return;
	}
}

static PlannedStmt *
inline_planner(FENCE_PLANNER_HOOK_PARAMS)
{
	if (fence_inline_enabled && parse->commandType == CMD_UPDATE)
		inline_wrap_update(parse);
	if (prev_planner_hook)
		return prev_planner_hook(FENCE_PLANNER_HOOK_ARGS);
	return standard_planner(FENCE_PLANNER_HOOK_ARGS);
}

/* Is expr a check the planner hook built, for relation relid? */
static bool
inline_is_marked(Expr *expr, const InlineGuard *g, Oid relid)
{
	FuncExpr   *check = (FuncExpr *) expr;
	Const	   *tbl;
	Const	   *col;
	Const	   *mode;

	if (!IsA(expr, FuncExpr) || check->funcid != g->check_fn ||
		check->funcformat != COERCE_SQL_SYNTAX ||
		list_length(check->args) != INLINE_CHECK_NARGS)
		return false;
	tbl = (Const *) lthird(check->args);
	col = (Const *) lfourth(check->args);
	mode = (Const *) list_nth(check->args, 4);
	return IsA(tbl, Const) && !tbl->constisnull &&
		DatumGetObjectId(tbl->constvalue) == relid &&
		IsA(col, Const) && !col->constisnull &&
		strcmp(NameStr(*DatumGetName(col->constvalue)), g->colname) == 0 &&
		IsA(mode, Const) && !mode->constisnull &&
		strcmp(TextDatumGetCString(mode->constvalue), g->modename) == 0;
}

/* Has one of the result relations of this ModifyTable fence's guard? */
static bool
inline_any_guard(ModifyTableState *mtstate)
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
									 TRIGGER_TYPE_BEFORE, TRIGGER_TYPE_UPDATE) &&
				strcmp(trigger->tgname, FENCE_GUARD_TRIGGER) == 0 &&
				OidIsValid(inline_check_function(trigger->tgfoid)))
				return true;
		}
	}
	return false;
}

/*
 * Step 2: skip the guard's UPDATE event in this execution, if its plan
 * holds the check for the guard as it is now (the header); else keep it.
 */
static FenceInlineOutcome
inline_skip_guard(ModifyTableState *mtstate)
{
	ModifyTable *mt = (ModifyTable *) mtstate->ps.plan;
	ResultRelInfo *rri = mtstate->resultRelInfo;
	Relation	rel = rri->ri_RelationDesc;
	InlineGuard g;
	List	   *colnos;
	ListCell   *lc;
	int			i = 0;

	if (!fence_inline_enabled)
		return FENCE_INLINE_OFF;
	if (mtstate->mt_nrels != 1 || list_length(mt->updateColnosLists) != 1 ||
		outerPlan(mt) == NULL || rel->rd_rel->relkind != RELKIND_RELATION)
		return FENCE_INLINE_UNPLANNED;
	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return FENCE_INLINE_REPLICA;
	if (!inline_guard_alone(rel, rri->ri_TrigDesc, &g))
		return FENCE_INLINE_TRIGGERS;

	/* The subplan's non-junk columns are the new values, in colnos' order. */
	colnos = linitial(mt->updateColnosLists);
	foreach(lc, outerPlan(mt)->targetlist)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (tle->resjunk)
			continue;
		if (i >= list_length(colnos))
			break;
		if (list_nth_int(colnos, i) == g.attnum &&
			inline_is_marked(tle->expr, &g, RelationGetRelid(rel)))
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

	if (prev_ExecutorStart_hook)
		prev_ExecutorStart_hook(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	/* The statement's own UPDATE of a table with fence's guard, to run */
	ps = queryDesc->planstate;
	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) || ps == NULL || !IsA(ps, ModifyTableState) || !IsA(ps->plan, ModifyTable) ||
		((ModifyTable *) ps->plan)->operation != CMD_UPDATE ||
		!inline_any_guard((ModifyTableState *) ps))
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
