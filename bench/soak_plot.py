#!/usr/bin/python3
"""bench/soak_plot.py: bench/soak.sh's samples as CSV, PNG plots and a summary.

  soak_plot.py --out OUT --plots DIR --interval S --runs "raw default tuned"

Reads OUT/samples_<run>.csv (the sampler's rows: server time, claims made,
relation sizes, autovacuum count), OUT/runs.tsv (each run's start) and
pgbench's sampled per-transaction log OUT/logs/soak_<run>.* (1 in 10
transactions).  Writes OUT/soak_<run>.csv (one row per sampling interval)
and DIR/soak-<run>.png, and prints the markdown summary: a row per run and,
when the raw run is among them, each fence run against it.

Needs matplotlib from Debian (python3-matplotlib), run with /usr/bin/python3.
"""
import argparse
import bisect
import csv
import glob
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SAMPLING = 0.1  # pgbench --sampling-rate in bench/soak.sh
MB = 1048576.0
LABELS = {
    "raw": "the seed's raw conditional UPDATE on claim_jobs, autovacuum defaults",
    "default": "autovacuum defaults",
    "tuned": "fence_claims: autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0",
}


def percentile(vals, p):
    """Nearest-rank percentile of a sorted list."""
    if not vals:
        return float("nan")
    k = max(0, min(len(vals) - 1, int(round(p / 100.0 * len(vals) + 0.5)) - 1))
    return vals[k]


def load_log(out, run):
    """(completion time, latency ms) of every sampled transaction, sorted."""
    rows = []
    for f in glob.glob(os.path.join(out, "logs", f"soak_{run}.*")):
        if f.endswith(".out"):
            continue
        with open(f) as fh:
            for line in fh:
                p = line.split()
                # client_id transaction_no time script_no time_epoch time_us
                if len(p) >= 6 and p[2].isdigit():
                    rows.append((int(p[4]) + int(p[5]) / 1e6, int(p[2]) / 1000.0))
    rows.sort()
    return rows


def series(out, run):
    starts = {}
    with open(os.path.join(out, "runs.tsv")) as fh:
        for line in fh:
            p = line.rstrip("\n").split("\t")
            starts[p[0]] = float(p[1])
    start = starts[run]
    with open(os.path.join(out, f"samples_{run}.csv")) as fh:
        samples = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    log = load_log(out, run)
    times = [t for t, _ in log]
    rows = []
    ends = []  # the sample that ends each row's interval
    for prev, cur in zip(samples, samples[1:]):
        dt = cur["epoch"] - prev["epoch"]
        if dt <= 0:
            continue
        lo = bisect.bisect_right(times, prev["epoch"])
        hi = bisect.bisect_right(times, cur["epoch"])
        lat = sorted(l for _, l in log[lo:hi])
        rows.append({
            "t_s": round(cur["epoch"] - start, 1),
            "claims_per_s": round((cur["claims"] - prev["claims"]) / dt, 1),
            "attempts_per_s": round(len(lat) / SAMPLING / dt, 1),
            "p50_ms": round(percentile(lat, 50), 3),
            "p99_ms": round(percentile(lat, 99), 3),
            "total_mb": round(cur["total_bytes"] / MB, 2),
            "heap_mb": round(cur["heap_bytes"] / MB, 2),
            "pkey_mb": round(cur["pkey_bytes"] / MB, 2),
            "token_mb": round(cur["token_bytes"] / MB, 2),
            "live_tup": int(cur["live_tup"]),
            "dead_tup": int(cur["dead_tup"]),
            "autovacuums": int(cur["autovacuums"]),
            "tup_upd": int(cur["tup_upd"]),
            "tup_hot_upd": int(cur["tup_hot_upd"]),
        })
        ends.append(cur)
    # the last sample is taken after pgbench ends: drop a partial interval
    # that holds no transaction at all
    while rows and rows[-1]["attempts_per_s"] == 0:
        rows.pop()
    return samples[0], rows, ends[len(rows) - 1] if rows else None


def table_of(run):
    return "claim_jobs" if run == "raw" else "fence_claims"


