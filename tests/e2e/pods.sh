#!/usr/bin/env bash
# `make e2e-pods`: the chart, as shipped with its KEDA dependency, on a one-node cluster whose pods really run.
#
#   0. tools: tests/e2e/build-tools.sh --pods (stamped; the shared cache makes a clean clone copy them), the node's
#      Debian packages (cluster.sh packages), the chart's dependency (scripts/chart-dependency.sh), helm3 + helm4
#   1. tests/e2e/cluster.sh up --pods (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
#      kubelet, kube-proxy, bridge CNI, CoreDNS; images built by images.sh and imported)
#   2. KEDA from its real chart (charts/captcha-solver/charts/keda-<v>.tgz, the chart's own dependency): image
#      overrides only (the locally built images; pullPolicy Never as nothing can be pulled)
#   3. the scenarios (tests/e2e/pods.py) with helm3 and helm4, one release each, installing the archive that
#      `helm package` makes of the chart (it carries the KEDA dependency)
#   4. teardown, also on failure or Ctrl-C: every process, mount, cgroup, the bridge, iptables/nft rules, sysctls
#
# Env: E2E_HELMS="helm3 helm4", E2E_PODS_SCENARIOS="1 switch 3 4 2", E2E_PODS_SCENARIOS_HELM3 / _HELM4 (another
#      list for one Helm; CI runs scenario 2, ~6 min, under Helm 4 only), E2E_KEEP=1 (leave the cluster up: E2E_CLUSTER=pods tests/e2e/cluster.sh down),
#      E2E_PODS_CHART=<dir> (the scenarios against another copy of the chart).
# Results: .tools/e2e/results/pods/ (figures.json, helm outputs, worker logs, component logs; the run before in
# .tools/e2e/results/pods.previous/).
# Runs under flock /tmp/captcha-e2e.lock: one cluster run on the machine at a time. Needs root (containerd, kubelet).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# an ancestor already holding the lock (`flock /tmp/captcha-e2e.lock make e2e-pods`) would wait on itself forever
lock_held_above() {
  local pid=$PPID
  while [ "${pid:-0}" -gt 1 ]; do
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'flock.*/tmp/captcha-e2e.lock' && return 0
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  done
  return 1
}
if [ "${E2E_LOCKED:-}" != 1 ] && ! lock_held_above; then
  echo "e2e-pods: waiting for /tmp/captcha-e2e.lock" >&2
  # -o: the lock stays with flock itself, not with the daemons the run starts (they would inherit it)
  exec env E2E_LOCKED=1 flock -o /tmp/captcha-e2e.lock "$0" "$@"
fi
export E2E_CLUSTER=${E2E_CLUSTER:-pods}
# shellcheck source=lib.sh
. "$HERE/lib.sh"
read -r -a HELMS <<< "${E2E_HELMS:-helm3 helm4}"
SCENARIOS=${E2E_PODS_SCENARIOS:-1 switch 3 4 2}
RESULTS=$ROOT/.tools/e2e/results/pods
T0=$SECONDS
[ "$(id -u)" = 0 ] || fail "e2e-pods runs containerd and a kubelet: it needs root"
rm -rf "$RESULTS.previous"; [ -d "$RESULTS" ] && mv "$RESULTS" "$RESULTS.previous"; mkdir -p "$RESULTS"
export HELM_CACHE_HOME=$RESULTS/.helm/cache HELM_CONFIG_HOME=$RESULTS/.helm/config HELM_DATA_HOME=$RESULTS/.helm/data

