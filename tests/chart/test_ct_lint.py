"""`ct lint` (chart-testing, scripts/ct-lint.sh, run by `make lint`) on the chart, and its version-bump check.

The check is run against throw-away repositories holding this chart, ct.yaml and the script, so that each case
has the history it needs: a release tag, a change to a packaged file, a change to a file `helm package` leaves
out, a bump.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .chartlib import CHART, ROOT, TOOLS, ensure_dependency, tool

SCRIPT = ROOT / "scripts" / "ct-lint.sh"


def _ct_lint(repo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    for name in ("ct", "helm", "yamllint", "yamale"):
        tool(name)
    return subprocess.run([str(repo / "scripts" / "ct-lint.sh")], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, **env})


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with this chart (dependency included), ct.yaml and the scripts, on a branch `main`."""
    ensure_dependency()
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copytree(CHART, repo / "charts" / "captcha-solver")
    for name in ("ct-lint.sh", "chart-dependency.sh"):
        shutil.copy2(ROOT / "scripts" / name, repo / "scripts" / name)
    shutil.copy2(ROOT / "ct.yaml", repo / "ct.yaml")
    shutil.copy2(ROOT / ".gitignore", repo / ".gitignore")
    (repo / ".tools").symlink_to(TOOLS)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "chart")
    return repo


def _commit(repo: Path, message: str) -> None:
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", message)


def _bump(repo: Path) -> str:
    chart_yaml = repo / "charts" / "captcha-solver" / "Chart.yaml"
    text = chart_yaml.read_text()
    old = next(line.split()[1] for line in text.splitlines() if line.startswith("version:"))
    major, minor, _patch = old.split(".")
    new = f"{major}.{int(minor) + 1}.0"
    chart_yaml.write_text(text.replace(f"version: {old}", f"version: {new}", 1))
    return new


def test_this_checkout_passes() -> None:
    proc = _ct_lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ct-lint: ok" in proc.stdout
    assert "✔︎ captcha-solver" in proc.stdout


def test_a_packaged_change_after_the_release_tag_needs_a_bump(repo: Path) -> None:
    version = next(line.split()[1] for line in (repo / "charts/captcha-solver/Chart.yaml").read_text().splitlines()
                   if line.startswith("version:"))
    _git(repo, "tag", f"captcha-solver-{version}")
    _git(repo, "checkout", "-q", "-b", "feature")
    values = repo / "charts" / "captcha-solver" / "values.yaml"
    values.write_text(values.read_text() + "# a comment is a change to the packaged chart\n")
    _commit(repo, "values")

    refused = _ct_lint(repo)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"changed since captcha-solver-{version}" in refused.stdout
    assert "Needs a version bump" in refused.stderr
    assert "its version was not bumped: raise version:" in refused.stderr

    new = _bump(repo)
    bumped = _ct_lint(repo)
    assert bumped.returncode == 0, bumped.stdout + bumped.stderr
    assert f"Old chart version: {version}" in bumped.stdout
    assert f"New chart version: {new}" in bumped.stdout
    assert "Chart version ok." in bumped.stdout


def test_without_a_tag_the_base_is_main_and_unpackaged_files_need_no_bump(repo: Path) -> None:
    _git(repo, "checkout", "-q", "-b", "feature")
    suite = next((repo / "charts" / "captcha-solver" / "tests").glob("*_test.yaml"))
    suite.write_text(suite.read_text() + "# helm package leaves the unittest suites out (.helmignore)\n")
    _commit(repo, "suite")
    unpackaged = _ct_lint(repo)
    assert unpackaged.returncode == 0, unpackaged.stdout + unpackaged.stderr
    assert "unchanged since main (as packaged): no version bump needed" in unpackaged.stdout

    template = repo / "charts" / "captcha-solver" / "templates" / "NOTES.txt"
    template.write_text(template.read_text() + "\n")  # uncommitted: the working tree counts
    refused = _ct_lint(repo)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "changed since main" in refused.stdout
    assert "Needs a version bump" in refused.stderr


def test_a_lint_failure_is_reported(repo: Path) -> None:
    chart_yaml = repo / "charts" / "captcha-solver" / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text() + "unknownField: 1\n")  # not in ct's Chart.yaml schema
    _bump(repo)
    proc = _ct_lint(repo, CT_BASE="main")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "unknownField" in proc.stdout + proc.stderr
    assert "ct-lint: FAILED" in proc.stderr
