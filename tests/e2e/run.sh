#!/usr/bin/env bash
# `make e2e`: the chart on a real kube-apiserver + kube-controller-manager + KEDA operator, all plain processes
# (tests/e2e/cluster.sh), with a local redis-server standing in for the in-cluster Redis.
#
#   0. build the tools once (tests/e2e/build-tools.sh; stamped, a rerun skips them)
#   4. bootstrap problem (first, on bare API servers without the KEDA CRDs), for helm v3 and v4:
#      a. chart + KEDA subchart + ScaledObject in one release  -> "no matches for kind ScaledObject", nothing applied
#      b. chart alone without KEDA                              -> the same error
#      c. the README's two-step path (keda.install=true,keda.enabled=false; then upgrade keda.enabled=true) works
#   1. `helm install -f values-examples/e2e-local.yaml` with helm v3 and v4 (one release each, own namespace and
#      queue): deployed, every object exists, ScaledObject Ready, HPA created, TriggerAuthentication accepted
#   2. worker at 0 replicas with empty lists; RPUSH {q}:pending -> >=1 (KEDA); empty lists -> 0 after cooldown
#   3. `helm upgrade --set captchaai.threads=...` -> ScaledObject maxReplicaCount, HPA maxReplicas and the pod template
#      change (new ReplicaSet), KEDA's replicas survive the upgrade, `helm history` has the revision, rollback works
#
# Releases 1-3 install the chart itself with its real KEDA dependency in charts/ (scripts/chart-dependency.sh;
# keda.install stays false: the operator runs as a process). For 4 a copy carries a stand-in `keda` subchart that
# ships exactly what makes the bootstrap problem -- the KEDA CRDs as templates (like kedacore/keda's chart,
# templates/crds/, gated on crds.install) -- because KEDA's own Deployments and APIService cannot run on this
# cluster without a node (`make e2e-pods` installs the real KEDA chart on a node that runs it).
#
# Env: E2E_HELMS="helm3 helm4" (which helms), E2E_KEEP=1 (leave the last cluster running for debugging),
#      E2E_SKIP_BOOTSTRAP=1 (skip scenario 4), E2E_TOOLS_DIR (where build-tools.sh keeps the binaries). Timings: printed at the end and in .tools/e2e/results/timings.tsv.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

CHART_SRC=$ROOT/charts/captcha-solver
VALUES=$ROOT/values-examples/e2e-local.yaml
read -r -a HELMS <<< "${E2E_HELMS:-helm3 helm4}"
RESULTS=$ROOT/.tools/e2e/results
WORK=$(mktemp -d "${TMPDIR:-/tmp}/captcha-e2e.XXXXXX")   # chart copies, helm outputs (copied to results/helm)
REDIS_PASSWORD=e2e-redis-pw-$RANDOM$RANDOM
CLUSTERS_USED=()
FAILED_NS=()
T0=$SECONDS
mkdir -p "$RESULTS"
# one run per checkout at a time (cluster names and results are per checkout)
exec 9>"$RESULTS/.run.lock"
flock -n 9 || fail "another tests/e2e/run.sh is running in this checkout"
: > "$RESULTS/timings.tsv"

# Helm with its own empty config/cache/data (never the user's).
export HELM_CACHE_HOME=$WORK/helm/cache HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data

record() {  # record NAME SECONDS [note]
  printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$RESULTS/timings.tsv"
  say "timing: $1 = ${2}s ${3:-}"
}

