/*-------------------------------------------------------------------------
 *
 * protect.c
 *	  Making and removing protection: fence_protect(), fence_unprotect(),
 *	  and the triggers that carry a protected relation's protection,
 *	  created across a partition or inheritance tree and healed when a
 *	  command left them short.
 *
 * A relation is protected because it is in the registry (registry.c).  Its
 * protection is carried by triggers of fence's, all ENABLE ALWAYS: the row
 * guard (fence_guard, BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, named
 * zz_fence_guard so that it sorts after the table's other BEFORE triggers)
 * and the TRUNCATE refusal (fence_refuse_truncate, BEFORE TRUNCATE FOR EACH
 * STATEMENT, zz_fence_truncate).  In the after form (guard.c) the guard is
 * BEFORE INSERT OR DELETE only, and UPDATEs are checked by a third trigger,
 * zz_fence_guard_update, AFTER UPDATE FOR EACH ROW with fence_update_allowed
 * in its WHEN clause and fence_guard_after as its body.  They are
 * recognised by their function, not by their name.  PostgreSQL clones a row trigger of a partitioned
 * table to every partition, present and future, but not a statement
 * trigger, and neither to a legacy inheritance child: fence gives each
 * member of a protected tree what PostgreSQL does not.  Every member has a
 * registry row of its own, so that protection follows the data when a
 * partition is detached.
 *
 * fence_grant_replication and fence_revoke_replication decide which roles
 * may apply logical replication to a protected relation without a token,
 * beside superusers (guard.c has the rule): they are part of its
 * protection, managed by its owners, recorded, and forgotten with it.
 *
 * A foreign table cannot have a TRUNCATE trigger, so TRUNCATE of a foreign
 * partition would remove rows without a token: a foreign table is refused
 * as a member of a protected tree, whichever way it would get there.
 *
 * This file is above the parts it uses: intact.c says what a protected
 * relation must be, audit_log.c records each change, registry.c keeps the
 * rows.  The DDL it runs goes through fence_run_internal_ddl()
 * (registry.c), which the event triggers (ddl.c) let pass.
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

PG_FUNCTION_INFO_V1(fence_protect);
PG_FUNCTION_INFO_V1(fence_unprotect);
PG_FUNCTION_INFO_V1(fence_grant_replication);
PG_FUNCTION_INFO_V1(fence_revoke_replication);

static void cover_truncate(FenceCatalog *cat, Oid relid);

/* A foreign table in a protected tree: refused, see the header comment. */
static void
refuse_foreign_member(Oid relid)
{
	Oid			parent = InvalidOid;

	if (get_rel_relispartition(relid))
		parent = get_partition_parent(relid, true);

	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 OidIsValid(parent) ?
			 errmsg("foreign table \"%s\" cannot be a partition of protected table \"%s\"",
					fence_rel_display_name(relid), fence_rel_display_name(parent)) :
			 errmsg("foreign table \"%s\" cannot be protected by fence",
					fence_rel_display_name(relid)),
			 errdetail("A foreign table cannot have a TRUNCATE trigger, so TRUNCATE of it would remove rows without checking a fencing token."),
			 errhint("Keep foreign tables out of protected partition trees; protect the local partitions one by one instead.")));
}

/* Create one of fence's triggers on relid (its name, then how it fires), ENABLE ALWAYS. */
static void
create_always_trigger(Oid relid, const char *tgname, const char *definition)
{
	fence_run_internal_ddl(psprintf("CREATE TRIGGER %s %s", tgname, definition));
	fence_run_internal_ddl(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s",
									fence_rel_query_name(relid), tgname));
}

/*
 * Give one relation the triggers of the guard's form it lacks, canonical
 * and ENABLE ALWAYS: zz_fence_guard, and in the after form
 * zz_fence_guard_update, whose WHEN clause ddl.c compares with this one
 * (fence_after_when_is_canonical).  Created on a partitioned table, they
 * are cloned to its partitions.
 */
