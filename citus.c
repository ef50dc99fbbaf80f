/*-------------------------------------------------------------------------
 *
 * citus.c
 *	  Citus, looked up at run time: is this node a Citus worker?
 *
 * On a Citus cluster the coordinator is fence's only arbiter: its counter
 * issues every token and its fence_claims holds every claim (doc/
 * scale-out.md).  Citus propagates CREATE EXTENSION fence to every worker,
 * which then has a counter and a registry of its own; a claim there would
 * issue tokens that collide with the coordinator's (both start at 1).  So
 * the functions that issue, hold or bind a token refuse to run on a worker
 * (5G004, the caller's bug: it connected to the wrong node).
 *
 * fence does not link to Citus, and builds and runs without it.  Citus
 * keeps the node's group in its catalog table pg_catalog.pg_dist_local_group
 * (one row, column groupid): 0 on the coordinator, and on a node Citus has
 * not added to a cluster; the group citus_add_node gave it on a worker.  No
 * such table (Citus not installed in this database): not a worker.  The
 * table is read in place, by name, under the catalog snapshot, on every
 * call: citus_add_node changes it in a running cluster, and a claim costs
 * far more than one small scan.  The table's owner and privileges do not
 * matter: fence reads it only to decide whether to refuse.
 *
 * Citus's tables (distributed, reference, and the local tables Citus
 * manages) are listed in pg_catalog.pg_dist_partition by logicalrelid.
 * fence does not protect them yet: its guard would have to run on Citus's
 * shards, on the workers, with a token it can verify there
 * (doc/scale-out.md).  fence_protect refuses them (0A000) rather than
 * leaving the refusal to Citus's XX000 about triggers.
 *
 * This file calls no other part of fence.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* The relid of Citus's catalog table name, or InvalidOid without Citus. */
static Oid
citus_catalog_relid(const char *name)
{
	return get_relname_relid(name, PG_CATALOG_NAMESPACE);
}

/* The attribute number of column name, of type typid, in rel, or fail. */
static AttrNumber
citus_column(Relation rel, const char *name, Oid typid)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && att->atttypid == typid &&
			strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("Citus's catalog table %s has no column \"%s\" of type %s",
					RelationGetRelationName(rel), name, format_type_be(typid)),
			 errhint("This version of Citus is not one fence knows.")));
	return InvalidAttrNumber;	/* keep compiler quiet */
}

/*
 * Citus's group of this node: -1 when Citus is not installed in this
 * database (or its table holds no row), else pg_dist_local_group.groupid.
 */
static int32
citus_local_group(void)
{
	Oid			catalog = citus_catalog_relid("pg_dist_local_group");
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	AttrNumber	attnum;
	int32		group = -1;

	if (!OidIsValid(catalog))
		return -1;
	rel = table_open(catalog, AccessShareLock);
	attnum = citus_column(rel, "groupid", INT4OID);
	scan = table_beginscan_catalog(rel, 0, NULL);
	tuple = heap_getnext(scan, ForwardScanDirection);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, attnum, RelationGetDescr(rel), &isnull);

		if (!isnull)
			group = DatumGetInt32(d);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return group;
}

/*
 * fence_citus_table
 *		Is relid one of Citus's tables (a row of pg_dist_partition)?
 */
bool
fence_citus_table(Oid relid)
{
	Oid			catalog = citus_catalog_relid("pg_dist_partition");
	Relation	rel;
	ScanKeyData key;
	TableScanDesc scan;
	bool		found;

	if (!OidIsValid(catalog))
		return false;
	rel = table_open(catalog, AccessShareLock);
	ScanKeyInit(&key, citus_column(rel, "logicalrelid", REGCLASSOID),
				BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(relid));
	scan = table_beginscan_catalog(rel, 1, &key);
	found = HeapTupleIsValid(heap_getnext(scan, ForwardScanDirection));
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * fence_refuse_on_citus_worker
 *		Refuse the call of fn (a function that issues, holds or binds a
 *		token) on a Citus worker.
 */
void
fence_refuse_on_citus_worker(const char *fn)
{
	int32		group = citus_local_group();

	if (group > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FENCE_NOT_ARBITER),
				 errmsg("%s must be called on the Citus coordinator", fn),
				 errdetail("This node is a Citus worker (group %d). On a Citus cluster only the coordinator issues tokens and holds claims, so that every token is greater than every token issued before it.",
						   group),
				 errhint("Connect to the coordinator to claim jobs and bind tokens.")));
}