cleanup() {
  local rc=$? c left=""
  trap - EXIT INT TERM
  if [ $rc != 0 ]; then
    echo "e2e: FAILED (rc=$rc) after $((SECONDS - T0))s; state of cluster ${E2E_CLUSTER:-?}:" >&2
    dump_state "${FAILED_NS[@]}" 2>&1 | tail -250 >&2 || true
    save_logs
    echo "e2e: component logs in ${RESULTS#"$ROOT"/}/logs/${E2E_CLUSTER:-}/" >&2
  fi
  for c in "${CLUSTERS_USED[@]}"; do
    if [ "${E2E_KEEP:-0}" = 1 ] && [ "$c" = "${E2E_CLUSTER:-}" ]; then
      echo "e2e: E2E_KEEP=1: cluster $c left running; stop it with: E2E_CLUSTER=$c tests/e2e/cluster.sh down" >&2
      continue
    fi
    E2E_CLUSTER=$c "$HERE/cluster.sh" down || rc=1
    left+=$(E2E_CLUSTER=$c "$HERE/cluster.sh" pids 2>/dev/null || true)
  done
  if [ -n "$left" ]; then echo "e2e: stray processes left: $left" >&2; rc=1; fi
  rm -rf "$RESULTS/helm"; mkdir -p "$RESULTS/helm"; cp "$WORK"/*.out "$WORK"/*.history "$RESULTS/helm/" 2>/dev/null || true
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

new_cluster() {  # new_cluster NAME [--bare]
  export E2E_CLUSTER=$1; shift
  CLUSTERS_USED+=("$E2E_CLUSTER")
  local s=$SECONDS
  cluster up "$@"
  use_cluster
  record "cluster-up($E2E_CLUSTER${1:+ $1})" $((SECONDS - s))
}
save_logs() {  # keep the component logs of the current cluster in the results dir
  local c=${E2E_CLUSTER:-} st
  [ -n "$c" ] || return 0
  st=$(cluster_state)
  [ -d "$st/logs" ] || return 0
  rm -rf "$RESULTS/logs/$c"; mkdir -p "$RESULTS/logs"; cp -r "$st/logs" "$RESULTS/logs/$c" 2>/dev/null || true
}
end_cluster() {
  save_logs
  [ "${E2E_KEEP:-0}" = 1 ] && return 0
  cluster down
}

# ---------------------------------------------------------------- 0. tools, chart copies
step0() {
  say "== 0. tools"
  local s=$SECONDS
  "$HERE/build-tools.sh"
  record build-tools $((SECONDS - s)) "(0 when stamped)"
  local h
  for h in "${HELMS[@]}"; do
    command -v "$h" >/dev/null || fail "$h not found in .tools/bin (make tools / scripts/install-tools.sh)"
    say "$h: $("$h" version --short 2>/dev/null || "$h" version)"
  done
  [ -f "$CHART_SRC/Chart.yaml" ] || fail "chart missing: $CHART_SRC"
  [ -f "$VALUES" ] || fail "values example missing: $VALUES"

  # (a) the chart as users get it: its dependency in charts/
  "$ROOT/scripts/chart-dependency.sh"
  CHART_REAL=$CHART_SRC
  # (b) chart with a stand-in `keda` subchart holding the KEDA CRDs as templates (what the real one ships)
  CHART_SUB=$WORK/sub/captcha-solver
  mkdir -p "$WORK/sub"; cp -r "$CHART_SRC" "$CHART_SUB"
  rm -rf "$CHART_SUB/charts" "$CHART_SUB/Chart.lock"
  make_keda_standin "$CHART_SUB/charts/keda" \
    "$(awk '/^dependencies:/{d=1} d && /^ *version:/{gsub(/["'"'"' ]/,"",$2); print $2; exit}' "$CHART_SRC/Chart.yaml")"
}

make_keda_standin() {  # make_keda_standin DIR VERSION
  local dir=$1 version=${2:-2.20.2} f
  mkdir -p "$dir/templates/crds"
  cat > "$dir/Chart.yaml" <<EOF
apiVersion: v2
name: keda
description: e2e stand-in for kedacore/keda $version -- only its CRDs (templates/crds, as upstream); the operator runs as a process
type: application
version: $version
appVersion: $version
kubeVersion: ">=v1.23.0-0"
EOF
  printf 'crds:\n  install: true\n' > "$dir/values.yaml"
  for f in "$E2E_TOOLS_DIR"/crds/*.yaml; do
    { echo '{{- if .Values.crds.install }}'; cat "$f"; echo '{{- end }}'; } > "$dir/templates/crds/crd-$(basename "$f")"
  done
}

# ---------------------------------------------------------------- helpers on releases
helm_install() {  # helm_install HELM RELEASE NS CHART args...  (output to $WORK/<release>.out)
  local helm=$1 rel=$2 ns=$3 chart=$4; shift 4
  "$helm" install "$rel" "$chart" -n "$ns" --create-namespace -f "$VALUES" "$@" >"$WORK/$rel.out" 2>&1
}
common_sets() {  # common_sets QUEUE -> --set args pointing the chart at our redis-server
  echo "--set externalRedis.port=$REDIS_PORT --set externalRedis.password=$REDIS_PASSWORD --set queue.name=$1"
}

assert_release_objects() {  # every object of the release's manifest exists in the API server
  local helm=$1 rel=$2 ns=$3 n_manifest n_found
  "$helm" get manifest "$rel" -n "$ns" > "$WORK/$rel.manifest.yaml"
  n_manifest=$(grep -c '^kind: ' "$WORK/$rel.manifest.yaml" || true)
  kubectl get -f "$WORK/$rel.manifest.yaml" -o name > "$WORK/$rel.objects" 2>"$WORK/$rel.objects.err" \
    || { cat "$WORK/$rel.objects.err" >&2; fail "$rel: some manifest objects are missing in the API server"; }
  n_found=$(wc -l < "$WORK/$rel.objects")
  [ "$n_found" = "$n_manifest" ] || fail "$rel: manifest has $n_manifest objects, API server has $n_found"
  say "$rel: all $n_found objects of the release exist: $(sed 's|.*/||;' "$WORK/$rel.objects" | sort -u | tr '\n' ' ')"
  say "$rel: kinds: $(cut -d/ -f1 "$WORK/$rel.objects" | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')"
}

