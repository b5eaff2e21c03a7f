"""Shared fixtures: a real redis-server per session (started here), fakeredis, processes of our own CLI."""

from __future__ import annotations

import inspect
import json
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import SimpleNamespace

import aioresponses.core as core
import fakeredis
import pytest
from aiohttp import ClientResponse
from redis.asyncio import Redis

from tests.helpers import KEY, ROOT, cli_env, free_port, wait_port
from tests.procs import RedisServer


@pytest.hookimpl(trylast=True)  # after tests/chaos/conftest.py has marked its tests chaos
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test outside the fast tier (marked integration, chaos or release) is also `slow`: `-m "not slow"` =
    fast."""
    for item in items:
        if any(item.get_closest_marker(m) for m in ("integration", "chaos", "release")):
            item.add_marker(pytest.mark.slow)


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

    if "stream_writer" not in inspect.signature(ClientResponse.__init__).parameters:
        return

    class _Response(ClientResponse):
        def __init__(self, method: str, url: object, **kwargs: object) -> None:
            kwargs.setdefault("stream_writer", SimpleNamespace(output_size=0))
            super().__init__(method, url, **kwargs)  # type: ignore[arg-type]

    core.ClientResponse = _Response  # type: ignore[attr-defined]  # not re-exported by aioresponses.core


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
        req = urllib.request.Request(f"{self.sim_url}/_sim/config", data=json.dumps(patch).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
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
           "CAPTCHAAI_THREADS": "20", "WORKER_CONCURRENCY": "10", "API_TIME_SCALE": "20",
           "METRICS_HOST": "127.0.0.1"}  # LEASE_SECONDS: the default 30 s (no test of the stack kills a worker)
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
