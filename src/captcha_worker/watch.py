"""`captcha-worker stats --watch`: a terminal table of the queue that refreshes every `--interval` seconds.

From Redis (every refresh, one round trip like `stats`): pending, in flight (claimed tasks) against the thread
budget (`--budget`, default `$CAPTCHAAI_THREADS`) and the budget units held, workers alive, dead letters and the
codes of those dead-lettered since the watch started. With `--prometheus URL` (and `--matchers` to pick a
release) also what only the workers' counters know: solves per second, finished tasks by outcome and API errors
by code over the last minute. Sections are functions of one :class:`Frame`; a new one (the gateway's tenants) is
a function appended to :data:`SECTIONS`.

On a terminal the screen is redrawn in place; otherwise (a pipe, a log) each refresh is printed as a block.
`--count N` stops after N refreshes.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, TextIO

from redis import exceptions as rexc

from captcha_worker import prom
from captcha_worker.queue import QueueStats

CLEAR = "\033[H\033[2J"
RATE_WINDOW = "1m"


@dataclass
class Frame:
    """What one refresh shows."""

    queue: str
    at: float
    stats: QueueStats | None = None
    redis_error: str = ""
    budget: int | None = None
    dead_codes: Counter[str] = field(default_factory=Counter)  # dead-lettered since the watch started
    rates: dict[str, dict[str, float]] = field(default_factory=dict)  # from Prometheus: section -> label -> /s
    prometheus_error: str = ""


class Prometheus:
    """The few instant queries the watch needs, on the release `matchers` select."""

    def __init__(self, url: str, matchers: str) -> None:
        self.url, self.matchers = url.rstrip("/"), matchers

    def _sel(self, extra: str = "") -> str:
        return "{" + ", ".join(m for m in (self.matchers, extra) if m) + "}"

    def _by(self, label: str, expr: str) -> dict[str, float]:
        out = {}
        for r in prom.query(self.url, expr, timeout_s=5):
            value = float(r["value"][1])
            if math.isfinite(value):
                out[r["metric"].get(label, "")] = value
        return out

    def rates(self) -> dict[str, dict[str, float]]:
        w, errors = RATE_WINDOW, self._sel('code!~"OK|CAPCHA_NOT_READY"')
        return {
            "outcomes": self._by("outcome", f"sum by (outcome) (rate(captcha_solver_tasks_total{self._sel()}[{w}]))"),
            "api errors": self._by("code", f"sum by (code) (rate(captcha_solver_api_requests_total{errors}[{w}]))"),
            "budget": self._by("", f"max(captcha_solver_budget_limit{self._sel()})"),
        }


Opener = Callable[[], AbstractAsyncContextManager[Any]]


async def frames(open_queue: Opener, *, interval_s: float, budget: int | None, prometheus: Prometheus | None,
                 count: int | None = None) -> AsyncIterator[Frame]:
    """Yield a Frame every `interval_s` (`count` of them, or until cancelled). Redis and Prometheus errors are
    shown in the frame; the next refresh tries again."""
    async with open_queue() as q:
        dead_seen: int | None = None
        codes: Counter[str] = Counter()
        n = 0
        while count is None or n < count:
            started = time.monotonic()
            frame = Frame(q.keys.queue, time.time(), budget=budget, dead_codes=codes)
            try:
                stats: QueueStats = await asyncio.wait_for(q.queue.stats(), 5)
                new = 0 if dead_seen is None else max(stats.dead - dead_seen, 0)
                if new:
                    codes.update(d.code for d in await q.queue.dead_letters(0, min(new, 1000)))
                frame.stats, dead_seen = stats, stats.dead
            except (rexc.RedisError, OSError, TimeoutError) as exc:
                frame.redis_error = f"Redis unreachable ({type(exc).__name__}); retrying"
            if prometheus is not None:
                try:
                    frame.rates = await asyncio.to_thread(prometheus.rates)
                except (OSError, ValueError, KeyError) as exc:
                    frame.prometheus_error = f"Prometheus: {type(exc).__name__}"
            yield frame
            n += 1
            if count is None or n < count:
                await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


# -- sections -----------------------------------------------------------------------------------------------
def _budget(f: Frame) -> int | None:
    observed = f.rates.get("budget", {}).get("")
    return f.budget if f.budget is not None else (int(observed) if observed else None)


def section_queue(f: Frame) -> list[str]:
    if f.stats is None:
        return [f"  {f.redis_error}"]
    s, budget = f.stats, _budget(f)
    use = f"{s.processing} / {budget} ({100 * s.processing / budget:.0f} %)" if budget else f"{s.processing} / ?"
    outcomes = f.rates.get("outcomes", {})
    solves = f"{outcomes['solved']:.2f}" if "solved" in outcomes else "-"
    return [f"  {'pending':>9}  {'in flight / budget':>20}  {'units held':>10}  {'workers':>7}  {'dead':>6}  "
            f"{'solves/s':>8}",
            f"  {s.pending:>9}  {use:>20}  {s.budget_in_use:>10}  {s.workers_alive:>7}  {s.dead:>6}  {solves:>8}"]


def _table(title: str, rows: dict[str, float], fmt: str) -> list[str]:
    lines = [f"  {title}"]
    lines += [f"    {k:<34} {v:{fmt}}" for k, v in sorted(rows.items(), key=lambda kv: (-kv[1], kv[0]))]
    return lines if rows else [*lines, "    none"]


def section_rates(f: Frame) -> list[str]:
    if f.prometheus_error:
        return [f"  {f.prometheus_error}; retrying"]
    if not f.rates:
        return ["  solves/s, outcomes and API errors: add --prometheus URL"]
    outcomes = {k: v for k, v in f.rates.get("outcomes", {}).items() if v > 0}
    errors = {k: v for k, v in f.rates.get("api errors", {}).items() if v > 0}
    return [*_table(f"finished tasks by outcome (/s, last {RATE_WINDOW})", outcomes, ">8.2f"),
            *_table(f"API errors by code (/s, last {RATE_WINDOW})", errors, ">8.2f")]


def section_dead(f: Frame) -> list[str]:
    return _table("dead-lettered since the watch started, by code", dict(f.dead_codes), ">8.0f")


SECTIONS: list[Callable[[Frame], list[str]]] = [section_queue, section_rates, section_dead]


def render(f: Frame, interval_s: float) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(f.at))
    lines = [f"captcha-solver  queue {f.queue!r}  {when}  (every {interval_s:g} s, Ctrl-C to stop)", ""]
    for section in SECTIONS:
        lines += [*section(f), ""]
    return "\n".join(lines)


async def run(open_queue: Opener, *, interval_s: float, budget: int | None, prometheus: Prometheus | None,
              count: int | None, out: TextIO = sys.stdout) -> int:
    tty = out.isatty()
    async for frame in frames(open_queue, interval_s=interval_s, budget=budget, prometheus=prometheus,
                              count=count):
        out.write((CLEAR if tty else "") + render(frame, interval_s) + ("" if tty else "\n"))
        out.flush()
    return 0
