"""One lifecycle for the package's network services: an aiohttp application on a real socket (:class:`Site`) and
the stop signals (:func:`on_signals`).

``Site`` is aiohttp's ``web_runner`` (``AppRunner`` + ``TCPSite``) as one async context manager: set up, listening,
and cleaned up on exit *or when listening fails* (``__aexit__`` is not called when ``__aenter__`` raises, so a
port in use must not leave the runner set up). aiohttp's own signal handling is always off: a process installs
its handlers once, with :func:`on_signals`, and removes them when it stops. The worker's probes
(``metrics.ProbeServer``), the pingback receiver, the gateway and the simulator all run on it.
"""

from __future__ import annotations

import asyncio
import re
import signal
import ssl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from aiohttp import web

#: the line a service prints once its socket is bound (the simulator, the gateway: `... listening on URL (metrics on
#: port N)`, a worker's probes: `metrics listening on URL`): a child started on port 0 says which port it got
LISTENING = re.compile(rb"listening on (?P<url>https?://\S+:(?P<port>\d+))(?: \(metrics on port (?P<metrics>\d+)\))?")
#: a worker's pingback receiver (PINGBACK_PORT=0), printed after its metrics line
PINGBACK_LISTENING = re.compile(rb"pingback listening on (?P<url>https?://\S+:(?P<port>\d+))")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Site:
    """``async with Site(app, host, port) as site: site.port``: `app` listening on `host:port` (0: a port the OS
    chooses, read back), over TLS when `tls` is given. `runner_options` go to ``web.AppRunner``
    (``access_log``, ``shutdown_timeout``, ``logger``, ``max_line_size``, ...)."""

    def __init__(self, app: web.Application, host: str, port: int, *, tls: ssl.SSLContext | None = None,
                 **runner_options: Any) -> None:
        self.app, self.host, self.port, self.tls = app, host, port, tls
        self._options = runner_options
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        runner = web.AppRunner(self.app, handle_signals=False, **self._options)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, ssl_context=self.tls).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening and let requests in progress finish (``shutdown_timeout``). Idempotent."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @property
    def url(self) -> str:
        """How a client on this machine reaches it: ``http(s)://host:port`` (a wildcard host shown as 127.0.0.1)."""
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104 - only how it is shown
        shown = f"[{shown}]" if ":" in shown else shown
        return f"{'https' if self.tls else 'http'}://{shown}:{self.port}"

    async def __aenter__(self) -> Site:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextmanager
def on_signals(handler: Callable[[], None], signals: Sequence[signal.Signals] = STOP_SIGNALS) -> Iterator[None]:
    """Call `handler` on each of `signals` while inside; the handlers are removed on the way out. Where none can be
    installed (not the main thread, or no signal support) this does nothing: the caller stops some other way."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in signals:
        with suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
