/*-------------------------------------------------------------------------
 *
 * fence.h
 *	  Declarations shared by the parts of the fence extension.
 *
 * fence makes PostgreSQL the arbiter of fencing tokens for job workers.
 * The parts, each with one job, floor by floor from the top down.  Calls
 * run down only: a file calls files on the floors below it, never one on
 * its own floor or above (test/checks/layers.py holds the tree to this
 * list, in this order).
 *
 * The entry points: what SQL, the executor and the event triggers call.
 *
 *	ddl.c		the DDL checks: the event triggers refuse DDL that would
 *				disarm a protected relation unless declared
 *				(fence_allow_ddl, fence.allow_ddl), from the parse tree at
 *				the start and from the catalog, by intact.c's definition,
 *				at the end of every command; table_rewrite; sql_drop.  It
 *				dispatches to follow.c
 *	audit.c		fence_audit(): intact.c's findings and what no DDL check can
 *				refuse (the counter, the claims, the registry), as rows
 *	binding.c	the session binding: fence_begin, fence_begin_fresh
 *	guard.c		the guard in its forms: fence_guard() (before),
 *				fence_update_allowed() with fence_guard_after() (after),
 *				fence_inline_guard(), _stamp() and _delete() (the inline
 *				checks, inline.c); the TRUNCATE refusal
 *	effects.c	effect keys: fence_once and every write of fence_effects
 *	prune.c		fence_prune_batch: deleting finished claims, under the locks
 *				a takeover takes
 *
 * Protection following the data, and making it:
 *
 *	follow.c	the end of CREATE ... PARTITION OF, INHERITS, ATTACH,
 *				DETACH, ENABLE TRIGGER ALL, a restore's CREATE TRIGGER of
 *				the guard, and renames
 *	protect.c	fence_protect(), fence_unprotect(), the triggers that carry
 *				protection, and their creation across a partition or
 *				inheritance tree; fence_grant_replication() and
 *				fence_revoke_replication()
 *	refusal.c	what the DDL checks share: the 5F006 refusal unless
 *				declared, the test of a CREATE TRIGGER of fence's function,
 *				the relations and triggers a command touched
 *
 * What "protected" means, and who holds a job:
 *
 *	intact.c	what "protected" means, once: the state a protected
 *				relation, its tree and fence's event triggers must be in,
 *				as findings that each caller words (protect.c, ddl.c,
 *				audit.c)
 *	claims.c	the claims registry (fence_claims): fence_claim, fence_renew,
 *				fence_release, fence_current, fence_is_current; every write
 *				of it and every read that decides a claim, and so "is this
 *				token current?" (fence_hold_token) with the 5F001 and 5F004
 *				reports, and the caller's bugs 5G001 and 5G002
 *
 * The counter, the logs and the registry of protected relations:
 *
 *	token.c		the token counter and its lock tags: the locks that
 *				serialise writers against takeovers, the counter's
 *				histories (its moves at a restart, a promotion, a restore)
 *				and crash gap, fence_advance
 *	audit_log.c	the audit log, fence_audit_log: one row per change to
 *				protection or declared DDL
 *	registry.c	the protected-relations registry (fence_protected) and its
 *				replication grants, read and written, and the relation
 *				helpers everyone reads (names, owner, parents, triggers);
 *				fence's statements run as the owner of its tables
 *
 * The ground floor:
 *
 *	fence.c		module entry and settings; the catalog of fence's own objects
 *				(fence_catalog: its relations and functions, found from the
 *				schema the extension lives in, rebuilt after invalidations);
 *				the checks of SQL arguments; the mode and form names; running
 *				as a relation's owner
 *	inline.c	the guard's inline form: the planner hook that puts guard.c's
 *				checks into an UPDATE's or DELETE's plan, and the
 *				ExecutorStart hook that then skips the guard trigger's
 *				event for that execution, failing closed; it knows
 *				fence's functions by their C symbols, so it calls no other
 *				part of fence
 *	xact.c		per-transaction state: the bound token and the tokens already
 *				validated and locked, kept correct across savepoints and
 *				catalog rebuilds
 *	stats.c		refused writes counted by SQLSTATE and database, the
 *				repeats fence_once absorbed and the UPDATEs and DELETEs the
 *				inline form
 *				took or left to the trigger, in shared memory when fence is
 *				in shared_preload_libraries
 *	citus.c		Citus, looked up at run time: the refusal of claims and
 *				bindings on a Citus worker (the coordinator is the
 *				arbiter), and whether a relation is one of Citus's tables
 *	pg_compat.h	every difference between PostgreSQL majors
 *
 * The after form, like the before form, is one concern per file: guard.c
 * checks its writes, protect.c creates its triggers, intact.c says what
 * they must look like (its WHEN clause included), ddl.c refuses DDL that
 * departs from it and follow.c holds a restore's CREATE TRIGGER to it.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#ifndef FENCE_H
#define FENCE_H

#include "pg_compat.h"

#include "access/attnum.h"
#include "access/xlogdefs.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

/*
 * fence's own SQLSTATE class, 5F: "you were fenced, stop" is a different
 * answer from "try again", so a client must be able to tell them apart.
 */