static void
create_guard(FenceCatalog *cat, Oid relid, const FenceRegistration *reg)
{
	bool		after = (reg->form == FENCE_FORM_AFTER);
	const char *args = psprintf("%s, %s", quote_literal_cstr(reg->column),
								quote_literal_cstr(fence_mode_name(reg->mode)));

	if (after && !OidIsValid(cat->guard_after_fn))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the after form needs fence 1.1"),
				 errhint("Update the extension with ALTER EXTENSION fence UPDATE.")));
	if (!fence_rel_trigger(relid, cat->guard_fn, NULL, NULL))
		create_always_trigger(relid, FENCE_GUARD_TRIGGER,
							  psprintf("BEFORE INSERT OR %sDELETE ON %s FOR EACH ROW"
									   " EXECUTE FUNCTION %s(%s)",
									   after ? "" : "UPDATE OR ",
									   fence_rel_query_name(relid),
									   quote_qualified_identifier(cat->nspname, "fence_guard"),
									   args));
	if (after && !fence_rel_trigger(relid, cat->guard_after_fn, NULL, NULL))
		create_always_trigger(relid, FENCE_GUARD_UPDATE_TRIGGER,
							  psprintf("AFTER UPDATE ON %s FOR EACH ROW"
									   " WHEN (NOT %s(NEW.%s, OLD.%s, NEW.tableoid, %s))"
									   " EXECUTE FUNCTION %s(%s)",
									   fence_rel_query_name(relid),
									   quote_qualified_identifier(cat->nspname, "fence_update_allowed"),
									   quote_identifier(reg->column),
									   quote_identifier(reg->column),
									   args,
									   quote_qualified_identifier(cat->nspname, "fence_guard_after"),
									   args));
}

/*
 * Drop the relation's own guard triggers (both forms), whatever their
 * names: before fence creates them anew.
 */
void
fence_drop_guards(FenceCatalog *cat, Oid relid)
{
	Oid			fnoids[2] = {cat->guard_fn, cat->guard_after_fn};
	int			i;

	for (i = 0; i < 2; i++)
	{
		char	   *tgname;

		while (OidIsValid(fnoids[i]) &&
			   fence_rel_trigger(relid, fnoids[i], NULL, &tgname))
			fence_run_internal_ddl(psprintf("DROP TRIGGER %s ON %s",
											quote_identifier(tgname),
											fence_rel_query_name(relid)));
	}
}

/*
 * Protect relid's whole inheritance tree as reg says: a registry row for
 * every member; the guard's triggers on every member that lacks them (on a
 * partitioned tree, creating them on relid clones them to the partitions;
 * a legacy inheritance child gets its own); the TRUNCATE refusal, ENABLE
 * ALWAYS, on every member.  A foreign member is refused.
 */
void
fence_protect_tree(FenceCatalog *cat, Oid relid, const FenceRegistration *reg)
{
	List	   *members = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);

		if (get_rel_relkind(member) == RELKIND_FOREIGN_TABLE)
			refuse_foreign_member(member);
		/* See cover_truncate: look under the lock CREATE TRIGGER takes. */
		LockRelationOid(member, ShareRowExclusiveLock);
		/* A legacy inheritance child's guard is its own: make it this one. */
		if (member != relid && !get_rel_relispartition(member))
			fence_drop_guards(cat, member);
		create_guard(cat, member, reg);
		fence_protected_put(cat, member, reg);
	}
	cover_truncate(cat, relid);
	list_free(members);
}

/*
 * Give every member of relid's inheritance tree that has fence's row guard
 * (relid itself included) an ENABLE ALWAYS TRUNCATE refusal, and refuse a
 * foreign table among them.  The triggers are created as the current
 * user, who owns the tables: whoever may create or attach a partition owns
 * it.
 * (fence_protect_tree, the only caller, has refused a foreign member.)
 */
