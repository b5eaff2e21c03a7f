"""tests/e2e/pods.py's reader of who owns a Deployment's .spec.replicas, checked against objects a real API server
(kube-apiserver 1.35.4 of `make e2e-pods`) returned, in tests/e2e/fixtures/ (`kubectl get deploy -o json
--show-managed-fields`):

* upgrades-deployment.json: the worker Deployment after the upgrades scenario's 20 Helm 4 upgrades while the HPA
  scaled it 1..5 (2026-12-04);
* scale-applied-replicas.json / scale-after-applied-replicas.json: a Deployment applied server-side with replicas
  (its applier owns the field), then `kubectl scale` (the /scale Update takes it over);
* scale-without-owner.json: one applied without replicas, then `kubectl scale`: no manager owns the field.

The upgrades scenario's claim that no upgrade set the count rests on this reader; its first cluster run found no
owner of the field at all, and that is what the API server does: it tracks no manager for an Update of /scale while
none owns .spec.replicas (the scale view's managedFields are empty and the field manager's SkipNonApplied step skips
tracking), so the HPA's and KEDA's writes leave the field unowned once Helm never set it."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.e2e import pods
from tests.helpers import ROOT

FIXTURES = ROOT / "tests" / "e2e" / "fixtures"


def _load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return obj


def _managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{m['manager']}/{m['operation']}" + (f"/{m['subresource']}" if m.get("subresource") else ""): m
            for m in obj["metadata"]["managedFields"]}


def test_the_upgraded_worker_deployment_has_no_owner_of_replicas() -> None:
    """After 20 Helm 4 upgrades with the HPA scaling: Helm's Apply owns the rest of the spec, not the count (the
    chart leaves it out), and the HPA's /scale writes are not tracked, so nobody owns it."""
    obj = _load("upgrades-deployment.json")
    assert obj["kind"] == "Deployment" and obj["metadata"]["name"] == "cs-captcha-solver-worker"
    assert obj["metadata"]["generation"] > 20  # the upgrades re-applied it
    helm = _managers(obj)["helm/Apply"]["fieldsV1"]["f:spec"]
    assert "f:template" in helm and "f:replicas" not in helm
    assert pods.replicas_owners(obj) == []


def test_an_applier_that_names_replicas_owns_it() -> None:
    assert pods.replicas_owners(_load("scale-applied-replicas.json")) == ["probe-apply/Apply"]


def test_a_scale_update_takes_the_field_over_from_the_applier() -> None:
    obj = _load("scale-after-applied-replicas.json")
    assert pods.replicas_owners(obj) == ["kubectl/Update/scale"]
    assert "f:replicas" not in _managers(obj)["probe-apply/Apply"]["fieldsV1"]["f:spec"]


def test_a_scale_update_of_an_unowned_field_is_not_tracked() -> None:
    obj = _load("scale-without-owner.json")
    assert obj["spec"]["replicas"] == 2  # kubectl scale --replicas=2 took effect
    assert pods.replicas_owners(obj) == []
    assert not [m for m in obj["metadata"]["managedFields"] if m.get("subresource") == "scale"]


def test_helm_applying_replicas_is_named() -> None:
    """The case the upgrades scenario fails on: Helm's Apply owning .spec.replicas (the chart rendering the count)."""
    obj = copy.deepcopy(_load("upgrades-deployment.json"))
    for m in obj["metadata"]["managedFields"]:
        if m["manager"] == "helm":
            m["fieldsV1"]["f:spec"]["f:replicas"] = {}
    assert pods.replicas_owners(obj) == ["helm/Apply"]


def test_replicas_changes_attributes_each_count_to_the_managers_in_its_event() -> None:
    """A change is reported with the owners of the object that carries it; an event that keeps the count is none."""
    applied, scaled = _load("scale-applied-replicas.json"), _load("scale-after-applied-replicas.json")
    changes = pods.replicas_changes([(1.0, applied), (2.0, scaled), (3.0, copy.deepcopy(scaled))])
    assert changes == [{"t": 2.0, "from": 3, "to": 2, "owners": ["kubectl/Update/scale"]}]
