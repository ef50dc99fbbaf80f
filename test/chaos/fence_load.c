/*-------------------------------------------------------------------------
 *
 * fence_load.c
 *	  Load generator for fence's fault tests (t/002_chaos.pl, t/003_crash.pl).
 *
 * One process is one worker: a real libpq client that the test can freeze
 * with SIGSTOP.  Two modes:
 *
 *	chaos	the seed's worker loop against counters and a report table:
 *			claim a job, read its counter, think, then write counter+1 and
 *			append a report line carrying the token (fence_begin or the epoch
 *			in the statement), and log the accepted write in the same
 *			transaction.  With -u the same loop runs against unprotected
 *			copies without any token on the write: the control run.
 *
 *	crash	claims and guarded writes while the test stops the server in
 *			immediate mode; every token received and every acknowledged
 *			commit is appended to a log file at once, so the test can check
 *			them against the server after the restart.  With -s the tables
 *			are counters<suffix> and ledger<suffix>.
 *
 * -a: the tables are protected in the after form of the guard, which does
 * not stamp UPDATEs: every UPDATE writes its token into writer_epoch, also
 * under fence_begin (without -a, that UPDATE relies on the guard's stamp).
 *
 * Build: cc -O2 -I$(pg_config --includedir) fence_load.c -L$(pg_config --libdir) -lpq
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

/* options */
static const char *conninfo = "";
static int	worker_id = 0;
static int	njobs = 100;
static const char *prefix = "job-";
static const char *suffix = "";
static int	unprotected = 0;
static int	after_form = 0;
static double run_seconds = 10;
static int	lease_ms = 300;
static unsigned int seed = 0;
static const char *logpath = NULL;
static char kind = 'c';

/* state */
static PGconn *conn = NULL;
static volatile sig_atomic_t stop_requested = 0;
static char last_state[6];		/* SQLSTATE of the last failed command */
static char last_msg[512];
static int	conn_lost = 0;		/* the last failure was a lost connection */
static int	logfd = -1;
static unsigned int rng;

/* counters printed at the end */
static long n_claims, n_busy, n_writes, n_fenced, n_f001, n_f002, n_fother,
			n_other, n_reconnects, n_released, n_release_refused, n_pauses;

static void
on_term(int signo)
{
	(void) signo;
	stop_requested = 1;
}

static double
now_s(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

static unsigned int
rnd(unsigned int n)
{
	/* xorshift32: reproducible per worker, no shared state */
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return n ? rng % n : 0;
}

static void
sleep_ms(int ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long) (ms % 1000) * 1000000L;
	/* a SIGSTOP/SIGCONT may interrupt it; finish the rest */
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void
logline(const char *fmt,...)
{
	char		buf[512];
	va_list		ap;
	int			len;

	if (logfd < 0)
		return;
	va_start(ap, fmt);
	len = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* one write(2) per line: it is in the kernel before we go on */
	if (write(logfd, buf, len) != len)
	{
		perror("write log");
		exit(2);
	}
}

/* a number from the server or the command line; anything else is fatal */
static long long
to_ll(const char *s)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
	{
		fprintf(stderr, "fence_load: not a number: \"%s\"\n", s);
		exit(2);
	}
	return v;
}

static int
connect_db(void)
{
	if (conn)
		PQfinish(conn);
	conn = PQconnectdb(conninfo);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		snprintf(last_msg, sizeof(last_msg), "%s", PQerrorMessage(conn));
		return 0;
	}
	return 1;
}

/*
 * Run one command with text parameters.  Returns the result on success
 * (caller clears it), NULL on failure with last_state/last_msg/conn_lost set.
 */
