"""kubeconform -strict on every rendering, offline: Kubernetes schemas from kubernetes-validate (rewritten for
kubeconform by scripts/install-tools.sh) and the CRD schemas converted into tests/chart/schemas/crds/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .chartlib import CRD_SCHEMAS, HELMS, K8S_SCHEMA_VERSIONS, SHARED_CRDS, TOOLS, VALUES_CASES, run, tool
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


@pytest.mark.parametrize("k8s", K8S_SCHEMA_VERSIONS)
@pytest.mark.parametrize("helm", HELMS)
def test_renderings_are_valid(helm: str, k8s: str, rendering_dir: Path) -> None:
    files = [rendering_dir / helm / f"{case}.yaml" for case in VALUES_CASES]
    proc = _kubeconform(files, k8s, check=False)
    report = json.loads(proc.stdout)
    bad = [r for r in report["resources"] if r["status"] != "statusValid"]
    assert proc.returncode == 0 and not bad, json.dumps(bad, indent=1)
    summary = report["summary"]
    # every resource was validated against a schema: nothing skipped for lack of one
    assert summary["skipped"] == 0 and summary["errors"] == 0 and summary["invalid"] == 0
    assert summary["valid"] >= 10 * len(files)


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
