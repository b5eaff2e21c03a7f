"""helm lint --strict and helm template with the real Helm v3 and v4, for the defaults and every values example, on
the chart as users get it: its real kedacore/keda dependency in charts/, Chart.lock, and the packaged archive."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from captcha_worker.queue import Keys

from .chartlib import (
    CHART,
    EXAMPLES,
    HELMS,
    NAMESPACE,
    RELEASE,
    REQUIRED_VALUES,
    VALUES_CASES,
    Rendering,
    chart_copy,
    run,
    template_cmd,
    tool,
    values_args,
)

# Per values case: (maxReplicaCount, worker.concurrency, kinds it renders). The note quotes this table.
EXPECTED: dict[str, tuple[int, int, dict[str, int]]] = {
    "default": (1, 5, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "Pod": 1, "ScaledObject": 1, "Secret": 1,
                   "Service": 3, "ServiceAccount": 1, "StatefulSet": 1, "TriggerAuthentication": 1}),
    "e2e-local": (2, 5, {"ConfigMap": 1, "Deployment": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Secret": 1, "Service": 1, "ServiceAccount": 1}),
    "e2e-pods": (5, 2, {"ConfigMap": 2, "Deployment": 2, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                        "ScaledObject": 1, "Secret": 2, "Service": 4, "ServiceAccount": 1, "StatefulSet": 1,
                        "TriggerAuthentication": 1}),
    "existing-secrets": (3, 5, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Service": 3, "ServiceAccount": 1, "StatefulSet": 1, "TriggerAuthentication": 1}),
    "external-redis-tls": (3, 5, {"ConfigMap": 1, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Service": 1, "ServiceAccount": 1, "TriggerAuthentication": 1}),
    "external-redis-cluster": (3, 5, {"ConfigMap": 1, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Service": 1, "ServiceAccount": 1, "TriggerAuthentication": 1}),
    "external-redis-sentinel": (3, 5, {"ConfigMap": 1, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Service": 1, "ServiceAccount": 1, "TriggerAuthentication": 1}),
    "plan-100-threads": (10, 10, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Secret": 1, "Service": 3, "ServiceAccount": 1, "StatefulSet": 1,
                   "TriggerAuthentication": 1}),
    "plan-15-threads": (3, 5, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Secret": 1, "Service": 3, "ServiceAccount": 1, "StatefulSet": 1,
                   "TriggerAuthentication": 1}),
    "plan-5-threads": (1, 5, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "Pod": 1, "ScaledObject": 1, "Secret": 1,
                   "Service": 3, "ServiceAccount": 1, "StatefulSet": 1, "TriggerAuthentication": 1}),
    "plan-50-threads": (5, 10, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Secret": 1, "Service": 3, "ServiceAccount": 1, "StatefulSet": 1,
                   "TriggerAuthentication": 1}),
    "production": (5, 10, {"ConfigMap": 3, "Deployment": 1, "Job": 1, "NetworkPolicy": 4, "Pod": 1,
                   "PodDisruptionBudget": 1, "PrometheusRule": 1, "ScaledObject": 1, "Service": 3, "ServiceAccount": 1,
                   "ServiceMonitor": 1, "StatefulSet": 1, "TriggerAuthentication": 1}),
    "simulator-staging": (2, 5, {"ConfigMap": 2, "Deployment": 2, "Job": 1, "Pod": 1, "PodDisruptionBudget": 1,
                   "ScaledObject": 1, "Secret": 2, "Service": 4, "ServiceAccount": 1, "StatefulSet": 1,
                   "TriggerAuthentication": 1}),
    "pingback": (2, 10, {"ConfigMap": 2, "Deployment": 1, "Ingress": 1, "Job": 1, "NetworkPolicy": 4, "Pod": 1,
                         "PodDisruptionBudget": 1, "ScaledObject": 1, "Secret": 1, "Service": 4, "ServiceAccount": 1,
                         "StatefulSet": 1, "TriggerAuthentication": 1}),
    "overflow": (3, 5, {"ConfigMap": 2, "Deployment": 1, "Job": 1, "NetworkPolicy": 5, "Pod": 1,
                        "PodDisruptionBudget": 1, "ScaledObject": 1, "Secret": 1, "Service": 3, "ServiceAccount": 1,
                        "StatefulSet": 1, "TriggerAuthentication": 1}),
    "gateway-multi-tenant": (2, 10, {"ConfigMap": 3, "Deployment": 2, "HorizontalPodAutoscaler": 1, "Ingress": 1,
                   "Job": 1, "NetworkPolicy": 5, "Pod": 1, "PodDisruptionBudget": 2, "PrometheusRule": 1,
                   "ScaledObject": 1, "Secret": 1, "Service": 4, "ServiceAccount": 1, "ServiceMonitor": 2,
                   "StatefulSet": 1, "TriggerAuthentication": 1}),
}


def test_every_example_has_an_expectation() -> None:
    assert set(EXPECTED) == set(VALUES_CASES), "add the new values example to EXPECTED"


@pytest.mark.parametrize("helm", HELMS)
def test_helm_versions(helm: str, helm_env: dict[str, str]) -> None:
    out = run([tool(helm), "version", "--template", "{{.Version}}"], env=helm_env).stdout.strip()
    assert out.startswith("v3." if helm == "helm3" else "v4."), out


@pytest.mark.parametrize("case", VALUES_CASES)
@pytest.mark.parametrize("helm", HELMS)
def test_lint_strict(helm: str, case: str, chart: Path, helm_env: dict[str, str]) -> None:
    proc = run([tool(helm), "lint", "--strict", chart, "--namespace", NAMESPACE, *values_args(case)],
               env=helm_env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("case", VALUES_CASES)
@pytest.mark.parametrize("helm", HELMS)
def test_template_kinds_and_thread_budget(helm: str, case: str,
                                          renderings: dict[tuple[str, str], Rendering]) -> None:
    r = renderings[(helm, case)]
    max_replicas, concurrency, kinds = EXPECTED[case]
    assert dict(Counter(r.kinds())) == kinds
    so = r.one("ScaledObject")
    assert so["spec"]["maxReplicaCount"] == max_replicas
    for trigger in so["spec"]["triggers"]:
        assert trigger["metadata"]["listLength"] == str(concurrency)
        assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger["metadata"]
    config = r.one("ConfigMap", "-worker")["data"]
    assert int(config["WORKER_CONCURRENCY"]) == concurrency
    assert int(config["CAPTCHAAI_THREADS"]) // concurrency == max_replicas
    # KEDA on -> no spec.replicas on the worker Deployment
    assert "replicas" not in r.one("Deployment", "-worker")["spec"]


@pytest.mark.parametrize("helm", HELMS)
def test_both_helm_versions_render_the_same_objects(helm: str,
                                                    renderings: dict[tuple[str, str], Rendering]) -> None:
    other = "helm4" if helm == "helm3" else "helm3"
    for case in VALUES_CASES:
        mine = _without_random(renderings[(helm, case)].docs)
        theirs = _without_random(renderings[(other, case)].docs)
        assert mine == theirs, f"helm3 and helm4 render {case} differently"


def _without_random(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        if doc["kind"] == "Secret" and doc["metadata"]["name"].endswith("-redis") and "redis-password" in doc["data"]:
            out.append({**doc, "data": {**doc["data"], "redis-password": "<random>"}})
        elif doc["kind"] == "Secret" and doc["metadata"]["name"].endswith("-gateway"):  # generated tenant keys
            out.append({**doc, "data": dict.fromkeys(doc["data"], "<random>")})
        else:
            out.append(doc)
    return sorted(out, key=lambda d: (d["kind"], d["metadata"]["name"]))


@pytest.mark.parametrize("helm", HELMS)
def test_without_keda_fixed_replicas(helm: str, chart: Path, helm_env: dict[str, str]) -> None:
    out = run(template_cmd(helm, chart, "default", "--set", "keda.enabled=false",
                           "--set", "worker.replicas=1"), env=helm_env).stdout
    r = Rendering(helm, "no-keda", out)
    assert "ScaledObject" not in r.kinds() and "TriggerAuthentication" not in r.kinds()
    assert r.one("Deployment", "-worker")["spec"]["replicas"] == 1


@pytest.mark.parametrize("helm", HELMS)
def test_upgrade_threads_changes_cap_and_rolls_workers(helm: str, chart: Path,
                                                       helm_env: dict[str, str]) -> None:
    """`helm upgrade --set captchaai.threads=50` must raise the cap and change the pod template."""

    def render(*sets: str) -> Rendering:
        args = [a for s in sets for a in ("--set", s)]
        return Rendering(helm, "x", run(template_cmd(helm, chart, "plan-15-threads", *args),
                                        env=helm_env).stdout)

    before, same, after = render(), render(), render("captchaai.threads=50")

    def pod(r: Rendering) -> dict[str, Any]:
        template: dict[str, Any] = r.one("Deployment", "-worker")["spec"]["template"]
        return template

    assert before.one("ScaledObject")["spec"]["maxReplicaCount"] == 3
    assert after.one("ScaledObject")["spec"]["maxReplicaCount"] == 10
    assert after.one("ConfigMap", "-worker")["data"]["CAPTCHAAI_THREADS"] == "50"
    # the same values render the same pod template (the random Redis password does not leak into it) ...
    assert pod(before) == pod(same)
    # ... and new threads change it, so Kubernetes rolls the workers
    a, b = pod(before)["metadata"]["annotations"], pod(after)["metadata"]["annotations"]
    assert a["checksum/config"] != b["checksum/config"]
    assert a["checksum/secret"] == b["checksum/secret"]
    # another Secret rolls them (its volume changes) ...
    rekeyed = render("captchaai.existingSecret=", "captchaai.apiKey=0123456789abcdef0123456789abcdef")
    assert pod(rekeyed)["metadata"]["annotations"]["checksum/secret"] != a["checksum/secret"]
    # ... a new key in the same Secret does not: the workers re-read the mounted file (CAPTCHAAI_KEY_FILE)
    rotated = render("captchaai.existingSecret=", "captchaai.apiKey=fedcba9876543210fedcba9876543210")
    assert pod(rotated) == pod(rekeyed)
    assert rotated.one("Secret", "-captchaai") != rekeyed.one("Secret", "-captchaai")


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["captchaai.threads=5", "worker.concurrency=10"],
         "worker.concurrency (10) is larger than captchaai.threads (5)"),
        (["captchaai.threads=10", "keda.scaledObject.minReplicaCount=3"],
         "keda.scaledObject.minReplicaCount (3) is greater than maxReplicaCount (2"),
        (["externalRedis.host=redis.example"], "Both redis.enabled=true and externalRedis.host are set"),
        (["redis.enabled=false"], "No Redis configured"),
        (["worker.concurency=5"], "additional properties 'concurency' not allowed"),
        (["captchaai.existingSecret="], "No CaptchaAI API key: set captchaai.existingSecret"),
        (["worker.lifecycle.preStop.exec.command={sleep,20}", "worker.drainGraceSeconds=200",
          "worker.terminationGracePeriodSeconds=210"],
         "worker.terminationGracePeriodSeconds (210) must be greater than the preStop hook of worker.lifecycle (20s)"
         " + worker.drainGraceSeconds (200) = 220"),
        (["worker.lifecycle.preStop.sleep.seconds=15", "worker.terminationGracePeriodSeconds=214"],
         "(214) must be greater than the preStop hook of worker.lifecycle (15s) + worker.drainGraceSeconds (200)"),
        (["redis.maxmemory=256mb"], "redis.maxmemory (256mb) must be below redis.resources.limits.memory (256Mi)"),
        (["redis.resources.limits.memory=lots"], "redis.resources.limits.memory (lots) is not a quantity"),
        (["simulator.enabled=true", "simulator.replicas=2"], "at '/simulator/replicas': maximum: got 2, want 1"),
    ],
)
def test_fail_messages(helm: str, sets: list[str], message: str, chart: Path,
                       helm_env: dict[str, str]) -> None:
    args = [a for s in sets for a in ("--set", s)]
    proc = run(template_cmd(helm, chart, "default", *args), env=helm_env, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_derived_grace_period_counts_the_prestop_sleep(helm: str, chart: Path, helm_env: dict[str, str]) -> None:
    out = run(template_cmd(helm, chart, "default", "--set", "worker.lifecycle.preStop.exec.command={sh,-c,sleep 7}"),
              env=helm_env).stdout
    pod = Rendering(helm, "prestop", out).one("Deployment", "-worker")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 7 + 200 + 30  # preStop + drainGraceSeconds + margin


def test_keda_dependency_entry() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    deps = chart["dependencies"]
    assert len(deps) == 1
    keda = deps[0]
    assert keda["name"] == "keda"
    assert keda["repository"] == "https://kedacore.github.io/charts"
    assert keda["condition"] == "keda.install"
    assert re.fullmatch(r"\d+\.\d+\.\d+", str(keda["version"])), "pin the KEDA chart version"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["keda"]["install"] is False, "one KEDA per cluster: the subchart is off by default"
    assert values["keda"]["enabled"] is True


def _helm_lock_digest(deps: list[dict[str, Any]], locked: list[dict[str, Any]]) -> str:
    """Helm's Chart.lock digest (internal/resolver HashReq): sha256 of the JSON of [Chart.yaml deps, locked deps],
    in Go's field order and with its omitempty rules."""
    def dep(d: dict[str, Any]) -> dict[str, Any]:
        out = {"name": d["name"]}
        if d.get("version"):
            out["version"] = str(d["version"])
        out["repository"] = d["repository"]
        for key in ("condition", "tags", "enabled", "import-values", "alias"):
            if d.get(key):
                out[key] = d[key]
        return out
    data = json.dumps([[dep(d) for d in deps], [dep(d) for d in locked]], separators=(",", ":"))
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


