"""Processes the tests start: redis-server, `captcha-worker run` workers and `captcha-worker simulator`
(`from tests.procs import ...`). Each is stopped by its own handle, never by name."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import redis as sync_redis
from aiohttp import web

from captcha_worker.localredis import LocalRedis
from tests.helpers import PINGBACK_LISTENING, ROOT, cli_env, wait_listening


@dataclass
class RedisServer(LocalRedis):
    """A real redis-server on a free port, with AOF (fsync always) so a restart keeps the data (`persistent=False`:
    none, as the benchmarks run it). The one redis starter of the tests, the chaos suite and the benchmarks."""

    persistent: bool = True
    client_kwargs: dict[str, Any] = field(default_factory=dict)  # how to reach it (TLS, password) for the ping

    def client(self, **kwargs: Any) -> sync_redis.Redis:
        """A synchronous admin client of this server (close it)."""
        return sync_redis.Redis(host="127.0.0.1", port=self.port, **{**self.client_kwargs, **kwargs})

    def _ping_client(self) -> sync_redis.Redis:
        return self.client()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class WorkerProc:
    """One `captcha-worker run` process; `start()` again after a kill starts a new one (logs are kept). Its probe
    server binds port 0: `metrics_port` waits for the child's own `metrics listening on` line (no port race)."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path) -> None:
        self.name, self.env, self.logdir = name, env, logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._metrics_port = 0
        self._pingback_port = 0

    @property
    def log(self) -> Path:
        """The log of the current (last) start."""
        return self.logdir / f"{self.name}.{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        self._metrics_port = self._pingback_port = 0
        log = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"],
                                     env=cli_env(**{"METRICS_HOST": "127.0.0.1", **self.env, "METRICS_PORT": "0"}),
                                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

    @property
    def metrics_port(self) -> int:
        """The port of /metrics, /healthz, /readyz of the current start (waits for the child to bind it)."""
        if not self._metrics_port:
            assert self.proc is not None, f"{self.name} was never started"
            self._metrics_port = int(wait_listening(self.proc, self.log, f"worker {self.name}")["port"])
        return self._metrics_port

    @property
    def pingback_port(self) -> int:
        """The port its pingback receiver bound (started with PINGBACK_URL and PINGBACK_PORT=0): waits for the
        child's `pingback listening on` line, as `metrics_port` does."""
        if not self._pingback_port:
            assert self.proc is not None, f"{self.name} was never started"
            self._pingback_port = int(wait_listening(self.proc, self.log, f"worker {self.name}'s pingback receiver",
                                                     pattern=PINGBACK_LISTENING)["port"])
        return self._pingback_port

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logdir.glob(f"{self.name}.*.log")))

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines of every run of this worker (optionally only events called `name`)."""
        out = []
        for line in self.logs().splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and (name is None or data.get("event") == name):
                out.append(data)
        return out

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """The value of one series on /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.compile(rf"^{re.escape(name)}(\{{([^}}]*)\}})? (\S+)$", re.M)
        total = 0.0
        for m in pattern.finditer(self.http("/metrics")[1]):
            got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
            if not labels or got == want:
                total += float(m.group(3))
        return total


@contextmanager
def workers(n: int, env: dict[str, str], logdir: Path) -> Iterator[list[WorkerProc]]:
    procs = [WorkerProc(f"w{i}", env, logdir) for i in range(n)]
    for p in procs:
        p.start()
    try:
        yield procs
    finally:
        for p in procs:
            if p.alive():
                p.signal(signal.SIGKILL)
                p.wait(10)


class SimProc:
    """`captcha-worker simulator` as a process on port 0 (its `listening on` line names the port), configured and
    read over its /_sim/ endpoints."""

    def __init__(self, logdir: Path, *args: str, name: str = "simulator", env: dict[str, str] | None = None) -> None:
        path = logdir / f"{name}.log"
        self.log = open(path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "simulator", "--port", "0", *args],
                                     env=cli_env(**(env or {})), stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            self.port = int(wait_listening(self.proc, path, name)["port"])
        except RuntimeError:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/_sim/{path}", data=data, method="GET" if data is None else "POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            result: dict[str, Any] = json.loads(resp.read() or b"{}")
            return result

    def configure(self, **patch: Any) -> None:
        self._call("config", patch)

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def reset(self) -> None:
        """Counters cleared, the observation window restarted (the maximum starts from the solves in flight)."""
        self._call("reset", {})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


@contextmanager
def simulator(logdir: Path, *args: str) -> Iterator[SimProc]:
    sim = SimProc(logdir, *args)
    try:
        yield sim
    finally:
        sim.stop()


