/*-------------------------------------------------------------------------
 *
 * fence.c
 *	  Module entry for fence and its settings; the catalog of fence's own
 *	  objects; the checks every SQL entry point applies to its arguments,
 *	  and the names of the guard's modes and forms; running as a
 *	  relation's owner.
 *
 * fence's objects live in whatever schema the extension was created in.
 * They are found from the namespace of the function being called, so no
 * lookup ever depends on the caller's search_path, and the result (the
 * registry's relations, indexes and columns, the counter, fence's trigger
 * functions) is kept for the life of the backend until an invalidation
 * says to look again: a relcache one for one of its relations (DROP
 * EXTENSION, ALTER TABLE, a full reset), a syscache one for one of its
 * functions or for a schema.  Each build has a new generation number; what
 * was decided against an older one (xact.c's validated tokens) no longer
 * counts.  This is the only cache of fence's objects: fence_audit() alone
 * looks them up itself, because it must report the ones that are missing.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include <limits.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* fence.max_lease, in seconds */
int			fence_max_lease_seconds = 86400;
int			fence_max_clock_skew_ms = FENCE_DEFAULT_MAX_CLOCK_SKEW_MS;
bool		fence_inline_enabled = true;

static FenceCatalog fence_cat;	/* the cached catalog */
static uint32 fence_cat_fn_hashes[5];	/* PROCOID hash values of its functions */
static uint32 fence_cat_nsp_hash;	/* NAMESPACEOID hash value of its schema */
static bool fence_cat_valid = false;	/* false until looked up, and after an
										 * invalidation of any relation in it */
static bool fence_cat_building = false; /* fence_catalog() is at work */
static uint64 fence_cat_invals = 0; /* invalidations seen while building */

static void fence_catalog_build(Oid fn_oid);
static Oid	fence_lookup_relation(Oid nspid, const char *relname, char relkind);
static Oid	fence_lookup_function(Oid nspid, const char *fnname);
static void fence_catalog_invalidate(Datum arg, Oid relid);
static void fence_catalog_invalidate_fn(Datum arg, int cacheid,
										uint32 hashvalue);

