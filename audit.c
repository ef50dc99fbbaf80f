/*-------------------------------------------------------------------------
 *
 * audit.c
 *	  fence_audit(scan_rows): what fence cannot refuse, reported.
 *
 * A superuser can disable fence's event triggers, declare DDL that disarms
 * a table and leave it so, write fence_claims or fence_protected, or setval
 * the counter; none of this is DDL that fence's event triggers can refuse.
 * fence_audit() reads the catalogs, the registry, the claims and the
 * counter, and returns one row for each problem it finds: severity 'error'
 * (protection is broken: some write, TRUNCATE or DDL goes through
 * unchecked, or every write fails) or 'warning' (worth a look); the
 * relation concerned (NULL for the database as a whole); the problem; and,
 * in one sentence, the fix.  A healthy database has no 'error' row.
 *
 * What "intact" means is intact.c's, not this file's: each relation's
 * findings (fence_rel_findings) and the event triggers' are worded here as
 * rows.  Added here, because no DDL can be refused for them: the counter
 * below the claims, registry rows of relations that do not exist,
 * partitions and children that are not registered, BEFORE ROW triggers
 * that sort after the guard (every write they fire for fails) or before it
 * (they run before its check: a warning, except for known-harmless built-in
 * functions), triggers cloned from a table outside the tree whose owner
 * does not own the member, TRIGGER held by a role that does not own the
 * table, and with
 * scan_rows, stored epochs above the last token issued.
 *
 * The relations checked are those in fence_protected that exist, and every
 * partition and inheritance child of one, at every level, registered or
 * not: each is checked against its own registry row or, when it has none,
 * its nearest registered ancestor's.  A trigger that a partition has
 * because PostgreSQL cloned it from its parent has the parent's form: its
 * form is reported on the relation it comes from, its firing state (which
 * can be changed on the partition alone) on each relation.
 *
 * It runs as the caller and needs no privilege beyond what PUBLIC has,
 * except SELECT on the epoch columns for scan_rows.  It reads the catalogs
 * without locking any relation; the counter, the claims and the registry
 * are read as the caller, and so are the scanned rows (permissions and
 * row-level security apply: what could not be scanned is a warning).
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_event_trigger.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(fence_audit_report);
PG_FUNCTION_INFO_V1(fence_token_lock_class);

/* What one run of fence_audit works with. */
typedef struct Report
{
	Tuplestorestate *store;
	TupleDesc	desc;
	FenceCatalog cat;			/* looked up here, not fence_catalog()'s: any
								 * of fence's objects may be missing, and
								 * that is what the audit is for */
	char	   *qnsp;			/* the extension's schema, quoted */
	List	   *members;		/* every relation checked */
} Report;

/* One member of a protected tree, and the registry row it is held to. */
typedef struct Member
{
	Oid			relid;
	FenceRegistration reg;
	bool		registered;
	Oid			top;			/* the topmost registered relation above */
	FenceRegistration topreg;
	char		relkind;
	FenceRegistration preg;		/* its parent's; column NULL at the top */
} Member;

static void
emit(Report *r, const char *severity, Oid relid, const char *problem,
	 const char *fix)
{
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	values[0] = CStringGetTextDatum(severity);
	values[1] = ObjectIdGetDatum(relid);
	nulls[1] = !OidIsValid(relid);
	values[2] = CStringGetTextDatum(problem);
	values[3] = CStringGetTextDatum(fix);
	tuplestore_putvalues(r->store, r->desc, values, nulls);
}

/* "@extschema@.name", as the install script writes it */
static char *
ext_name(Report *r, const char *name, bool quote)
{
	return psprintf("%s.%s", r->qnsp, quote ? quote_identifier(name) : name);
}

static char *
spi_text(int row, int col)
{
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
}

/*
 * The registration in columns col (column), col + 1 (mode) and col + 2
 * (form) of a row read from fence_protected: all NULL, or a column, a
 * mode, and a form (NULL in a row from before forms: the default).
 */
static FenceRegistration
spi_registration(int row, int col)
{
	FenceRegistration reg;
	char	   *mode = spi_text(row, col + 1);
	char	   *form = spi_text(row, col + 2);

	reg.column = spi_text(row, col);
	reg.mode = mode ? fence_mode_parse(mode) : FENCE_DEFAULT_MODE;
	reg.form = form ? fence_form_parse(form) : FENCE_DEFAULT_FORM;
	return reg;
}

static bool
spi_isnull(int row, int col)
{
	bool		isnull;

	(void) SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, &isnull);
	return isnull;
}

static int64
spi_int8(int row, int col)
{
	bool		isnull;

	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[row],
									   SPI_tuptable->tupdesc, col, &isnull));
}

/*
 * What fence's event triggers do not do while one of them is missing or
 * does not fire.
 */
static const char *
event_consequence(const char *fn)
{
	if (strcmp(fn, "fence_ddl_command_start") == 0)
		return "DDL that disarms a protected table is not refused";
	if (strcmp(fn, "fence_ddl_command_end") == 0)
		return "new partitions and children of protected tables are not protected";
	if (strcmp(fn, "fence_sql_drop") == 0)
		return "drops of protected tables are neither recorded nor removed from fence_protected";
	return "rewrites that compute values in a protected table (a change of column type, SET EXPRESSION) are not refused";
}

