#!/usr/bin/env bash
# A throw-away Kubernetes control plane made of plain processes on 127.0.0.1 (no containers, no kubelet):
#   etcd -> kube-apiserver (generated certs, RBAC, admin client cert in system:masters)
#        -> kube-controller-manager (deployment, replicaset, garbage-collector, namespace, serviceaccount controllers)
#        -> KEDA CRDs + KEDA operator + KEDA admission webhooks (out of cluster; E2E_KEDA_WEBHOOKS=0: no webhooks).
# Pods are created by the ReplicaSets but stay Pending: there is no scheduler and no node.
# With --pods (`make e2e-pods`) it is a one-node cluster that runs pods instead: the API server on the node IP of a
# pod bridge, kube-controller-manager with all its controllers (HPA, node lifecycle, endpoints, PV binder, ...),
# kube-scheduler, the node of node.sh (containerd + runc, bridge CNI, kubelet, kube-proxy in iptables mode), the
# images of images.sh imported (with E2E_NODE_REGISTRY all but the worker's: the kubelet pulls it from the
# release's registry), and CoreDNS (addons/coredns.yaml). No KEDA processes: KEDA comes from its chart.
#
# Usage: tests/e2e/cluster.sh up [--bare]   start everything (--bare: no KEDA CRDs and no KEDA operator)
#        tests/e2e/cluster.sh up --pods     the one-node cluster that runs pods (root; see node.sh)
#        tests/e2e/cluster.sh packages      install the node's Debian packages (apt-get)
#        tests/e2e/cluster.sh keda [--no-crds]  apply the KEDA CRDs (unless already there, e.g. from a chart) and
#                                           start the operator (after `up --bare`)
#        tests/e2e/cluster.sh down          stop every process of this cluster and delete its state
#        tests/e2e/cluster.sh env           print `export KUBECONFIG=...` lines (eval "$(tests/e2e/cluster.sh env)")
#        tests/e2e/cluster.sh status        pid / liveness of each component
#        tests/e2e/cluster.sh logs [component] [lines]
# E2E_APISERVER_ARGS: extra kube-apiserver flags (word-split).
# E2E_CLUSTER=name selects an independent cluster (default "main"); its state lives in .tools/e2e/clusters/<name>/.
# Binaries come from ${E2E_TOOLS_DIR:-.tools/e2e}/bin (tests/e2e/build-tools.sh). `up` tears down what it started if it fails.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TOOLS_DIR=${E2E_TOOLS_DIR:-$ROOT/.tools/e2e}
BIN=$TOOLS_DIR/bin
CRDS=$TOOLS_DIR/crds
NAME=${E2E_CLUSTER:-main}
STATE=$ROOT/.tools/e2e/clusters/$NAME
PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids
KUBECONFIG_FILE=$STATE/admin.kubeconfig
KEDA_NS=keda
STOP_TIMEOUT=${E2E_STOP_TIMEOUT:-15}
# shellcheck source=node.sh
. "$HERE/node.sh"

