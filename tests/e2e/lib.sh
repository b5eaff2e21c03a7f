# shellcheck shell=bash
# Helpers shared by the e2e scripts (sourced). Expects HERE (tests/e2e) to be set by the caller.
ROOT=$(cd "$HERE/../.." && pwd)
E2E_TOOLS_DIR=${E2E_TOOLS_DIR:-$ROOT/.tools/e2e}; mkdir -p "$E2E_TOOLS_DIR"; E2E_TOOLS_DIR=$(cd "$E2E_TOOLS_DIR" && pwd); export E2E_TOOLS_DIR
E2E_BIN=$E2E_TOOLS_DIR/bin
export PATH=$E2E_BIN:$ROOT/.tools/bin:$PATH

say() { echo "e2e $(date +%T) $*"; }
fail() { echo "e2e $(date +%T) FAIL: $*" >&2; exit 1; }

cluster() { "$HERE/cluster.sh" "$@"; }
cluster_state() { echo "$ROOT/.tools/e2e/clusters/${E2E_CLUSTER:-main}"; }
use_cluster() {  # point KUBECONFIG at the cluster selected by E2E_CLUSTER
  export KUBECONFIG
  KUBECONFIG=$(cluster_state)/admin.kubeconfig
}

# wait_until TIMEOUT DESCRIPTION cmd...: polls cmd every 0.5 s; sets WAITED (seconds, 1 decimal)
wait_until() {
  local timeout=$1 what=$2; shift 2
  local s e
  s=$(date +%s.%N)
  while true; do
    if "$@" >/dev/null 2>&1; then break; fi
    e=$(date +%s.%N)
    if awk -v s="$s" -v e="$e" -v t="$timeout" 'BEGIN{exit !(e-s > t)}'; then
      echo "e2e: timed out after ${timeout}s waiting for: $what" >&2
      return 1
    fi
    sleep 0.5
  done
  e=$(date +%s.%N)
  WAITED=$(awk -v s="$s" -v e="$e" 'BEGIN{printf "%.1f", e-s}')
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# redis_start: a redis-server on a free port, registered in the cluster's pid dir so `cluster.sh down` stops it.
# Extra args go to redis-server (e.g. --requirepass PW, which rcli then uses). Sets REDIS_PORT.
redis_start() {
  local st
  st=$(cluster_state)
  command -v redis-server >/dev/null || fail "redis-server not installed (scripts/install-tools.sh --only redis)"
  REDIS_PORT=$(free_port)
  REDIS_AUTH=()
  if [ "${1:-}" = --requirepass ]; then REDIS_AUTH=(-a "$2" --no-auth-warning); fi
  mkdir -p "$st/redis" "$st/pids" "$st/logs"
  setsid redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$st/redis" --save "" --appendonly no \
    --logfile "$st/logs/redis.log" --daemonize no "$@" </dev/null >/dev/null 2>&1 9>&- &
  echo $! > "$st/pids/redis.pid"
  wait_until 10 "redis-server on :$REDIS_PORT" rcli ping || fail "redis-server did not start"
  say "redis-server on 127.0.0.1:$REDIS_PORT (pid $(cat "$st/pids/redis.pid"))"
}
rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "${REDIS_AUTH[@]}" "$@"; }

# deployment replicas (spec) as KEDA sets them
spec_replicas() { kubectl -n "$1" get deploy "$2" -o jsonpath='{.spec.replicas}'; }
replicas_eq() { [ "$(spec_replicas "$1" "$2")" = "$3" ]; }
replicas_ge() { local r; r=$(spec_replicas "$1" "$2"); [ -n "$r" ] && [ "$r" -ge "$3" ]; }
so_ready() {
  [ "$(kubectl -n "$1" get scaledobject "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
hpa_exists() { kubectl -n "$1" get hpa "keda-hpa-$2" >/dev/null 2>&1 || kubectl -n "$1" get hpa "$2" >/dev/null 2>&1; }

dump_state() {  # dump_state [namespace...]
  local ns st
  st=$(cluster_state)
  echo "===== e2e state dump (cluster ${E2E_CLUSTER:-main}) =====" >&2
  for ns in "$@"; do
    echo "--- namespace $ns: objects" >&2
    kubectl -n "$ns" get all,scaledobjects,triggerauthentications,hpa,secrets,configmaps,serviceaccounts -o wide >&2 2>&1 || true
    echo "--- namespace $ns: scaledobjects yaml" >&2
    kubectl -n "$ns" get scaledobjects -o yaml >&2 2>&1 | tail -80 || true
    echo "--- namespace $ns: events" >&2
    kubectl -n "$ns" get events --sort-by=.lastTimestamp >&2 2>&1 | tail -30 || true
  done
  "$HERE/cluster.sh" status >&2 2>&1 || true
  for c in keda keda-webhooks kube-controller-manager kube-apiserver redis; do
    [ -f "$st/logs/$c.log" ] || continue
    echo "--- $c log (tail)" >&2
    tail -40 "$st/logs/$c.log" >&2
  done
}
