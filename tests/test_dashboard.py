"""The dashboard is code (dashboards/): the committed JSON and docs section are what it generates, Grafana's own
typed schema (the Go foundation SDK, strict) accepts the JSON and rejects what Grafana would not, and the layout is
a valid grid. The queries themselves are proven against a real Prometheus in test_observability.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dashboards import captcha_solver
from dashboards.build import dashboard_json, docs_section, layout
from dashboards.panels import GRID_COLUMNS, Graph, Q, Row, Stat, m
from tests.chart.chartlib import tool
from tests.helpers import ROOT

DASHBOARD = ROOT / "charts" / "captcha-solver" / "dashboards" / "captcha-solver.json"


def validate(tmp_path: Path, doc: dict[str, Any] | str, name: str = "d.json") -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return subprocess.run([str(tool("dashboard-validate")), str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def committed() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def test_regenerating_gives_the_committed_files() -> None:
    proc = subprocess.run([sys.executable, "-m", "dashboards", "build", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert DASHBOARD.read_text() == dashboard_json()
    assert docs_section() in (ROOT / "docs" / "metrics.md").read_text()


def test_the_check_fails_on_a_hand_edit(tmp_path: Path) -> None:
    """build --check is not a no-op: a copy of the repository with one edited title is reported stale."""

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "dashboards", copy / "dashboards", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "charts/captcha-solver/dashboards").mkdir(parents=True)
    (copy / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "metrics.md", copy / "docs" / "metrics.md")
    (copy / "charts/captcha-solver/dashboards/captcha-solver.json").write_text(
        DASHBOARD.read_text().replace('"title": "Balance"', '"title": "Balance (edited)"'))
    proc = subprocess.run([sys.executable, "-m", "dashboards", "build", "--check"], cwd=copy, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "captcha-solver.json is not what dashboards/ generates" in proc.stderr


def test_grafana_schema_accepts_the_dashboard(tmp_path: Path) -> None:
    proc = subprocess.run([str(tool("dashboard-validate")), str(DASHBOARD)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith(": valid")


@pytest.mark.parametrize(("what", "edit", "error"), [
    ("a stat panel without percentChangeColorMode",
     lambda d: next(p for p in d["panels"] if p["type"] == "stat")["options"].pop("percentChangeColorMode"),
     "options.percentChangeColorMode: required field is missing"),
    ("a template variable with an empty current",
     lambda d: d["templating"]["list"][1].update(current={}),
     "templating.list[1].current.text: required field is missing"),
    ("an unknown dashboard field", lambda d: d.update(refreshh="30s"), "unexpected field 'refreshh'"),
    ("an unknown panel option",
     lambda d: next(p for p in d["panels"] if p["type"] == "timeseries")["options"].update(legendd={}),
     "unexpected field 'legendd'"),
    ("a misspelt Prometheus query field",
     lambda d: next(p for p in d["panels"] if p["type"] == "stat")["targets"][0].update(legendFromat="x"),
     "unexpected field 'legendFromat'"),
    ("a gridPos of the wrong type",
     lambda d: next(p for p in d["panels"] if p["type"] == "stat")["gridPos"].update(w="8"), "gridPos"),
    ("a dashboard without templating", lambda d: d.pop("templating"), "templating: required field is missing"),
])
def test_grafana_schema_rejects_what_grafana_would_not(tmp_path: Path, what: str, edit: Any, error: str) -> None:
    doc = committed()
    edit(doc)
    proc = validate(tmp_path, doc)
    assert proc.returncode == 1, f"{what}: accepted\n{proc.stdout}"
    assert error in proc.stdout, f"{what}: {proc.stdout}"


def test_the_validator_reports_unreadable_input(tmp_path: Path) -> None:
    proc = validate(tmp_path, "{not json")
    assert proc.returncode == 1 and "INVALID" in proc.stdout
    missing = subprocess.run([str(tool("dashboard-validate")), str(tmp_path / "nope.json")], capture_output=True,
                             text=True, timeout=60, check=False)
    assert missing.returncode == 1 and "no such file" in missing.stdout


def test_layout_is_a_grid_without_overlaps() -> None:
    placed = list(layout(captcha_solver.ROWS))
    cells: dict[tuple[int, int], str] = {}
    for p in placed:
        assert 0 <= p.x and p.x + p.w <= GRID_COLUMNS, p
        name = p.panel.title if p.panel else f"row {p.row.title}"
        for x in range(p.x, p.x + p.w):
            for y in range(p.y, p.y + p.h):
                assert (x, y) not in cells, f"{name} overlaps {cells[(x, y)]}"
                cells[(x, y)] = name
    # each row header sits above its panels, and the next row starts below all of them
    headers = [p for p in placed if p.panel is None]
    assert [h.row.title for h in headers] == [r.title for r in captcha_solver.ROWS]
    for header, nxt in zip(headers, [*headers[1:], None], strict=True):
        mine = [p for p in placed if p.panel is not None and p.row is header.row]
        assert all(p.y > header.y for p in mine)
        if nxt is not None:
            assert all(p.y + p.h <= nxt.y for p in mine)
    # the JSON carries exactly these positions, rows uncollapsed with their panels at the top level
    panels = committed()["panels"]
    assert [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"], p["gridPos"]["h"]) for p in panels] == [
        (p.x, p.y, p.w, p.h) for p in placed]
    assert [p["id"] for p in panels] == list(range(1, len(panels) + 1))


def test_rows_are_the_operators_reading_order() -> None:
    assert [r.title for r in captcha_solver.ROWS] == ["Plan & budget", "Overflow & spend", "Queue & solves",
                                                      "CaptchaAI API", "Errors", "Tenants", "Workers"]


def test_adding_a_row_is_a_few_lines(tmp_path: Path) -> None:
    """What the gateway's tenants row did: one Row in ROWS; it lands before Workers, the JSON stays valid for
    Grafana, and the panels below move down."""
    extra = Row("Example", (
        Stat("Example stat", "An example.", (Q("x", f"max({m('queue_depth', state='pending')})"),)),
        Graph("Example graph", "An example.", (Q("{{state}}", f"max by (state) ({m('queue_depth')})"),), w=20),
    ))
    rows = (*captcha_solver.ROWS[:-1], extra, captcha_solver.ROWS[-1])
    doc = json.loads(dashboard_json(rows))
    titles = [p["title"] for p in doc["panels"]]
    assert titles.index("Example") == titles.index("Workers") - 3
    graph = next(p for p in doc["panels"] if p["title"] == "Example graph")
    assert graph["gridPos"] == {"x": 4, "y": next(p for p in doc["panels"] if p["title"] == "Example")["gridPos"]["y"]
                                + 1, "w": 20, "h": 8}
    assert validate(tmp_path, doc).returncode == 0
    with pytest.raises(ValueError, match="wider than the grid"):
        list(layout((Row("Too wide", (Graph("g", "d", (), w=25),)),)))


def test_selector_helper() -> None:
    assert m("tasks_total", outcome="solved") == ('captcha_solver_tasks_total{namespace=~"$namespace", '
                                                  'job=~"$job", outcome="solved"}')
    assert m("x", code="!OK|A", kind="~a|b").endswith('code!~"OK|A", kind=~"a|b"}')
    assert m("tenant_threads", True) == 'captcha_solver_tenant_threads{namespace=~"$namespace", job=~"$gateway"}'
