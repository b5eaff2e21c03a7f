"""Worker processes (`captcha-worker run`) against a real redis-server and the simulator: the budget across
processes, health and readiness endpoints. (Kills, drains, Redis outages and hostile input: tests/chaos/.)
The figures each test measures are printed (run with -s to see them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.queue import Keys, RedisQueue
from captcha_worker.simulator import Latency, OverCap, SimConfig, SimulatorServer
from tests.helpers import TURNSTILE, task_body, wait_until, worker_env
from tests.procs import workers

LEASE_S = 6  # the lease test's lease (see its docstring)
KEYS = Keys("captcha")


def env_for(redis_url: str, sim: SimulatorServer, **extra: str) -> dict[str, str]:
    """The harness's worker environment with this file's plan (30 threads) against the in-process simulator."""
    return worker_env(redis_url, sim.url, **{"CAPTCHAAI_THREADS": "30", **extra})


async def test_budget_three_workers_never_exceed_the_plan_threads(
        redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    """30 slots, a budget of 12 and a plan of exactly 12 threads that refuses the 13th (ERROR_ZERO_BALANCE):
    one solve over the budget, anywhere, is an over-cap rejection."""
    async with SimulatorServer(SimConfig(threads=12, over_cap=OverCap.ZERO_BALANCE, speed=20, seed=5)) as sim:
        env = env_for(redis_server.url, sim, CAPTCHAAI_THREADS="12", WORKER_CONCURRENCY="10")
        async with CaptchaQueue(redis) as q:
            ids = await q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(200)])
            with workers(3, env, tmp_path):
                outcomes = [o async for o in q.as_completed(ids, timeout=120)]
        stats = sim.stats()
    print(f"\nbudget: 3 workers x 10 slots, CAPTCHAAI_THREADS=12 -> simulator max in flight {stats.max_in_flight}, "
          f"over-cap rejections {stats.over_cap_rejections}")
    assert all(isinstance(o, Solved) for o in outcomes)
    assert stats.max_in_flight <= 12 and stats.over_cap_rejections == 0
    assert stats.max_in_flight >= 10, "the budget must still be used"


async def test_leases_are_renewed_through_solves_much_longer_than_the_lease(
        redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    """No faults, solves of ~15 s against LEASE_SECONDS=6: the heartbeat keeps every lease alive, so no reaper
    (two workers, each running one) takes a task back, nothing is claimed twice or submitted to the API twice.
    The heartbeat renews every lease/3 = 2 s, so a lease is lost only to a stall of the worker's loop longer than
    lease - period = 4 s (a 3 s lease allowed 2 s, which a loaded 2-core machine reaches)."""
    latency = {"turnstile": Latency(2.5 * LEASE_S, 0.3)}
    async with SimulatorServer(SimConfig(threads=20, latency=latency, seed=3)) as sim:
        env = env_for(redis_server.url, sim, API_TIME_SCALE="1", LEASE_SECONDS=str(LEASE_S),
                         WORKER_CONCURRENCY="4", CAPTCHAAI_THREADS="20")
        async with CaptchaQueue(redis) as q:
            ids = await q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(6)])
            with workers(2, env, tmp_path) as procs:
                outcomes = [o async for o in q.as_completed(ids, timeout=90)]
                logs = "".join(p.logs() for p in procs)
        stats = sim.stats()
    solved = [o for o in outcomes if isinstance(o, Solved)]
    assert len(solved) == len(ids), outcomes
    assert min(o.solving_s or 0.0 for o in solved) > LEASE_S * 2, "each solve outlives its lease several times"
    assert all(o.attempts == 1 for o in solved), [o.attempts for o in solved]
    assert stats.submitted == len(ids), "a task was submitted to the API twice"
    assert "leases_reaped" not in logs and "lease_lost" not in logs


@pytest.fixture(autouse=True)
def no_worker_process_leaks() -> Iterator[None]:
    """After every test here, each worker it started has exited (only this pytest's own children count)."""
    yield
    leftovers = [p for p in psutil.Process().children(recursive=True)
                 if "captcha_worker.cli" in " ".join(p.cmdline())]
    assert not leftovers, [" ".join(p.cmdline()) for p in leftovers]


async def test_health_and_readiness_endpoints(redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    """/healthz is the process; /readyz follows the worker: 200 while it claims, 503 with the reason when not."""

    other = "f" * 32
    async with SimulatorServer(SimConfig(threads=5, speed=20)) as sim:
        env = env_for(redis_server.url, sim, API_TIME_SCALE="20")
        with workers(1, env, tmp_path) as (w,):
            base = f"http://127.0.0.1:{w.metrics_port}"
            async with aiohttp.ClientSession() as http:
                async def get(path: str) -> tuple[int, str]:
                    async with http.get(base + path) as resp:
                        return resp.status, await resp.text()

                async def answers() -> bool:
                    try:
                        return (await get("/readyz"))[0] == 200
                    except aiohttp.ClientError:
                        return False

                await wait_until(answers, 20, "the worker to be ready")
                assert await get("/healthz") == (200, "ok\n")
                status, text = await get("/metrics")
                assert status == 200 and "captcha_solver_worker_ready 1.0" in text
                sim.simulator.reconfigure(dataclasses.replace(sim.simulator.config, keys=frozenset({other})))
                await RedisQueue(redis, "captcha").push([("h1", task_body("h1", "probe"))], ttl=60)

                async def unready() -> bool:
                    return (await get("/readyz"))[0] == 503

                await wait_until(unready, 20, "readiness to turn false on a rejected key")
                assert await get("/readyz") == (503, "fatal API error: ERROR_KEY_DOES_NOT_EXIST\n")
                assert await get("/healthz") == (200, "ok\n"), "a fatal API error is not a reason to restart the pod"
                assert "captcha_solver_worker_ready 0.0" in (await get("/metrics"))[1]
