"""scripts/release_chart.py (what `make release` writes into the chart it packages) and the Artifact Hub
annotations of charts/captcha-solver/Chart.yaml; scripts/release.sh's refusals that need no registry."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT

CHART = ROOT / "charts" / "captcha-solver"
DIGEST = "sha256:" + "ab" * 32
FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_chart", ROOT / "scripts" / "release_chart.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["release_chart"] = mod
    spec.loader.exec_module(mod)
    return mod


rc = _module()


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "captcha-solver"
    shutil.copytree(CHART, dst, ignore=shutil.ignore_patterns("charts"))
    return dst


def test_prepare_pins_the_image_and_keeps_every_other_value_and_comment(tmp_path: Path) -> None:
    chart = _copy(tmp_path)
    image = rc.prepare(chart, "reg.example:5000", "captcha-solver", DIGEST, fingerprint=FPR,
                       signkey_url="https://keys.example/KEYS", changelog=CHANGELOG)
    assert image == f"reg.example:5000/captcha-solver:0.2.0@{DIGEST}"
    before = (CHART / "values.yaml").read_text().splitlines()
    after = (chart / "values.yaml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [('  registry: ""', "  registry: reg.example:5000"),
                       ('  digest: ""', f"  digest: {DIGEST}")]  # repository is captcha-solver already
    old, new = yaml.safe_load("\n".join(before)), yaml.safe_load("\n".join(after))
    assert new["image"] == {**old["image"], "registry": "reg.example:5000", "digest": DIGEST}
    assert {k: v for k, v in new.items() if k != "image"} == {k: v for k, v in old.items() if k != "image"}
    meta_old: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    meta: dict[str, Any] = yaml.safe_load((chart / "Chart.yaml").read_text())
    ann = meta.pop("annotations")
    assert meta == {k: v for k, v in meta_old.items() if k != "annotations"}
    assert yaml.safe_load(ann["artifacthub.io/images"]) == [{"name": "captcha-solver", "image": image}]
    assert yaml.safe_load(ann["artifacthub.io/signKey"]) == {"fingerprint": FPR, "url": "https://keys.example/KEYS"}
    assert yaml.safe_load(ann["artifacthub.io/changes"]) == rc.changes(CHANGELOG, meta["version"])
    for k in ("artifacthub.io/license", "artifacthub.io/links"):
        assert ann[k] == meta_old["annotations"][k]
    assert "artifacthub.io/images: |\n" in (chart / "Chart.yaml").read_text()  # block style, as written by hand


@pytest.mark.parametrize(("digest", "fpr", "why"), [
    ("sha256:abc", FPR, "not a sha256 digest"),
    ("latest", FPR, "not a sha256 digest"),
    (DIGEST, "ABCD", "not a 40-hex-digit OpenPGP fingerprint"),
])
def test_prepare_refuses_what_is_not_a_digest_or_fingerprint(tmp_path: Path, digest: str, fpr: str,
                                                             why: str) -> None:
    chart = _copy(tmp_path)
    with pytest.raises(rc.ReleaseError, match=why):
        rc.prepare(chart, "reg", "captcha-solver", digest, fingerprint=fpr, signkey_url="https://k",
                   changelog=CHANGELOG)
    assert (chart / "values.yaml").read_text() == (CHART / "values.yaml").read_text()


def test_prepare_refuses_a_values_file_without_the_image_block(tmp_path: Path) -> None:
    with pytest.raises(rc.ReleaseError, match="no top-level 'image:' block"):
        rc.set_image_values("replicas: 1\nredis:\n  image:\n    digest: \"\"\n", "r", "x", DIGEST)
    with pytest.raises(rc.ReleaseError, match=r"lacks \['digest'\]"):
        rc.set_image_values("image:\n  registry: \"\"\n  repository: x\nother:\n  digest: \"\"\n", "r", "x", DIGEST)


def test_the_cli_reports_a_bad_digest_in_one_line(tmp_path: Path) -> None:
    chart = _copy(tmp_path)
    p = subprocess.run([sys.executable, "scripts/release_chart.py", str(chart), "--registry", "r", "--repository",
                        "x", "--digest", "nope", "--fingerprint", FPR], capture_output=True, text=True, cwd=ROOT,
                       check=False)
    assert p.returncode == 1
    assert p.stderr == "release_chart: not a sha256 digest: 'nope'\n"


SECTION = """# Changelog

## [Unreleased]

### Added

- Not released yet.

## [1.2.0] - 2026-12-03

Chart 1.2.0.

### Added

- First `thing`, on
  two lines.
- Second.

### Upgrade notes

- Not a change kind.

### Fixed

- A fix.

## [1.1.0] - 2026-12-01

### Removed

- Older.
"""


def test_changes_are_the_bullets_of_the_versions_changelog_section() -> None:
    assert rc.changes(SECTION, "1.2.0") == [
        {"kind": "added", "description": "First `thing`, on two lines."},
        {"kind": "added", "description": "Second."},
        {"kind": "fixed", "description": "A fix."},
    ]
    assert rc.changes(SECTION, "1.1.0") == [{"kind": "removed", "description": "Older."}]
    with pytest.raises(rc.ReleaseError, match=r"no section '## \[1.3.0\]'"):
        rc.changes(SECTION, "1.3.0")
    with pytest.raises(rc.ReleaseError, match="lists no change"):
        rc.changes("## [2.0.0]\n\n### Upgrade notes\n\n- x\n", "2.0.0")


def test_the_current_chart_version_has_changes_for_artifact_hub() -> None:
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    entries = rc.changes(CHANGELOG, version)
    assert entries and all(e["kind"] in rc.KINDS.values() and e["description"] for e in entries)


def test_artifacthub_placeholders_are_the_ones_the_release_rewrites() -> None:
    ann = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert yaml.safe_load(ann["artifacthub.io/images"]) == \
        [{"name": "captcha-solver", "image": f"captcha-solver:{meta['appVersion']}"}]
    assert yaml.safe_load(ann["artifacthub.io/signKey"])["url"] == rc.DEFAULT_SIGNKEY_URL
    links = yaml.safe_load(ann["artifacthub.io/links"])
    assert links and all(set(link) == {"name", "url"} and link["url"].startswith("https://") for link in links)


@pytest.mark.parametrize(("env", "message"), [
    ({}, "release: FAILED: set REGISTRY=host[:port]"),
    ({"REGISTRY": "127.0.0.1:5000"}, "release: FAILED: set RELEASE_KEYS=DIR"),
])
def test_release_refuses_without_registry_or_keys(env: dict[str, str], message: str) -> None:
    p = subprocess.run(["scripts/release.sh"], capture_output=True, text=True, cwd=ROOT,
                       env={"PATH": "/usr/bin:/bin", **env}, timeout=30, check=False)
    assert p.returncode == 1
    assert p.stderr.startswith(message), p.stderr
    assert len(p.stderr.splitlines()) == 1


def test_release_refuses_to_empty_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep")
    p = subprocess.run(["scripts/release.sh"], capture_output=True, text=True, cwd=ROOT, timeout=30, check=False,
                       env={"PATH": "/usr/bin:/bin", "REGISTRY": "127.0.0.1:5000", "RELEASE_KEYS": "generate",
                            "RELEASE_OUT": str(tmp_path)})
    assert p.returncode == 1
    assert p.stderr == (f"release: FAILED: RELEASE_OUT={tmp_path} is not empty and not a previous release's "
                        "output: it would be emptied; name another\n")
    assert (tmp_path / "precious.txt").read_text() == "keep"