release_status() { "$1" status "$2" -n "$3" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["info"]["status"])'; }

so_field() { kubectl -n "$1" get scaledobject "$2" -o jsonpath="$3"; }
hpa_max() { kubectl -n "$1" get hpa "keda-hpa-$2" -o jsonpath='{.spec.maxReplicas}'; }
so_max_is() { [ "$(so_field "$1" "$2" '{.spec.maxReplicaCount}')" = "$3" ]; }
hpa_max_is() { [ "$(hpa_max "$1" "$2")" = "$3" ]; }
tmpl_hash() {  # pod-template-hash of the newest ReplicaSet of a deployment
  kubectl -n "$1" get rs -l "app.kubernetes.io/instance=$2" --sort-by=.metadata.creationTimestamp \
    -o jsonpath='{range .items[*]}{.metadata.labels.pod-template-hash}{"\n"}{end}' | tail -1
}
newest_rs_is_not() { local h; h=$(tmpl_hash "$1" "$2"); [ -n "$h" ] && [ "$h" != "$3" ]; }
rs_count() { kubectl -n "$1" get rs -l "app.kubernetes.io/instance=$2" -o name | wc -l; }

wait_keda_ready() {  # wait_keda_ready NS SO
  wait_until 90 "ScaledObject $1/$2 Ready" so_ready "$1" "$2" || {
    kubectl -n "$1" describe scaledobject "$2" | tail -30 >&2; fail "ScaledObject $1/$2 not Ready"; }
  local r=$WAITED
  wait_until 60 "HPA keda-hpa-$2" hpa_exists "$1" "$2" || fail "KEDA created no HPA for $1/$2"
  say "ScaledObject $1/$2 Ready after ${r}s; HPA keda-hpa-$2 exists (maxReplicas $(hpa_max "$1" "$2"))"
}

