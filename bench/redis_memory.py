"""Redis memory per queued task and per stored result (docs/operations.md, "Redis in production").

    .venv/bin/python -m bench.redis_memory [N]

On its own redis-server: N tasks pushed through the producer library (a Turnstile task with sitekey and pageurl, as
the docs' examples), then claimed and acknowledged with a solved result whose token has the length of a real one
(Turnstile ~700 characters, reCAPTCHA ~2,000). ``used_memory`` after each step, minus the empty server's, divided
by N. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from redis.asyncio import Redis

from bench.common import RedisServer
from captcha_worker.client import CaptchaQueue, TaskSpec
from captcha_worker.queue import Ack, Claimed, RedisQueue
from captcha_worker.task import Result, Status

TURNSTILE = {"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://example.com/login"}


async def _used(r: Redis) -> int:
    return int((await r.info("memory"))["used_memory"])


async def measure(url: str, n: int, token_len: int) -> dict[str, Any]:
    admin = Redis.from_url(url, decode_responses=True)
    await admin.flushall()
    base = await _used(admin)
    async with CaptchaQueue.from_url(url, producer_id="mem") as q:
        await q.submit_many([TaskSpec("turnstile", TURNSTILE, id=f"t{i:07d}") for i in range(n)])
    queued = await _used(admin)
    queue = RedisQueue(admin, "captcha")
    claimed: list[Claimed] = []
    while len(claimed) < n:
        claimed += await queue.claim(500, lease_s=60)
    leased = await _used(admin)
    acks = [Ack(c.item, Result(id=str(c.item), status=Status.SOLVED, solution="x" * token_len, attempts=1, api_calls=2))
            for c in claimed]
    for i in range(0, n, 500):
        await queue.ack_many(acks[i:i + 500], result_ttl=3600, reply_ttl=3600)
    done = await _used(admin)
    await admin.aclose()
    return {"token_chars": token_len, "bytes_per_queued_task": round((queued - base) / n),
            "bytes_per_task_in_flight": round((leased - base) / n),
            "bytes_per_result_stored": round((done - base) / n)}


def main(n: int) -> int:
    with RedisServer() as server:
        rows = [asyncio.run(measure(server.url, n, token_len)) for token_len in (700, 2000)]
    print(json.dumps({"tasks": n, "redis": "one redis-server, no persistence", "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000))