static void
report_event_triggers(Report *r)
{
	ListCell   *lc;

	foreach(lc, fence_event_trigger_findings(r->cat.nspid))
	{
		FenceFinding *f = (FenceFinding *) lfirst(lc);
		const char *cons = event_consequence(f->evtfn);
		const char *evtname = f->name;

		switch (f->kind)
		{
			case FENCE_FOUND_EVENT_FUNCTION_MISSING:
				emit(r, "error", InvalidOid,
					 psprintf("fence's event trigger function %s() is missing: %s", f->evtfn, cons),
					 psprintf("As a superuser, create %s() and its event trigger again as fence's install script does, and add both back with ALTER EXTENSION fence ADD.",
							  ext_name(r, f->evtfn, false)));
				break;
			case FENCE_FOUND_EVENT_MISSING:
				emit(r, "error", InvalidOid,
					 psprintf("fence's event trigger on %s, calling %s(), is missing: %s",
							  f->event, f->evtfn, cons),
					 psprintf("As a superuser, run CREATE EVENT TRIGGER %s ON %s EXECUTE FUNCTION %s(); ALTER EVENT TRIGGER %s ENABLE ALWAYS; ALTER EXTENSION fence ADD EVENT TRIGGER %s;",
							  quote_identifier(f->evtfn), f->event, ext_name(r, f->evtfn, true),
							  quote_identifier(f->evtfn), quote_identifier(f->evtfn)));
				break;
			case FENCE_FOUND_EVENT_WRONG_EVENT:
			case FENCE_FOUND_EVENT_FILTERED:
				emit(r, "error", InvalidOid,
					 f->kind == FENCE_FOUND_EVENT_WRONG_EVENT ?
					 psprintf("event trigger \"%s\" calls %s() on %s, not on %s: %s",
							  evtname, f->evtfn, f->evtevent, f->event, cons) :
					 psprintf("event trigger \"%s\" fires only for some command tags: for the others, %s",
							  evtname, cons),
					 psprintf("As a superuser, run %sDROP EVENT TRIGGER %s; CREATE EVENT TRIGGER %s ON %s EXECUTE FUNCTION %s(); ALTER EVENT TRIGGER %s ENABLE ALWAYS; ALTER EXTENSION fence ADD EVENT TRIGGER %s;",
							  OidIsValid(fence_object_extension(EventTriggerRelationId, f->evtoid,
														 DEPENDENCY_EXTENSION)) ?
							  psprintf("ALTER EXTENSION fence DROP EVENT TRIGGER %s; ",
									   quote_identifier(evtname)) : "",
							  quote_identifier(evtname), quote_identifier(evtname), f->event,
							  ext_name(r, f->evtfn, true), quote_identifier(evtname),
							  quote_identifier(evtname)));
				break;
			case FENCE_FOUND_EVENT_ENABLED:
				emit(r, "error", InvalidOid,
					 f->evtenabled == TRIGGER_DISABLED ?
					 psprintf("event trigger \"%s\" is disabled: %s", evtname, cons) :
					 f->evtenabled == TRIGGER_FIRES_ON_ORIGIN ?
					 psprintf("event trigger \"%s\" is ENABLE, not ENABLE ALWAYS: with session_replication_role = replica, %s",
							  evtname, cons) :
					 psprintf("event trigger \"%s\" is ENABLE REPLICA: except with session_replication_role = replica, %s",
							  evtname, cons),
					 psprintf("As a superuser, run ALTER EVENT TRIGGER %s ENABLE ALWAYS.",
							  quote_identifier(evtname)));
				break;
			default:
				break;
		}
	}
}

/*
 * The counter and the claims: every token in fence_claims was issued, so
 * none may be above the last token issued, or fence_claim hands out the
 * same number again.  Read as the caller.
 */
static bool
report_counter(Report *r, int64 *last_issued)
{
	char	   *seq = ext_name(r, "fence_token_seq", false);
	char	   *claims = ext_name(r, "fence_claims", false);
	Oid			argtypes[1] = {INT8OID};
	Datum		args[1];
	int64		n;

	/*
	 * The last token issued: nextval has not run since a setval(.., false)
	 * (or ever, on a new counter) when is_called is false.
	 */
	SPI_execute(psprintf("SELECT CASE WHEN s.is_called THEN s.last_value "
						 "ELSE s.last_value OPERATOR(pg_catalog.-) 1 END FROM %s s", seq),
				true, 0);
	if (SPI_processed != 1 || spi_isnull(0, 1))
		return false;
	*last_issued = spi_int8(0, 1);

	args[0] = Int64GetDatum(*last_issued);
	SPI_execute_with_args(psprintf("SELECT pg_catalog.count(*) FROM %s c "
								   "WHERE c.token OPERATOR(pg_catalog.>) $1", claims),
						  1, argtypes, args, NULL, true, 0);
	n = spi_int8(0, 1);
	if (n > 0)
	{
		SPI_execute(psprintf("SELECT c.job, c.token FROM %s c ORDER BY c.token DESC LIMIT 1",
							 claims), true, 0);
		if (SPI_processed == 1)
			emit(r, "error", InvalidOid,
				 psprintf("the counter's last token " INT64_FORMAT " is below the largest token in fence_claims, %s of job \"%s\" (claims above it: " INT64_FORMAT "): fence_claim will issue their numbers again",
						  *last_issued, spi_text(0, 2), spi_text(0, 1), n),
				 psprintf("Move the counter past every claim and stored epoch as a superuser (doc/fence.md, \"Reset and restore hazards\"): SELECT %s();",
						  ext_name(r, "fence_advance", false)));
	}
	return true;
}

/*
 * The worker API granted to PUBLIC: any role that can log in may then
 * claim, take over, hold and release jobs.  A new install grants it to no
 * role; an update from 1.0 keeps 1.0's grants until they are moved.  Under
 * 1.0's SQL objects (no fence_worker_functions) there is nothing to read.
 */
