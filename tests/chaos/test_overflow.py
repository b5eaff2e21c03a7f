"""Overflow to a per-solve provider under the spend cap (issue 27), real processes only: a redis-server of the
test's own, worker processes, the simulator as CaptchaAI (thread-billed) and a second simulator
``--profile 2captcha`` as the provider.

* CaptchaAI SIGSTOPped 30 s under a steady load: the workers' breakers open, tasks flow to the provider, and back
  to CaptchaAI after SIGCONT; 0 lost, 0 delivered twice; the ledger equals the provider's own charge.
* A burst of 3x the plan while CaptchaAI is out, under a cap with room for a third of it, 3 workers SIGKILLed
  mid-burst: the spend (this hour's window, charged + reserved) is never above the cap at any 100 ms sample; every
  task is answered once; the ledger is the provider's charge plus at most the killed workers' expired
  reservations that never reached it. Once with a ``res.php`` provider (``--profile 2captcha``), once with a
  ``createTask`` one (``--profile anticaptcha``, its JSON API).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from captcha_worker.queue import RedisQueue
from captcha_worker.spend import Spend
from captcha_worker.task import Result, Status
from tests.helpers import task_body, wait_until
from tests.procs import RedisServer, SimProc, WorkerProc, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, replies, worker_env

PKEY = "p2captcha0123456789abcdef0123456"
OTHER_KEY = "ffffffffffffffffffffffffffffffff"  # the only key the CaptchaAI simulator takes in the burst
PRICE = 1450  # micro per Turnstile solve at the provider (1.45 per 1,000)
#: the workers' HTTP timeouts here: a stopped CaptchaAI is noticed within a few of them
FAST_HTTP = {"HTTP_TIMEOUT_SECONDS": "2", "HTTP_POLL_TIMEOUT_SECONDS": "1"}


#: the burst's rows (docs/reliability.md): at the res.php provider, at the createTask one
ROWS = ("burst-3x-under-cap-kills", "burst-3x-under-cap-kills-createtask")
#: protocol -> (provider name, the simulator's profile)
PROVIDERS = {"res.php": ("twocaptcha", "2captcha"), "createTask": ("anticaptcha", "anticaptcha")}


def providers(sim: SimProc, *, hour: float, concurrency: int = 20, protocol: str = "res.php") -> str:
    return json.dumps({"providers": [{"name": PROVIDERS[protocol][0], "protocol": protocol, "url": sim.url,
                                      "key": PKEY, "kinds": ["turnstile"], "price_per_1000": {"turnstile": 1.45},
                                      "concurrency": concurrency}],
                       "cap": {"hour": hour, "day": 100.0}})


async def results(admin: Redis, ids: list[str]) -> dict[str, Result]:
    raw = await admin.mget([KEYS.result(i) for i in ids])
    return {i: Result.from_json(r) for i, r in zip(ids, raw, strict=True) if r is not None}


async def test_captchaai_stopped_30s_tasks_flow_to_the_provider_and_back(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    (tmp_path / "plan").mkdir()
    (tmp_path / "paid").mkdir()
    q = RedisQueue(admin, "captcha")
    with simulator(tmp_path / "plan", "--threads", "20", "--speed", SPEED, "--seed", "31") as plan, \
            simulator(tmp_path / "paid", "--profile", "2captcha", "--threads", "200", "--speed", SPEED,
                      "--seed", "32", "--balance", "100") as paid:
        env = worker_env(rs.url, plan.url, LEASE_SECONDS="10", PROVIDERS=providers(paid, hour=50.0), **FAST_HTTP)
        with workers(2, env, tmp_path) as procs:
            await asyncio.sleep(1.0)
            submitted: dict[str, float] = {}
            t_stop = t_cont = 0.0
            rate, started = 8.0, time.time()  # tasks per second, for 10 s + 30 s stopped + 15 s
            n = 0
            while time.time() - started < 55:
                elapsed = time.time() - started
                if not t_stop and elapsed >= 10:
                    plan.proc.send_signal(signal.SIGSTOP)
                    t_stop = time.time()
                if t_stop and not t_cont and time.time() - t_stop >= 30:
                    plan.proc.send_signal(signal.SIGCONT)
                    t_cont = time.time()
                while n < elapsed * rate:
                    tid = f"s{n}"
                    await q.push([(tid, task_body(tid, "p1"))], ttl=3600)
                    submitted[tid] = time.time()
                    n += 1
                await asyncio.sleep(0.05)
            ids = list(submitted)

            async def all_answered() -> bool:
                return len(await results(admin, ids)) == len(ids)

            await wait_until(all_answered, 90, "every task answered")
            got = await results(admin, ids)
            counts = await replies(admin, "p1")
            no_crash = crashes(procs)
            breaker_events = [(p.name, e["state"]) for p in procs for e in p.events("captchaai_breaker")]
        await asyncio.sleep(0.5)
        ps = paid.stats()
    st = await Spend(admin, "captcha").state()
    solved = [r for r in got.values() if r.status is Status.SOLVED]
    by_provider = {i: (got[i].provider or "captchaai") for i in ids if i in got}
    paid_claims = sorted(got[i].timings.claimed_at or 0 for i in ids if by_provider.get(i) == "twocaptcha")
    first_paid = paid_claims[0] - t_stop if paid_claims else None
    during = [i for i in ids if t_stop + 5 <= submitted[i] <= t_cont]
    after = [i for i in ids if submitted[i] >= t_cont + 5]
    back = sorted(got[i].timings.claimed_at or 0 for i in ids
                  if by_provider.get(i) == "captchaai" and (got[i].timings.claimed_at or 0) > t_cont)
    first_back = back[0] - t_cont if back else None
    lost = len(ids) - len(got)
    twice = sum(1 for c in counts.values() if c > 1)
    Row("captchaai-stopped-overflow", len(ids), len(solved), len(ids) - len(solved) - lost, lost, twice,
        ps["max_in_flight"], 20,
        {"paid": sum(1 for p in by_provider.values() if p == "twocaptcha"),
         "first_paid_claim_after_stop_s": None if first_paid is None else round(first_paid, 2),
         "first_captchaai_claim_after_cont_s": None if first_back is None else round(first_back, 2),
         "during_stop_paid": sum(1 for i in during if by_provider.get(i) == "twocaptcha"), "during_stop": len(during),
         "after_captchaai": sum(1 for i in after if by_provider.get(i) == "captchaai"), "after": len(after),
         "ledger_micro": st.totals.get("twocaptcha|turnstile", 0), "provider_charged_micro": ps["charged_micro"],
         "unsolved": sorted(f"{r.code} {r.text} {r.provider}" for r in got.values() if r.status is not Status.SOLVED),
         "breaker_changes": len(breaker_events)}).record()
    assert lost == 0 and twice == 0 and len(solved) == len(ids) and no_crash == 0
    assert all(by_provider[i] == "twocaptcha" for i in during), "a task waited for a stopped CaptchaAI"
    assert all(by_provider[i] == "captchaai" for i in after), "tasks did not go back to CaptchaAI"
    assert st.totals.get("twocaptcha|turnstile", 0) == ps["charged_micro"] == PRICE * ps["charges"]
    assert st.reserved == 0


@pytest.mark.parametrize("protocol", ["res.php", "createTask"])
async def test_a_burst_under_the_cap_with_workers_killed_never_spends_past_it(
        rs: RedisServer, admin: Redis, tmp_path: Path, protocol: str) -> None:
    name, profile = PROVIDERS[protocol]
    (tmp_path / "plan").mkdir()
    (tmp_path / "paid").mkdir()
    q = RedisQueue(admin, "captcha")
    spend = Spend(admin, "captcha")
    plan_threads, burst = 20, 60  # 3x the plan
    cap_solves = burst // 3
    cap_micro = PRICE * cap_solves
    # CaptchaAI refuses the workers' key (ERROR_KEY_DOES_NOT_EXIST: "no plan"): FATAL, the breaker open at once
    with simulator(tmp_path / "plan", "--threads", str(plan_threads), "--speed", SPEED, "--seed", "33",
                   "--keys", OTHER_KEY, "--ban-after", "0") as plan, \
            simulator(tmp_path / "paid", "--profile", profile, "--threads", "200", "--speed", SPEED,
                      "--seed", "34", "--balance", "100", "--latency", "turnstile=40:0",
                      "--price", "turnstile=1.45") as paid:
        env = worker_env(rs.url, plan.url, LEASE_SECONDS="3", CAPTCHAAI_THREADS=str(plan_threads),
                         PROVIDERS=providers(paid, hour=cap_micro / 1_000_000, concurrency=4, protocol=protocol),
                         **FAST_HTTP)
        with workers(5, env, tmp_path) as procs:
            samples: list[int] = []
            sampling = True

            async def sample() -> None:
                while sampling:
                    samples.append((await spend.state()).hour)
                    await asyncio.sleep(0.1)

            sampler = asyncio.create_task(sample())
            # the breakers open on the plan loop's first threadsinfo; then the burst comes
            await wait_until(lambda: _all_open(procs), 30, "every worker's breaker open")
            deadline = time.time() + 25
            ids = [f"b{i}" for i in range(burst)]
            bodies = [(i, json.dumps({**json.loads(task_body(i, "p2")), "deadline": deadline})) for i in ids]
            await q.push(bodies, ttl=3600)
            await wait_until(lambda: _paid_at_least(paid, cap_solves // 2), 30, "the provider solving")
            for p in procs[:3]:
                p.signal(signal.SIGKILL)
            killed_at = time.time()

            async def all_answered() -> bool:
                return len(await results(admin, ids)) == len(ids)

            await wait_until(all_answered, 90, "every task answered (solved or expired)")
            # the killed workers' reservations expire into charges (solve window + margin, scaled)
            await wait_until(lambda: _none_reserved(spend), 60, "no reservation outstanding")
            sampling = False
            await sampler
            got = await results(admin, ids)
            counts = await replies(admin, "p2")
            no_crash = crashes(procs[3:])
        ps = paid.stats()
        assert plan.stats()["submitted"] == 0
    st = await spend.state()
    solved = [r for r in got.values() if r.status is Status.SOLVED]
    expired = [r for r in got.values() if r.status is Status.EXPIRED]
    ledger = st.totals.get(f"{name}|turnstile", 0)
    expired_reservations = await _expired_records(admin)
    Row(ROWS[protocol == "createTask"], burst, len(solved), len(got) - len(solved) - len(expired), burst - len(got),
        sum(1 for c in counts.values() if c > 1), ps["max_in_flight"], plan_threads,
        {"cap_micro": cap_micro, "max_sample_micro": max(samples), "samples": len(samples),
         "expired_answers": len(expired), "ledger_micro": ledger, "provider_charged_micro": ps["charged_micro"],
         "provider_charges": ps["charges"], "expired_reservations": expired_reservations,
         "killed_at_s": round(killed_at - deadline + 25, 2)}).record()
    assert samples and max(samples) <= cap_micro, f"spend {max(samples)} above the cap {cap_micro}"
    assert len(got) == burst and all(c == 1 for c in counts.values()), "every task answered once"
    assert len(solved) + len(expired) == burst, "solved, or expired at its deadline waiting for the cap"
    assert ps["charged_micro"] <= cap_micro and ledger <= cap_micro
    assert ps["charged_micro"] <= ledger <= ps["charged_micro"] + PRICE * expired_reservations, \
        "the ledger is the provider's charge, plus only killed workers' reservations that never reached it"
    assert no_crash == 0


async def _all_open(procs: list[WorkerProc]) -> bool:
    return all(any(e["state"] == "open" for e in p.events("captchaai_breaker")) for p in procs)


async def _paid_at_least(sim: SimProc, n: int) -> bool:
    return int(sim.stats()["submitted"]) >= n


async def _none_reserved(spend: Spend) -> bool:
    return (await spend.state()).reserved == 0


async def _expired_records(admin: Redis) -> int:
    recs: dict[Any, Any] = await admin.hgetall(KEYS.spend_records)
    return sum(1 for v in recs.values() if str(v).startswith("E|"))
