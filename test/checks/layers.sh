#!/usr/bin/env bash
# test/checks/layers.sh: the C files' calls run one way (issue 32).
# test/checks/layers.py reads, for each .c file, the functions it defines
# and the names it uses, and fails on any files that call each other
# (directly or round a ring) and on any call from a file up to one listed
# above it in fence.h's map.  Run on the tree itself; needs no server.
set -euo pipefail
exec /usr/bin/python3 "$FENCE_SRC/test/checks/layers.py" "$FENCE_SRC"
