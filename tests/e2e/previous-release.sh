#!/usr/bin/env bash
# The previous released chart version, published to the e2e-pods registry so that the upgrade scenario installs it
# the way a user had it: tests/e2e/previous-release.sh REGISTRY OUT
#
#   source   the release tag captcha-solver-<version> when the repository has it, else E2E_PREVIOUS_REF (default
#            030aefa: the last commit of chart 0.2.0 with worker 0.1.0, the version before 0.3.0; there is no tag)
#   image    that tree's unmodified Dockerfile, built like the current one (tests/e2e/images.sh --worker with
#            E2E_WORKER_CONTEXT), pushed as REGISTRY/captcha-solver:<its appVersion>; its digest is what the install
#            pins (image.registry/repository/digest of the chart's own values)
#   chart    that tree's chart with its KEDA dependency (the same keda-2.20.2.tgz, sha256 checked against its
#            Chart.lock's version), `helm package`, `helm push` to oci://REGISTRY/charts (unsigned: 0.2.0 was never
#            signed)
#
# Writes OUT/previous.json: {"ref", "chart_version", "app_version", "chart", "image_digest", "image"}.
# Plain HTTP (a 127.0.0.1 registry). Needs root (buildah), .tools/bin/helm3.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REGISTRY=${1:?usage: previous-release.sh REGISTRY OUT}
OUT=${2:?usage: previous-release.sh REGISTRY OUT}
PREVIOUS_VERSION=${E2E_PREVIOUS_VERSION:-0.2.0}
say() { echo "previous-release: $*" >&2; }
die() { echo "previous-release: FAILED: $*" >&2; exit 1; }
HELM=$ROOT/.tools/bin/helm3

ref=$(git -C "$ROOT" rev-parse --verify --quiet "refs/tags/captcha-solver-$PREVIOUS_VERSION" || true)
[ -n "$ref" ] || ref=$(git -C "$ROOT" rev-parse --verify "${E2E_PREVIOUS_REF:-030aefa}^{commit}")
rm -rf "$OUT"; mkdir -p "$OUT/src"
git -C "$ROOT" archive "$ref" | tar -x -C "$OUT/src"
chart=$OUT/src/charts/captcha-solver
field() { awk -v k="$1:" '$1 == k {gsub(/"/, "", $2); print $2; exit}' "$chart/Chart.yaml"; }
version=$(field version) app=$(field appVersion)
[ "$version" = "$PREVIOUS_VERSION" ] || die "$ref has chart $version, not $PREVIOUS_VERSION (E2E_PREVIOUS_REF)"
say "chart $version / worker $app from ${ref:0:12}"

# image: the old tree's Dockerfile on the same local python base
read -r _ built archive < <(E2E_WORKER_CONTEXT=$OUT/src E2E_WORKER_NAME=previous-worker "$HERE/images.sh" --worker \
  | awk '$1 == "worker"') || true
[ -n "${archive:-}" ] && [ -f "$archive" ] || die "images.sh built no image of $ref"
B=(buildah --storage-driver vfs --root "$ROOT/.tools/release/storage/root" --runroot "$ROOT/.tools/release/storage/run")
"${B[@]}" rmi -f "$built" >/dev/null 2>&1 || true
"${B[@]}" pull --quiet "docker-archive:$archive" >/dev/null
"${B[@]}" push --quiet --tls-verify=false --format oci --digestfile "$OUT/image.digest" "$built" \
  "docker://$REGISTRY/captcha-solver:$app" >/dev/null || die "buildah push $REGISTRY/captcha-solver:$app"
"${B[@]}" rmi -f "$built" >/dev/null 2>&1 || true
digest=$(cat "$OUT/image.digest")

# chart: its dependency is the KEDA chart the current one uses (same version, same archive)
keda=$(awk '/^- name: keda/ {f=1} f && $1 == "version:" {print $2; exit}' "$chart/Chart.lock")
[ -f "$ROOT/charts/captcha-solver/charts/keda-$keda.tgz" ] || "$ROOT/scripts/chart-dependency.sh" >/dev/null
mkdir -p "$chart/charts"
cp "$ROOT/charts/captcha-solver/charts/keda-$keda.tgz" "$chart/charts/" \
  || die "no keda-$keda.tgz for $version's dependency"
export HELM_CACHE_HOME=$OUT/helm/cache HELM_CONFIG_HOME=$OUT/helm/config HELM_DATA_HOME=$OUT/helm/data
"$HELM" package "$chart" --destination "$OUT" >/dev/null || die "helm package $version"
"$HELM" push "$OUT/captcha-solver-$version.tgz" "oci://$REGISTRY/charts" --plain-http >"$OUT/helm-push.log" 2>&1 \
  || { cat "$OUT/helm-push.log" >&2; die "helm push $version"; }
cp "$OUT/src/values-examples/e2e-pods.yaml" "$OUT/e2e-pods-values.yaml"
rm -rf "$OUT/src" "$OUT/helm"
cat > "$OUT/previous.json" <<EOF
{"ref": "$ref", "chart_version": "$version", "app_version": "$app", "chart": "oci://$REGISTRY/charts/captcha-solver",
 "image_digest": "$digest", "image": "$REGISTRY/captcha-solver:$app@$digest", "values": "$OUT/e2e-pods-values.yaml"}
EOF
say "oci://$REGISTRY/charts/captcha-solver --version $version, image $REGISTRY/captcha-solver:$app@$digest"