static void
report_worker_grants(Report *r)
{
	if (!OidIsValid(fence_find_function(r->cat.nspid, "fence_worker_functions", 0, NULL)))
		return;
	SPI_execute(psprintf("SELECT pg_catalog.string_agg(f::pg_catalog.text, ', ') "
						 "FROM %s() f JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) f "
						 "WHERE EXISTS (SELECT FROM pg_catalog.aclexplode(COALESCE(p.proacl, "
						 "pg_catalog.acldefault('f', p.proowner))) a "
						 "WHERE a.grantee OPERATOR(pg_catalog.=) 0 "
						 "AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE')",
						 ext_name(r, "fence_worker_functions", false)),
				true, 0);
	if (SPI_processed != 1 || spi_isnull(0, 1))
		return;
	emit(r, "warning", InvalidOid,
		 psprintf("EXECUTE on the worker API is granted to PUBLIC (%s): any role that can log in may claim, take over and release jobs",
				  spi_text(0, 1)),
		 psprintf("Grant each worker role with SELECT %s('role'); then revoke the worker API from PUBLIC (doc/fence.md section 7).",
				  ext_name(r, "fence_grant_worker", false)));
}

/*
 * Registry rows of relations that do not exist.  fence_sql_drop removes
 * the registry row of a dropped table and writes its 'drop' row to
 * fence_audit_log in the same transaction, so a registry row left behind
 * is never covered by a recorded drop.
 */
static void
report_missing_relations(Report *r)
{
	uint64		i;

	SPI_execute(psprintf("SELECT p.relation::pg_catalog.oid FROM %s p "
						 "WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c "
						 "WHERE c.oid OPERATOR(pg_catalog.=) p.relation::pg_catalog.oid) "
						 "ORDER BY 1", ext_name(r, "fence_protected", false)),
				true, 0);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
														   SPI_tuptable->tupdesc, 1,
														   &isnull));

		emit(r, "error", relid,
			 "registered in fence_protected, but no relation has this OID and no drop of it was recorded: the registry or the catalog was written by hand, or the table was dropped while fence_sql_drop was off",
			 psprintf("As a superuser, remove the row: DELETE FROM %s WHERE relation = %s;",
					  ext_name(r, "fence_protected", false),
					  quote_literal_cstr(psprintf("%u", relid))));
	}
}

/*
 * The protected relations: the registered ones, and their partitions and
 * children at every level.  Each gets its registry row's column, mode and
 * form, or its nearest registered ancestor's; "top", the topmost
 * registered relation above it (the one to protect again); and its
 * parent's, to compare a registered member with.
 */
static List *
read_members(Report *r)
{
	List	   *members = NIL;
	uint64		i;

	SPI_execute(psprintf(
						 "WITH RECURSIVE reg AS ("
						 " SELECT p.relation::pg_catalog.oid AS relid, p.epoch_column::pg_catalog.text AS col,"
						 "        p.mode, p.form"
						 "   FROM %s p"
						 "  WHERE EXISTS (SELECT FROM pg_catalog.pg_class c"
						 "                 WHERE c.oid OPERATOR(pg_catalog.=) p.relation::pg_catalog.oid)),"
						 " tree(relid, col, mode, form, top, depth, registered, pcol, pmode, pform) AS ("
						 " SELECT r.relid, r.col, r.mode, r.form, r.relid, 0, true,"
						 "        NULL::pg_catalog.text COLLATE pg_catalog.\"C\", NULL::pg_catalog.text, NULL::pg_catalog.text"
						 "   FROM reg r"
						 " UNION ALL"
						 " SELECT i.inhrelid, COALESCE(own.col, t.col), COALESCE(own.mode, t.mode),"
						 "        COALESCE(own.form, t.form), t.top, t.depth OPERATOR(pg_catalog.+) 1,"
						 "        own.relid IS NOT NULL, t.col, t.mode, t.form"
						 "   FROM tree t"
						 "   JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.relid"
						 "   LEFT JOIN reg own ON own.relid OPERATOR(pg_catalog.=) i.inhrelid)"
						 "SELECT DISTINCT ON (t.relid) t.relid, t.col, t.mode, t.form, t.registered,"
						 "       t.top, tr.col, tr.mode, tr.form, c.relkind, t.pcol, t.pmode, t.pform"
						 "  FROM tree t"
						 "  JOIN reg tr ON tr.relid OPERATOR(pg_catalog.=) t.top"
						 "  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid"
						 " ORDER BY t.relid, t.depth DESC, t.top",
						 ext_name(r, "fence_protected", false)),
				true, 0);
	for (i = 0; i < SPI_processed; i++)
	{
		Member	   *m = palloc0(sizeof(Member));
		bool		isnull;

		m->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		m->reg = spi_registration(i, 2);
		m->registered = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 5, &isnull));
		m->top = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 6, &isnull));
		m->topreg = spi_registration(i, 7);
		m->relkind = DatumGetChar(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 10, &isnull));
		m->preg = spi_registration(i, 11);
		members = lappend(members, m);
	}
	return members;
}

static bool
is_member(Report *r, Oid relid)
{
	ListCell   *lc;

	foreach(lc, r->members)
		if (((Member *) lfirst(lc))->relid == relid)
			return true;
	return false;
}

/*
 * Is the trigger a clone of a trigger on a member?  *parent_enabled gets
 * that trigger's firing state.
 */
static bool
cloned_from_member(Report *r, FenceTrigger *t, char *parent_enabled)
{
	Relation	tgrel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		cloned = false;

	if (!OidIsValid(t->parentid))
		return false;
	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(t->parentid));
	scan = systable_beginscan(tgrel, TriggerOidIndexId, true, NULL, 1, &key);
	if (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_trigger pt = (Form_pg_trigger) GETSTRUCT(tup);

		cloned = is_member(r, pt->tgrelid);
		if (parent_enabled)
			*parent_enabled = pt->tgenabled;
	}
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);
	return cloned;
}

