"""Running the simulator on a real socket, plain HTTP or TLS (for clients that insist on https, such as
2captcha-python)."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import time
from contextlib import suppress
from types import TracebackType

from aiohttp import web

from captcha_worker import log
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
        self._runner: web.AppRunner | None = None
        self.url = ""

    @property
    def port(self) -> int:
        return self._port

    def stats(self) -> SimStats:
        return self.simulator.stats()

    async def start(self) -> None:
        runner = web.AppRunner(self.simulator.make_app(), access_log=None, handle_signals=False,
                               shutdown_timeout=1.0,
                               logger=log.RequestErrorLogger(_http_log, "simulator.http_error"))
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port, ssl_context=self._tls).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"{'https' if self._tls else 'http'}://{host}:{self._port}"

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

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
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        async with SimulatorServer(config, host, port, tls=tls) as server:
            print(f"captcha-worker simulator listening on {server.url}", flush=True)
            log.event(_log, "simulator.started", url=server.url, threads=config.threads, speed=config.speed,
                      over_cap=config.over_cap.value, keys="any" if config.keys is None else len(config.keys))
            await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        log.event(_log, "simulator.stopped")
