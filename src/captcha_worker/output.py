"""What the commands print: one result as a JSON-able dict, and a one-line progress bar.

Shared by ``cli`` (submit --wait, wait) and ``demo``; imports only ``client``, so both import it at the top
and neither imports the other's internals.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from captcha_worker.client import Failed, Outcome, ResultExpired, Solved, TimedOut, UnknownTask


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """One result as a JSON-able dict (the CLI's output format)."""
    if isinstance(outcome, TimedOut):
        return {"id": outcome.id, "status": "timed_out", "waited_s": round(outcome.waited_s, 3)}
    if isinstance(outcome, ResultExpired):
        return {"id": outcome.id, "status": "result_expired",
                "text": "the task finished, but its result is no longer kept (RESULT_TTL_SECONDS)"}
    if isinstance(outcome, UnknownTask):
        return {"id": outcome.id, "status": "unknown", "waited_s": round(outcome.waited_s, 3),
                "text": "this queue has no record of the id"}
    data: dict[str, Any] = {"id": outcome.id}
    if isinstance(outcome, Solved):
        data.update(status="solved", kind=outcome.kind, solution=outcome.solution, api_calls=outcome.api_calls)
        if outcome.user_agent:
            data["user_agent"] = outcome.user_agent
    else:
        data.update(status="error" if isinstance(outcome, Failed) else "expired", code=outcome.code,
                    text=outcome.text)
    data["attempts"] = outcome.attempts
    for name, value in (("queued", outcome.timings.queued), ("solving", outcome.timings.solving),
                        ("total", outcome.timings.total)):
        if value is not None:
            data[f"{name}_s"] = round(value, 3)
    return data


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, label: str = "") -> None:
        self.total, self.stream, self.label = total, stream, label
        self.done = 0
        self.counts: dict[str, int] = {}
        self.enabled = stream.isatty() and total > 0
        self._last = 0.0
        self._started = time.monotonic()

    def add(self, status: str) -> None:
        self.done += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done == self.total):
            self._last = now
            self.render()

    def render(self, extra: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        rate = self.done / max(1e-9, time.monotonic() - self._started)
        detail = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        self.stream.write(f"\r{self.label}[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{rate:5.1f}/s {detail} {extra}\033[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