#define ERRCODE_FENCE_SUPERSEDED	MAKE_SQLSTATE('5','F','0','0','1')
#define ERRCODE_FENCE_ROW_NEWER		MAKE_SQLSTATE('5','F','0','0','2')
#define ERRCODE_FENCE_NO_TOKEN		MAKE_SQLSTATE('5','F','0','0','3')
#define ERRCODE_FENCE_INVALID_TOKEN MAKE_SQLSTATE('5','F','0','0','4')
#define ERRCODE_FENCE_TRUNCATE		MAKE_SQLSTATE('5','F','0','0','5')
#define ERRCODE_FENCE_OPERATION_REFUSED	MAKE_SQLSTATE('5','F','0','0','6')

/*
 * Class 5G: the caller's bugs, which are not fencing.  A worker that gets
 * one was not replaced; it passed the wrong argument or chose the wrong
 * mode, and must fail loudly (retry later, alert) rather than drop its job
 * as fenced.  Not counted by fence_stats, which counts refusals.
 */
#define ERRCODE_FENCE_WRONG_JOB		MAKE_SQLSTATE('5','G','0','0','1')
#define ERRCODE_FENCE_NEVER_ISSUED	MAKE_SQLSTATE('5','G','0','0','2')
#define ERRCODE_FENCE_WRITTEN_BY_SELF	MAKE_SQLSTATE('5','G','0','0','3')
#define ERRCODE_FENCE_NOT_ARBITER	MAKE_SQLSTATE('5','G','0','0','4')

/* stats.c: every 5F ereport says errcode(fence_refused(ERRCODE_FENCE_...)) */
extern void fence_stats_init(void);
extern int	fence_refused(int sqlerrcode);
extern void fence_count_repeat(void);

/*
 * What became of the guard in one UPDATE or DELETE statement of a table
 * with fence's guard (inline.c, counted by stats.c, in fence_stats in this
 * order): the inline check used, or the trigger kept, and why.
 */
typedef enum FenceInlineOutcome
{
	FENCE_INLINE_USED,			/* the inline check, the trigger skipped */
	FENCE_INLINE_OFF,			/* fence.inline = off */
	FENCE_INLINE_UNPLANNED,		/* no check in the plan: not a shape it takes */
	FENCE_INLINE_TRIGGERS,		/* the triggers do not allow it */
	FENCE_INLINE_REPLICA,		/* session_replication_role = replica */
	FENCE_INLINE_N_OUTCOMES
} FenceInlineOutcome;

extern void fence_count_inline(FenceInlineOutcome outcome);

/* The names fence gives its triggers: "zz_" sorts, and so fires, last. */
#define FENCE_GUARD_TRIGGER		"zz_fence_guard"
#define FENCE_GUARD_UPDATE_TRIGGER	"zz_fence_guard_update"
#define FENCE_TRUNCATE_TRIGGER	"zz_fence_truncate"

