#!/usr/bin/env bash
# make test-stress: `make test` with two busy-loop processes beside it, so both cores of a 2-core machine are
# loaded the whole time (what a shared CI runner or a developer's build does to the suite). The loops are this
# script's own children, stopped by their pids on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."
loops=()
stop() { for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop EXIT
trap "exit 130" INT
trap "exit 143" TERM
for _ in 1 2; do
  bash -c 'while :; do :; done' &
  loops+=("$!")
done
echo "test-stress: busy loops ${loops[*]} beside make test"
start=$(date +%s)
make test
echo "test-stress: make test passed in $(( $(date +%s) - start ))s beside two busy loops"
