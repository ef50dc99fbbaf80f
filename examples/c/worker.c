/*-------------------------------------------------------------------------
 *
 * worker.c
 *		A fence job worker in C with libpq: the job "count:ID" adds one to the
 *		row ID of the protected table counters (examples/schema.sql).
 *
 *		worker ID [LEASE_SECONDS [WORK_SECONDS]]
 *
 * The loop: fence_claim the job (NULL: someone holds it, try again later);
 * read the counter; work for WORK_SECONDS, renewing the lease with
 * fence_renew every third of it; then, in one transaction, fence_begin and
 * write the new value; then fence_release.  An error of SQLSTATE class 5F
 * means this execution was fenced: a newer one owns the job or the row.  It
 * ends the job at once, without a retry, because the same token would be
 * fenced again.  Any other error (a lost connection, a timeout, a
 * serialization failure) is retried from the claim, a few times.
 *
 * Connection settings come from the environment (PGHOST, PGPORT,
 * PGDATABASE, ...), as for psql.  Output is one line per step, for people
 * and for test/checks/examples.sh: claimed, read, renewed, wrote, released,
 * and "fenced SQLSTATE message" for a fenced execution.  Exit status: 0 done,
 * 3 fenced, 1 gave up.
 *
 * FENCE_EXAMPLE_STOP_BEFORE_WRITE=1 in the environment makes the worker stop
 * itself with SIGSTOP just before the write transaction, where a GC pause or
 * a VM migration hurts most; a test thaws it with SIGCONT.
 *
 * Build: cc -Wall -o worker worker.c -I$(pg_config --includedir) -lpq
 * (or make).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

/* what one attempt of the job came to */
typedef enum
{
	JOB_DONE,					/* written (and released) */
	JOB_HELD,					/* fence_claim returned NULL */
	JOB_FENCED,					/* SQLSTATE class 5F: end the job, no retry */
	JOB_RETRY,					/* anything else: try the job again */
	JOB_FAILED					/* no such counter: retrying cannot help */
} JobResult;

#define MAX_ATTEMPTS	5		/* attempts after an error that is retryable */
#define HELD_WAIT_SECONDS	60	/* how long to keep trying a held job */

static void
sleep_seconds(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t) s;
	ts.tv_nsec = (long) ((s - (double) ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* a number of seconds from the command line: > 0 for a lease, >= 0 for work */
static int
parse_seconds(const char *s, double *out)
{
	char	   *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno == 0 && end != s && *end == '\0' && *out >= 0;
}

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/*
 * Classify a failed result: class 5F is "fenced", everything else (including
 * a lost connection, which has no SQLSTATE) is worth retrying.
 */
static JobResult
classify(PGconn *conn, PGresult *res, const char *step)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if (msg == NULL)
		msg = PQerrorMessage(conn);
	if (state != NULL && strncmp(state, "5F", 2) == 0)
	{
		printf("fenced %s at %s: %s\n", state, step, msg);
		return JOB_FENCED;
	}
	printf("retryable %s at %s: %s\n", state ? state : "(no SQLSTATE)", step, msg);
	return JOB_RETRY;
}

/*
 * Run a statement with text parameters; returns the result if it has the
 * status wanted, else classifies the error into *result and returns NULL.
 */
static PGresult *
run(PGconn *conn, const char *step, const char *sql, int nparams,
	const char *const *params, ExecStatusType want, JobResult *result)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (res != NULL && PQresultStatus(res) == want)
		return res;
	*result = classify(conn, res, step);
	PQclear(res);
	return NULL;
}

