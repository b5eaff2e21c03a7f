#!/usr/bin/env bash
# Builds the e2e control-plane tools from the Go module proxy, once, into .tools/e2e/bin/:
#   etcd, kube-apiserver, kube-controller-manager, kubectl, keda (operator), keda-webhooks (admission webhooks),
#   plus the KEDA CRDs (.tools/e2e/crds/) and KEDA's ValidatingWebhookConfiguration (.tools/e2e/keda-webhooks.yaml).
# With --pods also what `make e2e-pods` needs for a node that runs pods: kubelet, kube-scheduler, kube-proxy (gomod/k8s-node),
#   crictl, coredns (a trimmed build, gomod/coredns), keda-adapter (KEDA's metrics apiserver) and pause (images/pause).
# Go's module and build caches live under .tools/e2e/go/ (apart from install-tools.sh's .tools/go) so a rebuild after a version bump is fast.
# Each tool gets a stamp file (.tools/e2e/bin/.<tool>.stamp) holding its version; a rerun skips stamped tools.
#
# Usage: tests/e2e/build-tools.sh [--pods] [--force] [--check] [tool ...]
#   --pods    the node tools too (the default set is the control plane of `make e2e`)
#   --check   exit 0 if every tool is built and stamped with the pinned version, 1 otherwise (builds nothing)
#   --force   rebuild even if stamped
#   --regen   rewrite the wrapper modules gomod/k8s, gomod/k8s-node, gomod/etcd and gomod/coredns for the pinned
#             versions below (after a bump), then build
# Timings of every build go to <tools dir>/logs/build-times.tsv (tool, seconds, cache state, date).
# Built binaries are also kept in a machine-wide cache, ~/.cache/captcha-solver-tools/e2e (E2E_SHARED_CACHE; empty
# disables it), one copy per tool@version+go.mod hash, so a fresh clone on the same machine (CI) copies them in
# seconds instead of compiling for ~20 minutes. `--check` counts a tool found there as available.
# E2E_TOOLS_DIR overrides the tools dir (default .tools/e2e in the checkout), e.g. a machine-wide cache shared by
# several checkouts: bin/, crds/, go/ (module + build caches) and logs/ all live there.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

K8S_VERSION=v1.35.4     # k8s.io/kubernetes; staging modules pinned to v0.35.4 in gomod/k8s/go.mod
ETCD_VERSION=v3.6.16    # go.etcd.io/etcd/server/v3 (gomod/etcd/go.mod)
KEDA_VERSION=v2.20.2    # github.com/kedacore/keda/v2 (built inside its module dir, honouring its replaces)
CRICTL_VERSION=v1.37.0  # sigs.k8s.io/cri-tools (no replace lines; built inside its module dir)
COREDNS_VERSION=v1.15.0 # github.com/coredns/coredns (gomod/coredns: main.go with the plugins the cluster DNS uses)

TOOLS_DIR=${E2E_TOOLS_DIR:-$ROOT/.tools/e2e}
mkdir -p "$TOOLS_DIR" && TOOLS_DIR=$(cd "$TOOLS_DIR" && pwd)
BIN=$TOOLS_DIR/bin
LOGS=$TOOLS_DIR/logs
CRDS=$TOOLS_DIR/crds
export GOMODCACHE=$TOOLS_DIR/go/mod
export GOCACHE=$TOOLS_DIR/go/cache
export GOFLAGS=-modcacherw   # so `rm -rf .tools` works
export CGO_ENABLED=0
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
NICE=(nice -n 19)
SHARED_CACHE=${E2E_SHARED_CACHE-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/captcha-solver-tools/e2e}

ALL_TOOLS=(etcd kube-apiserver kube-controller-manager kubectl keda keda-webhooks keda-crds)
POD_TOOLS=(kubelet kube-scheduler kube-proxy crictl coredns keda-adapter pause)
WEBHOOKS_YAML=$TOOLS_DIR/keda-webhooks.yaml
force=0 check=0 regen=0 pods=0 want=()
for a in "$@"; do
  case $a in
    --pods) pods=1 ;;
    --force) force=1 ;;
    --check) check=1 ;;
    --regen) regen=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) want+=("$a") ;;
  esac
