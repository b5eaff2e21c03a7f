"""`captcha-worker demo`: the whole system on one machine, with a progress bar and a summary table.

Starts a real ``redis-server`` when one is installed (otherwise fakeredis' embedded TCP server), the simulator
and ``--workers`` worker processes (``captcha-worker run``), then submits ``--tasks`` tasks of mixed kinds as a
producer, shows progress, and prints what happened: throughput, latency, API calls per solve, and the most
concurrent solves the simulated plan saw against its threads.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import re
import secrets
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from captcha_worker.client import CaptchaQueue, Expired, Failed, Outcome, Solved, TaskSpec
from captcha_worker.localredis import LocalRedis, redis_server_binary
from captcha_worker.output import Progress
from captcha_worker.service import LISTENING, PINGBACK_LISTENING, Site

#: kind mix of the demo workload: (weight, method, params)
MIX: tuple[tuple[int, str, dict[str, str]], ...] = (
    (40, "turnstile", {"sitekey": "0x4AAAAAAADemoSiteKey", "pageurl": "https://shop.example/login"}),
    (20, "userrecaptcha", {"googlekey": "6LeDemoGoogleKey_abcdefghijklmnopqrstuv", "pageurl": "https://example.com"}),
    (10, "userrecaptcha", {"googlekey": "6LeDemoGoogleKey_abcdefghijklmnopqrstuv", "pageurl": "https://example.com",
                           "version": "v3", "action": "login", "min_score": "0.7"}),
    (20, "base64", {"body": base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()}),
    (10, "geetest", {"gt": "022397c99c9f646f6477822485f30404", "challenge": "a66f31a53a4d6a2b5cbd3d2b8d7b1d0e",
                     "pageurl": "https://example.com/geetest"}),
)


@dataclass
class Stack:
    redis_url: str
    sim_url: str
    key: str
    logdir: str
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)
    metrics_ports: list[int] = field(default_factory=list)  # one per worker: its /metrics on 127.0.0.1


async def _start_redis(stack: Stack) -> str:
    """redis-server on a port it is checked to serve (LocalRedis), or fakeredis' embedded server on port 0."""
    if redis_server_binary():
        server = LocalRedis(dir=stack.logdir)
        stack.closers.append(server.close)  # closers run once every process (workers, simulator) has stopped
        await asyncio.to_thread(server.start)
        stack.redis_url = server.url
        return "redis-server"
    try:
        from fakeredis import TcpFakeServer  # noqa: PLC0415 - optional: the fallback when redis-server is missing
    except ImportError:
        raise RuntimeError("neither redis-server nor fakeredis[lua] is installed: run 'make demo' (installs "
                           "redis-server) or pip install 'fakeredis[lua]'") from None
    fake = TcpFakeServer(("127.0.0.1", 0), server_type="redis")  # bound here: the port is the one it got
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    stack.closers.append(fake.shutdown)
    stack.redis_url = f"redis://127.0.0.1:{fake.server_address[1]}/0"
    return "embedded fakeredis (redis-server not installed)"


def _log_of(stack: Stack, name: str) -> Path:
    return Path(stack.logdir) / f"{name}.log"


async def _spawn(stack: Stack, name: str, args: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    logfile = open(_log_of(stack, name), "wb")  # noqa: SIM115, ASYNC230 - owned by the child
    stack.closers.append(logfile.close)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "captcha_worker.cli", *args,
                                                env={**os.environ, **env}, stdout=logfile, stderr=logfile)
    stack.procs.append(proc)
    return proc


