#!/usr/bin/env bash
# `make e2e-pods`: the chart, as shipped with its KEDA dependency, on a one-node cluster whose pods really run.
#
#   0. tools: tests/e2e/build-tools.sh --pods (stamped; the shared cache makes a clean clone copy them), the node's
#      Debian packages (cluster.sh packages), the chart's dependency (scripts/chart-dependency.sh), helm3 + helm4
#   1. with E2E_PODS_REGISTRY=1, the release: a real OCI registry (CNCF distribution, .tools/bin/registry, plain HTTP
#      on 127.0.0.1) and `make release` to it (throwaway keys): the signed chart and the worker image, pinned by
#      digest in the chart's values; with the scenario `previous`, the previous chart version and its image too
#      (previous-release.sh)
#   2. tests/e2e/cluster.sh up --pods (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
#      kubelet, kube-proxy, bridge CNI, CoreDNS; the images of images.sh imported -- with E2E_PODS_REGISTRY=1 all but
#      the worker's, which the kubelet pulls from the registry: containerd's hosts.toml for it, E2E_NODE_REGISTRY)
#   3. KEDA from its real chart (charts/captcha-solver/charts/keda-<v>.tgz, the chart's own dependency): image
#      overrides only (the locally built images; pullPolicy Never as nothing can be pulled)
#   4. the scenarios (tests/e2e/pods.py) with helm3 and helm4, one release each, installing the archive that `helm
#      package` makes of the chart (it carries the KEDA dependency), or with E2E_PODS_REGISTRY=1
#      oci://127.0.0.1:PORT/charts/captcha-solver --version <chart version> --verify (the release's OpenPGP key)
#   5. teardown, also on failure or Ctrl-C: every process, mount, cgroup, the bridge, iptables/nft rules, sysctls,
#      the registry
#
# Env: E2E_HELMS="helm3 helm4", E2E_PODS_SCENARIOS="1 switch 3 4 2" (more: previous key upgrades checklist, not yet in
#      the default set: see tests/e2e/README.md; `upgrades` under Helm 4 only, `previous` needs E2E_PODS_REGISTRY=1),
#      E2E_PODS_SCENARIOS_HELM3 / _HELM4 (another list for one Helm; CI runs scenario 2, ~6 min, under Helm 4 only),
#      E2E_PODS_REGISTRY=1 (install from the registry, above), E2E_PODS_KEEP_GOING=1 (a failed scenario is reported
#      and the next one still runs; the run still fails), E2E_KEEP=1 (leave the cluster up: E2E_CLUSTER=pods
#      tests/e2e/cluster.sh down), E2E_PODS_CHART=<dir> (the scenarios against another copy of the chart; the image
#      is the release's with E2E_PODS_REGISTRY=1).
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
FROM_REGISTRY=${E2E_PODS_REGISTRY:-0}
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
  if [ -n "${REGISTRY_PID:-}" ]; then  # its own process group (setsid)
    kill -TERM -- "-$REGISTRY_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$REGISTRY_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$REGISTRY_PID" 2>/dev/null || true
    rm -rf "$RESULTS/registry/storage"
  fi
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

previous=() release=() node_registry=
if [ "$FROM_REGISTRY" = 1 ]; then
  "$ROOT/scripts/install-tools.sh" --only release >/dev/null
  say "== 1. registry and release"
  s=$SECONDS
  mkdir -p "$RESULTS/registry"
  REGISTRY=127.0.0.1:$(free_port)
  cat > "$RESULTS/registry/config.yml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $RESULTS/registry/storage}}
http: {addr: "$REGISTRY"}
EOF
  setsid "$ROOT/.tools/bin/registry" serve "$RESULTS/registry/config.yml" >"$RESULTS/registry/registry.log" 2>&1 </dev/null &
  REGISTRY_PID=$!
  wait_until 30 "the registry on $REGISTRY" curl -fsS "http://$REGISTRY/v2/" || fail "the registry did not start"
  RELEASE_KEYS=generate RELEASE_OUT=$RESULTS/release make -s -C "$ROOT" release REGISTRY="$REGISTRY" \
    >"$RESULTS/release.log" 2>&1 || { tail -30 "$RESULTS/release.log" >&2; fail "make release REGISTRY=$REGISTRY"; }
  say "make release REGISTRY=$REGISTRY in $((SECONDS - s))s: $(grep -o '"chart": "[^"]*"' "$RESULTS/release/release.json"), $(grep -o '"image": "[^"]*"' "$RESULTS/release/release.json")"
  release=(--release "$RESULTS/release/release.json") node_registry=$REGISTRY
  if grep -qw previous <<<"$SCENARIOS ${E2E_PODS_SCENARIOS_HELM3:-} ${E2E_PODS_SCENARIOS_HELM4:-}"; then
    s=$SECONDS
    "$HERE/previous-release.sh" "$REGISTRY" "$RESULTS/previous" 2>"$RESULTS/previous-release.log" >&2 \
      || { tail -30 "$RESULTS/previous-release.log" >&2; fail "tests/e2e/previous-release.sh"; }
    previous=(--previous "$RESULTS/previous/previous.json")
    say "the previous release in $((SECONDS - s))s: $(tail -1 "$RESULTS/previous-release.log")"
  fi
fi

say "== 2. cluster"
s=$SECONDS
E2E_NODE_REGISTRY=$node_registry cluster up --pods
use_cluster
say "cluster up in $((SECONDS - s))s"

say "== 3. KEDA from its chart ($(basename "$KEDA_CHART"))"
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

say "== 4. scenarios ($SCENARIOS) with ${HELMS[*]}"
chart=${E2E_PODS_CHART:-}
crictl=
if [ "$FROM_REGISTRY" = 1 ]; then
  # the chart as users get it: from the registry (a copy of the chart instead with E2E_PODS_CHART)
  say "chart: ${chart:-the release in $REGISTRY}"
  crictl="$E2E_BIN/crictl --runtime-endpoint unix://$(cluster_state)/node/containerd/containerd.sock --timeout 60s"
else
  tag=$(img worker); tag=${tag##*:}
  release=(--image-tag "$tag")
  # the archive `helm package` makes, which carries the KEDA dependency
  helm3 package "$ROOT/charts/captcha-solver" --destination "$RESULTS" >/dev/null
  chart=${chart:-$(ls "$RESULTS"/captcha-solver-*.tgz)}
  say "chart: ${chart#"$ROOT"/} (E2E_PODS_REGISTRY=1: from the registry)"
fi
per_helm=()
for h in "${HELMS[@]}"; do
  var=E2E_PODS_SCENARIOS_${h^^}
  [ -n "${!var:-}" ] && { per_helm+=(--scenarios-for "$h=$(echo "${!var}" | tr ' ' ,)"); say "scenarios for $h: ${!var}"; }
done
E2E_PODS_CHART=$chart E2E_PV_DIR=$(cluster_state)/pv E2E_CRICTL=$crictl \
  "$ROOT/.venv/bin/python" "$HERE/pods.py" --helms "$(IFS=,; echo "${HELMS[*]}")" \
  --scenarios "$(echo "$SCENARIOS" | tr ' ' ,)" "${per_helm[@]}" "${release[@]}" "${previous[@]}" --results "$RESULTS"
