"""Outgoing HTTP calls made in the background (the simulator's pingbacks, the gateway's callbacks): one aiohttp
session, at most ``concurrency`` calls at once, every call a task that :meth:`BackgroundCalls.stop` cancels."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import aiohttp


class BackgroundCalls:
    def __init__(self, *, timeout_s: float, concurrency: int, user_agent: str, force_close: bool = False) -> None:
        self._timeout_s, self._user_agent, self._force_close = timeout_s, user_agent, force_close
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self._running: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> int:
        """Calls started and not finished (waiting for a slot included)."""
        return len(self._running)

    async def start(self) -> None:
        # force_close: no connection is reused (a connection is made to an address checked for that call only)
        connector = aiohttp.TCPConnector(force_close=self._force_close, use_dns_cache=not self._force_close)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                                              connector=connector, headers={"User-Agent": self._user_agent})

    async def stop(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def spawn(self, call: Coroutine[Any, Any, None]) -> bool:
        """Run `call` in the background; False (and `call` closed) when not serving (no session or no loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._session is None or loop is None:
            call.close()
            return False
        task = loop.create_task(call)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return True
