#!/usr/bin/env bash
# `make release REGISTRY=host[:port]`: the worker image and the chart, signed, with an SBOM, pushed to an OCI registry.
#
#   1. keys       RELEASE_KEYS=DIR (secring.gpg + pubring.gpg + gpg-key-name for Helm, cosign.key + cosign.pub for
#                 cosign; COSIGN_PASSWORD from the environment) or RELEASE_KEYS=generate (throwaway keys, for the tests,
#                 written to OUT/keys)
#   2. image      the unmodified Dockerfile, built with buildah by the e2e-pods image code (tests/e2e/images.sh
#                 --worker: on its local Debian stand-in for the python slim base), pushed as
#                 REGISTRY/captcha-solver:<appVersion>; its digest is what everything below pins
#   3. SBOM       syft (SPDX JSON) of the image archive, attached to the image as a signed in-toto attestation
#                 (cosign attest --type spdxjson)
#   4. signatures cosign sign --key of the image and of the chart artifact (no transparency log: it needs the internet)
#   5. chart      a copy of charts/captcha-solver with its KEDA dependency (scripts/chart-dependency.sh) and, written
#                 by scripts/release_chart.py, image.registry/repository/digest in values.yaml and the Artifact Hub
#                 annotations images + signKey; `helm package --sign` (provenance .prov); `helm push` (chart and
#                 .prov) to oci://REGISTRY/charts; artifacthub-repo.yml as REGISTRY/charts/captcha-solver:artifacthub.io
#
# Env: REGISTRY (required), RELEASE_KEYS (required), RELEASE_OUT (default .tools/release/out, emptied first),
#      RELEASE_PLAIN_HTTP=1|0 (default 1 for 127.0.0.1 / localhost, else 0: the registry speaks HTTPS),
#      RELEASE_CA_FILE (PEM: the CA of an HTTPS registry whose certificate the system roots do not cover),
#      RELEASE_SIGNKEY_URL (where the OpenPGP public key is published: artifacthub.io/signKey's url).
# Output in OUT: the chart .tgz + .prov, sbom.spdx.json, keys/ (public halves: pubring.gpg, cosign.pub), release.json
# (references, digests, sizes, seconds per step). Needs root (buildah).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=$ROOT/.tools/bin:$PATH
say() { echo "release: $*" >&2; }
die() { echo "release: FAILED: $*" >&2; exit 1; }
T0=$(date +%s.%N)
declare -A SECS=()
step_start() { STEP=$1; S0=$(date +%s.%N); say "== $1"; }
step_end() { SECS[$STEP]=$(awk -v s="$S0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}'); }

REGISTRY=${REGISTRY:-}
[ -n "$REGISTRY" ] || die "set REGISTRY=host[:port] (make release REGISTRY=registry.example.com)"
KEYS=${RELEASE_KEYS:-}
[ -n "$KEYS" ] || die "set RELEASE_KEYS=DIR (your signing keys) or RELEASE_KEYS=generate (throwaway keys, for tests)"
OUT=${RELEASE_OUT:-$ROOT/.tools/release/out}
# OUT is emptied first: only a directory this script made (release.json or work/ in it), or an empty one
if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -e "$OUT/release.json" ] && [ ! -d "$OUT/work" ]; then
  die "RELEASE_OUT=$OUT is not empty and not a previous release's output: it would be emptied; name another"
fi
case $REGISTRY in 127.0.0.1|127.0.0.1:*|localhost|localhost:*|\[::1\]*) plain_default=1 ;; *) plain_default=0 ;; esac
PLAIN=${RELEASE_PLAIN_HTTP:-$plain_default}
[ "$(id -u)" = 0 ] || die "buildah builds the image as root here (chroot isolation, vfs storage): run as root"
scripts/install-tools.sh --check --only release >/dev/null || die "release tools missing: scripts/install-tools.sh --only release"
command -v gpg >/dev/null || die "gpg not found (apt-get install gnupg)"
HELM=$ROOT/.tools/bin/helm3
[ -x "$HELM" ] || die "no .tools/bin/helm3 (make tools)"
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || die "no .venv (make venv)"

