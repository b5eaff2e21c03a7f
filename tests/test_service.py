"""The one service lifecycle (``captcha_worker.service``): a Site on a real socket, the stop signals, and the
gateway's start, which stops everything it had started when a later step fails."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from captcha_worker.captchaai import CaptchaAI
from captcha_worker.connection import Client
from captcha_worker.connection import connect as real_connect
from captcha_worker.gateway import GatewayConfig, GatewayServer
from captcha_worker.gateway import server as gateway_server
from captcha_worker.gateway.callbacks import Callbacks
from captcha_worker.service import Site, on_signals

KEY = "A" * 16 + "a" * 16


def _app() -> web.Application:
    app = web.Application()

    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hi")

    app.router.add_get("/", hello)
    return app


async def test_a_site_listens_on_the_port_the_os_chose_and_stops_once() -> None:
    async with Site(_app(), "127.0.0.1", 0) as site, aiohttp.ClientSession() as http:
        assert site.port > 0 and site.url == f"http://127.0.0.1:{site.port}"
        async with http.get(site.url) as r:
            assert await r.text() == "hi"
        await site.stop()
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(site.url)
    await site.stop()  # idempotent (the context's exit stopped it again)


async def test_a_site_whose_port_is_taken_raises_and_leaves_nothing_set_up() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        site = Site(_app(), "127.0.0.1", taken.getsockname()[1])
        with pytest.raises(OSError):
            await site.start()
        assert site._runner is None
    assert Site(_app(), "0.0.0.0", 8080).url == "http://127.0.0.1:8080"
    assert Site(_app(), "::1", 8080).url == "http://[::1]:8080"


async def test_signal_handlers_are_installed_while_inside_and_removed_after() -> None:
    loop = asyncio.get_running_loop()
    got = asyncio.Event()
    with on_signals(got.set, (signal.SIGUSR1,)):
        signal.raise_signal(signal.SIGUSR1)
        await asyncio.wait_for(got.wait(), 5)
    assert not loop.remove_signal_handler(signal.SIGUSR1)  # False: none was left installed


def _config(redis_url: str, **env: str) -> GatewayConfig:
    doc = {"tenants": [{"name": "team-a", "key": KEY, "threads": 1}]}
    return GatewayConfig.from_env({"REDIS_URL": redis_url, "QUEUE_NAME": "svc", "GATEWAY_TENANTS": json.dumps(doc),
                                   "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": "0", "METRICS_HOST": "127.0.0.1",
                                   "METRICS_PORT": "0", **env})


class _Watch:
    """What the gateway's start opened, and whether its stop closed it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.redis_closed = self.callbacks_stopped = 0
        self.listeners: list[asyncio.Server] = []  # every socket a site started listening on
        real_stop, real_listen = Callbacks.stop, web.TCPSite.start
        watch = self

        def connect(*args: Any, **kwargs: Any) -> Client:
            client = real_connect(*args, **kwargs)
            real_close = client.aclose

            async def aclose(*a: Any, **k: Any) -> None:
                watch.redis_closed += 1
                await real_close(*a, **k)

            client.aclose = aclose  # type: ignore[method-assign]
            return client

        async def stop(self: Callbacks) -> None:
            watch.callbacks_stopped += 1
            await real_stop(self)

        async def listen(self: web.TCPSite) -> None:
            await real_listen(self)
            server = self._server
            assert isinstance(server, asyncio.Server)
            watch.listeners.append(server)

        monkeypatch.setattr(gateway_server, "connect", connect)
        monkeypatch.setattr(Callbacks, "stop", stop)
        monkeypatch.setattr(web.TCPSite, "start", listen)


async def test_a_gateway_whose_upstream_client_fails_to_start_closes_what_it_opened(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """GatewayServer._run started the callback sender and opened Redis before its try: a failure of the upstream
    client's start (or of anything before the listeners) left them open."""
    watch = _Watch(monkeypatch)

    async def broken(self: CaptchaAI) -> CaptchaAI:
        raise RuntimeError("upstream client cannot start")

    monkeypatch.setattr(CaptchaAI, "__aenter__", broken)
    with pytest.raises(RuntimeError, match="upstream client cannot start"):
        async with GatewayServer(_config(redis_server.url, CAPTCHAAI_KEY="0123456789abcdef0123456789abcdef")):
            pytest.fail("started")  # pragma: no cover
    assert watch.redis_closed == 1


async def test_a_gateway_whose_api_port_is_taken_stops_its_probes_and_closes_the_rest(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = _Watch(monkeypatch)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = _config(redis_server.url, GATEWAY_PORT=str(taken.getsockname()[1]))  # METRICS_PORT 0
        with pytest.raises(OSError):
            async with GatewayServer(cfg):
                pytest.fail("started")  # pragma: no cover
    assert (watch.callbacks_stopped, watch.redis_closed) == (1, 1)
    assert len(watch.listeners) == 1, "the probe listener starts before the API's"
    assert not watch.listeners[0].is_serving(), "the probe listener was left open"
