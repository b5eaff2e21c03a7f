# shellcheck shell=bash
# The node of `make e2e-pods` (sourced by cluster.sh): what turns its control plane into a one-node cluster that runs
# pods. Recipe and the two workarounds of this machine kind: ../shared/design/e2e-pods-notes.md.
#
#   node_packages   the Debian packages (containerd 1.6, runc, buildah, mmdebstrap, CNI plugins, iptables, conntrack)
#   node_net_up     the pod bridge with the node IP (the API server binds to it) and a record of the host's sysctls
#   node_up         containerd (private config, socket, root; E2E_NODE_REGISTRY=127.0.0.1:PORT: a plain-HTTP
#                   registry it pulls from, hosts.toml), kubelet, kube-proxy (iptables); cgroups nested under
#                   this session's own cgroup in every v1 hierarchy
#   node_down       everything back, also after a failure: pods stopped through the CRI (CNI DEL frees their IPs,
#                   veths and NAT chains), processes, mounts, cgroups, the bridge, iptables chains, sysctls
#
# Expects from cluster.sh: STATE LOGS PIDS BIN PKI KUBECONFIG_FILE log die start_proc alive free_port.

NODE_NAME=e2e-node
NODE_BRIDGE=cse2e0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.0.0.0/24
CLUSTER_DNS=10.0.0.10
CNI_BIN=${E2E_CNI_BIN:-/usr/lib/cni}
NODE_PACKAGES=(containerd runc buildah mmdebstrap iptables nftables containernetworking-plugins conntrack)
# sysctls the bridge CNI plugin, kubelet or kube-proxy may change: saved at net-up, restored at down
# host paths the kubelet and libcni use whatever their configuration: removed at down when the run created them
NODE_HOST_DIRS=(/var/lib/kubelet /var/lib/cni /var/log/containers /run/containerd)
NODE_SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait kernel.panic kernel.panic_on_oops vm.overcommit_memory)

node_dir() { echo "$STATE/node"; }
crictl_() { "$BIN/crictl" --runtime-endpoint "unix://$(node_dir)/containerd/containerd.sock" --timeout 20s "$@"; }