log() { echo "cluster[$NAME] $(date +%T) $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# start NAME cmd...: runs cmd in its own session/process group (pid == pgid), logs to $LOGS/NAME.log
start_proc() {
  local name=$1; shift
  mkdir -p "$LOGS" "$PIDS"
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  echo $! > "$PIDS/$name.pid"
  log "started $name (pid $!)"
}

alive() { local f=$PIDS/$1.pid; [ -f "$f" ] && pg_alive "$(cat "$f")"; }
# a process group is alive while it has a member that is not a zombie
pg_alive() { ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {found=1} END {exit !found}'; }

# Processes of this cluster: everything whose command line mentions the state dir (every component gets a path
# under it as an argument), plus the process groups recorded in the pid files.
cluster_pids() {
  ps -eo pid=,args= | awk -v d="$STATE/" -v self=$$ 'index($0, d) && $1 != self && $2 !~ /^(awk|ps|grep)$/ {print $1}'
}

stop_all() {
  local f pg n
  # the node first (its pods through the CRI, then kubelet, kube-proxy, containerd, mounts, cgroups, network)
  local node_rc=0
  node_down || node_rc=1
  # reverse start order: keda, scheduler, kcm, apiserver, etcd (and anything else registered, e.g. redis)
  for n in keda-webhooks keda kube-scheduler kube-controller-manager kube-apiserver etcd; do
    f=$PIDS/$n.pid
    [ -f "$f" ] || continue
    pg=$(cat "$f")
    kill -TERM -- "-$pg" 2>/dev/null || true
    for _ in $(seq 1 $((STOP_TIMEOUT * 10))); do pg_alive "$pg" || break; sleep 0.1; done
    if pg_alive "$pg"; then log "$n did not stop on TERM, killing"; kill -KILL -- "-$pg" 2>/dev/null || true; fi
    rm -f "$f"
  done
  for f in "$PIDS"/*.pid; do
    [ -f "$f" ] || continue
    pg=$(cat "$f"); kill -TERM -- "-$pg" 2>/dev/null || true; sleep 0.5; kill -KILL -- "-$pg" 2>/dev/null || true
    rm -f "$f"
  done
  local left
  left=$(cluster_pids || true)
  if [ -n "$left" ]; then
    log "stray processes after stop, killing: $(echo $left)"
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    sleep 0.5
  fi
  left=$(cluster_pids || true)
  [ -z "$left" ] || { log "processes still alive: $(ps -o pid=,args= -p "$(echo $left | tr ' ' ,)")"; return 1; }
  return $node_rc
}

gen_pki() {
  mkdir -p "$PKI"
  local o="openssl"
  (
    cd "$PKI"
    $o ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    $o req -x509 -new -key ca.key -sha256 -days 3 -subj "/CN=e2e-ca" -out ca.crt 2>/dev/null
    leaf() {  # leaf NAME SUBJ EXT
      $o ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
      $o req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      printf '%s\n' "$3" > "$1.ext"
      $o x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3 -sha256 -extfile "$1.ext" \
        -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    leaf apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature,keyEncipherment"
    leaf admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature,keyEncipherment"
    # the aggregator's client cert towards extension API servers (KEDA's metrics apiserver)
    leaf front-proxy-client "/CN=front-proxy-client" "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature,keyEncipherment"
    # KEDA's gRPC metrics service reads ca.crt/tls.crt/tls.key from --cert-dir
    leaf keda "/CN=keda-operator" "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:keda-operator.keda.svc
extendedKeyUsage=serverAuth,clientAuth
keyUsage=critical,digitalSignature,keyEncipherment"
    mkdir -p keda-certs
    cp ca.crt keda-certs/ca.crt; cp keda.crt keda-certs/tls.crt; cp keda.key keda-certs/tls.key
    # service-account token signing key (RSA, like hack/local-up-cluster.sh)
    $o genrsa -out sa.key 2048 2>/dev/null
    $o rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() {
  local port=$1 host=${2:-127.0.0.1}
  cat > "$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://$host:$port
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI/admin.crt")
    client-key-data: $(base64 -w0 "$PKI/admin.key")
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
  chmod 600 "$KUBECONFIG_FILE"
}

wait_http() {  # wait_http NAME URL TIMEOUT [curl args]
  local name=$1 url=$2 timeout=$3; shift 3
  local start=$SECONDS
  until curl -fsS --max-time 2 "$@" "$url" >/dev/null 2>&1; do
    alive "$name" || { tail -30 "$LOGS/$name.log" >&2; die "$name exited while waiting for $url"; }
    [ $((SECONDS - start)) -lt "$timeout" ] || { tail -30 "$LOGS/$name.log" >&2; die "$name: $url not ready after ${timeout}s"; }
    sleep 0.3
  done
}

start_keda() {  # start_keda [--no-crds]
  [ -f "$STATE/ports" ] || die "cluster $NAME is not up"
  [ -x "$BIN/keda" ] || die "$BIN/keda missing: run tests/e2e/build-tools.sh"
  if [ "${1:-}" != --no-crds ]; then
    log "applying KEDA CRDs from ${CRDS#"$ROOT"/}"
    kc apply --server-side -f "$CRDS" >/dev/null
  fi
  kc wait --for condition=established --timeout=60s -f "$CRDS" >/dev/null
  kc create namespace "$KEDA_NS" --dry-run=client -o yaml | kc apply -f - >/dev/null
  local mport hport gport
  mport=$(free_port); hport=$(free_port); gport=$(free_port)
  echo "KEDA_HEALTH_PORT=$hport KEDA_METRICS_PORT=$mport KEDA_GRPC_PORT=$gport" >> "$STATE/ports"
  # WATCH_NAMESPACE must be set (empty = all namespaces); KEDA_CLUSTER_OBJECT_NAMESPACE avoids reading the
  # in-cluster namespace file; cert rotation off (it would exit and wait for kubelet-mounted certs).
  start_proc keda env WATCH_NAMESPACE="" KEDA_CLUSTER_OBJECT_NAMESPACE="$KEDA_NS" POD_NAMESPACE="$KEDA_NS" \
    KUBECONFIG="$KUBECONFIG_FILE" \
    "$BIN/keda" --leader-elect=false --enable-cert-rotation=false --cert-dir="$PKI/keda-certs" \
    --ca-dir="$PKI/keda-ca-none" \
    --enable-webhook-patching=false --enable-apiservice-patching=false \
    --metrics-bind-address="127.0.0.1:$mport" --health-probe-bind-address="127.0.0.1:$hport" \
    --metrics-service-bind-address="127.0.0.1:$gport" --zap-log-level=info --zap-encoder=console
  wait_http keda "http://127.0.0.1:$hport/readyz" 90
  log "KEDA operator ready (health :$hport, gRPC metrics service :$gport)"
  [ "${E2E_KEDA_WEBHOOKS:-1}" = 1 ] && start_keda_webhooks
  return 0
}

# KEDA's admission webhooks (cmd/webhooks) as a process, registered with KEDA's own ValidatingWebhookConfiguration
# rewritten to call https://127.0.0.1:<port>/<path> with our CA, and failurePolicy Fail (KEDA ships Ignore) so that
# a rejection -- or an unreachable webhook -- fails the request instead of passing silently.
start_keda_webhooks() {
  [ -x "$BIN/keda-webhooks" ] || die "$BIN/keda-webhooks missing: run tests/e2e/build-tools.sh"
  local wport whport
  wport=$(free_port); whport=$(free_port)
  echo "KEDA_WEBHOOK_PORT=$wport" >> "$STATE/ports"
  # note: controller-runtime's webhook server takes no bind host from flags; it listens on all interfaces
  start_proc keda-webhooks env KEDA_CLUSTER_OBJECT_NAMESPACE="$KEDA_NS" POD_NAMESPACE="$KEDA_NS" \
    KUBECONFIG="$KUBECONFIG_FILE" \
    "$BIN/keda-webhooks" --cert-dir="$PKI/keda-certs" --port="$wport" \
    --metrics-bind-address=0 --health-probe-bind-address="127.0.0.1:$whport" --zap-log-level=info --zap-encoder=console
  wait_http keda-webhooks "http://127.0.0.1:$whport/readyz" 60
  python3 - "$TOOLS_DIR/keda-webhooks.yaml" "$wport" "$PKI/ca.crt" > "$STATE/keda-webhooks.yaml" <<'PY'
import base64, re, sys
text, port, ca = open(sys.argv[1]).read(), sys.argv[2], base64.b64encode(open(sys.argv[3], "rb").read()).decode()
pat = re.compile(r"^([ ]*)service:\n\s*name: [^\n]*\n\s*namespace: [^\n]*\n\s*path: ([^\n]*)\n", re.M)
text, n = pat.subn(lambda m: f"{m.group(1)}url: https://127.0.0.1:{port}{m.group(2)}\n{m.group(1)}caBundle: {ca}\n", text)
assert n >= 3, f"rewrote only {n} webhooks"
text = text.replace("failurePolicy: Ignore", "failurePolicy: Fail")
sys.stdout.write(text)
PY
  kc apply -f "$STATE/keda-webhooks.yaml" >/dev/null
  log "KEDA admission webhooks ready on :$wport (ValidatingWebhookConfiguration keda-admission, failurePolicy Fail)"
}

cmd_up() {
  local bare=0 pods=0
  [ "${1:-}" = "--bare" ] && bare=1
  [ "${1:-}" = "--pods" ] && pods=1 bare=1
  local b
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [ -x "$BIN/$b" ] || die "$BIN/$b missing: run tests/e2e/build-tools.sh"
  done
  if [ $pods = 1 ]; then
    for b in kubelet kube-scheduler kube-proxy crictl; do
      [ -x "$BIN/$b" ] || die "$BIN/$b missing: run tests/e2e/build-tools.sh --pods"
    done
  fi
  [ $bare = 1 ] || [ -x "$BIN/keda" ] || die "$BIN/keda missing: run tests/e2e/build-tools.sh"
  if [ -d "$PIDS" ] && [ -n "$(ls -A "$PIDS" 2>/dev/null)" ]; then
    log "cluster $NAME seems to be running already; stopping it first"
    stop_all || true
  fi
  rm -rf "$STATE"; mkdir -p "$STATE" "$LOGS" "$PIDS"
  # any failure (die/exit, a failing command under set -e, Ctrl-C) tears down what was started
  UP_DONE=0
  trap 'rc=$?; if [ "$UP_DONE" != 1 ]; then log "up failed (rc=$rc); tearing down"; stop_all || true; fi; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local t0=$SECONDS
  gen_pki
  local etcd_port peer_port api_port api_host=127.0.0.1
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)
  echo "ETCD_PORT=$etcd_port API_PORT=$api_port" > "$STATE/ports"
  local api_args=(--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none
    --authorization-mode=RBAC)
  if [ $pods = 1 ]; then
    # Pods reach the API server through the Service kubernetes (10.0.0.1:443 -> the node IP, kept by the lease
    # reconciler); it reaches kubelets by InternalIP (logs, exec) and KEDA's metrics apiserver by endpoint IP.
    node_net_up
    api_host=$NODE_IP
    api_args=(--bind-address="$NODE_IP" --advertise-address="$NODE_IP" --endpoint-reconciler-type=lease
      --authorization-mode=Node,RBAC --kubelet-preferred-address-types=InternalIP
      --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key"
      --requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client
      --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group
      --requestheader-extra-headers-prefix=X-Remote-Extra-
      --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key"
      --enable-aggregator-routing=true)
  fi

  start_proc etcd "$BIN/etcd" --name=e2e --data-dir="$STATE/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="e2e=http://127.0.0.1:$peer_port" --unsafe-no-fsync=true --log-level=warn
  wait_http etcd "http://127.0.0.1:$etcd_port/health" 30

  start_proc kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" --etcd-prefix=/registry \
    "${api_args[@]}" --secure-port="$api_port" \
    --cert-dir="$PKI/apiserver-certdir" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --profiling=false \
    --v=1 ${E2E_APISERVER_ARGS:-}
  wait_http kube-apiserver "https://$api_host:$api_port/readyz" 120 \
    --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key"
  write_kubeconfig "$api_port" "$api_host"
  log "kube-apiserver ready on https://$api_host:$api_port ($("$BIN/kube-apiserver" --version))"

  local kcm_args=(--controllers=deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller)
  if [ $pods = 1 ]; then
    # every on-by-default controller (HPA, node lifecycle, endpoints/slices, statefulset, PV binder, disruption,
    # root CA publisher, ...) except those that need a cloud or a CSR signer; HPA syncs every 5 s
    kcm_args=(--controllers='*,-certificatesigningrequest-signing-controller,-cloud-node-lifecycle-controller,-node-route-controller,-service-lb-controller,-node-ipam-controller'
      --horizontal-pod-autoscaler-sync-period=5s --node-monitor-grace-period=20s)
  fi
  start_proc kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$KUBECONFIG_FILE" --leader-elect=false --secure-port=0 "${kcm_args[@]}" \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=false --concurrent-deployment-syncs=5 --v=1
  # ready when the default ServiceAccount appears (serviceaccount controller is running)
  local start=$SECONDS
  until kc -n default get serviceaccount default >/dev/null 2>&1; do
    alive kube-controller-manager || { tail -30 "$LOGS/kube-controller-manager.log" >&2; die "kube-controller-manager exited"; }
    [ $((SECONDS - start)) -lt 60 ] || die "kube-controller-manager: no default ServiceAccount after 60s"
    sleep 0.5
  done
  log "kube-controller-manager running"

  [ $pods = 0 ] || pods_up
  [ $bare = 1 ] || start_keda
  UP_DONE=1
  trap - EXIT INT TERM
  log "cluster up in $((SECONDS - t0))s; KUBECONFIG=$KUBECONFIG_FILE"
}

# The rest of `up --pods`: scheduler, the node with the images imported, CoreDNS.
pods_up() {
  local images
  start_proc kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG_FILE" --leader-elect=false \
    --secure-port=0 --v=1
  images=$("$HERE/images.sh") || die "images.sh failed (logs in ${TOOLS_DIR#"$ROOT"/}/logs/image-*.log)"
  echo "$images" > "$STATE/images"
  # with E2E_NODE_REGISTRY every image but the worker's: the kubelet pulls that one from the release's registry
  # shellcheck disable=SC2046
  node_up $(awk -v skip="${E2E_NODE_REGISTRY:+worker}" '$1 != skip {print $3}' <<<"$images")
  sed "s|IMAGE|$(awk '$1 == "coredns" {print $2}' <<<"$images")|" "$HERE/addons/coredns.yaml" | kc apply -f - >/dev/null
  local start=$SECONDS
  until [ "$(kc -n kube-system get deploy coredns -o jsonpath='{.status.readyReplicas}' 2>/dev/null)" = 1 ]; do
    [ $((SECONDS - start)) -lt 120 ] || { kc -n kube-system describe pods -l k8s-app=kube-dns | tail -30 >&2; die "CoreDNS not Ready after 120s"; }
    sleep 0.5
  done
  log "CoreDNS Ready on $CLUSTER_DNS after $((SECONDS - start))s"
}

cmd_status() {
  local n
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy keda keda-webhooks; do
    if alive "$n"; then echo "$n running pid $(cat "$PIDS/$n.pid")"; else echo "$n not running"; fi
  done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  keda)
    trap 'rc=$?; log "keda start failed (rc=$rc)"; exit $rc' ERR
    shift; start_keda "$@" ;;
  down)
    if [ -d "$STATE" ]; then
      stop_all
      rm -rf "$STATE"
      log "down"
    fi ;;
  env)
    [ -f "$KUBECONFIG_FILE" ] || die "cluster $NAME is not up"
    echo "export KUBECONFIG=$KUBECONFIG_FILE"
    echo "export PATH=$BIN:\$PATH" ;;
  status) cmd_status ;;
  packages) node_packages ;;
  logs) tail -n "${3:-50}" "$LOGS/${2:-keda}.log" ;;
  pids) cluster_pids ;;
  *) sed -n '2,23p' "$0"; exit 2 ;;
esac
