"""The seed guide's producers and consumers, unchanged, against the workers: RPUSH raw JSON onto `captcha:queue`
(LPUSH for priority), poll `HGET captcha:results <id>` for ``status == "success"`` and ``token``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any, cast

import redis as sync_redis
from redis.asyncio import Redis

from captcha_worker.queue import SEED_QUEUE_LIST, SEED_RESULTS_HASH
from tests.helpers import TURNSTILE, wait_until
from tests.procs import RedisServer, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, worker_env


class GuideQueue:
    """What the guide's producer does (redis-py, sync, nothing of this package)."""

    def __init__(self, url: str) -> None:
        self.redis = sync_redis.from_url(url)

    def submit(self, method: str, params: dict[str, str], priority: str = "normal") -> str:
        task_id = str(uuid.uuid4())[:8]
        task = {"id": task_id, "method": method, "params": params, "submitted_at": time.time(), "priority": priority}
        (self.redis.lpush if priority == "high" else self.redis.rpush)(SEED_QUEUE_LIST, json.dumps(task))
        return task_id

    def get_result(self, task_id: str) -> dict[str, Any]:
        """The guide's result of a task; {} while there is none."""
        raw = self.redis.hget(SEED_RESULTS_HASH, task_id)
        data: dict[str, Any] = json.loads(cast(str | bytes, raw)) if raw else {}
        return data


async def test_seed_guide_producers_and_consumers_work_unchanged(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    n, bad = 100, 5
    with simulator(tmp_path, "--threads", "30", "--speed", SPEED, "--seed", "12") as sim:
        env = worker_env(rs.url, sim.url, COMPAT_QUEUE_LIST=SEED_QUEUE_LIST, COMPAT_RESULTS_HASH="true",
                         RESULT_TTL_SECONDS="600")
        guide = GuideQueue(rs.url)
        with workers(2, env, tmp_path) as procs:
            ids = [guide.submit("turnstile", TURNSTILE, "high" if i % 10 == 0 else "normal") for i in range(n)]
            rejected = [guide.submit("hcaptcha", {"sitekey": "s", "pageurl": "https://e"}) for _ in range(bad)]

            async def all_answered() -> bool:
                return all(await asyncio.to_thread(lambda: [guide.get_result(i) for i in ids + rejected]))

            await wait_until(all_answered, 60, "every guide task answered in captcha:results")
            results = {i: guide.get_result(i) for i in ids + rejected}
            ttl = await admin.ttl(SEED_RESULTS_HASH)
            alive = all(p.alive() for p in procs)
        stats = sim.stats()
    solved = [i for i in ids if results[i] and results[i]["status"] == "success" and results[i]["token"]]
    Row("seed-guide-compat", n + bad, len(solved), await admin.llen(KEYS.dead), n + bad - len(results),
        0, stats["max_in_flight"], 20, {"compat_queue_list": SEED_QUEUE_LIST, "results_hash_ttl_s": ttl,
                                        "rejected_status": sorted({str(results[i]["status"]) for i in rejected})}
        ).record()
    assert len(solved) == n and alive and crashes(procs) == 0
    assert all(results[i]["error"] == "UNSUPPORTED_METHOD" and results[i]["status"] == "error" for i in rejected)
    assert set(results[ids[0]]) == {"status", "token", "error", "duration", "worker"}
    assert 0 < ttl <= 600, "captcha:results is bounded"
    assert await admin.llen(SEED_QUEUE_LIST) == 0 and await admin.llen(KEYS.processing) == 0
    assert await admin.llen(KEYS.dead) == bad
