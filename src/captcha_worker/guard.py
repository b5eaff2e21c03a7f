"""Redis as one process sees it (:class:`RedisGuard`), and the one backoff (:class:`Backoff`).

A process is *Redis down* from the first outage (``connection.refusal``: connection loss, timeouts, LOADING, OOM,
READONLY, ...) until every operation that was retrying one went through, or the next operation that retries none
succeeded (a refusal can be partial: with maxmemory reached, deletions still pass while writes fail). Readiness
follows (``readiness``: ``redis unavailable: <reason>``), every refusal is counted by reason, and the log says it
once per change of state: one ``redis_unavailable`` line (a new reason is a new line), one ``redis_reconnected``
when it is over. The worker and the gateway each hold one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from captcha_worker.connection import Refusal, describe_refusal, refusal
from captcha_worker.log import event

T = TypeVar("T")


NO_SPREAD = (1.0, 1.0)  # a Backoff whose delays are exactly first, 2*first, ... (one process polling)


class Backoff:
    """Delays that double from `first` up to `cap`, each stretched by a random factor in `spread` (default
    1-2: 0-100 % longer; ``NO_SPREAD``: exact) so that many processes retrying one outage do not come back in
    step; `limit`: no delay longer than that. ``reset`` after a success."""

    def __init__(self, first: float = 0.05, cap: float = 5.0, *, spread: tuple[float, float] = (1.0, 2.0),
                 limit: float = math.inf) -> None:
        self.first, self.cap, self.spread, self.limit = first, cap, spread, limit
        self._next = first

    def delay(self) -> float:
        """The next delay (and the one after it doubles)."""
        d = self._next * random.uniform(*self.spread)
        self._next = min(self._next * 2, self.cap)
        return min(d, self.limit)

    def reset(self) -> None:
        self._next = self.first

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay())


class _Counter(Protocol):
    def labels(self, *values: str) -> _Inc: ...


class _Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class RedisGuard:
    """See the module docstring. `errors` counts refusals by reason (the process's ``redis_errors_total``);
    `on_change` runs whenever down turns to up or back (the readiness gauge); `hint` goes on the down line;
    `prefix` names a part's own view in its lines (the pingback hub's ``pingback_redis_unavailable``)."""

    def __init__(self, log: logging.Logger, errors: _Counter, *, on_change: Callable[[], None] = lambda: None,
                 hint: str = "", prefix: str = "") -> None:
        self._log, self._errors, self._on_change, self._hint = log, errors, on_change, hint
        self._prefix = prefix
        self.down: Refusal | None = None
        self._since = 0.0
        self._failing: set[object] = set()  # operations retrying an outage (one token each)

    def readiness(self) -> tuple[bool, str]:
        return (True, "ready") if self.down is None else (False, f"redis unavailable: {self.down.value}")

    def failed(self, why: Refusal, what: str, exc: BaseException | None = None, *, token: object = None) -> None:
        """An operation `what` was refused for `why` (`token`: it is retrying, and Redis stays down until it
        settles)."""
        self._errors.labels(why.value).inc()
        if token is not None:
            self._failing.add(token)
        if self.down is why:
            return
        if self.down is None:
            self._since = time.monotonic()
        self.down = why
        fields: dict[str, object] = {"reason": why.value, "op": what, "detail": f"Redis is {describe_refusal(why)}"}
        if exc is not None:
            fields["error"] = type(exc).__name__
        if self._hint:
            fields["hint"] = self._hint
        event(self._log, f"{self._prefix}redis_unavailable", logging.WARNING, **fields)
        self._on_change()

    def ok(self, what: str, *, token: object = None) -> None:
        """An operation went through (`token`: the retrying one it was)."""
        self._failing.discard(token)
        if self.down is not None and not self._failing:
            event(self._log, f"{self._prefix}redis_reconnected", op=what, was=self.down.value,
                  down_s=round(time.monotonic() - self._since, 1))
            self.down = None
            self._on_change()

    async def retry(self, what: str, call: Callable[[], Awaitable[T]], *,
                    give_up: Callable[[], bool] = lambda: False, backoff: Backoff | None = None) -> T | None:
        """`call` until it goes through, retrying outages with backoff; anything else (a bug, a wrong key type)
        is raised. None when `give_up()` says so after a refusal."""
        token, pause = object(), backoff or Backoff()
        try:
            while True:
                try:
                    return await call()
                except Exception as exc:
                    why = refusal(exc)
                    if why is None:
                        raise
                    self.failed(why, what, exc, token=token)
                    if give_up():
                        return None
                    await pause.sleep()
        finally:
            self.ok(what, token=token)