void
_PG_init(void)
{
	DefineCustomIntVariable("fence.max_lease",
							"The longest lease fence_claim and fence_renew accept.",
							"A lease outlives a dead worker: it bounds how long a job can stay held by one.",
							&fence_max_lease_seconds,
							86400,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("fence.max_clock_skew",
							"The largest difference fence assumes between any two servers' clocks.",
							"The first token of a new history (a restart, a promotion, a restore) lies above the clock's "
							"reading plus twice this, and waits for the clock to pass it.",
							&fence_max_clock_skew_ms,
							FENCE_DEFAULT_MAX_CLOCK_SKEW_MS,
							0,
							FENCE_MAX_CLOCK_SKEW_LIMIT_MS,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("fence.allow_ddl",
							 "Lets this session run DDL that fence refuses on protected tables.",
							 "Each table it lets DDL through for is recorded in fence_audit_log. "
							 "Only superusers may set it (for restore tools); others use fence_allow_ddl().",
							 &fence_allow_ddl_setting,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("fence.notify_superseded",
							 "Sends NOTIFY fence_superseded when a takeover or fence_release_any supersedes a claim.",
							 "The payload names the job, the superseded token and the new one; it is delivered when the change commits.",
							 &fence_notify_superseded,
							 false,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("fence.inline",
							 "Checks a protected table's UPDATE in its plan instead of in the guard trigger, where fence can prove it the same check.",
							 "Takes effect only with fence in shared_preload_libraries; off, or without it, the trigger checks every write (nothing is less safe, only slower).",
							 &fence_inline_enabled,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("fence");
	if (process_shared_preload_libraries_in_progress)
		fence_inline_init();
	fence_xact_init();
	fence_stats_init();
	CacheRegisterRelcacheCallback(fence_catalog_invalidate, (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, fence_catalog_invalidate_fn,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, fence_catalog_invalidate_fn,
								  (Datum) 0);
}

/*
 * Forget the catalog when any of its relations changes, or on a full reset
 * (relid == InvalidOid).  Callbacks must not do catalog access, so this only
 * marks the cache stale; fence_catalog() rebuilds it on next use.
 *
 * An invalidation that arrives while the catalog is being built cannot be
 * matched against relations not looked up yet, so every one of them counts:
 * fence_catalog() then builds again, as relcache.c does for an entry
 * invalidated while it is being built.
 */
static void
fence_catalog_invalidate(Datum arg pg_attribute_unused(), Oid relid)
{
	if (fence_cat_building)
	{
		fence_cat_invals++;
		return;
	}
	if (!fence_cat_valid)
		return;
	if (relid == InvalidOid ||
		relid == fence_cat.claims_relid ||
		relid == fence_cat.claims_job_index ||
		relid == fence_cat.claims_token_index ||
		relid == fence_cat.token_seq_relid ||
		relid == fence_cat.token_history_relid)
		fence_cat_valid = false;
}

/*
 * The same for fence's functions (a function dropped and created again)
 * and its schema (renamed).  While an optional function is missing (the
 * objects of 1.0), any new function may be it.
 */
static void
fence_catalog_invalidate_fn(Datum arg pg_attribute_unused(), int cacheid,
							uint32 hashvalue)
{
	int			i;

	if (fence_cat_building)
	{
		fence_cat_invals++;
		return;
	}
	if (!fence_cat_valid)
		return;
	if (cacheid == NAMESPACEOID)
	{
		if (hashvalue == 0 || hashvalue == fence_cat_nsp_hash)
			fence_cat_valid = false;
		return;
	}
	if (hashvalue == 0 ||
		!OidIsValid(fence_cat.guard_after_fn) ||
		!OidIsValid(fence_cat.release_any_fn) ||
		!OidIsValid(fence_cat.renew_any_fn))
	{
		fence_cat_valid = false;
		return;
	}
	for (i = 0; i < (int) lengthof(fence_cat_fn_hashes); i++)
		if (fence_cat_fn_hashes[i] == hashvalue)
			fence_cat_valid = false;
}

static Oid
fence_lookup_relation(Oid nspid, const char *relname, char relkind)
{
	Oid			relid = get_relname_relid(relname, nspid);

	if (!OidIsValid(relid) || get_rel_relkind(relid) != relkind)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" of extension \"fence\" does not exist",
						get_namespace_name(nspid), relname),
				 errhint("Reinstall the extension with DROP EXTENSION fence and CREATE EXTENSION fence.")));
	return relid;
}

/*
 * A function of fence's in its schema, by name and argument types, or
 * InvalidOid.  Found by the schema's OID in the catalog, so that no USAGE
 * on the schema is needed: the event triggers run for every role's DDL.
 */
Oid
fence_find_function(Oid nspid, const char *fnname, int nargs, const Oid *argtypes)
{
	return GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
						   CStringGetDatum(fnname),
						   PointerGetDatum(buildoidvector(argtypes, nargs)),
						   ObjectIdGetDatum(nspid));
}

/* A trigger function of fence's (no arguments), which must exist. */
static Oid
fence_lookup_function(Oid nspid, const char *fnname)
{
	Oid			fnoid = fence_find_function(nspid, fnname, 0, NULL);

	if (!OidIsValid(fnoid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function %s.%s() of extension \"fence\" does not exist",
						get_namespace_name(nspid), fnname),
				 errhint("Reinstall the extension with DROP EXTENSION fence and CREATE EXTENSION fence.")));
	return fnoid;
}

/*
 * Return fence's catalog, looking it up in the schema of the function
 * fn_oid (any fence function: they all live in the extension's schema).
 */
FenceCatalog *
fence_catalog(Oid fn_oid)
{
	uint64		invals_before;

	while (!fence_cat_valid)
	{
		invals_before = fence_cat_invals;
		fence_cat_building = true;
		PG_TRY();
		{
			fence_catalog_build(fn_oid);
		}
		PG_FINALLY();
		{
			fence_cat_building = false;
		}
		PG_END_TRY();
		/* Anything invalidated meanwhile may be stale: build it again. */
		fence_cat_valid = (fence_cat_invals == invals_before);
	}
	return &fence_cat;
}

/* The owner of a relation, from the syscache. */
static Oid
fence_relation_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * Look everything up.  No relation is locked: the event trigger builds the
 * catalog too, and an unrelated ALTER TABLE must not queue behind a VACUUM
 * FULL of fence_claims.  Instead every reader of the registry opens it
 * with fence_open_claims(), which checks, once its lock is granted, that
 * nothing it was built from changed meanwhile; an invalidation that
 * arrives during the build itself is caught by fence_catalog().
 */
static void
fence_catalog_build(Oid fn_oid)
{
	static uint64 generation = 0;
	Oid			nspid;
	MemoryContext oldcxt;

	nspid = get_func_namespace(fn_oid);
	if (!OidIsValid(nspid))
		elog(ERROR, "cache lookup failed for function %u", fn_oid);

	if (fence_cat.nspname)
		pfree(fence_cat.nspname);
	memset(&fence_cat, 0, sizeof(fence_cat));

	fence_cat.fn_oid = fn_oid;
	fence_cat.nspid = nspid;
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	fence_cat.nspname = get_namespace_name(nspid);
	MemoryContextSwitchTo(oldcxt);

	fence_cat.claims_relid = fence_lookup_relation(nspid, "fence_claims",
												   RELKIND_RELATION);
	fence_cat.claims_owner = fence_relation_owner(fence_cat.claims_relid);
	fence_cat.claims_job_index = fence_lookup_relation(nspid, "fence_claims_pkey",
													   RELKIND_INDEX);
	fence_cat.claims_token_index = fence_lookup_relation(nspid, "fence_claims_token_key",
														 RELKIND_INDEX);
	fence_cat.token_seq_relid = fence_lookup_relation(nspid, "fence_token_seq",
													  RELKIND_SEQUENCE);
	fence_cat.token_seq_owner = fence_relation_owner(fence_cat.token_seq_relid);
	/* (absent in the objects of 1.0, until ALTER EXTENSION fence UPDATE) */
	fence_cat.token_history_relid = get_relname_relid("fence_token_history", nspid);
	/* ... and only an unlogged sequence forgets its history in a crash */
	if (OidIsValid(fence_cat.token_history_relid) &&
		(get_rel_relkind(fence_cat.token_history_relid) != RELKIND_SEQUENCE ||
		 get_rel_persistence(fence_cat.token_history_relid) != RELPERSISTENCE_UNLOGGED))
		fence_cat.token_history_relid = InvalidOid;
	if (OidIsValid(fence_cat.token_history_relid))
		fence_cat.token_history_owner = fence_relation_owner(fence_cat.token_history_relid);

	fence_cat.att_job = get_attnum(fence_cat.claims_relid, "job");
	fence_cat.att_token = get_attnum(fence_cat.claims_relid, "token");
	fence_cat.att_released = get_attnum(fence_cat.claims_relid, "released");
	fence_cat.att_lease_expires_at = get_attnum(fence_cat.claims_relid,
												"lease_expires_at");
	fence_cat.att_holder = get_attnum(fence_cat.claims_relid, "holder");
	fence_cat.att_claimed_at = get_attnum(fence_cat.claims_relid, "claimed_at");
	fence_cat.att_claimed_by = get_attnum(fence_cat.claims_relid, "claimed_by");
	fence_cat.att_n_claims = get_attnum(fence_cat.claims_relid, "n_claims");
	fence_cat.att_n_takeovers = get_attnum(fence_cat.claims_relid, "n_takeovers");
	fence_cat.att_n_renewals = get_attnum(fence_cat.claims_relid, "n_renewals");
	fence_cat.att_n_releases = get_attnum(fence_cat.claims_relid, "n_releases");
	if (fence_cat.att_holder == InvalidAttrNumber ||
		fence_cat.att_claimed_at == InvalidAttrNumber ||
		fence_cat.att_job == InvalidAttrNumber ||
		fence_cat.att_token == InvalidAttrNumber ||
		fence_cat.att_released == InvalidAttrNumber ||
		fence_cat.att_lease_expires_at == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("table \"%s.fence_claims\" lacks a column fence needs",
						fence_cat.nspname)));

	{
		Oid			text_arg[1] = {TEXTOID};
		Oid			renew_args[2] = {TEXTOID, INTERVALOID};

		fence_cat.release_any_fn = fence_find_function(nspid, "fence_release_any", 1, text_arg);
		fence_cat.renew_any_fn = fence_find_function(nspid, "fence_renew_any", 2, renew_args);
	}
	fence_cat.guard_fn = fence_lookup_function(nspid, "fence_guard");
	fence_cat.refuse_truncate_fn = fence_lookup_function(nspid,
														 "fence_refuse_truncate");
	/* (absent in the objects of 1.0, until ALTER EXTENSION fence UPDATE) */
	fence_cat.guard_after_fn = fence_find_function(nspid, "fence_guard_after",
												   0, NULL);
	{
		Oid			fns[lengthof(fence_cat_fn_hashes)] = {
			fence_cat.guard_fn, fence_cat.refuse_truncate_fn,
			fence_cat.guard_after_fn, fence_cat.release_any_fn,
			fence_cat.renew_any_fn
		};
		int			i;

		for (i = 0; i < (int) lengthof(fns); i++)
			fence_cat_fn_hashes[i] =
				GetSysCacheHashValue1(PROCOID, ObjectIdGetDatum(fns[i]));
	}
	fence_cat_nsp_hash = GetSysCacheHashValue1(NAMESPACEOID,
											   ObjectIdGetDatum(nspid));

	fence_cat.generation = ++generation;
}

