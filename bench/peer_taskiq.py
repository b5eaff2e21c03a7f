"""P1 peer: taskiq with taskiq-redis, one worker process (``.venv/bench-taskiq``).

The worker is what ``taskiq worker bench.peer_taskiq:broker --workers 1 --max-async-tasks N`` runs in its worker
process (cli/worker/run.py): a ``Receiver`` listening until its shutdown event is set, with the CLI's logging
(INFO: one "Executing task" line per task) and its default acknowledgement, ``when_saved`` (docs: guide/cli,
Acknowledgements). No result backend: the
default, ``DummyResultBackend``, stores nothing. Variants:

* ``list``: ``ListQueueBroker``. ``kiq`` is one LPUSH, the worker takes each message with one BRPOP; the broker
  "doesn't support acknowledgements" (taskiq-redis README): a message is gone from Redis once received.
  No prefetch beyond the running tasks: ``--max-prefetch`` is for "brokers [that] support acknowledgements"
  (guide/cli, Other parameters).
* ``stream``: ``RedisStreamBroker``. ``kiq`` is one XADD, the worker reads up to ``xread_count`` (100, the default)
  per XREADGROUP and XACKs each message after its result was "saved", one XACK per task; acked entries stay in the
  stream (no ``maxlen`` by default). ``--max-prefetch 100`` ("useful for systems with high message rates", ibid.),
  so a whole XREADGROUP batch waits in memory.

A job is done when the system's last step for it returned: ``post_save`` (list), the XACK (stream).

    python -m bench.peer_taskiq produce|work --variant list|stream --url URL --n N [--concurrency C] [--gather]
        --result F
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from taskiq import TaskiqMiddleware
from taskiq.receiver import Receiver
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from bench.peer_common import PARAMS, Tracker, enqueue_all, parse_args, write_result

STREAM_PREFETCH = 100  # = RedisStreamBroker's default xread_count


class SaveCounter(TaskiqMiddleware):
    def __init__(self, tracker: Tracker) -> None:
        super().__init__()
        self.tracker = tracker

    def post_save(self, message: Any, result: Any) -> None:
        self.tracker.finished()


class CountingStreamBroker(RedisStreamBroker):
    """RedisStreamBroker whose acks report to the tracker once XACK returned (taskiq has no after-ack hook)."""

    tracker: Tracker | None = None

    def _ack_generator(self, id: str, queue_name: str) -> Callable[[], Awaitable[None]]:
        ack = super()._ack_generator(id, queue_name)

        async def counted() -> None:
            await ack()
            if self.tracker is not None:
                self.tracker.finished()

        return counted


def make_broker(url: str, variant: str, tracker: Tracker | None) -> tuple[Any, Any]:
    if variant == "list":
        broker: Any = ListQueueBroker(url=url)
        if tracker is not None:
            broker = broker.with_middlewares(SaveCounter(tracker))
    else:
        broker = CountingStreamBroker(url=url)
        broker.tracker = tracker

    @broker.task(task_name="noop")
    async def noop(sitekey: str, pageurl: str) -> None:
        if tracker is not None:
            tracker.started()

    return broker, noop


async def produce(url: str, n: int, variant: str, gather: bool) -> dict[str, Any]:
    broker, noop = make_broker(url, variant, None)
    await broker.startup()  # the stream variant creates its consumer group here (from "$": before any job)
    seconds = await enqueue_all(n, gather, lambda: noop.kiq(**PARAMS))
    await broker.shutdown()
    return {"n": n, "seconds": seconds}


async def work(url: str, n: int, variant: str, concurrency: int, result_path: str) -> None:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)-7s]"
                        "[%(processName)s] %(message)s")  # the CLI's defaults (cli/worker/args.py)
    finished = asyncio.Event()
    tracker = Tracker(n, finished.set)
    broker, _ = make_broker(url, variant, tracker)
    broker.is_worker_process = True
    receiver = Receiver(broker, executor=ThreadPoolExecutor(), max_async_tasks=concurrency,
                        max_prefetch=STREAM_PREFETCH if variant == "stream" else 0)
    listening = asyncio.create_task(receiver.listen(finished))  # stops prefetching once `finished` is set
    await finished.wait()
    write_result(result_path, tracker.result())
    # Not the CLI's graceful stop: on an idle stream it waits for a pending XREADGROUP that never yields (the
    # broker's listen loop re-reads on empty replies) and redis-py 8.1 does not give up a command on cancellation.
    # The figures are written; the process ends here.
    del listening
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ns = parse_args("peer_taskiq", ("list", "stream"), argv)
    if ns.mode == "produce":
        out = asyncio.run(produce(ns.url, ns.n, ns.variant, ns.gather))
        write_result(ns.result, out)
    else:
        asyncio.run(work(ns.url, ns.n, ns.variant, ns.concurrency, ns.result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