# ---------------------------------------------------------------- 4. bootstrap
scenario4() {
  local helm=$1 ns rel out
  say "== 4. bootstrap problem with $helm (bare API server, no KEDA CRDs)"
  new_cluster "boot-$helm" --bare
  redis_start --requirepass "$REDIS_PASSWORD"
  kubectl get crd scaledobjects.keda.sh >/dev/null 2>&1 && fail "bare cluster already has the KEDA CRDs"

  # 4a: subchart (CRDs as templates) + ScaledObject in one release
  rel=boot-$helm; ns=e2e-boot
  FAILED_NS=("$ns")
  # shellcheck disable=SC2046
  if helm_install "$helm" "$rel" "$ns" "$CHART_SUB" $(common_sets boot) --set keda.install=true --set keda.enabled=true; then
    cat "$WORK/$rel.out"; fail "4a: install of KEDA subchart + ScaledObject on a bare cluster unexpectedly succeeded"
  fi
  cp "$WORK/$rel.out" "$WORK/$rel.4a-error.out"
  out=$(cat "$WORK/$rel.out")
  say "4a ($helm, keda.install=true keda.enabled=true) failed as expected:"
  sed 's/^/      | /' "$WORK/$rel.out"
  grep -q 'no matches for kind "ScaledObject" in version "keda.sh/v1alpha1"' <<<"$out" \
    || fail "4a: unexpected error (want: no matches for kind \"ScaledObject\" in version \"keda.sh/v1alpha1\")"
  if kubectl get crd scaledobjects.keda.sh >/dev/null 2>&1; then fail "4a: the KEDA CRDs were applied after all"; fi
  [ "$(kubectl -n "$ns" get all,configmaps,secrets -o name 2>/dev/null | grep -cv 'kube-root-ca\|^$' || true)" = 0 ] \
    || { kubectl -n "$ns" get all,configmaps,secrets >&2; fail "4a: objects were applied although the install failed"; }
  local recorded
  recorded=$("$helm" list --all -n "$ns" -q 2>/dev/null || "$helm" list -n "$ns" -q)   # helm 4 has no --all
  [ -z "$recorded" ] || fail "4a: a release was recorded although nothing was applied: $recorded"
  say "4a: nothing was applied (no CRDs, no objects) and no release was recorded"
  check_readme_quote "$WORK/$rel.out"

  # 4b: chart alone (KEDA not installed at all)
  # shellcheck disable=SC2046
  if helm_install "$helm" "nokeda-$helm" "$ns" "$CHART_REAL" $(common_sets boot); then
    fail "4b: install with keda.enabled=true on a cluster without KEDA CRDs unexpectedly succeeded"
  fi
  say "4b ($helm, no KEDA, keda.enabled=true default) failed as expected: $(grep -m1 'Error' "$WORK/nokeda-$helm.out")"
  grep -q 'no matches for kind "ScaledObject"' "$WORK/nokeda-$helm.out" || { cat "$WORK/nokeda-$helm.out"; fail "4b: unexpected error"; }

  # 4c: the documented two-step path
  local s=$SECONDS
  # shellcheck disable=SC2046
  helm_install "$helm" "$rel" "$ns" "$CHART_SUB" $(common_sets boot) --set keda.install=true --set keda.enabled=false \
    || { cat "$WORK/$rel.out"; fail "4c step 1 (keda.install=true keda.enabled=false) failed"; }
  [ "$(release_status "$helm" "$rel" "$ns")" = deployed ] || fail "4c step 1: release not deployed"
  kubectl wait --for condition=established --timeout=60s crd/scaledobjects.keda.sh crd/triggerauthentications.keda.sh >/dev/null \
    || fail "4c step 1: KEDA CRDs not established"
  grep -q 'helm upgrade .*--reset-then-reuse-values --set keda.enabled=true' "$WORK/$rel.out" \
    || say "4c: note: NOTES.txt did not print the step-2 command"
  say "4c step 1 deployed: KEDA CRDs installed by the (stand-in) subchart, worker with fixed replicas=$(spec_replicas "$ns" "$(worker_name "$rel")")"
  cluster keda --no-crds   # the operator of the subchart, as a process
  "$helm" upgrade "$rel" "$CHART_SUB" -n "$ns" --reset-then-reuse-values --set keda.enabled=true >"$WORK/$rel.up.out" 2>&1 \
    || { cat "$WORK/$rel.up.out"; fail "4c step 2 (upgrade --reset-then-reuse-values --set keda.enabled=true) failed"; }
  local so; so=$(worker_name "$rel")
  wait_keda_ready "$ns" "$so"
  wait_until 60 "worker scaled to 0 by KEDA" replicas_eq "$ns" "$so" 0 || fail "4c: KEDA did not take the worker to 0"
  record "bootstrap-two-step($helm)" $((SECONDS - s))
  say "4c ($helm): two-step path works: step 1 deployed, step 2 ScaledObject Ready, worker at 0"
  rcli FLUSHALL >/dev/null
  FAILED_NS=()
  end_cluster
}

