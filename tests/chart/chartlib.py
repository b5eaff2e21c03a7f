"""Shared constants and helpers for the chart tests (fixtures are in conftest.py).

Every tool comes from `scripts/install-tools.sh` (which `make test` runs first); a missing tool fails the test that
needs it with the command that installs it. The chart is tested as users get it, with its real dependency
(kedacore/keda in charts/, put there by `scripts/chart-dependency.sh`: from the chart repository, or offline from
../shared/charts). Nothing here needs the network.
"""

from __future__ import annotations

import os
import shutil
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
# What a user must give on top of the defaults: the API key's Secret (the chart fails without a key).
REQUIRED_VALUES = ("--set", "captchaai.existingSecret=captchaai-api-key")
DEPENDENCY_SCRIPT = ROOT / "scripts" / "chart-dependency.sh"


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

def ensure_dependency() -> Path:
    """The chart directory with its dependency archive in charts/ (verified against its pinned sha256)."""
    proc = subprocess.run([str(DEPENDENCY_SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        pytest.fail(f"the chart's dependency is not available: {proc.stdout}{proc.stderr}", pytrace=False)
    return CHART


def chart_copy(dest: Path) -> Path:
    """A copy of the chart, dependency included, at dest/captcha-solver (for tests that edit it)."""
    ensure_dependency()
    chart = dest / "captcha-solver"
    shutil.copytree(CHART, chart)
    return chart


def values_args(case: str) -> list[str]:
    return list(REQUIRED_VALUES) if case == "default" else ["-f", str(EXAMPLES / f"{case}.yaml")]


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
