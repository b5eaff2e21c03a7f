"""Running a gateway: the API listener (plain HTTP, or TLS with ``GATEWAY_TLS_CERT_FILE``), the probe and metrics
listener (``METRICS_PORT``: ``/metrics``, ``/healthz``, ``/readyz``; kept off the API port so tenant names on
``/metrics`` never reach clients), the result reader, the in-flight scan and the callback sender.

Stateless: any number of replicas share one queue (results are read by whichever replica gets them; every poll
is answered from Redis). SIGTERM stops accepting connections and lets requests finish (5 s), then stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from captcha_worker import log
from captcha_worker.captchaai import CaptchaAI, RetryPolicy
from captcha_worker.client import CaptchaQueue
from captcha_worker.connection import connect
from captcha_worker.gateway import metrics as gm
from captcha_worker.gateway.app import REPLY_TO, Gateway
from captcha_worker.gateway.callbacks import Callbacks
from captcha_worker.gateway.config import GatewayConfig
from captcha_worker.gateway.jsonapi import JsonApi
from captcha_worker.gateway.keys import TenantKeyReloader, plan_key_loop, reload_loop
from captcha_worker.gateway.results import ResultReader, share_loop
from captcha_worker.gateway.tenants import Tenants
from captcha_worker.keyfile import KeyFileWatcher
from captcha_worker.metrics import ProbeServer
from captcha_worker.service import Site, on_signals
from captcha_worker.tls import tls_context

_log = logging.getLogger("captcha_worker.gateway")
_http_log = logging.getLogger("captcha_worker.gateway.http")


class GatewayServer:
    """``async with GatewayServer(cfg) as srv: srv.url``: the gateway on real sockets, with its loops."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.cfg = cfg
        self.url = ""
        self.metrics_port = 0
        self.gateway: Gateway | None = None
        self._closing = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stack = self._run()

    async def __aenter__(self) -> GatewayServer:
        await self._stack.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.__aexit__(None, None, None)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[None]:
        """Start everything, each part on the exit stack as soon as it runs: a start that fails half-way stops
        what it had started. Stopping: the loops are told first, the API stops accepting and lets requests finish
        (5 s; a solve.php waiting for its result still gets it from the reader), then the loops are awaited and the
        rest closes."""
        cfg = self.cfg
        async with AsyncExitStack() as stack:
            redis = connect(cfg.redis, client_name="captcha-gateway")
            stack.push_async_callback(redis.aclose)
            producer = CaptchaQueue(redis, queue=cfg.queue, producer_id=REPLY_TO, task_ttl=cfg.task_ttl_seconds,
                                    max_task_bytes=cfg.max_task_bytes, display_url=cfg.redis.display_url())
            stack.push_async_callback(producer.close)
            upstream = None
            if cfg.api_key:
                upstream = CaptchaAI(cfg.api_key, cfg.api_url, http_timeout_s=10,
                                     retry=RetryPolicy(transient_attempts=2))
                await stack.enter_async_context(upstream)
            callbacks = Callbacks(timeout_s=cfg.callback_timeout_seconds, attempts=cfg.callback_attempts)
            await callbacks.start()
            stack.push_async_callback(callbacks.stop)
            tenants = Tenants(cfg.tenants)
            gateway = self.gateway = Gateway(cfg, producer, tenants, upstream=upstream)
            gm.init((t.name, t.threads, t.reserved) for t in cfg.tenants)
            gm.READY.set(1)
            app = gateway.make_app()
            JsonApi(gateway).add_routes(app)
            probes = await stack.enter_async_context(
                ProbeServer(cfg.metrics_host, cfg.metrics_port, gateway.health.readiness, registry=gm.REGISTRY))
            stack.push_async_callback(self._join_loops)
            tls = tls_context(cfg.tls_cert_file, cfg.tls_key_file) if cfg.tls_cert_file else None
            api = await stack.enter_async_context(
                Site(app, cfg.host, cfg.port, tls=tls, access_log=None, shutdown_timeout=5.0,
                     logger=log.RequestErrorLogger(_http_log, "http_error")))
            stack.callback(self._closing.set)
            self.metrics_port, self.url = probes.port, api.url
            reader = ResultReader(gateway, callbacks)
            self._tasks = [asyncio.create_task(reader.run(self._closing)),
                           asyncio.create_task(share_loop(gateway, self._closing))]
            if cfg.secrets_dir:  # keys from a mounted Secret: a rotated key is taken without a restart
                self._tasks.append(asyncio.create_task(reload_loop(TenantKeyReloader(cfg, tenants), self._closing)))
            if upstream is not None and cfg.api_key_file:  # the plan's key from its Secret: rotated likewise
                watcher = KeyFileWatcher(cfg.api_key_file, cfg.api_key.value, upstream.set_key, holder="gateway")
                self._tasks.append(asyncio.create_task(plan_key_loop(watcher, cfg.key_reload_seconds,
                                                                     self._closing)))
            yield

    async def _join_loops(self) -> None:
        """The reader returns within its BLPOP's timeout (a result it popped is still handled); 3 s, then cancel."""
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=3)
            for t in stuck:
                t.cancel()


async def serve(cfg: GatewayConfig) -> None:
    """Serve until SIGTERM or SIGINT; prints one line with the URL."""
    stop = asyncio.Event()
    with on_signals(stop.set):
        async with GatewayServer(cfg) as server:
            print(f"captcha-worker gateway listening on {server.url} (metrics on port {server.metrics_port})",
                  flush=True)
            log.event(_log, "gateway_started", url=server.url, queue=cfg.queue, tenants=len(cfg.tenants),
                      shares={t.name: t.threads for t in cfg.tenants}, upstream_reports=bool(cfg.api_key))
            await stop.wait()
    log.event(_log, "gateway_stopped")
