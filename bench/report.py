#!/usr/bin/env python3
"""bench/report.py: turn bench/run's raw results into the tables it prints.

  report.py pct LOGFILE...   p50 and p99 latency (ms) of pgbench --log files
  report.py report OUTDIR    the markdown report of OUTDIR/results.tsv,
                             OUTDIR/wal.tsv, OUTDIR/memory.tsv and
                             OUTDIR/meta.txt

Only the standard library: CI machines have python3 and nothing else.
"""
import csv
import os
import statistics
import sys

GUARD_VARIANTS = ["plain", "predicate", "noop_trigger", "after_when", "moddatetime",
                  "plpgsql_guard", "fence_stmt", "fence_begin",
                  "fence_after_stmt", "fence_after_begin", "plain_tx"]
LABELS = {
    "plain": "plain (no trigger)",
    "predicate": "predicate (`writer_epoch <= $t`)",
    "noop_trigger": "noop C trigger",
    "after_when": "AFTER trigger, WHEN never true",
    "moddatetime": "moddatetime",
    "plpgsql_guard": "PL/pgSQL guard",
    "fence_stmt": "fence (token in statement)",
    "fence_begin": "fence (fence_begin)",
    "fence_after_stmt": "fence after form (token in statement; mixed and WAL only)",
    "fence_after_begin": "fence after form (fence_begin, token in SET)",
    "plain_tx": "plain, in fence_begin's transaction shape",
}


def percentile(sorted_vals, p):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1,
                   int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def cmd_pct(files):
    lat = []
    for f in files:
        with open(f) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[2].isdigit():
                    lat.append(int(parts[2]) / 1000.0)
    lat.sort()
    print(f"{percentile(lat, 50):.3f} {percentile(lat, 99):.3f}")


def load(outdir):
    rows = []
    with open(os.path.join(outdir, "results.tsv")) as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            r["clients"] = int(r["clients"])
            r["round"] = int(r["round"])
            r["tps"] = float(r["tps"] or 0)
            r["cpu"] = float(r["cpu_us_tx"]) if r.get("cpu_us_tx") else float("nan")
            r["errors"] = int(r["failed"] or 0) + int(r["aborted"] or 0) + \
                int(r["srv_errors"] or 0)
            rows.append(r)
    mem = []
    path = os.path.join(outdir, "memory.tsv")
    if os.path.exists(path):
        with open(path) as fh:
            mem = list(csv.DictReader(fh, delimiter="\t"))
    wal = []
    path = os.path.join(outdir, "wal.tsv")
    if os.path.exists(path):
        with open(path) as fh:
            wal = list(csv.DictReader(fh, delimiter="\t"))
    meta = ""
    path = os.path.join(outdir, "meta.txt")
    if os.path.exists(path):
        with open(path) as fh:
            meta = fh.read()
    return rows, mem, wal, meta


def med(vals):
    return statistics.median(vals) if vals else float("nan")