done
if [ ${#want[@]} = 0 ]; then
  want=("${ALL_TOOLS[@]}")
  [ $pods = 0 ] || want+=("${POD_TOOLS[@]}")
fi

version_of() {
  case $1 in
    etcd) echo "$ETCD_VERSION" ;;
    kube-apiserver|kube-controller-manager|kubectl|kubelet|kube-scheduler|kube-proxy) echo "$K8S_VERSION" ;;
    keda|keda-webhooks|keda-crds|keda-adapter) echo "$KEDA_VERSION" ;;
    crictl) echo "$CRICTL_VERSION" ;;
    coredns) echo "$COREDNS_VERSION" ;;
    pause) echo local ;;
    *) echo "unknown tool $1" >&2; return 1 ;;
  esac
}
# The stamp also covers the wrapper go.mod/go.sum, so editing them triggers a rebuild.
stamp_content() {
  local t=$1 extra=""
  case $t in
    etcd) extra=$(cat "$HERE/gomod/etcd/go.mod" "$HERE/gomod/etcd/go.sum" | sha256sum | cut -c1-16) ;;
    kubelet|kube-scheduler|kube-proxy) extra=$(cat "$HERE/gomod/k8s-node/go.mod" "$HERE/gomod/k8s-node/go.sum" | sha256sum | cut -c1-16) ;;
    kube-*|kubectl) extra=$(cat "$HERE/gomod/k8s/go.mod" "$HERE/gomod/k8s/go.sum" | sha256sum | cut -c1-16) ;;
    coredns) extra=$(cat "$HERE/gomod/coredns/go.mod" "$HERE/gomod/coredns/go.sum" "$HERE/gomod/coredns/main.go" | sha256sum | cut -c1-16) ;;
    pause) extra=$(cat "$HERE/images/pause/go.mod" "$HERE/images/pause/main.go" | sha256sum | cut -c1-16) ;;
    keda-crds) extra=with-webhooks ;;   # layout: crds/*.yaml + keda-webhooks.yaml
  esac
  echo "$t $(version_of "$t") $extra"
}
stamp_file() { echo "$BIN/.$1.stamp"; }
is_built() {
  local t=$1 f
  f=$(stamp_file "$t")
  [ -f "$f" ] && [ "$(cat "$f")" = "$(stamp_content "$t")" ] || return 1
  if [ "$t" = keda-crds ]; then [ -f "$CRDS/keda.sh_scaledobjects.yaml" ] && [ -f "$WEBHOOKS_YAML" ]; else [ -x "$BIN/$t" ]; fi
}

