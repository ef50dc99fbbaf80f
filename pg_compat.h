/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  Every difference between the PostgreSQL majors fence builds on.
 *
 * fence supports PostgreSQL 15 and later (tested on 15, 17, 18 and 19; 16
 * is built from these guards, not tested).  The rest of the code is written
 * against the newest API and free of version tests: where a name changed,
 * the old majors get the new name here; where a signature changed, the code
 * calls a static inline wrapper named ..._compat that takes only the
 * arguments every major understands.  Newest major first within an entry,
 * as in Citus's pg_version_compat.h.
 *
 * Where a newer major gives fence something better, a FENCE_HAVE_... macro
 * says so, and the one place that uses it tests the macro.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCE_PG_COMPAT_H
#define FENCE_PG_COMPAT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "catalog/pg_proc.h"
#include "executor/executor.h"
#include "nodes/bitmapset.h"
#include "nodes/parsenodes.h"
#include "replication/origin.h"
#include "utils/acl.h"

#if PG_VERSION_NUM < 150000
#error "fence needs PostgreSQL 15 or later"
#endif

#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
#endif

/*
 * A function that does not return: 18 spells it as a prefix (pg_noreturn),
 * earlier majors as an attribute, which GCC and Clang accept as a prefix.
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * A case that falls through to the next: 19 builds with
 * -Wimplicit-fallthrough=5, which takes only the attribute, not a comment.
 */
#ifndef pg_fallthrough
#if defined(__has_attribute) && __has_attribute(fallthrough)
#define pg_fallthrough __attribute__((fallthrough))
#else
#define pg_fallthrough ((void) 0)
#endif
#endif

/* 18 renamed ResultRelInfo's CHECK constraint expressions. */
#if PG_VERSION_NUM < 180000
#define ri_CheckConstraintExprs ri_ConstraintExprs
#endif

/* 19 renamed the replication origin types and the session's origin. */
#if PG_VERSION_NUM < 190000
#define InvalidReplOriginId InvalidRepOriginId
typedef RepOriginId ReplOriginId;
#endif

static inline ReplOriginId
replorigin_session_origin_compat(void)
{
#if PG_VERSION_NUM >= 190000
	return replorigin_xact_state.origin;
#else
	return replorigin_session_origin;
#endif
}

/* 16 replaced pg_proc_aclcheck and its siblings with object_aclcheck. */
static inline AclResult
object_aclcheck_proc_compat(Oid proc, Oid roleid, AclMode mode)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(ProcedureRelationId, proc, roleid, mode);
#else
	return pg_proc_aclcheck(proc, roleid, mode);
#endif
}

/*
 * The range table of an EState that writes one relation from C, as
 * logical replication's apply builds it: 16 moved the permission details
 * (here, the updated columns) from the RangeTblEntry to an
 * RTEPermissionInfo; 18 wants the set of unpruned entries.
 */
static inline void
ExecInitRangeTable_single_compat(EState *estate, RangeTblEntry *rte,
								 Bitmapset *updatedCols)
{
#if PG_VERSION_NUM >= 160000
	RTEPermissionInfo *perminfo = addRTEPermissionInfo(&estate->es_rteperminfos, rte);

	perminfo->updatedCols = updatedCols;
#if PG_VERSION_NUM >= 180000
	ExecInitRangeTable(estate, list_make1(rte), estate->es_rteperminfos,
					   bms_make_singleton(1));
#else
	ExecInitRangeTable(estate, list_make1(rte), estate->es_rteperminfos);
#endif
#else
	rte->updatedCols = updatedCols;
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/* 16 added the result relations an EvalPlanQual recheck may touch. */
static inline void
EvalPlanQualInit_compat(EPQState *epqstate, EState *parentestate,
						Plan *subplan, List *auxrowmarks, int epqParam,
						List *resultRelations)
{
#if PG_VERSION_NUM >= 160000
	EvalPlanQualInit(epqstate, parentestate, subplan, auxrowmarks, epqParam,
					 resultRelations);
#else
	(void) resultRelations;
	EvalPlanQualInit(epqstate, parentestate, subplan, auxrowmarks, epqParam);
#endif
}

/*
 * One row version replaced through the table AM, as
 * ExecSimpleRelationUpdate replaces it but returning the TM_Result instead
 * of raising an error on a concurrent change (claims.c retries).  16 says
 * which indexes the new version needs (none for a HOT update, only the
 * summarizing ones), 19 takes update options.  *update_indexes and
 * *only_summarizing say what ExecInsertIndexTuples_compat must do.
 */
static inline TM_Result
table_tuple_update_compat(Relation rel, ItemPointer otid, TupleTableSlot *slot,
						  CommandId cid, Snapshot snapshot, TM_FailureData *tmfd,
						  bool *update_indexes, bool *only_summarizing)
{
	LockTupleMode lockmode;
	TM_Result	res;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes which = TU_None;

#if PG_VERSION_NUM >= 190000
	res = table_tuple_update(rel, otid, slot, cid, 0, snapshot, InvalidSnapshot,
							 true, tmfd, &lockmode, &which);
#else
	res = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot,
							 true, tmfd, &lockmode, &which);
#endif
	*update_indexes = (which != TU_None);
	*only_summarizing = (which == TU_Summarizing);
#else
	res = table_tuple_update(rel, otid, slot, cid, snapshot, InvalidSnapshot,
							 true, tmfd, &lockmode, update_indexes);
	*only_summarizing = false;
#endif
	return res;
}

