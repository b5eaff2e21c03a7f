"""Shared constants and helpers for the chart tests (fixtures are in conftest.py).

Every tool comes from `scripts/install-tools.sh` (which `make test` runs first); a missing tool fails the test that
needs it with the command that installs it. Nothing here needs the network.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "captcha-solver"
EXAMPLES = ROOT / "values-examples"
TOOLS = ROOT / ".tools"
BIN = TOOLS / "bin"
CRD_SCHEMAS = ROOT / "tests" / "chart" / "schemas" / "crds"
SHARED_CRDS = ROOT.parent / "shared" / "schemas" / "crds"
K8S_SCHEMA_VERSIONS = ("v1.25.0", "v1.34.0")  # the chart's minimum kubeVersion and helm v3.19's default
HELMS = ("helm3", "helm4")
NAMESPACE = "captcha"
RELEASE = "cs"
API_VERSIONS = ("keda.sh/v1alpha1", "monitoring.coreos.com/v1")

# The values files every rendering test covers: the defaults plus every file in values-examples/.
VALUES_CASES = ["default", *sorted(p.stem for p in EXAMPLES.glob("*.yaml"))]


def tool(name: str) -> Path:
    path = BIN / name
    if not (path.exists() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{name} is not installed at .tools/bin/{name}: run scripts/install-tools.sh (make test does)",
            pytrace=False,
        )
    return path


def run(cmd: list[str | Path], *, check: bool = True, env: dict[str, str] | None = None,
        cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}", pytrace=False)
    return proc

def strip_dependencies(chart_yaml: str) -> str:
    """Chart.yaml without its `dependencies:` entry (the KEDA subchart cannot be fetched offline)."""
    data = yaml.safe_load(chart_yaml)
    if "dependencies" not in data:
        raise AssertionError("Chart.yaml has no dependencies entry to strip")
    lines = chart_yaml.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("dependencies:"))
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and not lines[i].startswith((" ", "#", "-"))), len(lines))
    return "".join(lines[:start] + lines[end:])


def values_args(case: str) -> list[str]:
    return [] if case == "default" else ["-f", str(EXAMPLES / f"{case}.yaml")]


def template_cmd(helm: str, chart: Path, case: str, *extra: str) -> list[str | Path]:
    cmd: list[str | Path] = [tool(helm), "template", RELEASE, chart, "--namespace", NAMESPACE]
    for api in API_VERSIONS:
        cmd += ["--api-versions", api]
    return cmd + values_args(case) + list(extra)


@dataclass
class Rendering:
    helm: str
    case: str
    text: str

    @property
    def docs(self) -> list[dict]:
        return [d for d in yaml.safe_load_all(self.text) if d]

    def kinds(self) -> list[str]:
        return sorted(d["kind"] for d in self.docs)

    def one(self, kind: str, name_suffix: str = "") -> dict:
        found = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"expected one {kind}*{name_suffix} in {self.case}, found {len(found)}"
        return found[0]
