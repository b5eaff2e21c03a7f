"""Fixtures for the chart tests: Helm's environment, the chart with its dependency, the renderings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .chartlib import HELMS, TOOLS, VALUES_CASES, Rendering, ensure_dependency, run, template_cmd


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
def chart() -> Path:
    """The chart directory itself, unmodified, with its real dependency in charts/ (scripts/chart-dependency.sh)."""
    return ensure_dependency()


@pytest.fixture(scope="session")
def renderings(chart: Path, helm_env: dict[str, str],
               tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Rendering]:
    """Every values case rendered by both Helm versions, once per session."""
    out: dict[tuple[str, str], Rendering] = {}
    for helm in HELMS:
        for case in VALUES_CASES:
            proc = run(template_cmd(helm, chart, case), env=helm_env)
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