def test_chart_lock_matches_chart_yaml() -> None:
    deps = yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"]
    lock = yaml.safe_load((CHART / "Chart.lock").read_text())
    assert [(d["name"], str(d["version"]), d["repository"]) for d in lock["dependencies"]] == \
        [(d["name"], str(d["version"]), d["repository"]) for d in deps]
    assert lock["digest"] == _helm_lock_digest(deps, lock["dependencies"])


@pytest.mark.parametrize("helm", HELMS)
def test_dependency_is_in_place_and_helm_agrees(helm: str, chart: Path, helm_env: dict[str, str]) -> None:
    """charts/ holds the locked version (scripts/chart-dependency.sh verified its sha256); Helm reads it as ok."""
    assert sorted(p.name for p in (chart / "charts").glob("*.tgz")) == ["keda-2.20.2.tgz"]
    out = run([tool(helm), "dependency", "list", chart], env=helm_env).stdout
    assert re.search(r"^keda\s+2\.20\.2\s+https://kedacore\.github\.io/charts\s+ok\s*$", out, re.M), out


@pytest.mark.parametrize("helm", HELMS)
def test_lock_digest_is_what_helm_checks(helm: str, tmp_path: Path, helm_env: dict[str, str]) -> None:
    """Helm's own check: an edited Chart.lock is "out of sync"; the committed one is not (offline, `helm dependency
    build` then stops at the unreachable repository instead)."""
    copy = chart_copy(tmp_path)
    proc = run([tool(helm), "dependency", "build", copy], env=helm_env, check=False)
    assert "out of sync" not in proc.stdout + proc.stderr, proc.stderr
    lock = copy / "Chart.lock"
    lock.write_text(re.sub(r"digest: sha256:.", "digest: sha256:x", lock.read_text()))
    proc = run([tool(helm), "dependency", "build", copy], env=helm_env, check=False)
    assert proc.returncode != 0 and "out of sync" in proc.stderr, proc.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_package_carries_the_dependency(helm: str, chart: Path, tmp_path: Path, helm_env: dict[str, str]) -> None:
    """`helm package` gives an archive that installs without `helm dependency build`: KEDA inside, tests outside."""
    run([tool(helm), "package", chart, "--destination", tmp_path], env=helm_env)
    archive = tmp_path / "captcha-solver-{}.tgz".format(yaml.safe_load((CHART / "Chart.yaml").read_text())["version"])
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        member = tar.extractfile("captcha-solver/charts/keda/Chart.yaml")
        assert member is not None
        keda = yaml.safe_load(member.read())
    assert (keda["name"], keda["version"]) == ("keda", "2.20.2")
    assert {"captcha-solver/Chart.yaml", "captcha-solver/Chart.lock", "captcha-solver/values.schema.json",
            "captcha-solver/charts/keda/templates/crds/crd-scaledobjects.yaml",
            "captcha-solver/templates/tests/test-check-pod.yaml"} <= names
    assert not [n for n in names if n.endswith("_test.yaml") or n.endswith(".gotmpl") or ".checkov" in n], names
    proc = run([tool(helm), "lint", "--strict", archive, *REQUIRED_VALUES], env=helm_env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = run([tool(helm), "template", RELEASE, archive, "-n", NAMESPACE, *REQUIRED_VALUES,
               "--set", "keda.install=true", "--set", "keda.enabled=false"], env=helm_env).stdout
    assert "name: keda-operator" in out


@pytest.mark.parametrize("helm", HELMS)
def test_keda_install_renders_kedas_own_chart(helm: str, chart: Path, helm_env: dict[str, str]) -> None:
    """keda.install=true: the kedacore/keda subchart renders (operator, metrics apiserver, webhooks, CRDs) with the
    values passed under keda:, next to the chart's objects; bootstrap step 1 of the README."""
    out = run(template_cmd(helm, chart, "default", "--set", "keda.install=true", "--set", "keda.enabled=false",
                           "--set", "keda.image.keda.tag=2.20.2-test"), env=helm_env).stdout
    docs = Rendering(helm, "keda-install", out).docs
    by_kind: dict[str, set[str]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], set()).add(d["metadata"]["name"])
    assert {"keda-operator", "keda-operator-metrics-apiserver", "keda-admission-webhooks"} <= by_kind["Deployment"]
    assert {"scaledobjects.keda.sh", "triggerauthentications.keda.sh"} <= by_kind["CustomResourceDefinition"]
    assert "v1beta1.external.metrics.k8s.io" in by_kind["APIService"]
    assert "keda-admission" in by_kind["ValidatingWebhookConfiguration"]
    operator = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "keda-operator")
    assert operator["metadata"]["namespace"] == NAMESPACE
    assert operator["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/kedacore/keda:2.20.2-test"
    assert "ScaledObject" not in by_kind, "step 1 renders no ScaledObject"
    assert "-worker" in " ".join(by_kind["Deployment"])


@pytest.mark.parametrize("helm", HELMS)
def test_unbuilt_dependency_error_is_documented(helm: str, tmp_path: Path, helm_env: dict[str, str]) -> None:
    """A source checkout before `helm dependency build` (charts/ empty) fails with the error the README quotes."""
    copy = chart_copy(tmp_path)
    for archive in (copy / "charts").glob("*.tgz"):
        archive.unlink()
    proc = run([tool(helm), "template", RELEASE, copy], env=helm_env, check=False)
    assert proc.returncode != 0
    error = proc.stderr.strip().splitlines()[-1]
    assert "found in Chart.yaml, but missing in charts/ directory: keda" in error
    readme = (CHART / "README.md").read_text()
    assert error.removeprefix("Error: ") in readme, f"README must quote the {helm} error: {error}"


def test_examples_are_documented_in_readme() -> None:
    readme = (CHART / "README.md").read_text()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        assert f"values-examples/{path.name}" in readme, f"README: describe {path.name}"


def test_dashboard_is_importable_json() -> None:
    """Static shape only; tests/test_observability.py runs every query against a real Prometheus."""

    dash = json.loads((CHART / "dashboards" / "captcha-solver.json").read_text())
    assert dash["uid"] == "captcha-solver"
    assert "__inputs" not in dash, "provisioned dashboards must not need an import step"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("helm", HELMS)
def test_prometheus_rules_render(helm: str, renderings: dict[tuple[str, str], Rendering]) -> None:
    rule = renderings[(helm, "production")].one("PrometheusRule")
    rules = rule["spec"]["groups"][0]["rules"]
    assert rules and all("alert" in r and "expr" in r for r in rules)
    # Prometheus' own templating ({{ $labels.x }}, {{ $value }}) is meant to stay; Helm's must be gone
    text = re.sub(r"\{\{\s*\$(labels|value)\b", "", " ".join(yaml.safe_dump(rule, width=10**6).split()))
    assert "{{" not in text, "template syntax left in the rules"
    assert all(r["expr"].count("captcha_solver_") for r in rules)


@pytest.mark.parametrize("helm", HELMS)
def test_a_chart_bump_restarts_no_pod(helm: str, tmp_path: Path, helm_env: dict[str, str]) -> None:
    """Bumping version and appVersion (the image tag pinned) changes no pod template: no label, no checksum."""
    bumped = chart_copy(tmp_path)
    meta = bumped / "Chart.yaml"
    meta.write_text(re.sub(r"(?m)^(version|appVersion): .*$", r'\1: "9.9.9"', meta.read_text()))

    def templates(chart: Path, case: str) -> dict[str, dict[str, Any]]:
        out = run(template_cmd(helm, chart, case, "--set", "image.tag=0.1.0"), env=helm_env).stdout
        return {f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]
                for d in Rendering(helm, "bump", out).docs if d["kind"] in ("Deployment", "StatefulSet")}

    before, after = templates(CHART, "simulator-staging"), templates(bumped, "simulator-staging")
    assert len(before) == 3  # worker, simulator, Redis
    assert before == after
    before, after = templates(CHART, "gateway-multi-tenant"), templates(bumped, "gateway-multi-tenant")
    assert any(name.endswith("-gateway") for name in before)  # the gateway's pods too
    assert before == after