/* Why a guard's form is not fence's, as the audit words it. */
static const char *
guard_why(FenceFinding *f, bool is_update)
{
	FenceTrigger *t = f->trigger;
	const char *argcol = t->nargs >= 1 ? t->args[0] : FENCE_DEFAULT_EPOCH_COLUMN;
	const char *argmode = t->nargs >= 2 ? t->args[1] : fence_mode_name(FENCE_DEFAULT_MODE);

	switch (f->kind)
	{
		case FENCE_FOUND_TRIGGER_UPDATE_IN_BEFORE_FORM:
			return "the table is protected in the before form, which has no such trigger";
		case FENCE_FOUND_TRIGGER_NAME:
			return is_update ? "its name is not zz_fence_guard_update" :
				"its name is not zz_fence_guard, so it does not fire last";
		case FENCE_FOUND_TRIGGER_TYPE:
			if (is_update)
				return "it is not AFTER UPDATE FOR EACH ROW";
			if (f->reg.form == FENCE_FORM_AFTER)
				return "it is not BEFORE INSERT OR DELETE FOR EACH ROW, as the after form's guard is";
			return "it is not BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW";
		case FENCE_FOUND_TRIGGER_WHEN:
			return "it has a WHEN clause";
		case FENCE_FOUND_TRIGGER_COLUMNS:
			return "it has an UPDATE OF column list";
		case FENCE_FOUND_TRIGGER_CONSTRAINT:
			return "it is a constraint trigger";
		case FENCE_FOUND_TRIGGER_TRANSITION:
			return "it has transition tables";
		case FENCE_FOUND_TRIGGER_NARGS:
			return "it has more than two arguments";
		case FENCE_FOUND_TRIGGER_EPOCH_COLUMN:
			return psprintf("its epoch column %s is not a bigint column of the table",
							quote_identifier(argcol));
		case FENCE_FOUND_TRIGGER_MODE:
			return psprintf("its mode %s is unknown", quote_literal_cstr(argmode));
		case FENCE_FOUND_TRIGGER_ARGS:
			return psprintf("its arguments (%s, %s) are not fence_protected's (%s, %s)",
							quote_literal_cstr(argcol), quote_literal_cstr(argmode),
							quote_literal_cstr(f->reg.column),
							quote_literal_cstr(fence_mode_name(f->reg.mode)));
		case FENCE_FOUND_TRIGGER_UPDATE_WHEN:
			return "its WHEN clause is not NOT fence_update_allowed(NEW.col, OLD.col, NEW.tableoid, 'col', 'mode') for its own column and mode";
		default:
			return NULL;
	}
}

/* Why a TRUNCATE refusal's form is not fence's, as the audit words it. */
static const char *
truncate_why(FenceFinding *f)
{
	switch (f->kind)
	{
		case FENCE_FOUND_TRIGGER_NAME:
			return "its name is not zz_fence_truncate";
		case FENCE_FOUND_TRIGGER_TYPE:
			return "it is not BEFORE TRUNCATE FOR EACH STATEMENT";
		case FENCE_FOUND_TRIGGER_WHEN:
			return "it has a WHEN clause";
		case FENCE_FOUND_TRIGGER_CONSTRAINT:
			return "it is a constraint trigger";
		case FENCE_FOUND_TRIGGER_NARGS:
			return "it has arguments";
		default:
			return NULL;
	}
}