/* The hint every fenced write carries. */
#define FENCE_STOP_HINT \
	"Stop the handler: retrying with the same token will be fenced again."

/*
 * The guard's modes: how the token a write carries must compare with the
 * one stored in the row (doc/fence.md, "Modes").
 */
typedef enum FenceMode
{
	FENCE_MODE_STRICT,			/* greater: one write per execution per row */
	FENCE_MODE_REPEAT,			/* no lower: an execution may write a row again */
	FENCE_MODE_SHARED			/* many jobs write the row: no comparison */
} FenceMode;

/*
 * The guard's forms: the BEFORE row trigger checks every write (before), or
 * UPDATEs are checked after the row is final, by a WHEN clause and an AFTER
 * trigger (after; guard.c).
 */
typedef enum FenceForm
{
	FENCE_FORM_BEFORE,
	FENCE_FORM_AFTER
} FenceForm;

/* What a guard checks when its trigger or fence_protect names nothing. */
#define FENCE_DEFAULT_EPOCH_COLUMN	"writer_epoch"
#define FENCE_DEFAULT_MODE			FENCE_MODE_STRICT
#define FENCE_DEFAULT_FORM			FENCE_FORM_BEFORE

/*
 * How a relation is protected: its row of fence_protected, the arguments
 * of fence_protect, what its guard's trigger arguments name.  Names are
 * parsed into it where they come in, and spelt again only where they go
 * out (fence_mode_name, fence_form_name).
 */
typedef struct FenceRegistration
{
	const char *column;			/* the epoch column */
	FenceMode	mode;
	FenceForm	form;
} FenceRegistration;

/* Longest job name accepted, in bytes; it is a btree key. */
#define FENCE_MAX_JOB_BYTES 1024

/* Longest effect key accepted by fence_once, in bytes; also a btree key. */
#define FENCE_MAX_EFFECT_KEY_BYTES 1024

/*
 * Lock tag classes, stored in locktag_field4 of an advisory-method lock
 * (as Citus does), so that fence's locks never collide with an
 * application's pg_advisory_lock keys, which use classes 1 and 2.
 */
#define FENCE_LOCKTAG_TOKEN		0x4601	/* one token: writers vs takeover */
#define FENCE_LOCKTAG_JOB		0x4602	/* one job name: claim vs claim */
#define FENCE_LOCKTAG_COUNTER	0x4603	/* moving the counter */
#define FENCE_LOCKTAG_EFFECT	0x4604	/* one effect key: fence_once */

/*
 * The counter's histories (token.c, "Histories").  A history is the
 * counter's run on one server, on one timeline, since one start of its
 * postmaster.  Before the first token of a new history the counter moves to
 * at least
 *
 *	 counter + FENCE_CRASH_GAP, and
 *	 (the clock's reading + 2 * fence.max_clock_skew) << FENCE_CLOCK_SHIFT,
 *
 * and no token is handed out above (the clock's reading) <<
 * FENCE_CLOCK_SHIFT: a claim waits for the clock to pass it.
 *
 * FENCE_CLOCK_SHIFT: 2^10 tokens per millisecond of the clock since
 * 2000-01-01, a million claims a second before a claim would wait; tokens
 * stay below 2^53 (exact in a JavaScript number) until the year 2278.
 */
#define FENCE_CLOCK_SHIFT		10

/*
 * The counter's crash gap.  After a crash (and at every new history) the
 * counter moves at least this far above the value recovery restored before
 * it issues again, and no backend hands out a token this far or further
 * above the last one it knows is durable without flushing the WAL first
 * (token.c).  The same gap covers the tokens an old primary issued that
 * its standby had not replayed when it was promoted: 2^20 claims, far more
 * than any replication lag a failover accepts (Patroni's default
 * maximum_lag_on_failover, 1 MB of WAL, holds about 2,500).  At 2^10
 * tokens a millisecond, a gap is about a second of the clock.
 */