worker_name() {  # deployment / ScaledObject name of a release (fullname rule of the chart)
  case $1 in *captcha-solver*) echo "$1-worker" ;; *) echo "$1-captcha-solver-worker" ;; esac
}

check_readme_quote() {  # the chart README quotes the bootstrap error: it must be what the API server really says
  local outfile=$1 readme=$CHART_SRC/README.md
  [ -f "$readme" ] || { say "no chart README: quote not checked"; return 0; }
  python3 - "$readme" "$outfile" <<'PY' || fail "4a: the chart README's quoted bootstrap error differs from the real one (above)"
import re, sys
readme, out = open(sys.argv[1]).read(), open(sys.argv[2]).read()
norm = lambda t: re.sub(r'(name|namespace): "[^"]*"', r'\1: "X"', t).strip()
blocks = [b for b in re.findall(r"```[a-z]*\n(.*?)```", readme, re.S) if "resource mapping not found" in b]
real = norm("\n".join(l for l in out.splitlines() if not re.match(r"^(W\d{4} |Warning: )", l)))
if not blocks:
    print("      README quotes no 'resource mapping not found' error"); sys.exit(0)
if any(norm(b) == real for b in blocks):
    print("      the chart README quotes this error exactly (up to release/namespace names)"); sys.exit(0)
print("      README quote:\n        " + norm(blocks[0]).replace("\n", "\n        "))
print("      real error:\n        " + real.replace("\n", "\n        "))
sys.exit(1)
PY
}

# ---------------------------------------------------------------- 1-3 on a cluster with KEDA
scenario1() {  # scenario1 HELM REL NS QUEUE
  local helm=$1 rel=$2 ns=$3 q=$4 s=$SECONDS so
  say "== 1. $helm install $rel (-f values-examples/e2e-local.yaml) in $ns"
  FAILED_NS+=("$ns")
  # the namespace enforces the Pod Security "restricted" profile: the API server rejects non-compliant pods
  kubectl create namespace "$ns" >/dev/null
  kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted >/dev/null
  if kubectl -n "$ns" run psa-probe --image=busybox --privileged --dry-run=server >/dev/null 2>&1; then
    fail "1: Pod Security admission is not enforcing in $ns (a privileged pod was admitted)"
  fi
  # shellcheck disable=SC2046
  helm_install "$helm" "$rel" "$ns" "$CHART_REAL" $(common_sets "$q") \
    || { cat "$WORK/$rel.out"; fail "1: $helm install failed"; }
  record "helm-install($helm)" $((SECONDS - s))
  if grep -q 'violate PodSecurity' "$WORK/$rel.out"; then cat "$WORK/$rel.out"; fail "1: the worker pod template violates Pod Security restricted"; fi
  [ "$(release_status "$helm" "$rel" "$ns")" = deployed ] || fail "1: $rel not deployed"
  assert_release_objects "$helm" "$rel" "$ns"
  so=$(worker_name "$rel")
  kubectl -n "$ns" get scaledobject "$so" >/dev/null || fail "1: no ScaledObject $so"
  kubectl -n "$ns" get triggerauthentication "$so" >/dev/null || fail "1: no TriggerAuthentication $so"
  s=$SECONDS
  wait_keda_ready "$ns" "$so"
  record "so-ready+hpa($helm)" $((SECONDS - s))
  # KEDA must have resolved the password through the TriggerAuthentication (redis runs with requirepass)
  local ready_msg
  ready_msg=$(so_field "$ns" "$so" '{.status.conditions[?(@.type=="Ready")].message}')
  say "1: ScaledObject status: Ready ($ready_msg), triggers: $(so_field "$ns" "$so" '{.status.externalMetricNames}')"
  if kubectl get validatingwebhookconfiguration keda-admission >/dev/null 2>&1; then
    # the chart's objects passed KEDA's admission webhooks (failurePolicy Fail); prove the webhook really validates
    local dup
    if dup=$(printf '%s\n' "apiVersion: keda.sh/v1alpha1" "kind: ScaledObject" \
          "metadata: {name: e2e-duplicate, namespace: $ns}" "spec:" "  scaleTargetRef: {name: $so}" \
          "  triggers: [{type: redis, metadata: {address: \"127.0.0.1:$REDIS_PORT\", listName: \"{$q}:pending\"}}]" \
          | kubectl -n "$ns" create -f - 2>&1); then
      fail "1: KEDA's webhook accepted a second ScaledObject for $so"
    fi
    grep -q 'denied the request' <<<"$dup" || fail "1: unexpected error for a duplicate ScaledObject: $dup"
    say "1: ScaledObject + TriggerAuthentication passed KEDA's admission webhooks; a duplicate ScaledObject is denied: ${dup#*denied the request: }"
  fi
}

