#!/usr/bin/env bash
# test/checks/scale_smoke.sh: the queue-scale benchmarks' CI smoke run.
# fence-check-packages: python3-matplotlib
# fence-check-timeout: 300
#
# Runs each queue-scale benchmark in its --quick mode, one after the other, each
# with its own throwaway cluster on $FENCE_PORT:
#   bench/scale.sh          10k jobs, fence_claim and the raw UPDATE at 1 and
#                           8 clients and contended (the bulk-loaded registry
#                           must leave the counter above every loaded token)
#   bench/pipeline.sh       fence_begin's transaction, pipelined and not
#   bench/backend_memory.sh 5,000 claims in one session; 100 and 1,000 tokens
#                           validated in one transaction
#   bench/claim_profile.sh  the token-index alternatives (no perf profile)
#   bench/soak.sh           three 4-second soaks, CSV and PNG plots: the
#                           raw UPDATE's and the default run at production
#                           settings, compared in one report, and the tuned
#                           run with --cpu-only (two clusters)
#   bench/inline.sh         the guard's inline form against its trigger on a
#                           preloaded server (each fence variant used the
#                           path it names, by fence_stats)
# scale.sh and soak.sh run at production settings by default (fsync,
# full_page_writes and autovacuum on, no VACUUM between runs); --cpu-only
# is exercised as cheaply as it can be: scale.sh once more at 1 client, not
# contended, and soak.sh's tuned run (above).
# It proves that every script runs without a failed transaction, an aborted
# client or a server-side ERROR, that every report holds each variant
# with a throughput above zero, and that scale's and soak's reports state
# the settings each mode asked for.  No timing assertion: quick runs are
# too short to mean anything.  About 100 s at load 1.5-2 (2 cores), of
# which inline.sh about 15 s and the --cpu-only runs about 15 s.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
port=${FENCE_PORT:-55700}

out=$(mktemp -d "${TMPDIR:-/tmp}/fence-scale-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT

status=0
fail() { echo "scale_smoke: $*" >&2; status=1; }
# NAME SCRIPT [options]: one --quick run, results in $out/NAME
run()
{
	local name=$1 s=$2 t0
	shift 2
	t0=$(date +%s)
	if ! bash "$root/bench/$s.sh" --quick "$@" --port "$port" --out "$out/$name" >"$out/$name.log" 2>&1; then
		fail "bench/$s.sh --quick${*:+ $*} failed:"
		tail -n 20 "$out/$name.log" >&2
	fi
	echo "scale_smoke: bench/$s.sh --quick${*:+ $*}: $(($(date +%s) - t0)) s"
}
for s in scale pipeline backend_memory claim_profile; do
	run "$s" "$s"
done
run soak soak --runs "raw default"
run inline inline
run scale_cpu scale --cpu-only --clients 1 --no-contended
run soak_cpu soak --cpu-only --runs tuned

# every report names every variant, with a throughput above zero
need()
{
	local f=$1
	shift
	for want in "$@"; do
		grep -qF -- "$want" "$f" 2>/dev/null || fail "$f lacks \"$want\""
	done
}
need "$out/scale/report.md" '| 10,000 | uncontended | 1 |' '| 10,000 | uncontended | 8 |' '| 10,000 | contended | 32 |'
awk -F'\t' 'NR > 1 { n[$4]++; if (!($7 > 0) || $15 != 1) bad = 1 } END { exit !(bad || n["raw"] < 3 || n["fence"] < 3) }' \
	"$out/scale/results.tsv" && fail "scale: a run without throughput, an error, or a variant missing"
need "$out/pipeline/report.md" 'fence_begin / plain' 'fence_begin: BEGIN; SELECT fence_begin'
awk -F'\t' 'NR > 1 { n++; if (!($4 > 0) || $7 != 1) bad = 1 } END { exit !(bad || n != 12) }' \
	"$out/pipeline/results.tsv" && fail "pipeline: a run without throughput or with an error"
need "$out/backend_memory/report.md" '| fence_claim |' '| raw conditional UPDATE |' \
	'| fence_begin of each job' '| UPDATE, protected, token per row'
# a transaction that validated 1,000 tokens holds at least 1,000 locks
awk -F'\t' '$1 != "plain" && $2 == 1000 && !($7 >= 1000) { bad = 1 } END { exit !bad }' \
	"$out/backend_memory/tokens.tsv" && fail "backend_memory: fewer locks than tokens validated"
need "$out/claim_profile/report.md" 'fence_claim' 'SQL takeover, hash index on token' \
	'SQL takeover, no token index, fillfactor 50'
# fence's claims are never HOT: token, which is indexed, changes
awk -F'\t' '$1 ~ /^fence_claim/ && $8 != 0 { bad = 1 } END { exit !bad }' \
	"$out/claim_profile/results.tsv" && fail "claim_profile: a fence claim was a HOT update"
for r in raw default tuned; do
	d=soak
	[ "$r" = tuned ] && d=soak_cpu
	[ -s "$out/$d/soak-$r.png" ] || fail "soak: no plot for $r"
	[ "$(wc -l <"$out/$d/soak_$r.csv" 2>/dev/null || echo 0)" -ge 3 ] || fail "soak: fewer than 2 samples for $r"
done
need "$out/soak/report.md" '| raw | claim_jobs |' '| default | fence_claims |' 'fence / raw'
need "$out/soak_cpu/report.md" '| tuned |'
need "$out/inline/inline.md" '| stmt_inline |' '| begin_inline |' '| begin_delete_inline |' \
	'| stmt_trigger |' '| begin_delete_trigger |' 'fence preloaded'

# the CPU-only runs, and every report's settings as the server had them
need "$out/scale_cpu/report.md" '| 10,000 | uncontended | 1 |' 'fence_claim / raw conditional UPDATE, CPU-only settings'
awk -F'\t' 'NR > 1 { n[$4]++; if (!($7 > 0) || $15 != 1) bad = 1 } END { exit !(bad || n["raw"] < 1 || n["fence"] < 1) }' \
	"$out/scale_cpu/results.tsv" && fail "scale --cpu-only: a run without throughput, an error, or a variant missing"
prod='fsync on, full_page_writes on, autovacuum on, synchronous_commit off'
cpu='fsync off, full_page_writes off, autovacuum off, synchronous_commit off'
need "$out/scale/report.md" "settings: production durability (the default): $prod" 'VACUUM between runs: no' \
	'fence_claim / raw conditional UPDATE, production settings'
need "$out/soak/report.md" "settings: production durability (the default): $prod" 'VACUUM between runs: no'
need "$out/scale_cpu/report.md" "settings: CPU-only (--cpu-only): $cpu" 'VACUUM between runs: yes'
need "$out/soak_cpu/report.md" 'fsync off, full_page_writes off, autovacuum on' 'VACUUM between runs: no'

[ "$status" = 0 ] && echo "scale_smoke: every queue-scale benchmark ran; reports printed"
exit "$status"