#define FENCE_CRASH_GAP			(INT64CONST(1) << 20)

/* fence.max_clock_skew, in milliseconds: its default and its largest value */
#define FENCE_DEFAULT_MAX_CLOCK_SKEW_MS		500
#define FENCE_MAX_CLOCK_SKEW_LIMIT_MS		60000

/* The fence relations, found in the extension's schema. */
typedef struct FenceCatalog
{
	Oid			fn_oid;			/* the function it was looked up for */
	Oid			nspid;			/* the extension's schema */
	char	   *nspname;		/* its name, for query text */
	Oid			claims_relid;	/* fence_claims */
	Oid			claims_job_index;	/* fence_claims_pkey (job) */
	Oid			claims_token_index; /* fence_claims_token_key (token) */
	Oid			token_seq_relid;	/* fence_token_seq */
	Oid			token_history_relid;	/* fence_token_history, or InvalidOid (1.0) */
	AttrNumber	att_job;
	AttrNumber	att_token;
	AttrNumber	att_released;
	AttrNumber	att_lease_expires_at;
	AttrNumber	att_holder;
	AttrNumber	att_claimed_at;
	AttrNumber	att_claimed_by; /* 1.1; InvalidAttrNumber under 1.0's SQL */
	AttrNumber	att_n_claims;	/* 1.1 counters; the same */
	AttrNumber	att_n_takeovers;
	AttrNumber	att_n_renewals;
	AttrNumber	att_n_releases;
	Oid			guard_fn;		/* fence_guard() */
	Oid			refuse_truncate_fn; /* fence_refuse_truncate() */
	Oid			guard_after_fn; /* fence_guard_after(), or InvalidOid (1.0) */
	Oid			release_any_fn; /* fence_release_any(text), or InvalidOid */
	Oid			renew_any_fn;	/* fence_renew_any(text, interval), or InvalidOid */
	Oid			claims_owner;	/* the registry is written as this role */
	Oid			token_seq_owner;	/* the counter is read as this role */
	Oid			token_history_owner;	/* the same for fence_token_history */
	uint64		generation;		/* bumped whenever the catalog is rebuilt */
} FenceCatalog;

/* fence.c */
extern FenceCatalog *fence_catalog(Oid fn_oid);
extern Relation fence_open_claims(FenceCatalog *cat, LOCKMODE lockmode);
extern bool fence_index_fetch(Relation rel, Oid indexid, RegProcedure eqproc,
							  Datum key, TupleTableSlot *slot);
extern Oid	fence_find_function(Oid nspid, const char *fnname, int nargs,
								const Oid *argtypes);
extern void fence_require_arg(FunctionCallInfo fcinfo, int argno,
							  const char *name);
extern char *fence_job_arg(FunctionCallInfo fcinfo, int argno);
extern int64 fence_token_arg(FunctionCallInfo fcinfo, int argno);
extern Interval *fence_lease_arg(FunctionCallInfo fcinfo, int argno);
extern text *fence_holder_arg(FunctionCallInfo fcinfo, int argno);
extern int	fence_max_lease_seconds;
extern int	fence_max_clock_skew_ms;
extern int64 fence_last_token_issued(FenceCatalog *cat);
extern bool fence_sequence_last_value(Oid seqid, Oid owner, int64 *last);
extern bool fence_mode_lookup(const char *name, FenceMode *mode);
extern FenceMode fence_mode_parse(const char *name);
extern FenceMode fence_mode_parse_text(text *name);
extern const char *fence_mode_name(FenceMode mode);
extern bool fence_form_lookup(const char *name, FenceForm *form);
extern FenceForm fence_form_parse(const char *name);
extern const char *fence_form_name(FenceForm form);

/*
 * The caller's identity, saved while fence runs as the owner of a relation
 * (fence_become_owner, fence_restore_user).
 */
