#!/usr/bin/env bash
# The images of `make e2e-pods`, built without a Docker daemon (buildah, vfs storage, chroot isolation) into
# docker-archive files that the node imports into containerd (with E2E_PODS_REGISTRY=1 all but the worker's, which
# `make release` pushes to the run's registry and the kubelet pulls from there):
#
#   localhost/captcha-e2e/python-base:bookworm  Debian bookworm minbase + python3 (mmdebstrap): stands in for the
#                                               python slim image, which cannot be pulled here
#   localhost/captcha-solver:e2e-<hash>         the project's unmodified Dockerfile, --build-arg PYTHON_IMAGE=<base>
#   localhost/captcha-e2e/redis:bookworm        Debian's redis-server (the chart runs redis-server + redis-cli)
#   localhost/captcha-e2e/keda:2.20.2, keda-metrics-apiserver:2.20.2, keda-admission-webhooks:2.20.2
#                                               scratch + the binaries build-tools.sh built (paths as in KEDA's chart)
#   localhost/captcha-e2e/coredns:1.15.0        scratch + the trimmed CoreDNS
#   localhost/captcha-e2e/pause:1               scratch + the pause binary (the sandbox image)
#
# Each archive is named after a hash of its inputs and kept in .tools/e2e/images/; a rerun with the same inputs
# builds nothing. The two Debian bases (the slow part, ~40 s each) are also kept in the shared cache
# (~/.cache/captcha-solver-tools/e2e/images, E2E_SHARED_CACHE) so a fresh clone copies them.
#
# Usage: tests/e2e/images.sh            build what is missing; prints "name image archive" lines on stdout
#        tests/e2e/images.sh --worker   only the python base and the worker image (`make release` builds the image
#                                       it publishes this way): prints the "worker image archive" line;
#                                       E2E_WORKER_CONTEXT=DIR builds another tree's Dockerfile (an earlier release's,
#                                       tests/e2e/previous-release.sh), kept as E2E_WORKER_NAME-<hash>.tar
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TOOLS_DIR=${E2E_TOOLS_DIR:-$ROOT/.tools/e2e}
BIN=$TOOLS_DIR/bin
OUT=$TOOLS_DIR/images
LOGS=$TOOLS_DIR/logs
SHARED=${E2E_SHARED_CACHE-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/captcha-solver-tools/e2e}
SUITE=bookworm
MIRROR=${E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PY_PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
REDIS_PACKAGES=redis-server
KEDA_VERSION=2.20.2
COREDNS_VERSION=1.15.0
mkdir -p "$OUT" "$LOGS"
BUILDAH=(buildah --storage-driver vfs --root "$OUT/storage" --runroot "$OUT/run")
# buildah's network setup would create /etc/cni/net.d; RUN steps use the host network anyway (--network host)
mkdir -p "$OUT/cni"
printf '[network]\nnetwork_config_dir = "%s"\n' "$OUT/cni" > "$OUT/containers.conf"
export CONTAINERS_CONF=$OUT/containers.conf
say() { echo "images: $*" >&2; }

key() { sha256sum | cut -c1-12; }  # key < inputs
timed() {  # timed NAME cmd...: runs cmd, logs to images-NAME.log, records seconds in build-times.tsv
  local name=$1 s e; shift
  s=$(date +%s.%N)
  "$@" >"$LOGS/image-$name.log" 2>&1 || { tail -30 "$LOGS/image-$name.log" >&2; say "FAILED: $name"; exit 1; }
  e=$(date +%s.%N)
  printf 'image:%s\t%s\t%s\t%s\n' "$name" "$(awk -v s="$s" -v e="$e" 'BEGIN{printf "%.1f", e-s}')" "-" \
    "$(date -u +%FT%TZ)" >> "$LOGS/build-times.tsv"
}

commit_archive() {  # commit_archive CONTAINER IMAGE ARCHIVE
  "${BUILDAH[@]}" commit --format docker --quiet "$1" "$2" >/dev/null
  "${BUILDAH[@]}" rm "$1" >/dev/null
  rm -f "$3.tmp"
  "${BUILDAH[@]}" push --quiet "$2" "docker-archive:$3.tmp:$2"
  mv -f "$3.tmp" "$3"
}

debian_base() {  # debian_base NAME PACKAGES HOOK -> archive (shared cache first)
  local name=$1 packages=$2 hook=$3 k archive img tmp c
  k=$(printf '%s\n' "$SUITE" "$packages" "$hook" v1 | key)
  archive=$OUT/$name-$k.tar; img=localhost/captcha-e2e/$name:$SUITE
  if [ ! -f "$archive" ] && [ -n "$SHARED" ] && [ -f "$SHARED/images/$name-$k.tar" ]; then
    cp "$SHARED/images/$name-$k.tar" "$archive.tmp" && mv "$archive.tmp" "$archive"; say "$name: copied from the shared cache"
  fi
  if [ ! -f "$archive" ]; then
    say "$name: mmdebstrap $SUITE minbase + $packages (~40 s)"
    tmp=$(mktemp -d)
    timed "$name-rootfs" mmdebstrap --variant=minbase --include="$packages" --customize-hook="$hook" \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' "$SUITE" "$tmp/rootfs.tar" "$MIRROR"
    c=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" add --quiet "$c" "$tmp/rootfs.tar" / >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/sh "$c"
    commit_archive "$c" "$img" "$archive"
    rm -rf "$tmp"
    if [ -n "$SHARED" ]; then mkdir -p "$SHARED/images" && cp "$archive" "$SHARED/images/$name-$k.tar.tmp" \
      && mv "$SHARED/images/$name-$k.tar.tmp" "$SHARED/images/$name-$k.tar" || true; fi
  fi
  "${BUILDAH[@]}" inspect --type image "$img" >/dev/null 2>&1 || "${BUILDAH[@]}" pull --quiet "docker-archive:$archive" >/dev/null
  echo "$img $archive"
}

static_image() {  # static_image NAME TAG BINARY PATH-IN-IMAGE [ENTRYPOINT-ARGS...] -> archive
  local name=$1 tag=$2 bin=$3 dest=$4 k archive img c; shift 4
  [ -x "$bin" ] || { say "missing $bin: run tests/e2e/build-tools.sh --pods"; exit 1; }
  k=$( { sha256sum < "$bin"; echo "$dest $*"; } | key)
  archive=$OUT/$name-$k.tar; img=localhost/captcha-e2e/$name:$tag
  if [ ! -f "$archive" ]; then
    find "$OUT" -maxdepth 1 -name "$name-*.tar" -delete
    c=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" copy --quiet --chmod 0755 "$c" "$bin" "$dest" >/dev/null
    # numeric non-root user, like the upstream images (distroless nonroot): runAsNonRoot can verify it
    "${BUILDAH[@]}" config --user 65532:65532 --entrypoint "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$dest" "$@")" "$c"
    commit_archive "$c" "$img" "$archive"
    "${BUILDAH[@]}" rmi "$img" >/dev/null 2>&1 || true
  fi
  echo "$img $archive"
}