static void
cover_truncate(FenceCatalog *cat, Oid relid)
{
	List	   *members = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		char		tgenabled = TRIGGER_DISABLED;
		char	   *tgname = NULL;

		if (!fence_rel_trigger(member, cat->guard_fn, NULL, NULL))
			continue;

		/*
		 * Look for the refusal under the lock CREATE TRIGGER takes: another
		 * session (a parallel restore) may be creating it right now, and
		 * its trigger must be seen, not collided with.
		 */
		LockRelationOid(member, ShareRowExclusiveLock);

		if (!fence_rel_trigger(member, cat->refuse_truncate_fn, &tgenabled, &tgname))
		{
			fence_run_internal_ddl(psprintf("CREATE TRIGGER " FENCE_TRUNCATE_TRIGGER
											" BEFORE TRUNCATE ON %s FOR EACH STATEMENT"
											" EXECUTE FUNCTION %s()",
											fence_rel_query_name(member),
											quote_qualified_identifier(cat->nspname,
																	   "fence_refuse_truncate")));
			tgname = pstrdup(FENCE_TRUNCATE_TRIGGER);
		}
		if (tgenabled != TRIGGER_FIRES_ALWAYS)
			fence_run_internal_ddl(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s",
											fence_rel_query_name(member),
											quote_identifier(tgname)));
	}
	list_free(members);
}

/*
 * Set every trigger of fence's in relid's tree back to ENABLE ALWAYS (after
 * ENABLE TRIGGER ALL, which makes them merely ENABLE).
 */
void
fence_heal_triggers(FenceCatalog *cat, Oid relid)
{
	List	   *members = find_all_inheritors(relid, AccessShareLock, NULL);
	ListCell   *lc;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		Oid			fnoids[3] = {cat->guard_fn, cat->refuse_truncate_fn,
		cat->guard_after_fn};
		int			i;

		for (i = 0; i < 3; i++)
		{
			char		tgenabled;
			char	   *tgname;

			if (OidIsValid(fnoids[i]) &&
				fence_rel_trigger(member, fnoids[i], &tgenabled, &tgname) &&
				tgenabled != TRIGGER_FIRES_ALWAYS)
				fence_run_internal_ddl(psprintf("ALTER TABLE ONLY %s ENABLE ALWAYS TRIGGER %s",
												fence_rel_query_name(member),
												quote_identifier(tgname)));
		}
	}
	list_free(members);
}

/* The checks of fence_protect: it is a table, the caller's, not fence's. */
static void
check_protect_target(FenceCatalog *cat, Oid relid)
{
	Oid			owner = fence_rel_owner(relid);
	char		relkind = get_rel_relkind(relid);

	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table", fence_rel_display_name(relid)),
				 errhint("fence protects ordinary and partitioned tables.")));
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of table %s", fence_rel_display_name(relid))));
	if (fence_citus_table(relid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table %s is a Citus table", fence_rel_display_name(relid)),
				 errdetail("fence protects the tables Citus's coordinator keeps as plain local tables; its guard does not run on Citus's shards yet."),
				 errhint("Keep a protected table local to the coordinator; doc/scale-out.md says what fence on Citus does.")));
	if (get_rel_persistence(relid) == RELPERSISTENCE_UNLOGGED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table %s is unlogged", fence_rel_display_name(relid)),
				 errdetail("A crash empties an unlogged table: its rows would lose the epochs that fence accepted."),
				 errhint("Make it logged first: ALTER TABLE ... SET LOGGED.")));
	if (relid == cat->claims_relid)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot protect fence's own registry %s",
						fence_rel_display_name(relid))));
}

/*
 * A table whose stored epochs lie above the counter (protected again after
 * the extension was re-created, or loaded from another database) refuses
 * every strict or repeat write of those rows with 5F002 until the counter
 * passes them: say so now, with the remedy.  Read as the caller, and only
 * if it may read the column; an index on it makes this one probe.
 */
