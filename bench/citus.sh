#!/usr/bin/env bash
# bench/citus.sh: fence on a Citus cluster, measured through the
# coordinator (issue 34).  Runs bench/citus_inner.sh (see its header) in
# test/matrix's PostgreSQL 17 chroot, with Citus built there as
# test/citus/run builds it:
#
#   sudo bash bench/citus.sh
#
# FENCE_BENCH_SECONDS, FENCE_BENCH_ROUNDS, FENCE_BENCH_CLIENTS pass on.
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/test/citus/run" --bench