/*
 * Open fence_claims with lockmode, and return it once the catalog describes
 * it.  Taking the lock processes the invalidations of any change that
 * committed while we waited for it (a column dropped and added again, an
 * index replaced, the extension dropped and created again); if one of them
 * touched fence's relations, the catalog is rebuilt, in place, before the
 * caller uses a column number or an index of it.
 */
Relation
fence_open_claims(FenceCatalog *cat, LOCKMODE lockmode)
{
	for (;;)
	{
		Relation	rel = try_table_open(cat->claims_relid, lockmode);

		if (rel != NULL && fence_cat_valid)
			return rel;
		if (rel != NULL)
			table_close(rel, lockmode);
		(void) fence_catalog(cat->fn_oid);
	}
}

/*
 * Run as owner, a relation's owner, until fence_restore_user(saved): the
 * way ri_triggers.c runs its queries as a table's owner.  fence's own
 * tables are written only so (no caller may write them), which keeps its
 * functions SECURITY INVOKER: no GUC save and restore on every call, and
 * nothing in them depends on the caller's search_path.  Row security does
 * not apply to what runs as the owner, as for a table's owner anywhere;
 * a DBA's triggers on those tables run as that owner too.
 */
void
fence_become_owner(Oid owner, FenceSavedUser *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	SetUserIdAndSecContext(owner,
						   saved->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_NOFORCE_RLS);
}