scenario2() {  # scenario2 HELM REL NS QUEUE
  local helm=$1 rel=$2 ns=$3 q=$4 so
  so=$(worker_name "$rel")
  say "== 2. scale from/to zero ($rel, queue {$q})"
  wait_until 60 "worker at 0 with empty lists" replicas_eq "$ns" "$so" 0 \
    || fail "2: worker not at 0 replicas with empty lists (replicas=$(spec_replicas "$ns" "$so"))"
  say "2: worker at 0 replicas with empty lists"
  local poll cool
  poll=$(so_field "$ns" "$so" '{.spec.pollingInterval}'); cool=$(so_field "$ns" "$so" '{.spec.cooldownPeriod}')
  rcli RPUSH "{$q}:pending" t1 t2 t3 >/dev/null
  wait_until 90 "KEDA scales 0->1" replicas_ge "$ns" "$so" 1 || fail "2: KEDA did not scale $so up from 0"
  record "scale-0-to-1($helm)" "$WAITED" "(pollingInterval ${poll}s)"
  wait_until 30 "pods created by the ReplicaSet" bash -c "kubectl -n $ns get pods -l app.kubernetes.io/instance=$rel -o name | grep -q ." \
    || fail "2: deployment scaled but no pod was created (Pod Security restricted rejected it? see the ReplicaSet events)"
  say "2: worker at $(spec_replicas "$ns" "$so") replica(s), $(kubectl -n "$ns" get pods -l app.kubernetes.io/instance="$rel" --no-headers | wc -l) pod(s) admitted under Pod Security 'restricted' (Pending: no nodes)"
  # in flight keeps it up: move the items to processing, pending empty -> must stay >= 1 past the cooldown
  rcli RENAME "{$q}:pending" "{$q}:processing" >/dev/null
  sleep $((cool + 2 * poll + 2))
  replicas_ge "$ns" "$so" 1 || fail "2: scaled to 0 while {$q}:processing still had items (processing trigger?)"
  say "2: still $(spec_replicas "$ns" "$so") replica(s) $((cool + 2 * poll + 2))s after pending emptied: the processing list keeps it"
  rcli DEL "{$q}:pending" "{$q}:processing" >/dev/null
  wait_until $((cool + 90)) "KEDA scales 1->0 after the cooldown" replicas_eq "$ns" "$so" 0 \
    || fail "2: KEDA did not scale $so back to 0"
  record "scale-1-to-0($helm)" "$WAITED" "(cooldownPeriod ${cool}s)"
}