/* One relation's findings (intact.c), as rows; true if any is an error. */
static bool
report_findings(Report *r, Member *m, const char *protect_fix)
{
	const char *relname = fence_rel_display_name(m->relid);
	const char *form_suffix = m->topreg.form == FENCE_FORM_AFTER ? ", form => 'after'" : "";
	const char *qtopcol = quote_literal_cstr(m->topreg.column);
	const char *qtopmode = quote_literal_cstr(fence_mode_name(m->topreg.mode));
	bool		any = false;
	ListCell   *lc;

	foreach(lc, fence_rel_findings(&r->cat, m->relid, &m->reg))
	{
		FenceFinding *f = (FenceFinding *) lfirst(lc);
		FenceTrigger *t = f->trigger;
		const char *qcol = quote_identifier(m->reg.column);
		char	   *problem = NULL;
		const char *fix = protect_fix;
		bool		is_truncate = f->want != NULL && strcmp(f->want, FENCE_TRUNCATE_TRIGGER) == 0;
		bool		is_update = f->want != NULL && strcmp(f->want, FENCE_GUARD_UPDATE_TRIGGER) == 0;
		char	   *drop_fix = NULL;

		if ((t == NULL || f->want == NULL) && f->kind >= FENCE_FOUND_TRIGGER_IMPOSTOR &&
			f->kind <= FENCE_FOUND_TRIGGER_EXTENSION)
			elog(ERROR, "fence finding %d names no trigger", (int) f->kind);
		if (t != NULL)
			drop_fix = psprintf("Drop trigger %s on %s in a transaction that first calls fence_allow_ddl(%s, 'why'), then run SELECT fence_protect(%s, %s, %s%s) again.",
								quote_identifier(t->name), relname, quote_literal_cstr(relname),
								quote_literal_cstr(fence_rel_display_name(m->top)),
								qtopcol, qtopmode, form_suffix);

		switch (f->kind)
		{
			case FENCE_FOUND_FOREIGN:
			case FENCE_FOUND_COLUMN_MISSING:
			case FENCE_FOUND_COLUMN_TYPE:
				/* reported with the TRUNCATE refusal, and with the guards */
				break;
			case FENCE_FOUND_NOT_TABLE:
				problem = pstrdup("registered in fence_protected, but not a table: fence cannot guard it");
				fix = psprintf("As a superuser, remove the row: DELETE FROM %s WHERE relation = %s;",
							   ext_name(r, "fence_protected", false),
							   quote_literal_cstr(psprintf("%u", m->relid)));
				break;
			case FENCE_FOUND_UNLOGGED:
				problem = pstrdup("it is unlogged: a crash empties it, and with it writes that fence accepted");
				fix = psprintf("Run ALTER TABLE %s SET LOGGED.", relname);
				break;
			case FENCE_FOUND_COLUMN_GENERATED:
				problem = psprintf("its epoch column %s is generated: the expression overwrites the token each write carries",
								   qcol);
				fix = psprintf("Run ALTER TABLE %s ALTER COLUMN %s DROP EXPRESSION.", relname, qcol);
				break;
			case FENCE_FOUND_COLUMN_IDENTITY:
				problem = psprintf("its epoch column %s is an identity column: an INSERT that writes no token gets one from its sequence",
								   qcol);
				fix = psprintf("Run ALTER TABLE %s ALTER COLUMN %s DROP IDENTITY.", relname, qcol);
				break;
			case FENCE_FOUND_COLUMN_DEFAULT:
				problem = psprintf("its epoch column %s has a default other than 0: an INSERT that writes no token carries the default as one",
								   qcol);
				fix = psprintf("Run ALTER TABLE %s ALTER COLUMN %s SET DEFAULT 0.", relname, qcol);
				break;
			case FENCE_FOUND_TRIGGER_IMPOSTOR:
				if (cloned_from_member(r, t, NULL))
					break;
				problem = psprintf("trigger \"%s\" calls %s, not fence's %s: %s",
								   t->name, format_procedure(t->fnoid),
								   is_update ? "fence_guard_after()" :
								   strcmp(t->name, FENCE_GUARD_TRIGGER) == 0 ? "fence_guard()" :
								   "fence_refuse_truncate()",
								   is_update ? "UPDATEs are not checked" :
								   strcmp(t->name, FENCE_GUARD_TRIGGER) == 0 ? "writes are not checked" :
								   "TRUNCATE is not refused");
				fix = drop_fix;
				break;
			case FENCE_FOUND_TRIGGER_ENABLED:
				{
					const char *unchecked = is_update ? "UPDATEs" : "writes";

					if (is_truncate)
						problem = t->enabled == TRIGGER_DISABLED ?
							psprintf("TRUNCATE refusal \"%s\" is disabled: TRUNCATE empties the table", t->name) :
							t->enabled == TRIGGER_FIRES_ON_ORIGIN ?
							psprintf("TRUNCATE refusal \"%s\" is ENABLE, not ENABLE ALWAYS: with session_replication_role = replica, TRUNCATE empties the table", t->name) :
							psprintf("TRUNCATE refusal \"%s\" is ENABLE REPLICA: except with session_replication_role = replica, TRUNCATE empties the table", t->name);
					else
						problem = t->enabled == TRIGGER_DISABLED ?
							psprintf("fence guard \"%s\" is disabled: %s are not checked", t->name, unchecked) :
							t->enabled == TRIGGER_FIRES_ON_ORIGIN ?
							psprintf("fence guard \"%s\" is ENABLE, not ENABLE ALWAYS: every %s fails with 39P01, and with session_replication_role = replica %s are not checked",
									 t->name, is_update ? "UPDATE" : "write", unchecked) :
							psprintf("fence guard \"%s\" is ENABLE REPLICA: %s are not checked except with session_replication_role = replica",
									 t->name, unchecked);
					fix = strcmp(t->name, f->want) == 0 ? protect_fix : drop_fix;
				}
				break;
			case FENCE_FOUND_TRIGGER_EXTENSION:
				problem = psprintf("%s \"%s\" depends on extension \"%s\": DROP EXTENSION %s drops it",
								   is_truncate ? "TRUNCATE refusal" : "fence guard", t->name,
								   f->name, quote_identifier(f->name));
				fix = psprintf("Run ALTER TRIGGER %s ON %s NO DEPENDS ON EXTENSION %s.",
							   quote_identifier(t->name), relname, quote_identifier(f->name));
				break;
			case FENCE_FOUND_NO_GUARD:
				problem = pstrdup("no fence guard (zz_fence_guard): writes are not checked");
				break;
			case FENCE_FOUND_NO_UPDATE_CHECK:
				problem = pstrdup("no UPDATE check of the after form (zz_fence_guard_update): UPDATEs are not checked");
				break;
			case FENCE_FOUND_NO_TRUNCATE:
				if (m->relkind == RELKIND_FOREIGN_TABLE)
				{
					problem = pstrdup("a foreign table in a protected tree: it cannot carry the TRUNCATE refusal, and TRUNCATE empties the remote table");
					fix = "Detach it from the protected tree, or unprotect the tree.";
				}
				else
					problem = pstrdup("no TRUNCATE refusal (zz_fence_truncate): TRUNCATE empties the table");
				break;
			case FENCE_FOUND_RULE:
				problem = psprintf("it has rule \"%s\": a DO INSTEAD rule turns a write into one the guard never sees, and the writer is told it succeeded",
								   f->name);
				fix = psprintf("Run DROP RULE %s ON %s.", quote_identifier(f->name), relname);
				break;
			case FENCE_FOUND_UPDATING_FKEY:
				problem = psprintf("its foreign key \"%s\" updates its rows by itself (ON UPDATE CASCADE, SET NULL or SET DEFAULT, or ON DELETE SET NULL or SET DEFAULT), and such an UPDATE cannot carry a token: the after form does not check it",
								   f->name);
				fix = psprintf("Drop foreign key %s or give it actions that do not update the table's rows (ON DELETE CASCADE is one), or protect the table in the before form: SELECT fence_protect(%s, %s, %s).",
							   quote_identifier(f->name),
							   quote_literal_cstr(fence_rel_display_name(m->top)),
							   qtopcol, qtopmode);
				break;
			default:
				/* the form of one of fence's triggers */
				if (t == NULL)
					break;
				if (is_truncate)
				{
					const char *why = truncate_why(f);

					if (why == NULL || cloned_from_member(r, t, NULL))
						break;
					problem = psprintf("TRUNCATE refusal \"%s\" is not the one fence_protect creates: %s",
									   t->name, why);
					fix = drop_fix;
				}
				else
				{
					const char *why;
					const char *argcol = t->nargs >= 1 ? t->args[0] : FENCE_DEFAULT_EPOCH_COLUMN;

					/*
					 * A clone has its parent's form, reported there; only its
					 * arguments against this relation's registry row are its
					 * own.
					 */
					if (f->kind != FENCE_FOUND_TRIGGER_ARGS && cloned_from_member(r, t, NULL))
						break;
					why = guard_why(f, is_update);
					if (why == NULL)
						break;
					problem = psprintf("fence guard \"%s\" is not the one fence_protect creates: %s",
									   t->name, why);
					if (f->kind == FENCE_FOUND_TRIGGER_EPOCH_COLUMN &&
						strcmp(t->name, f->want) == 0 && strcmp(m->reg.column, argcol) == 0)
						fix = psprintf("Add the bigint column %s back, or run SELECT fence_protect(%s, 'another_bigint_column', %s%s) again.",
									   quote_identifier(argcol),
									   quote_literal_cstr(fence_rel_display_name(m->top)),
									   qtopmode, form_suffix);
					else
						fix = strcmp(t->name, f->want) == 0 ? protect_fix : drop_fix;
				}
				break;
		}
		if (problem != NULL)
		{
			emit(r, "error", m->relid, problem, fix);
			any = true;
		}
	}
	return any;
}