async def _listening(stack: Stack, name: str, proc: asyncio.subprocess.Process,
                     pattern: re.Pattern[bytes] = LISTENING, timeout: float = 30.0) -> re.Match[bytes]:
    """The ports a child started on port 0 bound, from its own `listening on` line (`port`, and a gateway's
    `metrics`): no port guessed, so nothing can take one first. Fails when the child exits before, or after
    `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        m = pattern.search(_log_of(stack, name).read_bytes())
        if m:
            return m
        if proc.returncode is not None or time.monotonic() > deadline:
            state = f"exited with code {proc.returncode}" if proc.returncode is not None else "did not listen"
            raise RuntimeError(f"{name} {state} within {timeout:.0f}s (its log: {_log_of(stack, name)})")
        await asyncio.sleep(0.05)


class _Service:
    """Worker 0's pingback Service in the demo's cluster: the URL every worker gives CaptchaAI (PINGBACK_URL) is
    this relay's, on a port the OS chose, and it forwards each callback to worker 0's receiver, which binds port 0
    and prints the port it got (`target`). So no port is guessed before the workers start."""

    def __init__(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._forward)
        self._site = Site(app, "127.0.0.1", 0, access_log=None)
        self._http: aiohttp.ClientSession | None = None
        self.target = ""

    async def start(self) -> str:
        await self._site.start()
        self._http = aiohttp.ClientSession()
        return self._site.url

    async def _forward(self, request: web.Request) -> web.Response:
        if self._http is None or not self.target:
            return web.Response(status=503)
        async with self._http.get(self.target + request.path_qs) as reply:
            return web.Response(status=reply.status, body=await reply.read())

    async def close(self) -> None:
        await self._site.stop()
        if self._http is not None:
            await self._http.close()


def _sim_stats(sim_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{sim_url}/_sim/stats", timeout=2) as resp:  # noqa: S310 - 127.0.0.1 only
        data: dict[str, Any] = json.load(resp)
        return data


@contextlib.asynccontextmanager
async def running_stack(ns: argparse.Namespace) -> AsyncIterator[tuple[Stack, str]]:
    """Redis, the simulator and `ns.workers` workers, each on a port it bound itself (the simulator's and the
    workers' read from their `listening on` lines); with `ns.pingback`, worker 0's receiver behind a relay."""
    logdir = tempfile.mkdtemp(prefix="captcha-demo-")
    stack = Stack("", "", secrets.token_hex(16), logdir)
    service = _Service() if getattr(ns, "pingback", False) else None
    try:
        redis_kind = await _start_redis(stack)
        sim = await _spawn(stack, "simulator", ["simulator", "--port", "0", "--threads", str(ns.threads),
                                                "--speed", str(ns.speed), "--over-cap", "zero_balance",
                                                "--fault", f"unsolvable={ns.unsolvable}", *_seed_args(ns)], {})
        stack.sim_url = f"http://127.0.0.1:{int((await _listening(stack, 'simulator', sim))['port'])}"
        env = {"REDIS_URL": stack.redis_url, "CAPTCHAAI_KEY": stack.key, "CAPTCHAAI_URL": stack.sim_url,
               "CAPTCHAAI_THREADS": str(ns.threads), "WORKER_CONCURRENCY": str(ns.concurrency),
               "API_TIME_SCALE": str(ns.speed), "LOG_LEVEL": "warning", "METRICS_HOST": "127.0.0.1",
               "METRICS_PORT": "0", "DRAIN_GRACE_SECONDS": "10"}
        if service is not None:  # every worker runs a receiver; the simulator calls worker 0's (as a Service would)
            env |= {"PINGBACK_URL": await service.start(), "PINGBACK_HOST": "127.0.0.1", "PINGBACK_PORT": "0"}
        workers = [await _spawn(stack, f"worker-{i}", ["run"], env) for i in range(ns.workers)]
        for i, proc in enumerate(workers):
            stack.metrics_ports.append(int((await _listening(stack, f"worker-{i}", proc))["port"]))
        if service is not None:  # no solve before the receiver listens: its first callbacks would be lost
            receiver = await _listening(stack, "worker-0", workers[0], PINGBACK_LISTENING)
            service.target = f"http://127.0.0.1:{int(receiver['port'])}"
        yield stack, redis_kind
    finally:
        # workers first (they drain), then the simulator, then Redis
        for proc in reversed(stack.procs):
            await _stop(proc)
        if service is not None:
            await service.close()
        for close in stack.closers:
            close()


def _seed_args(ns: argparse.Namespace) -> list[str]:
    """``--seed N`` for the simulator when the run asks for one (``ns.seed``): its solve times, ids and answers
    then repeat from run to run (bench.p7_planner's chance-band check needs that)."""
    seed = getattr(ns, "seed", None)
    return [] if seed is None else ["--seed", str(seed)]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 15)
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def _pick(rng: random.Random) -> TaskSpec:
    total = sum(w for w, _, _ in MIX)
    r = rng.uniform(0, total)
    for weight, method, params in MIX:
        r -= weight
        if r <= 0:
            return TaskSpec(method, params)
    return TaskSpec(MIX[0][1], MIX[0][2])


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def _produce(ns: argparse.Namespace, stack: Stack) -> tuple[list[Outcome], float]:
    rng = random.Random(7)
    async with CaptchaQueue.from_url(stack.redis_url) as q:
        started = time.monotonic()
        ids = await q.submit_many([_pick(rng) for _ in range(ns.tasks)])
        progress = Progress(len(ids), sys.stdout, label="solving ")
        outcomes: list[Outcome] = []
        async for outcome in q.as_completed(ids, timeout=max(120.0, ns.tasks * 2.0)):
            outcomes.append(outcome)
            progress.add(type(outcome).__name__.lower())
        progress.close()
        return outcomes, time.monotonic() - started


def summary(outcomes: list[Outcome], wall: float, sim: dict[str, Any], ns: argparse.Namespace,
            redis_kind: str) -> str:
    solved = [o for o in outcomes if isinstance(o, Solved)]
    failed = [o for o in outcomes if isinstance(o, Failed)]
    expired = [o for o in outcomes if isinstance(o, Expired)]
    totals = [o.total_s for o in solved if o.total_s is not None]
    codes: dict[str, int] = {}
    for f in failed:
        codes[f.code] = codes.get(f.code, 0) + 1
    calls = sim.get("calls", {})
    api_calls = sum(int(v) for k, v in calls.items() if k in {"in.php", "res.php"}) if isinstance(calls, dict) else 0
    rows = [
        ("tasks", f"{len(outcomes)} ({len(solved)} solved, {len(failed)} failed, {len(expired)} expired, "
                  f"{len(outcomes) - len(solved) - len(failed) - len(expired)} timed out)"),
        ("failures", ", ".join(f"{k}={v}" for k, v in sorted(codes.items())) or "none"),
        ("wall time", f"{wall:.1f} s"),
        ("throughput", f"{len(solved) / wall:.1f} solves/s"),
        ("latency p50 / p95", f"{_pct(totals, 50):.2f} s / {_pct(totals, 95):.2f} s (submit -> result)"),
        ("API calls / solve", f"{api_calls / max(1, len(solved)):.2f} (in.php + res.php, simulator count)"),
        ("max in flight", f"{sim.get('max_in_flight', '?')} of {ns.threads} plan threads "
                          f"({ns.workers} workers x {ns.concurrency} slots)"),
        ("plan utilisation", f"{100 * float(sim.get('utilisation', 0)):.0f} % of thread-time busy while the demo ran"),
        ("over-cap rejections", str(sim.get("over_cap_rejections", "?"))),
        *([("pingbacks", f"{sim.get('pingbacks_sent', '?')} delivered, {sim.get('pingbacks_failed', '?')} failed "
                         "(pingback mode: polls only as the fallback)")] if getattr(ns, "pingback", False) else []),
        ("setup", f"{redis_kind}; simulator speed x{ns.speed:g}"),
    ]
    width = max(len(k) for k, _ in rows)
    line = "+" + "-" * (width + 2) + "+" + "-" * 72 + "+"
    out = [line, f"| {'captcha-solver demo':<{width}} | {'':<70} |", line]
    out += [f"| {k:<{width}} | {v:<70} |" for k, v in rows]
    out.append(line)
    return "\n".join(out)


async def _demo(ns: argparse.Namespace) -> int:
    async with running_stack(ns) as (stack, redis_kind):
        print(f"demo: {redis_kind} at {stack.redis_url}, simulator at {stack.sim_url}, {ns.workers} workers "
              f"(logs in {stack.logdir})")
        outcomes, wall = await _produce(ns, stack)
        sim = _sim_stats(stack.sim_url)
    print(summary(outcomes, wall, sim, ns, redis_kind))
    solved = sum(isinstance(o, Solved) for o in outcomes)
    return 0 if solved >= 0.9 * ns.tasks else 1


def main(ns: argparse.Namespace) -> int:
    for name in ("tasks", "workers", "threads", "concurrency"):
        if getattr(ns, name) < 1:
            print(f"captcha-worker demo: --{name} must be >= 1", file=sys.stderr)
            return 2
    if ns.speed <= 0:
        print("captcha-worker demo: --speed must be > 0", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_demo(ns))
    except RuntimeError as exc:
        print(f"captcha-worker demo: {exc}", file=sys.stderr)
        return 1

