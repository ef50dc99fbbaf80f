/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The registry of protected relations (fence_protected), read and
 *	  written, and the relation helpers every part of fence reads: a
 *	  relation's names for messages and for query text, its owner, its
 *	  parents, one of its triggers; fence's own DDL and statements run as
 *	  the owner of fence's tables.
 *
 * A relation is protected because it has a row here (its epoch column,
 * mode and guard form).  This file only keeps the rows: what the triggers
 * and the tree of a protected relation must look like is intact.c's, and
 * making or removing protection is protect.c's, which are above it.  It
 * calls nothing of fence's but fence.c, so intact.c, audit_log.c and the
 * DDL checks can all read the registry without calling back up.
 *
 * It also keeps the replication grants (fence_replication_grants): which
 * roles may apply logical replication to a protected relation without a
 * token, read by the guard (guard.c) and written by
 * fence_grant_replication (protect.c).
 *
 * The registry and the audit log are written as their owner
 * (fence_spi_as_owner), the way claims.c writes the claims registry; the
 * DDL fence runs itself goes through fence_run_internal_ddl(), which the
 * event triggers (ddl.c) let pass.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

/* Nesting depth of DDL that fence runs itself. */
static int	internal_ddl_depth = 0;

/* The relation's schema-qualified name, quoted where needed, for query text. */
char *
fence_rel_query_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/*
 * The relation's name for messages: qualified unless it is in pg_catalog or
 * the session's temporary schema, as regclass prints it with search_path
 * set to pg_catalog, pg_temp (so messages read as they did in fence 1.0).
 */
char *
fence_rel_display_name(Oid relid)
{
	Oid			nspid = get_rel_namespace(relid);

	if (!OidIsValid(nspid))
		return psprintf("%u", relid);
	if (nspid == PG_CATALOG_NAMESPACE || isTempNamespace(nspid))
		return pstrdup(quote_identifier(get_rel_name(relid)));
	return fence_rel_query_name(relid);
}

/*
 * The direct parents of a relation (partition parent or inheritance), from
 * pg_inherits through its index: the catalog snapshot sees the command's
 * own rows.  (The end of every DDL command asks this: no SPI, no planning.)
 */
List *
fence_rel_parents(Oid relid)
{
	List	   *parents = NIL;
	Relation	inhrel = table_open(InheritsRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key, Anum_pg_inherits_inhrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(inhrel, InheritsRelidSeqnoIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
		parents = lappend_oid(parents, ((Form_pg_inherits) GETSTRUCT(tup))->inhparent);
	systable_endscan(scan);
	table_close(inhrel, AccessShareLock);
	return parents;
}

/*
 * Does the relation have a trigger calling fnoid?  If so, *tgenabled gets
 * its firing state and *tgname its name.  The relcache's trigger list is
 * the catalog's.
 */
bool
fence_rel_trigger(Oid relid, Oid fnoid, char *tgenabled, char **tgname)
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
			if (tgname)
				*tgname = pstrdup(trigdesc->triggers[i].tgname);
			break;
		}
	}
	relation_close(rel, AccessShareLock);
	return found;
}

/* Is DDL that fence runs itself under way?  The event triggers let it be. */
bool
fence_internal_ddl_active(void)
{
	return internal_ddl_depth > 0;
}

/* Run one utility statement of fence's own through SPI, as the current user. */
void
fence_run_internal_ddl(const char *sql)
{
	internal_ddl_depth++;
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "SPI_execute failed for \"%s\"", sql);
		if (SPI_finish() != SPI_OK_FINISH)
			elog(ERROR, "SPI_finish failed");
	}
	PG_FINALLY();
	{
		internal_ddl_depth--;
	}
	PG_END_TRY();
}

/*
 * Run a statement on one of fence's own tables as that table's owner (no
 * caller may write them), with nargs text parameters (NULL elements are
 * NULL).  Returns the SPI result code; a SELECT's rows are in SPI_tuptable
 * until the caller's SPI_finish.  The caller has connected to SPI.
 */
