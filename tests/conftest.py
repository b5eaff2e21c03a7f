"""Shared fixtures: a real redis-server per session (started here), fakeredis, processes of our own CLI."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis as sync_redis
from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run 'make test' (scripts/install-tools.sh installs it)")
    return binary


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


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A client of the real server, on a clean database."""
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        redis_server.start()
    client = Redis.from_url(redis_server.url, decode_responses=True)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def fake_redis() -> AsyncIterator[Redis]:
    import fakeredis

    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=["fakeredis", "redis-server"])
async def any_redis(request: pytest.FixtureRequest, redis_server: RedisServer) -> AsyncIterator[Redis]:
    """The same test against fakeredis and against the real redis-server."""
    if request.param == "fakeredis":
        import fakeredis

        client: Redis = fakeredis.FakeAsyncRedis(decode_responses=True)
    else:
        if redis_server.proc is None or redis_server.proc.poll() is not None:
            redis_server.start()
        client = Redis.from_url(redis_server.url, decode_responses=True)
        await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


def cli_env(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CAPTCHAAI_", "REDIS_", "WORKER_", "QUEUE_"))}
    base.update(env)
    return base


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "captcha_worker.cli", *args], env=cli_env(**(env or {})),
                          input=input, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


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
