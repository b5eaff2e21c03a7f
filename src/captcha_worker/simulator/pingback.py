"""Pingbacks: when a task that named a ``pingback`` URL is solved, the simulator GETs
``URL?id=<id>&code=<answer>`` (plus ``&user_agent=<ua>`` for the kinds answered with one; ``code`` is
``ERROR_CAPTCHA_UNSOLVABLE`` when it could not be solved). The other query parameters of the URL are kept.
Deliveries run in the background, at most :attr:`Pingbacks.CONCURRENCY` at a time, each bounded by
:attr:`Pingbacks.TIMEOUT_S`, without following redirects and without retries; a non-2xx answer counts as failed.
Only the task id, the receiver's host and the outcome are logged, never the URL's query (it carries the answer).
A JSON-API ``callbackUrl`` is POSTed the task's getTaskResult body (with its ``taskId``) instead (:meth:`post`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final

import aiohttp
from yarl import URL

from captcha_worker import log
from captcha_worker.calls import BackgroundCalls
from captcha_worker.methods import Answer

_log = logging.getLogger("captcha_worker.simulator")


class Pingbacks(BackgroundCalls):
    TIMEOUT_S: Final = 5.0
    CONCURRENCY: Final = 32

    def __init__(self, report: Callable[[bool], None]) -> None:
        super().__init__(timeout_s=self.TIMEOUT_S, concurrency=self.CONCURRENCY, user_agent="captcha-worker-simulator")
        self._report = report  # called with True (2xx) or False for each delivery

    def send(self, task_id: int, url: str, answer: Answer | None) -> None:
        """Delivers the outcome of a task in the background (``answer`` None: it was unsolvable)."""
        query = {"id": str(task_id), "code": answer.request if answer else "ERROR_CAPTCHA_UNSOLVABLE"}
        if answer is not None and answer.user_agent is not None:
            query["user_agent"] = answer.user_agent
        if not self.spawn(self._deliver(task_id, URL(url).update_query(query))):
            self._report(False)  # not serving (a Simulator used without its app)

    def post(self, task_id: int, url: str, body: Mapping[str, object]) -> None:
        """POSTs a JSON-API task's result body to its callbackUrl in the background."""
        if not self.spawn(self._deliver(task_id, URL(url), body)):
            self._report(False)

    async def _deliver(self, task_id: int, url: URL, body: Mapping[str, object] | None = None) -> None:
        assert self._session is not None
        outcome: dict[str, object] = {}
        async with self._slots:
            try:
                request = (self._session.get(url, allow_redirects=False) if body is None
                           else self._session.post(url, json=dict(body), allow_redirects=False))
                async with request as resp:
                    if not 200 <= resp.status < 300:
                        outcome["status"] = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                outcome["error"] = type(exc).__name__
        self._report(not outcome)
        if outcome:
            log.event(_log, "simulator.pingback_failed", logging.WARNING, task=task_id, host=url.host, **outcome)
