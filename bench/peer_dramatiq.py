"""P1 peer: Dramatiq 2 with its Redis broker, one process, N worker threads (``.venv/bench-dramatiq``).

The worker is what ``dramatiq bench.peer_dramatiq --processes 1 --threads N`` runs in its worker process
(``Worker(broker, worker_threads=N)``, cli.py), with the CLI's logging (INFO, no line per message) and the default
middleware (AgeLimit, TimeLimit, ShutdownNotifications, Callbacks, Pipelines, Retries). Throughput settings as the
docs give them: hiredis installed (Installation, Optional Requirements); the queue prefetch left at its default,
2 × threads, in-progress messages included (Reference, Environment Variables, ``dramatiq_queue_prefetch``).
No result backend: Dramatiq stores none unless the Results middleware is added.

Per message: ``enqueue`` is one Lua call (dispatch.lua); the worker's consumer ``fetch``es up to the prefetch
limit in one Lua call (ids move to this worker's ack set), and each message is ``ack``ed after its actor ran, one
Lua call per message. A job is done when its ack returned (the ``after_ack`` middleware hook).

    python -m bench.peer_dramatiq produce|work --url URL --n N [--concurrency C] --result F
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Middleware

from bench.peer_common import PARAMS, Tracker, parse_args, write_result


class AckCounter(Middleware):
    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def after_ack(self, broker: Any, message: Any) -> None:
        self.tracker.finished()


def make_actor(url: str, tracker: Tracker | None) -> Any:
    broker = RedisBroker(url=url)
    if tracker is not None:
        broker.add_middleware(AckCounter(tracker))
    dramatiq.set_broker(broker)

    def noop(sitekey: str, pageurl: str) -> None:
        if tracker is not None:
            tracker.started()

    return dramatiq.actor(noop, actor_name="noop", broker=broker)


def produce(url: str, n: int) -> dict[str, Any]:
    actor = make_actor(url, None)
    t = time.perf_counter()
    for _ in range(n):
        actor.send(**PARAMS)
    return {"n": n, "seconds": time.perf_counter() - t}


def work(url: str, n: int, concurrency: int) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] "
                        "[%(levelname)s] %(message)s", stream=sys.stderr)  # the CLI's default (cli.py, LOGFORMAT)
    finished = threading.Event()
    tracker = Tracker(n, finished.set)
    actor = make_actor(url, tracker)
    worker = dramatiq.Worker(actor.broker, worker_threads=concurrency)
    worker.start()
    finished.wait()
    worker.stop()
    return tracker.result()


def main(argv: list[str] | None = None) -> int:
    ns = parse_args("peer_dramatiq", ("default",), argv)
    out = produce(ns.url, ns.n) if ns.mode == "produce" else work(ns.url, ns.n, ns.concurrency)
    write_result(ns.result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
