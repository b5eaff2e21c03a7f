"""Pingbacks: when a task that named a ``pingback`` URL is solved, the simulator GETs
``URL?id=<id>&code=<answer>`` (plus ``&user_agent=<ua>`` for the kinds answered with one; ``code`` is
``ERROR_CAPTCHA_UNSOLVABLE`` when it could not be solved). The other query parameters of the URL are kept.
Deliveries run in the background, at most :attr:`Pingbacks.CONCURRENCY` at a time, each bounded by
:attr:`Pingbacks.TIMEOUT_S`, without following redirects and without retries; a non-2xx answer counts as failed.
Only the task id, the receiver's host and the outcome are logged, never the URL's query (it carries the answer)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

import aiohttp
from yarl import URL

from captcha_worker import log
from captcha_worker.methods import Answer

_log = logging.getLogger("captcha_worker.simulator")


class Pingbacks:
    TIMEOUT_S: Final = 5.0
    CONCURRENCY: Final = 32

    def __init__(self, report: Callable[[bool], None]) -> None:
        self._report = report  # called with True (2xx) or False for each delivery
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(self.CONCURRENCY)
        self._running: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.TIMEOUT_S),
                                              headers={"User-Agent": "captcha-worker-simulator"})

    async def stop(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def send(self, task_id: int, url: str, solution: Answer | None) -> None:
        """Delivers the outcome of a task in the background (``solution`` None: it was unsolvable)."""
        query = {"id": str(task_id), "code": solution.request if solution else "ERROR_CAPTCHA_UNSOLVABLE"}
        if solution is not None and solution.user_agent is not None:
            query["user_agent"] = solution.user_agent
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._session is None or loop is None:
            self._report(False)  # not serving (a Simulator used without its app)
            return
        task = loop.create_task(self._deliver(task_id, URL(url).update_query(query)))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _deliver(self, task_id: int, url: URL) -> None:
        assert self._session is not None
        outcome: dict[str, object] = {}
        async with self._slots:
            try:
                async with self._session.get(url, allow_redirects=False) as resp:
                    if not 200 <= resp.status < 300:
                        outcome["status"] = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                outcome["error"] = type(exc).__name__
        self._report(not outcome)
        if outcome:
            log.event(_log, "simulator.pingback_failed", logging.WARNING, task=task_id, host=url.host, **outcome)
