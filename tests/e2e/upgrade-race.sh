#!/usr/bin/env bash
# Helm upgrades of the KEDA-scaled worker Deployment while an autoscaler writes its scale subresource, on a real
# kube-apiserver (tests/e2e/cluster.sh up --bare, the KEDA CRDs applied; no node, no KEDA operator: the
# autoscaler is `kubectl scale` in a loop, the same subresource update the HPA and KEDA make). Per Helm (3 and 4):
#   1. install with keda.enabled=false, worker.replicas=2; upgrade keda.enabled=true (bootstrap step 2): still 2
#   2. one more upgrade before any autoscaler write: still 2 (Helm owns the field: the chart renders it)
#   3. N upgrades (default 20) while the scaler sets 1..5 every 0.3 s: every upgrade succeeds, no conflict on
#      .spec.replicas (Helm 4's server-side apply conflicted with the scaler when the chart named the field)
#   4. scale to 3, three quiet upgrades: still 3 (an upgrade never resets the autoscaler's count)
# Exit 1 on any failure. E2E_HELMS="helm3 helm4", UPGRADES=20, CHART=<chart dir> (e.g. an older chart to compare).
#   tests/e2e/upgrade-race.sh
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CHART=${CHART:-$ROOT/charts/captcha-solver}
N=${UPGRADES:-20}
read -r -a HELMS <<< "${E2E_HELMS:-helm3 helm4}"
export E2E_CLUSTER=${E2E_CLUSTER:-upgrade-race} E2E_KEDA_WEBHOOKS=0
K=$ROOT/.tools/e2e/bin/kubectl
WORK=$(mktemp -d "${TMPDIR:-/tmp}/captcha-upgrade-race.XXXXXX")
export HELM_CACHE_HOME=$WORK/helm/cache HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data
say() { echo "upgrade-race: $*"; }
bad=0
check() { if [ "$2" != "$3" ]; then say "FAIL: $1: got $2, want $3"; bad=1; else say "ok: $1 = $2"; fi; }

"$HERE/build-tools.sh" >/dev/null || exit 1
"$ROOT/scripts/chart-dependency.sh" >/dev/null || exit 1
"$HERE/cluster.sh" up --bare > "$WORK/cluster-up.log" 2>&1 || { tail -20 "$WORK/cluster-up.log"; exit 1; }
trap '"$HERE/cluster.sh" down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
eval "$("$HERE/cluster.sh" env)"
$K apply --server-side -f "$ROOT/.tools/e2e/crds/" >/dev/null

for h in "${HELMS[@]}"; do
  HELM=$ROOT/.tools/bin/$h NS=race-$h dep=rel-captcha-solver-worker
  up() { "$HELM" upgrade rel "$CHART" -n "$NS" --reset-then-reuse-values "$@" >/dev/null 2>"$WORK/err"; }
  rep() { $K -n "$NS" get deploy "$dep" -o jsonpath='{.spec.replicas}'; }
  $K create namespace "$NS" >/dev/null
  "$HELM" install rel "$CHART" -n "$NS" --set captchaai.apiKey=0123456789abcdef0123456789abcdef \
    --set redis.auth.password=pw --set worker.limitHook.enabled=false --set captchaai.threads=25 \
    --set worker.concurrency=5 --set keda.enabled=false --set worker.replicas=2 >/dev/null || exit 1
  up --set keda.enabled=true || { say "FAIL: $h: the switch to KEDA: $(tail -2 "$WORK/err")"; bad=1; }
  check "$h: replicas after the switch to KEDA" "$(rep)" 2
  up --set worker.podAnnotations.step=two || { say "FAIL: $h: upgrade: $(tail -2 "$WORK/err")"; bad=1; }
  check "$h: replicas after one more upgrade, no autoscaler write yet" "$(rep)" 2
  rm -f "$WORK/stop"
  ( i=0; while [ ! -e "$WORK/stop" ]; do
      i=$(( i % 5 + 1 )); $K -n "$NS" scale deploy "$dep" --replicas=$i >/dev/null 2>&1; sleep 0.3
    done ) &
  scaler=$!
  sleep 1
  failed=0 conflicts=0
  for n in $(seq 1 "$N"); do
    if ! up --set "worker.podAnnotations.round=r$n"; then
      failed=$((failed + 1)); grep -q conflict "$WORK/err" && conflicts=$((conflicts + 1))
      [ $failed = 1 ] && say "$h: first failure: $(grep -o 'conflict with [^:]*' "$WORK/err" | head -1)"
    fi
  done
  touch "$WORK/stop"; wait $scaler   # its last `kubectl scale` has returned: nothing writes after this
  check "$h: failed upgrades of $N while the scaler sets 1..5 every 0.3 s" "$failed" 0
  check "$h: of them conflicts on .spec.replicas" "$conflicts" 0
  $K -n "$NS" scale deploy "$dep" --replicas=3 >/dev/null
  for n in 1 2 3; do up --set "worker.podAnnotations.quiet=q$n" || { say "FAIL: $h: quiet upgrade"; bad=1; }; done
  check "$h: replicas after scale to 3 and three upgrades" "$(rep)" 3
done
[ $bad = 0 ] && say "PASSED" || say "FAILED"
exit $bad
