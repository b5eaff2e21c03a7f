"""Hostile items in the queue: every item ends with an outcome on its first claim, nothing stalls the queue.

The fuzz run's size is a knob: ``CHAOS_FUZZ=10000 .venv/bin/pytest tests/chaos/test_poison.py -s`` (default
2,000 in ``make test``); the full-size figures are in docs/reliability.md.
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
from pathlib import Path

from redis.asyncio import Redis

from captcha_worker.task import valid_task_id
from tests.helpers import run_cli, task_body, wait_until
from tests.procs import RedisServer, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, replies, worker_env
from .fuzz import PLANTED, payloads

MAX_BYTES = 262_144
VALID = 300
SPACED = 30  # of the valid tasks, raw JSON with leading whitespace (the rest: id items with a task hash)


async def _push_mixed(admin: Redis, fuzz: list[bytes], reply: str, seed: int) -> list[str]:
    """Valid tasks and fuzzed items interleaved on pending, as a hostile producer would push them."""
    ids = [f"v{i:04d}" for i in range(VALID)]
    async with admin.pipeline(transaction=False) as pipe:
        for tid in ids[SPACED:]:
            pipe.hset(KEYS.task(tid), mapping={"body": task_body(tid, reply), "attempts": 0})
            pipe.expire(KEYS.task(tid), 3600)
        await pipe.execute()
    valid: list[bytes | str] = [*(" \n\t " + task_body(t, reply) for t in ids[:SPACED]), *ids[SPACED:]]
    items: list[bytes | str] = [*fuzz, *valid]
    random.Random(seed).shuffle(items)
    for i in range(0, len(items), 500):
        await admin.rpush(KEYS.pending, *items[i:i + 500])
    return ids


async def _redis_holds(admin: Redis, needle: str) -> list[str]:
    """Keys whose name or value contains `needle` (strings, lists, hashes)."""
    found = []
    async for key in admin.scan_iter(count=1000):
        kind = await admin.type(key)
        if kind == "string":
            values = [await admin.execute_command("GET", key, NEVER_DECODE=True)]
        elif kind == "list":
            values = await admin.execute_command("LRANGE", key, 0, -1, NEVER_DECODE=True)
        elif kind == "hash":
            values = await admin.execute_command("HVALS", key, NEVER_DECODE=True)
        else:
            values = []
        if needle in key or any(needle.encode() in v for v in values if v):
            found.append(key)
    return found


async def test_fuzzed_payloads_mixed_with_valid_tasks(rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    n_fuzz, reply = int(os.environ.get("CHAOS_FUZZ", "2000")), "chaos-fuzz"
    fuzz = payloads(n_fuzz, seed=7, max_bytes=MAX_BYTES)
    with simulator(tmp_path, "--threads", "30", "--speed", SPEED, "--seed", "7") as sim:
        env = worker_env(rs.url, sim.url, MAX_TASK_BYTES=str(MAX_BYTES))
        ids = await _push_mixed(admin, fuzz, reply, seed=7)
        started = time.monotonic()
        with workers(2, env, tmp_path) as procs:
            await wait_until(lambda: _drained(admin), 240, "pending and processing to drain")
            elapsed = time.monotonic() - started
            per_id = await replies(admin, reply)
            metric_dead = sum(p.metric("captcha_solver_dead_letters_total") for p in procs)
            alive = all(p.alive() for p in procs)
            listing = run_cli("dead-letters", "list", "--json", "--limit", str(n_fuzz + 10),
                              env={"REDIS_URL": rs.url}, timeout=120)
        stats = sim.stats()
    dead = await admin.llen(KEYS.dead)
    codes = collections.Counter(json.loads(x)["code"] for x in await admin.lrange(KEYS.dead, 0, -1))
    solved = sum(per_id[i] >= 1 for i in ids)
    twice = sum(c > 1 for c in per_id.values())
    stray = [k async for k in admin.scan_iter(f"{KEYS.result_prefix}*")
             if not valid_task_id(k[len(KEYS.result_prefix):])]
    Row(f"poison-fuzz-{n_fuzz}", n_fuzz + VALID, solved, dead, VALID - solved, twice, stats["max_in_flight"], 20,
        {"fuzzed": n_fuzz, "valid": VALID, "valid_with_leading_whitespace": SPACED, "seconds": round(elapsed, 1),
         "loop_crashes": crashes(procs), "dead_letters_metric": metric_dead, "workers_alive": alive,
         "codes": dict(codes.most_common())}).record()
    assert crashes(procs) == 0 and alive, "no loop or job may crash on any bytes"
    assert solved == VALID and twice == 0, "every valid task solved, once"
    assert dead == n_fuzz == metric_dead, "every fuzzed item dead-lettered exactly once, and counted"
    assert not stray, f"results stored under keys that are not task ids: {stray[:3]}"
    assert listing.returncode == 0 and len(listing.stdout.splitlines()) == n_fuzz
    assert PLANTED not in listing.stdout, "dead-letters list must not print a planted secret"
    assert not await _redis_holds(admin, PLANTED), "no planted secret may stay in Redis"
    assert all(PLANTED not in p.logs() for p in procs), "nor in a log line"
    assert stats["submitted"] == VALID, "no fuzzed item reaches the API"


async def test_poison_at_the_head_is_settled_on_its_first_claim(rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    """The seed's failure: a non-UTF-8 item at the head failed the whole claim, came back first after the lease,
    forever. Here it and a 100,000-deep JSON are dead-lettered on their first claim; the tasks behind them pass."""
    reply = "chaos-head"
    with simulator(tmp_path, "--threads", "30", "--speed", SPEED) as sim:
        env = worker_env(rs.url, sim.url)
        await admin.rpush(KEYS.pending, b"\xff\xfe\xfa", "[" * 100_000, "  " + task_body("spaced", reply))
        for i in range(50):
            await admin.hset(KEYS.task(f"h{i}"), mapping={"body": task_body(f"h{i}", reply), "attempts": 0})
            await admin.rpush(KEYS.pending, f"h{i}")
        started = time.monotonic()
        with workers(1, env, tmp_path) as (w,):
            await wait_until(lambda: _answered(admin, reply, 51), 60, "the 51 valid tasks")
            elapsed = time.monotonic() - started
            await wait_until(lambda: _drained(admin), 10, "nothing left")
            reaped = w.events("leases_reaped")
        stats = sim.stats()
    letters = [json.loads(x) for x in await admin.lrange(KEYS.dead, 0, -1)]
    per_id = await replies(admin, reply)
    Row("poison-at-head", 53, len(per_id), len(letters), 51 - len(per_id), sum(c > 1 for c in per_id.values()),
        stats["max_in_flight"], 20, {"seconds_to_all_valid": round(elapsed, 1), "leases_reaped": len(reaped),
                                     "loop_crashes": crashes([w])}).record()
    assert [d["attempts"] for d in letters] == [1, 1], "dead-lettered on the first claim"
    assert {d["reason"] for d in letters} == {"payload is not valid UTF-8 (byte 0xff at offset 0)",
                                              "payload nests deeper than 32 levels"}
    assert not reaped, "nothing waited for a lease to expire"
    assert crashes([w]) == 0 and len(per_id) == 51


async def _drained(admin: Redis) -> bool:
    return bool(await admin.llen(KEYS.pending) == 0 and await admin.llen(KEYS.processing) == 0)


async def _answered(admin: Redis, reply: str, n: int) -> bool:
    return bool(await admin.llen(KEYS.reply(reply)) >= n)

