/*-------------------------------------------------------------------------
 *
 * audit_log.c
 *	  The audit log, fence_audit_log: every change to protection, and every
 *	  DDL that a declaration let through, leaves a row, written in the same
 *	  transaction as the change (so a rolled-back change leaves none).
 *
 * The row is written as the log's owner: no caller may write it directly.
 * The role recorded is the one that made the change (current_user when it
 * happened), not the owner.
 *
 * Copyright (c) 2026, the fence authors
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"

#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

/*
 * Append a row: action, the relation (by OID, or by name when it is
 * already gone), a detail and a reason (either may be NULL).
 */
void
fence_audit_log_append(FenceCatalog *cat, const char *action, Oid relid,
					   const char *relname, const char *detail, const char *reason)
{
	const char *args[5];
	char	   *sql;

	args[0] = GetUserNameFromId(GetUserId(), false);
	args[1] = action;
	args[2] = relname ? relname :
		(OidIsValid(relid) ? fence_rel_query_name(relid) : NULL);
	args[3] = detail;
	args[4] = reason;

	sql = psprintf("INSERT INTO %s (role, action, relation, detail, reason)"
				   " VALUES ($1::pg_catalog.name, $2, $3, $4, $5)",
				   quote_qualified_identifier(cat->nspname, "fence_audit_log"));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence_spi_as_owner(cat, "fence_audit_log", sql, 5, args);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}
