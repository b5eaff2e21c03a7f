"""P7: does `captcha-worker plan` predict the queue wait? Run the configuration it recommends against the simulator
and compare the measured wait with the prediction.

For each case: ``captcha-worker plan --rate R --mix M --p95-wait TARGET --plan LAB=T:1`` (the plan table reduced
to one T-thread plan, so the recommendation is that plan and its worker.concurrency), then ``demo.running_stack``
starts redis-server, the simulator (T threads, ``--speed S``, no faults, ``--seed``: the run's seed, so its solve
times repeat) and T / concurrency worker processes, and a producer submits tasks of the mix as a Poisson stream of
rate R × S (conditioned on its count: ``_arrivals``) for ``duration`` seconds. Each solved task's queue wait
(submission to claim, ``Solved.queued_s``) times S is a wait in real seconds; tasks submitted during the warm-up
are left out. ``tests/test_planner.py`` runs one short case.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import math
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import ROOT, log, percentile
from captcha_worker import demo, methods
from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.planner import OVERHEAD_S, parse_mix, parse_rate
from captcha_worker.polling import PollSchedule

PARAMS: dict[str, tuple[str, dict[str, str]]] = {  # kind -> (method, params) of a valid task
    "turnstile": ("turnstile", {"sitekey": "0x4AAAAAAAbench", "pageurl": "https://example.com/login"}),
    "recaptcha_v2": ("userrecaptcha", {"googlekey": "6LeBenchGoogleKey_abcdefghijklmnopqrstuv",
                                       "pageurl": "https://example.com/form"}),
    "recaptcha_v3": ("userrecaptcha", {"googlekey": "6LeBenchGoogleKey_abcdefghijklmnopqrstuv",
                                       "pageurl": "https://example.com/form", "version": "v3", "action": "login"}),
    "geetest": ("geetest", {"gt": "022397c99c9f646f6477822485f30404", "challenge": "a66f31a53a4d6a2b5cbd3d2b8d7b1d0e",
                            "pageurl": "https://example.com/geetest"}),
}


@dataclass(frozen=True)
class Case:
    rate: str  # e.g. "1055/h"
    mix: str  # e.g. "turnstile=0.7,recaptcha_v2=0.3"
    threads: int
    target: str = "30s"


@dataclass
class Measured:
    case: dict[str, Any]
    speed: float
    duration_s: float
    warmup_s: float
    predicted: dict[str, Any]  # the plan command's JSON for the release
    tasks: int
    solved: int
    measured_mean_wait_s: float
    measured_p95_wait_s: float
    measured_p_wait: float  # share of tasks that waited more than 2 poll ticks (0.05 s real x speed)
    measured_service_mean_s: float  # claim to result: the time a task held its thread
    measured_service_scv: float
    replayed_mean_wait_s: float  # an ideal FIFO queue of T servers fed with the run's arrivals and holding times
    replayed_p95_wait_s: float
    #: the mean submission-to-claim time of the tasks after the warm-up that found a thread free in that ideal queue:
    #: what a claim itself costs in this run (the producer's push, the worker's wake-up and CLAIM, scheduling)
    claim_latency_s: float
    replayed_with_claims_mean_wait_s: float  # the same queue, each claim taking claim_latency_s, its thread idle
    replayed_with_claims_p95_wait_s: float
    band_p95_wait_s: dict[str, float]  # quantiles of the p95 over windows of this length in the model's own queue
    wall_s: float


def plan(case: Case) -> dict[str, Any]:
    """The planner's recommendation for a one-plan table of `case.threads` threads (the CLI's JSON)."""
    proc = subprocess.run([sys.executable, "-m", "captcha_worker.cli", "plan", "--rate", case.rate, "--mix", case.mix,
                           "--p95-wait", case.target, "--plan", f"LAB={case.threads}:1", "--json"],
                          capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _arrivals(rate_per_s: float, mix: dict[str, float], duration_s: float, seed: int) -> list[tuple[float, str]]:
    """A Poisson stream conditioned on its count: exactly rate × duration arrivals, uniformly placed (that is what a
    Poisson process with that many arrivals looks like), and exactly the mix's shares of each kind, shuffled. The
    run then measures the queue, not how far one sample of the stream strayed from the planned rate and mix."""
    rng = random.Random(seed)
    n = round(rate_per_s * duration_s)
    total = sum(mix.values())
    kinds = [k for k, w in mix.items() for _ in range(round(n * w / total))]
    kinds += [max(mix, key=mix.__getitem__)] * (n - len(kinds))
    rng.shuffle(kinds)
    return list(zip(sorted(rng.uniform(0, duration_s) for _ in range(n)), kinds[:n], strict=True))


async def _ready(q: CaptchaQueue, workers: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (await q.queue.stats()).workers_alive < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} workers did not start within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # first threadsinfo reads and budget units taken


@dataclass(frozen=True)
class Task:
    """One solved task of a run, in real seconds (scaled by the speed) from the start of the producer."""

    submitted: float
    claimed: float
    finished: float
    counted: bool  # submitted after the warm-up


async def _drive(case: Case, rec: dict[str, Any], speed: float, duration_s: float, warmup_s: float,
                 seed: int) -> tuple[list[Task], int]:

    release = rec["releases"][0]
    ns = argparse.Namespace(threads=release["threads"], workers=release["max_replicas"],
                            concurrency=release["concurrency"], speed=speed, unsolvable=0.0, seed=seed)
    arrivals = _arrivals(parse_rate(case.rate) * speed, parse_mix(case.mix), duration_s, seed)
    async with demo.running_stack(ns) as (stack, _), CaptchaQueue.from_url(stack.redis_url) as q:
        await _ready(q, ns.workers)
        ids, counted = [], set()
        start, t0 = time.monotonic(), time.time()
        for at, kind in arrivals:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            method, params = PARAMS[kind]
            ids.append(await q.submit(method, params))
            if at >= warmup_s:
                counted.add(ids[-1])
        tasks = []
        async for outcome in q.as_completed(ids, timeout=120):
            t = outcome.timings if isinstance(outcome, Solved) else None
            if t is not None and t.submitted_at and t.claimed_at and t.finished_at:
                tasks.append(Task((t.submitted_at - t0) * speed, (t.claimed_at - t0) * speed,
                                  (t.finished_at - t0) * speed, outcome.id in counted))
    return sorted(tasks, key=lambda x: x.submitted), len(ids)


def fifo_waits(arrivals: list[float], holds: list[float], servers: int, claim_s: float = 0.0) -> list[float]:
    """The waits of an ideal FIFO queue with `servers` servers for these arrival times (sorted) and holding times;
    `claim_s`: each task is taken `claim_s` after it could be (its server idle meanwhile), as a claim takes time."""
    free = [0.0] * servers
    waits = []
    for at, hold in zip(arrivals, holds, strict=True):
        start = max(at, heapq.heappop(free)) + claim_s
        heapq.heappush(free, start + hold)
        waits.append(start - at)
    return waits


def model_holds(mix: dict[str, float], n: int, rng: random.Random) -> list[float]:
    """Holding times as the planner models them: a normal solve time fetched by the poll schedule, plus the
    per-task overhead."""

    kinds = {k: (methods.by_name(k), PollSchedule.for_kind(methods.by_name(k))) for k in mix}
    out = []
    for name in rng.choices(list(mix), list(mix.values()), k=n):
        kind, sched = kinds[name]
        solve = rng.gauss(kind.solve_mean_s, kind.solve_stddev_s)
        late = max(0.0, solve - sched.first)
        out.append(sched.first + math.ceil(late / sched.interval) * sched.interval + OVERHEAD_S)
    return out


def model_windows(mix: dict[str, float], rate_per_s: float, threads: int, *, duration_s: float, warmup_s: float,
                  reps: int, seed: int = 1) -> list[float]:
    """The p95 wait of `reps` windows of `duration_s` (real seconds) of the model's own queue: how much the p95 of
    a run of that length varies by chance alone."""
    rng = random.Random(seed)
    out = []
    for _ in range(reps):
        arrivals = [t for t, _ in _arrivals(rate_per_s, mix, duration_s, rng.randrange(1 << 30))]
        waits = fifo_waits(arrivals, model_holds(mix, len(arrivals), rng), threads)
        out.append(percentile([w for t, w in zip(arrivals, waits, strict=True) if t >= warmup_s], 95))
    return sorted(out)


def measure(case: Case, *, speed: float, duration_s: float, warmup_s: float, seed: int = 7,
            band_reps: int = 400) -> Measured:

    rec = plan(case)
    started = time.monotonic()
    tasks, submitted = asyncio.run(_drive(case, rec, speed, duration_s, warmup_s, seed))
    kept = [t for t in tasks if t.counted]
    if not kept:
        raise RuntimeError("no solved task after the warm-up")
    waits = [t.claimed - t.submitted for t in kept]
    holds = [t.finished - t.claimed for t in kept]
    s_mean = sum(holds) / len(holds)
    s_var = sum((x - s_mean) ** 2 for x in holds) / len(holds)
    threads = rec["releases"][0]["threads"]
    arrived, held = [t.submitted for t in tasks], [t.finished - t.claimed for t in tasks]
    replay = fifo_waits(arrived, held, threads)
    replayed = [w for t, w in zip(tasks, replay, strict=True) if t.counted]
    free = [t.claimed - t.submitted for t, w in zip(tasks, replay, strict=True) if t.counted and w == 0]
    claim_s = sum(free) / len(free) if free else 0.0
    with_claims = [w for t, w in zip(tasks, fifo_waits(arrived, held, threads, claim_s), strict=True) if t.counted]
    band = model_windows(parse_mix(case.mix), parse_rate(case.rate), threads, duration_s=duration_s * speed,
                         warmup_s=warmup_s * speed, reps=band_reps)
    return Measured(case=asdict(case), speed=speed, duration_s=duration_s, warmup_s=warmup_s,
                    predicted=rec["releases"][0] | {"threads_needed": rec["threads_needed"],
                                                    "mean_service_s": rec["workload"]["mean_service_s"],
                                                    "scv": rec["workload"]["scv"]},
                    tasks=submitted, solved=len(kept), measured_mean_wait_s=sum(waits) / len(waits),
                    measured_p95_wait_s=percentile(waits, 95),
                    measured_p_wait=sum(w > 0.05 * speed for w in waits) / len(waits),
                    measured_service_mean_s=s_mean, measured_service_scv=s_var / s_mean**2,
                    replayed_mean_wait_s=sum(replayed) / len(replayed), replayed_p95_wait_s=percentile(replayed, 95),
                    claim_latency_s=claim_s, replayed_with_claims_mean_wait_s=sum(with_claims) / len(with_claims),
                    replayed_with_claims_p95_wait_s=percentile(with_claims, 95),
                    band_p95_wait_s={f"q{q:g}": percentile(band, q) for q in (0.5, 1, 5, 50, 95, 99, 99.5)},
                    wall_s=time.monotonic() - started)


CASES = (  # utilisation 0.7, 0.8 and 0.9 of the planned threads
    Case("893/h", "turnstile=0.7,recaptcha_v2=0.3", 10),
    Case("1021/h", "turnstile=0.7,recaptcha_v2=0.3", 10),
    Case("2297/h", "turnstile=0.7,recaptcha_v2=0.3", 20),
)


def run(*, cases: tuple[Case, ...] = CASES, speed: float = 20.0, duration_s: float = 450.0,
        warmup_s: float = 30.0) -> dict[str, Any]:
    rows = []
    for case in cases:
        log(f"  plan {case.rate} {case.mix} on {case.threads} threads ...")
        m = measure(case, speed=speed, duration_s=duration_s, warmup_s=warmup_s, band_reps=200)
        p = m.predicted
        log(f"    predicted p95 {p['p95_wait_s']:.1f} s, mean {p['mean_wait_s']:.1f} s; measured p95 "
            f"{m.measured_p95_wait_s:.1f} s, mean {m.measured_mean_wait_s:.1f} s ({m.solved} solved); replayed p95 "
            f"{m.replayed_p95_wait_s:.1f} s; chance band (5-95 %) {m.band_p95_wait_s['q5']:.1f}-"
            f"{m.band_p95_wait_s['q95']:.1f} s")
        rows.append(asdict(m))
    return {"params": {"speed": speed, "duration_s": duration_s, "warmup_s": warmup_s}, "cases": rows,
            "targets": {}}