/*
 * BEFORE ROW triggers beside the guard: one that sorts after it and may
 * fire (not disabled: an ENABLE or ENABLE REPLICA trigger fires in some
 * sessions) makes the guard refuse every write it fires for; one that
 * sorts before it runs before the check and can change the row.  Known
 * harmless, and not reported: the built-in
 * suppress_redundant_updates_trigger() (a skipped write writes nothing),
 * tsvector_update_trigger() and tsvector_update_trigger_column() (they
 * compute a tsvector column from the row's own columns, and the epoch
 * column is a bigint).  They are named one by one: a superuser can create
 * other functions in pg_catalog, so the schema alone says nothing.
 */
static void
report_trigger_order(Report *r, Member *m)
{
	Oid			harmless[3];
	List	   *triggers = fence_rel_triggers(m->relid);
	ListCell   *lc;

	harmless[0] = fence_find_function(PG_CATALOG_NAMESPACE, "suppress_redundant_updates_trigger", 0, NULL);
	harmless[1] = fence_find_function(PG_CATALOG_NAMESPACE, "tsvector_update_trigger", 0, NULL);
	harmless[2] = fence_find_function(PG_CATALOG_NAMESPACE, "tsvector_update_trigger_column", 0, NULL);

	foreach(lc, triggers)
	{
		FenceTrigger *g = (FenceTrigger *) lfirst(lc);
		ListCell   *olc;

		/*
		 * (A guard of another name is reported as such, and its fix is to
		 * drop it: what sorts after it is not reported.)
		 */
		if (g->fnoid != r->cat.guard_fn || g->enabled == TRIGGER_DISABLED ||
			strcmp(g->name, FENCE_GUARD_TRIGGER) != 0)
			continue;
		foreach(olc, triggers)
		{
			FenceTrigger *o = (FenceTrigger *) lfirst(olc);
			char		parent_enabled = '\0';

			if (o == g || o->enabled == TRIGGER_DISABLED ||
				!TRIGGER_FOR_ROW(o->type) || !TRIGGER_FOR_BEFORE(o->type) ||
				(o->type & g->type &
				 (TRIGGER_TYPE_INSERT | TRIGGER_TYPE_DELETE | TRIGGER_TYPE_UPDATE)) == 0)
				continue;
			/* a clone is reported on its parent, unless its firing state is its own */
			if (cloned_from_member(r, o, &parent_enabled) && parent_enabled == o->enabled)
				continue;
			if (strcmp(o->name, g->name) > 0)
				emit(r, "error", m->relid,
					 psprintf("BEFORE ROW trigger \"%s\" sorts after the fence guard \"%s\": writes it may fire for fail with 39P01",
							  o->name, g->name),
					 psprintf("Rename trigger \"%s\" so that its name sorts before \"%s\" (names compare byte by byte).",
							  o->name, g->name));
			else if (o->fnoid != harmless[0] && o->fnoid != harmless[1] &&
					 o->fnoid != harmless[2] && o->fnoid != r->cat.guard_fn &&
					 o->fnoid != r->cat.refuse_truncate_fn)
				emit(r, "warning", m->relid,
					 psprintf("BEFORE ROW trigger \"%s\" (%s) fires before the fence guard: it runs before the check and can change the row",
							  o->name, format_procedure(o->fnoid)),
					 "If it need not change the row, make it an AFTER trigger; otherwise make sure it cannot change the epoch column or write elsewhere with no token checked.");
		}
	}
}

/*
 * Triggers cloned onto a member from a partitioned table outside the
 * protected tree whose owner may not manage the member: that role (and any
 * role with TRIGGER on its table) can replace the trigger, and the
 * member's owner cannot drop it.  (One cloned from a table of the same
 * owner is that owner's, and reported only as any other trigger is.)
 */