@pytest.mark.parametrize(("threads", "concurrency", "cap"), [(14, 5, 2), (15, 5, 3), (19, 10, 1), (20, 10, 2),
                                                              (29, 10, 2), (7, 7, 1)])
def test_the_replica_cap_rounds_down(chart: Path, helm_env: dict[str, str], threads: int, concurrency: int,
                                     cap: int) -> None:
    """maxReplicaCount = floor(threads / concurrency): pods x concurrency never exceeds the plan, however the
    division falls (one below a multiple is where an off-by-one shows)."""
    out = run(template_cmd(HELMS[0], chart, "default", "--set", f"captchaai.threads={threads}",
                           "--set", f"worker.concurrency={concurrency}"), env=helm_env).stdout
    r = Rendering(HELMS[0], "cap", out)
    assert r.one("ScaledObject")["spec"]["maxReplicaCount"] == cap
    assert cap * concurrency <= threads < (cap + 1) * concurrency


def test_keda_watches_the_lists_the_python_code_names(renderings: dict[tuple[str, str], Rendering]) -> None:
    """The chart formats the Redis list names KEDA counts itself (`{<queue>}:pending`, ...): they must be the
    keys `queue.Keys` makes for the queue the workers are given, and the compat list the workers also read."""
    for (helm, case), r in renderings.items():
        if "ScaledObject" not in r.kinds():
            continue
        data = r.one("ConfigMap", "-worker")["data"]
        keys = Keys(data.get("QUEUE_NAME", "captcha"))
        lists = [t["metadata"]["listName"] for t in r.one("ScaledObject")["spec"]["triggers"]
                 if "listName" in t["metadata"]]
        expected = [keys.pending, keys.processing] + ([data["COMPAT_QUEUE_LIST"]] if data.get("COMPAT_QUEUE_LIST")
                                                      else [])
        gateway = [d for d in r.docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-gateway")]
        for cm in gateway:  # each tenant's waiting list (the gateway's tenants, by the name the workers sort into)
            expected += [keys.waiting(t["name"]) for t in json.loads(cm["data"]["tenants.json"])["tenants"]]
        assert lists == expected, f"{helm} {case}: {lists}"
