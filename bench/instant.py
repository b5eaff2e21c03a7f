"""Our worker with an instant in-process solver: the queue's own overhead, no HTTP (P1, P3).

``InstantApi`` implements the worker's ``Api`` protocol; ``solve()`` returns at once with the solve-start time
(``time.time()``) as the answer, so a producer can compute pickup latency from the result alone.  The worker is
built exactly as ``captcha-worker run`` builds it: ``WorkerConfig.from_env()`` and ``connection.connect``, with
the CLI's log setup; only the API client is swapped.

Run as a child process::

    python -m bench.instant drain --n 10000 --result out.json   # P1: stop once n tasks are acked
    BENCH_SOLVE_HOLD=0.5:1.5 python -m bench.instant serve       # P3: until SIGTERM; each solve holds its
                                                                 # slot 0.5-1.5 s after the start stamp
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Mapping

from captcha_worker import log
from captcha_worker.captchaai import Answer, Resume, Solution, SolveStats, ThreadsInfo
from captcha_worker.config import WorkerConfig
from captcha_worker.connection import connect
from captcha_worker.methods import Kind
from captcha_worker.store.keys import Keys
from captcha_worker.worker import Worker, redis_queue


class InstantApi:
    """Answers every task immediately. Records when the first and the n-th solve started."""

    def __init__(self, threads: int, n: int = 0, hold: tuple[float, float] | None = None) -> None:
        self.threads = threads
        self.n = n
        self.hold = hold  # (min, max) seconds to hold the slot after the start stamp, uniform; None = return at once
        self.calls = 0
        self.t_first: float | None = None  # monotonic
        self.cpu_first: float | None = None
        self.t_nth: float | None = None
        self.reached = asyncio.Event()

    async def solve(self, kind: Kind, method: str, params: Mapping[str, str], *, deadline: float,
                    unsolvable_retries: int = 1, stats: SolveStats | None = None, resume: Resume | None = None,
                    on_submit: Callable[[str, float], None] | None = None,
                    hurry: Callable[[], bool] | None = None) -> Solution:
        now = time.time()
        self.calls += 1
        captcha_id = str(10_000_000 + self.calls)
        if on_submit is not None:  # as in.php answers: the worker records the id (its ACK overtakes it here)
            on_submit(captcha_id, kind.solve_timeout_s)
        if self.t_first is None:
            self.t_first = time.monotonic()
            self.cpu_first = time.process_time()
        if self.calls == self.n:
            self.t_nth = time.monotonic()
            self.reached.set()
        if stats is not None:
            stats.started_at = now
        if self.hold is not None:
            await asyncio.sleep(random.uniform(*self.hold))
        return Solution(Answer(repr(now)), api_calls=0, polls=0, started_at=now, solved_at=time.time(),
                        captcha_id=captcha_id)

    async def threadsinfo(self) -> ThreadsInfo:
        return ThreadsInfo(self.threads, 0)

    async def getbalance(self) -> float:
        return 100.0

    async def report(self, captcha_id: str, *, good: bool) -> None:
        return None


async def _drain(n: int, result_path: str | None) -> None:
    cfg = WorkerConfig.from_env()
    log.setup(cfg.log_level, secrets=[cfg.api_key.value, cfg.redis.password.value])
    redis = connect(cfg.redis, client_name="captcha-bench-instant")
    api = InstantApi(cfg.threads, n)
    worker = Worker(cfg, redis_queue(cfg, redis), api)
    stop = asyncio.Event()
    run = asyncio.create_task(worker.run(stop))
    await api.reached.wait()
    # the n-th solve started; the run ends when its ack (and every other) has left `processing`
    keys = Keys(cfg.queue)
    while await redis.llen(keys.processing) or await redis.llen(keys.pending):
        await asyncio.sleep(0.001)
    t_done = time.monotonic()
    cpu_done = time.process_time()
    stop.set()
    await run
    await redis.aclose()
    assert api.t_first is not None and api.t_nth is not None and api.cpu_first is not None
    out = {"n": n, "calls": api.calls, "first_to_nth_s": api.t_nth - api.t_first,
           "first_to_done_s": t_done - api.t_first, "cpu_s": cpu_done - api.cpu_first}
    text = json.dumps(out)
    if result_path:
        with open(result_path, "w") as f:
            f.write(text)
    else:
        print(text, file=sys.stderr)


async def _serve() -> None:
    cfg = WorkerConfig.from_env()
    log.setup(cfg.log_level, secrets=[cfg.api_key.value, cfg.redis.password.value])
    redis = connect(cfg.redis, client_name="captcha-bench-instant")
    hold = os.environ.get("BENCH_SOLVE_HOLD")  # "MIN:MAX" seconds (P3: the answer arrives at a random phase)
    lo, _, hi = (hold or "").partition(":")
    api = InstantApi(cfg.threads, hold=(float(lo), float(hi)) if hold else None)
    worker = Worker(cfg, redis_queue(cfg, redis), api)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await worker.run(stop)
    await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instant")
    sub = p.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("drain")
    d.add_argument("--n", type=int, required=True)
    d.add_argument("--result")
    sub.add_parser("serve")
    ns = p.parse_args(argv)
    if ns.mode == "drain":
        asyncio.run(_drain(ns.n, ns.result))
    else:
        asyncio.run(_serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
