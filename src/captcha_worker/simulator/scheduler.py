"""Plan threads, without I/O: a heap of running tasks ordered by the time their answer is ready and a FIFO of
queued ones, advanced lazily to the current time (so in-flight counts, the maximum and the time at the cap are
exact whatever the request rate: a queued task starts at the instant a thread frees, not when somebody next
looked)."""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from captcha_worker.methods import Answer, Kind
from captcha_worker.simulator.answers import make_answer


@dataclass(slots=True, eq=False)
class SimTask:
    """One accepted task. The answer is regenerated from ``seed`` when read (stable, and cheap to keep)."""

    id: int
    kind: Kind
    owner: str
    inputs: Mapping[str, str]  # the few params the answer depends on
    seed: int
    wall: int  # unix time of submission (answers carrying a timestamp use it)
    unsolvable: bool
    duration: float  # solve time once a thread is free
    ready_at: float | None = None  # None while queued
    pingback: str = ""  # URL to GET when solved ("" = none)
    callback_json: bool = False  # a JSON-API callbackUrl: POST the getTaskResult body instead

    def answer(self) -> Answer:
        return make_answer(self.kind, random.Random(self.seed), self.inputs, self.wall)


@dataclass(slots=True)
class Meter:
    """Integrals over time of the in-flight count, from ``since``."""

    since: float
    last: float
    max_in_flight: int = 0
    at_cap_s: float = 0.0  # time with in_flight >= threads
    busy_s: float = 0.0  # thread-seconds in use

    def observe(self, t: float, in_flight: int, threads: int) -> None:
        dt = max(0.0, t - self.last)
        if in_flight >= threads:
            self.at_cap_s += dt
        self.busy_s += in_flight * dt
        self.last = max(self.last, t)


class Scheduler:
    """Thread accounting. Call :meth:`advance` with the current time before looking at or changing the
    state; it processes completions in ``ready_at`` order, starting queued tasks at the exact instant a
    thread frees."""

    def __init__(self, threads: int, now: float) -> None:
        self._threads = threads
        self._running: list[tuple[float, int, SimTask]] = []
        self._waiting: deque[SimTask] = deque()
        self.meter = Meter(since=now, last=now)
        self.queued_total = 0

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def queue_length(self) -> int:
        return len(self._waiting)

    def next_ready(self) -> float | None:
        """When the next running task's answer is ready (None: none is running)."""
        return self._running[0][0] if self._running else None

    def has_room(self) -> bool:
        return not self._waiting and len(self._running) < self._threads

    def advance(self, now: float) -> list[SimTask]:
        """Completes every task ready by ``now``; returns them in completion order."""
        finished: list[SimTask] = []
        while self._running and self._running[0][0] <= now:
            t = self._running[0][0]
            self._observe(t)
            finished.append(heapq.heappop(self._running)[2])
            self._fill(t)
        self._observe(now)
        return finished

    def start(self, task: SimTask, now: float) -> None:
        self._observe(now)
        task.ready_at = now + task.duration
        heapq.heappush(self._running, (task.ready_at, task.id, task))
        self.meter.max_in_flight = max(self.meter.max_in_flight, len(self._running))

    def wait(self, task: SimTask) -> None:
        self._waiting.append(task)
        self.queued_total += 1

    def set_threads(self, threads: int, now: float) -> None:
        self._observe(now)
        self._threads = threads
        self._fill(now)

    def reset_meter(self, now: float) -> None:
        self.meter = Meter(since=now, last=now, max_in_flight=len(self._running))
        self.queued_total = 0

    def _fill(self, t: float) -> None:
        while self._waiting and len(self._running) < self._threads:
            self.start(self._waiting.popleft(), t)

    def _observe(self, t: float) -> None:
        self.meter.observe(t, len(self._running), self._threads)
