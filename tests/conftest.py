"""Shared fixtures: a real redis-server per session (started here), fakeredis, processes of our own CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pytest
import redis as sync_redis
from helpers import free_port, redis_server_binary, wait_port
from redis.asyncio import Redis


@dataclass
class RedisServer:
    """A real redis-server on a free port, with AOF so a restart keeps the data."""

    port: int
    dir: str
    proc: subprocess.Popen[bytes] | None = None
    extra: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        client = sync_redis.Redis(port=self.port)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except sync_redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="captcha-test-redis-") as d:
        server = RedisServer(free_port(), d)
        server.start()
        try:
            yield server
        finally:
            server.stop()


async def _client(kind: str, server: RedisServer) -> Redis:
    if kind == "fakeredis":
        import fakeredis

        return fakeredis.FakeAsyncRedis(decode_responses=True)
    if server.proc is None or server.proc.poll() is not None:
        server.start()  # a test restarted or stopped it
    client = Redis.from_url(server.url, decode_responses=True)
    await client.flushall()
    return client


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A client of the real server, on a clean database."""
    client = await _client("redis-server", redis_server)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=["fakeredis", "redis-server"])
async def any_redis(request: pytest.FixtureRequest, redis_server: RedisServer) -> AsyncIterator[Redis]:
    """The same test against fakeredis and against the real redis-server."""
    client = await _client(request.param, redis_server)
    try:
        yield client
    finally:
        await client.aclose()


def _aioresponses_compat() -> None:
    """aioresponses 0.7.9 predates aiohttp 3.14, whose ClientResponse requires `stream_writer`."""
    import inspect
    from types import SimpleNamespace

    import aioresponses.core as core
    from aiohttp import ClientResponse

    if "stream_writer" not in inspect.signature(ClientResponse.__init__).parameters:
        return

    class _Response(ClientResponse):
        def __init__(self, method: str, url: object, **kwargs: object) -> None:
            kwargs.setdefault("stream_writer", SimpleNamespace(output_size=0))
            super().__init__(method, url, **kwargs)  # type: ignore[arg-type]

    core.ClientResponse = _Response  # type: ignore[misc]


_aioresponses_compat()


@dataclass
class Stack:
    """A running system for producer and CLI tests: its own redis-server, the simulator and two workers,
    all as processes (`captcha-worker simulator`, `captcha-worker run`)."""

    redis: RedisServer
    sim_url: str
    worker_env: dict[str, str]
    procs: list[subprocess.Popen[bytes]]

    @property
    def redis_url(self) -> str:
        return self.redis.url

    def sim_config(self, **patch: object) -> None:
        import json
        import urllib.request

        req = urllib.request.Request(f"{self.sim_url}/_sim/config", data=json.dumps(patch).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from helpers import KEY, ROOT, cli_env

    d = tmp_path_factory.mktemp("stack")
    server = RedisServer(free_port(), str(d))
    server.start()
    sim_port = free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(name: str, args: list[str], env: dict[str, str]) -> None:
        with open(d / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", *args], env=cli_env(**env),
                                          stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))

    spawn("simulator", ["simulator", "--port", str(sim_port), "--threads", "20", "--speed", "20", "--seed", "1"], {})
    wait_port(sim_port)
    env = {"REDIS_URL": server.url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": f"http://127.0.0.1:{sim_port}",
           "CAPTCHAAI_THREADS": "20", "WORKER_CONCURRENCY": "10", "API_TIME_SCALE": "20", "LEASE_SECONDS": "3",
           "METRICS_HOST": "127.0.0.1"}
    for i in range(2):
        spawn(f"worker{i}", ["run"], {**env, "METRICS_PORT": str(free_port())})
    try:
        yield Stack(server, f"http://127.0.0.1:{sim_port}", env, procs)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        server.stop()
