#!/usr/bin/env bash
# Plumbing check without the chart: own cluster (E2E_CLUSTER=smoke), redis-server, a Deployment + ScaledObject;
# KEDA must scale 0 -> 1 when the list has items and 1 -> 0 after the cooldown. Tears everything down on exit.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export E2E_CLUSTER=${E2E_CLUSTER:-smoke}
# shellcheck source=lib.sh
. "$HERE/lib.sh"
NS=e2e-smoke
trap 'rc=$?; [ $rc = 0 ] || dump_state $NS; cluster down; exit $rc' EXIT
trap 'exit 130' INT TERM

"$HERE/build-tools.sh"
cluster up
use_cluster
redis_start
sed "s/REDIS_ADDRESS/127.0.0.1:$REDIS_PORT/" "$HERE/smoke/smoke.yaml" | kubectl apply -f -
wait_until 60 "ScaledObject Ready" so_ready $NS smoke-worker || fail "ScaledObject not Ready"
say "ScaledObject Ready after ${WAITED}s"
wait_until 30 "HPA keda-hpa-smoke-worker" hpa_exists $NS smoke-worker || fail "no HPA"
replicas_eq $NS smoke-worker 0 || fail "replicas not 0 with an empty list"
rcli RPUSH "{smoke}:pending" a b c >/dev/null
wait_until 60 "scale 0->1" replicas_ge $NS smoke-worker 1 || fail "KEDA did not scale up"
up=$WAITED
wait_until 30 "ReplicaSet with pods" bash -c "[ \"\$(kubectl -n $NS get pods -o name | wc -l)\" -ge 1 ]" || fail "no pod created"
rcli DEL "{smoke}:pending" >/dev/null
wait_until 60 "scale 1->0" replicas_eq $NS smoke-worker 0 || fail "KEDA did not scale down"
down=$WAITED
say "smoke OK: 0->1 in ${up}s (pollingInterval 1s), 1->0 in ${down}s (cooldownPeriod 5s)"
