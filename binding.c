/*-------------------------------------------------------------------------
 *
 * binding.c
 *	  The session binding: fence_begin() and fence_begin_fresh() bind a
 *	  token to the transaction, so that every write to a protected table
 *	  after them carries it.
 *
 * The token is checked and held by the token arbiter (token.c,
 * fence_hold_token) and kept, with savepoints, in the transaction's state
 * (xact.c, fence_xact_bind); the guard (guard.c) reads it from there.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "access/xact.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(fence_begin);
PG_FUNCTION_INFO_V1(fence_begin_fresh);

/*
 * fence_begin(job, token) returns void
 *
 * Bind the token to the transaction: every write to a protected table until
 * it ends carries the token, and no claim of the job can succeed meanwhile.
 * Every write, that is, of the statements that begin after this call: a
 * statement that calls fence_begin while it writes (from a WHEN clause, a
 * DEFAULT, a constraint, a policy, a CTE) was not written with the token,
 * and its own writes do not carry it (xact.c, fence_xact_statement_binding).
 *
 * Outside a transaction block the transaction is the statement's own, so
 * the binding ends with it.  That is right for a PL/pgSQL handler called
 * in autocommit, and a surprise for a driver in autocommit mode, whose next
 * statement then carries no token: warn, as PostgreSQL does for SET LOCAL.
 */
Datum
fence_begin(PG_FUNCTION_ARGS)
{
	char	   *job;
	int64		token;
	FenceCatalog *cat;

	fence_refuse_on_citus_worker("fence_begin");
	job = fence_job_arg(fcinfo, 0);
	token = fence_token_arg(fcinfo, 1);
	cat = fence_catalog(fcinfo->flinfo->fn_oid);

	/*
	 * A trigger that binds a token vouches for the statement that fired it,
	 * which it cannot: that statement was not written with the token.
	 */
	if (fence_trigger_depth() > 0)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
				 errmsg("fence_begin cannot be called from a trigger"),
				 errdetail("A binding made by a trigger would cover the statement that fired it, which no token vouched for."),
				 errhint("Call fence_begin in the transaction before the statements that write; a trigger may call fence_claim and fence_renew.")));

	fence_hold_token(cat, token, job);
	fence_xact_bind(job, token);

	if (!IsTransactionBlock())
		ereport(WARNING,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fence_begin outside a transaction block binds the token for this statement only"),
				 errdetail("The binding of token " INT64_FORMAT " of job \"%s\" ends when this statement's transaction ends.",
						   token, job),
				 errhint("Call fence_begin after BEGIN, in the transaction that makes the writes.")));
	PG_RETURN_VOID();
}

/*
 * fence_begin_fresh(reason) returns bigint
 *
 * The sanctioned path for a writer that is not a job (the web application,
 * an admin fix, a cron script, a migration): a new token from the counter,
 * newer than every token issued before it, bound to this transaction as
 * fence_begin binds one.  No claim holds it, so no other transaction can
 * present it as current (5F001); this one holds it until it ends.  In
 * strict and repeat mode the fresh writer is the newest writer: a stale
 * execution writing a row after it is fenced (5F002).  With a reason, the
 * call is recorded in fence_audit_log.  As with fence_begin, the binding
 * covers the statements that begin after the call, not the one making it.
 */
Datum
fence_begin_fresh(PG_FUNCTION_ARGS)
{
	FenceCatalog *cat;
	char	   *reason;
	int64		token;

	fence_refuse_on_citus_worker("fence_begin_fresh");
	cat = fence_catalog(fcinfo->flinfo->fn_oid);
	reason = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));

	if (reason != NULL && reason[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be empty"),
				 errdetail("Pass NULL to record nothing; a reason is kept in fence_audit_log.")));
	if (fence_trigger_depth() > 0)
		ereport(ERROR,
				(errcode(fence_refused(ERRCODE_FENCE_OPERATION_REFUSED)),
				 errmsg("fence_begin_fresh cannot be called from a trigger"),
				 errdetail("A binding made by a trigger would cover the statement that fired it, which no token vouched for."),
				 errhint("Call fence_begin_fresh in the transaction before the statements that write.")));

	token = claims_issue_token(cat, NULL);
	/* As fence_begin: PREPARE TRANSACTION is refused from here on. */
	fence_xact_note_lock();
	fence_xact_remember_token(token, FENCE_ANY_GENERATION, NULL);
	fence_xact_bind(NULL, token);
	if (reason != NULL)
		fence_audit_log_append(cat, "begin_fresh", InvalidOid, NULL,
							   psprintf("token " INT64_FORMAT, token), reason);

	if (!IsTransactionBlock())
		ereport(WARNING,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("fence_begin_fresh outside a transaction block binds the token for this statement only"),
				 errhint("Call fence_begin_fresh after BEGIN, in the transaction that makes the writes.")));
	PG_RETURN_INT64(token);
}
