"""P3 latency at moderate load: pickup (submit → solve starts, with a free slot) and delivery (worker done →
the producer has the result), ours vs the seed guide (bench/seed_baseline.py).

Both sides use an in-process solver whose answer is its own start time (``time.time()``) and that then holds
its slot for a uniform 0.5-1.5 s (a stand-in for the API: without it an instant answer would already be there
at the seed producer's first HGET, right after its RPUSH, which never happens with real solve times).  Every
latency comes from timestamps on one machine's clock carried in the task and result:

* pickup   = solve start − ``submitted_at`` (stamped by the producer just before the push);
* delivery = producer receive time − worker's done time (ours: ``timings.finished_at``, stamped just before the
  ACK script; seed: ``completed_at``, stamped just before ``HSET``).

Ours: one worker process (``python -m bench.instant serve``, WORKER_CONCURRENCY 100 so a slot is always free)
and the ``CaptchaQueue`` producer (``submit`` + ``result``: pushed results, no polling).  Seed: one
``SeedWorker`` process with 100 threads (each a BLPOP loop, one task at a time) and ``SeedQueue.submit`` +
``wait_result`` (HGET every 1 s), one thread per waiting task.  Tasks are submitted at a fixed rate on an
absolute schedule; the first second of each run is discarded (warm-up).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.common import ROOT, RedisServer, log, percentile, python_env, stop_process, summary, worker_env
from captcha_worker.client import CaptchaQueue, Solved

PARAMS = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}


def _wait_for_worker(r: Any, key: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not r.zcard(key):
        if time.monotonic() > deadline:
            raise RuntimeError("P3: worker did not register")
        time.sleep(0.05)


async def _ours_producer(url: str, rate: float, duration: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"pickup": [], "delivery": [], "pickup_to_claimed": [], "claimed_to_solve": []}

    async def wait(q: CaptchaQueue, tid: str) -> None:
        outcome = await q.result(tid, timeout=30)
        received = time.time()
        t = outcome.timings if isinstance(outcome, Solved) else None
        if isinstance(outcome, Solved) and t and t.submitted_at and t.finished_at and t.claimed_at:
            started = float(outcome.solution)
            out["pickup"].append(started - t.submitted_at)
            out["delivery"].append(received - t.finished_at)
            out["pickup_to_claimed"].append(t.claimed_at - t.submitted_at)  # push + BLMOVE wake + LEASE
            out["claimed_to_solve"].append(started - t.claimed_at)  # job task start, parse, checks

    async with CaptchaQueue.from_url(url) as q:
        waits = []
        n = int(rate * duration)
        t0 = time.monotonic()
        for i in range(n):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            tid = await q.submit("turnstile", PARAMS)
            waits.append(asyncio.create_task(wait(q, tid)))
        await asyncio.gather(*waits)
    return out


def _seed_producer(url: str, rate: float, duration: float) -> dict[str, list[float]]:
    from bench.seed_baseline import SeedQueue  # noqa: PLC0415 - a benchmark stage is imported when it runs

    pickup: list[float] = []
    delivery: list[float] = []
    lock = threading.Lock()
    local = threading.local()

    def one() -> None:
        q = getattr(local, "q", None)
        if q is None:
            q = local.q = SeedQueue(url)
        tid = q.submit("turnstile", PARAMS)
        result = q.wait_result(tid, timeout=30)
        received = time.time()
        if result and result.get("status") == "solved":
            with lock:
                pickup.append(float(result["solution"]) - result["submitted_at"])
                delivery.append(received - result["completed_at"])

    n = int(rate * duration)
    with ThreadPoolExecutor(max_workers=max(64, int(rate * 3))) as pool:
        t0 = time.monotonic()
        futures = []
        for i in range(n):
            time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            futures.append(pool.submit(one))
        for f in futures:
            f.result()
    return {"pickup": pickup, "delivery": delivery}


def _ms(xs: list[float]) -> list[float]:
    return [1000.0 * x for x in xs]


def _stats(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(xs, 50), "p99_ms": percentile(xs, 99), "mean_ms": sum(xs) / len(xs) if xs else 0.0,
            "max_ms": max(xs) if xs else 0.0, "samples": len(xs)}


HOLD = "0.5:1.5"


def run(*, rate: float, duration: float, reps: int, concurrency: int = 100) -> dict[str, Any]:
    warm = int(rate)  # discard the first second
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "seed": []}
    pooled: dict[str, dict[str, list[float]]] = {s: {} for s in runs}
    load: list[float] = []
    with RedisServer() as rs:
        r = rs.client()
        for rep in range(reps):
            load.append(os.getloadavg()[0])
            for system in ("ours", "seed"):
                r.flushall()
                if system == "ours":
                    env = worker_env(rs.url, concurrency=concurrency, threads=concurrency, BENCH_SOLVE_HOLD=HOLD)
                    proc = subprocess.Popen([sys.executable, "-m", "bench.instant", "serve"], env=env, cwd=ROOT,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        _wait_for_worker(r, "{captcha}:workers")
                        time.sleep(0.5)
                        samples = asyncio.run(_ours_producer(rs.url, rate, duration))
                    finally:
                        stop_process(proc)
                else:
                    proc = subprocess.Popen([sys.executable, "-m", "bench.seed_baseline", "worker", "--redis-url",
                                             rs.url, "--instant", "--hold", HOLD, "--threads",
                                             str(concurrency)], env=python_env(), cwd=ROOT,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        time.sleep(1.0)  # the seed worker has no registration to wait for
                        samples = _seed_producer(rs.url, rate, duration)
                    finally:
                        stop_process(proc)
                entry = {}
                for phase, xs in samples.items():
                    ms = _ms(xs[warm:])
                    pooled[system].setdefault(phase, []).extend(ms)
                    entry[phase] = _stats(ms)
                runs[system].append(entry)
                log(f"P3 rep {rep + 1}/{reps} {system}: pickup p50 {entry['pickup']['p50_ms']:.2f} ms p99 "
                    f"{entry['pickup']['p99_ms']:.2f} ms; delivery p50 {entry['delivery']['p50_ms']:.2f} ms p99 "
                    f"{entry['delivery']['p99_ms']:.2f} ms")
    out: dict[str, Any] = {}
    for system, entries in runs.items():
        out[system] = {
            phase: {stat: summary([e[phase][stat] for e in entries]) for stat in ("p50_ms", "p99_ms", "mean_ms")}
            for phase in entries[0]}
        out[system]["pooled"] = {phase: _stats(xs) for phase, xs in pooled[system].items()}
    ours, seed = out["ours"], out["seed"]
    ratios = {f"seed_vs_ours_{phase}_{stat}": (seed[phase][stat]["median"] / ours[phase][stat]["median"])
              if ours[phase][stat]["median"] else None
              for phase in ("pickup", "delivery") for stat in ("p50_ms", "p99_ms")}
    return {
        "params": {"rate_per_s": rate, "duration_s": duration, "repetitions": reps, "warmup_tasks_dropped": warm,
                   "ours_worker": f"BENCH_SOLVE_HOLD={HOLD} python -m bench.instant serve "
                                  f"(WORKER_CONCURRENCY={concurrency})",
                   "seed_worker": f"python -m bench.seed_baseline worker --instant --hold {HOLD} "
                                  f"--threads {concurrency}",
                   "solve_hold_s": HOLD,
                   "clock": "time.time() on one machine, carried in the task and result",
                   "breakdown": "ours only: pickup_to_claimed = submitted_at -> Job created after the claim (push, "
                                "BLMOVE wake-up, LEASE script); claimed_to_solve = Job created -> solve() called"},
        "load_average_1m": load,
        "ours": ours,
        "seed": seed,
        "ratios": ratios,
        "targets": {"p3_ours_p99_le_5ms_both_ways": bool(ours["pickup"]["p99_ms"]["median"] <= 5.0
                                                         and ours["delivery"]["p99_ms"]["median"] <= 5.0),
                    "pickup_p99_ms": ours["pickup"]["p99_ms"]["median"],
                    "delivery_p99_ms": ours["delivery"]["p99_ms"]["median"]},
    }