CHART_SRC=$ROOT/charts/captcha-solver
chart_field() { awk -v k="$1:" '$1 == k {gsub(/"/, "", $2); print $2; exit}' "$CHART_SRC/Chart.yaml"; }
VERSION=$(chart_field version) APP_VERSION=$(chart_field appVersion)
IMAGE_REPO=captcha-solver
IMAGE_REF=$REGISTRY/$IMAGE_REPO
CHART_REPO=$REGISTRY/charts/captcha-solver

rm -rf "$OUT"; mkdir -p "$OUT/keys" "$OUT/work"
WORK=$OUT/work
# private Helm, cosign and buildah state: nothing of the user's is read or written
export HELM_CACHE_HOME=$WORK/helm/cache HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data
export DOCKER_CONFIG=$WORK/docker COSIGN_YES=true SYFT_CHECK_FOR_APP_UPDATE=false
export COSIGN_PASSWORD=${COSIGN_PASSWORD-}
mkdir -p "$DOCKER_CONFIG"; echo "{}" > "$DOCKER_CONFIG/config.json"
BUILDAH_ROOT=$ROOT/.tools/release/storage
BUILDAH=(buildah --storage-driver vfs --root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run")
helm_plain=() cosign_plain=() buildah_tls=() oras_plain=() cosign_env=()
CA=${RELEASE_CA_FILE:-}
if [ "$PLAIN" = 1 ]; then
  helm_plain=(--plain-http) cosign_plain=(--allow-insecure-registry --allow-http-registry)
  buildah_tls=(--tls-verify=false) oras_plain=(--plain-http)
elif [ -n "$CA" ]; then
  [ -s "$CA" ] || die "RELEASE_CA_FILE=$CA is not a readable PEM file"
  mkdir -p "$WORK/certs"; cp "$CA" "$WORK/certs/ca.crt"
  helm_plain=(--ca-file "$CA") buildah_tls=(--cert-dir "$WORK/certs") oras_plain=(--ca-file "$CA")
  cosign_env=(SSL_CERT_FILE="$CA")  # Go's x509 on Linux: this file instead of the system roots
fi
say "chart $VERSION, image $APP_VERSION -> $REGISTRY$( [ "$PLAIN" = 1 ] && echo ' (plain HTTP)')"

# ---- 1. keys ---------------------------------------------------------------------------------------------
step_start keys
if [ "$KEYS" = generate ]; then
  K=$WORK/keys; mkdir -p "$K"; chmod 700 "$K"
  gnupg=$WORK/gnupg; mkdir -p "$gnupg"; chmod 700 "$gnupg"
  name="captcha-solver release (throwaway, RELEASE_KEYS=generate)"
  gpg --homedir "$gnupg" --batch --quiet --passphrase '' --quick-gen-key "$name <release@captcha-solver.invalid>" \
    rsa3072 sign never 2>/dev/null
  gpg --homedir "$gnupg" --batch --quiet --export-secret-keys > "$K/secring.gpg"
  gpg --homedir "$gnupg" --batch --quiet --export > "$K/pubring.gpg"
  echo "$name" > "$K/gpg-key-name"
  (cd "$K" && COSIGN_PASSWORD='' cosign generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair"
  export COSIGN_PASSWORD=''
  KEYS=$K
  say "throwaway keys generated (OpenPGP RSA 3072 + cosign ECDSA P-256)"
fi
for f in secring.gpg pubring.gpg gpg-key-name cosign.key cosign.pub; do
  [ -s "$KEYS/$f" ] || die "RELEASE_KEYS=$KEYS has no $f (needs secring.gpg, pubring.gpg, gpg-key-name, cosign.key, cosign.pub)"
done
GPG_NAME=$(cat "$KEYS/gpg-key-name")
FPR=$(gpg --homedir "$(mktemp -d -p "$WORK")" --batch --quiet --with-colons --import-options show-only --import \
      "$KEYS/pubring.gpg" 2>/dev/null | awk -F: '$1 == "fpr" {print $10; exit}')
[ -n "$FPR" ] || die "no OpenPGP key in $KEYS/pubring.gpg"
cp "$KEYS/pubring.gpg" "$KEYS/cosign.pub" "$OUT/keys/"
step_end

# ---- 2. image ----------------------------------------------------------------------------------------------
step_start image-build
read -r _ built archive < <(tests/e2e/images.sh --worker | awk '$1 == "worker"') || true
[ -n "${archive:-}" ] && [ -f "$archive" ] || die "tests/e2e/images.sh --worker built no worker image archive"
step_end
step_start image-push
local_img=localhost/captcha-solver:release-$APP_VERSION
"${BUILDAH[@]}" rmi -f "$local_img" >/dev/null 2>&1 || true
"${BUILDAH[@]}" pull --quiet "docker-archive:$archive" >/dev/null
"${BUILDAH[@]}" tag "$built" "$local_img"
"${BUILDAH[@]}" push --quiet "${buildah_tls[@]}" --format oci --digestfile "$WORK/image.digest" \
  "$local_img" "docker://$IMAGE_REF:$APP_VERSION" >/dev/null || die "buildah push to $IMAGE_REF:$APP_VERSION"
DIGEST=$(cat "$WORK/image.digest")
"${BUILDAH[@]}" rmi -f "$local_img" "$built" >/dev/null 2>&1 || true
IMAGE_UNCOMPRESSED=$(stat -c %s "$archive")
say "image $IMAGE_REF:$APP_VERSION@$DIGEST"
step_end

# ---- 3. SBOM -----------------------------------------------------------------------------------------------
step_start sbom
syft scan "docker-archive:$archive" --quiet --source-name "$IMAGE_REF" --source-version "$APP_VERSION" \
  -o "spdx-json=$OUT/sbom.spdx.json" || die "syft scan"
SBOM_PACKAGES=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["packages"]))' "$OUT/sbom.spdx.json")
step_end

