"""Paid solves under the spend cap (captcha_worker.overflow): the real simulator process as a res.php provider and
(``--profile anticaptcha``, its JSON API) as a createTask one, a real redis-server for the cap. Exact figures: the
ledger equals the provider's submissions times the price (the simulator's own charge), the cap refuses before
anything reaches the provider, refunded UNSOLVABLE rounds cost nothing, charged ones the price, and a createTask
whose reply was lost is counted spent (the simulator did charge it)."""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from captcha_worker import log, methods
from captcha_worker.captchaai import ApiError, CaptchaAI, MaybeCharged, RetryPolicy, TaskFailed
from captcha_worker.codes import Code
from captcha_worker.config import ProvidersConfig, WorkerConfig, providers_from_env
from captcha_worker.createtask import JsonApi
from captcha_worker.overflow import OverCap, Overflow, ProviderPool, key_watchers, ledger_label, parse_label
from captcha_worker.spend import Spend
from tests.helpers import run_cli, secret_volume
from tests.procs import SimProc, simulator, workers

SPEED = 50.0
PKEY = "p2captcha0123456789abcdef0123456"  # the simulator takes any 32 letters and digits
TURNSTILE = methods.by_name("turnstile")
PARAMS = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}
LABEL = "twocaptcha|turnstile"


def providers(sim: SimProc, *, hour: float = 5.0, refund: bool = True) -> ProvidersConfig:
    doc = {"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": sim.url, "key": PKEY,
                          "kinds": ["turnstile"], "price_per_1000": {"turnstile": 1.45},
                          "refund_unsolvable": refund}], "cap": {"hour": hour, "day": 50.0}}
    pc = providers_from_env({"PROVIDERS": json.dumps(doc)})
    assert pc is not None
    return pc


def cost_metric() -> float:
    return REGISTRY.get_sample_value("captcha_solver_cost_total", {"provider": "twocaptcha", "kind": "turnstile",
                                                               "tenant": ""}) \
        or 0.0


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProc]:
    with simulator(tmp_path_factory.mktemp("overflow"), "--threads", "50", "--speed", str(SPEED), "--seed", "27") as s:
        yield s


@pytest.fixture
async def overflow_of(redis: Redis, sim: SimProc) -> AsyncIterator[Any]:
    sim.configure(faults={"unsolvable": 0.0})
    sim.reset()
    async with CaptchaAI(providers(sim).providers[0].key, sim.url, poll_scale=SPEED,
                         retry=RetryPolicy.scaled(SPEED), provider="twocaptcha") as api:
        def make(**kw: Any) -> Overflow:
            return Overflow(Spend(redis, "captcha"), providers(sim, **kw), {"twocaptcha": api})
        yield make