static PGresult *
run(const char *sql, int nparams, const char *const *params)
{
	PGresult   *res;
	ExecStatusType st;
	const char *s;

	conn_lost = 0;
	last_state[0] = '\0';
	last_msg[0] = '\0';
	res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return res;
	s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	snprintf(last_state, sizeof(last_state), "%s", s ? s : "");
	snprintf(last_msg, sizeof(last_msg), "%s",
			 res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
	if (PQstatus(conn) != CONNECTION_OK || s == NULL ||
		strncmp(last_state, "08", 2) == 0 || strncmp(last_state, "57P", 3) == 0 ||
		strcmp(last_state, "25P03") == 0)
		conn_lost = 1;
	PQclear(res);
	return NULL;
}

/* run, and discard the result; true on success */
static int
run_ok(const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = run(sql, nparams, params);

	if (!res)
		return 0;
	PQclear(res);
	return 1;
}

static void
rollback_quietly(void)
{
	if (!conn_lost)
		run_ok("ROLLBACK", 0, NULL);
}

static void
note_other_error(const char *stage)
{
	n_other++;
	if (n_other <= 20)
		fprintf(stderr, "worker %d: %s: %s %s", worker_id, stage, last_state, last_msg);
}

/* reconnect until it works or the run is over */
static void
reconnect(void)
{
	n_reconnects++;
	while (!stop_requested && now_s() < run_seconds)
	{
		if (connect_db())
			return;
		sleep_ms(100);
	}
}

/*-------------------------------------------------------------------------
 * chaos mode
 *-------------------------------------------------------------------------
 */
static void
chaos_iteration(void)
{
	char		job[128], sql[1024], sjob[32], stok[32], sval[32], sworker[32],
				slease[64], sholder[64], sstyle[8], sread[32];
	const char *p[8];
	PGresult   *res;
	long long	token;
	long		nread;
	int			idx = -1;
	int			style;

	snprintf(sworker, sizeof(sworker), "%d", worker_id);

	/*
	 * Pick a job.  Half the time take one whose lease ran out without a
	 * release, as a queue redelivers it: that is where takeovers happen.
	 */
	if (rnd(2) == 0)
	{
		char		pat[140];

		snprintf(pat, sizeof(pat), "%s%%", prefix);
		p[0] = pat;
		res = run("SELECT job FROM fence_claims WHERE job LIKE $1 AND NOT released"
				  " AND lease_expires_at < clock_timestamp() ORDER BY random() LIMIT 1",
				  1, p);
		if (!res)
		{
			if (conn_lost)
				reconnect();
			else
				note_other_error("pick");
			return;
		}
		if (PQntuples(res) == 1)
			idx = (int) to_ll(PQgetvalue(res, 0, 0) + strlen(prefix));
		PQclear(res);
	}
	if (idx < 1 || idx > njobs)
		idx = 1 + rnd(njobs);
	snprintf(job, sizeof(job), "%s%d", prefix, idx);
	snprintf(sjob, sizeof(sjob), "%d", idx);

	/* claim: the claim and its log row commit together */
	snprintf(slease, sizeof(slease), "%d milliseconds", lease_ms);
	snprintf(sholder, sizeof(sholder), "worker-%d", worker_id);
	p[0] = job;
	p[1] = sworker;
	p[2] = slease;
	p[3] = sholder;
	res = run("INSERT INTO claim_log(job, token, worker)"
			  " SELECT $1, t, $2 FROM fence_claim($1, $3::interval, $4) AS t"
			  " WHERE t IS NOT NULL RETURNING token", 4, p);
	if (!res)
	{
		if (conn_lost)
			reconnect();
		else
			note_other_error("claim");
		return;
	}
	if (PQntuples(res) != 1)
	{
		PQclear(res);
		n_busy++;
		sleep_ms(rnd(5));
		return;
	}
	token = to_ll(PQgetvalue(res, 0, 0));
	PQclear(res);
	n_claims++;
	snprintf(stok, sizeof(stok), "%lld", token);

	/* read the counter, outside any transaction: the seed's handler */
	p[0] = sjob;
	snprintf(sql, sizeof(sql), "SELECT n FROM counters%s WHERE id = $1", suffix);
	res = run(sql, 1, p);
	if (!res)
	{
		if (conn_lost)
			reconnect();
		else
			note_other_error("read");
		return;
	}
	if (PQntuples(res) != 1)
	{
		fprintf(stderr, "worker %d: counter %d missing\n", worker_id, idx);
		PQclear(res);
		exit(3);
	}
	nread = (long) to_ll(PQgetvalue(res, 0, 0));
	PQclear(res);

	/* think; now and then a pause longer than the lease (a GC pause) */
	if (rnd(10) == 0)
	{
		n_pauses++;
		sleep_ms(lease_ms + lease_ms / 2);
	}
	else
		sleep_ms(rnd(lease_ms / 4 + 1));

	/* write: counter+1, a report line, and the log of the accepted write */
	style = unprotected ? 2 : (int) rnd(2);
	snprintf(sval, sizeof(sval), "%ld", nread + 1);
	snprintf(sread, sizeof(sread), "%ld", nread);
	snprintf(sstyle, sizeof(sstyle), "%d", style);

	if (!run_ok("BEGIN", 0, NULL))
		goto write_failed;
	if (style == 0)
	{
		p[0] = job;
		p[1] = stok;
		if (!run_ok("SELECT fence_begin($1, $2)", 2, p))
			goto write_failed;
		/* the guard stamps the row; the after form needs the token written */
		snprintf(sql, sizeof(sql),
				 after_form ? "UPDATE counters%s SET n = $1, writer_epoch = $3 WHERE id = $2"
				 : "UPDATE counters%s SET n = $1 WHERE id = $2", suffix);
		p[0] = sval;
		p[1] = sjob;
		p[2] = stok;
		if (!run_ok(sql, after_form ? 3 : 2, p))
			goto write_failed;
	}
	else
	{
		/* the epoch rides on the write (style 1); control run: no guard */
		snprintf(sql, sizeof(sql),
				 "UPDATE counters%s SET n = $1, writer_epoch = $3 WHERE id = $2",
				 suffix);
		p[0] = sval;
		p[1] = sjob;
		p[2] = stok;
		if (!run_ok(sql, 3, p))
			goto write_failed;
	}
	snprintf(sql, sizeof(sql),
			 "INSERT INTO acc_log%s(job, counter, n_read, n_written, token, worker, style)"
			 " VALUES ($1, $2, $3, $4, $5, $6, $7)", suffix);
	p[0] = job;
	p[1] = sjob;
	p[2] = sread;
	p[3] = sval;
	p[4] = stok;
	p[5] = sworker;
	p[6] = sstyle;
	if (!run_ok(sql, 7, p))
		goto write_failed;
	snprintf(sql, sizeof(sql),
			 "INSERT INTO report%s(job, token, worker, line, writer_epoch)"
			 " VALUES ($1, $2, $3, $4, $5)", suffix);
	p[0] = job;
	p[1] = stok;
	p[2] = sworker;
	p[3] = sval;
	p[4] = (style == 0) ? "0" : stok;
	if (!run_ok(sql, 5, p))
		goto write_failed;
	if (rnd(4) == 0)
		sleep_ms(rnd(lease_ms / 10 + 1));	/* sometimes frozen mid-transaction */
	if (!run_ok("COMMIT", 0, NULL))
		goto write_failed;
	n_writes++;

	/* conditional acknowledgement; sometimes "crash" and let the lease run out */
	if (rnd(5) != 0)
	{
		p[0] = job;
		p[1] = stok;
		res = run("INSERT INTO release_log(job, token)"
				  " SELECT $1, $2 WHERE fence_release($1, $2) RETURNING 1", 2, p);
		if (!res)
		{
			if (conn_lost)
				reconnect();
			else
				note_other_error("release");
			return;
		}
		if (PQntuples(res) == 1)
			n_released++;
		else
			n_release_refused++;
		PQclear(res);
	}
	return;

write_failed:
	if (conn_lost)
	{
		/* e.g. idle_in_transaction_session_timeout ended a frozen worker */
		reconnect();
		return;
	}
	if (strncmp(last_state, "5F", 2) == 0)
	{
		char		state[6];

		memcpy(state, last_state, sizeof(state));
		n_fenced++;
		if (strcmp(state, "5F001") == 0)
			n_f001++;
		else if (strcmp(state, "5F002") == 0)
			n_f002++;
		else
		{
			n_fother++;
			if (n_fother <= 20)
				fprintf(stderr, "worker %d: unexpected %s", worker_id, last_msg);
		}
		rollback_quietly();
		p[0] = job;
		p[1] = stok;
		p[2] = sworker;
		p[3] = state;
		if (!conn_lost &&
			!run_ok("INSERT INTO fenced_log(job, token, worker, sqlstate)"
					" VALUES ($1, $2, $3, $4)", 4, p))
			note_other_error("fenced_log");
		return;
	}
	note_other_error("write");
	rollback_quietly();
}

/*-------------------------------------------------------------------------
 * crash mode
 *-------------------------------------------------------------------------
 */
static int
crash_iteration(long *seq)
{
	char		job[128], sjob[32], stok[32], slease[64], sseq[32], sclient[32],
				skind[2], sql[256];
	const char *p[6];
	PGresult   *res;
	long long	token;
	int			idx = 1 + rnd(njobs);

	snprintf(job, sizeof(job), "%s%d", prefix, idx);
	snprintf(sjob, sizeof(sjob), "%d", idx);
	snprintf(slease, sizeof(slease), "%d milliseconds", lease_ms);
	snprintf(sclient, sizeof(sclient), "%d", worker_id);
	skind[0] = kind;
	skind[1] = '\0';

	if (kind == 'u' && !run_ok("BEGIN", 0, NULL))
		return 0;
	p[0] = job;
	p[1] = slease;
	res = run("SELECT fence_claim($1, $2::interval)", 2, p);
	if (!res)
		return 0;
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		if (kind == 'u' && !run_ok("ROLLBACK", 0, NULL))
			return 0;
		n_busy++;
		sleep_ms(rnd(3));
		return 1;
	}
	token = to_ll(PQgetvalue(res, 0, 0));
	PQclear(res);
	n_claims++;
	/* the token is seen: record it before doing anything else */
	logline("T %c %s %lld %.6f\n", kind, job, token, now_s());
	snprintf(stok, sizeof(stok), "%lld", token);

	if (kind == 'u')
		sleep_ms(rnd(50));		/* hold the claim open, uncommitted */
	else if (!run_ok("BEGIN", 0, NULL))
		return 0;

	(*seq)++;
	snprintf(sseq, sizeof(sseq), "%ld", *seq);
	p[0] = job;
	p[1] = stok;
	if (!run_ok("SELECT fence_begin($1, $2)", 2, p))
		goto failed;
	p[0] = sjob;
	p[1] = stok;
	snprintf(sql, sizeof(sql),
			 after_form ? "UPDATE counters%s SET n = n + 1, writer_epoch = $2 WHERE id = $1"
			 : "UPDATE counters%s SET n = n + 1 WHERE id = $1", suffix);
	if (!run_ok(sql, after_form ? 2 : 1, p))
		goto failed;
	p[0] = sclient;
	p[1] = sseq;
	p[2] = job;
	p[3] = stok;
	p[4] = skind;
	snprintf(sql, sizeof(sql),
			 "INSERT INTO ledger%s(client, seq, job, token, kind)"
			 " VALUES ($1, $2, $3, $4, $5)", suffix);
	if (!run_ok(sql, 5, p))
		goto failed;
	logline("P %s %ld %c\n", sclient, *seq, kind);
	if (!run_ok("COMMIT", 0, NULL))
		goto failed;
	/* acknowledged */
	logline("C %s %ld %c %s %lld\n", sclient, *seq, kind, job, token);
	n_writes++;

	if (rnd(2) == 0)
	{
		p[0] = job;
		p[1] = stok;
		if (!run_ok("SELECT fence_release($1, $2)", 2, p))
			return 0;
		n_released++;
	}
	return 1;

failed:
	if (conn_lost)
		return 0;
	if (strncmp(last_state, "5F", 2) == 0)
		n_fenced++;
	else
		note_other_error("crash write");
	run_ok("ROLLBACK", 0, NULL);
	return !conn_lost;
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: fence_load chaos|crash -d conninfo [-w worker] [-j jobs] [-P prefix]\n"
			"       [-s table_suffix] [-u] [-a] [-t seconds] [-l lease_ms] [-r seed]\n"
			"       [-o logfile] [-k c|u|a]\n");
	exit(1);
}

