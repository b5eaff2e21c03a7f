"""The documentation's code examples compile, and the names they import exist."""

from __future__ import annotations

import ast
import importlib
import re

import pytest
from helpers import ROOT

DOCS = [ROOT / "README.md", ROOT / "docs" / "producer.md", ROOT / "docs" / "operations.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for i, code in enumerate(BLOCK.findall(path.read_text())):
            out.append((f"{path.relative_to(ROOT)}#{i}", code))
    return out


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_python_examples_compile_and_import_real_names(where: str, code: str) -> None:
    tree = compile(code, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("captcha_worker"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module} has no {alias.name}"


def test_docs_link_to_files_that_exist() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"


def test_readme_has_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_reliability_doc_has_a_row_for_every_chaos_scenario() -> None:
    """docs/reliability.md quotes each scenario the chaos suite records (Row("name", ...) and the parametrized
    refusals); a new scenario without its row, or a row whose scenario is gone, fails here."""
    sources = "\n".join(p.read_text() for p in (ROOT / "tests" / "chaos").glob("test_*.py"))
    scenarios = set(re.findall(r'Row\(f?"([a-z0-9-]+?)(?:-\{[a-z_]+\})?"', sources))
    scenarios |= set(re.findall(r'\("(redis-[a-z0-9-]+)", _', sources))
    assert len(scenarios) >= 15, scenarios
    doc = (ROOT / "docs" / "reliability.md").read_text()
    rows = set(re.findall(r"^\| `([a-z0-9-]+?)(?:-[0-9]+)?` \|", doc, re.M))
    assert scenarios == rows, f"missing rows: {sorted(scenarios - rows)}; stale rows: {sorted(rows - scenarios)}"
