"""After the result's TTL the producer library and the CLI say "result expired", distinct from "unknown id"."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, ResultExpired, Solved, UnknownTask
from tests.helpers import TURNSTILE, run_cli
from tests.procs import RedisServer, simulator, workers

from .conftest import SPEED, Row, worker_env


async def test_an_expired_result_and_an_unknown_id_are_different_outcomes(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    n = 5
    with simulator(tmp_path, "--threads", "10", "--speed", SPEED) as sim:
        env = worker_env(rs.url, sim.url, RESULT_TTL_SECONDS="10")
        with workers(1, env, tmp_path):
            async with CaptchaQueue.from_url(rs.url) as q:
                ids = await q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(n)])
                first = [o async for o in q.as_completed(ids, timeout=30)]
        await asyncio.sleep(11)  # RESULT_TTL_SECONDS passes
        async with CaptchaQueue.from_url(rs.url) as q:
            late = [await q.result(i, timeout=5) for i in ids]
            unknown = await q.result("never-submitted", timeout=0.5)
        cli = run_cli("wait", ids[0], "never-submitted", "--timeout", "1", env={"REDIS_URL": rs.url})
        stats = sim.stats()
    statuses = sorted(json.loads(line)["status"] for line in cli.stdout.splitlines())
    Row("result-expiry", n, sum(isinstance(o, Solved) for o in first), 0, 0, 0, stats["max_in_flight"], 20,
        {"late_outcomes": sorted({type(o).__name__ for o in late}), "unknown": type(unknown).__name__,
         "cli_statuses": statuses}).record()
    assert all(isinstance(o, Solved) for o in first)
    assert late == [ResultExpired(i) for i in ids], "said at once, not after a wait"
    assert isinstance(unknown, UnknownTask)
    assert cli.returncode == 1 and statuses == ["result_expired", "unknown"]
