"""P1 child processes that run in this repo's venv: our producer, and SAQ's producer and worker.

Each run prints nothing and writes one JSON object to ``--result``.  The job/task is the same everywhere: a
Turnstile-shaped payload (``sitekey``, ``pageurl``) and a solver / job function that returns immediately.

    python -m bench.p1_child produce --system ours|ours-seq|saq|saq-gather --url URL --n N --result F
    python -m bench.p1_child work --system saq --url URL --n N --concurrency C --result F
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from captcha_worker.client import CaptchaQueue

PARAMS = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}
GATHER = 50  # in-flight enqueue calls for the "gather" variants


async def _bounded(n: int, make: Any) -> None:
    sem = asyncio.Semaphore(GATHER)

    async def one() -> None:
        async with sem:
            await make()

    await asyncio.gather(*(one() for _ in range(n)))


async def produce(system: str, url: str, n: int) -> dict[str, Any]:
    if system in {"ours", "ours-seq"}:
        async with CaptchaQueue.from_url(url) as q:
            specs = [{"method": "turnstile", "params": PARAMS} for _ in range(n)]
            t = time.perf_counter()
            if system == "ours":
                await q.submit_many(specs)
            else:
                for _ in range(n):
                    await q.submit("turnstile", PARAMS)
            elapsed = time.perf_counter() - t
        return {"n": n, "seconds": elapsed}
    if system in {"saq", "saq-gather"}:
        from saq import Queue  # noqa: PLC0415 - optional: only the SAQ comparison needs it

        queue = Queue.from_url(url, name="bench")
        await queue.connect()
        t = time.perf_counter()
        if system == "saq":
            for _ in range(n):
                await queue.enqueue("noop", **PARAMS)
        else:
            await _bounded(n, lambda: queue.enqueue("noop", **PARAMS))
        elapsed = time.perf_counter() - t
        await queue.disconnect()
        return {"n": n, "seconds": elapsed}
    raise SystemExit(f"unknown producer {system}")


async def work_saq(url: str, n: int, concurrency: int) -> dict[str, Any]:
    from saq import Queue, Worker  # noqa: PLC0415 - optional: only the SAQ comparison needs it

    state: dict[str, Any] = {"calls": 0, "done": 0}
    finished = asyncio.Event()

    async def noop(ctx: Any, **kwargs: Any) -> None:
        state["calls"] += 1
        if state["calls"] == 1:
            state["t_first"] = time.monotonic()
            state["cpu_first"] = time.process_time()
        if state["calls"] == n:
            state["t_nth"] = time.monotonic()

    async def after(ctx: Any) -> None:  # runs after the job's status was written
        state["done"] += 1
        if state["done"] == n:
            state["t_done"] = time.monotonic()
            state["cpu_done"] = time.process_time()
            finished.set()

    queue = Queue.from_url(url, name="bench")
    await queue.connect()
    worker = Worker(queue, functions=[("noop", noop)], concurrency=concurrency, after_process=after)
    run = asyncio.create_task(worker.start())
    await finished.wait()
    await worker.stop()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    await queue.disconnect()
    return {"n": n, "calls": state["calls"], "first_to_nth_s": state["t_nth"] - state["t_first"],
            "first_to_done_s": state["t_done"] - state["t_first"], "cpu_s": state["cpu_done"] - state["cpu_first"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.p1_child")
    p.add_argument("mode", choices=["produce", "work"])
    p.add_argument("--system", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--result", required=True)
    ns = p.parse_args(argv)
    if ns.mode == "produce":
        out = asyncio.run(produce(ns.system, ns.url, ns.n))
    elif ns.system == "saq":
        out = asyncio.run(work_saq(ns.url, ns.n, ns.concurrency))
    else:
        raise SystemExit(f"unknown worker {ns.system}")
    with open(ns.result, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
