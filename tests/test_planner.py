"""`captcha-worker plan`: the queueing model against closed forms, the plan choice, the CLI, the values snippet
against the chart (its schema and helm itself), and the prediction against a real simulator run."""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from captcha_worker import methods, planner
from captcha_worker.planner import KindLoad, Plan, Workload
from captcha_worker.polling import PollSchedule
from tests.chart.chartlib import tool
from tests.helpers import ROOT, run_cli
from tests.test_observability import offline_chart

CHART = ROOT / "charts" / "captcha-solver"
MIX = "turnstile=0.7,recaptcha_v2=0.3"


def exponential(rate_per_s: float, mean_s: float) -> Workload:
    """Exponential service times (c² = 1): the model is then exactly M/M/c."""
    return Workload(rate_per_s, (KindLoad("turnstile", 1.0, mean_s, mean_s),), "test")


def erlang_c_by_definition(c: int, a: float) -> float:
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


# -- the model ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("c", "a"), [(1, 0.5), (2, 1.0), (10, 7.0), (15, 14.2), (40, 30.0)])
def test_erlang_c_matches_its_definition(c: int, a: float) -> None:
    assert planner.erlang_c(c, a) == pytest.approx(erlang_c_by_definition(c, a), rel=1e-9)


def test_erlang_c_edges() -> None:
    assert planner.erlang_c(1, 0.3) == pytest.approx(0.3)  # M/M/1: P(wait) = utilisation
    assert planner.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert planner.erlang_c(5, 0) == 0 and planner.erlang_c(5, 5) == 1 and planner.erlang_c(5, 9) == 1
    assert planner.erlang_c(500, 480) < 1  # no overflow for large plans


def test_mm1_percentile_is_exact() -> None:
    """M/M/1: P(W > t) = ρ·e^(−(μ−λ)t), so the p95 wait is ln(ρ/0.05)/(μ−λ)."""
    lam, mean = 0.08, 10.0
    p = planner.predict(exponential(lam, mean), 1)
    rho, mu = lam * mean, 1 / mean
    assert p.p95_wait_s == pytest.approx(math.log(rho / 0.05) / (mu - lam))
    assert p.mean_wait_s == pytest.approx(rho / (mu - lam))  # Pollaczek–Khinchine with c² = 1
    assert p.utilisation == pytest.approx(rho)


def test_less_variable_service_waits_less() -> None:
    """Allen–Cunneen: deterministic service halves the M/M/c wait."""
    mm = planner.predict(exponential(1.0, 8.0), 10)
    md = planner.predict(Workload(1.0, (KindLoad("turnstile", 1.0, 8.0, 0.0),), "test"), 10)
    assert md.mean_wait_s == pytest.approx(mm.mean_wait_s / 2)
    assert md.p_wait == mm.p_wait


def test_overload_never_meets_a_target() -> None:
    p = planner.predict(exponential(2.0, 10.0), 20)  # a = 20 threads busy: unstable
    assert p.p95_wait_s == math.inf and p.utilisation == 1
    assert planner.threads_needed(exponential(2.0, 10.0), 30) > 20


def test_threads_needed_is_the_smallest_that_meets_the_target() -> None:
    w = planner.from_methods(planner.parse_rate("1000/h"), planner.parse_mix(MIX))
    for target in (60.0, 30.0, 10.0, 1.0):
        n = planner.threads_needed(w, target)
        assert planner.predict(w, n).p95_wait_s <= target < planner.predict(w, n - 1).p95_wait_s


def test_mix_moments_come_from_the_methods_table() -> None:
    w = planner.from_methods(1.0, {"turnstile": 7, "recaptcha_v2": 3}, overhead_s=0.5)
    (t_mean, t_sd), (r_mean, r_sd) = (planner.service_time(methods.by_name(k)) for k in ("turnstile", "recaptcha_v2"))
    t_mean, r_mean = t_mean + 0.5, r_mean + 0.5
    assert w.mean_s == pytest.approx(0.7 * t_mean + 0.3 * r_mean)
    second = 0.7 * (t_sd**2 + t_mean**2) + 0.3 * (r_sd**2 + r_mean**2)
    assert w.scv == pytest.approx(second / w.mean_s**2 - 1)


