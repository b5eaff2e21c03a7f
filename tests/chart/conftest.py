"""Fixtures for the chart tests: Helm's environment, an offline copy of the chart, the renderings."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .chartlib import CHART, HELMS, TOOLS, VALUES_CASES, Rendering, run, strip_dependencies, template_cmd


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Helm with its own empty config/cache/data dirs (never the user's), and the unittest plugin dir."""
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        HELM_PLUGINS=str(TOOLS / "helm-plugins"),
        HELM_NO_PLUGINS="0",
    )
    return env


@pytest.fixture(scope="session")
def offline_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary copy of the chart without the kedacore/keda dependency entry.

    Helm checks declared dependencies even when their condition is false ("found in Chart.yaml, but missing in
    charts/ directory: keda") and the KEDA chart cannot be downloaded here. The entry itself is checked by
    test_render.py::test_keda_dependency_entry.
    """
    dest = tmp_path_factory.mktemp("chart") / "captcha-solver"
    shutil.copytree(CHART, dest)
    chart_yaml = dest / "Chart.yaml"
    chart_yaml.write_text(strip_dependencies(chart_yaml.read_text()))
    assert "dependencies" not in yaml.safe_load(chart_yaml.read_text())
    return dest


@pytest.fixture(scope="session")
def renderings(offline_chart: Path, helm_env: dict[str, str],
               tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Rendering]:
    """Every values case rendered by both Helm versions, once per session."""
    out: dict[tuple[str, str], Rendering] = {}
    for helm in HELMS:
        for case in VALUES_CASES:
            proc = run(template_cmd(helm, offline_chart, case), env=helm_env)
            out[(helm, case)] = Rendering(helm, case, proc.stdout)
    return out


@pytest.fixture(scope="session")
def rendering_dir(renderings: dict[tuple[str, str], Rendering],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The renderings as files <helm>/<case>.yaml (for kubeconform and checkov)."""
    root = tmp_path_factory.mktemp("rendered")
    for (helm, case), r in renderings.items():
        (root / helm).mkdir(exist_ok=True)
        (root / helm / f"{case}.yaml").write_text(r.text)
    yield root
