"""Worker processes (`captcha-worker run`) against a real redis-server and the simulator: chaos, budget,
SIGTERM drain, Redis restart. The figures each test measures are printed (run with -s to see them)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import KEY, ROOT, cli_env, free_port
from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.queue import Keys, Queue
from captcha_worker.simulator import Latency, OverCap, SimConfig, SimulatorServer
from captcha_worker.task import Result

pytestmark = pytest.mark.slow
TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}
KEYS = Keys("captcha")


class WorkerProc:
    def __init__(self, name: str, env: dict[str, str], logdir: Path) -> None:
        self.name, self.env, self.logdir = name, env, logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.logdir / f"{self.name}.{self.starts}.log", "wb")
        self.metrics_port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"],
                                     env=cli_env(**self.env, METRICS_PORT=str(self.metrics_port),
                                                 METRICS_HOST="127.0.0.1"),
                                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logdir.glob(f"{self.name}.*.log")))


@contextmanager
def workers(n: int, env: dict[str, str], logdir: Path) -> Iterator[list[WorkerProc]]:
    procs = [WorkerProc(f"w{i}", env, logdir) for i in range(n)]
    for p in procs:
        p.start()
    try:
        yield procs
    finally:
        for p in procs:
            if p.alive():
                p.signal(signal.SIGKILL)
                p.wait(10)


@asynccontextmanager
async def simulator(**cfg: Any) -> AsyncIterator[SimulatorServer]:
    async with SimulatorServer(SimConfig(**cfg)) as sim:
        yield sim


def worker_env(redis_url: str, sim: SimulatorServer, **extra: str) -> dict[str, str]:
    env = {"REDIS_URL": redis_url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url, "CAPTCHAAI_THREADS": "30",
           "WORKER_CONCURRENCY": "10", "API_TIME_SCALE": "20", "LEASE_SECONDS": "3", "LOG_LEVEL": "info",
           "DRAIN_GRACE_SECONDS": "10"}
    env.update(extra)
    return env


def task_body(task_id: str, reply_to: str) -> str:
    return json.dumps({"id": task_id, "method": "turnstile", "params": TURNSTILE, "submitted_at": time.time(),
                       "reply_to": reply_to})


async def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def test_chaos_sigkill_workers_mid_solve_loses_nothing_and_delivers_once(
        redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    n_tasks, reply = 500, "chaos"
    queue = Queue(redis, "captcha")
    async with simulator(threads=100, speed=20, seed=3, latency={"turnstile": Latency(12, 4)}) as sim:
        env = worker_env(redis_server.url, sim, MAX_ATTEMPTS="20", CAPTCHAAI_THREADS="30")
        ids = [f"c{i:04d}" for i in range(n_tasks)]
        await queue.push([(i, task_body(i, reply)) for i in ids], ttl=3600)
        kills = 0
        rng = random.Random(11)
        with workers(3, env, tmp_path) as procs:
            deadline = time.monotonic() + 150
            while await redis.llen(KEYS.reply(reply)) < n_tasks and time.monotonic() < deadline:
                await asyncio.sleep(rng.uniform(0.8, 1.6))
                if kills < 12 and await redis.llen(KEYS.processing) > 0:
                    victim = rng.choice(procs)
                    if victim.alive():
                        victim.signal(signal.SIGKILL)
                        await asyncio.to_thread(victim.wait, 10)
                        kills += 1
                        await asyncio.sleep(0.3)
                        victim.start()
            notes = [Result.from_json(r) for r in await redis.lrange(KEYS.reply(reply), 0, -1)]
            stats = sim.stats()
    per_id = collections.Counter(r.id for r in notes)
    lost = [i for i in ids if per_id[i] == 0]
    duplicates = {i: c for i, c in per_id.items() if c > 1}
    attempts = collections.Counter(r.attempts for r in notes)
    print(f"\nchaos: tasks={n_tasks} kills={kills} lost={len(lost)} duplicate_deliveries={len(duplicates)} "
          f"solves_at_api={stats.solved} (re-solved after kills: {stats.solved - n_tasks}) "
          f"attempts={dict(sorted(attempts.items()))}")
    assert kills >= 8, "the test must actually kill workers mid-solve"
    assert not lost, f"{len(lost)} tasks got no result"
    assert not duplicates, f"delivered more than once: {duplicates}"
    assert all(r.status.value == "solved" for r in notes)
    assert max(attempts) >= 2, "some tasks must have been re-attempted after a kill (attempts recorded)"
    for r in notes:
        stored = await redis.get(KEYS.result(r.id))
        assert stored is not None and Result.from_json(stored).solution == r.solution
    assert await redis.llen(KEYS.pending) == 0 and await redis.llen(KEYS.processing) == 0
    assert await redis.zcard(KEYS.leases) == 0 and await redis.llen(KEYS.dead) == 0


async def test_budget_three_workers_never_exceed_the_plan_threads(
        redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    async with simulator(threads=50, over_cap=OverCap.ZERO_BALANCE, speed=20, seed=5) as sim:
        env = worker_env(redis_server.url, sim, CAPTCHAAI_THREADS="12", WORKER_CONCURRENCY="10")
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


async def test_sigterm_drains_in_flight_then_exits_zero(redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    async with simulator(threads=50, speed=20, latency={"turnstile": Latency(40, 0)}) as sim:  # 2 s solves
        env = worker_env(redis_server.url, sim, WORKER_CONCURRENCY="4", DRAIN_GRACE_SECONDS="20")
        async with CaptchaQueue(redis) as q:
            ids = await q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(10)])
            with workers(1, env, tmp_path) as (w,):
                await wait_until(lambda: _eq(redis.llen(KEYS.processing), 4), 20, "4 tasks in flight")
                w.signal(signal.SIGTERM)
                code = await asyncio.to_thread(w.wait, 30)
            done = [o async for o in q.as_completed(ids[:4], timeout=5)]
    assert code == 0
    assert all(isinstance(o, Solved) for o in done), f"in-flight solves finish during the drain: {done}"
    assert await redis.llen(KEYS.pending) == 6, "no new claims after SIGTERM"
    assert await redis.llen(KEYS.processing) == 0
    assert '"event":"draining"' in w.logs()


async def test_sigterm_past_the_grace_requeues_without_counting_an_attempt(
        redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    async with simulator(threads=50, speed=1, latency={"turnstile": Latency(60, 0)}) as sim:
        env = worker_env(redis_server.url, sim, WORKER_CONCURRENCY="3", DRAIN_GRACE_SECONDS="0.5",
                         API_TIME_SCALE="1")
        queue = Queue(redis, "captcha")
        ids = ["d1", "d2", "d3", "d4"]
        await queue.push([(i, task_body(i, "drain")) for i in ids], ttl=3600)
        with workers(1, env, tmp_path) as (w,):
            await wait_until(lambda: _eq(redis.llen(KEYS.processing), 3), 20, "3 tasks in flight")
            await asyncio.sleep(0.5)
            w.signal(signal.SIGTERM)
            code = await asyncio.to_thread(w.wait, 30)
    assert code == 0
    pending = await redis.lrange(KEYS.pending, 0, -1)
    assert sorted(pending) == ids and pending[-1] == "d4", "requeued at the front, untouched task stays last"
    assert await redis.llen(KEYS.processing) == 0
    for i in ids:
        assert await redis.hget(KEYS.task(i), "attempts") == "0", "a shutdown must not cost an attempt"
    assert '"event":"drain_grace_exceeded"' in w.logs()


async def test_redis_restart_mid_run_with_aof_loses_nothing(redis: Redis, redis_server: Any,
                                                            tmp_path: Path) -> None:
    async with simulator(threads=50, speed=20, seed=9) as sim:
        env = worker_env(redis_server.url, sim, CAPTCHAAI_THREADS="20", WORKER_CONCURRENCY="10")
        async with CaptchaQueue.from_url(redis_server.url) as q:
            ids = await q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(150)])
            with workers(2, env, tmp_path) as procs:
                await wait_until(lambda: _ge(redis.llen(KEYS.pending), 1, invert=True, total=150), 60,
                                 "some progress")
                redis_server.restart(down_for=2.0)
                outcomes = [o async for o in q.as_completed(ids, timeout=120)]
                alive = [p.alive() for p in procs]
    solved = sum(isinstance(o, Solved) for o in outcomes)
    print(f"\nredis restart: {solved}/{len(ids)} solved after a 2 s outage")
    assert solved == len(ids)
    assert all(alive), "workers must ride out a Redis outage"
    assert any('"event":"redis_unavailable"' in p.logs() for p in procs)


async def _eq(aw: Any, value: int) -> bool:
    return bool(await aw == value)


async def _ge(aw: Any, value: int, *, invert: bool = False, total: int = 0) -> bool:
    """With invert: true once at least `value` tasks left the pending list of `total`."""
    n = await aw
    return bool(total - n >= 20) if invert else bool(n >= value)


def test_no_worker_process_leaks() -> None:
    """Every worker these tests started has exited (only this pytest's own children are considered)."""
    import psutil

    leftovers = [p for p in psutil.Process().children(recursive=True)
                 if "captcha_worker.cli" in " ".join(p.cmdline())]
    assert not leftovers, [" ".join(p.cmdline()) for p in leftovers]


async def test_health_and_readiness_endpoints(redis: Redis, redis_server: Any, tmp_path: Path) -> None:
    """/healthz is the process; /readyz follows the worker: 200 while it claims, 503 with the reason when not."""
    import aiohttp

    other = "f" * 32
    async with simulator(threads=5, speed=20) as sim:
        env = worker_env(redis_server.url, sim, API_TIME_SCALE="20")
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
                await Queue(redis, "captcha").push([("h1", task_body("h1", "probe"))], ttl=60)

                async def unready() -> bool:
                    return (await get("/readyz"))[0] == 503

                await wait_until(unready, 20, "readiness to turn false on a rejected key")
                assert await get("/readyz") == (503, "fatal API error: ERROR_KEY_DOES_NOT_EXIST\n")
                assert await get("/healthz") == (200, "ok\n"), "a fatal API error is not a reason to restart the pod"
                assert "captcha_solver_worker_ready 0.0" in (await get("/metrics"))[1]