cleanup() {
  local rc=$? st
  trap - EXIT INT TERM
  st=$(cluster_state)
  if [ $rc != 0 ] && [ -d "$st" ] && [ -n "${KUBECONFIG:-}" ]; then
    echo "e2e-pods: FAILED (rc=$rc) after $((SECONDS - T0))s" >&2
    kubectl get pods -A -o wide >&2 2>&1 || true
    kubectl get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -25 >&2 || true
  fi
  [ -d "$st/logs" ] && cp -r "$st/logs" "$RESULTS/component-logs" 2>/dev/null || true
  if [ "${E2E_KEEP:-0}" = 1 ]; then
    echo "e2e-pods: E2E_KEEP=1: cluster left running; stop it with: E2E_CLUSTER=$E2E_CLUSTER tests/e2e/cluster.sh down" >&2
  else
    local s=$SECONDS
    cluster down || { echo "e2e-pods: teardown left something behind (see above)" >&2; rc=1; }
    echo "e2e-pods: teardown in $((SECONDS - s))s" >&2
  fi
  rm -rf "$RESULTS/.helm"
  echo "e2e-pods: $( [ $rc = 0 ] && echo passed || echo FAILED ) in $((SECONDS - T0))s; results in ${RESULTS#"$ROOT"/}" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "== 0. tools"
"$HERE/build-tools.sh" --pods
cluster packages
"$ROOT/scripts/chart-dependency.sh"
for h in "${HELMS[@]}"; do command -v "$h" >/dev/null || fail "$h not found in .tools/bin (scripts/install-tools.sh)"; done
[ -x "$ROOT/.venv/bin/python" ] || fail "no .venv (make venv)"
KEDA_CHART=$(ls "$ROOT"/charts/captcha-solver/charts/keda-*.tgz)

say "== 1. cluster"
s=$SECONDS
cluster up --pods
use_cluster
say "cluster up in $((SECONDS - s))s"

say "== 2. KEDA from its chart ($(basename "$KEDA_CHART"))"
s=$SECONDS
img() { awk -v n="$1" '$1 == n {print $2}' "$(cluster_state)/images"; }
repo() { local i; i=$(img "$1"); echo "${i%:*}"; }
helm3 install keda "$KEDA_CHART" -n keda --create-namespace --wait --timeout 5m \
  --set image.keda.registry= --set image.keda.repository="$(repo keda)" \
  --set image.metricsApiServer.registry= --set image.metricsApiServer.repository="$(repo keda-metrics-apiserver)" \
  --set image.webhooks.registry= --set image.webhooks.repository="$(repo keda-admission-webhooks)" \
  --set image.pullPolicy=Never > "$RESULTS/keda-install.out"
wait_until 120 "KEDA's metrics APIService Available" bash -c \
  "[ \"\$(kubectl get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions[?(@.type==\"Available\")].status}')\" = True ]" \
  || fail "KEDA's metrics apiserver did not become Available"
say "KEDA $(kubectl -n keda get deploy keda-operator -o jsonpath='{.spec.template.spec.containers[0].image}') and its metrics apiserver and webhooks Ready in $((SECONDS - s))s"

say "== 3. scenarios ($SCENARIOS) with ${HELMS[*]}"
tag=$(img worker); tag=${tag##*:}
# the chart as users get it: the archive `helm package` makes, which carries the KEDA dependency
helm3 package "$ROOT/charts/captcha-solver" --destination "$RESULTS" >/dev/null
chart=${E2E_PODS_CHART:-$(ls "$RESULTS"/captcha-solver-*.tgz)}
say "chart: ${chart#"$ROOT"/}"
per_helm=()
for h in "${HELMS[@]}"; do
  var=E2E_PODS_SCENARIOS_${h^^}
  [ -n "${!var:-}" ] && { per_helm+=(--scenarios-for "$h=$(echo "${!var}" | tr ' ' ,)"); say "scenarios for $h: ${!var}"; }
done
E2E_PODS_CHART=$chart E2E_PV_DIR=$(cluster_state)/pv "$ROOT/.venv/bin/python" "$HERE/pods.py" --helms "$(IFS=,; echo "${HELMS[*]}")" \
  --scenarios "$(echo "$SCENARIOS" | tr ' ' ,)" "${per_helm[@]}" --image-tag "$tag" --results "$RESULTS"