typedef struct FenceSavedUser
{
	Oid			userid;
	int			sec_context;
} FenceSavedUser;

extern void fence_become_owner(Oid owner, FenceSavedUser *saved);
extern void fence_restore_user(const FenceSavedUser *saved);
extern int	fence_trigger_depth(void);

/* inline.c; fence.inline, read by its hooks */
extern bool fence_inline_enabled;
extern void fence_inline_init(void);

/* claims.c */
#define FENCE_SUPERSEDED_CHANNEL "fence_superseded"
extern bool fence_notify_superseded;
extern void claims_refuse_on_standby(const char *what);
extern bool claims_prune_row(FenceCatalog *cat, const char *job, int64 token,
							 TimestampTz cutoff, int64 counts[4]);
extern int64 claims_issue_token(FenceCatalog *cat, const char *job);
extern const char *fence_hold_token(FenceCatalog *cat, int64 token,
									const char *job);

/* token.c */
extern bool token_lock_against_takeover(int64 token);
extern void token_unlock(int64 token);
extern bool token_try_lock_for_takeover(int64 token);
extern bool token_try_lock_job_for_claim(const char *job);
extern void token_unlock_job(const char *job);
extern void token_unlock_takeover(int64 token);
extern void token_begin_history(FenceCatalog *cat);
extern void token_wait_for_clock(int64 token);
extern void token_make_durable(FenceCatalog *cat, int64 token, XLogRecPtr lsn);
extern void token_move_counter(FenceCatalog *cat, int64 last_value,
							   const char *why);

/* registry.c */
extern char *fence_rel_query_name(Oid relid);
extern char *fence_rel_display_name(Oid relid);
extern List *fence_rel_parents(Oid relid);
extern bool fence_rel_trigger(Oid relid, Oid fnoid, char *tgenabled,
							  char **tgname);
extern Oid	fence_rel_owner(Oid relid);
extern bool fence_may_manage(Oid relid);
extern bool fence_internal_ddl_active(void);
extern void fence_run_internal_ddl(const char *sql);
extern int	fence_spi_as_owner(FenceCatalog *cat, const char *table,
							   const char *sql, int nargs,
							   const char *const *args);
extern bool fence_protected_lookup(FenceCatalog *cat, Oid relid,
								   FenceRegistration *reg);
extern bool fence_protected_any(FenceCatalog *cat);
extern void fence_protected_put(FenceCatalog *cat, Oid relid,
								const FenceRegistration *reg);
extern void fence_protected_forget(FenceCatalog *cat, Oid relid);
extern bool fence_replication_granted(FenceCatalog *cat, Oid relid,
									  Oid roleid);
extern bool fence_replication_grant_put(FenceCatalog *cat, Oid relid,
										Oid roleid, bool grant);

/* protect.c */
extern void fence_protect_tree(FenceCatalog *cat, Oid relid,
							   const FenceRegistration *reg);
extern void fence_drop_guards(FenceCatalog *cat, Oid relid);
extern void fence_heal_triggers(FenceCatalog *cat, Oid relid);

/* refusal.c */
extern bool fence_allow_ddl_setting;
extern Oid	fence_rangevar_relid(RangeVar *rv);
extern bool fence_ddl_declared(FenceCatalog *cat, Oid relid,
							   const char *command);
extern void fence_ddl_refuse(FenceCatalog *cat, Oid relid,
							 const char *command, const char *why);
extern void fence_ddl_refuse_with(FenceCatalog *cat, Oid relid,
								  const char *command, const char *message,
								  const char *why);
extern void fence_ddl_refuse_trigger(FenceCatalog *cat, Oid relid,
									 const char *trigname, Oid fnoid,
									 const char *why);
extern bool fence_trigger_is_canonical(FenceCatalog *cat,
									   CreateTrigStmt *stmt, Oid fnoid,
									   Oid relid);
extern SPIPlanPtr fence_kept_plan(SPIPlanPtr *plan, const char *query);
extern List *fence_ddl_command_relids(bool touched);
extern List *fence_ddl_command_triggers(void);

