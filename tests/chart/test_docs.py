"""The chart README (helm-docs), values.schema.json and values.yaml stay in sync."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.test_docs import documented_env

from .chartlib import CHART, ROOT, Rendering, run, tool
from .values_schema import OPEN_OBJECTS, OVERRIDES, render


def _helm_docs(chart_root: Path) -> str:
    run([tool("helm-docs"), "--chart-search-root", chart_root, "--template-files", "README.md.gotmpl",
         "--sort-values-order", "file", "--log-level", "warning"])
    return (chart_root / "captcha-solver" / "README.md").read_text()


def test_readme_is_generated_and_current(tmp_path: Path) -> None:
    shutil.copytree(CHART, tmp_path / "captcha-solver")
    (tmp_path / "captcha-solver" / "README.md").unlink()
    generated = _helm_docs(tmp_path)
    assert "| captchaai.threads | int | `5` |" in generated
    assert generated == (CHART / "README.md").read_text(), (
        "charts/captcha-solver/README.md is stale: run .tools/bin/helm-docs --chart-search-root charts "
        "--template-files README.md.gotmpl --sort-values-order file")


def test_readme_staleness_is_detected(tmp_path: Path) -> None:
    shutil.copytree(CHART, tmp_path / "captcha-solver")
    values = tmp_path / "captcha-solver" / "values.yaml"
    values.write_text(values.read_text().replace("# -- Plan price per month", "# -- Monthly plan price"))
    assert _helm_docs(tmp_path) != (CHART / "README.md").read_text()


def _leaves(node: object, prefix: str = "") -> list[str]:
    """Keys helm-docs documents: leaves, and objects the schema treats as a single value."""
    if isinstance(node, dict) and node and prefix not in OVERRIDES:
        out: list[str] = []
        for key, value in node.items():
            out += _leaves(value, f"{prefix}.{key}" if prefix else key)
        return out
    return [prefix]


def test_every_value_is_documented() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    rows = {line.split("|")[1].strip(): line.split("|")[4].strip()
            for line in readme.splitlines() if line.startswith("| ") and line.count("|") >= 5}
    missing = [k for k in _leaves(values) if not rows.get(k)]
    assert not missing, f"values without a `# --` description: {missing}"


def test_values_schema_is_current() -> None:
    assert render() == (CHART / "values.schema.json").read_text(), (
        "values.schema.json is stale: run python tests/chart/values_schema.py")


def test_schema_closes_every_object_the_chart_defines() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            if path in OPEN_OBJECTS:
                assert "additionalProperties" not in node
            else:
                assert node.get("additionalProperties") is False, f"{path or '<root>'} accepts unknown keys"
            for key, sub in node["properties"].items():
                walk(sub, f"{path}.{key}" if path else key)

    walk(schema, "")


def test_docs_upgrade_with_reset_then_reuse_values() -> None:
    """`--reuse-values` freezes the previous chart version's defaults into the release; the docs and NOTES say
    `--reset-then-reuse-values` (Helm 3.14+) everywhere they show an upgrade."""

    texts = [CHART / "README.md", CHART / "README.md.gotmpl", CHART / "templates" / "NOTES.txt", ROOT / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
    stale = [str(p.relative_to(ROOT)) for p in texts if p.exists() and " --reuse-values" in p.read_text()]
    assert not stale, f"say --reset-then-reuse-values in: {stale}"
    assert "--reset-then-reuse-values" in (CHART / "README.md").read_text()


def test_the_worker_gets_only_documented_environment(renderings: dict[tuple[str, str], Rendering]) -> None:
    """Every variable the chart hands the worker (its ConfigMap, and the env of its container) is a row of
    docs/contracts.md's environment table, which tests/test_docs.py checks against what `WorkerConfig` reads: a
    chart value that sets a variable nobody reads, or reads under another name, fails here."""
    documented = documented_env()
    for (helm, case), r in renderings.items():
        given = set(r.one("ConfigMap", "-worker")["data"])
        container = r.one("Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0]
        given |= {e["name"] for e in container.get("env", [])}
        unknown = given - documented
        assert not unknown, f"{helm} {case}: the chart sets {sorted(unknown)}, which docs/contracts.md does not list"
        where = {"REDIS_SENTINELS", "REDIS_SENTINEL_MASTER"} if "sentinel" in case else {"REDIS_URL"}  # no URL there
        assert {"CAPTCHAAI_KEY_FILE", "CAPTCHAAI_THREADS", "REDIS_MODE", *where} <= given, f"{helm} {case}"


_README_TYPES = {"int": {"integer", "number"}, "float": {"number"}, "string": {"string"}, "bool": {"boolean"},
                 "object": {"object"}, "list": {"array"}}


def _schema_types(schema: dict[str, Any], key: str) -> set[str] | None:
    node = schema
    for part in key.split("."):
        props = node.get("properties", {})
        if part not in props:
            return None
        node = props[part]
    found: set[str] = set()
    for n in [node, *node.get("anyOf", []), *node.get("oneOf", [])]:
        t = n.get("type")
        found |= set(t) if isinstance(t, list) else {t} if t else set()
    return found


def test_readme_types_are_the_schemas() -> None:
    """The values table's type column (helm-docs guesses it from the default: null reads as `string`; `# -- (int)`
    overrides it) says what values.schema.json accepts."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    wrong = []
    for line in (CHART / "README.md").read_text().splitlines():
        cols = [c.strip() for c in line.split("|")[1:-1]]
        if len(cols) < 4 or cols[1] not in _README_TYPES:
            continue
        types = _schema_types(schema, cols[0])
        if types is not None and not (_README_TYPES[cols[1]] & types):
            wrong.append(f"{cols[0]}: README {cols[1]}, schema {sorted(types)}")
    assert not wrong, wrong
