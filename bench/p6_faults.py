"""P6 fault storm: one-second solves while the API misbehaves, submit → result latency and losses.

The simulator (a process of its own, ``--speed 1``, turnstile latency 1 s ± 0.2 s) serves two ``captcha-worker
run`` processes (``API_TIME_SCALE=1``: every delay real) whose budget exceeds the in-flight load, so the figure is
the cost of the faults, not of queueing.  First a warm-up without faults, in rounds (a batch, then the next once
it is answered): the workers' poll schedule starts from the methods table's 12 s and learns the 1 s solve time
from solve to solve, as a long-running worker has; a burst would let a single generation of solves all poll on
the first estimate.  Then, on the same processes, the measured phases: the storm — per request ``html502``,
``nonjson`` and ``reset`` at 10 % each, ``server_error`` on in.php at 10 %, ``slow`` at 5 % (the reply held
``--slow-seconds``, past the HTTP timeouts) — and the same load without faults (the floor: 1 s solve + the first
poll).

Tasks are submitted at a fixed rate on an absolute schedule by one ``CaptchaQueue``; latency is the producer's
wall clock from its ``submit()`` call to the outcome.  Reported per phase: p50 / p90 / p99 / max, solved / failed
/ lost (no outcome within the wait), API calls per task and the faults the simulator injected.

A second scenario replays the setup the storm was first reported in: fresh workers (2 × 10 slots, a 20-thread
plan), the storm on from the start, 300 tasks submitted at once. There the figure is mostly queueing (15 tasks
per slot) and the poll schedule learning the 1 s solve time while the backlog drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from bench.common import (
    ROOT,
    RedisServer,
    SimulatorProcess,
    log,
    percentile,
    stop_process,
    summary,
    wait_for_workers,
    worker_env,
)

PARAMS = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}
FAULTS = {"html502": 0.10, "nonjson": 0.10, "reset": 0.10, "server_error": 0.10, "slow": 0.05}
NO_FAULTS = dict.fromkeys(FAULTS, 0.0)


async def _warm_up(url: str, rounds: int, per_round: int) -> float:
    """Rounds of `per_round` tasks, each round once the previous one is answered. Returns the last round's median
    latency (how far the schedule learnt)."""
    from captcha_worker.client import CaptchaQueue

    async with CaptchaQueue.from_url(url) as q:
        for _ in range(rounds):
            t = time.monotonic()
            ids = await q.submit_many([{"method": "turnstile", "params": PARAMS} for _ in range(per_round)])
            last = [time.monotonic() - t async for _ in q.as_completed(ids, timeout=120)]
    return percentile(last, 50)


async def _produce(url: str, n: int, rate: float, wait_s: float) -> dict[str, Any]:
    from captcha_worker.client import CaptchaQueue, Solved, TimedOut

    latencies: list[float] = []
    counts = {"solved": 0, "failed": 0, "lost": 0}
    calls: list[int] = []

    async def one(q: CaptchaQueue, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        t = time.monotonic()
        outcome = await q.result(await q.submit("turnstile", PARAMS), timeout=wait_s)
        if isinstance(outcome, Solved):
            counts["solved"] += 1
            latencies.append(time.monotonic() - t)
            calls.append(outcome.api_calls)
        elif isinstance(outcome, TimedOut):
            counts["lost"] += 1
        else:
            counts["failed"] += 1

    async with CaptchaQueue.from_url(url) as q:
        t0 = time.monotonic() + 0.2
        everything = asyncio.gather(*(one(q, t0 + i / rate) for i in range(n)))
        try:
            await asyncio.wait_for(asyncio.shield(everything), n / rate + wait_s + 60)
        except TimeoutError:  # a waiter outlived its own timeout: show where (a bug, not a figure)
            for t in asyncio.all_tasks():
                t.print_stack(limit=8, file=sys.stderr)
            raise
    return {"latencies": latencies, "counts": counts, "api_calls": calls}


def _phase(rs: RedisServer, sim: SimulatorProcess, faults: dict[str, float], *, tasks: int, rate: float,
           wait_s: float) -> dict[str, Any]:
    sim.configure(faults=faults)
    sim.reset()
    started = time.monotonic()
    out = asyncio.run(_produce(rs.url, tasks, rate, wait_s))
    stats = sim.stats()
    lat = out["latencies"]
    return {
        "p50_s": percentile(lat, 50), "p90_s": percentile(lat, 90), "p99_s": percentile(lat, 99),
        "max_s": max(lat) if lat else None, **out["counts"],
        "api_calls_per_task": sum(out["api_calls"]) / len(out["api_calls"]) if out["api_calls"] else None,
        "faults_injected": stats["faults"], "sim_submitted": stats["submitted"],
        "wall_s": round(time.monotonic() - started, 1),
    }


@contextlib.contextmanager
def _stack(*, faults: dict[str, float], slow_s: float, seed: int, workers: int, concurrency: int, threads: int,
           http_timeout_s: float) -> Iterator[tuple[RedisServer, SimulatorProcess]]:
    """redis-server, the simulator (1 s turnstile, these faults from the start) and `workers` worker processes
    holding their budget."""
    fault_args = [a for name, rate in faults.items() for a in ("--fault", f"{name}={rate}")]
    sim_args = ["--threads", str(threads), "--speed", "1", "--latency", "turnstile=1:0.2", "--slow-seconds",
                str(slow_s), "--seed", str(seed), *fault_args]
    with RedisServer() as rs, SimulatorProcess(sim_args) as sim:
        procs = [subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"], cwd=ROOT,
                                  env=worker_env(rs.url, concurrency=concurrency, threads=threads, api_url=sim.url,
                                                 HTTP_TIMEOUT_SECONDS=str(http_timeout_s), MAX_ATTEMPTS="10",
                                                 LEASE_SECONDS="30"),  # one env each: its own metrics port
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
        try:
            r = rs.client()
            wait_for_workers(r, workers, procs=procs)
            yield rs, sim
        finally:
            for p in procs:
                stop_process(p)


def one_run(*, tasks: int, rate: float, warmup: int, slow_s: float, workers: int, concurrency: int, threads: int,
            http_timeout_s: float, seed: int, wait_s: float = 300.0) -> dict[str, Any]:
    with _stack(faults={}, slow_s=slow_s, seed=seed, workers=workers, concurrency=concurrency, threads=threads,
                http_timeout_s=http_timeout_s) as (rs, sim):
        learnt = asyncio.run(_warm_up(rs.url, warmup, 5 * workers))
        storm = _phase(rs, sim, FAULTS, tasks=tasks, rate=rate, wait_s=wait_s)
        calm = _phase(rs, sim, NO_FAULTS, tasks=tasks, rate=rate, wait_s=wait_s)
    return {"storm": storm, "no_faults": calm, "warm_up_last_round_p50_s": learnt}


def burst_run(*, tasks: int, slow_s: float, http_timeout_s: float, seed: int, workers: int = 2,
              concurrency: int = 10, threads: int = 20) -> dict[str, Any]:
    """The first report's setup: fresh workers, the storm from the start, every task submitted at once."""
    with _stack(faults=FAULTS, slow_s=slow_s, seed=seed, workers=workers, concurrency=concurrency, threads=threads,
                http_timeout_s=http_timeout_s) as (rs, sim):
        sim.reset()
        out = asyncio.run(_produce(rs.url, tasks, rate=1e6, wait_s=900))
    lat = out["latencies"]
    return {"p50_s": percentile(lat, 50), "p99_s": percentile(lat, 99), "max_s": max(lat) if lat else None,
            **out["counts"], "slots": workers * concurrency, "threads": threads}