/* follow.c */
extern bool fence_creates_child(Node *parsetree);
extern void fence_follow_new_children(FenceCatalog *cat);
extern void fence_follow_alter_table(FenceCatalog *cat, AlterTableStmt *stmt);
extern void fence_follow_create_trigger(FenceCatalog *cat,
										CreateTrigStmt *stmt);
extern void fence_follow_rename(FenceCatalog *cat, const char *command);

/*
 * intact.c: what a protected relation must be, written once.  Each way in
 * which a relation, its tree or the database falls short of it is a
 * finding; callers word findings their own way (fence_finding_detail for an
 * errdetail, fence_audit for its rows).
 */
typedef enum FenceFindingKind
{
	/* the relation */
	FENCE_FOUND_FOREIGN,		/* a foreign table */
	FENCE_FOUND_NOT_TABLE,		/* neither ordinary nor partitioned */
	FENCE_FOUND_UNLOGGED,
	FENCE_FOUND_COLUMN_MISSING, /* the epoch column: column */
	FENCE_FOUND_COLUMN_TYPE,
	FENCE_FOUND_COLUMN_GENERATED,
	FENCE_FOUND_COLUMN_IDENTITY,
	FENCE_FOUND_COLUMN_DEFAULT,
	/* one trigger: trigger */
	FENCE_FOUND_TRIGGER_IMPOSTOR,	/* fence's name, another function */
	FENCE_FOUND_TRIGGER_UPDATE_IN_BEFORE_FORM,
	FENCE_FOUND_TRIGGER_NAME,	/* fence's function, not fence's name */
	FENCE_FOUND_TRIGGER_TYPE,	/* timing, level or events */
	FENCE_FOUND_TRIGGER_WHEN,	/* a WHEN clause where none belongs */
	FENCE_FOUND_TRIGGER_COLUMNS,	/* UPDATE OF column list */
	FENCE_FOUND_TRIGGER_CONSTRAINT,
	FENCE_FOUND_TRIGGER_TRANSITION, /* transition tables */
	FENCE_FOUND_TRIGGER_NARGS,	/* too many arguments (any, for TRUNCATE) */
	FENCE_FOUND_TRIGGER_EPOCH_COLUMN,	/* its column: no bigint column */
	FENCE_FOUND_TRIGGER_MODE,	/* its mode: unknown */
	FENCE_FOUND_TRIGGER_ARGS,	/* not the registry's column and mode */
	FENCE_FOUND_TRIGGER_UPDATE_WHEN,	/* not the after form's WHEN */
	FENCE_FOUND_TRIGGER_ENABLED,	/* not ENABLE ALWAYS */
	FENCE_FOUND_TRIGGER_EXTENSION,	/* depends on extension: name */
	/* missing triggers */
	FENCE_FOUND_NO_GUARD,
	FENCE_FOUND_NO_UPDATE_CHECK,
	FENCE_FOUND_NO_TRUNCATE,
	/* the after form */
	FENCE_FOUND_UPDATING_FKEY,	/* foreign key: name */
	/* its rules */
	FENCE_FOUND_RULE,			/* a rule: name */
	/* the tree: member is the partition or child */
	FENCE_FOUND_MEMBER_UNREGISTERED,
	FENCE_FOUND_MEMBER_DIFFERS,
	/* the database: fence's event triggers (event, function, name) */
	FENCE_FOUND_EVENT_FUNCTION_MISSING,
	FENCE_FOUND_EVENT_MISSING,
	FENCE_FOUND_EVENT_WRONG_EVENT,	/* evtevent: on the wrong event */
	FENCE_FOUND_EVENT_FILTERED,
	FENCE_FOUND_EVENT_ENABLED	/* evtenabled: not ENABLE ALWAYS */
} FenceFindingKind;