# ---- 4. image signature and the SBOM attestation ---------------------------------------------------------
step_start sign-image
env "${cosign_env[@]}" cosign sign --key "$KEYS/cosign.key" --tlog-upload=false "${cosign_plain[@]}" "$IMAGE_REF@$DIGEST" >"$WORK/cosign-sign.log" 2>&1 \
  || { cat "$WORK/cosign-sign.log" >&2; die "cosign sign $IMAGE_REF@$DIGEST"; }
env "${cosign_env[@]}" cosign attest --key "$KEYS/cosign.key" --tlog-upload=false "${cosign_plain[@]}" --type spdxjson \
  --predicate "$OUT/sbom.spdx.json" "$IMAGE_REF@$DIGEST" >"$WORK/cosign-attest.log" 2>&1 \
  || { cat "$WORK/cosign-attest.log" >&2; die "cosign attest (SBOM) $IMAGE_REF@$DIGEST"; }
step_end

# ---- 5. chart ----------------------------------------------------------------------------------------------
step_start chart
scripts/chart-dependency.sh >/dev/null
cp -a "$CHART_SRC" "$WORK/captcha-solver"
"$PY" scripts/release_chart.py "$WORK/captcha-solver" --registry "$REGISTRY" --repository "$IMAGE_REPO" \
  --digest "$DIGEST" --fingerprint "$FPR" ${RELEASE_SIGNKEY_URL:+--signkey-url "$RELEASE_SIGNKEY_URL"} >/dev/null
"$HELM" package --sign --key "$GPG_NAME" --keyring "$KEYS/secring.gpg" --destination "$OUT" "$WORK/captcha-solver" \
  >/dev/null || die "helm package --sign"
