"""P1 child for arq. Runs in its own venv (``.venv/bench-arq``: arq pins redis-py < 6), so it imports nothing
from this repo.  Logging is configured as arq's CLI does by default (INFO, one line per job start and end).

    python bench/peer_arq.py produce|produce-gather --port P --n N --result F
    python bench/peer_arq.py work --port P --n N --concurrency C --poll-delay S --result F
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging.config
import sys
import time
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.logs import default_log_config
from arq.worker import Worker, func

PARAMS = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}
GATHER = 50


async def produce(port: int, n: int, gather: bool) -> dict[str, Any]:
    pool = await create_pool(RedisSettings(host="127.0.0.1", port=port))
    t = time.perf_counter()
    if gather:
        sem = asyncio.Semaphore(GATHER)

        async def one() -> None:
            async with sem:
                await pool.enqueue_job("noop", **PARAMS)

        await asyncio.gather(*(one() for _ in range(n)))
    else:
        for _ in range(n):
            await pool.enqueue_job("noop", **PARAMS)
    elapsed = time.perf_counter() - t
    await pool.aclose()
    return {"n": n, "seconds": elapsed}


async def work(port: int, n: int, concurrency: int, poll_delay: float) -> dict[str, Any]:
    state: dict[str, Any] = {"calls": 0, "done": 0}
    finished = asyncio.Event()

    async def noop(ctx: Any, **kwargs: Any) -> None:
        state["calls"] += 1
        if state["calls"] == 1:
            state["t_first"] = time.monotonic()
            state["cpu_first"] = time.process_time()
        if state["calls"] == n:
            state["t_nth"] = time.monotonic()

    async def after_job_end(ctx: Any) -> None:  # after the result was recorded
        state["done"] += 1
        if state["done"] == n:
            state["t_done"] = time.monotonic()
            state["cpu_done"] = time.process_time()
            finished.set()

    worker = Worker(functions=[func(noop, name="noop")], redis_settings=RedisSettings(host="127.0.0.1", port=port),
                    max_jobs=concurrency, poll_delay=poll_delay, handle_signals=False, after_job_end=after_job_end)
    run = asyncio.create_task(worker.async_run())
    await finished.wait()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    await worker.close()
    return {"n": n, "calls": state["calls"], "first_to_nth_s": state["t_nth"] - state["t_first"],
            "first_to_done_s": state["t_done"] - state["t_first"], "cpu_s": state["cpu_done"] - state["cpu_first"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="peer_arq")
    p.add_argument("mode", choices=["produce", "produce-gather", "work"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--poll-delay", type=float, default=0.5)
    p.add_argument("--result", required=True)
    ns = p.parse_args(argv)
    logging.config.dictConfig(default_log_config(verbose=False))
    if ns.mode == "work":
        out = asyncio.run(work(ns.port, ns.n, ns.concurrency, ns.poll_delay))
    else:
        out = asyncio.run(produce(ns.port, ns.n, ns.mode == "produce-gather"))
    with open(ns.result, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
