"""P1 peer: SAQ, one worker, in this repo's venv (the ``bench`` extra). SAQ's worker logs errors only by default.

Per job SAQ moves its id from the queue list to the active list (BLMOVE), updates the job's key when it starts and
when it ends (the result is kept, ``ttl`` 600 s by default) and removes it from the active list after the run; a
job is done when ``after_process`` runs, after its status was written.

    python -m bench.peer_saq produce|work --url URL --n N [--concurrency C] [--gather] --result F
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from saq import Queue, Worker

from bench.peer_common import PARAMS, Tracker, enqueue_all, parse_args, run_child, serve_until


async def produce(url: str, n: int, gather: bool) -> dict[str, Any]:
    queue = Queue.from_url(url, name="bench")
    await queue.connect()
    seconds = await enqueue_all(n, gather, lambda: queue.enqueue("noop", **PARAMS))
    await queue.disconnect()
    return {"n": n, "seconds": seconds}


async def work(url: str, n: int, concurrency: int) -> dict[str, Any]:
    finished = asyncio.Event()
    tracker = Tracker(n, finished.set)

    async def noop(ctx: Any, **kwargs: Any) -> None:
        tracker.started()

    async def after(ctx: Any) -> None:  # runs after the job's status was written
        tracker.finished()

    queue = Queue.from_url(url, name="bench")
    await queue.connect()
    worker = Worker(queue, functions=[("noop", noop)], concurrency=concurrency, after_process=after)
    await serve_until(finished, worker.start(), worker.stop)
    await queue.disconnect()
    return tracker.result()


def main(argv: list[str] | None = None) -> int:
    ns = parse_args("peer_saq", ("default",), argv)
    return run_child(ns, lambda: produce(ns.url, ns.n, ns.gather), lambda: work(ns.url, ns.n, ns.concurrency))


if __name__ == "__main__":
    sys.exit(main())