scenario3() {  # scenario3 HELM REL NS QUEUE
  local helm=$1 rel=$2 ns=$3 q=$4 so conc threads0 threads1 max0 max1 hash0 s
  so=$(worker_name "$rel")
  say "== 3. $helm upgrade / history / rollback ($rel)"
  conc=$(helm_value "$helm" "$rel" "$ns" worker.concurrency)
  threads0=$(helm_value "$helm" "$rel" "$ns" captchaai.threads)
  threads1=$((threads0 * 2))
  max0=$((threads0 / conc)); max1=$((threads1 / conc))
  so_max_is "$ns" "$so" "$max0" || fail "3: ScaledObject maxReplicaCount $(so_field "$ns" "$so" '{.spec.maxReplicaCount}') != $max0"
  hpa_max_is "$ns" "$so" "$max0" || fail "3: HPA maxReplicas $(hpa_max "$ns" "$so") != $max0"
  wait_until 30 "a ReplicaSet exists" bash -c "[ -n \"\$(kubectl -n $ns get rs -l app.kubernetes.io/instance=$rel -o name)\" ]" \
    || fail "3: no ReplicaSet for $rel"
  hash0=$(tmpl_hash "$ns" "$rel")
  local ann0; ann0=$(tmpl_annotations "$ns" "$so")
  # KEDA holds the worker at 1 during the upgrade: the upgrade must not reset its replicas
  rcli RPUSH "{$q}:pending" u1 >/dev/null
  wait_until 60 "scaled to 1 before upgrade" replicas_ge "$ns" "$so" 1 || fail "3: not scaled up before the upgrade"
  s=$SECONDS
  "$helm" upgrade "$rel" "$CHART_REAL" -n "$ns" --reset-then-reuse-values --set captchaai.threads="$threads1" >"$WORK/$rel.up.out" 2>&1 \
    || { cat "$WORK/$rel.up.out"; fail "3: helm upgrade failed"; }
  record "helm-upgrade($helm)" $((SECONDS - s))
  so_max_is "$ns" "$so" "$max1" || fail "3: ScaledObject maxReplicaCount not $max1 after upgrade"
  wait_until 60 "HPA maxReplicas $max1" hpa_max_is "$ns" "$so" "$max1" || fail "3: HPA maxReplicas $(hpa_max "$ns" "$so") != $max1"
  say "3: threads $threads0 -> $threads1: ScaledObject maxReplicaCount $max0 -> $max1, HPA maxReplicas -> $max1 after ${WAITED}s"
  wait_until 60 "new ReplicaSet (template changed)" newest_rs_is_not "$ns" "$rel" "$hash0" \
    || fail "3: pod template unchanged after the threads upgrade (no new ReplicaSet)"
  say "3: pod template changed: ReplicaSet $hash0 -> $(tmpl_hash "$ns" "$rel") ($(rs_count "$ns" "$rel") ReplicaSets); env CAPTCHAAI_THREADS in ConfigMap: $(kubectl -n "$ns" get cm "$so" -o jsonpath='{.data.CAPTCHAAI_THREADS}' 2>/dev/null || echo '?')"
  replicas_ge "$ns" "$so" 1 || fail "3: helm upgrade reset KEDA's replicas to $(spec_replicas "$ns" "$so")"
  say "3: replicas still $(spec_replicas "$ns" "$so") after the upgrade (the chart re-applies the live count)"
  "$helm" history "$rel" -n "$ns" > "$WORK/$rel.history"
  sed 's/^/      | /' "$WORK/$rel.history"
  [ "$(tail -n +2 "$WORK/$rel.history" | wc -l)" = 2 ] || fail "3: helm history does not show 2 revisions"
  grep -qE '^2\s.*deployed' "$WORK/$rel.history" || fail "3: revision 2 not deployed"
  s=$SECONDS
  "$helm" rollback "$rel" 1 -n "$ns" >"$WORK/$rel.rb.out" 2>&1 || { cat "$WORK/$rel.rb.out"; fail "3: helm rollback failed"; }
  record "helm-rollback($helm)" $((SECONDS - s))
  so_max_is "$ns" "$so" "$max0" || fail "3: ScaledObject maxReplicaCount not back to $max0 after rollback"
  wait_until 60 "HPA maxReplicas back to $max0" hpa_max_is "$ns" "$so" "$max0" || fail "3: HPA maxReplicas not back to $max0"
  wait_until 60 "template back to revision 1" tmpl_annotations_are "$ns" "$so" "$ann0" \
    || fail "3: pod template annotations not back to revision 1: $(tmpl_annotations "$ns" "$so") (want $ann0)"
  "$helm" history "$rel" -n "$ns" > "$WORK/$rel.history"
  grep -qE '^3\s.*deployed.*Rollback to 1' "$WORK/$rel.history" || { cat "$WORK/$rel.history"; fail "3: history lacks 'Rollback to 1'"; }
  [ "$(release_status "$helm" "$rel" "$ns")" = deployed ] || fail "3: release not deployed after rollback"
  so_ready "$ns" "$so" || fail "3: ScaledObject not Ready after rollback"
  replicas_ge "$ns" "$so" 1 || fail "3: rollback reset KEDA's replicas"
  say "3: rollback to 1 -> revision 3 deployed; maxReplicaCount/HPA back to $max0; template back; replicas kept"
  rcli DEL "{$q}:pending" >/dev/null
}