worker_image() {  # the project's Dockerfile, unmodified, on the local python base
  local base=$1 k archive img ctx=${E2E_WORKER_CONTEXT:-$ROOT} name=${E2E_WORKER_NAME:-worker}
  # the build context as .dockerignore lets it through (pyproject.toml, README.md, src/ without caches)
  k=$(cd "$ctx" && { cat Dockerfile .dockerignore pyproject.toml README.md; echo "$base"
      find src -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -not -name '*.pyc' | sort \
        | while read -r f; do echo "$f"; cat "$f"; done; } | key)
  archive=$OUT/$name-$k.tar; img=localhost/captcha-solver:e2e-$k
  if [ ! -f "$archive" ]; then
    say "$name: buildah bud $ctx/Dockerfile --build-arg PYTHON_IMAGE=$base (pip reaches PyPI)"
    # pip in the build reaches PyPI only with the host's CA bundle
    timed "$name" "${BUILDAH[@]}" bud --isolation chroot --network host --pull=never --layers=false --format docker \
      --build-arg "PYTHON_IMAGE=$base" -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
      -t "$img" -f "$ctx/Dockerfile" "$ctx"
    rm -f "$archive.tmp"
    "${BUILDAH[@]}" push --quiet "$img" "docker-archive:$archive.tmp:$img"
    mv -f "$archive.tmp" "$archive"
    "${BUILDAH[@]}" rmi "$img" >/dev/null 2>&1 || true          # vfs storage copies every layer: keep it small
    find "$OUT" -maxdepth 1 -name "$name-*.tar" ! -name "$name-$k.tar" -delete
  fi
  echo "$img $archive"
}

command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || { say "buildah/mmdebstrap missing (cluster.sh packages)"; exit 1; }
s0=$(date +%s)
py=$(debian_base python-base "$PY_PACKAGES" 'true')
[ "${1:-}" = --worker ] || redis=$(debian_base redis "$REDIS_PACKAGES" 'mkdir -p "$1/data" && chmod 1777 "$1/data"')
worker=$(worker_image "${py%% *}")
if [ "${1:-}" = --worker ]; then echo "worker $worker"; exit 0; fi
out=(
  "worker $worker"
  "redis $redis"
  "keda $(static_image keda "$KEDA_VERSION" "$BIN/keda" /keda)"
  "keda-metrics-apiserver $(static_image keda-metrics-apiserver "$KEDA_VERSION" "$BIN/keda-adapter" /keda-adapter)"
  "keda-admission-webhooks $(static_image keda-admission-webhooks "$KEDA_VERSION" "$BIN/keda-webhooks" /keda-admission-webhooks)"
  "coredns $(static_image coredns "$COREDNS_VERSION" "$BIN/coredns" /coredns)"
  "pause $(static_image pause 1 "$BIN/pause" /pause)"
)
say "images ready in $(( $(date +%s) - s0 ))s"
printf '%s\n' "${out[@]}"