@pytest.mark.parametrize("name", ["turnstile", "recaptcha_v2", "image", "cloudflare_challenge"])
def test_service_time_matches_a_simulation_of_the_poll_schedule(name: str) -> None:
    """service_time's closed form against a Monte Carlo of the same thing: a normal solve time, answers fetched by
    the schedule's first poll or the next interval poll."""


    kind = methods.by_name(name)
    schedule = PollSchedule.for_kind(kind)
    rng = random.Random(5)
    holds = []
    for _ in range(200_000):
        t = rng.gauss(kind.solve_mean_s, kind.solve_stddev_s)
        if t <= schedule.first:
            holds.append(schedule.first)
        else:
            holds.append(schedule.first + math.ceil((t - schedule.first) / schedule.interval) * schedule.interval)
    mean = sum(holds) / len(holds)
    sd = math.sqrt(sum((h - mean) ** 2 for h in holds) / len(holds))
    model_mean, model_sd = planner.service_time(kind)
    assert model_mean == pytest.approx(mean, rel=0.005)
    assert model_sd == pytest.approx(sd, rel=0.03)
    assert model_mean > kind.solve_mean_s  # the poll lag is a cost of the thread


# -- plans --------------------------------------------------------------------------------------------------
def test_the_cheapest_single_plan_wins_when_one_fits() -> None:
    w = planner.from_methods(planner.parse_rate("1000/h"), planner.parse_mix(MIX))  # ~7.8 threads busy
    rec = planner.recommend(w, 30)
    assert [r.plan.name for r in rec.releases] == ["STANDARD"] and rec.single is None
    r = rec.releases[0]
    assert (r.concurrency, r.max_replicas) == (5, 3)
    assert rec.cost_per_1000 == pytest.approx(30 * 1000 / (1000 / 3600 * 30 * 86400))
    assert r.prediction.utilisation == pytest.approx(w.load / 15)


def test_a_combination_when_no_single_plan_suffices() -> None:
    w = planner.from_methods(planner.parse_rate("20000/h"), planner.parse_mix(MIX))  # ~157 threads busy
    rec = planner.recommend(w, 30)
    assert rec.threads >= rec.threads_needed > 100 and len(rec.releases) > 1
    assert sum(r.share for r in rec.releases) == pytest.approx(1)
    assert all(r.prediction.p95_wait_s <= 30 for r in rec.releases)
    assert rec.single is None  # no plan in the table has the threads
    cheaper = [c for c in planner._candidates(planner.PLANS) if sum(p.monthly_price for p in c) < rec.monthly_price]
    assert all(planner._releases(w, c, 30, None) is None for c in cheaper)  # nothing cheaper meets the target


def test_plan_table_override_and_no_fit() -> None:
    plans = planner.parse_plans(["BIG=200:300", "SMALL=20:50"])
    assert plans == (Plan("BIG", 200, 300.0), Plan("SMALL", 20, 50.0))
    w = planner.from_methods(planner.parse_rate("20000/h"), planner.parse_mix(MIX))
    assert [r.plan.name for r in planner.recommend(w, 30, plans).releases] == ["BIG"]
    with pytest.raises(planner.PlanError, match="add a larger plan"):
        planner.recommend(w, 30, (Plan("TINY", 2, 1.0),))


@pytest.mark.parametrize(("threads", "concurrency"), [(15, 5), (50, 10), (100, 20), (10, 5), (7, 1), (1, 1)])
def test_concurrency_divides_the_threads(threads: int, concurrency: int) -> None:
    assert planner.concurrency_for(threads) == concurrency