def run(*, tasks: int = 300, rate: float = 30.0, warmup: int = 30, reps: int = 3, slow_s: float = 40.0,
        http_timeout_s: float = 30.0, workers: int = 2, concurrency: int = 150, threads: int = 300,
        burst: bool = True) -> dict[str, Any]:
    common = {"tasks": tasks, "rate": rate, "warmup": warmup, "slow_s": slow_s, "workers": workers,
              "concurrency": concurrency, "threads": threads, "http_timeout_s": http_timeout_s}
    runs: dict[str, list[dict[str, Any]]] = {"storm": [], "no_faults": []}
    learnt = []
    for rep in range(reps):
        res = one_run(seed=11 + rep, **common)
        learnt.append(res.pop("warm_up_last_round_p50_s"))
        log(f"P6 warm-up rep {rep + 1}/{reps}: last round p50 {learnt[-1]:.2f}s")
        for name, phase in res.items():
            log(f"P6 {name} rep {rep + 1}/{reps}: p50 {phase['p50_s']:.2f}s p99 {phase['p99_s']:.2f}s max "
                f"{phase['max_s']:.1f}s solved {phase['solved']} failed {phase['failed']} lost {phase['lost']}")
            runs[name].append(phase)
    first_report = burst_run(tasks=tasks, slow_s=slow_s, http_timeout_s=http_timeout_s, seed=11) if burst else None
    if first_report:
        log(f"P6 burst (first report's setup): p50 {first_report['p50_s']:.1f}s p99 {first_report['p99_s']:.1f}s "
            f"lost {first_report['lost']}")
    storm = runs["storm"]
    return {
        "params": {**common, "faults": FAULTS, "latency": "turnstile 1 s ± 0.2 s (simulator --speed 1)",
                   "api_time_scale": 1, "repetitions": reps},
        "storm_p50_s": summary([r["p50_s"] for r in storm]),
        "storm_p99_s": summary([r["p99_s"] for r in storm]),
        "no_faults_p50_s": summary([r["p50_s"] for r in runs["no_faults"]]),
        "warm_up_last_round_p50_s": summary(learnt),
        "runs": runs,
        "burst_first_report_setup": first_report,
        "targets": {
            "p6_storm_p50_le_5s": summary([r["p50_s"] for r in storm])["median"] <= 5.0,
            "p6_nothing_lost": all(r["lost"] == 0 for r in storm),
        },
    }
