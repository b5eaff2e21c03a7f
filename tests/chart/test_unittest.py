"""The helm-unittest suites in charts/captcha-solver/tests/, run with the real plugin under Helm 3 and Helm 4."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .chartlib import CHART, HELMS, chart_copy, run, tool


@pytest.mark.parametrize("helm", HELMS)
def test_helm_unittest_suites(helm: str, helm_env: dict[str, str]) -> None:
    tool("helm-unittest")  # the plugin's command
    proc = run([tool(helm), "unittest", "--strict", CHART], env=helm_env, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    match = re.search(r"Tests:\s+(\d+) passed, (\d+) total", out)
    assert match, out[-2000:]
    passed, total = map(int, match.groups())
    assert passed == total >= 80, out[-2000:]


def test_helm_unittest_detects_a_broken_chart(tmp_path: Path, helm_env: dict[str, str]) -> None:
    """The suites can fail: with the cap computed as ceil instead of floor they must."""
    chart = chart_copy(tmp_path)
    helpers = chart / "templates" / "_keda.tpl"
    text = helpers.read_text()
    floor = "{{- div (int .Values.captchaai.threads) (int .Values.worker.concurrency) -}}"
    assert floor in text
    ceil = "{{- add1 (div (int .Values.captchaai.threads) (int .Values.worker.concurrency)) -}}"
    helpers.write_text(text.replace(floor, ceil))
    proc = run([tool("helm-unittest"), "-f", "tests/thread_budget_test.yaml", chart],
               env=helm_env, check=False)
    assert proc.returncode != 0
    assert "rounds down" in proc.stdout