async def test_a_paid_solve_is_reserved_solved_and_charged_once(overflow_of: Any, sim: SimProc, redis: Redis) -> None:
    ov: Overflow = overflow_of()
    p = ov.provider_for("turnstile")
    assert p is not None and ov.provider_for("lemin") is None
    before = cost_metric()
    paid = await ov.solve("t1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    assert (paid.provider, paid.cost_micro) == ("twocaptcha", 1450) and paid.solution.answer
    st = await Spend(redis, "captcha").state()
    assert (st.reserved, st.hour, st.totals) == (0, 1450, {LABEL: 1450})
    assert sim.stats()["submitted"] == 1
    assert cost_metric() - before == pytest.approx(0.00145, abs=1e-12)


async def test_concurrent_paid_solves_stop_at_the_cap_before_the_provider(overflow_of: Any, sim: SimProc,
                                                                            redis: Redis) -> None:
    ov: Overflow = overflow_of(hour=0.00145 * 7)  # room for exactly 7 solves
    p = ov.provider_for("turnstile")
    assert p is not None
    got = await asyncio.gather(*(ov.solve(f"c{i}", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
                                 for i in range(20)), return_exceptions=True)
    solved = [g for g in got if not isinstance(g, BaseException)]
    capped = [g for g in got if isinstance(g, OverCap)]
    assert (len(solved), len(capped)) == (7, 13), got
    st = await Spend(redis, "captcha").state()
    submitted = sim.stats()["submitted"]
    assert submitted == 7, "a refused reservation never reaches the provider"
    assert st.totals[LABEL] == st.hour == submitted * 1450 == sum(s.cost_micro for s in solved)


@pytest.mark.parametrize(("refund", "charged"), [(True, 0), (False, 2 * 1450)])
async def test_unsolvable_rounds_refunded_or_charged(overflow_of: Any, sim: SimProc, redis: Redis, refund: bool,
                                                     charged: int) -> None:
    ov: Overflow = overflow_of(refund=refund)
    p = ov.provider_for("turnstile")
    assert p is not None
    sim.configure(faults={"unsolvable": 1.0})
    with pytest.raises(TaskFailed) as err:
        await ov.solve("u1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60, unsolvable_retries=1)
    assert err.value.code == Code.ERROR_CAPTCHA_UNSOLVABLE
    st = await Spend(redis, "captcha").state()
    assert sim.stats()["submitted"] == 2, "two rounds, each its own reservation"
    assert (st.reserved, st.hour, st.totals) == (0, charged, {LABEL: charged})
    recs = [await Spend(redis, "captcha").record(f"twocaptcha:u1:{i}") for i in (0, 1)]
    assert all(r is not None and r.startswith(f"S|1450|{charged // 2}|") for r in recs), recs


async def test_a_res_php_submission_whose_reply_was_lost_is_counted_spent(redis: Redis, sim: SimProc) -> None:
    """The simulator process accepts in.php, then resets the connection instead of replying (`lost`): the paid
    client (as ProviderPool opens it) sends it once, MaybeCharged, the reservation settled at the price, so the
    ledger is the one submission the provider took. (The plan's retrying client would have sent it 6 times, each
    a submission, and settled 0.)"""
    sim.configure(faults={"unsolvable": 0.0, "lost": 1.0})
    sim.reset()
    try:
        async with CaptchaAI(providers(sim).providers[0].key, sim.url, poll_scale=SPEED,
                             retry=RetryPolicy.scaled(SPEED), paid=True) as api:
            ov = Overflow(Spend(redis, "captcha"), providers(sim), {"twocaptcha": api})
            p = ov.provider_for("turnstile")
            assert p is not None
            with pytest.raises(MaybeCharged):
                await ov.solve("l1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    finally:
        sim.configure(faults={"lost": 0.0})
    st = await Spend(redis, "captcha").state()
    ps = sim.stats()
    assert (ps["calls"]["in.php"], ps["submitted"], ps["faults"]["lost"]) == (1, 1, 1)
    assert (st.reserved, st.totals) == (0, {LABEL: 1450 * ps["submitted"]})


async def test_an_id_left_by_an_earlier_owner_is_not_reused(overflow_of: Any, sim: SimProc, redis: Redis) -> None:
    """A task resumed by another worker: the earlier owner's reservation (its solve may be charged) stays; the new
    owner reserves under the next id, so both count."""
    ov: Overflow = overflow_of()
    p = ov.provider_for("turnstile")
    assert p is not None
    spend = Spend(redis, "captcha")
    assert (await spend.reserve("twocaptcha:r1:0", 1450, cap=ov.cap, ttl_s=60, label=LABEL)).outcome == "reserved"
    paid = await ov.solve("r1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    assert paid.cost_micro == 1450
    st = await spend.state()
    assert (st.reserved, st.hour, st.totals) == (1450, 2900, {LABEL: 1450})
    assert (await spend.record("twocaptcha:r1:1") or "").startswith("S|1450|1450|")


async def test_a_task_whose_reservation_ids_are_all_taken_is_refused_as_such_not_as_over_cap(
        overflow_of: Any, sim: SimProc, redis: Redis) -> None:
    """The task's 8 reservation ids at the provider exist already (8 earlier submissions): the solve raises
    RoundsUsed (MAX_ATTEMPTS_EXCEEDED) before the provider sees it, never OverCap ("spend cap reached"): the cap
    has all the room in the world."""
    ov: Overflow = overflow_of()
    p = ov.provider_for("turnstile")
    assert p is not None
    spend = Spend(redis, "captcha")
    for i in range(8):
        assert (await spend.reserve(f"twocaptcha:r8:{i}", 1450, cap=ov.cap, ttl_s=60, label=LABEL)).ok
    with pytest.raises(Exception) as err:
        await ov.solve("r8", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    assert not isinstance(err.value, OverCap), f"the cap was blamed: {err.value}"
    assert type(err.value).__name__ == "RoundsUsed" and getattr(err.value, "code", None) == "MAX_ATTEMPTS_EXCEEDED"
    assert str(err.value) == "twocaptcha: 8 paid submissions of this task reserved already; none more is made"
    assert sim.stats()["submitted"] == 0
    assert await spend.record("twocaptcha:r8:8") is None, "no ninth reservation"



async def test_a_rotated_provider_key_file_is_used_from_the_next_solve(redis: Redis, sim: SimProc,
                                                                        tmp_path: Path) -> None:
    """The provider's key from a mounted Secret: the simulator process accepts only the new key. With the old key
    in the file the paid solve is refused at in.php and costs nothing; a malformed write keeps the key in use (one
    api_key_file_invalid); the new key written the way the kubelet updates a Secret -> the watcher hands it to the
    client, one api_key_reloaded line naming the provider, and the next solve is charged once. No key is logged."""
    new_key = "NEWp2captcha0123456789abcdef0123"
    secret = tmp_path / "twocaptcha"
    secret.mkdir()
    secret_volume(secret, {"api-key": PKEY}, 1)
    doc = {"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": sim.url,
                          "key_file": str(secret / "api-key"), "kinds": ["turnstile"],
                          "price_per_1000": {"turnstile": 1.45}}], "cap": {"hour": 5.0, "day": 50.0}}
    config = providers_from_env({"PROVIDERS": json.dumps(doc)})
    assert config is not None and config.providers[0].key.value == PKEY
    stream = io.StringIO()
    log.setup("info", secrets=[PKEY], stream=stream)
    sim.reset()
    sim.configure(faults={"unsolvable": 0.0}, keys=[new_key], ban_after=0)
    try:
        async with CaptchaAI(config.providers[0].key, sim.url, poll_scale=SPEED, retry=RetryPolicy.scaled(SPEED)) \
                as api:
            ov = Overflow(Spend(redis, "captcha"), config, {"twocaptcha": api})
            (watcher,) = key_watchers(config, {"twocaptcha": api})
            p = config.providers[0]
            with pytest.raises(ApiError) as err:
                await ov.solve("k1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
            assert err.value.code == Code.ERROR_KEY_DOES_NOT_EXIST
            assert (await Spend(redis, "captcha").state()).hour == 0, "refused at in.php: nothing charged"
            secret_volume(secret, {"api-key": "has a space"}, 2)
            assert watcher.check() is False and watcher.check() is False
            secret_volume(secret, {"api-key": new_key}, 3)
            assert watcher.check() is True and watcher.check() is False
            paid = await ov.solve("k2", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
            assert paid.cost_micro == 1450 and paid.solution.answer
            assert (await Spend(redis, "captcha").state()).hour == 1450
    finally:
        sim.configure(keys=None, ban_after=5)
    events = [json.loads(ln) for ln in stream.getvalue().splitlines()]
    assert [(e["event"], e["holder"]) for e in events if e["event"].startswith("api_key")] == [
        ("api_key_file_invalid", "provider twocaptcha"), ("api_key_reloaded", "provider twocaptcha")]
    assert "PROVIDERS.providers[0] (twocaptcha).key_file must hold" in events[0]["reason"]
    assert PKEY not in stream.getvalue() and new_key not in stream.getvalue() and "has a space" not in stream.getvalue()


async def test_the_operator_sees_balance_spend_and_cap_from_a_running_worker(redis: Redis, redis_server: Any,
                                                                              sim: SimProc, tmp_path: Path) -> None:
    """A real worker process with PROVIDERS (the simulator process as the res.php provider, its key a mounted
    file): it polls the provider's balance into provider_balance and reads the spend windows and the cap from
    Redis; `captcha-worker stats` shows the windows against the cap and the ledger by provider and tenant, to the
    micro-unit. No provider key in the log or the CLI output."""
    spend = Spend(redis, "captcha")
    cap = providers(sim).cap_hour_micro
    assert cap == 5_000_000
    for rid, price, label in (("twocaptcha:a:0", 1450, ledger_label("twocaptcha", "turnstile", "team-a")),
                              ("twocaptcha:b:0", 2990, ledger_label("twocaptcha", "hcaptcha"))):
        ovr = Overflow(spend, providers(sim), {})
        assert (await spend.reserve(rid, price, cap=ovr.cap, ttl_s=60, label=label)).outcome == "reserved"
        assert (await spend.settle(rid, price)).outcome == "settled"
    assert (await spend.reserve("twocaptcha:c:0", 1450, cap=ovr.cap, ttl_s=600, label=LABEL)).ok  # in flight
    secret = tmp_path / "twocaptcha"
    secret.mkdir()
    secret_volume(secret, {"api-key": PKEY}, 1)
    doc = {"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": sim.url,
                          "key_file": str(secret / "api-key"), "kinds": ["turnstile", "hcaptcha"],
                          "price_per_1000": {"turnstile": 1.45, "hcaptcha": 2.99}}], "cap": {"hour": 5.0, "day": 50.0}}
    env = {"REDIS_URL": redis_server.url, "CAPTCHAAI_KEY": "k" * 32, "CAPTCHAAI_URL": sim.url,
           "CAPTCHAAI_THREADS": "2", "PROVIDERS": json.dumps(doc), "THREADSINFO_INTERVAL_SECONDS": "5"}
    sim.configure(balance=7.25, keys=None)
    with workers(1, env, tmp_path) as (w,):
        def balance() -> float | None:
            try:
                return w.metric("captcha_solver_provider_balance", provider="twocaptcha")
            except OSError:  # not listening yet
                return None

        deadline = time.monotonic() + 60
        while balance() != 7.25:
            assert time.monotonic() < deadline and w.alive(), w.logs()[-2000:]
            await asyncio.sleep(0.2)
        assert w.metric("captcha_solver_spend", window="hour") == pytest.approx(0.00589, abs=1e-12)  # 1450+2990+1450
        assert w.metric("captcha_solver_spend_cap", window="hour") == 5.0
        assert w.metric("captcha_solver_spend_cap", window="day") == 50.0
        sim.configure(balance=1.5)  # the next poll, one THREADSINFO_INTERVAL_SECONDS later, reads the new balance
        changed = time.monotonic()
        while balance() != 1.5:
            assert time.monotonic() - changed < 3 * 5, "not re-polled within 3 intervals"
            await asyncio.sleep(0.2)
        # the plan's requests (threadsinfo, its balance) under captchaai, the provider's under its name
        series = re.findall(r'^captcha_solver_api_requests_total\{([^}]*)\} (\S+)$', w.http("/metrics")[1], re.M)
        by = {(dict(re.findall(r'(\w+)="([^"]*)"', lbl))["provider"],
               dict(re.findall(r'(\w+)="([^"]*)"', lbl))["api_endpoint"]) for lbl, _ in series}
        assert ("captchaai", "res_threadsinfo") in by and ("twocaptcha", "res_getbalance") in by, by
        assert {prov for prov, _ in by} == {"captchaai", "twocaptcha"} and ("twocaptcha", "res_threadsinfo") not in by
        logs = w.logs()
    sim.configure(balance=10.0)
    assert PKEY not in logs
    out = run_cli("stats", env={"REDIS_URL": redis_server.url, "PROVIDERS": json.dumps(doc)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "spend_hour     0.005890 of 5.000000 (0.1 %)" in lines and "spend_reserved 0.001450" in lines
    assert "spend_total    provider twocaptcha: 0.004440" in lines
    assert {"spend_total    tenant team-a: 0.001450", "spend_total    tenant -: 0.002990"} <= set(lines)
    js = run_cli("stats", "--json", env={"REDIS_URL": redis_server.url})
    view = json.loads(js.stdout)["spend"]
    assert (view["hour"], view["day"], view["cap_hour"]) == ("0.005890", "0.005890", None)
    assert view["by_tenant"] == {"-": "0.002990", "team-a": "0.001450"} and view["by_provider"] == {
        "twocaptcha": "0.004440"}
    assert PKEY not in out.stdout + out.stderr + js.stdout


# -- a createTask provider: the simulator's JSON API under --profile anticaptcha (2.00 per 1,000, UNSOLVABLE charged)
AC_LABEL = "anticaptcha|turnstile"
AC_PRICE = 2000


def ac_providers(sim: SimProc, *, hour: float = 5.0, refund: bool | None = None) -> ProvidersConfig:
    entry: dict[str, Any] = {"name": "anticaptcha", "protocol": "createTask", "url": sim.url, "key": PKEY,
                             "kinds": ["turnstile"], "price_per_1000": {"turnstile": 2.0}}
    if refund is not None:
        entry["refund_unsolvable"] = refund
    pc = providers_from_env({"PROVIDERS": json.dumps({"providers": [entry], "cap": {"hour": hour, "day": 50.0}})})
    assert pc is not None
    return pc


@pytest.fixture(scope="module")
def ac_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProc]:
    with simulator(tmp_path_factory.mktemp("createtask"), "--profile", "anticaptcha", "--threads", "50",
                   "--speed", str(SPEED), "--seed", "28", "--balance", "100") as s:
        yield s


@pytest.fixture
async def ac_overflow_of(redis: Redis, ac_sim: SimProc) -> AsyncIterator[Any]:
    ac_sim.configure(faults={"unsolvable": 0.0, "slow": 0.0})
    ac_sim.reset()
    async with JsonApi(ac_providers(ac_sim).providers[0].key, ac_sim.url, poll_scale=SPEED,
                       retry=RetryPolicy.scaled(SPEED), http_timeout_s=0.5, provider="anticaptcha") as api:
        def make(**kw: Any) -> Overflow:
            return Overflow(Spend(redis, "captcha"), ac_providers(ac_sim, **kw), {"anticaptcha": api})
        yield make


async def test_a_createtask_solve_is_reserved_solved_and_charged_as_the_provider_charged(
        ac_overflow_of: Any, ac_sim: SimProc, redis: Redis) -> None:
    ov: Overflow = ac_overflow_of()
    p = ov.provider_for("turnstile")
    assert p is not None and p.protocol == "createTask" and not p.refund_unsolvable, "createTask: charged by default"
    paid = await ov.solve("j1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    assert (paid.provider, paid.cost_micro) == ("anticaptcha", AC_PRICE) and paid.solution.answer.request
    st = await Spend(redis, "captcha").state()
    ps = ac_sim.stats()
    assert (st.reserved, st.totals) == (0, {AC_LABEL: AC_PRICE})
    assert (ps["json_calls"]["createTask"], ps["charges"], ps["charged_micro"]) == (1, 1, AC_PRICE)
    assert ps["calls"]["in.php"] == 0, "the JSON API, not in.php"


async def test_createtask_solves_stop_at_the_cap_and_the_ledger_is_the_providers_charge(
        ac_overflow_of: Any, ac_sim: SimProc, redis: Redis) -> None:
    """20 concurrent solves, a cap with room for 7, a third of the provider's solves UNSOLVABLE (charged by
    Anti-Captcha, and by default here): the ledger equals the simulator's charge to the micro-unit, never above
    the cap, and a refused reservation never reaches the provider."""
    ov: Overflow = ac_overflow_of(hour=0.002 * 7)
    p = ov.provider_for("turnstile")
    assert p is not None
    ac_sim.configure(faults={"unsolvable": 0.33})
    got = await asyncio.gather(*(ov.solve(f"q{i}", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60,
                                          unsolvable_retries=1) for i in range(20)), return_exceptions=True)
    capped = [g for g in got if isinstance(g, OverCap)]
    unexpected = [g for g in got if isinstance(g, BaseException) and not isinstance(g, OverCap | TaskFailed)]
    assert not unexpected, unexpected
    st = await Spend(redis, "captcha").state()
    ps = ac_sim.stats()
    assert ps["json_calls"]["createTask"] == ps["charges"] == 7, "7 fit the cap, each charged (UNSOLVABLE too)"
    assert st.totals[AC_LABEL] == st.hour == ps["charged_micro"] == 7 * AC_PRICE and st.reserved == 0
    assert len(capped) >= 20 - 7


@pytest.mark.parametrize(("refund", "charged"), [(None, 2 * AC_PRICE), (True, 0)])
async def test_createtask_unsolvable_charged_by_default_or_refunded_when_configured(
        ac_overflow_of: Any, ac_sim: SimProc, redis: Redis, refund: bool | None, charged: int) -> None:
    ov: Overflow = ac_overflow_of(refund=refund)
    p = ov.provider_for("turnstile")
    assert p is not None
    ac_sim.configure(faults={"unsolvable": 1.0})
    with pytest.raises(TaskFailed) as err:
        await ov.solve("u2", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60, unsolvable_retries=1)
    assert err.value.code == Code.ERROR_CAPTCHA_UNSOLVABLE
    st = await Spend(redis, "captcha").state()
    assert (st.reserved, st.totals) == (0, {AC_LABEL: charged})
    assert ac_sim.stats()["charged_micro"] == 2 * AC_PRICE, "the simulator (Anti-Captcha) charged both rounds"


async def test_a_createtask_whose_reply_was_lost_is_counted_spent(ac_overflow_of: Any, ac_sim: SimProc,
                                                                  redis: Redis) -> None:
    """The simulator creates (and charges) the task, then resets the connection instead of replying (the `lost`
    fault): MaybeCharged, one createTask (never resent), its reservation settled at the price at once, so the
    ledger equals the simulator's charge to the micro-unit. The next solve, with replies arriving again, is charged
    once more."""
    ov: Overflow = ac_overflow_of()
    p = ov.provider_for("turnstile")
    assert p is not None
    ac_sim.configure(faults={"lost": 1.0})
    try:
        with pytest.raises(MaybeCharged):
            await ov.solve("m1", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    finally:
        ac_sim.configure(faults={"lost": 0.0})
    st = await Spend(redis, "captcha").state()
    ps = ac_sim.stats()
    assert (st.reserved, st.totals) == (0, {AC_LABEL: AC_PRICE})
    assert (await Spend(redis, "captcha").record("anticaptcha:m1:0") or "").startswith(f"S|{AC_PRICE}|{AC_PRICE}|")
    assert (ps["json_calls"]["createTask"], ps["faults"]["lost"], ps["charged_micro"]) == (1, 1, AC_PRICE)
    await ov.solve("m2", p, TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 60)
    st = await Spend(redis, "captcha").state()
    assert st.totals[AC_LABEL] == ac_sim.stats()["charged_micro"] == 2 * AC_PRICE


def test_ledger_labels_round_trip() -> None:
    assert parse_label(ledger_label("twocaptcha", "turnstile", "team-a")) == ("twocaptcha", "turnstile", "team-a")
    assert parse_label(ledger_label("twocaptcha", "turnstile")) == ("twocaptcha", "turnstile", "")
    assert parse_label("odd") == ("odd", "", "")


async def test_a_capsolver_dialect_provider_solves_at_the_simulator_and_skips_kinds_it_cannot_name(
        redis: Redis, ac_sim: SimProc) -> None:
    """dialect "capsolver" against the simulator's JSON API (it takes every provider's spelling): the solve is
    answered and charged; a kind CapSolver's docs name no type for (grid) is not routed to it."""
    ac_sim.configure(faults={"unsolvable": 0.0, "slow": 0.0})
    ac_sim.reset()
    entry = {"name": "capsolver", "protocol": "createTask", "url": ac_sim.url, "key": PKEY, "dialect": "capsolver",
             "kinds": ["turnstile", "grid"], "price_per_1000": {"turnstile": 2.0, "grid": 2.0}}
    pc = providers_from_env({"PROVIDERS": json.dumps({"providers": [entry], "cap": {"hour": 5.0, "day": 50.0}})})
    assert pc is not None
    async with JsonApi(pc.providers[0].key, ac_sim.url, poll_scale=SPEED, retry=RetryPolicy.scaled(SPEED),
                       http_timeout_s=0.5, dialect="capsolver", provider="capsolver") as api:
        ov = Overflow(Spend(redis, "captcha"), pc, {"capsolver": api})
        assert ov.provider_for("grid") is None
        p = ov.provider_for("turnstile")
        assert p is not None
        paid = await ov.solve("cs1", p, TURNSTILE, "turnstile", {**PARAMS, "action": "login"},
                              deadline=time.time() + 60)
    assert (paid.provider, paid.cost_micro) == ("capsolver", AC_PRICE) and paid.solution.answer.request
    st = ac_sim.stats()
    assert (st["submitted"], st["charged_micro"]) == (1, AC_PRICE)


def _api_calls(provider: str, endpoint: str) -> tuple[float, float]:
    """(api_requests_total summed over codes, api_request_duration_seconds_count) of one provider and endpoint."""
    requests = sum(REGISTRY.get_sample_value("captcha_solver_api_requests_total",
                                             {"provider": provider, "api_endpoint": endpoint, "code": code}) or 0.0
                   for code in ("OK", "OTHER", "TIMEOUT", "CONNECTION_ERROR", "HTTP_5XX"))
    timed = REGISTRY.get_sample_value("captcha_solver_api_request_duration_seconds_count",
                                      {"provider": provider, "api_endpoint": endpoint}) or 0.0
    return requests, timed


async def test_each_providers_requests_are_counted_under_its_name_never_captchaai(redis: Redis, sim: SimProc,
                                                                                  ac_sim: SimProc) -> None:
    """The pool's clients (a res.php and a createTask provider) label their requests with the provider's configured
    name: the dashboard's and the alerts' provider="captchaai" (the plan) never count an overflow provider's."""
    doc = {"providers": [
        {"name": "twocaptcha", "protocol": "res.php", "url": sim.url, "key": PKEY, "kinds": ["turnstile"],
         "price_per_1000": {"turnstile": 1.45}},
        {"name": "anticaptcha", "protocol": "createTask", "url": ac_sim.url, "key": PKEY, "kinds": ["turnstile"],
         "price_per_1000": {"turnstile": 2.0}}], "cap": {"hour": 5.0, "day": 50.0}}
    cfg = WorkerConfig.from_env({"CAPTCHAAI_KEY": "k" * 32, "CAPTCHAAI_THREADS": "2", "REDIS_URL": "redis://x",
                                 "PROVIDERS": json.dumps(doc)})
    watched = [("twocaptcha", "res_getbalance"), ("anticaptcha", "get_balance"), ("captchaai", "res_getbalance"),
               ("captchaai", "get_balance"), ("twocaptcha", "get_balance"), ("anticaptcha", "res_getbalance")]
    before = {w: _api_calls(*w) for w in watched}
    async with ProviderPool(cfg, redis) as pool:
        await pool.poll_balances()
        after = {w: _api_calls(*w) for w in watched}
    delta = {w: (after[w][0] - before[w][0], after[w][1] - before[w][1]) for w in watched}
    for w in (("twocaptcha", "res_getbalance"), ("anticaptcha", "get_balance")):
        assert delta[w][0] >= 1 and delta[w][0] == delta[w][1], (w, delta[w])  # counted and timed, once each
    assert all(delta[w] == (0, 0) for w in watched[2:]), delta
