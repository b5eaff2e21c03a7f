"""Workers route tasks to an overflow provider (issue 27): real redis-server, real worker processes, two real
simulator processes (one as CaptchaAI, thread-billed; one as a per-solve provider with ``--profile 2captcha``).

* a kind CaptchaAI does not solve (hCaptcha) goes straight to the provider that takes it, without a plan thread:
  with a plan of 1 thread, plan tasks submitted after slow provider solves finish before them; no budget unit of a
  provider's task is ever seen in the budget while the provider solves it;
* the ledger equals the provider's own charge to the micro-unit, and every paid result says its provider and cost;
* with no provider configured the same task is the UNSUPPORTED_METHOD error it always was, and CaptchaAI never
  sees it;
* the spend cap: room for 3 solves, 6 tasks -> 3 solved, 3 answered expired at their deadline, the provider saw 3.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, Expired, Failed, Outcome, Solved
from captcha_worker.queue import Keys
from captcha_worker.spend import Spend
from tests.procs import RedisServer, SimProc, WorkerProc, simulator, workers

pytestmark = pytest.mark.integration

KEY = "0123456789abcdef0123456789abcdef"
PKEY = "p2captcha0123456789abcdef0123456"
SPEED = 20.0
HCAPTCHA = {"sitekey": "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2", "pageurl": "https://example.com/signup"}
TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}
KEYS = Keys("captcha")


def providers(sim: SimProc, *, hour: float = 5.0) -> str:
    return json.dumps({"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": sim.url, "key": PKEY,
                                      "kinds": ["hcaptcha"], "price_per_1000": {"hcaptcha": 1.45}}],
                       "cap": {"hour": hour, "day": 50.0}})


def env_of(redis_url: str, plan: SimProc, **extra: str) -> dict[str, str]:
    env = {"REDIS_URL": redis_url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": plan.url, "CAPTCHAAI_THREADS": "1",
           "WORKER_CONCURRENCY": "10", "API_TIME_SCALE": str(SPEED), "LOG_LEVEL": "info", "DRAIN_GRACE_SECONDS": "5"}
    env.update(extra)
    return env


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[tuple[SimProc, SimProc]]:
    (tmp_path / "plan").mkdir()
    (tmp_path / "paid").mkdir()
    with simulator(tmp_path / "plan", "--threads", "1", "--speed", str(SPEED), "--seed", "1") as plan, \
            simulator(tmp_path / "paid", "--profile", "2captcha", "--threads", "50", "--speed", str(SPEED),
                      "--seed", "2", "--balance", "10") as paid:
        yield plan, paid


@pytest.fixture
async def producer(redis_server: RedisServer, redis: Redis) -> AsyncIterator[CaptchaQueue]:
    async with CaptchaQueue(redis, overflow_kinds={"hcaptcha"}) as q:
        yield q


async def outcomes(q: CaptchaQueue, ids: list[str], timeout: float = 60) -> dict[str, Outcome]:
    return dict(zip(ids, await asyncio.gather(*(q.result(i, timeout=timeout) for i in ids)), strict=True))


def no_crash(procs: list[WorkerProc]) -> None:
    for p in procs:
        assert p.alive(), p.logs()[-3000:]
        assert not p.events("loop_crashed") and not p.events("job_crashed"), p.logs()[-3000:]


async def test_a_kind_captchaai_lacks_goes_to_the_provider_without_a_plan_thread(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, sims: tuple[SimProc, SimProc],
        tmp_path: Path) -> None:
    plan, paid = sims
    # provider solves take ~6 s (real), the plan's ~0.3 s: if a provider task held the plan's one thread, every
    # turnstile task would wait for the hCaptcha ones ahead of it
    paid.configure(latency={"hcaptcha": "100:0"})
    plan.configure(latency={"turnstile": "4:0"})
    paid_latency_s = 100.0 / SPEED
    with workers(2, env_of(redis_server.url, plan, PROVIDERS=providers(paid)), tmp_path) as procs:
        await asyncio.sleep(0.5)
        h_ids = [await producer.submit("hcaptcha", HCAPTCHA) for _ in range(5)]
        t_ids = [await producer.submit("turnstile", TURNSTILE) for _ in range(5)]
        seen_units: set[str] = set()
        h_units = {f"t:{i}" for i in h_ids}

        async def sample() -> None:
            while True:
                seen_units.update(u.decode() for u in await redis.zrange(KEYS.budget, 0, -1))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        t_out = await outcomes(producer, t_ids)
        h_out = await outcomes(producer, h_ids)
        sampler.cancel()
        no_crash(procs)
    assert all(isinstance(o, Solved) for o in t_out.values()), t_out
    assert all(isinstance(o, Solved) for o in h_out.values()), h_out
    hs = [o for o in h_out.values() if isinstance(o, Solved)]
    ts = [o for o in t_out.values() if isinstance(o, Solved)]
    h_first_done = min(o.timings.finished_at or 0 for o in hs)
    t_last_claimed = max(o.timings.claimed_at or 0 for o in ts)
    assert t_last_claimed < h_first_done, "a plan task waited for the plan's one thread behind a provider's solve"
    h_span = max(o.timings.finished_at or 0 for o in hs) - min(o.timings.claimed_at or 0 for o in hs)
    assert h_span < 2 * paid_latency_s, f"the provider's solves ran one after another ({h_span:.1f} s)"
    assert not seen_units & h_units, "a provider's task held a plan-thread unit while it was solved"
    assert {(o.provider, o.cost, o.captcha_id) for o in h_out.values() if isinstance(o, Solved)} == \
        {("twocaptcha", "0.00145", None)}
    assert {o.provider for o in t_out.values() if isinstance(o, Solved)} == {None}
    ps, pls = paid.stats(), plan.stats()
    assert (ps["submitted"], ps["charges"], ps["charged_micro"]) == (5, 5, 5 * 1450)
    assert pls["submitted"] == 5, "CaptchaAI saw only its own kind"
    st = await Spend(redis, "captcha").state()
    assert st.totals == {"twocaptcha|hcaptcha": ps["charged_micro"]} and st.reserved == 0
    assert await redis.zcard(KEYS.budget) == 0


async def test_without_a_provider_the_kind_is_unsupported_as_before(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, sims: tuple[SimProc, SimProc],
        tmp_path: Path) -> None:
    plan, _ = sims
    async with CaptchaQueue(redis) as plain:
        with pytest.raises(ValueError, match="hCaptcha is not solved by CaptchaAI") as err:
            await plain.submit("hcaptcha", HCAPTCHA)
        assert getattr(err.value, "code", None) == "UNSUPPORTED_METHOD"
    with workers(1, env_of(redis_server.url, plan), tmp_path) as procs:
        tid = await producer.submit("hcaptcha", HCAPTCHA)  # a producer that believes a provider takes it
        out = await producer.result(tid, timeout=30)
        no_crash(procs)
    assert isinstance(out, Failed) and out.code == "UNSUPPORTED_METHOD", out
    assert out.text == "hCaptcha is not solved by CaptchaAI", "the same error as without overflow"
    assert plan.stats()["submitted"] == 0


async def test_the_spend_cap_stops_paid_solves_before_the_provider(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, sims: tuple[SimProc, SimProc],
        tmp_path: Path) -> None:
    plan, paid = sims
    with workers(2, env_of(redis_server.url, plan, PROVIDERS=providers(paid, hour=0.00145 * 3)), tmp_path) as procs:
        ids = [await producer.submit("hcaptcha", HCAPTCHA, deadline=20) for _ in range(6)]
        out = await outcomes(producer, ids)
        no_crash(procs)
    solved = [o for o in out.values() if isinstance(o, Solved)]
    expired = [o for o in out.values() if isinstance(o, Expired)]
    assert (len(solved), len(expired)) == (3, 3), out
    ps = paid.stats()
    assert (ps["submitted"], ps["charged_micro"]) == (3, 3 * 1450)
    st = await Spend(redis, "captcha").state()
    assert st.hour == st.totals["twocaptcha|hcaptcha"] == 3 * 1450
