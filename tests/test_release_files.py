"""The files a new operator reads first agree with the code: the license is the one the metadata claims, and the
versions of the package, the image and the chart agree with each other and with the CHANGELOG."""

from __future__ import annotations

import re
import tomllib

import yaml

import captcha_worker
from tests.helpers import ROOT

CHART = ROOT / "charts" / "captcha-solver"


def _chart() -> dict[str, object]:
    meta: dict[str, object] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


def _pyproject() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_license_is_the_apache_license_the_metadata_claims() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub
    assert _pyproject()["license"] == {"text": "Apache-2.0"}
    assert _chart()["annotations"] == {"artifacthub.io/license": "Apache-2.0"}
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()
    assert "!LICENSE" in (ROOT / ".dockerignore").read_text().splitlines()


def test_package_image_and_chart_app_version_agree() -> None:
    version = _pyproject()["version"]
    assert captcha_worker.__version__ == version
    assert _chart()["appVersion"] == version
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"(?m)^ARG VERSION=(\S+)$", dockerfile) == [version]
    assert f"docker build -t captcha-solver:{version} ." in dockerfile


def test_changelog_has_the_current_versions_and_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text)
    assert sections[0] == ("Unreleased", ""), "Keep a Changelog: an [Unreleased] section first"
    chart = _chart()
    assert sections[1][0] == chart["version"], "the newest section is the Chart.yaml version"
    newest = text.split(f"## [{chart['version']}]", 1)[1].split("\n## [", 1)[0]
    assert f"worker package and image {chart['appVersion']}" in newest
    dates = [d for _, d in sections[1:]]
    assert dates == sorted(dates, reverse=True), "newest first"


def test_security_policy_exists_and_says_how_to_report() -> None:
    text = (ROOT / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in text
    assert "not** open a public issue" in text
