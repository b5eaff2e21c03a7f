"""P8 the gateway: requests/s and CPU per request of one gateway process, and the end-to-end latency a polling
CaptchaAI client sees through it next to the Python producer library's.

Throughput: one ``captcha-worker gateway`` process (its CPU read with psutil, nothing else in it) in front of its
own redis-server; the load comes from this process, ``CONNECTIONS`` keep-alive connections each sending its next
request as soon as the previous is answered, for ``window_s``:

* ``in.php`` — turnstile submissions (valid: validated and pushed), no worker running, so they pile up;
* ``res.php get`` — polls of tasks the bench finished with the queue's own scripts (the answer is read from the
  result store every time);
* the JSON API beside them, on the same gateway: ``createTask`` (a TurnstileTaskProxyless: mapped, validated,
  pushed) and ``getTaskResult`` polls of the same finished tasks (a task's number is its taskId).

Latency: ``clients`` concurrent clients, each a loop of: submit through ``in.php``, first poll 5 s later, then
every 5 s until the answer (how CaptchaAI's docs tell clients to poll); and as many producer-library clients,
each a loop of ``CaptchaQueue.solve`` (the result is pushed back). The same workers serve both
(``bench.instant serve``: each solve holds its slot for a uniform ``HOLD`` seconds, 5-15 s as a turnstile's solve,
then answers), with a slot for every client. Latency is the client's wall clock from the submit to the answer in
hand; the gateway's CPU per request is also read during this phase. The first ``warm_s`` of each run is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import psutil
from redis.asyncio import Redis

from bench.common import (
    ROOT,
    RedisServer,
    listening,
    log,
    percentile,
    python_env,
    stop_process,
    summary,
    worker_env,
)
from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.queue import Ack, RedisQueue
from captcha_worker.task import Result, Status, Timings

TENANT_KEY = "GatewayBench0000000000000000000a"
TENANTS = json.dumps({"tenants": [{"name": "bench", "key": TENANT_KEY, "threads": 1000}]})
TURNSTILE = {"method": "turnstile", "sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login",
             "key": TENANT_KEY, "json": "1"}
CONNECTIONS = 32
LOAD_PROCESSES = 2
HOLD = "5.0:15.0"  # a solve's holding time, as a turnstile's (12 s ± 3): answers come at any phase of the polls
POLL_S = 5.0
ENDPOINTS = ("in", "create_task", "res_get", "get_task_result")  # submissions first, then the polls of them
CREATE_TASK = {"clientKey": TENANT_KEY, "task": {"type": "TurnstileTaskProxyless", "websiteURL": TURNSTILE["pageurl"],
                                                 "websiteKey": TURNSTILE["sitekey"]}}


@contextlib.contextmanager
def gateway(redis_url: str) -> Iterator[tuple[str, Any]]:
    """A gateway process; yields its URL and its psutil.Process."""
    env = python_env(REDIS_URL=redis_url, GATEWAY_TENANTS=TENANTS, GATEWAY_HOST="127.0.0.1", GATEWAY_PORT="0",
                     METRICS_HOST="127.0.0.1", METRICS_PORT="0", LOG_LEVEL="warning")
    # both on port 0: its `listening on URL (metrics on port N)` line names the ports it bound
    with listening([sys.executable, "-m", "captcha_worker.cli", "gateway"], env, "bench gateway") as (proc, m):
        yield m["url"].decode(), psutil.Process(proc.pid)


@contextlib.contextmanager
def instant_workers(redis_url: str, slots: int, hold: str) -> Iterator[None]:
    env = worker_env(redis_url, concurrency=slots, threads=slots, BENCH_SOLVE_HOLD=hold, LOG_LEVEL="warning")
    proc = subprocess.Popen([sys.executable, "-m", "bench.instant", "serve"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        stop_process(proc)


def _cpu(proc: Any) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


# -- throughput ---------------------------------------------------------------------------------------------------
def _request(endpoint: str, numbers: list[str]) -> tuple[str, dict[str, Any], str, bool]:
    """(path, fields, the start every answer must have, whether the body is JSON)."""
    if endpoint == "in":
        return "in.php", TURNSTILE, '{"status":1', False
    if endpoint == "create_task":
        return "createTask", CREATE_TASK, '{"errorId":0', True
    if endpoint == "get_task_result":
        body = {"clientKey": TENANT_KEY, "taskId": int(random.choice(numbers))}
        return "getTaskResult", body, '{"errorId":0,"status":"ready"', True
    return "res.php", {"key": TENANT_KEY, "action": "get", "id": random.choice(numbers)}, "OK|TOKEN-", False


async def _hammer(url: str, endpoint: str, numbers: list[str], window_s: float, connections: int) -> tuple[int, int]:
    """`connections` loops for window_s; returns (answered, errors: not HTTP 200 or not the expected answer)."""
    done = errors = 0
    stop_at = time.monotonic() + window_s

    async def loop(session: aiohttp.ClientSession) -> None:
        nonlocal done, errors
        while time.monotonic() < stop_at:
            path, fields, start, as_json = _request(endpoint, numbers)
            request = session.post(f"{url}/{path}", json=fields) if as_json else session.post(f"{url}/{path}",
                                                                                                data=fields)
            async with request as resp:
                body = await resp.text()
            done += 1
            errors += resp.status != 200 or not body.startswith(start)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:
        await asyncio.gather(*(loop(session) for _ in range(connections)))
    return done, errors


def _load_process(args: tuple[str, str, list[str], float, float, int]) -> tuple[int, int]:
    url, endpoint, numbers, start_at, window_s, connections = args
    time.sleep(max(0.0, start_at - time.time()))
    return asyncio.run(_hammer(url, endpoint, numbers, window_s, connections))


def _load(url: str, endpoint: str, numbers: list[str], window_s: float, proc: Any) -> tuple[int, int, float]:
    """LOAD_PROCESSES processes of CONNECTIONS / LOAD_PROCESSES connections each (one Python process cannot keep a
    gateway busy), all starting at one moment once spawned. Returns (answered, errors, gateway CPU seconds used
    over the window)."""
    per = CONNECTIONS // LOAD_PROCESSES
    start_at = time.time() + 2.0  # after the processes are up
    with multiprocessing.get_context("spawn").Pool(LOAD_PROCESSES) as pool:
        parts = pool.map_async(_load_process, [(url, endpoint, numbers, start_at, window_s, per)] * LOAD_PROCESSES)
        time.sleep(max(0.0, start_at - time.time()))
        cpu = _cpu(proc)
        time.sleep(window_s)
        used = _cpu(proc) - cpu
        results = parts.get()
    return sum(d for d, _ in results), sum(e for _, e in results), used


async def _finish_all(redis_url: str) -> list[str]:
    """Claim and finish every pending task as solved (the queue's own scripts); returns the client numbers."""

    redis = Redis.from_url(redis_url, decode_responses=True)
    queue = RedisQueue(redis, "captcha")
    numbers: list[str] = []
    try:
        while claimed := await queue.claim(500, lease_s=600):
            now = time.time()
            acks = [Ack(c.item, Result(str(c.item), Status.SOLVED, kind="turnstile", solution="TOKEN-" + "x" * 200,
                                       timings=Timings(submitted_at=now, claimed_at=now, finished_at=now)),
                        "gateway", unit=c.unit) for c in claimed]  # the unit freed, as a worker's ACK frees it
            await queue.ack_many(acks, result_ttl=3600, reply_ttl=60)
            numbers += [str(c.item).rsplit(":", 1)[1] for c in claimed]
            await redis.delete(queue.keys.reply("gateway"))  # measured below: polls, not the result reader
    finally:
        await redis.aclose()
    return numbers


def _throughput(window_s: float, reps: int) -> dict[str, Any]:
    out: dict[str, dict[str, list[float]]] = {e: {"rps": [], "cpu_us_per_request": [], "gateway_cores": [],
                                                  "errors": []} for e in ENDPOINTS}
    with RedisServer() as rs, gateway(rs.url) as (url, proc):
        _load(url, "in", [], 1.0, proc)  # warm-up
        for rep in range(reps):
            numbers: list[str] = []
            for endpoint in ENDPOINTS:
                if endpoint == "res_get":  # the tasks both protocols submitted, finished
                    numbers = asyncio.run(_finish_all(rs.url))
                done, errors, used = _load(url, endpoint, numbers, window_s, proc)
                elapsed = window_s
                entry = out[endpoint]
                entry["rps"].append(done / elapsed)
                entry["cpu_us_per_request"].append(1e6 * used / max(done, 1))
                entry["gateway_cores"].append(used / elapsed)
                entry["errors"].append(errors)
                log(f"P8 rep {rep + 1}/{reps} {endpoint}: {done / elapsed:,.0f} req/s, "
                    f"{1e6 * used / max(done, 1):.0f} µs CPU/request, gateway at {used / elapsed:.2f} cores, "
                    f"{errors} errors")
    return {e: {k: summary(v) for k, v in d.items()} for e, d in out.items()}


# -- latency ------------------------------------------------------------------------------------------------------
async def _polling_client(url: str, stop_at: float, out: list[tuple[float, float]], counts: dict[str, int]) -> None:
    async with aiohttp.ClientSession() as session:
        await asyncio.sleep(random.uniform(0, POLL_S))  # the clients do not all start at once
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            async with session.post(f"{url}/in.php", data=TURNSTILE) as resp:
                number = json.loads(await resp.text())["request"]
            counts["requests"] += 1
            while True:
                await asyncio.sleep(POLL_S)
                async with session.post(f"{url}/res.php", data={"key": TENANT_KEY, "action": "get", "id": number,
                                                                "json": "1"}) as resp:
                    reply = json.loads(await resp.text())
                counts["requests"] += 1
                if reply["request"] != "CAPCHA_NOT_READY":
                    break
            out.append((t0, time.monotonic() - t0))


async def _library_client(q: Any, stop_at: float, out: list[tuple[float, float]]) -> None:
    await asyncio.sleep(random.uniform(0, POLL_S))
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        outcome = await q.solve("turnstile", sitekey=TURNSTILE["sitekey"], pageurl=TURNSTILE["pageurl"], timeout=60)
        if isinstance(outcome, Solved):
            out.append((t0, time.monotonic() - t0))


async def _latency_run(url: str, redis_url: str, clients: int, duration_s: float, system: str
                       ) -> tuple[list[tuple[float, float]], int]:
    samples: list[tuple[float, float]] = []
    counts = {"requests": 0}
    stop_at = time.monotonic() + duration_s
    if system == "gateway":
        await asyncio.gather(*(_polling_client(url, stop_at, samples, counts) for _ in range(clients)))
    else:
        async with CaptchaQueue.from_url(redis_url) as q:
            await asyncio.gather(*(_library_client(q, stop_at, samples) for _ in range(clients)))
    return samples, counts["requests"]


def _latency(clients: int, duration_s: float, warm_s: float, reps: int, hold: str) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"gateway": [], "library": []}
    cpu_per_request: list[float] = []
    with RedisServer() as rs, gateway(rs.url) as (url, proc), instant_workers(rs.url, 2 * clients, hold):
        time.sleep(1.0)
        for rep in range(reps):
            for system in ("gateway", "library"):
                cpu = _cpu(proc)
                t_start = time.monotonic()
                samples, requests = asyncio.run(_latency_run(url, rs.url, clients, duration_s, system))
                kept = [lat for t0, lat in samples if t0 - t_start >= warm_s]
                entry = {"p50_s": percentile(kept, 50), "p99_s": percentile(kept, 99),
                         "mean_s": sum(kept) / len(kept) if kept else float("nan"), "samples": len(kept)}
                if system == "gateway":
                    entry["requests_per_s"] = requests / (time.monotonic() - t_start)
                    cpu_per_request.append(1e6 * (_cpu(proc) - cpu) / max(requests, 1))
                runs[system].append(entry)
                log(f"P8 latency rep {rep + 1}/{reps} {system}: p50 {entry['p50_s']:.2f} s, p99 "
                    f"{entry['p99_s']:.2f} s over {len(kept)} tasks")
    out: dict[str, Any] = {s: {k: summary([e[k] for e in entries]) for k in entries[0]} for s, entries in runs.items()}
    out["added_p50_s"] = summary([g["p50_s"] - lib["p50_s"] for g, lib in zip(runs["gateway"], runs["library"],
                                                                              strict=True)])
    out["added_p99_s"] = summary([g["p99_s"] - lib["p99_s"] for g, lib in zip(runs["gateway"], runs["library"],
                                                                              strict=True)])
    out["gateway_cpu_us_per_request"] = summary(cpu_per_request)
    return out


def run(*, window_s: float, reps: int, clients: int, duration_s: float, warm_s: float,
        hold: str = HOLD) -> dict[str, Any]:
    throughput = _throughput(window_s, reps)
    latency = _latency(clients, duration_s, warm_s, reps, hold)
    return {
        "params": {"window_s": window_s, "repetitions": reps, "connections": CONNECTIONS,
                   "load_processes": LOAD_PROCESSES, "clients": clients,
                   "duration_s": duration_s, "warmup_s": warm_s, "poll_every_s": POLL_S, "solve_hold_s": hold,
                   "workers": f"BENCH_SOLVE_HOLD={hold} python -m bench.instant serve (WORKER_CONCURRENCY="
                              f"{2 * clients})",
                   "load": f"{LOAD_PROCESSES} load processes (aiohttp), separate from the gateway process"},
        "throughput": throughput,
        "latency": latency,
        "targets": {},
    }
