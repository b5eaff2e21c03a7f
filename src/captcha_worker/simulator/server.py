"""Running the simulator on a real socket, plain HTTP or TLS (for clients that insist on https, such as
2captcha-python)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from types import TracebackType

from captcha_worker import log
from captcha_worker.service import Site, on_signals
from captcha_worker.simulator.app import Clock, Simulator
from captcha_worker.simulator.config import SimConfig
from captcha_worker.simulator.stats import SimStats

_log = logging.getLogger("captcha_worker.simulator")
_http_log = logging.getLogger("captcha_worker.simulator.http")


class SimulatorServer:
    """Runs a :class:`Simulator` on a real socket: ``async with SimulatorServer(cfg) as srv: srv.url``."""

    def __init__(self, config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0, *,
                 clock: Clock = time.monotonic, tls: ssl.SSLContext | None = None) -> None:
        self.simulator = Simulator(config, clock)
        self._host = host
        self._port = port
        self._tls = tls
        self._site: Site | None = None
        self.url = ""

    @property
    def port(self) -> int:
        return self._port

    def stats(self) -> SimStats:
        return self.simulator.stats()

    async def start(self) -> None:
        site = Site(self.simulator.make_app(), self._host, self._port, tls=self._tls, access_log=None,
                    shutdown_timeout=1.0, logger=log.RequestErrorLogger(_http_log, "simulator.http_error"))
        await site.start()
        self._site, self._port, self.url = site, site.port, site.url

    async def stop(self) -> None:
        if self._site is not None:
            site, self._site = self._site, None
            await site.stop()

    async def __aenter__(self) -> SimulatorServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()


async def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 8080, *,
                tls: ssl.SSLContext | None = None) -> None:
    """Serves until cancelled, SIGTERM or SIGINT; prints one line with the URL."""
    stop = asyncio.Event()
    try:
        with on_signals(stop.set):
            async with SimulatorServer(config, host, port, tls=tls) as server:
                print(f"captcha-worker simulator listening on {server.url}", flush=True)
                log.event(_log, "simulator.started", url=server.url, threads=config.threads, speed=config.speed,
                          over_cap=config.over_cap.value, keys="any" if config.keys is None else len(config.keys))
                await stop.wait()
    finally:
        log.event(_log, "simulator.stopped")
