"""Routing on a deadline (issue 27, policy (c)): which waiting tasks would miss their deadline waiting for a plan
thread, and so go to a per-solve provider now (while the spend cap has room).

The prediction, from the queue as the planner models it (``planner``: T threads are T servers of one FIFO queue):

* every plan thread is busy (the claim found no budget unit free), so the plan finishes a solve every
  ``E[S] / T`` seconds on average, E[S] the mean time a plan solve holds its thread (observed by this worker,
  :class:`ServiceTimes`; before any, the methods table's, ``planner.service_time``);
* the task that is ``j``-th in line for the plan (0-based, counting only the tasks ahead of it that stay in line)
  gets a thread after ``(j + 1) · E[S] / T`` and is answered one service time of its own kind ``S_kind`` later;
* it *would miss* when ``now + (j + 1) · E[S] / T + S_kind > deadline``. Such a task goes to a provider when one
  takes its kind, the provider can still make it (``now + S_kind <= deadline``: a solve that cannot is not paid
  for) and there is room (the providers' free concurrency, the cap); it then leaves the line, and the tasks behind
  it move up. A task without a deadline never goes.

Scanning in queue order and leaving the line as it goes is what makes each decision a count of the tasks that
really stay ahead. The model is the planner's mean, not a percentile: a task predicted to make it by a margin
smaller than the spread of solve times may still miss (``margin_s`` widens the prediction for that).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: weight of the newest observation in a kind's moving mean of plan service times
EWMA_WEIGHT = 0.2


@dataclass(frozen=True)
class Waiting:
    """A task in line for a plan thread, as routing on a deadline sees it."""

    id: str
    deadline: float | None  # unix seconds; None: no deadline, never routed on it
    service_s: float  # its kind's time at a plan thread (and taken as its time at a provider)
    routable: bool  # a provider takes its kind


@dataclass(frozen=True)
class Line:
    """The plan's side: its threads (the budget's effective limit) and the mean time a solve holds one."""

    threads: int
    mean_s: float

    def start_after(self, position: int) -> float:
        """Seconds until the task `position`-th in line (0-based) gets a plan thread: (position + 1) · E[S] / T."""
        return (position + 1) * self.mean_s / self.threads


def late(waiting: Iterable[Waiting], line: Line, *, now: float, room: int, margin_s: float = 0.0) -> list[str]:
    """The ids (in queue order, at most `room`) that would miss their deadline waiting for the plan and that a
    provider can still answer in time; see the module's docstring."""
    out: list[str] = []
    ahead = 0
    for w in waiting:
        if len(out) < room and would_miss(w, line, ahead, now=now, margin_s=margin_s) \
                and w.routable and w.deadline is not None and now + w.service_s <= w.deadline:
            out.append(w.id)
            continue
        ahead += 1
    return out


def would_miss(w: Waiting, line: Line, ahead: int, *, now: float, margin_s: float = 0.0) -> bool:
    """`w`, with `ahead` tasks staying in line before it, is predicted answered after its deadline."""
    return w.deadline is not None and now + line.start_after(ahead) + w.service_s + margin_s > w.deadline


class ServiceTimes:
    """How long plan solves hold a thread, per kind: a moving mean (EWMA_WEIGHT) of what this worker observed,
    else the `defaults` (the methods table's, scaled as the API's times are)."""

    def __init__(self, defaults: Mapping[str, float]) -> None:
        self._defaults = dict(defaults)
        self._observed: dict[str, float] = {}

    def observe(self, kind: str, seconds: float) -> None:
        old = self._observed.get(kind)
        self._observed[kind] = seconds if old is None else old + EWMA_WEIGHT * (seconds - old)

    def of(self, kind: str) -> float:
        return self._observed.get(kind, self._defaults.get(kind, 0.0))