int
fence_spi_as_owner(FenceCatalog *cat, const char *table, const char *sql,
				   int nargs, const char *const *args)
{
	Oid			relid = get_relname_relid(table, cat->nspid);
	Oid		   *argtypes = palloc(sizeof(Oid) * Max(nargs, 1));
	Datum	   *values = palloc(sizeof(Datum) * Max(nargs, 1));
	char	   *nulls = palloc(Max(nargs, 1));
	FenceSavedUser saved;
	int			ret;
	int			i;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" of extension \"fence\" does not exist",
						cat->nspname, table),
				 errhint("Update the extension with ALTER EXTENSION fence UPDATE.")));

	for (i = 0; i < nargs; i++)
	{
		argtypes[i] = TEXTOID;
		values[i] = args[i] ? CStringGetTextDatum(args[i]) : (Datum) 0;
		nulls[i] = args[i] ? ' ' : 'n';
	}

	fence_become_owner(fence_rel_owner(relid), &saved);
	ret = SPI_execute_with_args(sql, nargs, argtypes, values, nulls, false, 0);
	fence_restore_user(&saved);
	if (ret < 0)
		elog(ERROR, "fence statement failed: %s: %s", SPI_result_code_string(ret), sql);
	return ret;
}

/* The relation's OID as text, for a registry statement's regclass parameter. */
static char *
relid_text(Oid relid)
{
	return psprintf("%u", relid);
}

/*
 * Is the relation protected?  If so, *reg (when not NULL) gets its epoch
 * column (palloc'd in the caller's context), mode and guard form.  A row
 * from before forms were recorded has none: the default form.
 *
 * Every checked DDL command asks this, on unprotected tables too, so it
 * reads fence_protected through its primary key directly, with the latest
 * snapshot, as claims.c reads fence_claims: no SPI, no planning, no
 * privilege check (the registry is fence's).  Rows only ever come from
 * fence's own writes through the executor.
 */
bool
fence_protected_lookup(FenceCatalog *cat, Oid relid, FenceRegistration *reg)
{
	Oid			regid = get_relname_relid("fence_protected", cat->nspid);
	Oid			idxid = get_relname_relid("fence_protected_pkey", cat->nspid);
	Relation	rel;
	TupleTableSlot *slot;
	bool		found;

	if (!OidIsValid(regid) || !OidIsValid(idxid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.fence_protected\" of extension \"fence\" does not exist",
						cat->nspname),
				 errhint("Update the extension with ALTER EXTENSION fence UPDATE.")));
	rel = table_open(regid, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	found = fence_index_fetch(rel, idxid, F_OIDEQ, ObjectIdGetDatum(relid), slot);
	if (found && reg != NULL)
	{
		bool		isnull;
		Datum		value;

		value = slot_getattr(slot, get_attnum(regid, "epoch_column"), &isnull);
		reg->column = isnull ? pstrdup("") : pstrdup(NameStr(*DatumGetName(value)));
		value = slot_getattr(slot, get_attnum(regid, "mode"), &isnull);
		if (isnull)
			elog(ERROR, "relation %u has no mode in fence_protected", relid);
		reg->mode = fence_mode_parse(TextDatumGetCString(value));
		value = slot_getattr(slot, get_attnum(regid, "form"), &isnull);
		reg->form = isnull ? FENCE_DEFAULT_FORM :
			fence_form_parse(TextDatumGetCString(value));
	}

	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, AccessShareLock);
	return found;
}