int
main(int argc, char **argv)
{
	const char *mode;
	int			c;

	if (argc < 2)
		usage();
	mode = argv[1];
	optind = 2;
	while ((c = getopt(argc, argv, "d:w:j:P:s:uat:l:r:o:k:")) != -1)
	{
		switch (c)
		{
			case 'd': conninfo = optarg; break;
			case 'w': worker_id = (int) to_ll(optarg); break;
			case 'j': njobs = (int) to_ll(optarg); break;
			case 'P': prefix = optarg; break;
			case 's': suffix = optarg; break;
			case 'u': unprotected = 1; break;
			case 'a': after_form = 1; break;
			case 't': run_seconds = (double) to_ll(optarg); break;
			case 'l': lease_ms = (int) to_ll(optarg); break;
			case 'r': seed = (unsigned int) to_ll(optarg); break;
			case 'o': logpath = optarg; break;
			case 'k': kind = optarg[0]; break;
			default: usage();
		}
	}
	rng = seed * 2654435761u + (unsigned int) worker_id * 40503u + 1;
	if (rng == 0)
		rng = 1;
	signal(SIGTERM, on_term);
	signal(SIGPIPE, SIG_IGN);
	run_seconds += now_s();		/* from here on: the deadline */

	if (logpath)
	{
		logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (logfd < 0)
		{
			perror(logpath);
			return 2;
		}
	}

	if (!connect_db())
	{
		fprintf(stderr, "worker %d: cannot connect: %s", worker_id, last_msg);
		return 2;
	}

	if (strcmp(mode, "chaos") == 0)
	{
		while (!stop_requested && now_s() < run_seconds)
			chaos_iteration();
	}
	else if (strcmp(mode, "crash") == 0)
	{
		long		seq = 0;

		if (kind == 'a' && !run_ok("SET synchronous_commit = off", 0, NULL))
		{
			fprintf(stderr, "worker %d: %s", worker_id, last_msg);
			return 2;
		}
		/* runs until the server goes away (or the deadline) */
		while (!stop_requested && now_s() < run_seconds)
		{
			if (!crash_iteration(&seq))
			{
				if (conn_lost || PQstatus(conn) != CONNECTION_OK)
				{
					logline("L %d\n", worker_id);
					break;
				}
				note_other_error("crash");
				run_ok("ROLLBACK", 0, NULL);
			}
		}
	}
	else
		usage();

	printf("STATS worker=%d claims=%ld busy=%ld writes=%ld fenced=%ld f5F001=%ld"
		   " f5F002=%ld fother=%ld other=%ld reconnects=%ld released=%ld"
		   " release_refused=%ld pauses=%ld\n",
		   worker_id, n_claims, n_busy, n_writes, n_fenced, n_f001, n_f002,
		   n_fother, n_other, n_reconnects, n_released, n_release_refused,
		   n_pauses);
	fflush(stdout);
	PQfinish(conn);
	return 0;
}
