"""P1 child: our producer (the peers' children are ``bench/peer_<system>.py``; our worker is ``bench/instant.py``).

It prints nothing and writes one JSON object to ``--result``. The task is the same as the peers' jobs: a
Turnstile-shaped payload (``sitekey``, ``pageurl``), ``bench.peer_common.PARAMS``.

    python -m bench.p1_child produce --url URL --n N [--one-by-one] --result F
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from bench.peer_common import PARAMS, write_result


async def produce(url: str, n: int, one_by_one: bool) -> dict[str, Any]:
    from captcha_worker.client import CaptchaQueue

    async with CaptchaQueue.from_url(url) as q:
        specs = [{"method": "turnstile", "params": PARAMS} for _ in range(n)]
        t = time.perf_counter()
        if one_by_one:
            for _ in range(n):
                await q.submit("turnstile", PARAMS)
        else:
            await q.submit_many(specs)
        elapsed = time.perf_counter() - t
    return {"n": n, "seconds": elapsed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.p1_child")
    p.add_argument("mode", choices=["produce"])
    p.add_argument("--url", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--one-by-one", action="store_true", help="submit() per task instead of one submit_many()")
    p.add_argument("--result", required=True)
    ns = p.parse_args(argv)
    write_result(ns.result, asyncio.run(produce(ns.url, ns.n, ns.one_by_one)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