/* Does the registry hold any relation at all?  (One heap tuple will do.) */
bool
fence_protected_any(FenceCatalog *cat)
{
	Oid			regid = get_relname_relid("fence_protected", cat->nspid);
	Relation	rel;
	Snapshot	snapshot;
	TableScanDesc scan;
	TupleTableSlot *slot;
	bool		found;

	if (!OidIsValid(regid))
		return false;
	rel = table_open(regid, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan_compat(rel, snapshot, 0, NULL);
	found = table_scan_getnextslot(scan, ForwardScanDirection, slot);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	return found;
}

/* Record the relation as protected with this column, mode and form. */
void
fence_protected_put(FenceCatalog *cat, Oid relid, const FenceRegistration *reg)
{
	const char *args[4];

	args[0] = relid_text(relid);
	args[1] = reg->column;
	args[2] = fence_mode_name(reg->mode);
	args[3] = fence_form_name(reg->form);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_spi_as_owner(cat, "fence_protected",
					   psprintf("INSERT INTO %s (relation, epoch_column, mode, form)"
								" VALUES ($1::pg_catalog.oid::pg_catalog.regclass, $2::pg_catalog.name, $3, $4)"
								" ON CONFLICT (relation) DO UPDATE"
								" SET epoch_column = EXCLUDED.epoch_column, mode = EXCLUDED.mode,"
								" form = EXCLUDED.form",
								quote_qualified_identifier(cat->nspname, "fence_protected")),
					   4, args);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * Forget the relation (dropped, or unprotected), and the replication
 * grants it had: they belong to its protection.
 */
void
fence_protected_forget(FenceCatalog *cat, Oid relid)
{
	const char *args[1];

	args[0] = relid_text(relid);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_spi_as_owner(cat, "fence_protected",
					   psprintf("DELETE FROM %s WHERE relation OPERATOR(pg_catalog.=) $1::pg_catalog.oid::pg_catalog.regclass",
								quote_qualified_identifier(cat->nspname, "fence_protected")),
					   1, args);
	if (OidIsValid(get_relname_relid("fence_replication_grants", cat->nspid)))
		fence_spi_as_owner(cat, "fence_replication_grants",
						   psprintf("DELETE FROM %s WHERE relation OPERATOR(pg_catalog.=) $1::pg_catalog.oid::pg_catalog.regclass",
									quote_qualified_identifier(cat->nspname, "fence_replication_grants")),
						   1, args);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * May roleid apply logical replication to relid without a token?  Only if
 * fence_replication_grants has a row for relid naming a role whose
 * privileges roleid has (fence_grant_replication).  The apply worker asks
 * this for every row of a subscription a superuser does not own, so it
 * reads the primary key's first column directly, with the latest
 * snapshot, as fence_protected_lookup does.  Under 1.0's SQL there is no
 * such table, and no grant.
 */
bool
fence_replication_granted(FenceCatalog *cat, Oid relid, Oid roleid)
{
	Oid			regid = get_relname_relid("fence_replication_grants", cat->nspid);
	Oid			idxid = get_relname_relid("fence_replication_grants_pkey", cat->nspid);
	Relation	rel;
	Relation	idx;
	Snapshot	snapshot;
	ScanKeyData skey;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	AttrNumber	att_role;
	bool		found = false;

	if (!OidIsValid(regid) || !OidIsValid(idxid))
		return false;
	att_role = get_attnum(regid, "role");
	rel = table_open(regid, AccessShareLock);
	idx = index_open(idxid, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber,
						   InvalidOid, idx->rd_indcollation[0], F_OIDEQ,
						   ObjectIdGetDatum(relid));
	scan = index_beginscan_compat(rel, idx, snapshot, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	while (!found && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		role = slot_getattr(slot, att_role, &isnull);

		found = !isnull && has_privs_of_role(roleid, DatumGetObjectId(role));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Record (grant) or remove (revoke) roleid's replication grant on relid.
 * Whether the row was there before, so the caller can say nothing changed.
 */
bool
fence_replication_grant_put(FenceCatalog *cat, Oid relid, Oid roleid, bool grant)
{
	const char *args[2];
	const char *table = quote_qualified_identifier(cat->nspname,
												   "fence_replication_grants");
	bool		existed;

	args[0] = relid_text(relid);
	args[1] = psprintf("%u", roleid);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (grant)
	{
		fence_spi_as_owner(cat, "fence_replication_grants",
						   psprintf("INSERT INTO %s (relation, role)"
									" VALUES ($1::pg_catalog.oid::pg_catalog.regclass, $2::pg_catalog.oid::pg_catalog.regrole)"
									" ON CONFLICT (relation, role) DO NOTHING", table),
						   2, args);
		existed = (SPI_processed == 0);
	}
	else
	{
		fence_spi_as_owner(cat, "fence_replication_grants",
						   psprintf("DELETE FROM %s WHERE relation OPERATOR(pg_catalog.=) $1::pg_catalog.oid::pg_catalog.regclass"
									" AND role OPERATOR(pg_catalog.=) $2::pg_catalog.oid::pg_catalog.regrole",
									table),
						   2, args);
		existed = (SPI_processed > 0);
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return existed;
}


/* The owner of a relation. */
Oid
fence_rel_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/* May the current user change the relation's protection?  Its owners may. */
bool
fence_may_manage(Oid relid)
{
	return has_privs_of_role(GetUserId(), fence_rel_owner(relid));
}
