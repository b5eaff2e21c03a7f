"""Paid solves under the spend cap (captcha_worker.overflow): the real simulator process as a res.php provider, a
real redis-server for the cap. Exact figures: the ledger equals the provider's submissions times the price, the cap
refuses before anything reaches the provider, refunded UNSOLVABLE rounds cost nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from captcha_worker import methods
from captcha_worker.captchaai import CaptchaAI, RetryPolicy, TaskFailed
from captcha_worker.codes import Code
from captcha_worker.config import ProvidersConfig, providers_from_env
from captcha_worker.overflow import OverCap, Overflow
from captcha_worker.spend import Spend
from tests.procs import SimProc, simulator

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
    return REGISTRY.get_sample_value("captcha_solver_cost_total", {"provider": "twocaptcha", "kind": "turnstile"}) \
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
                         retry=RetryPolicy.scaled(SPEED)) as api:
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