/* A trigger of a relation, as pg_trigger holds it. */
typedef struct FenceTrigger
{
	Oid			oid;
	char	   *name;
	Oid			fnoid;
	int16		type;
	char		enabled;
	Oid			parentid;		/* the trigger it was cloned from, or 0 */
	Oid			constraint;
	int			nattr;
	int			nargs;
	char	  **args;
	char	   *qual;			/* nodeToString of the WHEN clause, or NULL */
	bool		transition;
} FenceTrigger;

typedef struct FenceFinding
{
	FenceFindingKind kind;
	Oid			relid;			/* the relation, or InvalidOid */
	FenceTrigger *trigger;		/* trigger findings: the trigger */
	const char *want;			/* trigger findings: the name fence gives it */
	FenceRegistration reg;		/* the registry's column, mode and form */
	const char *name;			/* foreign key, rule, extension, event trigger */
	Oid			member;			/* member findings: the partition or child */
	FenceRegistration mreg;		/* FENCE_FOUND_MEMBER_DIFFERS: its own row */
	const char *event;			/* event findings: the event it should be on */
	const char *evtfn;			/* and its function */
	Oid			evtoid;			/* the event trigger */
	const char *evtevent;		/* the event it is on */
	char		evtenabled;
} FenceFinding;

extern List *fence_rel_triggers(Oid relid);
extern List *fence_rel_findings(FenceCatalog *cat, Oid relid,
								const FenceRegistration *reg);
extern FenceFinding *fence_member_finding(FenceCatalog *cat, Oid relid,
										  Oid member,
										  const FenceRegistration *reg);
extern bool fence_registration_differs(const FenceRegistration *a,
									   const FenceRegistration *b);
extern List *fence_event_trigger_findings(Oid nspid);
extern char *fence_finding_detail(FenceFinding *f);
extern bool fence_after_when_is_canonical(FenceCatalog *cat, Oid relid,
										  const char *tgname);
extern Oid	fence_object_extension(Oid classid, Oid objid, char deptype);
extern char *fence_rel_broken(FenceCatalog *cat, Oid relid,
							  const FenceRegistration *reg);
extern char *fence_member_broken(FenceCatalog *cat, Oid member,
								 const FenceRegistration *reg);
extern char *fence_tree_broken(FenceCatalog *cat, Oid relid,
							   const FenceRegistration *reg, Oid *where);
extern char *fence_event_triggers_broken(Oid nspid);

/* audit_log.c */
extern void fence_audit_log_append(FenceCatalog *cat, const char *action, Oid relid,
						const char *relname, const char *detail,
						const char *reason);

/* xact.c */

/*
 * The generation of a token no registry vouches for (fence_begin_fresh):
 * it stays validated whatever the catalog does.  Catalog generations start
 * at 1.
 */
#define FENCE_ANY_GENERATION 0

extern void fence_xact_allow_ddl(Oid relid);
extern bool fence_xact_ddl_allowed(Oid relid);
extern bool fence_xact_setting_recorded(Oid relid);
extern void fence_xact_note_setting_recorded(Oid relid);
extern void fence_xact_note_issued(int64 token, const char *job);
extern bool fence_xact_issued_in_statement(int64 token, const char **job);
extern void fence_xact_init(void);
extern void fence_xact_note_lock(void);
extern bool fence_xact_token_validated(int64 token, uint64 generation,
									   const char **job);
extern void fence_xact_remember_token(int64 token, uint64 generation,
									  const char *job);
extern void fence_xact_forget_token(int64 token);
extern void fence_xact_bind(const char *job, int64 token);
extern int64 fence_xact_bound_token(const char **job);
extern int64 fence_xact_statement_binding(const char **job,
										  int64 *late_token,
										  const char **late_job);
extern void fence_xact_note_update(Oid relid, ItemPointer tid, int64 token);
extern int64 fence_xact_moving_row_token(Oid relid, ItemPointer tid);

/* citus.c */
extern void fence_refuse_on_citus_worker(const char *fn);
extern bool fence_citus_table(Oid relid);

#endif							/* FENCE_H */