shared_entry() {  # path of a tool in the shared cache
  local c
  c=$(stamp_content "$1")
  echo "$SHARED_CACHE/$(echo "$c" | awk '{print $1 "@" $2 ($3 == "" ? "" : "-" $3)}')"
}
in_shared() { [ -n "$SHARED_CACHE" ] && [ -e "$(shared_entry "$1")" ]; }
from_shared() {  # copy a tool from the shared cache into the tools dir and stamp it
  local t=$1 src
  src=$(shared_entry "$t")
  if [ "$t" = keda-crds ]; then
    rm -f "$CRDS"/*.yaml; cp "$src"/crds/*.yaml "$CRDS"/; cp "$src"/keda-webhooks.yaml "$WEBHOOKS_YAML"
  else
    cp -f "$src" "$BIN/$t.tmp" && chmod +x "$BIN/$t.tmp" && mv -f "$BIN/$t.tmp" "$BIN/$t"
  fi
  stamp_content "$t" > "$(stamp_file "$t")"
}
to_shared() {  # store a freshly built tool in the shared cache (best effort)
  local t=$1 dst
  [ -n "$SHARED_CACHE" ] || return 0
  dst=$(shared_entry "$t")
  mkdir -p "$SHARED_CACHE" 2>/dev/null || return 0
  rm -rf "$dst.tmp"
  if [ "$t" = keda-crds ]; then
    mkdir -p "$dst.tmp/crds" && cp "$CRDS"/*.yaml "$dst.tmp/crds/" && cp "$WEBHOOKS_YAML" "$dst.tmp/"
  else
    cp -f "$BIN/$t" "$dst.tmp"
  fi && rm -rf "$dst" && mv -f "$dst.tmp" "$dst" \
    && echo "build-tools: stored $t in the shared cache ${dst}" \
    || echo "build-tools: could not store $t in the shared cache (a fresh clone rebuilds it)"
}

if [ $check = 1 ]; then
  rc=0
  for t in "${want[@]}"; do
    if is_built "$t"; then echo "ok      $t $(version_of "$t")"
    elif in_shared "$t"; then echo "cached  $t $(version_of "$t") (shared cache $(shared_entry "$t"))"
    else echo "missing $t $(version_of "$t")"; rc=1; fi
  done
  exit $rc
fi

mkdir -p "$BIN" "$LOGS" "$CRDS" "$GOMODCACHE" "$GOCACHE"
command -v go >/dev/null || { echo "build-tools: go not found on PATH" >&2; exit 2; }

regen_modules() {
  local kmod staging sv
  kmod=$(cd /tmp && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  staging=$(grep -E '=> \./staging/' "$kmod" | awk '{print $1}')
  sv=v0.${K8S_VERSION#v1.}
  {
    echo "// Wrapper module: builds kube-apiserver, kube-controller-manager and kubectl from k8s.io/kubernetes"
    echo "// through the module proxy. k/k requires its staging repos at v0.0.0 with replace lines that only apply"
    echo "// when k/k is the main module, so we pin each staging module to its published version here."
    echo "// Regenerate: tests/e2e/build-tools.sh --regen (see that script)."
    echo "module captcha-solver/e2e/k8s-tools"; echo
    grep -E '^go ' "$kmod"; echo
    grep -E '^godebug ' "$kmod" && echo
    echo "replace ("
    for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$sv"; done
    echo ")"
  } > "$HERE/gomod/k8s/go.mod"
  rm -f "$HERE/gomod/k8s/go.sum"
  (cd "$HERE/gomod/k8s" && go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION")
  # the node tools: same replace lines, own module (so adding them never changes the control plane's stamps)
  sed -e 's|builds kube-apiserver, kube-controller-manager and kubectl|builds kubelet, kube-scheduler and kube-proxy|' \
    -e 's|module captcha-solver/e2e/k8s-tools|module captcha-solver/e2e/k8s-node-tools|' \
    -e '/^tool (/,$d' "$HERE/gomod/k8s/go.mod" > "$HERE/gomod/k8s-node/go.mod"
  rm -f "$HERE/gomod/k8s-node/go.sum"
  (cd "$HERE/gomod/k8s-node" && go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION")
  sed -i '/^require/,$d' "$HERE/gomod/coredns/go.mod"; rm -f "$HERE/gomod/coredns/go.sum"
  (cd "$HERE/gomod/coredns" && go get "github.com/coredns/coredns@$COREDNS_VERSION" && go mod tidy)
  {
    echo "// Wrapper module: builds etcd (go.etcd.io/etcd/server/v3) from the module proxy. Kept separate from the"
    echo "// k8s wrapper so minimal version selection does not raise either side's pinned dependencies."
    echo "module captcha-solver/e2e/etcd-tools"; echo
    grep -E '^go ' "$(cd /tmp && go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  } > "$HERE/gomod/etcd/go.mod"
  rm -f "$HERE/gomod/etcd/go.sum"
  (cd "$HERE/gomod/etcd" && go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  echo "build-tools: regenerated gomod/k8s, gomod/k8s-node ($K8S_VERSION, staging $sv), gomod/etcd ($ETCD_VERSION)" \
    "and gomod/coredns ($COREDNS_VERSION)"
}
[ $regen = 0 ] || regen_modules

cache_state() {  # rough description of the caches before a build, for the timing log
  local m c
  m=$(du -sm "$GOMODCACHE" 2>/dev/null | cut -f1); c=$(du -sm "$GOCACHE" 2>/dev/null | cut -f1)
  echo "modcache=${m}MB,buildcache=${c}MB"
}

k8s_ldflags() {
  local v=$K8S_VERSION minor date
  minor=$(echo "$v" | cut -d. -f2)
  # Build date = the module's publication time, so builds are reproducible.
  date=$(cd "$HERE/gomod/${1:-k8s}" && go list -m -json "k8s.io/kubernetes" 2>/dev/null | sed -n 's/.*"Time": "\(.*\)".*/\1/p')
  [ -n "$date" ] || date=1970-01-01T00:00:00Z
  local ld="" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitCommit=module-proxy"
    ld+=" -X $p.gitTreeState=archive -X $p.buildDate=$date"
  done
  echo "$ld -s -w"
}

