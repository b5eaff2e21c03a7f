"""The install checklist: one text, the same in README.md, the chart README and docs/operations.md, whose versions
are the chart's, and whose values file installs: rendered by the real Helm it gives the image it says, the key
as a mounted file, and NOTES without the default-image warning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .chartlib import CHART, HELMS, ROOT, Rendering, run, tool

BEGIN, END = "<!-- install-checklist:begin", "<!-- install-checklist:end -->"
PLACES = [ROOT / "README.md", CHART / "README.md", CHART / "README.md.gotmpl", ROOT / "docs" / "operations.md"]


def checklist(path: Path) -> str:
    text = path.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{path.relative_to(ROOT)}: one install checklist"
    return text[text.index(BEGIN):text.index(END) + len(END)]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def test_the_checklist_is_the_same_everywhere() -> None:
    first = checklist(PLACES[0])
    for path in PLACES[1:]:
        assert checklist(path) == first, f"{path.relative_to(ROOT)} differs from README.md's install checklist"


def test_its_steps_are_in_order_and_its_versions_are_the_charts() -> None:
    text = checklist(PLACES[0])
    steps = re.findall(r"(?m)^(\d)\. \*\*([^*]+)\*\*", text)
    assert [s[1] for s in steps] == ["KEDA", "The image", "Secrets", "The chart's dependency", "Values",
                                     "Install", "Test"]
    assert [int(s[0]) for s in steps] == list(range(1, 8))
    lock = yaml.safe_load((CHART / "Chart.lock").read_text())
    keda = next(d["version"] for d in lock["dependencies"] if d["name"] == "keda")
    assert f"helm install keda kedacore/keda --version {keda} " in text
    assert f"KEDA ≥ {'.'.join(keda.split('.')[:2])}" in text
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert re.findall(r"captcha-solver:(\d[\w.]*)", text) == [app, app], "the image tag is the chart's appVersion"
    commands = [ln.strip() for block in shell_blocks(text) for ln in block.splitlines()]
    assert commands.index("helm dependency build charts/captcha-solver") < next(
        i for i, c in enumerate(commands) if c.startswith("helm install captcha "))


def _values(tmp_path: Path) -> Path:
    block = next(b for b in shell_blocks(checklist(PLACES[0])) if "cat > my-values.yaml" in b)
    body = re.search(r"<<'VALUES'\n(.*?)\n\s*VALUES\n", block, re.S)
    assert body is not None, block
    lines = body.group(1).splitlines()
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    path = tmp_path / "my-values.yaml"
    path.write_text("\n".join(ln[indent:] for ln in lines) + "\n")
    return path


@pytest.mark.parametrize("helm", HELMS)
def test_its_values_file_installs_what_it_says(helm: str, chart: Path, helm_env: dict[str, str],
                                               tmp_path: Path) -> None:
    install = next(c for b in shell_blocks(checklist(PLACES[0])) for c in b.splitlines()
                   if c.strip().startswith("helm install captcha "))
    assert install.split()[2:] == ["captcha", "charts/captcha-solver", "-n", "captcha", "-f", "my-values.yaml",
                                 "--wait", "--timeout", "5m"]
    proc = run([tool(helm), "template", "captcha", chart, "-n", "captcha", "-f", _values(tmp_path)], env=helm_env)
    r = Rendering(helm, "install-checklist", proc.stdout)
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    pod = r.one("Deployment", "-worker")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"registry.example.com/captcha-solver:{app}"
    key_file = {"name": "CAPTCHAAI_KEY_FILE", "value": "/etc/captcha-solver/captchaai/api-key"}
    assert key_file in pod["containers"][0]["env"]
    assert any(v.get("secret", {}).get("secretName") == "captchaai-api-key" for v in pod["volumes"])
    assert r.one("ScaledObject")["spec"]["maxReplicaCount"] == 3


def test_its_install_prints_notes_without_the_image_warning(chart: Path, helm_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    """Helm 4's client-side dry run renders NOTES.txt without a cluster (Helm 3's needs one)."""
    proc = run([tool("helm4"), "install", "captcha", chart, "-n", "captcha", "-f", _values(tmp_path),
                "--dry-run=client"], env=helm_env)
    notes = proc.stdout.partition("\nNOTES:\n")[2]
    assert "helm test captcha -n captcha --logs" in notes
    assert "WARNING: the worker image" not in notes
    default = run([tool("helm4"), "install", "captcha", chart, "-n", "captcha", "--dry-run=client",
                   "--set", "captchaai.existingSecret=captchaai-api-key"], env=helm_env)
    assert "WARNING: the worker image" in default.stdout.partition("\nNOTES:\n")[2]