void
fence_restore_user(const FenceSavedUser *saved)
{
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}

/* pg_trigger_depth(): how many triggers are firing, the caller's included. */
int
fence_trigger_depth(void)
{
	LOCAL_FCINFO(depthinfo, 0);

	InitFunctionCallInfoData(*depthinfo, NULL, 0, InvalidOid, NULL, NULL);
	return DatumGetInt32(pg_trigger_depth(depthinfo));
}

/* The names of the modes and forms, as SQL and trigger arguments spell them. */
static const char *const fence_mode_names[] = {
	[FENCE_MODE_STRICT] = "strict",
	[FENCE_MODE_REPEAT] = "repeat",
	[FENCE_MODE_SHARED] = "shared"
};
static const char *const fence_form_names[] = {
	[FENCE_FORM_BEFORE] = "before",
	[FENCE_FORM_AFTER] = "after"
};

/* The index in names[] of the one spelt as the len bytes at name, or -1. */
static int
name_index(const char *const *names, int nnames, const char *name, size_t len)
{
	int			i;

	for (i = 0; i < nnames; i++)
	{
		if (strlen(names[i]) == len && memcmp(name, names[i], len) == 0)
			return i;
	}
	return -1;
}

/* The mode called name, if there is one. */
bool
fence_mode_lookup(const char *name, FenceMode *mode)
{
	int			i = name_index(fence_mode_names, lengthof(fence_mode_names),
							   name, strlen(name));

	if (i < 0)
		return false;
	if (mode)
		*mode = (FenceMode) i;
	return true;
}