class GatewayProc:
    """One `captcha-worker gateway` process on ports 0 (`url`, `metrics_port` from its `listening on` line); `env`
    completes the config."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path, *, tls: bool = False) -> None:
        self.name, self.env, self.logdir, self.tls = name, env, logdir, tls
        self.port = self.metrics_port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> GatewayProc:
        path = self.logdir / f"{self.name}.log"
        offset = path.stat().st_size if path.exists() else 0  # a restart appends: wait for its own line
        with open(path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "gateway"],
                                         env=cli_env(**self.env, GATEWAY_HOST="127.0.0.1", GATEWAY_PORT="0",
                                                     METRICS_HOST="127.0.0.1", METRICS_PORT="0"),
                                         stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            m = wait_listening(self.proc, path, f"gateway {self.name}", offset=offset)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"gateway {self.name} did not start: {exc}") from None
        self.port, self.metrics_port = int(m["port"]), int(m["metrics"])
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def logs(self) -> str:
        path = self.logdir / f"{self.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the series of `name` whose labels include `labels` (0 when absent)."""
        total = 0.0
        for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", self.metrics(), re.M):
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total


@contextmanager
def gateways(specs: list[tuple[str, bool]], env: dict[str, str], logdir: Path) -> Iterator[list[GatewayProc]]:
    """Gateway processes, one per (name, tls); stopped (SIGTERM, then SIGKILL) on exit."""
    procs: list[GatewayProc] = []
    try:
        for name, tls in specs:
            procs.append(GatewayProc(name, env, logdir, tls=tls).start())
        yield procs
    finally:
        for p in procs:
            p.stop()


@dataclass
class Stack:
    """A running system, all processes: its own redis-server, `captcha-worker simulator` and `captcha-worker run`
    workers (`worker_env`: what they were started with, for a CLI run against the same queue)."""

    redis: RedisServer
    sim: SimProc
    workers: list[WorkerProc]
    worker_env: dict[str, str]

    @property
    def redis_url(self) -> str:
        return self.redis.url

    @property
    def sim_url(self) -> str:
        return self.sim.url

    def sim_config(self, **patch: Any) -> None:
        self.sim.configure(**patch)

    def total(self, name: str, **labels: str) -> float:
        """The sum over the live workers of one series on their /metrics."""
        return sum(w.metric(name, **labels) for w in self.workers if w.alive())


@contextmanager
def stack(logdir: Path, sim_args: list[str], env: dict[str, str],
          per_worker: list[dict[str, str]]) -> Iterator[Stack]:
    """A Stack in `logdir`: the simulator with `sim_args`, one worker per entry of `per_worker` (its own settings
    over `env`, which is completed with REDIS_URL and CAPTCHAAI_URL). The workers are running and listening when the
    block starts; on exit they get SIGTERM (a drain), then the simulator and the redis-server stop."""
    redis = RedisServer(dir=str(logdir))
    redis.start()
    try:
        with simulator(logdir, *sim_args) as sim:
            full = {**env, "REDIS_URL": redis.url, "CAPTCHAAI_URL": sim.url}
            procs = [WorkerProc(f"w{i}", {**full, **own}, logdir) for i, own in enumerate(per_worker)]
            try:
                for w in procs:
                    w.start()
                for w in procs:
                    assert w.metrics_port  # waits for its `metrics listening on` line
                yield Stack(redis, sim, procs, full)
            finally:
                for w in procs:
                    if w.alive():
                        w.signal(signal.SIGTERM)
                for w in procs:
                    if w.proc is not None:
                        try:
                            w.wait(20)
                        except subprocess.TimeoutExpired:
                            w.signal(signal.SIGKILL)
                            w.wait(5)
    finally:
        redis.stop()


@dataclass
class Relay:
    """The network between the simulator and a worker's pingback receiver: a GET relay in a thread of its own, on
    port 0 (`url`), so a worker's PINGBACK_URL is known before the worker starts and its receiver binds port 0
    (`target` set from `WorkerProc.pingback_port`). Forwards each callback to `target` `copies` times (0: dropped,
    answered 200), after `forged` extra calls with a wrong token and an unknown handle; records what it relayed."""

    target: str = ""
    copies: int = 1
    forge: bool = False
    port: int = 0  # bound on port 0 by start(): the one the OS chose
    seen: list[dict[str, str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        assert ready.wait(10)

    def _serve(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._relay)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        self.port = int(runner.addresses[0][1])
        ready.set()
        loop.run_forever()

    async def _relay(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.seen.append(query)
        async with aiohttp.ClientSession() as session:
            if self.forge:
                forged = {**query, "t": query["t"][:-4] + "AAAA"}
                await self._get(session, f"{request.path}?{urlencode(forged)}")
                other = request.path.rsplit("/", 1)[0] + "/" + "Z" * 16
                await self._get(session, f"{other}?{urlencode(query)}")
            status = 200
            for _ in range(self.copies):
                status = await self._get(session, request.path_qs)
        return web.Response(status=status)

    async def _get(self, session: aiohttp.ClientSession, path_qs: str) -> int:
        try:
            async with session.get(self.target + path_qs) as resp:
                self.statuses.append(resp.status)
                return resp.status
        except aiohttp.ClientError:
            self.statuses.append(502)
            return 502
