"""P1 peer: Celery 5, Redis transport, threads pool, one worker process (``.venv/bench-celery``).

The worker is ``celery worker --pool threads --concurrency N`` run in this process (``app.worker_main``, the CLI
itself), default log level (WARNING: no line per task). Throughput settings as the docs give them:

* ``worker_prefetch_multiplier = 64``: "If you have many short-running tasks, and throughput/round trip latency is
  important to you, this number should be large ... Say 64, or 128" (User Guide, Optimizing, Prefetch Limits);
  the reserve is multiplier × concurrency messages.
* without a result backend, ``task_ignore_result = True``: "If you don't care about the results of a task, be sure
  to set the ignore_result option, as storing results wastes time and resources" (User Guide, Tasks, Tips and Best
  Practices).

Variants:

* ``plain``: no result backend. Acknowledged early (the default, ``task_acks_late = False``): when the worker
  accepts the message, before the task runs.
* ``results``: the Redis result backend on the same server: one SET of ``celery-task-meta-<id>`` (expires after a
  day, ``result_expires``) and one PUBLISH per task; early acknowledgement.
* ``results-late``: the Redis result backend and ``task_acks_late = True`` (the message stays unacknowledged
  until the task has run: what this repo's worker guarantees).

Per message the Redis transport (kombu) BRPOPs it from the list and keeps it in the ``unacked`` hash and the
``unacked_index`` sorted set until the ack removes it (a pipeline each way). A job is done after its last step:
``task_postrun`` (sent after the result was stored) for early acks, the ack itself for ``results-late``.

    python -m bench.peer_celery produce|work --variant plain|results|results-late --url URL --n N [--concurrency C]
        --result F
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from celery import Celery
from celery.signals import task_postrun
from celery.worker.request import Request

from bench.peer_common import PARAMS, Tracker, parse_args, write_result

PREFETCH_MULTIPLIER = 64
VARIANTS = ("plain", "results", "results-late")


def make_app(url: str, variant: str, tracker: Tracker | None) -> tuple[Celery, Any]:
    app = Celery("bench", broker=url, backend=url if variant != "plain" else None)
    app.conf.update(worker_prefetch_multiplier=PREFETCH_MULTIPLIER, task_ignore_result=variant == "plain",
                    task_acks_late=variant == "results-late", broker_connection_retry_on_startup=True,
                    worker_hijack_root_logger=True)

    @app.task(name="noop")
    def noop(sitekey: str, pageurl: str) -> None:
        if tracker is not None:
            tracker.started()

    return app, noop


def count_completions(tracker: Tracker, variant: str) -> None:
    if variant == "results-late":
        acknowledge = Request.acknowledge

        def counted(self: Request) -> None:
            first = not self.acknowledged
            acknowledge(self)
            if first:
                tracker.finished()

        Request.acknowledge = counted  # Celery has no after-ack signal: wrap the one method every request acks with
    else:
        task_postrun.connect(lambda **_: tracker.finished(), weak=False)


def produce(url: str, n: int, variant: str) -> dict[str, Any]:
    _, noop = make_app(url, variant, None)
    t = time.perf_counter()
    for _ in range(n):
        noop.delay(**PARAMS)
    return {"n": n, "seconds": time.perf_counter() - t}


def work(url: str, n: int, variant: str, concurrency: int, result_path: str) -> None:
    finished = threading.Event()
    tracker = Tracker(n, finished.set)
    app, _ = make_app(url, variant, tracker)
    count_completions(tracker, variant)

    def stop_when_done() -> None:
        finished.wait()
        write_result(result_path, tracker.result())
        os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown

    threading.Thread(target=stop_when_done, daemon=True).start()
    app.worker_main(["worker", "--pool", "threads", "--concurrency", str(concurrency), "--loglevel", "WARNING"])


def main(argv: list[str] | None = None) -> int:
    ns = parse_args("peer_celery", VARIANTS, argv)
    if ns.mode == "produce":
        write_result(ns.result, produce(ns.url, ns.n, ns.variant))
    else:
        work(ns.url, ns.n, ns.variant, ns.concurrency, ns.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
