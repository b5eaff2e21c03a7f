"""Shared fixtures: a real redis-server per session (started here), fakeredis, processes of our own CLI."""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import aioresponses.core as core
import fakeredis
import hypothesis
import pytest
from aiohttp import ClientResponse
from redis.asyncio import Redis

from tests.helpers import worker_env
from tests.procs import RedisServer, Stack
from tests.procs import stack as procs_stack

# Hypothesis times its own input generation in wall clock (the too_slow health check): a loaded machine failed
# make test on it (41 s for one draw at load 42), which says nothing about the code under test. Tests that set
# suppress_health_check themselves list too_slow too.
hypothesis.settings.register_profile("suite", suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("suite")


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
        server = RedisServer(dir=d)
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The simulator (20 threads, --speed 20) and two workers, for producer and CLI tests. LEASE_SECONDS: the
    default 30 s (no test of the stack kills a worker)."""
    with procs_stack(tmp_path_factory.mktemp("stack"), ["--threads", "20", "--speed", "20", "--seed", "1"],
                     worker_env("", "", CAPTCHAAI_THREADS="20", WORKER_CONCURRENCY="10"), [{}, {}]) as s:
        yield s