@pytest.mark.parametrize(("text", "per_s"), [("20000/h", 20000 / 3600), ("5/s", 5), ("300/min", 5),
                                             ("86400/d", 1), ("1.5/s", 1.5)])
def test_parse_rate(text: str, per_s: float) -> None:
    assert planner.parse_rate(text) == pytest.approx(per_s)


@pytest.mark.parametrize("args", [
    ["--rate", "fast", "--mix", MIX], ["--rate", "0/h", "--mix", MIX], ["--rate", "10/week", "--mix", MIX],
    ["--rate", "10/s", "--mix", "hcaptcha=1"], ["--rate", "10/s", "--mix", "turnstile=-1"],
    ["--rate", "10/s", "--mix", "turnstile"], ["--rate", "10/s", "--mix", MIX, "--p95-wait", "soon"],
    ["--rate", "10/s", "--mix", MIX, "--plan", "X=0:1"], ["--rate", "10/s"], [],
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str]) -> None:
    proc = run_cli("plan", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("captcha-worker plan: "), proc.stderr


def test_unreachable_prometheus_exits_1() -> None:
    proc = run_cli("plan", "--from-prometheus", "http://user:secret@127.0.0.1:9/")
    assert proc.returncode == 1 and "unreachable" in proc.stderr and "secret" not in proc.stderr


def test_no_plan_fits_exits_1() -> None:
    proc = run_cli("plan", "--rate", "20000/h", "--mix", MIX, "--plan", "TINY=2:1")
    assert proc.returncode == 1 and "add a larger plan" in proc.stderr


def test_overhead_option() -> None:
    base = json.loads(run_cli("plan", "--rate", "1000/h", "--mix", MIX, "--json").stdout)["workload"]
    none = json.loads(run_cli("plan", "--rate", "1000/h", "--mix", MIX, "--overhead", "0s", "--json").stdout)
    assert base["mean_service_s"] - none["workload"]["mean_service_s"] == pytest.approx(planner.OVERHEAD_S)
    assert f"default {planner.OVERHEAD_S:g}s" in " ".join(run_cli("plan", "--help").stdout.split())
    assert run_cli("plan", "--rate", "1/s", "--mix", MIX, "--overhead", "a lot").returncode == 2


def test_cli_text_and_json_agree() -> None:
    text = run_cli("plan", "--rate", "1000/h", "--mix", MIX, "--p95-wait", "30s")
    data = json.loads(run_cli("plan", "--rate", "1000/h", "--mix", MIX, "--p95-wait", "30s", "--json").stdout)
    assert text.returncode == 0
    r = data["releases"][0]
    assert (r["plan"], r["threads"], r["concurrency"], r["max_replicas"]) == ("STANDARD", 15, 5, 3)
    assert f"{data['threads_needed']} threads" in text.stdout
    assert f"p95 wait {r['p95_wait_s']:.1f} s" in text.stdout
    assert f"{data['cost_per_1000_solves']:.4f} per 1 000 solves" in text.stdout
    assert r["values_yaml"].strip() in text.stdout


# -- the values snippet is a valid chart configuration ------------------------------------------------------
def _merged(snippet: dict[str, Any]) -> dict[str, Any]:
    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base.get(k), over[k]) if k in over else base[k] for k in {*base, *over}}
        return over
    return dict(merge(yaml.safe_load((CHART / "values.yaml").read_text()), snippet))


