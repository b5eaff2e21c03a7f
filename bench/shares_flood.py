"""Tenant shares under a flood: two tenants on one plan, one of them flooding; real redis-server, real
``captcha-worker run`` workers, the simulator as CaptchaAI.

The plan has ``PLAN`` threads (2 workers × 4 slots, ``CAPTCHAAI_THREADS=8``, simulator ``--threads 8``); the
tenants' shares overbook it: ``flood`` 6, ``steady`` 6 (12 > 8; :data:`TABLES` per mode). ``steady`` submits one
task every ``STEADY_EVERY_S`` for the whole run (its demand: about 2 threads); ``flood`` submits ``FLOOD_TASKS`` at
once, ``FLOOD_AT_S`` into the run. Tasks are pushed as the gateway pushes them (ids ``gw:<tenant>:<n>``, the tenant
in the body); the share table is published as the gateway does (``RedisQueue.publish_shares``). The modes:

* ``alone``: steady only, no flood: the queue wait the plan's capacity gives steady;
* ``shares``: steady and the flood, shares published: what the workers' claim enforces;
* ``fifo``: steady and the flood, no share table: the claim is first come, first served (the queue before shares);
* ``flood-plan``: the flood's share is the whole plan (8), steady's 6: steady gets the next thread that frees;
* ``reserved``: as ``flood-plan``, steady with 3 threads reserved while it has work.

Every 50 ms the run samples the budget units (``{q}:budget``) per tenant: the most each tenant had in flight and
the most in all. RedisQueue wait is each result's ``claimed_at - submitted_at``.

``python -m bench.shares_flood [--out DIR]`` writes ``shares_flood.json``; tests/test_shares_flood.py runs a short
version and checks the caps and the plan, never the timings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench.common import (
    ROOT,
    RedisServer,
    SimulatorProcess,
    log,
    percentile,
    stop_process,
    wait_for_workers,
    worker_env,
    write_result,
)
from captcha_worker.queue import RedisQueue, TenantShare

PLAN, WORKERS = 8, 2
#: per mode, the share table (name -> (threads, reserved)); fifo publishes none
TABLES: dict[str, dict[str, tuple[int, int]]] = {
    "alone": {"flood": (6, 0), "steady": (6, 0)},
    "shares": {"flood": (6, 0), "steady": (6, 0)},
    "flood-plan": {"flood": (8, 0), "steady": (6, 0)},
    "reserved": {"flood": (8, 0), "steady": (6, 3)},
}
STEADY_EVERY_S = 1.0
FLOOD_AT_S = 5.0
FLOOD_TASKS = 200
SPEED = 6.0  # turnstile's 12 s ± 3 becomes 2 s ± 0.5
MODES = ("alone", "shares", "fifo", "flood-plan", "reserved")


def _body(task_id: str, tenant: str, now: float) -> str:
    return json.dumps({"id": task_id, "method": "turnstile", "tenant": tenant,
                       "params": {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/"},
                       "submitted_at": now})


@contextlib.contextmanager
def _workers(redis_url: str, api_url: str, logdir: Path | None) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(WORKERS):
            env = worker_env(redis_url, concurrency=PLAN // WORKERS, threads=PLAN, api_url=api_url, LOG_LEVEL="warning",
                             API_TIME_SCALE=str(SPEED))
            with open(logdir / f"worker{i}.log", "ab") if logdir else open("/dev/null", "wb") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"], env=env,
                                              cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
        yield procs
    finally:
        for p in procs:
            stop_process(p)


async def _sample(r: Any, stop: asyncio.Event, peak: dict[str, int]) -> None:
    while not stop.is_set():
        units = await r.zrangebyscore("{captcha}:budget", time.time(), "+inf")
        counts: dict[str, int] = {}
        for u in units:
            parts = u.split(":")
            tenant = parts[2] if len(parts) > 3 and parts[1] == "gw" else "-"
            counts[tenant] = counts.get(tenant, 0) + 1
        for tenant, n in counts.items():
            peak[tenant] = max(peak.get(tenant, 0), n)
        peak["all"] = max(peak.get("all", 0), len(units))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)


async def _scenario(redis_url: str, mode: str, duration_s: float, flood_tasks: int) -> dict[str, Any]:

    r = Redis.from_url(redis_url, decode_responses=True)
    q = RedisQueue(r, "captcha")
    if mode in TABLES:
        await q.publish_shares([TenantShare(name, t, r) for name, (t, r) in TABLES[mode].items()])
    ids: dict[str, list[str]] = {"steady": [], "flood": []}
    peak: dict[str, int] = {}
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(r, stop, peak))
    t0 = time.monotonic()
    flooded = mode == "alone"
    n = 0
    while time.monotonic() - t0 < duration_s:
        if not flooded and time.monotonic() - t0 >= FLOOD_AT_S:
            now = time.time()
            batch = [(f"gw:flood:{n + i}", _body(f"gw:flood:{n + i}", "flood", now)) for i in range(flood_tasks)]
            await q.push(batch, ttl=3600)
            ids["flood"] += [b[0] for b in batch]
            n, flooded = n + flood_tasks, True
        tid = f"gw:steady:{n}"
        n += 1
        await q.push([(tid, _body(tid, "steady", time.time()))], ttl=3600)
        ids["steady"].append(tid)
        await asyncio.sleep(STEADY_EVERY_S)
    waits = await _waits(r, ids, deadline=time.monotonic() + 600)
    stop.set()
    await sampler
    await r.delete("{captcha}:tenants")
    await r.aclose()
    return {"mode": mode, "peak_in_flight": peak, **waits}


async def _waits(r: Any, ids: dict[str, list[str]], deadline: float) -> dict[str, Any]:
    """Queue waits per tenant once every task has a result (each must end solved)."""
    out: dict[str, Any] = {}
    for tenant, tids in ids.items():
        if not tids:
            continue
        while True:
            raws = await r.mget([f"{{captcha}}:result:{t}" for t in tids])
            if all(raws) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        results = [json.loads(x) for x in raws if x]
        waits = [x["timings"]["claimed_at"] - x["timings"]["submitted_at"] for x in results
                 if "claimed_at" in x.get("timings", {})]
        out[tenant] = {"tasks": len(tids), "solved": sum(1 for x in results if x["status"] == "solved"),
                       "queue_wait_s": {"p50": round(percentile(waits, 50), 2), "p95": round(percentile(waits, 95), 2),
                                        "max": round(max(waits), 2) if waits else None}}
    return out


def run(*, duration_s: float = 60.0, flood_tasks: int = FLOOD_TASKS, modes: tuple[str, ...] = MODES,
        logdir: Path | None = None) -> dict[str, Any]:
    runs = []
    for mode in modes:
        with RedisServer() as rs, SimulatorProcess(("--threads", str(PLAN), "--speed", str(SPEED))) as sim, \
                _workers(rs.url, sim.url, logdir) as procs:
            wait_for_workers(rs.client(), WORKERS, procs=procs)
            result = asyncio.run(_scenario(rs.url, mode, duration_s, flood_tasks))
            result["simulator_max_in_flight"] = sim.stats().get("max_in_flight")
            log(f"shares flood {mode}: {json.dumps(result)}")
            runs.append(result)
    return {"params": {"plan": PLAN, "workers": WORKERS, "tables": TABLES, "steady_every_s": STEADY_EVERY_S,
                       "flood_at_s": FLOOD_AT_S, "flood_tasks": flood_tasks, "speed": SPEED, "duration_s": duration_s},
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.shares_flood", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--duration", type=float, default=60.0)
    ns = p.parse_args(argv)
    started = time.monotonic()
    data = run(duration_s=ns.duration)
    print(write_result(ns.out, "shares_flood", data, smoke=False, started=started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