def plot(run, first, rows, path):
    t = [r["t_s"] / 60.0 for r in rows]
    fig, ax = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    ax[0].plot(t, [r["claims_per_s"] for r in rows],
               label="claims/s (lease_epoch raised)" if run == "raw" else "claims/s (tokens issued)")
    ax[0].plot(t, [r["attempts_per_s"] for r in rows], label="attempts/s (1-in-10 sample x 10)",
               alpha=0.5, linewidth=0.8)
    ax[0].set_ylabel("per second")
    ax[0].set_ylim(bottom=0)
    ax[1].plot(t, [r["p99_ms"] for r in rows], label="p99")
    ax[1].plot(t, [r["p50_ms"] for r in rows], label="p50")
    ax[1].set_ylabel("latency, ms")
    ax[1].set_ylim(bottom=0)
    table = table_of(run)
    sizes = [("total_mb", f"pg_total_relation_size({table})"), ("heap_mb", "heap"),
             ("pkey_mb", f"{table}_pkey (job)")]
    if run != "raw":
        sizes.append(("token_mb", "fence_claims_token_key"))
    for key, label in sizes:
        ax[2].plot(t, [r[key] for r in rows], label=label)
    ax[2].set_ylabel("MB")
    ax[2].set_ylim(bottom=0)
    ax[2].set_xlabel("minutes")
    prev = int(first["autovacuums"])
    for r in rows:
        if r["autovacuums"] > prev:
            for a in ax:
                a.axvline(r["t_s"] / 60.0, color="black", alpha=0.35, linewidth=0.8, linestyle=":")
        prev = r["autovacuums"]
    for a in ax:
        a.legend(loc="lower right", fontsize=8)
        a.grid(alpha=0.3)
    what = "raw UPDATE" if run == "raw" else "fence_claim"
    fig.suptitle(f"{what} soak, {run}: {LABELS.get(run, run)}\n"
                 f"dotted lines: an autovacuum of {table} ended in that interval", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def summary(first, rows, last_sample):
    """The figures of one run that the tables print."""
    n = max(1, len(rows) // 10)
    c = [r["claims_per_s"] for r in rows]
    return {
        "minutes": rows[-1]["t_s"] / 60,
        "mean": (last_sample["claims"] - first["claims"]) / (last_sample["epoch"] - first["epoch"]),
        "first10": mean(c[:n]),
        "last10": mean(c[-n:]),
        "later": [r["claims_per_s"] for r in rows if r["t_s"] > 60] or c,
        "p99": sorted(r["p99_ms"] for r in rows),
        "start_mb": first["total_bytes"] / MB,
        "max_mb": max(r["total_mb"] for r in rows),
        "last": rows[-1],
        "dead_max": max(r["dead_tup"] for r in rows),
        "autovacuums": rows[-1]["autovacuums"] - int(first["autovacuums"]),
        "hot": rows[-1]["tup_hot_upd"] - int(first["tup_hot_upd"]),
        "upd": rows[-1]["tup_upd"] - int(first["tup_upd"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--plots", required=True)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--runs", default="raw default tuned")
    a = ap.parse_args()
    print("| run | table | minutes | claims/s, whole run | first 10% -> last 10% (last / first) "
          "| claims/s per interval after the first minute, min-max | p99 ms median (max) "
          "| total MB at start / max / end (end / start) | heap, job index, token index MB at end "
          "| dead rows max | autovacuums | HOT updates |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    done = {}
    for run in a.runs.split():
        first, rows, last_sample = series(a.out, run)
        with open(os.path.join(a.out, f"soak_{run}.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()) if rows else ["t_s"])
            w.writeheader()
            w.writerows(rows)
        if not rows:
            print(f"| {run} | {table_of(run)} | no samples | | | | | | | | | |")
            continue
        plot(run, first, rows, os.path.join(a.plots, f"soak-{run}.png"))
        m = done[run] = summary(first, rows, last_sample)
        last = m["last"]
        token = "-" if run == "raw" else f"{last['token_mb']:.1f}"
        print(f"| {run} | {table_of(run)} | {m['minutes']:.1f} | {m['mean']:,.0f} "
              f"| {m['first10']:,.0f} -> {m['last10']:,.0f} ({m['last10'] / m['first10']:.2f}) "
              f"| {min(m['later']):,.0f}-{max(m['later']):,.0f} "
              f"| {percentile(m['p99'], 50):.2f} ({m['p99'][-1]:.2f}) "
              f"| {m['start_mb']:.1f} / {m['max_mb']:.1f} / {last['total_mb']:.1f} "
              f"({last['total_mb'] / m['start_mb']:.1f}x) "
              f"| {last['heap_mb']:.1f}, {last['pkey_mb']:.1f}, {token} "
              f"| {m['dead_max']:,} | {m['autovacuums']} | {m['hot']:,} of {m['upd']:,} |")
    print()
    print("claims/s: tokens issued per second (fence_token_seq); raw: lease_epoch raised (its sum over "
          f"claim_jobs); p99: of the 1-in-10 sample of attempts in each {a.interval:g}-s interval; sizes from "
          "pg_total_relation_size and pg_relation_size, with the table's indexes; dead rows and autovacuums "
          "from pg_stat_user_tables.  Per-interval rows: OUT/soak_<run>.csv.")
    raw = done.get("raw")
    fenced = [r for r in done if r != "raw"]
    if raw and fenced:
        print()
        print("Against the raw UPDATE in the same soak (fence_claims with its indexes, claim_jobs with its "
              "index; runs one after the other on one cluster):")
        print()
        print("| run | claims/s, whole run: fence / raw | total MB at end: fence / raw | max: fence / raw "
              "| last 10% / first 10%: fence, raw |")
        print("|---|---|---|---|---|")
        for run in fenced:
            m = done[run]
            print(f"| {run} | {m['mean'] / raw['mean']:.2f} "
                  f"| {m['last']['total_mb'] / raw['last']['total_mb']:.1f} "
                  f"| {m['max_mb'] / raw['max_mb']:.1f} "
                  f"| {m['last10'] / m['first10']:.2f}, {raw['last10'] / raw['first10']:.2f} |")


if __name__ == "__main__":
    main()
