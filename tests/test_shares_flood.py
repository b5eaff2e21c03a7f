"""Tenant shares end to end: a `captcha-worker gateway` process publishing two tenants' shares, a real redis-server,
two real workers and the simulator; one tenant floods `in.php`, the other submits one task a second, and one worker
is killed (SIGKILL) mid-flood and started again. The shares (6 and 6, overbooking the 8-thread plan) and the plan
hold at every sample (the dead worker's solves still count against their tenants until they are resumed), the
steady tenant's tasks are served while the flood is still waiting (no head-of-line blocking: under FIFO each would
wait for the whole flood), the lists KEDA watches always hold every unfinished task, and every task is solved.
Timings are not asserted: the figures come from bench/shares_flood.py (docs/gateway.md#shares). A worker that stalls
past its lease (LEASE_SECONDS, 30 s here) keeps its solves counted while its tasks are served again: on a machine
that starves the workers that long, the budget counts more than its limit, by design (budget.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from tests.procs import gateways, simulator, workers

pytestmark = pytest.mark.integration

QUEUE = "sharesflood"
KEY_FLOOD, KEY_STEADY = "F" * 16 + "f" * 16, "S" * 16 + "s" * 16
TENANTS = {"tenants": [{"name": "flood", "key": KEY_FLOOD, "threads": 6},
                       {"name": "steady", "key": KEY_STEADY, "threads": 6}]}
PLAN, FLOOD, STEADY = 8, 80, 12
#: the workers' lease, set here (it is also the default): the killed worker's solves count against their tenants
#: for this long, and a live worker starved past it would be counted twice (module docstring), so it is kept far
#: above any stall of a loaded 2-core machine; the flood itself lasts about as long (80 solves, 6 at a time, ~2.5 s
#: each at --speed 6), so the resumptions overlap it rather than add to the run
LEASE_S = 30
TURNSTILE = {"method": "turnstile", "sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/"}


def k(name: str) -> str:
    return f"{{{QUEUE}}}:{name}"


async def submit(session: aiohttp.ClientSession, url: str, key: str) -> str:
    async with session.post(f"{url}/in.php", data={**TURNSTILE, "key": key, "json": "1"}) as resp:
        reply = json.loads(await resp.text())
    assert reply["status"] == 1, reply
    return str(reply["request"])


async def sample(r: Redis, ids: list[str], stop: asyncio.Event, seen: dict[str, Any]) -> None:
    """Budget units per tenant, and the lists KEDA watches against the unfinished tasks, in one transaction. The
    steady tenant submits one task at a time: at most one may be queued before its id is in the snapshot."""
    while not stop.is_set():
        snapshot = list(ids)
        async with r.pipeline(transaction=True) as p:
            p.time()  # units live at the server's time of the transaction (the client's may lag behind it)
            p.zrange(k("budget"), 0, -1, withscores=True)
            for name in ("pending", "processing", "waiting:flood", "waiting:steady"):
                p.llen(k(name))
            for i in snapshot:
                p.exists(k(f"result:{i}"))
            out = await p.execute()
        now = out[0][0] + out[0][1] / 1e6
        units, lists, done = [u for u, expiry in out[1] if expiry > now], out[2:6], out[6:]
        for tenant in ("flood", "steady"):
            mine = [u for u in units if u.startswith(f"t:gw:{tenant}:")]
            seen[tenant] = max(seen.get(tenant, 0), sum(1 for u in mine if "~" not in u))
            seen[f"{tenant}_strays"] = max(seen.get(f"{tenant}_strays", 0), sum(1 for u in mine if "~" in u))
        seen["plan"] = max(seen.get("plan", 0), len(units))
        seen["waiting_flood"] = max(seen.get("waiting_flood", 0), lists[2])
        unfinished = len(snapshot) - sum(done)
        if not unfinished <= sum(lists) <= unfinished + 1:
            seen["mismatch"].append((lists, unfinished))
        await asyncio.sleep(0.02)


async def test_two_tenants_one_flooding(tmp_path: Path, redis_server: Any) -> None:
    r = Redis.from_url(redis_server.url, decode_responses=True)
    await r.delete(*[k(n) for n in ("pending", "processing", "budget", "tenants", "waiting:flood", "waiting:steady")])
    env = {"REDIS_URL": redis_server.url, "QUEUE_NAME": QUEUE, "LOG_LEVEL": "info"}
    with simulator(tmp_path, "--threads", str(PLAN), "--speed", "6") as sim, \
            gateways([("gw", False)], {**env, "GATEWAY_TENANTS": json.dumps(TENANTS)}, tmp_path) as (gw,), \
            workers(2, {**env, "CAPTCHAAI_KEY": "0123456789abcdef0123456789abcdef", "CAPTCHAAI_URL": sim.url,
                        "CAPTCHAAI_THREADS": str(PLAN), "WORKER_CONCURRENCY": "4", "API_TIME_SCALE": "6",
                        "LEASE_SECONDS": str(LEASE_S)},
                    tmp_path) as procs:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):  # the gateway published the share table
                if await r.hlen(k("tenants")) == 2:
                    break
                await asyncio.sleep(0.05)
            assert await r.hgetall(k("tenants")) == {"flood": "6 0", "steady": "6 0"}
            flood = await asyncio.gather(*(submit(session, gw.url, KEY_FLOOD) for _ in range(FLOOD)))
            ids = [f"gw:flood:{n}" for n in flood]
            seen: dict[str, Any] = {"mismatch": []}
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample(r, ids, stop, seen))
            steady: list[str] = []
            for i in range(STEADY):
                if i == 4:  # mid-flood: a worker dies holding solves, a new one starts
                    procs[0].signal(signal.SIGKILL)
                    procs[0].wait(10)
                    procs[0].start()
                steady.append(await submit(session, gw.url, KEY_STEADY))
                ids.append(f"gw:steady:{steady[-1]}")
                await asyncio.sleep(1.0)
            answers = await asyncio.gather(*(poll(session, gw.url, KEY_FLOOD, n) for n in flood),
                                           *(poll(session, gw.url, KEY_STEADY, n) for n in steady))
            stop.set()
            await sampler
            threads = await (await session.get(f"{gw.url}/res.php", params={
                "key": KEY_FLOOD, "action": "threadsinfo", "json": "1"})).json()
        sim_max = sim.stats()["max_in_flight"]
    results = [json.loads(x) for x in await r.mget([k(f"result:gw:flood:{n}") for n in flood]
                                                  + [k(f"result:gw:steady:{n}") for n in steady])]
    await r.aclose()
    assert all(a.startswith("OK|") for a in answers), answers
    assert seen["plan"] <= PLAN and sim_max <= PLAN, (seen, sim_max)
    assert seen["flood"] <= 6 and seen["steady"] <= 6, f"a tenant above its share: {seen}"
    assert seen["flood"] == 6, f"the flood used its whole share: {seen}"
    assert seen["waiting_flood"] > 0, "the flood waited in its own list"
    assert seen["mismatch"] == [], f"pending + processing + waiting lists = every unfinished task: {seen['mismatch']}"
    claimed = {x["id"]: x["timings"]["claimed_at"] for x in results}
    last_flood = max(claimed[f"gw:flood:{n}"] for n in flood)
    # a steady task the killed worker held was served at once, then waited out the lease by design: its last claim
    # (the one recorded) is the resumption, which may come after the flood's last claim
    resumed = {x["id"] for x in results if x.get("worker_deaths", 0) > 0}
    late = [n for n in steady if claimed[f"gw:steady:{n}"] > last_flood and f"gw:steady:{n}" not in resumed]
    assert not late, f"steady tasks served only after the whole flood (head-of-line blocking): {late}"
    assert threads["status"] == 1 and threads["threads"] == 6 and threads["working_threads"] <= 6, threads


async def poll(session: aiohttp.ClientSession, url: str, key: str, number: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        async with session.get(f"{url}/res.php", params={"key": key, "action": "get", "id": number}) as resp:
            text = await resp.text()
        if text != "CAPCHA_NOT_READY":
            return text
        await asyncio.sleep(0.5)
    return "TIMEOUT"
