"""What every P1 peer child shares: the job, the clock, the command line. Standard library only: the peers run in
venvs of their own (``bench/venvs.py``) with this repo on ``PYTHONPATH`` and nothing else of it importable.

Every child is ``python -m bench.peer_<system> produce|work --url URL --n N [--variant V] [--concurrency C]
[--gather] --result FILE``; it prints nothing and writes one JSON object to ``--result``.

* ``produce`` enqueues N jobs (timed: the submit rate) and exits;
* ``work`` runs one worker in this process, as the system's CLI would run it, until N jobs have gone through the
  system's completion bookkeeping (``Tracker.finished`` is called from the hook that runs after it: result stored,
  message acknowledged, whatever that system does last), then stops it.

The job is a Turnstile-shaped payload (``sitekey``, ``pageurl``) handed to a function that returns at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

PARAMS = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}
GATHER = 50  # enqueue calls in flight for the --gather producers


class Tracker:
    """Counts job starts and completions and records the times P1 reports. Thread-safe: Dramatiq and Celery run
    jobs in threads. ``on_done`` runs once, in the thread of the n-th completion."""

    def __init__(self, n: int, on_done: Callable[[], None]) -> None:
        self.n = n
        self.on_done = on_done
        self.calls = 0
        self.done = 0
        self.times: dict[str, float] = {}
        self._lock = threading.Lock()

    def started(self) -> None:
        with self._lock:
            self.calls += 1
            if self.calls == 1:
                self.times["t_first"] = time.monotonic()
                self.times["cpu_first"] = time.process_time()
            if self.calls == self.n:
                self.times["t_nth"] = time.monotonic()

    def finished(self) -> None:
        with self._lock:
            self.done += 1
            last = self.done == self.n
            if last:
                self.times["t_done"] = time.monotonic()
                self.times["cpu_done"] = time.process_time()
        if last:
            self.on_done()

    def result(self) -> dict[str, Any]:
        t = self.times
        return {"n": self.n, "calls": self.calls, "first_to_nth_s": t["t_nth"] - t["t_first"],
                "first_to_done_s": t["t_done"] - t["t_first"], "cpu_s": t["cpu_done"] - t["cpu_first"]}


async def enqueue_all(n: int, gather: bool, one: Callable[[], Awaitable[Any]]) -> float:
    """Seconds to enqueue n jobs with an async client: one by one, or GATHER calls in flight."""
    t = time.perf_counter()
    if gather:
        sem = asyncio.Semaphore(GATHER)

        async def bounded() -> None:
            async with sem:
                await one()

        await asyncio.gather(*(bounded() for _ in range(n)))
    else:
        for _ in range(n):
            await one()
    return time.perf_counter() - t


async def serve_until(finished: asyncio.Event, serving: Coroutine[Any, Any, Any],
                      stop: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Run an asyncio worker's main coroutine until `finished` is set; then its own stop (if it has one) and a
    cancel."""
    task = asyncio.create_task(serving)
    await finished.wait()
    if stop is not None:
        await stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def run_child(ns: argparse.Namespace, produce: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
              work: Callable[[], Coroutine[Any, Any, dict[str, Any]]]) -> int:
    """main() of an asyncio peer: run the mode's coroutine, write what it returns."""
    write_result(ns.result, asyncio.run(work() if ns.mode == "work" else produce()))
    return 0


def write_result(path: str, data: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(data, f)


def parse_args(prog: str, variants: tuple[str, ...], argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("mode", choices=["produce", "work"])
    p.add_argument("--url", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--variant", choices=variants, default=variants[0])
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--gather", action="store_true", help=f"produce with {GATHER} enqueues in flight")
    p.add_argument("--result", required=True)
    return p.parse_args(argv)
