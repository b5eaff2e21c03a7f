"""Processes the tests start: redis-server, `captcha-worker run` workers and `captcha-worker simulator`
(`from tests.procs import ...`). Each is stopped by its own handle, never by name."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis as sync_redis

from captcha_worker.localredis import LocalRedis
from tests.helpers import ROOT, cli_env, free_port, wait_port


@dataclass
class RedisServer(LocalRedis):
    """A real redis-server on a free port, with AOF (fsync always) so a restart keeps the data."""

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
    """One `captcha-worker run` process; `start()` again after a kill starts a new one (logs are kept)."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path) -> None:
        self.name, self.env, self.logdir = name, env, logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.metrics_port = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.logdir / f"{self.name}.{self.starts}.log", "wb")
        self.metrics_port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"],
                                     env=cli_env(**self.env, METRICS_PORT=str(self.metrics_port),
                                                 METRICS_HOST="127.0.0.1"),
                                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

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
    """`captcha-worker simulator` as a process, configured and read over its /_sim/ endpoints."""

    def __init__(self, logdir: Path, *args: str) -> None:
        self.port = free_port()
        self.log = open(logdir / "simulator.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "simulator", "--port",
                                      str(self.port), *args], env=cli_env(), stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=ROOT)
        wait_port(self.port)

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
    """One `captcha-worker gateway` process on free ports (`url`, `metrics_port`); `env` completes the config."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path, *, tls: bool = False) -> None:
        self.name, self.env, self.logdir, self.tls = name, env, logdir, tls
        self.port, self.metrics_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> GatewayProc:
        with open(self.logdir / f"{self.name}.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "gateway"],
                                         env=cli_env(**self.env, GATEWAY_HOST="127.0.0.1", GATEWAY_PORT=str(self.port),
                                                     METRICS_HOST="127.0.0.1", METRICS_PORT=str(self.metrics_port)),
                                         stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_port(self.metrics_port)
            wait_port(self.port)
        except RuntimeError:
            raise RuntimeError(f"gateway {self.name} did not start:\n{self.logs()[-3000:]}") from None
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
