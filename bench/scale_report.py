#!/usr/bin/env python3
"""bench/scale_report.py: bench/scale.sh's results as markdown tables.

  scale_report.py OUTDIR [SETTINGS]   reads OUTDIR/results.tsv and OUTDIR/sizes.tsv

SETTINGS, if given, names the settings the runs had ("production settings",
"CPU-only settings") in the claims table's title; bench/scale.sh writes the
settings themselves above the tables.

Ratios are fence / raw: below 1 = fence_claim makes fewer attempts per
second than the raw UPDATE; CPU ratio above 1 = fence costs more server CPU
per attempt.  Only the standard library.
"""
import csv
import os
import statistics
import sys


def med(v):
    return statistics.median(v) if v else float("nan")


def f(x, d=0):
    return "-" if x != x else f"{x:,.{d}f}"


def main(out, settings=""):
    rows = list(csv.DictReader(open(os.path.join(out, "results.tsv")), delimiter="\t"))
    sizes = list(csv.DictReader(open(os.path.join(out, "sizes.tsv")), delimiter="\t"))
    print("### Registry sizes after loading (aged and vacuumed)\n")
    print("| jobs | load + age + vacuum, s | relation | MB | btree levels |")
    print("|---|---|---|---|---|")
    for s in sizes:
        print(f"| {int(s['size']):,} | {s['load_s']} | {s['relation']} | {s['mb']} | {s['btree_levels'] or '-'} |")
    print()
    print("### Claims: fence_claim / raw conditional UPDATE" + (f", {settings}" if settings else "") + "\n")
    print("Medians over rounds. per-round = median (min-max) of fence/raw within each interleaved round. "
          "won = share of attempts that got a token (raw: updated a row). HOT = share of the table's updates "
          "that were HOT.\n")
    print("| jobs | case | clients | raw attempts/s | fence attempts/s | fence/raw | per-round | raw p50 / p99 ms "
          "| fence p50 / p99 ms | server CPU us/attempt raw, fence | CPU fence/raw | won raw, fence | HOT raw, fence "
          "| errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = []
    for r in rows:
        k = (r["size"], r["case"], r["clients"])
        if k not in keys:
            keys.append(k)
    for size, case, c in keys:
        sel = [r for r in rows if (r["size"], r["case"], r["clients"]) == (size, case, c)]
        by = {v: {r["round"]: r for r in sel if r["variant"] == v} for v in ("raw", "fence")}
        m = {}
        for v in by:
            rs = list(by[v].values())
            m[v] = {
                "tps": med([float(r["tps"]) for r in rs]),
                "p50": med([float(r["p50_ms"]) for r in rs]),
                "p99": med([float(r["p99_ms"]) for r in rs]),
                "cpu": med([float(r["cpu_us"]) for r in rs if r["cpu_us"]]),
                "won": med([int(r["won"]) / max(int(r["ntx"]), 1) for r in rs]),
                "hot": sum(int(r["hot_upd"]) for r in rs) / max(sum(int(r["upd"]) for r in rs), 1),
            }
        per = sorted(float(by["fence"][k]["tps"]) / float(by["raw"][k]["tps"])
                     for k in by["raw"] if k in by["fence"] and float(by["raw"][k]["tps"]) > 0)
        rng = f"{med(per):.2f} ({per[0]:.2f}-{per[-1]:.2f})" if per else "-"
        errs = sum(1 for r in sel if r["ok"] != "1")
        ratio = m["fence"]["tps"] / m["raw"]["tps"] if m["raw"]["tps"] else float("nan")
        cratio = m["fence"]["cpu"] / m["raw"]["cpu"] if m["raw"]["cpu"] else float("nan")
        print(f"| {int(size):,} | {case} | {c} | {f(m['raw']['tps'])} | {f(m['fence']['tps'])} | **{ratio:.2f}** "
              f"| {rng} | {m['raw']['p50']:.3f} / {m['raw']['p99']:.3f} | {m['fence']['p50']:.3f} / {m['fence']['p99']:.3f} "
              f"| {f(m['raw']['cpu'])}, {f(m['fence']['cpu'])} | {cratio:.2f} "
              f"| {m['raw']['won']:.3f}, {m['fence']['won']:.3f} | {m['raw']['hot']:.2f}, {m['fence']['hot']:.2f} "
              f"| {errs} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
