#!/usr/bin/python3
# test/patroni/workload.py: the workers and the verdict of test/checks/patroni.sh.
#
#   workload.py work --dsn DSN --worker N --log FILE --stop FILE [--jobs 4]
#                    [--lease 1.0] [--until EPOCH]
#   workload.py report --logs DIR --dsn DSN --label NAME [--sync]
#                    [--phases FILE]
#   workload.py members           (patronictl list -f json on stdin)
#
# Run it with Debian's /usr/bin/python3 and python3-psycopg.
#
# work: one worker, looping until the stop file exists (or --until).  Each
# iteration:
#   1. fence_claim a random job of job-1..job-N with a short lease, in one
#      autocommit statement that also records the claim in claim_log (so the
#      server's surviving history can be compared with the client's) and
#      returns inet_server_port() and the WAL timeline it was issued on.
#      Every token returned goes to the CLIENT-SIDE log (one JSON line per
#      event, flushed at once): the server's history can be lost.
#   2. reads the job's protected counter row and its unprotected twin;
#   3. pauses a random time up to 1.6 leases (so takeovers interleave);
#   4. protected read-modify-write: BEGIN; fence_begin(job, token); UPDATE
#      counter SET n = <read + 1>; INSERT INTO inc_log; COMMIT;
#   5. the same on the twin, without fence;
#   6. half the time fence_release, else the lease runs out.
# A read and its writes use one connection, so they lie on one server's
# history.  A broken connection does not end the execution: the worker
# reconnects (to the leader of the moment), reads again and writes with the
# same token, up to 20 s after the claim, as a real worker retrying its
# handler would: a token from a history that was lost is presented to the
# new leader.  A commit whose connection broke is logged "unknown" and not
# retried.
#
# report: reads every worker's log and the final leader's tables, prints one
# "ok     ..." or "FAILED ..." line per assertion and exits 0 only if all
# hold:
#   (1) no token returned twice (across all nodes and timelines); the
#       duplicates, per job and per (port, timeline);
#   (2) no stale write accepted: an acknowledged protected write whose
#       claim was not its job's newest acknowledged claim when the COMMIT
#       was sent.  Such a write that survived, superseded by a claim that
#       survived, is fence's failure; one that vanished with a failover, or
#       whose superseding claim vanished, is the replication's (reported);
#   (3) each protected counter equals the increments that survived
#       (inc_log rows on the final leader, written in the same transaction);
#       acknowledged increments that vanished are the replication's,
#       reported apart;
#   (4) the twin lost updates: its value is below its surviving increments
#       (acknowledged minus replication losses);
#   --sync: (5) no acknowledged commit vanished.
import argparse
import collections
import json
import os
import random
import sys
import time

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS fence;
CREATE TABLE counter (job text PRIMARY KEY, n int NOT NULL,
                      writer_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE twin (job text PRIMARY KEY, n int NOT NULL);
CREATE TABLE claim_log (cid text PRIMARY KEY, token bigint NOT NULL, job text NOT NULL,
                        port int NOT NULL, tl int NOT NULL);
CREATE TABLE inc_log (wid text PRIMARY KEY, kind char NOT NULL, job text NOT NULL,
                      token bigint NOT NULL);
INSERT INTO counter (job, n) SELECT 'job-' || g, 0 FROM generate_series(1, %(jobs)d) g;
INSERT INTO twin SELECT job, n FROM counter;
SELECT fence_protect('counter');
"""

TL_SQL = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"


def log_open(path):
	return open(path, "a", buffering=1, encoding="utf-8")


def emit(fh, **ev):
	ev["t"] = time.time()
	fh.write(json.dumps(ev, separators=(",", ":")) + "\n")
	fh.flush()


def sqlstate(exc):
	return getattr(exc, "sqlstate", None) or type(exc).__name__


def connect(psycopg, args, fh):
	try:
		return psycopg.connect(args.dsn, autocommit=True)
	except Exception as exc:  # noqa: BLE001 -- any failure: the caller tries again
		emit(fh, e="connfail", w=args.worker, err=(str(exc).splitlines() or [""])[0][:120])
		time.sleep(0.3)
		return None


def broken(conn):
	return conn is None or conn.closed or conn.broken


def work(args):
	import psycopg
	rnd = random.Random(args.worker * 7919 + os.getpid())
	jobs = ["job-%d" % i for i in range(1, args.jobs + 1)]
	lease = "%g seconds" % args.lease
	fh = log_open(args.log)
	conn = None
	it = 0
	emit(fh, e="start", w=args.worker)

	def running():
		return not os.path.exists(args.stop) and (args.until == 0 or time.time() < args.until)

	while running():
		if broken(conn):
			conn = connect(psycopg, args, fh)
			if conn is None:
				continue
		it += 1
		cid = "w%d-%d" % (args.worker, it)
		job = rnd.choice(jobs)
		try:
			t0 = time.time()
			row = conn.execute(
				"WITH c AS (SELECT fence_claim(%s, %s::interval, %s) AS t) "
				"INSERT INTO claim_log (cid, token, job, port, tl) "
				"SELECT %s, t, %s, inet_server_port(), " + TL_SQL + " FROM c WHERE t IS NOT NULL "
				"RETURNING token, port, tl",
				(job, lease, cid, cid, job)).fetchone()
		except Exception as exc:  # noqa: BLE001 -- a broken connection or a server error
			emit(fh, e="err", w=args.worker, cid=cid, stage="claim", st=sqlstate(exc),
				msg=(str(exc).splitlines() or [""])[0][:160])
			time.sleep(0.1)
			continue
		if row is None:
			emit(fh, e="held", w=args.worker, job=job)
			time.sleep(rnd.uniform(0.02, 0.15))
			continue
		token, port, tl = row
		emit(fh, e="claim", w=args.worker, cid=cid, job=job, tok=token, port=port, tl=tl, t0=t0)
		# The handler: read, pause, write the counter under the token and the
		# twin without it.  A broken connection does not end the execution:
		# like a real worker, it reconnects (to whichever node is the leader
		# now), reads again and writes with the same token, until 20 s after
		# the claim.  What was acknowledged (or may have been) is not redone.
		todo = ["p", "u"]
		give_up = time.time() + 20
		attempt = 0
		while todo and running() and time.time() < give_up:
			if broken(conn):
				conn = connect(psycopg, args, fh)
				if conn is None:
					continue
			attempt += 1
			stage = "read"
			try:
				wport, pn, un = conn.execute(
					"SELECT inet_server_port(), p.n, u.n FROM counter p JOIN twin u USING (job) WHERE job = %s",
					(job,)).fetchone()
				time.sleep(rnd.uniform(0, 1.6 * args.lease))
				for kind in list(todo):
					wid = "%s-%s" % (cid, kind)
					stage = "write-" + kind
					tb = time.time()
					try:
						conn.execute("BEGIN")
						if kind == "p":
							conn.execute("SELECT fence_begin(%s, %s)", (job, token))
							conn.execute("UPDATE counter SET n = %s WHERE job = %s", (pn + 1, job))
						else:
							conn.execute("UPDATE twin SET n = %s WHERE job = %s", (un + 1, job))
						conn.execute("INSERT INTO inc_log VALUES (%s, %s, %s, %s)", (wid, kind, job, token))
					except psycopg.Error as exc:
						if conn.broken:
							raise
						st = sqlstate(exc)
						fenced = bool(st) and st.startswith("5F")
						emit(fh, e="refused" if fenced else "werr", w=args.worker, cid=cid,
							wid=wid, kind=kind, job=job, tok=token, st=st, tb=tb, port=wport, attempt=attempt)
						conn.execute("ROLLBACK")
						if not fenced:
							# read-only after a demotion, a timeout: another connection, another try
							conn.close()
							raise
						todo.remove(kind)
						continue
					tc = time.time()
					try:
						conn.execute("COMMIT")
					except psycopg.Error as exc:
						todo.remove(kind)
						emit(fh, e="unknown", w=args.worker, cid=cid, wid=wid, kind=kind, job=job, tok=token,
							st=sqlstate(exc), tb=tb, tc=tc, port=wport, attempt=attempt)
						raise
					todo.remove(kind)
					emit(fh, e="ack", w=args.worker, cid=cid, wid=wid, kind=kind, job=job, tok=token,
						port=wport, tb=tb, tc=tc, attempt=attempt)
				if rnd.random() < 0.5:
					stage = "release"
					conn.execute("SELECT fence_release(%s, %s)", (job, token))
			except Exception as exc:  # noqa: BLE001 -- a broken connection or a server error
				emit(fh, e="err", w=args.worker, cid=cid, stage=stage, st=sqlstate(exc),
					msg=(str(exc).splitlines() or [""])[0][:160])
				try:
					if not broken(conn):
						conn.execute("ROLLBACK")
				except Exception:  # noqa: BLE001
					pass
				if conn is not None and conn.broken:
					try:
						conn.close()
					except Exception:  # noqa: BLE001
						pass
					conn = None
				time.sleep(0.1)
	emit(fh, e="stop", w=args.worker)
	if conn is not None:
		conn.close()


def read_logs(d):
	evs = []
	for name in sorted(os.listdir(d)):
		if name.startswith("worker-") and name.endswith(".log"):
			with open(os.path.join(d, name), encoding="utf-8") as fh:
				for line in fh:
					line = line.strip()
					if line:
						try:
							evs.append(json.loads(line))
						except ValueError:
							pass
	evs.sort(key=lambda e: e["t"])
	return evs


def phase_of(phases, t):
	name = "start"
	for p in phases:
		if p["t"] <= t:
			name = p["name"]
	return name


def report(args):
	import psycopg
	evs = read_logs(args.logs)
	phases = []
	if args.phases and os.path.exists(args.phases):
		with open(args.phases, encoding="utf-8") as fh:
			for line in fh:
				t, _, name = line.strip().partition(" ")
				if t:
					phases.append({"t": float(t), "name": name})
	with psycopg.connect(args.dsn, autocommit=True) as conn:
		counter = dict(conn.execute("SELECT job, n FROM counter").fetchall())
		twin = dict(conn.execute("SELECT job, n FROM twin").fetchall())
		surv_claims = {r[0] for r in conn.execute("SELECT cid FROM claim_log")}
		surv_inc = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT wid, kind, job FROM inc_log")}
		final = conn.execute("SELECT inet_server_port(), " + TL_SQL).fetchone()
	label = args.label
	fails = 0

	def ok(msg):
		print("ok     %s: %s" % (label, msg))

	def bad(msg):
		nonlocal fails
		fails += 1
		print("FAILED %s: %s" % (label, msg))

	claims = [e for e in evs if e["e"] == "claim"]
	acks = [e for e in evs if e["e"] == "ack"]
	refused = [e for e in evs if e["e"] == "refused"]
	unknown = [e for e in evs if e["e"] == "unknown"]
	by_state = collections.Counter(e.get("st") for e in refused)
	print("%s: %d tokens returned by %d workers on ports %s, timelines %s; %d writes acknowledged "
		"(%d protected, %d twin), %d refused by fence %s, %d with an unknown outcome; final leader port %d, timeline %d"
		% (label, len(claims), len({e["w"] for e in evs}),
			",".join(str(p) for p in sorted({e["port"] for e in claims})),
			",".join(str(t) for t in sorted({e["tl"] for e in claims})),
			len(acks), sum(1 for e in acks if e["kind"] == "p"), sum(1 for e in acks if e["kind"] == "u"),
			len(refused), dict(by_state), len(unknown), final[0], final[1]))
	per_phase = collections.OrderedDict()
	for e in claims:
		k = phase_of(phases, e["t"])
		per_phase.setdefault(k, collections.Counter())[(e["port"], e["tl"])] += 1
	for k, c in per_phase.items():
		print("  claims during %-22s %s" % (k + ":", ", ".join("port %d tl %d: %d" % (p, t, n)
			for (p, t), n in sorted(c.items()))))

	# (1) duplicates
	by_tok = collections.defaultdict(list)
	for e in claims:
		by_tok[e["tok"]].append(e)
	dups = {t: es for t, es in by_tok.items() if len(es) > 1}
	if not dups:
		ok("no token returned twice (%d tokens, %d (port, timeline) pairs)"
			% (len(claims), len({(e["port"], e["tl"]) for e in claims})))
	else:
		same_job = sum(1 for es in dups.values() if len({e["job"] for e in es}) < len(es))
		where = collections.Counter(tuple(sorted((e["port"], e["tl"]) for e in es)) for es in dups.values())
		bad("%d tokens returned twice (%d of them for the same job twice)" % (len(dups), same_job))
		for w, n in where.most_common():
			print("    %d duplicates issued by %s" % (n, " and ".join("port %d on timeline %d" % pt for pt in w)))
			tls = [pt[1] for pt in w]
			if len(set(tls)) < len(tls):
				print("    -> the same timeline number %d on two nodes: a reused timeline" % tls[0])
		for t in sorted(dups)[:12]:
			print("    token %d: %s" % (t, "; ".join("%s %s by worker %d on port %d tl %d (%s)"
				% (e["cid"], e["job"], e["w"], e["port"], e["tl"], phase_of(phases, e["t"])) for e in dups[t])))
		if len(dups) > 12:
			print("    ... %d more" % (len(dups) - 12))

	# (2) stale writes accepted
	claims_by_job = collections.defaultdict(list)
	for e in claims:
		claims_by_job[e["job"]].append(e)
	stale_fence, stale_repl = [], []
	for a in acks:
		if a["kind"] != "p":
			continue
		newest = None
		for c in claims_by_job[a["job"]]:
			if c["t"] < a["tc"]:
				newest = c
		if newest is None or newest["cid"] == a["cid"]:
			continue
		if a["wid"] in surv_inc and newest["cid"] in surv_claims:
			stale_fence.append((a, newest))
		else:
			stale_repl.append((a, newest))
	if stale_repl:
		print("  %d stale writes were acknowledged where the write or the claim that superseded it vanished "
			"with a failover (the replication's, not fence's): %s"
			% (len(stale_repl), ", ".join("%s (%s)" % (a["wid"], phase_of(phases, a["t"])) for a, _ in stale_repl[:8])))
	if not stale_fence:
		ok("no stale write accepted after a takeover (%d protected writes acknowledged, %d refused)"
			% (sum(1 for e in acks if e["kind"] == "p"), len(refused)))
	else:
		bad("%d stale writes accepted: a protected write committed after its job had a newer acknowledged claim"
			% len(stale_fence))
		for a, c in stale_fence[:10]:
			print("    %s token %d of %s committed %.2fs after %s's claim of it with token %d (port %d tl %d) [%s]"
				% (a["wid"], a["tok"], a["job"], a["tc"] - c["t"], c["cid"], c["tok"], c["port"], c["tl"],
					phase_of(phases, a["t"])))

	moved = collections.Counter()
	cl_by_id = {e["cid"]: e for e in claims}
	for e in evs:
		if e["e"] in ("ack", "refused") and e.get("kind") == "p" and e.get("port") != cl_by_id[e["cid"]]["port"]:
			moved[e["e"]] += 1
	print("  protected writes retried on another node with the token of the first: %d acknowledged, %d refused"
		% (moved["ack"], moved["refused"]))

	# (3) the protected counter, (4) the twin
	acked = {e["wid"]: e for e in acks}
	lost = collections.Counter()
	lost_phase = collections.Counter()
	for wid, e in acked.items():
		if wid not in surv_inc:
			lost[e["kind"]] += 1
			lost_phase[phase_of(phases, e["t"])] += 1
	lost_claims = sum(1 for e in claims if e["cid"] not in surv_claims)
	unacked_surv = sum(1 for wid in surv_inc if wid not in acked)
	print("  replication losses: %d acknowledged protected increments, %d twin increments and %d acknowledged "
		"claims vanished with failovers%s; %d surviving increments had an unknown outcome"
		% (lost["p"], lost["u"], lost_claims,
			(" (" + ", ".join("%s: %d" % kv for kv in lost_phase.items()) + ")") if lost_phase else "",
			unacked_surv))
	surv = {"p": collections.Counter(), "u": collections.Counter()}
	for kind, job in surv_inc.values():
		surv[kind][job] += 1
	mism = [(j, counter.get(j), surv["p"][j]) for j in sorted(counter) if counter.get(j) != surv["p"][j]]
	acked_p = sum(1 for e in acks if e["kind"] == "p")
	unknown_p = sum(1 for w, (k, _) in surv_inc.items() if w not in acked and k == "p")
	if not mism:
		ok("each protected counter equals its surviving increments (total %d = %d acknowledged - %d lost "
			"with replication + %d of unknown outcome)" % (sum(counter.values()), acked_p, lost["p"], unknown_p))
	else:
		bad("protected counters differ from their surviving increments: %s"
			% ", ".join("%s n=%s, increments %d" % m for m in mism))
	acked_u = sum(1 for e in acks if e["kind"] == "u")
	surv_u = sum(surv["u"].values())
	tw = sum(twin.values())
	if acked_u - tw > lost["u"] and tw < surv_u:
		ok("the unprotected twin lost updates: %d, below its %d acknowledged increments by %d, more than "
			"the %d replication lost (%d surviving increments)" % (tw, acked_u, acked_u - tw, lost["u"], surv_u))
	else:
		bad("the unprotected twin shows no lost update: %d, %d acknowledged, %d lost with replication, %d surviving"
			% (tw, acked_u, lost["u"], surv_u))
	if args.sync:
		nl = lost["p"] + lost["u"] + lost_claims
		if nl == 0:
			ok("synchronous_mode: no acknowledged commit vanished (%d claims, %d writes)" % (len(claims), len(acks)))
		else:
			bad("synchronous_mode: %d acknowledged commits vanished" % nl)
	return 1 if fails else 0


def members(_args):
	data = json.load(sys.stdin)
	for m in data:
		print("%s %s %s %s" % (m.get("Member"), (m.get("Role") or "").replace(" ", "_"),
			(m.get("State") or "").replace(" ", "_"), m.get("TL", "-")))
	return 0


def main():
	ap = argparse.ArgumentParser()
	sub = ap.add_subparsers(dest="cmd", required=True)
	w = sub.add_parser("work")
	w.add_argument("--dsn", required=True)
	w.add_argument("--worker", type=int, required=True)
	w.add_argument("--log", required=True)
	w.add_argument("--stop", required=True)
	w.add_argument("--jobs", type=int, default=4)
	w.add_argument("--lease", type=float, default=1.0)
	w.add_argument("--until", type=float, default=0)
	r = sub.add_parser("report")
	r.add_argument("--logs", required=True)
	r.add_argument("--dsn", required=True)
	r.add_argument("--label", required=True)
	r.add_argument("--phases")
	r.add_argument("--sync", action="store_true")
	sub.add_parser("members")
	sc = sub.add_parser("schema")
	sc.add_argument("--jobs", type=int, default=4)
	args = ap.parse_args()
	if args.cmd == "work":
		work(args)
		return 0
	if args.cmd == "report":
		return report(args)
	if args.cmd == "schema":
		print(SCHEMA % {"jobs": args.jobs})
		return 0
	return members(args)


if __name__ == "__main__":
	sys.exit(main())