node_packages() {  # install what is missing (root, Debian apt)
  local missing=() p
  for p in "${NODE_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  [ ${#missing[@]} = 0 ] && { log "host packages present: ${NODE_PACKAGES[*]}"; return 0; }
  [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root (apt-get)"
  log "installing host packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ---------------------------------------------------------------------------------------------- cgroups (v1)
# "hierarchy-mountpoint path" for every hierarchy of this process: the v1 ones, and the cgroup2 "unified" one of a
# hybrid host (the kubelet runs in v1 mode, but runc mirrors its cgroups there). The kubelet's cgroupRoot is created
# under the session's path of the memory hierarchy (the one the session is confined to) in all of them.
node_cgroup_mounts() {
  local line id ctrls path dir
  while IFS= read -r line; do
    id=${line%%:*}; line=${line#*:}; ctrls=${line%%:*}; path=${line#*:}
    if [ "$id" = 0 ]; then dir=/sys/fs/cgroup/unified; else dir=/sys/fs/cgroup/${ctrls#name=}; fi
    [ -d "$dir" ] && echo "$dir $path"
  done < /proc/self/cgroup
}
node_cgroup_root() {  # the kubelet's cgroupRoot
  local base
  base=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  echo "${base%/}/captcha-e2e-${NAME}"
}
node_cgroups_up() {
  local root mnt _path d parent
  root=$(node_cgroup_root)
  while read -r mnt _path; do
    d=$mnt
    for part in $(echo "$root" | tr '/' ' '); do
      parent=$d; d=$d/$part
      [ -d "$d" ] && continue
      mkdir "$d"
      echo "$d" >> "$(node_dir)/cgroups.created"
      # a new v1 cpuset cgroup starts with no cpus/mems: nothing could join it
      if [ "$mnt" != /sys/fs/cgroup/unified ] && [ -f "$d/cpuset.cpus" ]; then
        cat "$parent/cpuset.cpus" > "$d/cpuset.cpus"; cat "$parent/cpuset.mems" > "$d/cpuset.mems"
      fi
    done
  done < <(node_cgroup_mounts)
  log "cgroupRoot $root in $(node_cgroup_mounts | wc -l) hierarchies"
}
node_kill_cgroup_procs() {  # whatever still runs in the node's cgroups (e.g. a `runc init` containerd left mid-create)
  local root mnt _path p
  root=$(node_cgroup_root)
  while read -r mnt _path; do
    [ -d "$mnt$root" ] || continue
    for p in $(find "$mnt$root" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
      log "killing pid $p, left in the node's cgroups: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
      kill -KILL "$p" 2>/dev/null || true
    done
  done < <(node_cgroup_mounts)
}

node_cgroups_down() {  # remove every cgroup under the root, deepest first, then the ones we created on the way
  local root mnt _path left=0 try
  root=$(node_cgroup_root)
  # a cgroup whose last task is still exiting (a shim just killed) refuses rmdir for a moment: retry for ~10 s
  for try in $(seq 1 20); do
    left=0
    while read -r mnt _path; do
      [ -d "$mnt$root" ] || continue
      find "$mnt$root" -depth -mindepth 1 -type d 2>/dev/null | while read -r d; do rmdir "$d" 2>/dev/null || true; done
      if [ -f "$(node_dir)/cgroups.created" ]; then
        tac "$(node_dir)/cgroups.created" | grep "^$mnt/" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
      fi
      [ -d "$mnt$root" ] && left=1
    done < <(node_cgroup_mounts)
    [ $left = 0 ] && break
    sleep 0.5
  done
  left=0
  while read -r mnt _path; do
    if [ -d "$mnt$root" ]; then log "cgroup left behind: $mnt$root ($(cat "$mnt$root/tasks" 2>/dev/null | wc -l) tasks)"; left=1; fi
  done < <(node_cgroup_mounts)
  return $left
}

# ---------------------------------------------------------------------------------------------- network
node_net_up() {
  local s d
  mkdir -p "$(node_dir)"
  : > "$(node_dir)/sysctls.saved"
  for s in "${NODE_SYSCTLS[@]}"; do
    [ -e "/proc/sys/${s//.//}" ] && echo "$s=$(cat "/proc/sys/${s//.//}")" >> "$(node_dir)/sysctls.saved"
  done
  for d in "${NODE_HOST_DIRS[@]}"; do [ -e "$d" ] || echo "$d" >> "$(node_dir)/host-dirs.created"; done
  touch "$(node_dir)/started"
  nft list tables 2>/dev/null | sort > "$(node_dir)/nft-tables.before" || true
  nft_ruleset > "$(node_dir)/nft-ruleset.before"
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && die "bridge $NODE_BRIDGE exists already (another e2e-pods cluster?)"
  ip link add "$NODE_BRIDGE" type bridge
  echo "$NODE_BRIDGE" > "$(node_dir)/bridge.created"
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  # Pod -> Service -> pod on the same bridge: the reply must pass the host's conntrack to be un-DNATed.
  echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
  echo 1 > /proc/sys/net/ipv4/ip_forward
  d=$(node_dir)/cni
  mkdir -p "$d/net.d" "$d/ipam"
  cat > "$d/net.d/10-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$d/ipam", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  log "bridge $NODE_BRIDGE $NODE_IP/24 (pods $POD_CIDR, services $SERVICE_CIDR)"
}

node_netfilter_down() {  # undo what kube-proxy, kubelet and the CNI plugins added to netfilter; compare with before
  local cmd t chain rule rc=0
  [ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >"$LOGS/kube-proxy-cleanup.log" 2>&1 || true
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for t in filter nat mangle raw; do
      "$cmd" -t "$t" -S 2>/dev/null | grep -E '^-A .*(KUBE-|CNI-)' | sed 's/^-A /-D /' | while read -r rule; do
        # shellcheck disable=SC2086
        eval "$cmd -t $t $rule" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}'); do
        "$cmd" -t "$t" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}'); do
        "$cmd" -t "$t" -X "$chain" 2>/dev/null || true
      done
    done
  done
  # tables that did not exist before the cluster (iptables-nft's own, kube-proxy's, kubelet's) go entirely
  if command -v nft >/dev/null && [ -f "$(node_dir)/nft-tables.before" ]; then
    comm -13 "$(node_dir)/nft-tables.before" <(nft list tables 2>/dev/null | sort) | while read -r _ fam tbl; do
      nft delete table "$fam" "$tbl" 2>/dev/null || true
    done
    if ! diff -q <(nft_ruleset) "$(node_dir)/nft-ruleset.before" >/dev/null; then
      log "netfilter differs from before the cluster:"
      diff "$(node_dir)/nft-ruleset.before" <(nft_ruleset) | head -20 >&2 || true
      rc=1
    fi
  fi
  return $rc
}
nft_ruleset() { nft list ruleset 2>/dev/null | sed -E 's/ # handle [0-9]+//; s/counter packets [0-9]+ bytes [0-9]+/counter/'; }

node_net_down() {
  local rc=0 line
  node_netfilter_down || rc=1
  if [ -f "$(node_dir)/bridge.created" ]; then
    ip link del "$NODE_BRIDGE" 2>/dev/null || true
    rm -f "$(node_dir)/bridge.created"
  fi
  # veths of pods the CRI could not stop
  for line in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip -d link show "$line" 2>/dev/null | grep -q "master $NODE_BRIDGE" && ip link del "$line" 2>/dev/null || true
  done
  if [ -f "$(node_dir)/sysctls.saved" ]; then
    while IFS='=' read -r k v; do echo "$v" > "/proc/sys/${k//.//}" 2>/dev/null || true; done < "$(node_dir)/sysctls.saved"
  fi
  return $rc
}

# ---------------------------------------------------------------------------------------------- containerd
node_containerd_up() {
  local d
  d=$(node_dir)/containerd
  mkdir -p "$d/root" "$d/state"
  cat > "$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd-ttrpc.sock"
[debug]
  address = "$d/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  # root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj is refused, and runc fails every sandbox without this
  restrict_oom_score_adj = true
  sandbox_image = "localhost/captcha-e2e/pause:1"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state (else /run/containerd/runc)
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$(node_dir)/cni/net.d"
  # registries by host (certs.d/<host:port>/hosts.toml): E2E_NODE_REGISTRY, the release's plain-HTTP registry on
  # 127.0.0.1 that the kubelet pulls the worker image from (containerd pulls on the host network)
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$d/certs.d"
EOF
  mkdir -p "$d/certs.d"
  if [ -n "${E2E_NODE_REGISTRY:-}" ]; then
    mkdir -p "$d/certs.d/$E2E_NODE_REGISTRY"
    cat > "$d/certs.d/$E2E_NODE_REGISTRY/hosts.toml" <<EOF
server = "http://$E2E_NODE_REGISTRY"
[host."http://$E2E_NODE_REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
  fi
  start_proc containerd containerd --config "$d/config.toml" --log-level warn
  local start=$SECONDS
  until crictl_ info >/dev/null 2>&1; do
    alive containerd || { tail -20 "$LOGS/containerd.log" >&2; die "containerd exited"; }
    [ $((SECONDS - start)) -lt 30 ] || die "containerd: CRI not answering after 30s"
    sleep 0.3
  done
  log "containerd $(containerd --version | awk '{print $3}') on unix://$d/containerd.sock${E2E_NODE_REGISTRY:+ (pulls from http://$E2E_NODE_REGISTRY)}"
}

node_import_images() {  # node_import_images ARCHIVE...: docker-archive files into containerd's k8s.io namespace
  local f
  for f in "$@"; do
    ctr --address "$(node_dir)/containerd/containerd.sock" -n k8s.io images import "$f" \
      >>"$LOGS/ctr-import.log" 2>&1 || { tail -5 "$LOGS/ctr-import.log" >&2; die "could not import $f"; }
  done
  log "imported ${#} image(s): $(crictl_ images -o json | python3 -c 'import json,sys; print(" ".join(sorted(t for i in json.load(sys.stdin)["images"] for t in i["repoTags"])))')"
}

# ---------------------------------------------------------------------------------------------- kubelet, kube-proxy
node_kubelet_up() {
  local d kport hport
  d=$(node_dir)/kubelet
  mkdir -p "$d/root" "$d/pod-logs"
  kport=$(free_port); hport=$(free_port)
  echo "KUBELET_PORT=$kport KUBELET_HEALTHZ_PORT=$hport" >> "$STATE/ports"
  cat > "$d/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# kubelet 1.35 refuses cgroup v1 unless told otherwise; this machine kind has cgroup v1
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $(node_cgroup_root)
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
# root lacks CAP_SYS_RESOURCE: the kubelet cannot lower its own OOM score
oomScoreAdj: 0
containerRuntimeEndpoint: unix://$(node_dir)/containerd/containerd.sock
address: $NODE_IP
port: $kport
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDNS: [$CLUSTER_DNS]
clusterDomain: cluster.local
resolvConf: $(node_dir)/resolv.conf
podLogsDir: $d/pod-logs
failSwapOn: false
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 60s
nodeStatusUpdateFrequency: 5s
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
maxPods: 60
registerWithTaints: []
EOF
  # pods resolve only the cluster domain (no upstream here): an empty search list, no host nameserver
  printf 'nameserver %s\n' "$CLUSTER_DNS" > "$(node_dir)/resolv.conf"
  start_proc kubelet "$BIN/kubelet" --config="$d/config.yaml" --kubeconfig="$KUBECONFIG_FILE" --root-dir="$d/root" \
    --cert-dir="$d/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
  local start=$SECONDS
  until [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; do
    alive kubelet || { tail -30 "$LOGS/kubelet.log" >&2; die "kubelet exited"; }
    [ $((SECONDS - start)) -lt 90 ] || { tail -30 "$LOGS/kubelet.log" >&2; die "node $NODE_NAME not Ready after 90s"; }
    sleep 0.5
  done
  log "kubelet $("$BIN/kubelet" --version | awk '{print $2}'): node $NODE_NAME Ready after $((SECONDS - start))s"
}

node_proxy_up() {
  local d hport mport
  d=$(node_dir)/kube-proxy
  mkdir -p "$d"
  hport=$(free_port); mport=$(free_port)
  cat > "$d/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $KUBECONFIG_FILE}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:$hport
metricsBindAddress: 127.0.0.1:$mport
# leave the host's conntrack table sizes alone
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, syncPeriod: 5s, minSyncPeriod: 0s}
nodePortAddresses: [$NODE_IP/32]
EOF
  start_proc kube-proxy "$BIN/kube-proxy" --config="$d/config.yaml" --v=1
  local start=$SECONDS
  until curl -fsS --max-time 2 "http://127.0.0.1:$hport/healthz" >/dev/null 2>&1; do
    alive kube-proxy || { tail -30 "$LOGS/kube-proxy.log" >&2; die "kube-proxy exited"; }
    [ $((SECONDS - start)) -lt 60 ] || { tail -30 "$LOGS/kube-proxy.log" >&2; die "kube-proxy not healthy after 60s"; }
    sleep 0.5
  done
  log "kube-proxy (iptables) healthy after $((SECONDS - start))s"
}

node_up() {
  node_cgroups_up
  node_containerd_up
  node_import_images "$@"
  node_kubelet_up
  node_proxy_up
}

# ---------------------------------------------------------------------------------------------- teardown
node_stop_pods() {  # every sandbox stopped and removed through the CRI: CNI DEL for each
  [ -S "$(node_dir)/containerd/containerd.sock" ] && alive containerd || return 0
  local ids
  ids=$(crictl_ pods -q 2>/dev/null || true)
  [ -n "$ids" ] || return 0
  # shellcheck disable=SC2086
  crictl_ stopp $ids >/dev/null 2>&1 || true
  # shellcheck disable=SC2086
  crictl_ rmp -f $ids >/dev/null 2>&1 || true
  log "stopped $(echo "$ids" | wc -w) pod sandbox(es) through the CRI"
}

node_stop_proc() {  # node_stop_proc NAME: TERM its process group, KILL after STOP_TIMEOUT
  local f=$PIDS/$1.pid pg
  [ -f "$f" ] || return 0
  pg=$(cat "$f")
  kill -TERM -- "-$pg" 2>/dev/null || true
  for _ in $(seq 1 $((STOP_TIMEOUT * 10))); do pg_alive "$pg" || break; sleep 0.1; done
  pg_alive "$pg" && { log "$1 did not stop on TERM, killing"; kill -KILL -- "-$pg" 2>/dev/null || true; sleep 0.3; }
  rm -f "$f"
}

node_unmount() {  # every mount under the state dir, deepest first
  # /proc/mounts names the physical path: with .tools a symlink (a git worktree sharing a checkout's tools) $STATE
  # matched none of them, every pod volume stayed mounted and `rm -rf $STATE` failed with EBUSY
  local m left d
  d=$(cd "$STATE" && pwd -P)/
  for _ in 1 2 3; do
    left=$(awk -v d="$d" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
    [ -n "$left" ] || return 0
    for m in $left; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  left=$(awk -v d="$d" 'index($2, d) == 1 {print $2}' /proc/mounts)
  [ -z "$left" ] || { log "mounts left: $left"; return 1; }
}

node_down() {  # idempotent; returns non-zero when something could not be restored
  local rc=0 s
  [ -d "$(node_dir)" ] || return 0
  node_stop_pods
  node_stop_proc kube-proxy
  node_stop_proc kubelet
  node_stop_pods                      # sandboxes the kubelet started while stopping
  node_stop_proc containerd
  # shims outlive containerd: their command lines name the containerd socket under the state dir
  for s in $(ps -eo pid=,args= | awk -v d="$(node_dir)/" 'index($0, d) && /containerd-shim/ {print $1}'); do
    kill -KILL "$s" 2>/dev/null || true
  done
  sleep 0.5
  node_kill_cgroup_procs
  node_unmount || rc=1
  node_cgroups_down || rc=1
  node_net_down || rc=1
  node_host_dirs_down || rc=1
  return $rc
}

# Paths outside the state dir: /run/containerd/s (the shims' sockets, whatever containerd's state dir),
# /var/lib/kubelet/device-plugins (the kubelet's device-plugin socket, a fixed path), /var/lib/cni/results (libcni's
# cache of the CNI results), /var/log/containers (the kubelet's log symlinks). A dir the run created goes; in one
# that existed before, what the run added goes.
node_host_dirs_down() {
  local d rc=0
  if [ -f "$(node_dir)/host-dirs.created" ]; then
    while read -r d; do rm -rf "$d"; done < "$(node_dir)/host-dirs.created"
  fi
  if [ -f "$(node_dir)/started" ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete 2>/dev/null || true
    find /var/lib/cni/results /var/lib/kubelet/device-plugins /run/containerd/s -mindepth 1 -maxdepth 1 \
      -newer "$(node_dir)/started" -exec rm -rf {} + 2>/dev/null || true
  fi
  for d in /run/containerd/s /var/lib/kubelet/device-plugins; do
    [ -d "$d" ] && [ -n "$(find "$d" -mindepth 1 -newer "$(node_dir)/started" 2>/dev/null)" ] && { log "left in $d: $(ls -A "$d")"; rc=1; }
  done
  return $rc
}
