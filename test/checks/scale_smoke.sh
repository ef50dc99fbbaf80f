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
#   bench/soak.sh           two 4-second soaks, CSV and PNG plots
# It proves that every script runs without a failed transaction, an aborted
# client or a server-side ERROR, and that every report holds each variant
# with a throughput above zero.  No timing assertion: quick runs are too
# short to mean anything.  30 s at load 1, about 60 s at load 6 (2 cores).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
port=${FENCE_PORT:-55700}

out=$(mktemp -d "${TMPDIR:-/tmp}/fence-scale-smoke.XXXXXX")
trap 'rm -rf "$out"' EXIT

status=0
fail() { echo "scale_smoke: $*" >&2; status=1; }
for s in scale pipeline backend_memory claim_profile soak; do
	t0=$(date +%s)
	if ! bash "$root/bench/$s.sh" --quick --port "$port" --out "$out/$s" >"$out/$s.log" 2>&1; then
		fail "bench/$s.sh --quick failed:"
		tail -n 20 "$out/$s.log" >&2
	fi
	echo "scale_smoke: bench/$s.sh --quick: $(($(date +%s) - t0)) s"
done

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
for run in default tuned; do
	[ -s "$out/soak/soak-$run.png" ] || fail "soak: no plot for $run"
	[ "$(wc -l <"$out/soak/soak_$run.csv" 2>/dev/null || echo 0)" -ge 3 ] || fail "soak: fewer than 2 samples for $run"
done
need "$out/soak/report.md" '| default |' '| tuned |'

[ "$status" = 0 ] && echo "scale_smoke: every queue-scale benchmark ran; reports printed"
exit "$status"