@pytest.mark.parametrize("rate", ["1000/h", "5000/h", "20000/h"])
def test_values_snippets_pass_the_chart_schema_and_helm(rate: str, tmp_path: Path) -> None:
    data = json.loads(run_cli("plan", "--rate", rate, "--mix", MIX, "--json").stdout)
    schema = json.loads((CHART / "values.schema.json").read_text())
    chart = offline_chart(tmp_path)
    for r in data["releases"]:
        snippet = yaml.safe_load(r["values_yaml"])
        jsonschema.validate(_merged(snippet), schema)
        path = tmp_path / "values.yaml"
        path.write_text(r["values_yaml"])
        proc = subprocess.run([str(tool("helm3")), "template", "cs", str(chart), "-f", str(path),
                               "--set", "captchaai.apiKey=0123456789abcdef0123456789abcdef",
                               "--show-only", "templates/scaledobject.yaml"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        so = yaml.safe_load(proc.stdout)["spec"]
        assert so["minReplicaCount"] == so["maxReplicaCount"] == r["max_replicas"]
        assert so["triggers"][0]["metadata"]["listLength"] == str(r["concurrency"])
        if len(data["releases"]) > 1:
            assert so["triggers"][0]["metadata"]["listName"] == f"{{{snippet['queue']['name']}}}:pending"
    # the schema really checks: a typo in the snippet's keys is rejected
    bad = yaml.safe_load(data["releases"][0]["values_yaml"])
    bad["worker"]["concurency"] = 5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_merged(bad), schema)


# -- the prediction against the simulator -------------------------------------------------------------------
def _p7() -> Any:
    from bench import p7_planner  # noqa: PLC0415 - a benchmark stage: imports the benchmarks' plumbing

    return p7_planner


@pytest.mark.parametrize(("threads", "utilisation"), [(10, 0.7), (10, 0.8), (20, 0.9), (50, 0.9)])
def test_the_formula_matches_a_long_simulation_of_its_own_queue(threads: int, utilisation: float) -> None:
    """Erlang C with the Allen–Cunneen tail against a discrete-event simulation of the same M/G/c queue (Poisson
    arrivals, the poll schedule's holding times) over 300 000 s: the p95 within 10 %, P(wait) within 10 %."""
    p7 = _p7()
    mix = planner.parse_mix(MIX)
    rate = utilisation * threads / planner.from_methods(1.0, mix).mean_s
    pred = planner.predict(planner.from_methods(rate, mix), threads)
    rng = __import__("random").Random(3)
    arrivals = [t for t, _ in p7._arrivals(rate, mix, 300_000, 11)]
    waits = p7.fifo_waits(arrivals, p7.model_holds(mix, len(arrivals), rng), threads)[500:]
    assert p7.percentile(waits, 95) == pytest.approx(pred.p95_wait_s, rel=0.1)
    assert sum(w > 0 for w in waits) / len(waits) == pytest.approx(pred.p_wait, rel=0.1)


def test_fifo_replay() -> None:
    p7 = _p7()
    assert p7.fifo_waits([0, 0, 0, 1], [2, 2, 2, 2], 2) == [0, 0, 2, 1]
    assert p7.fifo_waits([0, 5], [1, 1], 1) == [0, 0]


@pytest.mark.integration
def test_recommended_configuration_behaves_like_the_model(redis_server: Any) -> None:
    """The configuration `plan` recommends for a 10-thread plan at 70 % utilisation, run for 30 simulated minutes
    (90 s at --speed 20) against the simulator. A 30-minute p95 varies a lot by chance alone (the model's own queue
    gives 4-27 s for a 12 s prediction in 90 % of such windows), so the chain from prediction to measurement is
    checked link by link: the holding time is the modelled one (±5 %); the waits are those of an ideal FIFO queue
    of 10 servers fed with this run's own arrivals and holding times, in which each claim takes the claim latency
    this run measured (p95 within ±15 % or 2 s, mean within ±20 %: no idle slot, no thread lost to the budget);
    and the measured p95 lies within the 0.5-99.5 % band of the model's own queue over windows of this length.
    The claim latency is the mean submission-to-claim time of the tasks that found a thread free in the ideal
    queue (model seconds: wall-clock x 20): the producer's push, a worker's wake-up and CLAIM, and whatever the
    machine's scheduler adds, which a loaded 2-core machine makes a sizeable share of a model second (50 ms of
    wall clock). Each claim of the replay takes it, its thread idle meanwhile, so the waits the queue adds on top
    are what the mean link judges, with no margin of its own: the fixed 0.3 s allowed before (15 ms of wall clock
    per task) failed a run at load ~5 (1.16 s measured vs 0.85 s replayed with instant claims). The latency itself
    is printed, not judged here. The chance
    in this link is fixed, not sampled: the arrivals (seed 7) and the simulator's solve times (``--seed 7``, the
    seed passed through demo.running_stack) repeat in every run (in the order the simulator accepts the tasks), so a
    run's p95 moves with the machine's scheduling (the other links bound that), not with a new draw; seed 7 measured
    4.0 s and 8.3 s (replayed 3.7 s, 7.2 s) at load 1-5 against a band of 1.1-42.0 s. Before the simulator was
    seeded a perfect model failed this link in 1 % of runs. Longer runs: bench/p7_planner.py."""
    p7 = _p7()
    m = p7.measure(p7.Case("893/h", MIX, 10), speed=20, duration_s=90, warmup_s=15, seed=7)
    p, band = m.predicted, m.band_p95_wait_s
    print(f"\n  predicted p95 {p['p95_wait_s']:.1f} s (mean {p['mean_wait_s']:.1f} s, P(wait) {p['p_wait']:.2f}); "
          f"measured p95 {m.measured_p95_wait_s:.1f} s (mean {m.measured_mean_wait_s:.2f} s, P(wait) "
          f"{m.measured_p_wait:.2f}); replayed p95 {m.replayed_p95_wait_s:.1f} s "
          f"(mean {m.replayed_mean_wait_s:.2f} s; with claims of {m.claim_latency_s:.3f} s = "
          f"{1000 * m.claim_latency_s / 20:.1f} ms wall: p95 {m.replayed_with_claims_p95_wait_s:.1f} s, "
          f"mean {m.replayed_with_claims_mean_wait_s:.2f} s); "
          f"chance band {band['q0.5']:.1f}-{band['q99.5']:.1f} s; holding {m.measured_service_mean_s:.1f} s vs "
          f"{p['mean_service_s']:.1f} s; {m.solved} tasks")
    assert (p["threads"], p["concurrency"], p["max_replicas"]) == (10, 5, 2)
    assert m.solved >= 0.9 * m.tasks * (90 - 15) / 90
    assert m.measured_service_mean_s == pytest.approx(p["mean_service_s"], rel=0.05)
    assert m.measured_p95_wait_s == pytest.approx(m.replayed_with_claims_p95_wait_s, rel=0.15, abs=2.0)
    assert m.measured_mean_wait_s == pytest.approx(m.replayed_with_claims_mean_wait_s, rel=0.2)
    assert band["q0.5"] <= m.measured_p95_wait_s <= band["q99.5"]
    assert band["q5"] < p["p95_wait_s"] < band["q95"]  # the band is the prediction's


def test_the_operations_guide_shows_what_the_planner_prints() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = doc.split("$ captcha-worker plan --rate 1000/h --mix turnstile=0.7,recaptcha_v2=0.3 --p95-wait 30s\n")[1]
    shown = block.split("\n```")[0]
    proc = run_cli("plan", "--rate", "1000/h", "--mix", MIX, "--p95-wait", "30s")
    assert proc.stdout.rstrip() == shown
    big = run_cli("plan", "--rate", "20000/h", "--mix", MIX, "--p95-wait", "30s").stdout
    plan_line = next(line for line in big.splitlines() if line.startswith("plan "))
    assert plan_line.removeprefix("plan").strip() in " ".join(doc.split())


def test_a_concurrency_that_does_not_divide_the_threads_leaves_threads_idle() -> None:
    w = planner.from_methods(planner.parse_rate("3000/h"), planner.parse_mix("turnstile=1"))  # ~10.6 busy
    rec = planner.recommend(w, 30, (Plan("P", 15, 1.0),), concurrency=7)
    r = rec.releases[0]
    assert (r.concurrency, r.max_replicas, r.prediction.threads) == (7, 2, 14)
    assert r.prediction.p95_wait_s == planner.predict(w, 14).p95_wait_s > planner.predict(w, 15).p95_wait_s
    assert "1 threads never used" in planner.report(rec)


# -- overflow instead of a bigger plan ------------------------------------------------------------------------------
SMALL, BIG = Plan("SMALL", 10, 20.0), Plan("BIG", 20, 30.0)  # two SMALL cost more than one BIG
MONTH_H = planner.MONTH_S / 3600  # hours in the planner's month (30 days)


def test_serves_within_is_the_largest_rate_that_meets_the_target() -> None:
    w = exponential(1.0, 10.0)
    s = planner.serves_within(w, 10, 30.0)
    assert 0 < s < 10 / 10.0  # below the threads' capacity T / E[S]
    assert planner.predict(exponential(s, 10.0), 10).p95_wait_s <= 30.0 < \
        planner.predict(exponential(s * 1.001, 10.0), 10).p95_wait_s


def test_a_smaller_plan_plus_overflow_is_priced_on_the_excess_it_cannot_serve() -> None:
    w = exponential(1.5, 10.0)  # 15 threads busy on average: SMALL cannot, BIG can
    rec = planner.recommend(w, 30.0, (SMALL, BIG))
    assert [r.plan for r in rec.releases] == [BIG] and rec.monthly_price == 30.0
    s = planner.serves_within(w, 10, 30.0)
    base = 0.2 * s  # outside the peak SMALL serves everything: no overflow then
    c = planner.compare_overflow(rec, {"turnstile": 2.0}, planner.Peak(2.0, base), (SMALL, BIG))
    assert c.best is not None and c.best.plans == (SMALL,) and c.price_per_1000 == 2.0
    solves = (1.5 - s) * 3600 * 2.0 * 30  # the excess rate, 2 h a day, 30 days
    assert c.best.overflow_per_month == pytest.approx(solves)
    assert c.best.overflow_monthly == pytest.approx(solves * 2.0 / 1000)
    assert c.best.total_monthly == pytest.approx(20.0 + solves * 2.0 / 1000)
    assert c.cheaper is (c.best.total_monthly < 30.0)
    even = c.break_even_hours(w)
    assert even is not None
    at_even = planner.compare_overflow(rec, {"*": 2.0}, planner.Peak(even, base), (SMALL, BIG))
    assert at_even.best is not None and at_even.best.total_monthly == pytest.approx(30.0)
    flat = planner.compare_overflow(rec, {"*": 2.0}, planner.Peak(24.0, 1.5), (SMALL, BIG))
    assert flat.best is not None and flat.best.overflow_per_month == pytest.approx((1.5 - s) * 3600 * MONTH_H)


def test_a_combination_serves_what_its_most_loaded_release_can_under_the_split_by_threads() -> None:
    w = exponential(4.5, 10.0)  # 45 busy
    plans = (Plan("S", 10, 20.0), Plan("M", 30, 45.0), Plan("H", 100, 1000.0))
    rec = planner.recommend(w, 30.0, plans)
    c = planner.compare_overflow(rec, {"*": 1.0}, planner.Peak(24.0, 4.5), plans)
    assert c.best is not None
    for combo in [c.best.plans, (plans[0], plans[1])]:  # the best, and a mixed one priced the same way
        threads = sum(p.threads for p in combo)
        serves = min(planner.serves_within(w, planner.concurrency_for(p.threads) * (p.threads //
                                           planner.concurrency_for(p.threads)), 30.0) * threads / p.threads
                     for p in combo)
        if combo == c.best.plans:
            assert c.best.serves_per_s == pytest.approx(serves)
        assert planner._releases(w.split(serves * 0.999 / w.rate_per_s), combo, 30.0, None) is not None
        assert planner._releases(w.split(serves * 1.001 / w.rate_per_s), combo, 30.0, None) is None


def test_no_smaller_plan_and_prices_parsed() -> None:
    w = exponential(0.1, 10.0)
    rec = planner.recommend(w, 30.0, (SMALL, BIG))
    assert planner.compare_overflow(rec, {"*": 1.0}, planner.Peak(24.0, 0.1), (SMALL, BIG)).best is None
    assert planner.parse_prices(["1.45"]) == {"*": 1.45}
    assert planner.parse_prices(["turnstile=1.45,recaptcha_v2=2.99"]) == {"turnstile": 1.45, "recaptcha_v2": 2.99}
    for bad in ("x", "turnstile=-1", "turnstile=nan"):
        with pytest.raises(ValueError, match="--overflow-price"):
            planner.parse_prices([bad])
    with pytest.raises(ValueError, match="no price for recaptcha_v2"):
        planner.mix_price_per_1000(planner.from_methods(1.0, planner.parse_mix(MIX)), {"turnstile": 1.0})
    mixed = planner.mix_price_per_1000(planner.from_methods(1.0, planner.parse_mix(MIX)),
                                       {"turnstile": 1.0, "recaptcha_v2": 3.0})
    assert mixed == pytest.approx(0.7 * 1.0 + 0.3 * 3.0)


def test_cli_overflow_text_and_json_agree() -> None:
    args = ["plan", "--rate", "3000/h", "--mix", MIX, "--overflow-price", "1.45", "--peak-hours", "0.25",
            "--base", "1000/h"]
    text = run_cli(*args)
    data = json.loads(run_cli(*args, "--json").stdout)["overflow"]
    assert text.returncode == 0, text.stderr
    s = data["smaller"]
    assert (data["cheaper"], s["plans"], data["peak_plan_monthly"]) == ("overflow", ["STANDARD"], 60.0)
    assert f"+ overflow {s['overflow_solves_per_month']:,.0f} solves/month ({s['overflow_monthly']:.2f}/month) = " \
           f"{s['total_monthly']:.2f}/month" in text.stdout
    assert f"by {60.0 - s['total_monthly']:.2f}/month (break-even at {data['break_even_peak_hours']:.1f} h" \
        in text.stdout
    assert "overflow" not in json.loads(run_cli("plan", "--rate", "3000/h", "--mix", MIX, "--json").stdout)


@pytest.mark.parametrize("args", [
    ["--base", "10/h"], ["--peak-hours", "2"], ["--overflow-price", "cheap"],
    ["--overflow-price", "1", "--peak-hours", "0"], ["--overflow-price", "1", "--peak-hours", "25"],
    ["--overflow-price", "1", "--base", "5000/h"], ["--overflow-price", "turnstile=1"],
])
def test_bad_overflow_arguments_are_one_line_and_exit_2(args: list[str]) -> None:
    proc = run_cli("plan", "--rate", "3000/h", "--mix", MIX, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("captcha-worker plan: "), proc.stderr


def test_the_operations_guide_shows_what_the_overflow_comparison_prints() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    cmd = ("captcha-worker plan --rate 3000/h --mix turnstile=0.7,recaptcha_v2=0.3 --p95-wait 30s --overflow-price "
           "1.45 --peak-hours 0.25 --base 1000/h")
    shown = doc.split(f"$ {cmd}\n")[1].split("\n```")[0].splitlines()
    out = run_cli(*cmd.split()[1:]).stdout.splitlines()
    heads = ("plan ", "overflow ", "  peak", "  smaller", "  cheaper")
    assert shown == [line for line in out if line.startswith(heads)]
    hour = run_cli(*cmd.replace("--peak-hours 0.25", "--peak-hours 1").split()[1:]).stdout
    assert "= 87.71/month" in hour and "cheaper     the peak plan" in hour
    assert "costs 87.71/month with overflow, and the second plan is cheaper" in " ".join(doc.split())