def fmt_tps(x):
    if x != x:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def cmd_report(outdir):
    rows, mem, wal, meta = load(outdir)
    quick = "quick" in meta
    out = []
    out.append("# fence benchmark" + (" (QUICK SMOKE RUN: not a measurement)" if quick else ""))
    out.append("")
    out.extend("    " + l for l in meta.strip().splitlines())
    out.append("")

    guard = [r for r in rows if r["section"] == "guard"]
    cols = []
    for r in guard:
        key = (r["shape"], r["clients"])
        if key not in cols:
            cols.append(key)
    variants = [v for v in GUARD_VARIANTS if any(r["variant"] == v for r in guard)]

    def tps_list(v, shape, c):
        return [r["tps"] for r in guard
                if r["variant"] == v and r["shape"] == shape and r["clients"] == c]

    def round_ratios(v, base, shape, c):
        """Per-round ratio v/base: the spread says how noisy a ratio is."""
        by_round = {}
        for r in guard:
            if r["shape"] == shape and r["clients"] == c and r["variant"] in (v, base):
                by_round.setdefault(r["round"], {})[r["variant"]] = r["tps"]
        return [d[v] / d[base] for d in by_round.values()
                if d.get(v) and d.get(base)]

    medians = {(v, s, c): med(tps_list(v, s, c)) for v in variants for (s, c) in cols}
    cpu_medians = {(v, s, c): med([r["cpu"] for r in guard if r["variant"] == v and
                                   r["shape"] == s and r["clients"] == c and r["cpu"] == r["cpu"]])
                   for v in variants for (s, c) in cols}

    def cpu_ratio(v, base, s, c):
        """base's server CPU per transaction / v's: > 1 means v is cheaper,
        comparable with a throughput ratio."""
        a, b = cpu_medians.get((v, s, c)), cpu_medians.get((base, s, c))
        if a is None or b is None or not a or a != a or b != b:
            return float("nan")
        return b / a

    def ratio(v, base, s, c):
        a, b = medians.get((v, s, c)), medians.get((base, s, c))
        if a is None or b is None or not b or a != a or b != b:
            return float("nan")
        return a / b

    out.append("## Guarded UPDATE: median throughput as a ratio to plain")
    out.append("")
    out.append("Each cell: ratio of medians to plain, then the median transactions/s "
               "(bulk: statements of 1000 rows per second).")
    out.append("")
    hdr = ["variant"] + [f"{s} x{c}" for (s, c) in cols] + ["errors"]
    out.append("| " + " | ".join(hdr) + " |")
    out.append("|" + "---|" * len(hdr))
    for v in variants:
        cells = [LABELS[v]]
        for (s, c) in cols:
            cells.append(f"{ratio(v, 'plain', s, c):.2f} ({fmt_tps(medians[(v, s, c)])})")
        cells.append(str(sum(r["errors"] for r in guard if r["variant"] == v)))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")

    if any(x == x for x in cpu_medians.values()):
        out.append("## Server CPU per transaction, as a ratio to plain")
        out.append("")
        out.append("Each cell: plain's server CPU per transaction divided by the variant's "
                   "(so, like a throughput ratio, lower is costlier), then the variant's "
                   "median server CPU in microseconds per transaction. Summed over all "
                   "backends of a run, connection start included; far less disturbed than "
                   "throughput by other work on the machine.")
        out.append("")
        out.append("| " + " | ".join(hdr[:-1]) + " |")
        out.append("|" + "---|" * (len(hdr) - 1))
        for v in variants:
            cells = [LABELS[v]]
            for (s, c) in cols:
                cu = cpu_medians[(v, s, c)]
                cells.append(f"{cpu_ratio(v, 'plain', s, c):.2f} ({cu:,.0f})" if cu == cu else "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")

    # ---- WAL per UPDATE
    wal_kb = {}
    if wal:
        out.append("## WAL per 1000-row UPDATE")
        out.append("")
        out.append("WAL bytes between the insert positions before and after one transaction "
                   "that updates 1000 rows (all HOT: each variant's own 1000-row table at "
                   "fillfactor 40, VACUUMed first), in the variant's own form; median over "
                   "rounds, after a warm-up. Records: pg_waldump --stats=record over the "
                   "same range, per UPDATE (median); Heap/LOCK is the row lock PostgreSQL "
                   "takes before any BEFORE ROW UPDATE trigger.")
        out.append("")
        out.append("| variant | WAL kB | ratio to plain | min-max kB | records | Heap/LOCK | "
                   "HOT updates | other updates | errors |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        num = lambda x: float(x) if x not in ("", None) else float("nan")
        for v in GUARD_VARIANTS:
            sel = [w for w in wal if w["variant"] == v]
            if sel:
                wal_kb[v] = med([num(w["bytes"]) / 1024.0 for w in sel if w["bytes"]])
        for v in GUARD_VARIANTS:
            sel = [w for w in wal if w["variant"] == v]
            if not sel:
                continue
            kbs = [num(w["bytes"]) / 1024.0 for w in sel if w["bytes"]]
            base = wal_kb.get("plain", float("nan"))

            def cnt(k):
                vals = [num(w[k]) for w in sel if w.get(k) not in ("", None)]
                return f"{med(vals):,.0f}" if vals else "-"
            errs = sum(1 for w in sel if w["rows"] != "1000" or not w["bytes"])
            out.append(f"| {LABELS[v]} | {wal_kb[v]:,.1f} | "
                       f"{wal_kb[v] / base if base else float('nan'):.2f} | "
                       f"{min(kbs):,.1f}-{max(kbs):,.1f} | {cnt('records')} | "
                       f"{cnt('heap_lock')} | {cnt('hot_update')} | {cnt('update')} | "
                       f"{errs} |" if kbs else f"| {LABELS[v]} | - | - | - | - | - | - | - | "
                       f"{errs} |")
        out.append("")

    claims = [r for r in rows if r["section"] == "claims"]
    if claims:
        out.append("## Claims: fence_claim against the seed's raw conditional UPDATE")
        out.append("")
        out.append("One claim attempt per transaction, 1 ms leases (a job is free again "
                   "by expiry). Medians over rounds; won/s = claims that returned a token.")
        out.append("")
        out.append("| case | clients | variant | attempts/s | ratio to raw | won/s | "
                   "p50 ms | p99 ms | server CPU us/attempt | errors |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        keys = []
        for r in claims:
            k = (r["shape"], r["clients"])
            if k not in keys:
                keys.append(k)
        for (s, c) in keys:
            raw = med([r["tps"] for r in claims
                       if r["shape"] == s and r["clients"] == c and r["variant"] == "raw_update"])
            for v in ("raw_update", "fence_claim"):
                sel = [r for r in claims if r["shape"] == s and r["clients"] == c
                       and r["variant"] == v]
                if not sel:
                    continue
                t = med([r["tps"] for r in sel])
                fl = lambda k: med([float(r[k]) for r in sel if r[k] not in ("", "nan")])
                out.append(f"| {s} | {c} | {v} | {fmt_tps(t)} | "
                           f"{t / raw if raw else float('nan'):.2f} | {fmt_tps(fl('wins_per_s'))} | "
                           f"{fl('p50_ms'):.3f} | {fl('p99_ms'):.3f} | "
                           f"{med([r['cpu'] for r in sel if r['cpu'] == r['cpu']]):,.0f} | "
                           f"{sum(r['errors'] for r in sel)} |")
        out.append("")

    if mem:
        out.append("## Memory: one UPDATE in one transaction, backend private memory")
        out.append("")
        out.append("RssAnon of the backend sampled every 10 ms (shared buffers excluded); "
                   "growth = peak - before the UPDATE; contexts = "
                   "pg_backend_memory_contexts total right after the UPDATE.")
        out.append("")
        out.append("| variant | rows | before MB | peak MB | growth MB | growth - plain MB "
                   "| growth - noop trigger MB | contexts MB | seconds |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        growth_of = lambda v: {m["rows"]: float(m["growth_mb"]) for m in mem if m["variant"] == v}
        plain_growth, noop_growth = growth_of("plain"), growth_of("noop_trigger")
        for m in mem:
            d = float(m["growth_mb"]) - plain_growth.get(m["rows"], float("nan"))
            dn = float(m["growth_mb"]) - noop_growth.get(m["rows"], float("nan"))
            out.append(f"| {m['variant']} | {int(m['rows']):,} | {m['base_anon_mb']} | "
                       f"{m['peak_anon_mb']} | {m['growth_mb']} | {d:+.1f} | {dn:+.1f} | "
                       f"{m['ctx_mb']} | {m['seconds']} |")
        out.append("")

    # ---- targets
    targets = []

    def target(name, val, goal, spread=None, cpu=None):
        ok = val == val and val >= goal
        sp = ""
        if spread:
            sp = f"{med(spread):.2f} ({min(spread):.2f}-{max(spread):.2f})"
        cp = f"{cpu:.2f}" if cpu is not None and cpu == cpu else ""
        targets.append((name, f"{val:.2f}" if val == val else "-", f">= {goal}", sp, cp,
                        "met" if ok else "MISSED"))

    def pair(v, base, s, c, goal, name):
        target(name, ratio(v, base, s, c), goal, round_ratios(v, base, s, c),
               cpu_ratio(v, base, s, c))

    if "fence_stmt" in variants and ("bulk", 1) in cols:
        pair("fence_stmt", "noop_trigger", "bulk", 1, 0.95,
             "fence (token in statement), bulk / noop C trigger")
        pair("fence_begin", "moddatetime", "bulk", 1, 0.95,
             "fence (fence_begin), bulk / moddatetime")
        pair("fence_stmt", "plpgsql_guard", "bulk", 1, 2.5,
             "fence (token in statement), bulk / PL/pgSQL guard")
        pair("fence_begin", "plpgsql_guard", "bulk", 1, 2.5,
             "fence (fence_begin), bulk / PL/pgSQL guard")
        if ("single", 4) in cols:
            pair("fence_stmt", "plain", "single", 4, 0.95,
                 "fence (token in statement), single x4 / plain")
        if "plain_tx" in variants:
            # not the guard's targets: what fence_begin costs beside the same
            # transaction shape without a guard (its extra round trips removed)
            if ("single", 4) in cols:
                pair("fence_begin", "plain_tx", "single", 4, 0.95,
                     "(extra) fence (fence_begin), single x4 / plain in the same "
                     "transaction shape")
    if "fence_after_begin" in variants and ("bulk", 1) in cols:
        # the after form takes no row lock and queues no event.
        # Bulk and single rewrite the same rows with the same token, which
        # the after form allows only under fence_begin (bench/run), so the
        # after form's cost there is fence_after_begin beside plain in the
        # same transaction shape (the same statements, no guard).
        pair("fence_after_begin", "plain", "bulk", 1, 0.95,
             "(after) fence after form (fence_begin), bulk / plain")
        if "plain_tx" in variants:
            pair("fence_after_begin", "plain_tx", "bulk", 1, 0.95,
                 "(after) fence after form (fence_begin), bulk / plain in the same "
                 "transaction shape")
            for c in (1, 4, 8):
                if ("single", c) in cols:
                    pair("fence_after_begin", "plain_tx", "single", c, 0.95,
                         f"(after) fence after form (fence_begin), single x{c} / plain in "
                         "the same transaction shape")
    if "after_when" in variants and ("bulk", 1) in cols:
        # the mechanism's own floor, beside the target: a never-true WHEN
        pair("after_when", "plain", "bulk", 1, 0.95,
             "(13, reference) AFTER trigger, WHEN never true, bulk / plain")
    for v, base in (("fence_after_stmt", "plain"), ("fence_after_begin", "plain_tx")):
        if v in wal_kb and base in wal_kb and wal_kb[base]:
            x = wal_kb[v] / wal_kb[base]
            targets.append((f"(after) WAL per 1000-row UPDATE, {LABELS[v]} / {LABELS[base]}",
                            f"{x:.3f}", "<= 1.01", "", "", "met" if x <= 1.01 else "MISSED"))
    if claims and any(r["variant"] == "fence_claim" for r in claims):
        for (s, c) in keys:
            sel = lambda v: [r["tps"] for r in claims if r["shape"] == s and r["clients"] == c
                             and r["variant"] == v]
            if s == "uncontended":
                a, b = med(sel("fence_claim")), med(sel("raw_update"))
                ca = med([r["cpu"] for r in claims if r["shape"] == s and r["clients"] == c
                          and r["variant"] == "fence_claim" and r["cpu"] == r["cpu"]])
                cb = med([r["cpu"] for r in claims if r["shape"] == s and r["clients"] == c
                          and r["variant"] == "raw_update" and r["cpu"] == r["cpu"]])
                target(f"fence_claim / raw claim, x{c}", a / b if b else float("nan"), 1.0,
                       None, cb / ca if ca else None)
        errs = sum(r["errors"] for r in claims if r["variant"] == "fence_claim")
        targets.append(("fence_claim errors/deadlocks, all cases incl. contended", str(errs),
                        "0", "", "", "met" if errs == 0 else "MISSED"))
    if mem and any(m["variant"].startswith("fence") for m in mem):
        big = max(int(m["rows"]) for m in mem)
        small = min(int(m["rows"]) for m in mem)
        g = {(m["variant"], int(m["rows"])): float(m["growth_mb"]) for m in mem}
        for v in ("fence_stmt", "fence_begin", "fence_after_stmt", "fence_after_begin"):
            if (v, big) in g:
                d = g[(v, big)] - g[("plain", big)]
                targets.append((f"memory: {v} growth - plain growth at {big:,} rows (MB)",
                                f"{d:.1f}", "<= 4", "", "", "met" if d <= 4 else "MISSED"))
                if ("noop_trigger", big) in g:
                    dn = g[(v, big)] - g[("noop_trigger", big)]
                    targets.append((f"memory (fence's own): {v} growth - noop C trigger growth "
                                    f"at {big:,} rows (MB)", f"{dn:.1f}", "<= 4", "", "",
                                    "met" if dn <= 4 else "MISSED"))
                if (v, small) in g and small != big:
                    pr = g[(v, big)] - g[(v, small)]
                    targets.append((f"memory: {v} growth at {big:,} - at {small:,} rows (MB)",
                                    f"{pr:.1f}", "<= 1", "", "", "met" if pr <= 1 else "MISSED"))
    if targets:
        out.append("## Targets ((after): the after form's)" +
                   (" - quick run, not meaningful" if quick else ""))
        out.append("")
        out.append("Measured = ratio of the two medians of throughput (what the result "
                   "is judged on); per-round = median (min-max) of the ratio within each "
                   "interleaved round; CPU = the same comparison by server CPU per transaction.")
        out.append("")
        out.append("| target | measured | goal | per-round | CPU | result |")
        out.append("|---|---|---|---|---|---|")
        for t in targets:
            out.append("| " + " | ".join(t) + " |")
        out.append("")
    print("\n".join(out))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "pct":
        cmd_pct(sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        cmd_report(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