static void
report_foreign_clones(Report *r, Member *m)
{
	Oid			owner = fence_rel_owner(m->relid);
	ListCell   *lc;

	foreach(lc, fence_rel_triggers(m->relid))
	{
		FenceTrigger *t = (FenceTrigger *) lfirst(lc);
		Oid			parent = t->parentid;

		while (OidIsValid(parent))
		{
			Relation	tgrel = table_open(TriggerRelationId, AccessShareLock);
			ScanKeyData key;
			SysScanDesc scan;
			HeapTuple	tup;
			Oid			from = InvalidOid;
			Oid			next = InvalidOid;

			ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber,
						F_OIDEQ, ObjectIdGetDatum(parent));
			scan = systable_beginscan(tgrel, TriggerOidIndexId, true, NULL, 1, &key);
			if (HeapTupleIsValid(tup = systable_getnext(scan)))
			{
				from = ((Form_pg_trigger) GETSTRUCT(tup))->tgrelid;
				next = ((Form_pg_trigger) GETSTRUCT(tup))->tgparentid;
			}
			systable_endscan(scan);
			table_close(tgrel, AccessShareLock);
			if (!OidIsValid(from))
				break;
			if (!is_member(r, from))
			{
				Oid			from_owner = fence_rel_owner(from);

				if (!superuser_arg(from_owner) && !has_privs_of_role(from_owner, owner))
					emit(r, "error", m->relid,
						 psprintf("trigger \"%s\" (%s) is cloned from table %s, outside the protected tree, whose owner %s does not own this table: that role can replace it, and this table's owner cannot drop it",
								  t->name, format_procedure(t->fnoid),
								  fence_rel_display_name(from),
								  quote_identifier(GetUserNameFromId(from_owner, false))),
						 psprintf("Drop trigger %s on %s, or detach %s from it.",
								  quote_identifier(t->name), fence_rel_display_name(from),
								  fence_rel_display_name(m->relid)));
				break;
			}
			parent = next;
		}
	}
}

/*
 * Roles that may create triggers on the relation without owning it: a
 * role other than the owner, not a member of the owning role and not a
 * superuser, or PUBLIC.
 */
static void
report_trigger_grants(Report *r, Member *m)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(m->relid));
	Oid			owner;
	Datum		d;
	bool		isnull;
	Acl		   *acl;
	AclItem    *items;
	int			i;

	if (!HeapTupleIsValid(tup))
		return;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	d = SysCacheGetAttr(RELOID, tup, Anum_pg_class_relacl, &isnull);
	if (isnull)
	{
		ReleaseSysCache(tup);
		return;
	}
	acl = DatumGetAclPCopy(d);
	ReleaseSysCache(tup);
	items = ACL_DAT(acl);
	for (i = 0; i < ACL_NUM(acl); i++)
	{
		Oid			grantee = items[i].ai_grantee;
		const char *who;

		if ((ACLITEM_GET_PRIVS(items[i]) & ACL_TRIGGER) == 0 || grantee == owner)
			continue;
		if (grantee != ACL_ID_PUBLIC &&
			(superuser_arg(grantee) || is_member_of_role(grantee, owner)))
			continue;
		who = grantee == ACL_ID_PUBLIC ? "PUBLIC" :
			quote_identifier(GetUserNameFromId(grantee, false));
		emit(r, "warning", m->relid,
			 psprintf("%s holds TRIGGER on it: only fence_ddl_command_start keeps it from adding a BEFORE trigger that runs before the guard",
					  grantee == ACL_ID_PUBLIC ? "PUBLIC" : psprintf("role %s", who)),
			 psprintf("REVOKE TRIGGER ON %s FROM %s;", fence_rel_display_name(m->relid), who));
	}
}

/*
 * On request, the stored epochs: none may be above the last token issued.
 * Each relation's own rows (ONLY): its partitions and children are
 * members too.  Read as the caller.
 */
