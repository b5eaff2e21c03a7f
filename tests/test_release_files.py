"""The files a new operator reads first agree with the code: the license is the one the metadata claims, and the
versions of the package, the image and the chart agree with each other and with the CHANGELOG."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

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
    assert _chart()["annotations"]["artifacthub.io/license"] == "Apache-2.0"  # type: ignore[index]
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


def test_docs_name_the_dashboards_variables() -> None:
    dashboard = json.loads((CHART / "dashboards" / "captcha-solver.json").read_text())
    names = [v["name"] for v in dashboard["templating"]["list"]]
    words = {3: "three", 4: "four", 5: "five"}
    metrics = (ROOT / "docs" / "metrics.md").read_text()
    listed = ", ".join(f"`{n}`" for n in names[:-1]) + f" and `{names[-1]}`"
    assert f"{words[len(names)]} variables, {listed}" in " ".join(metrics.split())


def test_upgrades_with_set_keep_the_earlier_values() -> None:
    """`helm upgrade --set` alone drops every value given before: every such example says
    --reset-then-reuse-values (or gives the whole values file)."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), CHART / "README.md.gotmpl",
             CHART / "values.yaml", CHART / "templates" / "NOTES.txt"]
    bad = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in texts for line in p.read_text().splitlines()
           if re.search(r"helm upgrade\b[^`|]*--set ", line) and "reset-then-reuse-values" not in line]
    assert not bad, bad


def _secret_refs(values: dict[str, Any]) -> set[tuple[str, str]]:
    """(Secret, key) pairs a values file makes the pods read (the chart's defaults for keys left out)."""
    refs = set()
    cai = values.get("captchaai") or {}
    if cai.get("existingSecret"):
        refs.add((cai["existingSecret"], cai.get("existingSecretKey", "api-key")))
    for provider in values.get("providers") or []:
        refs.add((provider["existingSecret"], provider.get("existingSecretKey", "api-key")))
    auth = (values.get("redis") or {}).get("auth") or {}
    if auth.get("existingSecret"):
        refs.add((auth["existingSecret"], auth.get("existingSecretPasswordKey", "redis-password")))
    return refs


def test_values_examples_agree_on_their_secrets() -> None:
    """Following two examples must not need two Secrets of one name: the same Secret has the same keys everywhere,
    and a `kubectl create secret` line in an example creates the keys its values read."""
    seen: dict[str, str] = {}
    for path in sorted((ROOT / "values-examples").glob("*.yaml")):
        text = path.read_text()
        created = {m.group(1): set(re.findall(r"--from-(?:literal|file)=([\w.-]+)=", m.group(0)))
                   for m in re.finditer(r"kubectl create secret generic ([\w.-]+)(.*(?:\\\n#.*)*)", text)}
        for name, key in _secret_refs(yaml.safe_load(text) or {}):
            if name in created:
                assert key in created[name], f"{path.name}: reads {name}/{key}, its kubectl creates {created[name]}"
            previous = seen.setdefault(name, key)
            assert previous == key, f"{path.name}: Secret {name} key {key}, another example uses {previous}"
