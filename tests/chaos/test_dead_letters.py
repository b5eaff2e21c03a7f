"""Dead letters keep no secret in clear, and `dead-letters requeue` still works while the task's body is stored."""

from __future__ import annotations

import json
from pathlib import Path

from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, Failed, Solved
from tests.helpers import run_cli, wait_until
from tests.procs import RedisServer, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, worker_env
from .fuzz import PLANTED

SECRET_TASK = {"pageurl": f"https://alice:{PLANTED}@example.com", "proxy": f"bob:{PLANTED}@10.0.0.1:3128",
               "proxytype": "HTTP", "cookies": f"cf={PLANTED}"}


async def _holders(admin: Redis) -> list[str]:
    keys = []
    async for key in admin.scan_iter(count=1000):
        kind = await admin.type(key)
        values = (await admin.hvals(key) if kind == "hash" else await admin.lrange(key, 0, -1) if kind == "list"
                  else [await admin.get(key)] if kind == "string" else [])
        if any(PLANTED in (v or "") for v in values):
            keys.append(key)
    return sorted(keys)


async def test_dead_letters_hold_no_secret_and_requeue_while_the_body_is_stored(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    n = 15
    with simulator(tmp_path, "--threads", "30", "--speed", SPEED, "--fault", "html502=1.0") as sim:
        env = worker_env(rs.url, sim.url, MAX_ATTEMPTS="2")
        with workers(2, env, tmp_path) as procs:
            async with CaptchaQueue.from_url(rs.url) as q:
                ids = await q.submit_many([{"method": "cloudflare_challenge", "params": SECRET_TASK}
                                           for _ in range(n)])
                failed = [o async for o in q.as_completed(ids, timeout=120)]
                await admin.rpush(KEYS.pending, json.dumps({"id": "raw-secret", "method": "nope",
                                                            "params": SECRET_TASK}))
                await wait_until(lambda: _dead(admin, n + 1), 30, "the raw one dead-lettered too")
                at_rest = await _holders(admin)
                listing = run_cli("dead-letters", "list", "--json", env={"REDIS_URL": rs.url})
                sim.configure(faults={"html502": 0.0})  # the API is back: requeue what failed
                requeue = run_cli("dead-letters", "requeue", "--all", "--json", env={"REDIS_URL": rs.url})
                solved = [o async for o in q.as_completed(ids, timeout=120)]
            after = await _holders(admin)
            alive = all(p.alive() for p in procs)
        stats = sim.stats()
    ok = sum(isinstance(o, Solved) for o in solved)
    Row("dead-letter-secrets", n + 1, ok, n + 1, n - ok, 0, stats["max_in_flight"], 20,
        {"secret_holders_while_dead": len(at_rest), "secret_holders_after_requeue_and_solve": len(after),
         "requeue": json.loads(requeue.stdout)}).record()
    assert all(isinstance(o, Failed) and o.code == "MAX_ATTEMPTS_EXCEEDED" for o in failed)
    assert at_rest == sorted(KEYS.task(i) for i in ids), \
        "while dead, only the tasks' own hashes (TASK_TTL_SECONDS) hold the secrets: no dead letter does"
    assert listing.returncode == 0 and PLANTED not in listing.stdout and "***@10.0.0.1:3128" in listing.stdout
    assert json.loads(requeue.stdout) == {"requeued": n, "not_requeueable": ["raw-secret"]}
    assert requeue.returncode == 1, "one dead letter could not be requeued: exit 1"
    assert ok == n and alive and crashes(procs) == 0
    assert after == [], "once solved, no key holds the secrets"
    assert all(PLANTED not in p.logs() for p in procs)


async def _dead(admin: Redis, n: int) -> bool:
    return bool(await admin.llen(KEYS.dead) >= n)
