"""`make release` against a real OCI registry (CNCF distribution's `registry`, on 127.0.0.1 over HTTPS with a CA
of the test's own, temporary storage), with signing keys made as docs/operations.md tells a releaser to:
what a user runs to verify the release succeeds (`helm pull --verify`, `cosign verify`, `cosign
verify-attestation`), and a chart or image that is not the one released is refused with a clear message.

The release tier (`make test-release`, marker `release`): root (buildah) and the release tools
(scripts/install-tools.sh --only release) are needed; the image is the unmodified Dockerfile on the e2e-pods
stand-in base (tests/e2e/images.sh --worker)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import ssl
import subprocess
import tarfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from captcha_worker.localredis import free_port, stop_process, wait_port
from tests.helpers import ROOT

pytestmark = [pytest.mark.release, pytest.mark.timeout(1800)]
COSIGN_PASSWORD = "release-test-password"  # a throwaway key's
BIN = ROOT / ".tools" / "bin"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _run(*args: str | Path, env: dict[str, str] | None = None, check: bool = True,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env={**os.environ, **(env or {})}, check=False)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


@dataclass
class Release:
    registry: str  # host:port
    out: Path  # RELEASE_OUT
    info: dict[str, Any]  # release.json
    tmp: Path
    env: dict[str, str]  # private helm / docker config homes

    @property
    def pubring(self) -> Path:
        return self.out / "keys" / "pubring.gpg"

    @property
    def cosign_pub(self) -> Path:
        return self.out / "keys" / "cosign.pub"

    @property
    def ca(self) -> Path:
        return self.tmp / "ca.pem"

    def api(self, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
        req = urllib.request.Request(f"https://{self.registry}/v2/{path}", data=body, method=method,
                                     headers=headers or {})
        ctx = ssl.create_default_context(cafile=str(self.ca))
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return r.read(), dict(r.headers)

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str]:
        body, headers = self.api("GET", f"{repo}/manifests/{ref}", headers={"Accept": OCI_MANIFEST})
        return json.loads(body), headers["Docker-Content-Digest"]

    def cosign(self, *args: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
        return _run(BIN / "cosign", *args, env=self.env, check=check)

    def helm(self, helm: str, *args: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
        return _run(BIN / helm, *args, env=self.env, check=check)


def _release_keys(keys: Path, password: str) -> Path:
    """RELEASE_KEYS=DIR as docs/operations.md describes it: an OpenPGP key exported for Helm, a cosign key pair
    (password-protected) and the OpenPGP key's name."""
    keys.mkdir(mode=0o700)
    gnupg = keys.parent / "gnupg"
    gnupg.mkdir(mode=0o700)
    name = "captcha-solver release (test key)"
    g = ("gpg", "--homedir", gnupg, "--batch", "--quiet")
    _run(*g, "--passphrase", "", "--quick-gen-key", f"{name} <release-test@captcha-solver.invalid>", "rsa3072",
         "sign", "never")
    (keys / "secring.gpg").write_bytes(subprocess.run([*map(str, g), "--export-secret-keys"], capture_output=True,
                                                      check=True, timeout=60).stdout)
    (keys / "pubring.gpg").write_bytes(subprocess.run([*map(str, g), "--export"], capture_output=True, check=True,
                                                      timeout=60).stdout)
    (keys / "gpg-key-name").write_text(name + "\n")
    subprocess.run([str(BIN / "cosign"), "generate-key-pair"], cwd=keys, check=True, capture_output=True,
                   env={**os.environ, "COSIGN_PASSWORD": password}, timeout=60)
    return keys


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    if os.geteuid() != 0:
        pytest.skip("make release builds the image with buildah as root (chroot isolation): run as root")
    missing = _run("scripts/install-tools.sh", "--check", "--only", "release", check=False)
    if missing.returncode != 0:
        pytest.skip(f"release tools missing (scripts/install-tools.sh --only release): {missing.stdout.strip()}")
    tmp = tmp_path_factory.mktemp("release")
    port = free_port()
    _run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", tmp / "registry.key", "-out", tmp / "ca.pem")
    (tmp / "registry.yml").write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(tmp / "storage")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}",
                 "tls": {"certificate": str(tmp / "ca.pem"), "key": str(tmp / "registry.key")}}}))
    log = open(tmp / "registry.log", "wb")
    proc = subprocess.Popen([str(BIN / "registry"), "serve", str(tmp / "registry.yml")], stdout=log,
                            stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_port(port)
        registry, out = f"127.0.0.1:{port}", tmp / "out"
        keys = _release_keys(tmp / "keys", COSIGN_PASSWORD)
        p = _run("make", "release", f"REGISTRY={registry}", env={
            "RELEASE_KEYS": str(keys), "COSIGN_PASSWORD": COSIGN_PASSWORD, "RELEASE_OUT": str(out),
            "RELEASE_PLAIN_HTTP": "0", "RELEASE_CA_FILE": str(tmp / "ca.pem")}, timeout=1500)
        print(p.stderr[-3000:])
        assert COSIGN_PASSWORD not in p.stdout + p.stderr
        env = {"HELM_CACHE_HOME": str(tmp / "helm/cache"), "HELM_CONFIG_HOME": str(tmp / "helm/config"),
               "HELM_DATA_HOME": str(tmp / "helm/data"), "DOCKER_CONFIG": str(tmp / "docker"),
               "COSIGN_YES": "true", "COSIGN_PASSWORD": "", "SSL_CERT_FILE": str(tmp / "ca.pem")}
        yield Release(registry, out, json.loads((out / "release.json").read_text()), tmp, env)
    finally:
        stop_process(proc)


def _pull(release: Release, helm: str, repo: str, dest: Path) -> subprocess.CompletedProcess[str]:
    dest.mkdir(parents=True, exist_ok=True)
    return release.helm(helm, "pull", f"oci://{release.registry}/{repo}", "--version",
                        release.info["chart_version"], "--verify", "--keyring", release.pubring,
                        "--ca-file", release.ca, "--destination", dest)


def _values(tgz: Path) -> dict[str, Any]:
    with tarfile.open(tgz) as t:
        f = t.extractfile("captcha-solver/values.yaml")
        assert f is not None
        values: dict[str, Any] = yaml.safe_load(f.read())
    return values


@pytest.mark.parametrize("helm", ["helm3", "helm4"])
def test_helm_pull_verify_accepts_the_chart_and_it_pins_the_pushed_image(release: Release, helm: str) -> None:
    dest = release.tmp / f"pulled-{helm}"
    p = _pull(release, helm, "charts/captcha-solver", dest)
    assert p.returncode == 0, p.stderr
    assert "Signed by: captcha-solver release" in p.stdout + p.stderr
    tgz = dest / f"captcha-solver-{release.info['chart_version']}.tgz"
    # the digest in the chart is the one the registry serves for the image's tag
    _, digest = release.manifest("captcha-solver", release.info["app_version"])
    assert release.info["image_digest"] == digest
    image = _values(tgz)["image"]
    assert (image["registry"], image["repository"], image["digest"]) == (release.registry, "captcha-solver", digest)
    rendered = release.helm(helm, "template", "r", tgz, "--set", "captchaai.existingSecret=k",
                            check=True).stdout
    # every container of the chart's own image (workers, hooks, tests) runs the pushed image by digest
    pods = [d["spec"] if d["kind"] == "Pod" else d["spec"]["template"]["spec"] for d in yaml.safe_load_all(rendered)
            if d and d["kind"] in {"Deployment", "StatefulSet", "Job", "Pod"}]
    images = [c["image"] for pod in pods for c in pod["containers"] if not c["image"].startswith("redis:")]
    assert len(images) >= 3  # the workers, the helm test pod, the limit hook Job
    assert set(images) == {f"{release.registry}/captcha-solver:{release.info['app_version']}@{digest}"}
    with tarfile.open(tgz) as t:
        f = t.extractfile("captcha-solver/Chart.yaml")
        assert f is not None
        annotations = yaml.safe_load(f.read())["annotations"]
    assert yaml.safe_load(annotations["artifacthub.io/images"]) == \
        [{"name": "captcha-solver", "image": release.info["image"]}]
    assert yaml.safe_load(annotations["artifacthub.io/signKey"])["fingerprint"] == release.info["gpg_fingerprint"]
    changes = yaml.safe_load(annotations["artifacthub.io/changes"])
    assert changes and {c["kind"] for c in changes} <= {"added", "changed", "deprecated", "removed", "fixed",
                                                       "security"}


def test_cosign_verify_accepts_the_image_and_the_chart(release: Release) -> None:
    for ref in (f"{release.registry}/captcha-solver@{release.info['image_digest']}",
                f"{release.registry}/captcha-solver:{release.info['app_version']}",
                f"{release.registry}/charts/captcha-solver:{release.info['chart_version']}"):
        p = release.cosign("verify", "--key", release.cosign_pub, "--insecure-ignore-tlog=true", ref)
        assert p.returncode == 0, p.stderr
        claims = json.loads(p.stdout)
        want = release.info["image_digest"] if "/charts/" not in ref else release.info["chart_digest"]
        assert [c["critical"]["image"]["docker-manifest-digest"] for c in claims] == [want]


def test_the_sbom_attestation_verifies_and_is_the_image_sbom(release: Release) -> None:
    p = release.cosign("verify-attestation", "--key", release.cosign_pub, "--insecure-ignore-tlog=true",
                       "--type", "spdxjson", f"{release.registry}/captcha-solver@{release.info['image_digest']}")
    assert p.returncode == 0, p.stderr
    statement = json.loads(base64.b64decode(json.loads(p.stdout.splitlines()[0])["payload"]))
    assert statement["predicateType"] == "https://spdx.dev/Document"
    assert [s["digest"]["sha256"] for s in statement["subject"]] == [release.info["image_digest"][7:]]
    local = json.loads((release.out / "sbom.spdx.json").read_text())
    assert len(statement["predicate"]["packages"]) == len(local["packages"]) == release.info["sbom_packages"]
    names = {pkg["name"] for pkg in local["packages"]}
    assert {"captcha-solver", "redis", "aiohttp", "python3"} <= names, sorted(names)


def _tampered_chart(release: Release) -> Path:
    """The released chart with its image digest swapped for another (what an attacker would change), repacked,
    beside the released .prov."""
    name = f"captcha-solver-{release.info['chart_version']}.tgz"
    src, work = release.out / name, release.tmp / "tampered"
    work.mkdir(exist_ok=True)
    dst = work / name
    with tarfile.open(src) as t_in, tarfile.open(dst, "w:gz") as t_out:
        for m in t_in.getmembers():
            f = t_in.extractfile(m)
            data = f.read() if f else b""
            if m.name == "captcha-solver/values.yaml":
                data = data.replace(release.info["image_digest"][7:].encode(), b"0" * 64)
                assert b"0" * 64 in data
                m.size = len(data)
            t_out.addfile(m, io.BytesIO(data) if f else None)
    shutil.copy(str(src) + ".prov", str(dst) + ".prov")
    return dst


def test_a_tampered_chart_is_refused(release: Release) -> None:
    tgz = _tampered_chart(release)
    p = release.helm("helm3", "verify", "--keyring", release.pubring, tgz)
    assert p.returncode != 0
    assert "sha256 sum does not match" in p.stderr, p.stderr
    # pushed to the registry with the released .prov (helm push sends both): pull --verify refuses it
    push = release.helm("helm3", "push", tgz, f"oci://{release.registry}/tampered", "--ca-file", release.ca,
                        check=True)
    assert "Digest:" in push.stdout + push.stderr
    for helm in ("helm3", "helm4"):
        p = _pull(release, helm, "tampered/captcha-solver", release.tmp / f"pulled-tampered-{helm}")
        assert p.returncode != 0, p.stdout
        assert "sha256 sum does not match" in p.stderr, p.stderr
    # and its artifact carries no signature of the release key
    p = release.cosign("verify", "--key", release.cosign_pub, "--insecure-ignore-tlog=true",
                       f"{release.registry}/tampered/captcha-solver:{release.info['chart_version']}")
    assert p.returncode != 0
    assert "no signatures found" in p.stderr, p.stderr


def test_an_unsigned_or_foreign_signed_image_is_refused(release: Release) -> None:
    manifest, _ = release.manifest("captcha-solver", release.info["image_digest"])
    # the released image's layers under another manifest (one annotation added): another digest, no signature
    manifest.setdefault("annotations", {})["org.opencontainers.image.description"] = "tampered"
    body = json.dumps(manifest).encode()
    _, headers = release.api("PUT", "captcha-solver/manifests/tampered", body, {"Content-Type": OCI_MANIFEST})
    digest = headers["Docker-Content-Digest"]
    assert digest != release.info["image_digest"]
    ref = f"{release.registry}/captcha-solver@{digest}"
    p = release.cosign("verify", "--key", release.cosign_pub, "--insecure-ignore-tlog=true", ref)
    assert p.returncode != 0
    assert "no signatures found" in p.stderr, p.stderr
    # signed, but with another key than the release's: refused as well
    keys = release.tmp / "attacker"
    keys.mkdir()
    subprocess.run([str(BIN / "cosign"), "generate-key-pair"], cwd=keys, check=True, capture_output=True,
                   env={**os.environ, **release.env}, timeout=60)
    release.cosign("sign", "--key", keys / "cosign.key", "--tlog-upload=false", ref, check=True)
    assert release.cosign("verify", "--key", keys / "cosign.pub", "--insecure-ignore-tlog=true", ref).returncode == 0
    p = release.cosign("verify", "--key", release.cosign_pub, "--insecure-ignore-tlog=true", ref)
    assert p.returncode != 0
    assert "no matching signatures" in p.stderr, p.stderr
    p = release.cosign("verify-attestation", "--key", release.cosign_pub, "--insecure-ignore-tlog=true",
                       "--type", "spdxjson", ref)
    assert p.returncode != 0
    assert "no matching attestations" in p.stderr or "no signatures found" in p.stderr, p.stderr


def test_the_verify_commands_of_the_operations_guide_pass(release: Release) -> None:
    """docs/operations.md's release-verify block, run as written (SSL_CERT_FILE: the test registry's CA)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    block = text.split("<!-- release-verify:begin", 1)[1].split("<!-- release-verify:end -->", 1)[0]
    script = block.split("```sh\n", 1)[1].split("```", 1)[0]
    first, rest = script.split("\n", 1)
    assert re.fullmatch(r"REGISTRY=registry\.example\.com VERSION=\d+\.\d+\.\d+", first), first
    script = f"REGISTRY={release.registry} VERSION={release.info['chart_version']}\n{rest}"
    work = release.tmp / "doc"
    work.mkdir()
    shutil.copy(release.pubring, work)
    shutil.copy(release.cosign_pub, work)
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, capture_output=True, text=True,
                       timeout=300, check=False, env={**os.environ, **release.env})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Signed by: captcha-solver release" in p.stdout + p.stderr
    statement = json.loads(base64.b64decode(json.loads((work / "sbom-attestation.json").read_text())["payload"]))
    assert [s["digest"]["sha256"] for s in statement["subject"]] == [release.info["image_digest"][7:]]