/* The mode called name; an unknown name is an error (22023). */
FenceMode
fence_mode_parse(const char *name)
{
	FenceMode	mode = FENCE_DEFAULT_MODE;

	if (!fence_mode_lookup(name, &mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unrecognized fence mode \"%.*s\"",
						pg_mbcliplen(name, strlen(name), 64), name),
				 errhint("The mode is one of strict, repeat or shared.")));
	return mode;
}

/*
 * The mode a text argument names, compared in place (fence_update_allowed
 * asks once per row); an unknown name is fence_mode_parse's error.
 */
FenceMode
fence_mode_parse_text(text *name)
{
	int			i = name_index(fence_mode_names, lengthof(fence_mode_names),
							   VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));

	if (i < 0)
		return fence_mode_parse(text_to_cstring(name));
	return (FenceMode) i;
}

const char *
fence_mode_name(FenceMode mode)
{
	return fence_mode_names[mode];
}

/* The form called name, if there is one. */
bool
fence_form_lookup(const char *name, FenceForm *form)
{
	int			i = name_index(fence_form_names, lengthof(fence_form_names),
							   name, strlen(name));

	if (i < 0)
		return false;
	if (form)
		*form = (FenceForm) i;
	return true;
}

/* The form called name; an unknown name is an error (22023). */
FenceForm
fence_form_parse(const char *name)
{
	FenceForm	form = FENCE_DEFAULT_FORM;

	if (!fence_form_lookup(name, &form))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unrecognized guard form \"%.*s\"",
						pg_mbcliplen(name, strlen(name), 64), name),
				 errhint("The form is before (the default) or after; see doc/fence.md.")));
	return form;
}

const char *
fence_form_name(FenceForm form)
{
	return fence_form_names[form];
}

/* An argument that must not be NULL (22004), named in the message. */
void
fence_require_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/*
 * The job argument: not NULL, not empty, short enough to be a btree key.
 * Returns it as a C string in the current memory context.
 */
char *
fence_job_arg(FunctionCallInfo fcinfo, int argno)
{
	text	   *job;
	int			len;

	fence_require_arg(fcinfo, argno, "job");
	job = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(job);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job must not be empty")));
	if (len > FENCE_MAX_JOB_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job name is too long"),
				 errdetail("A job name may be at most %d bytes; this one is %d bytes.",
						   FENCE_MAX_JOB_BYTES, len)));
	return text_to_cstring(job);
}

/* The token argument: not NULL, and positive, as every issued token is. */
int64
fence_token_arg(FunctionCallInfo fcinfo, int argno)
{
	int64		token;

	fence_require_arg(fcinfo, argno, "token");
	token = PG_GETARG_INT64(argno);
	if (token <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token must be positive"),
				 errdetail("fence_claim issues only positive tokens; got " INT64_FORMAT ".",
						   token)));
	return token;
}