helm_value() {  # computed value of a release
  "$1" get values "$2" -n "$3" --all -o json | python3 -c "import json,sys; v=json.load(sys.stdin)
for k in '$4'.split('.'): v=v[k]
print(v)"
}
tmpl_annotations() { kubectl -n "$1" get deploy "$2" -o jsonpath='{.spec.template.metadata.annotations}'; }
tmpl_annotations_are() { [ "$(tmpl_annotations "$1" "$2")" = "$3" ]; }

# ---------------------------------------------------------------- main
step0
if [ "${E2E_SKIP_BOOTSTRAP:-0}" != 1 ]; then
  for h in "${HELMS[@]}"; do scenario4 "$h"; done
fi

say "== cluster with KEDA for scenarios 1-3"
new_cluster main
redis_start --requirepass "$REDIS_PASSWORD"
for h in "${HELMS[@]}"; do
  scenario1 "$h" "e2e-$h" "e2e-$h" "q$h"
done
for h in "${HELMS[@]}"; do
  scenario2 "$h" "e2e-$h" "e2e-$h" "q$h"
  scenario3 "$h" "e2e-$h" "e2e-$h" "q$h"
done
FAILED_NS=()
save_logs

say "== warnings the API server sent to helm, and KEDA operator errors (all clusters)"
api_warn='warnings\.go|level=WARN|^W[0-9]{4} |^Warning: '
grep -hE "$api_warn" "$WORK"/*.out | sort | uniq -c | sed 's/^/   /' || true
grep -qhE "$api_warn" "$WORK"/*.out || say "no API server warnings in any helm output"
for f in "$RESULTS"/logs/*/keda.log "$RESULTS"/logs/*/keda-webhooks.log; do
  [ -f "$f" ] || continue
  n=$(grep -c 'ERROR' "$f" || true)
  say "$(basename "$(dirname "$f")")/$(basename "$f"): $n ERROR lines"
  grep 'ERROR' "$f" | sed -E 's/^[^ ]+ +//' | cut -c1-220 | sort | uniq -c | sort -rn | head -5 | sed 's/^/   /' || true
done

say "== summary (${RESULTS#"$ROOT"/}/timings.tsv)"
awk -F'\t' '{printf "   %-34s %7ss  %s\n", $1, $2, $3}' "$RESULTS/timings.tsv"
say "e2e passed in $((SECONDS - T0))s"
