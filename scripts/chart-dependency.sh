#!/usr/bin/env bash
# Puts the chart's dependency (Chart.lock: kedacore/keda) into charts/captcha-solver/charts/ (git-ignored), so that
# helm lint / template / unittest / install / package work on the chart exactly as users get it:
#   1. `helm dependency build` from the KEDA chart repository, when it is reachable; else
#   2. the packaged chart ../shared/charts/keda-<version>.tgz (byte-identical to the repository's, see its
#      SOURCES.md), copied.
# Either way the archive must have the sha256 pinned below. A second run with the archive in place does nothing.
#
#   scripts/chart-dependency.sh            ensure it (make tools runs this)
#   scripts/chart-dependency.sh --check    exit 0 when it is in place and verified, 1 otherwise
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CHART=$ROOT/charts/captcha-solver
HELM=${HELM:-$ROOT/.tools/bin/helm3}
# keda 2.20.2 from https://kedacore.github.io/charts (kedacore/charts tag v2.20.2, `helm package keda`)
KEDA_SHA256=14410ed7e2fbdd3d60280512fe381329391b7a463152645f0288726c4d5530b9
SHARED=${CHART_DEPENDENCY_DIR:-$ROOT/../shared/charts}

version=$(awk '/^- name: keda/{k=1} k && /^  version:/{print $2; exit}' "$CHART/Chart.lock")
repo=$(awk '/^- name: keda/{k=1} k && /^  repository:/{print $2; exit}' "$CHART/Chart.lock")
[ -n "$version" ] && [ -n "$repo" ] || { echo "chart-dependency: no keda entry in $CHART/Chart.lock" >&2; exit 2; }
target=$CHART/charts/keda-$version.tgz
log() { echo "chart-dependency: $*"; }
verified() { [ -f "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$KEDA_SHA256" ]; }

if [ "${1:-}" = --check ]; then
  verified && { log "ok: ${target#"$ROOT"/} (sha256 verified)"; exit 0; }
  log "missing or not the pinned archive: ${target#"$ROOT"/}"; exit 1
fi
if verified; then log "ok: ${target#"$ROOT"/} already in place"; exit 0; fi

mkdir -p "$CHART/charts"
rm -f "$CHART"/charts/keda-*.tgz
if [ -x "$HELM" ]; then
  home=$(mktemp -d); trap 'rm -rf "$home"' EXIT
  export HELM_CACHE_HOME=$home/cache HELM_CONFIG_HOME=$home/config HELM_DATA_HOME=$home/data
  if timeout 120 "$HELM" repo add kedacore "$repo" >"$home/log" 2>&1 \
     && timeout 300 "$HELM" dependency build "$CHART" >>"$home/log" 2>&1 && verified; then
    log "built from $repo (helm dependency build): ${target#"$ROOT"/}"
    exit 0
  fi
  log "the chart repository $repo is not reachable ($(grep -m1 -iE 'error|no such host|dial' "$home/log" | cut -c1-120))"
  rm -f "$CHART"/charts/keda-*.tgz
fi
src=$SHARED/keda-$version.tgz
[ -f "$src" ] || { log "FAILED: no $src to fall back on (and the repository is unreachable)" >&2; exit 1; }
cp "$src" "$target.tmp" && mv "$target.tmp" "$target"
verified || { rm -f "$target"; log "FAILED: $src does not have the pinned sha256 $KEDA_SHA256" >&2; exit 1; }
log "copied ${src#"$ROOT"/} -> ${target#"$ROOT"/} (sha256 verified)"
