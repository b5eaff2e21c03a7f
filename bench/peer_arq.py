"""P1 peer: arq, one worker (``.venv/bench-arq``: arq pins redis-py < 6). Logging as arq's CLI configures it by
default (INFO, one line per job start and one per job end).

Variants: ``default`` (``poll_delay`` 0.5 s, arq's default) and ``tuned`` (0.01 s: arq polls its queue, a sorted
set, and sleeps ``poll_delay`` whenever it found fewer jobs than free slots). Results are kept (``keep_result``,
3600 s by default); a job is done when ``after_job_end`` runs, after its result was recorded and the job removed.

    python -m bench.peer_arq produce|work --variant default|tuned --url URL --n N [--concurrency C] [--gather]
        --result F
"""

from __future__ import annotations

import asyncio
import logging.config
import sys
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.logs import default_log_config
from arq.worker import Worker, func

from bench.peer_common import PARAMS, Tracker, enqueue_all, parse_args, run_child, serve_until

POLL_DELAY = {"default": 0.5, "tuned": 0.01}


async def produce(url: str, n: int, gather: bool) -> dict[str, Any]:
    pool = await create_pool(RedisSettings.from_dsn(url))
    seconds = await enqueue_all(n, gather, lambda: pool.enqueue_job("noop", **PARAMS))
    await pool.aclose()
    return {"n": n, "seconds": seconds}


async def work(url: str, n: int, concurrency: int, poll_delay: float) -> dict[str, Any]:
    finished = asyncio.Event()
    tracker = Tracker(n, finished.set)

    async def noop(ctx: Any, **kwargs: Any) -> None:
        tracker.started()

    async def after_job_end(ctx: Any) -> None:  # after the result was recorded
        tracker.finished()

    worker = Worker(functions=[func(noop, name="noop")], redis_settings=RedisSettings.from_dsn(url),
                    max_jobs=concurrency, poll_delay=poll_delay, handle_signals=False, after_job_end=after_job_end)
    await serve_until(finished, worker.async_run())
    await worker.close()
    return tracker.result()


def main(argv: list[str] | None = None) -> int:
    ns = parse_args("peer_arq", tuple(POLL_DELAY), argv)
    logging.config.dictConfig(default_log_config(verbose=False))
    return run_child(ns, lambda: produce(ns.url, ns.n, ns.gather),
                     lambda: work(ns.url, ns.n, ns.concurrency, POLL_DELAY[ns.variant]))


if __name__ == "__main__":
    sys.exit(main())
