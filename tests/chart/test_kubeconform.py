"""kubeconform -strict on every rendering, offline: Kubernetes schemas from kubernetes-validate (rewritten for
kubeconform by scripts/install-tools.sh) and the CRD schemas converted into tests/chart/schemas/crds/. Each schema
version validates the chart as rendered for that Kubernetes version (`helm template --kube-version`), since the
chart adapts to it (e.g. a PDB's unhealthyPodEvictionPolicy from 1.27)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .chartlib import CRD_SCHEMAS, HELMS, K8S_SCHEMA_VERSIONS, SHARED_CRDS, TOOLS, VALUES_CASES, run, template_cmd, tool
from .convert_crds import convert_dir


def _kubeconform(paths: list[Path], k8s: str, *, check: bool = True):
    schemas = TOOLS / "kubeconform-schemas" / f"{k8s}-strict"
    if not (schemas / "deployment-apps-v1.json").exists():
        pytest.fail(f"no Kubernetes schemas at .tools/kubeconform-schemas/{k8s}-strict: run scripts/install-tools.sh",
                    pytrace=False)
    return run([tool("kubeconform"), "-strict", "-summary", "-output", "json",
                "-schema-location", f"{schemas}/{{{{.ResourceKind}}}}{{{{.KindSuffix}}}}.json",
                "-schema-location", f"{CRD_SCHEMAS}/{{{{.ResourceKind}}}}_{{{{.ResourceAPIVersion}}}}.json",
                *paths], check=check)


def _render_for(helm: str, k8s: str, chart: Path, env: dict[str, str], dest: Path, *extra: str) -> list[Path]:
    files = []
    for case in VALUES_CASES:
        out = run(template_cmd(helm, chart, case, "--kube-version", k8s, *extra), env=env).stdout
        files.append(dest / f"{helm}-{k8s}-{case}.yaml")
        files[-1].write_text(out)
    return files


@pytest.mark.parametrize("k8s", K8S_SCHEMA_VERSIONS)
@pytest.mark.parametrize("helm", HELMS)
def test_renderings_are_valid(helm: str, k8s: str, chart: Path, helm_env: dict[str, str], tmp_path: Path) -> None:
    files = _render_for(helm, k8s, chart, helm_env, tmp_path)
    proc = _kubeconform(files, k8s, check=False)
    report = json.loads(proc.stdout)
    bad = [r for r in report["resources"] if r["status"] != "statusValid"]
    assert proc.returncode == 0 and not bad, json.dumps(bad, indent=1)
    summary = report["summary"]
    # every resource was validated against a schema: nothing skipped for lack of one
    assert summary["skipped"] == 0 and summary["errors"] == 0 and summary["invalid"] == 0
    assert summary["valid"] >= 10 * len(files)


@pytest.mark.parametrize("helm", HELMS)
def test_keda_subchart_rendering_is_valid(helm: str, chart: Path, helm_env: dict[str, str], tmp_path: Path) -> None:
    """keda.install=true: KEDA's own objects (CRDs, APIService, webhooks, RBAC, Deployments) validate too."""
    k8s = K8S_SCHEMA_VERSIONS[-1]
    out = tmp_path / "keda-install.yaml"
    out.write_text(run(template_cmd(helm, chart, "default", "--kube-version", k8s, "--set", "keda.install=true"),
                       env=helm_env).stdout)
    report = json.loads(_kubeconform([out], k8s, check=False).stdout)
    bad = [r for r in report["resources"] if r["status"] != "statusValid"]
    assert not bad, json.dumps(bad, indent=1)
    assert report["summary"]["valid"] >= 40, report["summary"]


def test_kubeconform_catches_a_bad_manifest(tmp_path: Path) -> None:
    """The validation can fail: an unknown field and a non-string trigger value are rejected."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
        "spec: {selector: {matchLabels: {a: b}}, bogus: 1, template: {metadata: {labels: {a: b}},"
        " spec: {containers: [{name: c, image: i}]}}}\n"
        "---\napiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\n"
        "spec: {scaleTargetRef: {name: x}, triggers: [{type: redis, metadata: {listLength: 5}}]}\n"
    )
    proc = _kubeconform([bad], K8S_SCHEMA_VERSIONS[-1], check=False)
    assert proc.returncode != 0
    report = json.loads(proc.stdout)
    assert report["summary"]["invalid"] == 2, proc.stdout


def test_committed_crd_schemas_match_the_shared_crds() -> None:
    """tests/chart/schemas/crds/ is the converted copy of ../shared/schemas/crds (kept so the repo works alone)."""
    committed = {p.name: p.read_text() for p in CRD_SCHEMAS.glob("*.json")}
    assert {"scaledobject_v1alpha1.json", "triggerauthentication_v1alpha1.json", "servicemonitor_v1.json",
            "prometheusrule_v1.json"} <= set(committed)
    if not SHARED_CRDS.is_dir():
        pytest.skip("../shared/schemas/crds is absent: using the committed schemas as they are")
    assert convert_dir(SHARED_CRDS) == committed, "regenerate: python tests/chart/convert_crds.py"