static void
protect_notice_future_epochs(FenceCatalog *cat, Oid relid, const char *colname,
							 AttrNumber attnum, FenceMode mode)
{
	Oid			userid = GetUserId();
	int64		last_issued;
	int64		mx;

	if (mode == FENCE_MODE_SHARED ||
		(pg_class_aclcheck(relid, userid, ACL_SELECT) != ACLCHECK_OK &&
		 pg_attribute_aclcheck(relid, attnum, userid, ACL_SELECT) != ACLCHECK_OK))
		return;
	last_issued = fence_last_token_issued(cat);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(psprintf("SELECT pg_catalog.max(%s) FROM %s",
							 quote_identifier(colname), fence_rel_query_name(relid)),
					true, 1) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed");
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  1, &isnull);

		mx = isnull ? 0 : DatumGetInt64(d);
		if (mx > last_issued)
			ereport(NOTICE,
					(errmsg("column \"%s\" of table \"%s\" holds epoch " INT64_FORMAT ", above the last token issued, " INT64_FORMAT,
							colname, fence_rel_display_name(relid), mx, last_issued),
					 errdetail("In %s mode, writes of those rows fail with 5F002 until the counter passes them.",
							   fence_mode_name(mode)),
					 errhint("If the extension was re-created or the rows come from another database, a superuser runs SELECT fence_advance();")));
	}
	SPI_finish();
}

/*
 * fence_protect(tbl regclass, epoch_column name, mode text, form text)
 * returns void
 *
 * Protect a table and its whole tree.  It runs as the caller: only the
 * table's owner (or a member of the owning role, or a superuser) can
 * create or drop triggers.  Protecting a protected table again replaces
 * its guard, so a new column, mode or form takes effect.  The form is
 * before (the guard, the default) or after (guard.c).
 */
Datum
fence_protect(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat = fence_catalog(fcinfo->flinfo->fn_oid);
	Oid			relid;
	const char *colname;
	char	   *mode;
	char	   *form = NULL;
	FenceRegistration reg;
	AttrNumber	attnum;

	fence_require_arg(fcinfo, 0, "table");
	fence_require_arg(fcinfo, 1, "epoch column");
	fence_require_arg(fcinfo, 2, "mode");
	relid = PG_GETARG_OID(0);
	colname = NameStr(*PG_GETARG_NAME(1));
	mode = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (PG_NARGS() > 3)
	{
		fence_require_arg(fcinfo, 3, "form");
		form = text_to_cstring(PG_GETARG_TEXT_PP(3));
	}

	check_protect_target(cat, relid);
	reg.column = colname;
	reg.mode = fence_mode_parse(mode);
	reg.form = form ? fence_form_parse(form) : FENCE_DEFAULT_FORM;

	attnum = get_attnum(relid, colname);
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						colname, fence_rel_display_name(relid)),
				 errhint("Add it with ALTER TABLE ... ADD COLUMN " FENCE_DEFAULT_EPOCH_COLUMN " bigint NOT NULL DEFAULT 0.")));
	if (get_atttype(relid, attnum) != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of relation \"%s\" is not of type bigint",
						colname, fence_rel_display_name(relid)),
				 errhint("Change its type: ALTER TABLE %s ALTER COLUMN %s TYPE bigint;",
						 fence_rel_query_name(relid), quote_identifier(colname))));
	if (get_attgenerated(relid, attnum) != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
				 errmsg("column \"%s\" of relation \"%s\" is a generated column",
						colname, fence_rel_display_name(relid)),
				 errdetail("A generated epoch column would overwrite the token each write carries.")));

	fence_drop_guards(cat, relid);
	fence_protect_tree(cat, relid, &reg);

	/* What was made must be what "protected" means (intact.c). */
	{
		Oid			where = relid;
		char	   *problem = fence_tree_broken(cat, relid, &reg, &where);

		if (problem != NULL)
		{
			problem[0] = pg_toupper((unsigned char) problem[0]);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot protect table \"%s\"", fence_rel_display_name(relid)),
					 where == relid ? errdetail("%s.", problem) :
					 errdetail("Table \"%s\": %s.", fence_rel_display_name(where), problem)));
		}
	}
	fence_audit_log_append(cat, "protect", relid, NULL,
						   reg.form == FENCE_FORM_AFTER ?
						   psprintf("fence_protect(%s, %s, form => 'after')", quote_literal_cstr(colname),
									quote_literal_cstr(fence_mode_name(reg.mode))) :
						   psprintf("fence_protect(%s, %s)", quote_literal_cstr(colname),
									quote_literal_cstr(fence_mode_name(reg.mode))),
						   NULL);
	protect_notice_future_epochs(cat, relid, colname, attnum, reg.mode);
	PG_RETURN_VOID();
}

