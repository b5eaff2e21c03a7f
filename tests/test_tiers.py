"""Every test file belongs to a tier, and the make targets run exactly those tiers. A new test file fails here until
it is added to TIERS (and marked, if it is not in the fast tier); a file whose tests carry another tier's marker
than TIERS says fails too, so `make test`, `make integration` and `make chaos` together run every test once."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.helpers import ROOT

FAST, INTEGRATION, CHAOS, RELEASE = "fast", "integration", "chaos", "release"
#: the tier of every test file (tests/chaos/ is the chaos tier as a whole: its conftest marks every test there)
TIERS: dict[str, str] = {
    "tests/test_bench_smoke.py": INTEGRATION,  # every benchmark in smoke mode (~200 s)
    "tests/test_audit.py": FAST,
    "tests/test_breaker.py": FAST,
    "tests/test_captchaai.py": FAST,
    "tests/test_createtask.py": FAST,
    "tests/test_cli.py": FAST,  # the CLI as processes against one stack (~70 s)
    "tests/test_codes.py": FAST,
    "tests/test_compatibility.py": INTEGRATION,  # the client libraries
    "tests/test_config.py": FAST,
    "tests/test_connection.py": FAST,
    "tests/test_dashboard.py": FAST,
    "tests/test_deadline.py": FAST,  # the predictor and CLAIM_LATE; but for MIXED's two worker-process runs
    "tests/test_docs.py": FAST,
    "tests/test_e2e_pods.py": FAST,  # tests/e2e/pods.py's managedFields reader on saved objects
    "tests/test_gateway.py": FAST,
    "tests/test_gateway_clients.py": INTEGRATION,  # the client libraries through the gateway
    "tests/test_gateway_jsonapi.py": FAST,
    "tests/test_gateway_keys.py": FAST,  # a real gateway process re-reading rotated tenant keys (~5 s)
    "tests/test_guard.py": FAST,
    "tests/test_jsonapi.py": FAST,
    "tests/test_keyfile.py": FAST,
    "tests/test_methods.py": FAST,
    "tests/test_metrics.py": FAST,
    "tests/test_observability.py": INTEGRATION,  # Prometheus scraping workers
    "tests/test_overflow.py": FAST,  # the simulator process as a provider (~10 s)
    "tests/test_pingback.py": FAST,
    "tests/test_pingback_processes.py": FAST,
    "tests/test_planner.py": FAST,  # but for MIXED's 90 s run
    "tests/test_processes.py": FAST,  # worker processes (~35 s)
    "tests/test_protocol_v1.py": FAST,  # the v1 replies read back by the client
    "tests/test_routing.py": INTEGRATION,  # workers routing to a provider: 2 simulator processes (~60 s)
    "tests/test_producer.py": FAST,  # the producer library against a stack (~60 s)
    "tests/test_queue.py": FAST,
    "tests/test_store.py": FAST,  # the Lua loader; every script parsed by a real redis-server
    "tests/test_races.py": FAST,
    "tests/test_release.py": RELEASE,  # make release against a real registry (root, buildah; ~90 s)
    "tests/test_release_chart.py": FAST,
    "tests/test_release_files.py": FAST,
    "tests/test_shares.py": FAST,
    "tests/test_shares_flood.py": INTEGRATION,  # a gateway, two workers, a flood and a kill (~50 s)
    "tests/test_service.py": FAST,  # the service lifecycle: sites, signals, the gateway's start
    "tests/test_simulator.py": FAST,
    "tests/test_providers_config.py": FAST,
    "tests/test_spend.py": FAST,
    "tests/test_simulator_jsonapi.py": FAST,
    "tests/test_simulator_protocol.py": FAST,
    "tests/test_task.py": FAST,
    "tests/test_tiers.py": FAST,
    "tests/test_topologies.py": INTEGRATION,  # Sentinel and Cluster
    "tests/test_watch.py": FAST,
    "tests/test_worker.py": FAST,
    "tests/chart/test_checkov.py": FAST,
    "tests/chart/test_ct_lint.py": FAST,
    "tests/chart/test_dockerfile.py": FAST,  # but for MIXED's wheel build
    "tests/chart/test_docs.py": FAST,
    "tests/chart/test_gateway_chart.py": FAST,
    "tests/chart/test_install_checklist.py": FAST,
    "tests/chart/test_providers_chart.py": FAST,
    "tests/chart/test_kubeconform.py": FAST,
    "tests/chart/test_render.py": FAST,
    "tests/chart/test_unittest.py": FAST,
}
#: single tests of a file in another tier than the file's (node id without parameters)
MIXED: dict[str, str] = {
    "tests/test_planner.py::test_recommended_configuration_behaves_like_the_model": INTEGRATION,  # 90 s of solves
    "tests/test_deadline.py::test_tasks_that_would_miss_go_to_the_provider_under_the_cap_the_rest_wait":
        INTEGRATION,  # a worker process, two simulators
    "tests/test_deadline.py::test_with_routing_on_a_deadline_off_the_backlog_waits_for_captchaai": INTEGRATION,
    "tests/chart/test_dockerfile.py::test_wheel_installs_into_a_fresh_venv_like_the_image": INTEGRATION,  # wheel + venv
}
#: what each make target selects (`make unit` is the fast tier without lint)
SELECTION = {FAST: "not integration and not chaos and not release", INTEGRATION: "integration", CHAOS: "chaos",
             RELEASE: "release"}

_COLLECT = """
import json, sys, pytest
class Report:
    def pytest_collection_finish(self, session):
        rows = [[i.nodeid, sorted({m.name for m in i.iter_markers()} & {"integration", "chaos", "release", "slow"})]
                for i in session.items]
        print("TIERS " + json.dumps(rows))
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"], plugins=[Report()]))
"""


def tier_of_file(path: str) -> str | None:
    return CHAOS if path.startswith("tests/chaos/") else TIERS.get(path)


def test_every_test_file_has_a_tier() -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if "e2e" not in p.parts}
    missing = sorted(p for p in on_disk if tier_of_file(p) is None)
    assert not missing, f"test files in no tier: add each to TIERS in tests/test_tiers.py: {missing}"
    stale = sorted(set(TIERS) - on_disk)
    assert not stale, f"TIERS names files that do not exist: {stale}"
    assert not [p for p in TIERS if p.startswith("tests/chaos/")], "tests/chaos/ is the chaos tier as a whole"


def test_every_test_carries_the_marker_of_its_files_tier() -> None:
    proc = subprocess.run([sys.executable, "-c", _COLLECT], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("TIERS ")), None)
    assert proc.returncode == 0 and line is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows: list[tuple[str, list[str]]] = json.loads(line.removeprefix("TIERS "))
    wrong = []
    for nodeid, all_marks in rows:
        if all_marks == ["slow"]:
            wrong.append(f"{nodeid}: marked slow, not with a tier (integration, chaos or release; fast is unmarked)")
            continue
        marks = [m for m in all_marks if m != "slow"]
        path, _, name = nodeid.partition("::")
        want = MIXED.get(f"{path}::{name.split('[')[0]}") or tier_of_file(path)
        got = marks[0] if len(marks) == 1 else FAST if not marks else "+".join(marks)
        if got != want:
            wrong.append(f"{nodeid}: marked {got}, its tier is {want}")
    assert not wrong, "\n".join(wrong[:20])
    for nodeid in MIXED:
        assert any(n.split("[")[0] == nodeid for n, _ in rows), f"MIXED names a test that does not exist: {nodeid}"
    counts = {t: sum(1 for _, m in rows if ([x for x in m if x != "slow"] or [FAST])[0] == t) for t in SELECTION}
    print(f"\n  tests per tier: {counts}, {len(rows)} in all")
    assert all(counts.values()), counts


def test_the_make_targets_select_the_tiers() -> None:
    """make test (and unit), integration and chaos pass these marker expressions to pytest."""
    makefile = (ROOT / "Makefile").read_text()
    for tier, expression in SELECTION.items():
        assert f"TIER_{tier.upper()} := {expression}\n" in makefile, tier
    for target, tier in (("test", FAST), ("unit", FAST), ("integration", INTEGRATION), ("chaos", CHAOS),
                         ("test-release", RELEASE)):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M)
        assert recipe is not None, f"make {target} is missing"
        assert f'-m "$(TIER_{tier.upper()})"' in recipe.group(1), (target, recipe.group(1))


def test_ci_runs_every_tier_in_order_and_the_readme_names_them() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    calls = re.findall(r"^\s*tier ([\w-]+)$", ci, re.M)
    assert calls == ["test", "integration", "chaos", "e2e", "e2e-pods", "test-release"], calls
    assert 'PYTEST_ARGS="--durations=10"' in ci
    readme = (ROOT / "README.md").read_text()
    for target in ("test", "unit", "integration", "chaos", "test-stress", "e2e", "e2e-pods"):
        assert f"make {target}`" in readme or f"make {target} " in readme, f"README does not name make {target}"