static void
report_scan(Report *r, Member *m, int64 last_issued, bool have_last)
{
	AttrNumber	attnum = get_attnum(m->relid, m->reg.column);
	HeapTuple	tup;
	char		relpersistence;
	Oid			relnamespace;
	const char *scannable = NULL;
	const char *qcol = quote_identifier(m->reg.column);

	if (m->relkind != RELKIND_RELATION)
		return;
	if (attnum <= 0 || get_atttype(m->relid, attnum) != INT8OID)
		return;					/* reported with the guard */
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(m->relid));
	if (!HeapTupleIsValid(tup))
		return;
	relpersistence = ((Form_pg_class) GETSTRUCT(tup))->relpersistence;
	relnamespace = ((Form_pg_class) GETSTRUCT(tup))->relnamespace;
	ReleaseSysCache(tup);

	if (relpersistence == RELPERSISTENCE_TEMP && !isTempNamespace(relnamespace))
		scannable = "it is another session's temporary table";
	else if (pg_class_aclcheck(m->relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK &&
			 pg_attribute_aclcheck(m->relid, attnum, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		scannable = psprintf("you may not read its column %s", qcol);
	if (scannable != NULL)
	{
		emit(r, "warning", m->relid,
			 psprintf("its epochs were not scanned: %s", scannable),
			 relpersistence == RELPERSISTENCE_TEMP ?
			 "Run fence_audit(scan_rows => true) in the session that owns the table." :
			 "Run fence_audit(scan_rows => true) as a role that may read the table.");
		return;
	}
	SPI_execute(psprintf("SELECT pg_catalog.max(%s) FROM ONLY %s", qcol,
						 fence_rel_query_name(m->relid)),
				true, 0);
	if (have_last && SPI_processed == 1 && !spi_isnull(0, 1) &&
		spi_int8(0, 1) > last_issued)
	{
		int64		mx = spi_int8(0, 1);

		emit(r, "error", m->relid,
			 psprintf("column %s holds " INT64_FORMAT ", above the counter's last token " INT64_FORMAT ": no token wrote it%s",
					  qcol, mx, last_issued,
					  m->reg.mode == FENCE_MODE_SHARED ? "" :
					  psprintf(", and in %s mode writes of that row fail with 5F002 until the counter passes it",
							   fence_mode_name(m->reg.mode))),
			 psprintf("Move the counter past every claim and stored epoch as a superuser (doc/fence.md, \"Reset and restore hazards\"): SELECT %s();",
					  ext_name(r, "fence_advance", false)));
	}
	if (check_enable_rls(m->relid, InvalidOid, true) == RLS_ENABLED)
		emit(r, "warning", m->relid,
			 "its epochs were scanned only in the rows that row-level security lets you see",
			 "Run fence_audit(scan_rows => true) as the table's owner or a superuser.");
}

/*
 * fence_audit(scan_rows bool DEFAULT false)
 *	RETURNS TABLE (severity text, relation regclass, problem text, fix text)
 */
Datum
fence_audit_report(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		scan_rows = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	Report		r;
	int64		last_issued = 0;
	bool		have_last;
	bool		any_after;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	r.store = rsinfo->setResult;
	r.desc = rsinfo->setDesc;

	/* fence's functions, any of which may be missing */
	r.cat.nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	r.cat.nspname = get_namespace_name(r.cat.nspid);
	r.cat.guard_fn = fence_find_function(r.cat.nspid, "fence_guard", 0, NULL);
	r.cat.refuse_truncate_fn = fence_find_function(r.cat.nspid, "fence_refuse_truncate", 0, NULL);
	r.cat.guard_after_fn = fence_find_function(r.cat.nspid, "fence_guard_after", 0, NULL);
	r.qnsp = pstrdup(quote_identifier(r.cat.nspname));

	SPI_connect();

	have_last = report_counter(&r, &last_issued);

	if (!OidIsValid(r.cat.guard_fn) || !OidIsValid(r.cat.refuse_truncate_fn))
	{
		const char *fn = !OidIsValid(r.cat.guard_fn) ? "fence_guard" : "fence_refuse_truncate";

		emit(&r, "error", InvalidOid,
			 psprintf("fence's trigger function %s() is missing: protected tables are not guarded", fn),
			 psprintf("As a superuser, create %s() again as fence's install script does, add it back with ALTER EXTENSION fence ADD FUNCTION %s(), and protect the tables again.",
					  ext_name(&r, fn, false), ext_name(&r, fn, false)));
	}
	SPI_execute(psprintf("SELECT FROM %s p WHERE p.form OPERATOR(pg_catalog.=) %s LIMIT 1",
						 ext_name(&r, "fence_protected", false),
						 quote_literal_cstr(fence_form_name(FENCE_FORM_AFTER))), true, 0);
	any_after = SPI_processed > 0;
	if (!OidIsValid(r.cat.guard_after_fn) && any_after)
		emit(&r, "error", InvalidOid,
			 "fence's trigger function fence_guard_after() is missing: tables protected in the after form do not check UPDATEs",
			 psprintf("As a superuser, create %s() again as fence's update script does, add it back with ALTER EXTENSION fence ADD FUNCTION %s(), and protect the tables again.",
					  ext_name(&r, "fence_guard_after", false), ext_name(&r, "fence_guard_after", false)));

	report_event_triggers(&r);
	report_missing_relations(&r);
	report_worker_grants(&r);

	r.members = read_members(&r);
	foreach(lc, r.members)
	{
		Member	   *m = (Member *) lfirst(lc);
		char	   *protect_fix;
		bool		broken = false;

		protect_fix = psprintf("Run SELECT fence_protect(%s, %s, %s%s) again.",
							   quote_literal_cstr(fence_rel_display_name(m->top)),
							   quote_literal_cstr(m->topreg.column),
							   quote_literal_cstr(fence_mode_name(m->topreg.mode)),
							   m->topreg.form == FENCE_FORM_AFTER ? ", form => 'after'" : "");
		if (!m->registered)
		{
			emit(&r, "error", m->relid,
				 psprintf("a partition or child of protected table %s that is not in fence_protected: fence's DDL checks do not cover it",
						  fence_rel_display_name(m->top)),
				 protect_fix);
			broken = true;
		}
		broken = report_findings(&r, m, protect_fix) || broken;

		/*
		 * A registered member held to other rules than the table above it
		 * (reported when nothing else is wrong with it: a registry row
		 * edited by hand shows first in its triggers).
		 */
		if (!broken && m->registered && m->preg.column != NULL &&
			fence_registration_differs(&m->reg, &m->preg))
			emit(&r, "error", m->relid,
				 psprintf("it is registered in fence_protected as (%s, %s, %s), and the table above it as (%s, %s, %s): one tree, protected two ways",
						  quote_literal_cstr(m->reg.column),
						  quote_literal_cstr(fence_mode_name(m->reg.mode)),
						  quote_literal_cstr(fence_form_name(m->reg.form)),
						  quote_literal_cstr(m->preg.column),
						  quote_literal_cstr(fence_mode_name(m->preg.mode)),
						  quote_literal_cstr(fence_form_name(m->preg.form))),
				 protect_fix);

		report_trigger_order(&r, m);
		report_foreign_clones(&r, m);
		report_trigger_grants(&r, m);
		if (scan_rows)
			report_scan(&r, m, last_issued, have_last);
	}

	SPI_finish();
	return (Datum) 0;
}

/*
 * fence_token_lock_class() returns int4
 *
 * The lock tag class of a token's lock (locktag_field4, which pg_locks
 * shows as objsubid), for the fence_status view.
 */
Datum
fence_token_lock_class(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(FENCE_LOCKTAG_TOKEN);
}