/*
 * fence_unprotect(tbl regclass, reason text) returns void
 *
 * Remove the guard (with its clones on partitions) and every TRUNCATE
 * refusal of the table's tree, and forget the tree.  The epoch column and
 * its values stay.  Recorded, with the reason if one is given.
 */
Datum
fence_unprotect(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat;
	Oid			relid;
	List	   *members;
	ListCell   *lc;
	char	   *reason = NULL;

	fence_require_arg(fcinfo, 0, "table");
	relid = PG_GETARG_OID(0);
	/* (1.0's SQL declares no reason: the library serves both until UPDATE) */
	if (PG_NARGS() > 1 && !PG_ARGISNULL(1))
	{
		reason = text_to_cstring(PG_GETARG_TEXT_PP(1));
		if (reason[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("reason must not be empty"),
					 errdetail("Pass NULL to record none; a reason is kept in fence_audit_log.")));
	}
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	if (!fence_may_manage(relid))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of table %s", fence_rel_display_name(relid))));
	if (!OidIsValid(get_trigger_oid(relid, FENCE_GUARD_TRIGGER, true)) &&
		!fence_protected_lookup(cat, relid, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table %s is not protected by fence",
						fence_rel_display_name(relid))));

	fence_drop_guards(cat, relid);
	members = find_all_inheritors(relid, AccessShareLock, NULL);
	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		char	   *tgname;

		/* legacy inheritance children have guards of their own */
		fence_drop_guards(cat, member);
		if (fence_rel_trigger(member, cat->refuse_truncate_fn, NULL, &tgname))
			fence_run_internal_ddl(psprintf("DROP TRIGGER %s ON %s",
											quote_identifier(tgname),
											fence_rel_query_name(member)));
		fence_protected_forget(cat, member);
	}
	fence_audit_log_append(cat, "unprotect", relid, NULL, "fence_unprotect", reason);
	PG_RETURN_VOID();
}

/*
 * Grant or revoke a role's trust to apply logical replication to a
 * protected table without a token: its subscriptions' apply and table-sync
 * workers, and its sessions with a replication origin set up, write the
 * publisher's rows as they arrive (guard.c).  A grant on a partitioned
 * table covers its partitions.  Its owners and superusers may; each call
 * is recorded, also one that changed nothing.
 */
static void
set_replication_grant(FunctionCallInfo fcinfo, bool grant)
{
	FenceCatalog *cat;
	Oid			relid;
	Oid			roleid;
	bool		existed;
	char	   *rolename;

	fence_require_arg(fcinfo, 0, "table");
	fence_require_arg(fcinfo, 1, "role");
	relid = PG_GETARG_OID(0);
	roleid = PG_GETARG_OID(1);
	if (!OidIsValid(roleid))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("role must name a role")));
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	if (!fence_may_manage(relid))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of table %s", fence_rel_display_name(relid))));
	if (!fence_protected_lookup(cat, relid, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table %s is not protected by fence",
						fence_rel_display_name(relid)),
				 errhint("Protect it first with fence_protect().")));
	rolename = GetUserNameFromId(roleid, false);
	existed = fence_replication_grant_put(cat, relid, roleid, grant);
	fence_audit_log_append(cat, grant ? "grant_replication" : "revoke_replication",
						   relid, NULL,
						   psprintf(grant ?
									"logical replication owned by role %s applies to it without a token%s" :
									"logical replication owned by role %s is guarded like any writer%s",
									quote_identifier(rolename),
									existed == grant ? " (unchanged)" : ""),
						   NULL);
}

/* fence_grant_replication(tbl regclass, role regrole) returns void */
Datum
fence_grant_replication(PG_FUNCTION_ARGS)
{
	set_replication_grant(fcinfo, true);
	PG_RETURN_VOID();
}

/* fence_revoke_replication(tbl regclass, role regrole) returns void */
Datum
fence_revoke_replication(PG_FUNCTION_ARGS)
{
	set_replication_grant(fcinfo, false);
	PG_RETURN_VOID();
}