/* 17 added the summarizing-only case, 19 made the booleans flags. */
static inline List *
ExecInsertIndexTuples_update_compat(ResultRelInfo *rri, TupleTableSlot *slot,
									EState *estate, bool only_summarizing)
{
#if PG_VERSION_NUM >= 190000
	return ExecInsertIndexTuples(rri, estate,
								 EIIT_IS_UPDATE |
								 (only_summarizing ? EIIT_ONLY_SUMMARIZING : 0),
								 slot, NIL, NULL);
#elif PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, true, false, NULL, NIL,
								 only_summarizing);
#else
	(void) only_summarizing;
	return ExecInsertIndexTuples(rri, slot, estate, true, false, NULL, NIL);
#endif
}

/* 18 added scan instrumentation to index_beginscan, 19 scan flags. */
static inline IndexScanDesc
index_beginscan_compat(Relation heap, Relation index, Snapshot snapshot,
					   int nkeys, int norderbys)
{
#if PG_VERSION_NUM >= 190000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys,
						   SO_NONE);
#elif PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys);
#else
	return index_beginscan(heap, index, snapshot, nkeys, norderbys);
#endif
}

/* 19 added scan flags to table_beginscan. */
static inline TableScanDesc
table_beginscan_compat(Relation rel, Snapshot snapshot, int nkeys,
					   struct ScanKeyData *key)
{
#if PG_VERSION_NUM >= 190000
	return table_beginscan(rel, snapshot, nkeys, key, SO_NONE);
#else
	return table_beginscan(rel, snapshot, nkeys, key);
#endif
}

/*
 * 17 added the DSM registry: shared memory an extension can have without
 * shared_preload_libraries (stats.c).  19 passes the initialiser an
 * argument.
 */
#if PG_VERSION_NUM >= 170000
#define FENCE_HAVE_DSM_REGISTRY 1
#include "storage/dsm_registry.h"

#if PG_VERSION_NUM >= 190000
#define FENCE_DSM_INIT_PARAMS	void *ptr, void *arg pg_attribute_unused()
#define GetNamedDSMSegment_compat(name, size, init, found) \
	GetNamedDSMSegment((name), (size), (init), (found), NULL)
#else
#define FENCE_DSM_INIT_PARAMS	void *ptr
#define GetNamedDSMSegment_compat(name, size, init, found) \
	GetNamedDSMSegment((name), (size), (init), (found))
#endif
#endif

/*
 * The planner hook's arguments (inline.c): 19 passes the EXPLAIN state of
 * an EXPLAIN being planned too.
 */
#if PG_VERSION_NUM >= 190000
#define FENCE_PLANNER_HOOK_PARAMS \
	Query *parse, const char *query_string, int cursorOptions, \
	ParamListInfo boundParams, ExplainState *es
#define FENCE_PLANNER_HOOK_ARGS \
	parse, query_string, cursorOptions, boundParams, es
#else
#define FENCE_PLANNER_HOOK_PARAMS \
	Query *parse, const char *query_string, int cursorOptions, \
	ParamListInfo boundParams
#define FENCE_PLANNER_HOOK_ARGS \
	parse, query_string, cursorOptions, boundParams
#endif

#endif							/* FENCE_PG_COMPAT_H */