TGZ=$OUT/captcha-solver-$VERSION.tgz
[ -f "$TGZ" ] && [ -f "$TGZ.prov" ] || die "helm package wrote no $TGZ(.prov)"
"$HELM" verify --keyring "$KEYS/pubring.gpg" "$TGZ" >/dev/null || die "helm verify of the chart just signed"
"$HELM" push "$TGZ" "oci://$REGISTRY/charts" "${helm_plain[@]}" >"$WORK/helm-push.log" 2>&1 \
  || { cat "$WORK/helm-push.log" >&2; die "helm push oci://$REGISTRY/charts"; }
CHART_DIGEST=$(awk '/^Digest:/ {print $2}' "$WORK/helm-push.log")
[ -n "$CHART_DIGEST" ] || die "helm push printed no digest"
env "${cosign_env[@]}" cosign sign --key "$KEYS/cosign.key" --tlog-upload=false "${cosign_plain[@]}" "$CHART_REPO@$CHART_DIGEST" \
  >"$WORK/cosign-sign-chart.log" 2>&1 || { cat "$WORK/cosign-sign-chart.log" >&2; die "cosign sign $CHART_REPO@$CHART_DIGEST"; }
# Artifact Hub's repository metadata, where it looks for it (https://artifacthub.io/docs/topics/repositories/)
(cd "$ROOT" && oras push "${oras_plain[@]}" "$CHART_REPO:artifacthub.io" \
  --config /dev/null:application/vnd.cncf.artifacthub.config.v1+yaml \
  artifacthub-repo.yml:application/vnd.cncf.artifacthub.repository-metadata.layer.v1.yaml) >"$WORK/oras.log" 2>&1 \
  || { cat "$WORK/oras.log" >&2; die "oras push $CHART_REPO:artifacthub.io"; }
step_end

# ---- summary -----------------------------------------------------------------------------------------------
IMAGE_COMPRESSED=$(REG="$REGISTRY" PLAIN="$PLAIN" CA="$CA" "$PY" - "$IMAGE_REPO" "$DIGEST" <<'EOF'
import json, os, ssl, sys, urllib.request
scheme = "http" if os.environ["PLAIN"] == "1" else "https"
ctx = ssl.create_default_context(cafile=os.environ["CA"] or None)
req = urllib.request.Request(f"{scheme}://{os.environ['REG']}/v2/{sys.argv[1]}/manifests/{sys.argv[2]}",
                             headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
m = json.load(urllib.request.urlopen(req, timeout=30, context=ctx))
print(m["config"]["size"] + sum(layer["size"] for layer in m["layers"]))
EOF
)
total=$(awk -v s="$T0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
secs_json=$(for k in "${!SECS[@]}"; do printf '"%s": %s\n' "$k" "${SECS[$k]}"; done | paste -sd, -)
cat > "$OUT/release.json" <<EOF
{"registry": "$REGISTRY", "chart_version": "$VERSION", "app_version": "$APP_VERSION",
 "image": "$IMAGE_REF:$APP_VERSION@$DIGEST", "image_digest": "$DIGEST",
 "chart": "oci://$CHART_REPO", "chart_digest": "$CHART_DIGEST", "gpg_fingerprint": "$FPR",
 "chart_bytes": $(stat -c %s "$TGZ"), "prov_bytes": $(stat -c %s "$TGZ.prov"),
 "image_compressed_bytes": $IMAGE_COMPRESSED, "image_archive_bytes": $IMAGE_UNCOMPRESSED,
 "sbom_bytes": $(stat -c %s "$OUT/sbom.spdx.json"), "sbom_packages": $SBOM_PACKAGES,
 "seconds": {$secs_json, "total": $total}}
EOF
rm -rf "$WORK"
say "image  $IMAGE_REF:$APP_VERSION@$DIGEST ($((IMAGE_COMPRESSED / 1000000)) MB compressed), signed, SBOM attested ($SBOM_PACKAGES packages)"
say "chart  oci://$CHART_REPO --version $VERSION ($CHART_DIGEST), provenance + cosign signature"
say "done in ${total}s; $OUT/release.json"
