"""checkov on every rendering (both Helm versions, defaults and every values example).

No check may fail unless charts/captcha-solver/README.md ("Accepted checkov findings") says why it is accepted:
the skip list is charts/captcha-solver/.checkov.yaml plus `checkov.io/skip*` annotations in the templates.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from .chartlib import CHART, HELMS, TOOLS, run, tool

CONFIG = CHART / ".checkov.yaml"

INSECURE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: insecure, namespace: captcha}
spec:
  selector: {matchLabels: {app: insecure}}
  template:
    metadata: {labels: {app: insecure}}
    spec:
      containers:
        - name: c
          image: busybox:latest
          securityContext: {privileged: true, runAsUser: 0}
"""


def _checkov(target: Path, *extra: str) -> dict[str, Any]:
    env = dict(os.environ, BC_SKIP_MAPPING="TRUE", CHECKOV_RUN_SCA_PACKAGE_SCAN_V2="false",
               HOME=str(TOOLS / "checkov-home"))
    proc = run([tool("checkov"), "--config-file", CONFIG, "-d", target, "--framework", "kubernetes",
                "--skip-download", "--quiet", "-o", "json", *extra], env=env, check=False, timeout=600)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    first: dict[str, Any] = report[0] if isinstance(report, list) else report
    return first


@pytest.fixture(scope="module")
def scan(rendering_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One checkov run over all renderings plus a deliberately insecure manifest (proves checks can fail)."""
    (rendering_dir / "canary").mkdir(exist_ok=True)
    (rendering_dir / "canary" / "insecure.yaml").write_text(INSECURE)
    return _checkov(rendering_dir)


def _failed_by_file(report: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in report.get("results", {}).get("failed_checks", []):
        out.setdefault(c["file_path"].lstrip("/"), []).append(f"{c['check_id']} {c['resource']}")
    return out


def test_checkov_runs_on_every_rendering(scan: dict[str, Any], rendering_dir: Path) -> None:
    assert scan["summary"]["parsing_errors"] == 0
    files = {p.relative_to(rendering_dir).as_posix() for p in rendering_dir.glob("helm*/*.yaml")}
    assert len(files) == 2 * len(list((rendering_dir / HELMS[0]).glob("*.yaml")))
    assert scan["summary"]["passed"] > 100 * len(HELMS)


def test_no_unaccepted_findings(scan: dict[str, Any]) -> None:
    failed = _failed_by_file(scan)
    chart_failures = {f: c for f, c in failed.items() if not f.startswith("canary/")}
    assert not chart_failures, json.dumps(chart_failures, indent=1)


def test_checkov_can_fail(scan: dict[str, Any]) -> None:
    failed = _failed_by_file(scan)
    ids = {c.split()[0] for c in failed.get("canary/insecure.yaml", [])}
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23"} <= ids, failed


def test_production_covers_every_pod_with_a_network_policy(rendering_dir: Path, tmp_path: Path) -> None:
    """CKV2_K8S_6 is skipped globally (NetworkPolicies are opt-in); the production example must pass it."""
    for helm in HELMS:
        (tmp_path / f"{helm}.yaml").write_text((rendering_dir / helm / "production.yaml").read_text())
    report = _checkov(tmp_path, "--check", "CKV2_K8S_6", "--skip-check", "NONE")
    assert report["summary"]["failed"] == 0, json.dumps(_failed_by_file(report), indent=1)
    assert report["summary"]["passed"] >= 3


def test_every_accepted_finding_is_explained_in_the_readme() -> None:
    skips = yaml.safe_load(CONFIG.read_text())["skip-check"]
    inline: set[str] = set()
    for tpl in (CHART / "templates").rglob("*.yaml"):
        inline |= set(re.findall(r"checkov\.io/skip\d+:\s*(CKV2?_K8S_\d+)=", tpl.read_text()))
    readme = (CHART / "README.md").read_text()
    section = readme.split("## Accepted checkov findings", 1)[1].split("\n## ", 1)[0]
    for check in [*skips, *sorted(inline)]:
        row = next((line for line in section.splitlines() if f"`{check}`" in line), None)
        assert row, f"README 'Accepted checkov findings' must explain {check}"
        assert len(row.split("|")[-2].strip()) > 40, f"explain why {check} is accepted"