/* The lease argument: not NULL, and longer than zero. */
Interval *
fence_lease_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval   *lease;
	Interval   *zero;

	/* The contract says 22023 here, not 22004: a lease must be positive. */
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must not be null")));
	lease = PG_GETARG_INTERVAL_P(argno);
	zero = (Interval *) palloc0(sizeof(Interval));
	if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
										  IntervalPGetDatum(lease),
										  IntervalPGetDatum(zero))) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be positive"),
				 errdetail("The lease given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(lease))))));
	pfree(zero);

	/* No lease longer than fence.max_lease: a dead worker's claim must end. */
	{
		Interval   *max = (Interval *) palloc0(sizeof(Interval));

		max->time = (int64) fence_max_lease_seconds * USECS_PER_SEC;
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
											  IntervalPGetDatum(lease),
											  IntervalPGetDatum(max))) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("lease is longer than fence.max_lease"),
					 errdetail("The lease given is %s; fence.max_lease is %s.",
							   DatumGetCString(DirectFunctionCall1(interval_out,
																   IntervalPGetDatum(lease))),
							   DatumGetCString(DirectFunctionCall1(interval_out,
																   IntervalPGetDatum(max)))),
					 errhint("A superuser can raise fence.max_lease, for a role or a database with ALTER ROLE or ALTER DATABASE ... SET.")));
		pfree(max);
	}
	return lease;
}

/* The holder argument: NULL, or at most FENCE_MAX_JOB_BYTES bytes. */
text *
fence_holder_arg(FunctionCallInfo fcinfo, int argno)
{
	text	   *holder;
	int			len;

	if (PG_ARGISNULL(argno))
		return NULL;
	holder = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(holder);
	if (len > FENCE_MAX_JOB_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("holder is too long"),
				 errdetail("A holder may be at most %d bytes; this one is %d bytes.",
						   FENCE_MAX_JOB_BYTES, len)));
	return holder;
}

/*
 * The last token the counter has issued, 0 if none.  Any token above it was
 * never issued by fence_claim: it is forged, or restored from the future.
 * Only the error paths call this.
 *
 * pg_sequence_last_value() checks the caller's privileges on the sequence.
 * fence's answer must not depend on them (a DBA may well revoke SELECT on
 * the counter from PUBLIC), so it is read as the sequence's owner, the way
 * the registry's statements run as the registry's owner.
 */
int64
fence_last_token_issued(FenceCatalog *cat)
{
	int64		last;

	if (!fence_sequence_last_value(cat->token_seq_relid, cat->token_seq_owner, &last))
		return 0;
	return last;
}

/*
 * A sequence's last value, read as its owner (owner): false, and *last
 * untouched, if nextval() has not run on it since it was created, reset by
 * crash recovery (an unlogged sequence) or set with setval(.., false).
 */
bool
fence_sequence_last_value(Oid seqid, Oid owner, int64 *last)
{
	LOCAL_FCINFO(seqinfo, 1);
	Datum		result;
	FenceSavedUser saved;

	InitFunctionCallInfoData(*seqinfo, NULL, 1, InvalidOid, NULL, NULL);
	seqinfo->args[0].value = ObjectIdGetDatum(seqid);
	seqinfo->args[0].isnull = false;

	fence_become_owner(owner, &saved);
	result = pg_sequence_last_value(seqinfo);
	fence_restore_user(&saved);

	if (seqinfo->isnull)
		return false;
	*last = DatumGetInt64(result);
	return true;
}

/*
 * Read the row of one of fence's own tables whose single-column index
 * indexid has key (compared with eqproc), with the latest snapshot, into
 * slot; whether there is one.  No SPI and no privilege check: these reads
 * are on hot or per-DDL paths, and the tables are fence's.  The slot keeps
 * its own buffer pin after the scan ends.
 */
bool
fence_index_fetch(Relation rel, Oid indexid, RegProcedure eqproc, Datum key,
				  TupleTableSlot *slot)
{
	Relation	idx = index_open(indexid, AccessShareLock);
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyData skey;
	IndexScanDesc scan;
	bool		found;

	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber,
						   InvalidOid, idx->rd_indcollation[0], eqproc, key);
	scan = index_beginscan_compat(rel, idx, snapshot, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);

	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	index_close(idx, AccessShareLock);
	return found;
}
