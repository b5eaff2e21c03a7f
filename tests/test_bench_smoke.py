"""`python -m bench.run --smoke`: every benchmark runs end to end at toy sizes and writes its JSON file with the
expected keys. No timing is asserted (figures from a smoke run mean nothing)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.demo_calls import parse
from tests.helpers import ROOT, redis_server_binary

# every benchmark end to end, in smoke mode (~200 s); the fixture's run counts against the first test's timeout
pytestmark = [pytest.mark.integration, pytest.mark.timeout(480)]

SUMMARY = {"median", "min", "max", "n", "runs"}
COMMON = {"benchmark", "smoke", "generated_at", "duration_s", "machine", "params", "targets"}
MACHINE = {"cpu_model", "cpu_count", "python", "redis_server", "packages", "git_commit"}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    redis_server_binary()
    out = tmp_path_factory.mktemp("bench-smoke")
    # ~2 min quiet; the P1 peers' venvs are built before (make integration: python -m bench.venvs), else here
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--smoke", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def load(results: Path, name: str) -> dict[str, Any]:
    path = results / f"{name}.json"
    assert path.exists(), f"{name}.json was not written"
    data: dict[str, Any] = json.loads(path.read_text())
    assert COMMON <= data.keys(), COMMON - data.keys()
    assert MACHINE <= data["machine"].keys()
    assert data["smoke"] is True
    assert data["benchmark"] == name
    return data


P1_SYSTEMS = {"ours", "saq", "arq_default", "arq_tuned", "dramatiq", "taskiq_list", "taskiq_stream", "celery",
              "celery_results", "celery_results_late"}


def test_p1_queue_overhead(results: Path) -> None:
    d = load(results, "p1_queue_overhead")
    # every peer ran (the smoke run builds the peers' venvs, bench/venvs.py), with what it does per task
    assert set(d["throughput_tasks_per_s"]) == P1_SYSTEMS
    for name in P1_SYSTEMS:
        assert SUMMARY <= d["throughput_tasks_per_s"][name].keys()
        assert d["throughput_tasks_per_s"][name]["median"] > 0
        assert SUMMARY <= d["per_task"][name]["commands_per_task"].keys()
        assert {"label", "result", "ack", "traffic", "tuned", "keeps_result_acks_after"} <= d["systems"][name].keys()
    assert {"dramatiq", "taskiq", "taskiq-redis", "celery", "kombu", "arq"} <= d["machine"]["packages"].keys()
    ours = d["per_task"]["ours"]
    for key in ("commands_per_task", "round_trips_per_task", "cpu_us_per_task", "redis_cpu_us_per_task"):
        assert SUMMARY <= ours[key].keys()
    assert "evalsha" in ours["by_command"]
    assert {"ours_submit_many", "ours_submit", "dramatiq_send", "taskiq_list_kiq", "taskiq_stream_kiq", "celery_delay",
            "celery_delay_results"} <= d["submit_tasks_per_s"].keys()
    assert {"ceiling_tasks_per_s", "redis_benchmark_rps", "ratios"} <= d.keys()
    assert d["ratios"]["best_tuned_peer"] in P1_SYSTEMS - {"ours", "arq_default"}
    assert d["systems"][d["ratios"]["best_peer_keeping_results_acking_after"]]["keeps_result_acks_after"]
    if shutil.which("redis-benchmark"):
        assert "EVALSHA" in d["redis_benchmark_rps"]
    assert {"p1_ours_ge_2x_best_tuned_peer", "submit_many_ge_10x_saq_enqueue"} <= d["targets"].keys()


def test_p2_capacity(results: Path) -> None:
    d = load(results, "p2_capacity")
    level = d["levels"][0]
    for key in ("cores", "rss_mib", "simulator_cores", "sim_in_flight", "processing"):
        assert SUMMARY <= level[key].keys()
    assert {"level", "sustained", "api_requests_per_s", "windows"} <= level.keys()
    assert "p2_ge_1000_in_flight_le_0_25_core_le_150_mib" in d["targets"]


def test_p3_latency(results: Path) -> None:
    d = load(results, "p3_latency")
    for system in ("ours", "seed"):
        for phase in ("pickup", "delivery"):
            for stat in ("p50_ms", "p99_ms", "mean_ms"):
                assert SUMMARY <= d[system][phase][stat].keys()
            assert {"p50_ms", "p99_ms", "samples"} <= d[system]["pooled"][phase].keys()
    assert {"pickup_to_claimed", "claimed_to_solve"} <= d["ours"].keys()
    assert "p3_ours_p99_le_5ms_both_ways" in d["targets"]


def test_p4_polling(results: Path) -> None:
    d = load(results, "p4_polling")
    mc = d["monte_carlo"]
    for kind in ("turnstile", "recaptcha_v2", "image"):
        k = mc["kinds"][kind]
        for system in ("ours", "seed"):
            assert {"calls_mean", "added_mean_s", "added_p95_s"} <= k[system].keys()
        assert {"calls_ratio", "grid_best", "optimal_sequence", "schedule"} <= k.keys()
        real = d["real_run"]["kinds"][kind]
        assert SUMMARY <= real["ours"]["calls"].keys()
        assert SUMMARY <= real["seed"]["added_mean_s"].keys()
    assert {"calls_ratio", "meets_target"} <= mc["mix_equal_thirds"].keys()


def test_p5_utilisation(results: Path) -> None:
    d = load(results, "p5_utilisation")
    for key in ("at_cap_fraction", "utilisation", "over_cap_rejections", "max_in_flight"):
        assert SUMMARY <= d[key].keys()
    assert d["runs"][-1]["series"], "the last run keeps its in-flight time series for the plot"
    assert {"p5_at_cap_ge_98pct", "p5_zero_over_cap", "p5_dense_utilisation_ge_95pct"} <= d["targets"].keys()
    assert set(d["modes"]) == {"default", "dense"}, "both poll modes are measured"
    for mode in d["modes"].values():
        assert SUMMARY <= mode["api_calls_per_solve"].keys() and mode["api_calls_per_solve"]["median"] >= 1


def test_p6_faults(results: Path) -> None:
    d = load(results, "p6_faults")
    for key in ("storm_p50_s", "storm_p99_s", "no_faults_p50_s"):
        assert SUMMARY <= d[key].keys()
    for phase in ("storm", "no_faults"):
        run = d["runs"][phase][0]
        assert {"p50_s", "p99_s", "solved", "failed", "lost", "api_calls_per_task", "faults_injected"} <= run.keys()
        assert run["solved"] + run["failed"] + run["lost"] == d["params"]["tasks"]
    assert sum(d["runs"]["storm"][0]["faults_injected"].values()) > 0, "the storm phase injects faults"
    assert {"p6_storm_p50_le_5s", "p6_nothing_lost"} <= d["targets"].keys()


def test_p7_planner(results: Path) -> None:
    d = load(results, "p7_planner")
    case = d["cases"][0]
    assert {"predicted", "measured_p95_wait_s", "measured_mean_wait_s", "measured_p_wait", "measured_service_mean_s",
            "replayed_p95_wait_s", "replayed_mean_wait_s", "band_p95_wait_s", "solved", "tasks"} <= case.keys()
    assert case["band_p95_wait_s"]["q5"] <= case["band_p95_wait_s"]["q95"]
    assert {"threads", "concurrency", "max_replicas", "p95_wait_s", "mean_service_s"} <= case["predicted"].keys()
    assert case["solved"] > 0


def test_p8_gateway(results: Path) -> None:
    d = load(results, "p8_gateway")
    for endpoint in ("in", "create_task", "res_get", "get_task_result"):
        for key in ("rps", "cpu_us_per_request", "gateway_cores", "errors"):
            assert SUMMARY <= d["throughput"][endpoint][key].keys()
        assert d["throughput"][endpoint]["errors"]["max"] == 0
    lat = d["latency"]
    for system in ("gateway", "library"):
        assert SUMMARY <= lat[system]["p50_s"].keys() and lat[system]["samples"]["median"] > 0
    assert {"added_p50_s", "added_p99_s", "gateway_cpu_us_per_request"} <= lat.keys()


def test_report_renders_from_smoke_results(results: Path, tmp_path: Path) -> None:
    """Every generated block of docs/benchmarks.md is rewritten from the results: the copy's blocks are emptied
    first, so a block the report skipped keeps the placeholder and fails here."""
    doc = tmp_path / "benchmarks.md"
    blocks = ("machine", "summary", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8")
    emptied = (ROOT / "docs" / "benchmarks.md").read_text()
    for block in blocks:
        emptied, n = re.subn(rf"(<!-- BEGIN GENERATED: {block} -->\n).*?(<!-- END GENERATED: {block} -->)",
                             r"\1PLACEHOLDER\n\2", emptied, flags=re.S)
        assert n == 1, f"docs/benchmarks.md has no generated block {block}"
    doc.write_text(emptied)
    proc = subprocess.run([sys.executable, "-m", "bench.report", "--results", str(results), "--doc", str(doc)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    text = doc.read_text()
    assert "_no results yet" not in text and "PLACEHOLDER" not in text
    for block in blocks:
        assert f"<!-- BEGIN GENERATED: {block} -->" in text


def test_demo_calls(results: Path) -> None:
    d = load(results, "demo_calls")
    assert SUMMARY <= d["api_calls_per_solve"].keys() and d["api_calls_per_solve"]["median"] >= 1
    assert "demo_calls_per_solve_le_5_2" in d["targets"] and d["runs"][0]["utilisation_pct"] > 0


def test_the_demo_table_parses() -> None:
    table = ("| throughput          | 13.4 solves/s                 |\n"
             "| API calls / solve   | 5.14 (in.php + res.php, simulator count) |\n"
             "| plan utilisation    | 69 % of thread-time busy while the demo ran |\n")
    assert parse(table) == {"throughput": 13.4, "API calls / solve": 5.14, "plan utilisation": 69.0}


def test_p1_commands_charges_every_command_to_its_script() -> None:
    """bench.p1_commands (where P1's per-task commands go): MONITOR's count agrees with INFO commandstats, and
    what runs inside scripts is charged to the claim and the ACK by name, not left unattributed."""
    from bench import p1_commands  # noqa: PLC0415 - needs the bench's imports only here

    redis_server_binary()
    d = p1_commands.run(300, 10)
    assert abs(d["commands_per_task"] - d["commandstats_commands_per_task"]) < 0.05, d
    scripts = d["scripts"]
    assert {"RedisQueue._claim", "RedisQueue._ack"} <= scripts.keys(), scripts.keys()
    assert not [name for name in scripts if not name.startswith(("RedisQueue.", "Budget."))], scripts.keys()
    assert scripts["RedisQueue._claim"]["by_command"]["lmove"] >= 1.0  # every task moved by a claim
    assert scripts["RedisQueue._ack"]["by_command"]["lrem"] >= 1.0  # every task acked once