module_dir() {  # module_dir MODULE@VERSION: download it and print its directory in the module cache
  local dir
  dir=$(cd /tmp && go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || { echo "could not download $1" >&2; return 1; }
  echo "$dir"
}

build_one() {
  local t=$1 out=$BIN/$1
  case $t in
    etcd)
      (cd "$HERE/gomod/etcd" && "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$out.tmp" go.etcd.io/etcd/server/v3)
      ;;
    kube-apiserver|kube-controller-manager|kubectl)
      (cd "$HERE/gomod/k8s" && "${NICE[@]}" go build -trimpath -tags selinux,notest,grpcnotrace \
        -ldflags "$(k8s_ldflags)" -o "$out.tmp" "k8s.io/kubernetes/cmd/$t")
      ;;
    kubelet|kube-scheduler|kube-proxy)
      (cd "$HERE/gomod/k8s-node" && "${NICE[@]}" go build -trimpath -tags selinux,notest,grpcnotrace \
        -ldflags "$(k8s_ldflags k8s-node)" -o "$out.tmp" "k8s.io/kubernetes/cmd/$t")
      ;;
    keda|keda-webhooks|keda-adapter)
      local dir cmd
      case $t in keda) cmd=operator ;; keda-webhooks) cmd=webhooks ;; keda-adapter) cmd=adapter ;; esac
      dir=$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
      # Built inside the module dir so KEDA's own replace lines apply (go install would ignore them).
      (cd "$dir" && "${NICE[@]}" go build -trimpath \
        -ldflags "-s -w -X=github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v} -X=github.com/kedacore/keda/v2/version.GitCommit=module-proxy" \
        -o "$out.tmp" "./cmd/$cmd")
      ;;
    crictl)
      local dir
      dir=$(module_dir "sigs.k8s.io/cri-tools@$CRICTL_VERSION")
      (cd "$dir" && "${NICE[@]}" go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" -o "$out.tmp" ./cmd/crictl)
      ;;
    coredns)
      (cd "$HERE/gomod/coredns" && "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$out.tmp" .)
      ;;
    pause)
      (cd "$HERE/images/pause" && "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$out.tmp" .)
      ;;
    keda-crds)
      local dir
      dir=$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
      rm -f "$CRDS"/*.yaml
      cp "$dir"/config/crd/bases/*.yaml "$CRDS"/
      cp "$dir"/config/webhooks/validation_webhooks.yaml "$WEBHOOKS_YAML"
      chmod 644 "$CRDS"/*.yaml "$WEBHOOKS_YAML"
      stamp_content "$t" > "$(stamp_file "$t")"
      return 0
      ;;
  esac
  mv -f "$out.tmp" "$out"
  stamp_content "$t" > "$(stamp_file "$t")"
}

total_start=$(date +%s)
for t in "${want[@]}"; do
  version_of "$t" >/dev/null
  if [ $force = 0 ] && is_built "$t"; then
    echo "build-tools: $t $(version_of "$t") already built (stamp $(stamp_file "$t"))"
    in_shared "$t" || [ -z "$SHARED_CACHE" ] || to_shared "$t"
    continue
  fi
  if [ $force = 0 ] && in_shared "$t"; then
    from_shared "$t"
    echo "build-tools: $t $(version_of "$t") copied from the shared cache $(shared_entry "$t")"
    continue
  fi
  state=$(cache_state)
  echo "build-tools: building $t $(version_of "$t") ($state; log $LOGS/build-$t.log)"
  s=$(date +%s.%N)
  if ! build_one "$t" >"$LOGS/build-$t.log" 2>&1; then
    echo "build-tools: FAILED to build $t; last lines of $LOGS/build-$t.log:" >&2
    tail -30 "$LOGS/build-$t.log" >&2
    exit 1
  fi
  e=$(date +%s.%N)
  secs=$(awk -v s="$s" -v e="$e" 'BEGIN{printf "%.1f", e-s}')
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$secs" "$state" "$(date -u +%FT%TZ)" "$(go env GOVERSION)" >> "$LOGS/build-times.tsv"
  echo "build-tools: built $t in ${secs}s"
  to_shared "$t"
done
echo "build-tools: done in $(( $(date +%s) - total_start ))s; binaries in ${BIN#"$ROOT"/}"
