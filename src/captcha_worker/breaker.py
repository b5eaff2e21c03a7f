"""CaptchaAI's circuit breaker (issue 27): while it is open, the worker solves tasks at its overflow providers
(``PROVIDERS``) under the spend cap instead of waiting for CaptchaAI. Only built when ``PROVIDERS`` is set.

It counts the outcome of every CaptchaAI HTTP request this process makes (``CaptchaAI.observe``), per
:func:`verdict`:

==========  ========================================================================  ==========================
verdict     codes                                                                     counted as
==========  ========================================================================  ==========================
outage      timeouts, connection errors, HTTP 5xx, bodies that are not the protocol,  a failure
            ERROR_SERVER_ERROR, ERROR_INTERNAL_SERVER_ERROR, ERROR_ZERO_BALANCE (the
            plan has no thread to give: "no plan" when it lasts)
no plan     ERROR_WRONG_USER_KEY, ERROR_KEY_DOES_NOT_EXIST, IP_BANNED,               opens the breaker at once
            ERROR_IP_NOT_ALLOWED
up          anything else: an answer, CAPCHA_NOT_READY, a task's own error,           a success
            ERROR_NO_SLOT_AVAILABLE (CaptchaAI is there, busy)
==========  ========================================================================  ==========================

States (times are divided by ``API_TIME_SCALE`` like the worker's other times):

==========  ===========================================================================================
state       what happens
==========  ===========================================================================================
closed      tasks go to CaptchaAI; it opens when ``min_failures`` (5) requests in a row failed, or when,
            within the last ``window_s`` (30 s; at least 3 HTTP timeouts), at least ``min_failures``
            requests failed and they are at least ``failure_ratio`` (half) of the requests
open        tasks go to the overflow providers (claimed without a plan-thread unit); after ``open_s`` it
            is half-open (``open_s``: 30 s)
half-open   one probe (``threadsinfo``) at a time, tasks still go to overflow; the probe answering closes
            it, a failed probe (or any failure counted meanwhile) opens it again for ``open_s``
==========  ===========================================================================================
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from captcha_worker.codes import Code


class State(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Verdict(enum.Enum):
    UP = "up"
    OUTAGE = "outage"
    NO_PLAN = "no_plan"


OUTAGE_CODES = frozenset({Code.TIMEOUT, Code.CONNECTION_ERROR, Code.HTTP_5XX, Code.NON_JSON, Code.ERROR_SERVER_ERROR,
                          Code.ERROR_INTERNAL_SERVER_ERROR, Code.ERROR_ZERO_BALANCE})
NO_PLAN_CODES = frozenset({Code.ERROR_WRONG_USER_KEY, Code.ERROR_KEY_DOES_NOT_EXIST, Code.IP_BANNED,
                           Code.ERROR_IP_NOT_ALLOWED})


def verdict(code: str) -> Verdict:
    """What one request's outcome code says about CaptchaAI (see the module's table)."""
    if code in NO_PLAN_CODES:
        return Verdict.NO_PLAN
    return Verdict.OUTAGE if code in OUTAGE_CODES else Verdict.UP


@dataclass(frozen=True)
class Policy:
    window_s: float = 30.0
    min_failures: int = 5
    failure_ratio: float = 0.5
    open_s: float = 30.0

    @classmethod
    def scaled(cls, scale: float, http_timeout_s: float = 0.0) -> Policy:
        """Times divided by `scale` (API_TIME_SCALE); the window never shorter than 3 HTTP timeouts (requests
        that hang fail only at their timeout: a shorter window would never see enough of them at once)."""
        d = cls()
        return cls(window_s=max(d.window_s / scale, 3 * http_timeout_s), min_failures=d.min_failures,
                   failure_ratio=d.failure_ratio, open_s=d.open_s / scale)


class Breaker:
    """The state machine of the module docstring; `clock` is monotonic seconds. `on_change(old, new, why)` is
    told every transition (the worker logs it and sets the metric)."""

    def __init__(self, policy: Policy | None = None, *, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[State, State, str], None] | None = None) -> None:
        self.policy = policy or Policy()
        self._clock = clock
        self._on_change = on_change
        self._state = State.CLOSED
        self._opened_at = 0.0
        self._calls: deque[tuple[float, bool]] = deque()  # (when, failed) within the window
        self._failures = 0
        self._streak = 0  # failures in a row (an outage fails every request: no wait for the ratio)
        self._probing = False

    @property
    def state(self) -> State:
        if self._state is State.OPEN and self._clock() >= self._opened_at + self.policy.open_s:
            self._move(State.HALF_OPEN, "open_s passed: probing")
        return self._state

    def closed(self) -> bool:
        """Tasks go to CaptchaAI."""
        return self.state is State.CLOSED

    def record(self, code: str) -> None:
        """One CaptchaAI request's outcome code."""
        v = verdict(code)
        now = self._clock()
        state = self.state
        if v is Verdict.NO_PLAN:
            if state is not State.OPEN:
                self._open(now, f"{code}: no plan")
            return
        failed = v is Verdict.OUTAGE
        if state is State.HALF_OPEN:
            if failed:
                self._open(now, f"{code} while half-open")
            return
        if state is State.OPEN:
            return
        self._calls.append((now, failed))
        self._failures += failed
        self._streak = self._streak + 1 if failed else 0
        self._trim(now)
        p = self.policy
        if self._streak >= p.min_failures:
            self._open(now, f"{self._streak} requests in a row failed (last: {code})")
        elif failed and self._failures >= p.min_failures and self._failures >= p.failure_ratio * len(self._calls):
            self._open(now, f"{self._failures} of {len(self._calls)} requests failed within {p.window_s:g} s "
                            f"(last: {code})")

    def probe_due(self) -> bool:
        """Half-open and no probe running: the caller sends one now (and reports it with :meth:`probed`)."""
        if self.state is not State.HALF_OPEN or self._probing:
            return False
        self._probing = True
        return True

    def probed(self, ok: bool, code: str = "") -> None:
        """The probe's outcome: CaptchaAI answered (closed) or not (open again)."""
        self._probing = False
        if self._state is not State.HALF_OPEN:
            return
        if ok:
            self._calls.clear()
            self._failures = self._streak = 0
            self._move(State.CLOSED, "probe answered")
        else:
            self._open(self._clock(), f"probe failed ({code})")

    def _open(self, now: float, why: str) -> None:
        self._opened_at = now
        self._calls.clear()
        self._failures = self._streak = 0
        self._move(State.OPEN, why)

    def _trim(self, now: float) -> None:
        horizon = now - self.policy.window_s
        while self._calls and self._calls[0][0] < horizon:
            _, failed = self._calls.popleft()
            self._failures -= failed

    def _move(self, new: State, why: str) -> None:
        old, self._state = self._state, new
        if old is not new and self._on_change is not None:
            self._on_change(old, new, why)
