"""The API misbehaving all the time: html502, nonjson, reset, server_error at 10 % each, 5 % of replies held
past the HTTP timeouts. Nothing is lost, nothing delivered twice. (The latency under the storm is measured, at real
speed, by bench/p6_faults.py: docs/benchmarks.md, P6.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from redis.asyncio import Redis

from captcha_worker.queue import RedisQueue
from tests.helpers import task_body, wait_until
from tests.procs import RedisServer, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, replies, worker_env

FAULTS = ["--fault", "html502=0.1", "--fault", "nonjson=0.1", "--fault", "reset=0.1", "--fault", "server_error=0.1",
          "--fault", "slow=0.05", "--slow-seconds", "3"]


async def test_fault_storm_loses_nothing(rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    n, reply = 300, "chaos-storm"
    with simulator(tmp_path, "--threads", "60", "--speed", SPEED, "--seed", "21", *FAULTS) as sim:
        env = worker_env(rs.url, sim.url, CAPTCHAAI_THREADS="40", WORKER_CONCURRENCY="20", HTTP_TIMEOUT_SECONDS="2",
                         HTTP_POLL_TIMEOUT_SECONDS="1", MAX_ATTEMPTS="10")
        with workers(2, env, tmp_path) as procs:
            started = time.monotonic()
            await RedisQueue(admin, "captcha").push([(f"s{i}", task_body(f"s{i}", reply)) for i in range(n)], ttl=3600)
            await wait_until(lambda: _answered(admin, reply, n), 180, "every task answered")
            elapsed = time.monotonic() - started
            await asyncio.sleep(0.5)
            per_id = await replies(admin, reply)
            alive = all(p.alive() for p in procs)
        stats = sim.stats()
    twice = sum(c > 1 for c in per_id.values())
    Row("fault-storm", n, len(per_id), await admin.llen(KEYS.dead), n - len(per_id), twice, stats["max_in_flight"], 40,
        {"faults_injected": stats["faults"], "seconds": round(elapsed, 1), "loop_crashes": crashes(procs)}).record()
    assert len(per_id) == n and twice == 0 and alive and crashes(procs) == 0
    assert await admin.llen(KEYS.dead) == 0, "transient faults never exhaust a task's attempts here"
    assert sum(stats["faults"].values()) > n / 2, "the storm really happened"
    assert stats["max_in_flight"] <= 40


async def _answered(admin: Redis, reply: str, n: int) -> bool:
    return bool(await admin.llen(KEYS.reply(reply)) >= n)