/* One attempt: claim, read, work (renewing), write under fence_begin, release. */
static JobResult
run_job(PGconn *conn, const char *id, const char *job, const char *lease,
		double lease_seconds, double work)
{
	JobResult	result = JOB_RETRY;
	PGresult   *res;
	char		token[32];
	long long	old;
	double		deadline;
	double		every;

	{
		const char *p[3] = {job, lease, "c-worker"};

		res = run(conn, "claim", "SELECT fence_claim($1, make_interval(secs => $2), $3)",
				  3, p, PGRES_TUPLES_OK, &result);
		if (res == NULL)
			return result;
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			return JOB_HELD;
		}
		snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		printf("claimed %s token %s\n", job, token);
	}

	{
		const char *p[1] = {id};

		res = run(conn, "read", "SELECT value FROM counters WHERE id = $1",
				  1, p, PGRES_TUPLES_OK, &result);
		if (res == NULL)
			goto give_back;
		if (PQntuples(res) != 1)
		{
			printf("no counter %s\n", id);
			PQclear(res);
			result = JOB_FAILED;
			goto give_back;
		}
		old = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
		printf("read %lld\n", old);
	}

	/* the handler's work; a long one renews the lease every third of it */
	every = lease_seconds / 3;
	deadline = now_seconds() + work;
	while (now_seconds() < deadline)
	{
		const char *p[3] = {job, token, lease};

		sleep_seconds(deadline - now_seconds() < every ? deadline - now_seconds() : every);
		if (now_seconds() >= deadline)
			break;
		res = run(conn, "renew", "SELECT fence_renew($1, $2, make_interval(secs => $3))",
				  3, p, PGRES_TUPLES_OK, &result);
		if (res == NULL)
			goto give_back;
		printf("renewed until %s\n", PQgetvalue(res, 0, 0));
		PQclear(res);
	}

	if (getenv("FENCE_EXAMPLE_STOP_BEFORE_WRITE") != NULL)
	{
		printf("stopping before the write\n");
		fflush(stdout);
		raise(SIGSTOP);
	}

	/* the write: fence_begin binds the token, the guard checks every row */
	{
		char		newval[32];
		const char *pb[2] = {job, token};
		const char *pu[2];

		snprintf(newval, sizeof(newval), "%lld", old + 1);
		pu[0] = newval;
		pu[1] = id;
		res = run(conn, "begin", "BEGIN", 0, NULL, PGRES_COMMAND_OK, &result);
		if (res == NULL)
			goto give_back;
		PQclear(res);
		res = run(conn, "fence_begin", "SELECT fence_begin($1, $2)", 2, pb,
				  PGRES_TUPLES_OK, &result);
		if (res != NULL)
		{
			PQclear(res);
			res = run(conn, "write", "UPDATE counters SET value = $1 WHERE id = $2",
					  2, pu, PGRES_COMMAND_OK, &result);
		}
		if (res != NULL)
		{
			PQclear(res);
			res = run(conn, "commit", "COMMIT", 0, NULL, PGRES_COMMAND_OK, &result);
		}
		if (res == NULL)
		{
			PQclear(PQexec(conn, "ROLLBACK"));
			goto give_back;
		}
		PQclear(res);
		printf("wrote %s token %s\n", newval, token);
	}

	{
		const char *p[2] = {job, token};

		res = PQexecParams(conn, "SELECT fence_release($1, $2)", 2, NULL, p, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			printf("released %s\n", strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? "true" : "false");
		else
			printf("release failed (the lease runs out by itself): %s", PQerrorMessage(conn));
		PQclear(res);
	}
	return JOB_DONE;

give_back:
	/*
	 * Before a retry, give the claim back so the next attempt (ours or
	 * another worker's) need not wait for the lease.  Not after a fence: the
	 * claim is no longer ours.
	 */
	if (result != JOB_FENCED && PQstatus(conn) == CONNECTION_OK)
	{
		const char *p[2] = {job, token};

		PQclear(PQexecParams(conn, "SELECT fence_release($1, $2)", 2, NULL, p, NULL, NULL, 0));
	}
	return result;
}

int
main(int argc, char **argv)
{
	const char *id;
	const char *lease;
	double		lease_seconds;
	double		work = 0.5;
	char		job[256];
	PGconn	   *conn = NULL;
	int			attempts = 0;
	int			said_held = 0;
	double		held_until;

	if (argc < 2 || argc > 4)
	{
		fprintf(stderr, "usage: %s ID [LEASE_SECONDS [WORK_SECONDS]]\n", argv[0]);
		return 2;
	}
	id = argv[1];
	lease = argc > 2 ? argv[2] : "30";
	if (!parse_seconds(lease, &lease_seconds) || lease_seconds <= 0 ||
		(argc > 3 && !parse_seconds(argv[3], &work)))
	{
		fprintf(stderr, "%s: LEASE_SECONDS must be > 0 and WORK_SECONDS >= 0\n", argv[0]);
		return 2;
	}
	snprintf(job, sizeof(job), "count:%s", id);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("worker pid %d job %s lease %ss\n", (int) getpid(), job, lease);

	held_until = now_seconds() + HELD_WAIT_SECONDS;
	for (;;)
	{
		JobResult	r;

		if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		{
			PQfinish(conn);
			conn = PQconnectdb("application_name=fence-example-c");
			if (PQstatus(conn) != CONNECTION_OK)
			{
				printf("retryable connect: %s", PQerrorMessage(conn));
				r = JOB_RETRY;
				goto next;
			}
		}
		r = run_job(conn, id, job, lease, lease_seconds, work);
		if (r == JOB_DONE || r == JOB_FENCED || r == JOB_FAILED)
		{
			PQfinish(conn);
			return r == JOB_DONE ? 0 : r == JOB_FENCED ? 3 : 1;
		}
next:
		if (r == JOB_HELD)
		{
			if (!said_held)
				printf("held: %s is claimed by another worker; trying again\n", job);
			said_held = 1;
			if (now_seconds() > held_until)
			{
				printf("gave up: %s stayed held\n", job);
				break;
			}
			sleep_seconds(0.2);
			continue;
		}
		if (++attempts >= MAX_ATTEMPTS)
		{
			printf("gave up after %d attempts\n", attempts);
			break;
		}
		sleep_seconds(0.5 * attempts);
	}
	PQfinish(conn);
	return 1;
}
