"""Workers route tasks to an overflow provider (issue 27): real redis-server, real worker processes, two real
simulator processes (one as CaptchaAI, thread-billed; one as a per-solve provider with ``--profile 2captcha``).

* a kind CaptchaAI does not solve (hCaptcha) goes straight to the provider that takes it, without a plan thread:
  with a plan of 1 thread, plan tasks submitted after slow provider solves finish before them; no budget unit of a
  provider's task is ever seen in the budget while the provider solves it;
* the ledger equals the provider's own charge to the micro-unit, and every paid result says its provider and cost;
* with no provider configured the same task is the UNSUPPORTED_METHOD error it always was, and CaptchaAI never
  sees it;
* the spend cap: room for 3 solves, 6 tasks -> 3 solved, 3 answered expired at their deadline, the provider saw 3;
* a ``createTask`` provider (the simulator's JSON API, ``--profile anticaptcha``: UNSOLVABLE charged) takes both the
  kind CaptchaAI lacks and, with CaptchaAI refusing the workers' key (its breaker open), every other task, under a
  cap with room for 12 of 20: the spend never above the cap at any 50 ms sample, the ledger equal to the
  simulator's own charge to the micro-unit, and the provider's balance (``getBalance``) on the workers' metrics;
* a provider losing every ``createTask`` reply while CaptchaAI is out: each attempt charged, MAX_ATTEMPTS of them;
* a paid solve that times out at the provider is answered SOLVE_TIMEOUT, never submitted again;
* a task whose reservation ids at the provider are all taken (submitted there that often) is dead-lettered
  MAX_ATTEMPTS_EXCEEDED with that reason at once, not held until its deadline as if the spend cap were reached.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, Expired, Failed, Outcome, Solved
from captcha_worker.queue import Keys
from captcha_worker.spend import HOUR_S, Cap, Spend, to_micro
from tests.helpers import wait_until
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


AC_PRICE = 2000  # micro per solve: the anticaptcha profile's 2.00 per 1,000
OTHER_KEY = "ffffffffffffffffffffffffffffffff"  # the only key the CaptchaAI simulator takes: the workers' is refused


def createtask_providers(sim: SimProc, *, hour: float) -> str:
    return json.dumps({"providers": [{"name": "anticaptcha", "protocol": "createTask", "url": sim.url, "key": PKEY,
                                      "kinds": ["hcaptcha", "turnstile"],
                                      "price_per_1000": {"hcaptcha": 2.0, "turnstile": 2.0}}],
                       "cap": {"hour": hour, "day": 50.0}})


async def _past_an_hours_start(redis: Redis, margin_s: float = 60.0) -> None:
    """The cap's windows are clock hours of Redis' TIME: a run across an hour's start would have two windows'
    room. Wait for the next hour when this one ends within `margin_s` (the run takes ~25 s)."""
    now, _ = await redis.time()
    left = HOUR_S - now % HOUR_S
    if left < margin_s:
        await asyncio.sleep(left + 1)


async def test_a_createtask_provider_takes_the_overflow_under_the_cap(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, tmp_path: Path) -> None:
    (tmp_path / "plan").mkdir()
    (tmp_path / "paid").mkdir()
    cap_solves = 12
    cap_micro = AC_PRICE * cap_solves
    with simulator(tmp_path / "plan", "--threads", "1", "--speed", str(SPEED), "--seed", "5", "--keys", OTHER_KEY,
                   "--ban-after", "0") as plan, \
            simulator(tmp_path / "paid", "--profile", "anticaptcha", "--threads", "50", "--speed", str(SPEED),
                      "--seed", "6", "--balance", "10", "--fault", "unsolvable=0.2") as paid:
        env = env_of(redis_server.url, plan, PROVIDERS=createtask_providers(paid, hour=cap_micro / 1_000_000),
                     THREADSINFO_INTERVAL_SECONDS="5", HTTP_TIMEOUT_SECONDS="2")
        with workers(2, env, tmp_path) as procs:
            await wait_until(lambda: _breakers_open(procs), 30, "every worker's breaker open (CaptchaAI: no plan)")
            await _past_an_hours_start(redis)
            spend, samples, sampling = Spend(redis, "captcha"), [], True

            async def sample() -> None:
                while sampling:
                    samples.append((await spend.state()).hour)
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            ids = [await producer.submit("hcaptcha", HCAPTCHA, deadline=15) for _ in range(10)]
            ids += [await producer.submit("turnstile", TURNSTILE, deadline=15) for _ in range(10)]
            out = await outcomes(producer, ids)
            sampling = False
            await sampler
            st = await spend.state()
            ps = paid.stats()

            def balance_read() -> bool:
                return all(w.metric("captcha_solver_provider_balance", provider="anticaptcha")
                           == ps["balance_micro"] / 1_000_000 for w in procs)

            waited = time.monotonic()
            await wait_until(balance_read, 3 * 5, "each worker read the provider's balance (getBalance) again")
            balance_after_s = time.monotonic() - waited
            no_crash(procs)
        assert plan.stats()["submitted"] == 0, "CaptchaAI refused the key: it solved nothing"
    solved = [o for o in out.values() if isinstance(o, Solved)]
    expired = [o for o in out.values() if isinstance(o, Expired)]
    failed = [o for o in out.values() if isinstance(o, Failed)]
    assert len(solved) + len(expired) + len(failed) == len(ids), out
    assert all(f.code == "ERROR_CAPTCHA_UNSOLVABLE" for f in failed), failed
    assert {o.provider for o in solved} == {"anticaptcha"}
    ledger = sum(st.totals.values())
    print(f"createtask overflow: solved {len(solved)} expired {len(expired)} unsolvable {len(failed)}; "
          f"provider charges {ps['charges']} ({ps['charged_micro']} micro, {ps['failed']} UNSOLVABLE); "
          f"ledger {ledger} micro; cap {cap_micro}; max sample {max(samples)} of {len(samples)}; "
          f"balance read {balance_after_s:.1f} s after")
    assert samples and max(samples) <= cap_micro, f"spend {max(samples)} above the cap {cap_micro}"
    assert ledger == ps["charged_micro"] == AC_PRICE * ps["charges"], "the ledger is the provider's own charge"
    assert ps["charges"] == cap_solves and ledger == cap_micro, "the cap's room used to the last solve, no more"
    assert st.reserved == 0
    assert sum(to_micro(o.cost or "0") for o in solved) + AC_PRICE * (ps["charges"] - len(solved)) == ledger, \
        "every charge is a solved task's cost or a charged UNSOLVABLE round"


async def _breakers_open(procs: list[WorkerProc]) -> bool:
    return all(any(e["state"] == "open" for e in p.events("captchaai_breaker")) for p in procs)


async def test_a_maybe_charged_attempt_counts_while_captchaai_is_out(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, tmp_path: Path) -> None:
    """CaptchaAI out (its breaker open) and a createTask provider that creates every task and loses the reply
    (``--fault lost=1``): each attempt is MaybeCharged, settled at its price. Such an attempt counts towards
    MAX_ATTEMPTS even while the breaker is open (an outage is otherwise no failure of the task's), so the task is
    dead-lettered after 3 charges instead of being resent, charged again each time, until its deadline."""
    (tmp_path / "plan").mkdir()
    (tmp_path / "paid").mkdir()
    with simulator(tmp_path / "plan", "--threads", "1", "--speed", str(SPEED), "--seed", "7", "--keys", OTHER_KEY,
                   "--ban-after", "0") as plan, \
            simulator(tmp_path / "paid", "--profile", "anticaptcha", "--threads", "50", "--speed", str(SPEED),
                      "--seed", "8", "--balance", "10", "--fault", "lost=1") as paid:
        env = env_of(redis_server.url, plan, PROVIDERS=createtask_providers(paid, hour=5.0), MAX_ATTEMPTS="3",
                     HTTP_TIMEOUT_SECONDS="2")
        with workers(1, env, tmp_path) as procs:
            await wait_until(lambda: _breakers_open(procs), 30, "the worker's breaker open (CaptchaAI: no plan)")
            await _past_an_hours_start(redis)
            tid = await producer.submit("turnstile", TURNSTILE, deadline=30)
            out = await producer.result(tid, timeout=40)
            st = await Spend(redis, "captcha").state()
            no_crash(procs)
        ps = paid.stats()
    print(f"maybe charged while CaptchaAI is out: {out}; provider createTask charges {ps['charges']}; "
          f"ledger {st.totals}")
    assert isinstance(out, Failed) and out.code == "MAX_ATTEMPTS_EXCEEDED", out
    assert ps["charges"] == 3, "one charged createTask per attempt, MAX_ATTEMPTS of them"
    assert st.totals == {"anticaptcha|turnstile": 3 * AC_PRICE} and st.reserved == 0, "each settled at its price"


async def test_a_paid_solve_that_times_out_at_the_provider_is_not_resubmitted(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, sims: tuple[SimProc, SimProc],
        tmp_path: Path) -> None:
    """A task without a deadline that the provider takes and never answers within SOLVE_TIMEOUT_SECONDS: its
    reservation is left to expire into a charge (the provider may bill it), and the task is answered SOLVE_TIMEOUT
    as a CaptchaAI solve that timed out is. It is not put back as if it had never got a thread (the job's own
    polls are 0 for a paid solve): that resubmitted it, a charge each time, until its reservation ids ran out."""
    plan, paid = sims
    paid.configure(latency={"hcaptcha": "100000:0"})  # taken, never answered in time
    with workers(1, env_of(redis_server.url, plan, PROVIDERS=providers(paid), SOLVE_TIMEOUT_SECONDS="3"),
                 tmp_path) as procs:
        await _past_an_hours_start(redis)
        tid = await producer.submit("hcaptcha", HCAPTCHA)
        out = await producer.result(tid, timeout=30)
        st = await Spend(redis, "captcha").state()
        no_crash(procs)
    ps = paid.stats()
    print(f"paid solve timed out: {out}; provider submissions {ps['submitted']}; spend hour {st.hour} "
          f"(reserved {st.reserved})")
    assert isinstance(out, Failed) and out.code == "SOLVE_TIMEOUT", out
    assert ps["submitted"] == 1, "the task was submitted again after the provider had taken it"
    assert st.hour == 1450, "the one submission counted at its price (reserved until it expires into a charge)"


async def test_a_task_whose_reservation_ids_are_used_up_is_dead_lettered_not_blamed_on_the_cap(
        redis_server: RedisServer, redis: Redis, producer: CaptchaQueue, sims: tuple[SimProc, SimProc],
        tmp_path: Path) -> None:
    """The task's 8 reservation ids at the provider exist (8 earlier submissions, e.g. a task resumed that often):
    the worker answers MAX_ATTEMPTS_EXCEEDED and dead-letters it, naming the used submissions, without sending it
    to the provider, instead of waiting for a cap that has room and answering "spend cap reached"."""
    plan, paid = sims
    tid = await producer.submit("hcaptcha", HCAPTCHA, deadline=15)  # before any worker: its ids are taken first
    spend = Spend(redis, "captcha")
    for i in range(8):
        assert (await spend.reserve(f"twocaptcha:{tid}:{i}", 1450, cap=spend_cap(), ttl_s=120,
                                    label="twocaptcha|hcaptcha")).ok
    with workers(1, env_of(redis_server.url, plan, PROVIDERS=providers(paid)), tmp_path) as procs:
        out = await producer.result(tid, timeout=30)
        dead = [json.loads(d) for d in await redis.lrange(KEYS.dead, 0, -1)]
        no_crash(procs)
    print(f"reservation ids used up: {out}; dead letters {[(d.get('code'), d.get('reason')) for d in dead]}")
    assert isinstance(out, Failed) and out.code == "MAX_ATTEMPTS_EXCEEDED", out
    assert out.text == "twocaptcha: 8 paid submissions of this task reserved already; none more is made"
    assert "spend cap" not in (out.text or "")
    assert [(d.get("id"), d.get("code")) for d in dead] == [(tid, "MAX_ATTEMPTS_EXCEEDED")], dead
    assert paid.stats()["submitted"] == 0
    assert await spend.record(f"twocaptcha:{tid}:8") is None, "no ninth reservation"


def spend_cap() -> Cap:
    return Cap(hour=to_micro("5.0"), day=to_micro("50.0"))
