"""P4 API calls per solve and the latency each poll schedule adds, ours vs the seed's fixed 5 s polling.

Monte-Carlo: solve times are drawn with the simulator's own code (``SimConfig().latency_for(kind).sample``, the
clipped normal of ``methods.KINDS``) and replayed against

* ours: the worker's real ``polling.PollSchedule`` and ``LatencyModel`` (first poll one standard deviation before
  the expected solve time, then every half standard deviation within 1-2.5 s, 5 s in the tail, ±5 % jitter; the
  model starts from ``methods.py`` and learns from every solve, as in the worker), read from the code;
* seed: ``in.php``, then ``res.php`` every 5 s.

calls = 1 (in.php) + polls until the first poll at or after the solve time; added latency = that poll's time −
the solve time (when the worker learns the answer vs when it was ready).  Mixes: each kind alone and an equal
mix of the three.

Search: for each kind the best fixed (first poll, interval) pair on a grid (deterministic model), and the
optimal poll *sequence* for the distribution (dynamic programming over poll times:
minimum expected calls for a given mean added latency) — the bound any schedule can reach.

Real run: the simulator (separate process, ``--speed S``) and one ``captcha-worker run`` (API_TIME_SCALE=S)
solve a batch of each kind; calls per solve come from the results and the simulator's counters, the mean added
latency from the worker's solve time (first in.php → answer received) minus the simulator's true mean solve
time (busy thread-seconds ÷ tasks: exact, because nothing queues).  The seed worker
(``bench/seed_baseline.py``, 5 s ÷ S polling) runs the same batches.  Durations are scaled back by S.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    RedisServer,
    SimulatorProcess,
    log,
    percentile,
    python_env,
    stop_process,
    summary,
    wait_for_workers,
)
from bench.common import worker_env as _worker_env
from captcha_worker import methods
from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.localredis import free_port
from captcha_worker.polling import LatencyModel, PollSchedule
from captcha_worker.simulator import SimConfig
from tests.helpers import PINGBACK_LISTENING, wait_listening

KINDS = ("turnstile", "recaptcha_v2", "image")
SEED_INTERVAL_S = 5.0
PARAMS = {
    "turnstile": ("turnstile", {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}),
    "recaptcha_v2": ("userrecaptcha", {"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
                                       "pageurl": "https://example.com/login"}),
    # a 24x8 greyscale PNG of 121 bytes: over the simulator's 100-byte minimum (ERROR_ZERO_CAPTCHA_FILESIZE)
    "image": ("base64", {"body": "iVBORw0KGgoAAAANSUhEUgAAABgAAAAICAAAAADGymC/AAAAQElEQVR42lWOQRIAIAgC+f+ntwx0jENo4pYk"
                                 "xJVdLkqUs8/MX9deu24t4Eub3MRg5yoJY+hZgguv+UXW1G84AAdff2Gfks//iAAAAABJRU5ErkJggg=="}),
}


def _kind(name: str) -> Any:
    return methods.by_name(name)


def _latency(name: str) -> Any:
    return SimConfig().latency_for(_kind(name))


def sample_latencies(name: str, n: int, rng: random.Random) -> list[float]:
    lat = _latency(name)
    return [lat.sample(rng) for _ in range(n)]


# -- replaying schedules ------------------------------------------------------------------------------------
def replay_ours(kind: Any, latencies: list[float]) -> tuple[list[int], list[float]]:
    """The worker's schedule against each solve time, in order, learning from each solve as the worker does."""

    model = LatencyModel(kind.solve_mean_s, kind.solve_stddev_s)
    calls, added = [], []
    for x in latencies:
        sched = PollSchedule(model.mean, model.stddev)
        t, previous, n = 0.0, None, 0
        while True:
            t += sched.delay(n, t)
            n += 1
            if t >= x:
                break
            previous = t
        model.observe_found(t, previous)
        calls.append(1 + n)
        added.append(t - x)
    return calls, added


def replay_first_interval(latencies: list[float], first: float, interval: float,
                          rng: random.Random) -> tuple[list[int], list[float]]:
    """A fixed first + interval·n schedule with the worker's ±5 % jitter on every delay."""
    calls, added = [], []
    for x in latencies:
        t, n = first * rng.uniform(0.95, 1.05), 1
        while t < x:
            t += interval * rng.uniform(0.95, 1.05)
            n += 1
        calls.append(1 + n)
        added.append(t - x)
    return calls, added


def replay_fixed(latencies: list[float], first: float, interval: float) -> tuple[list[int], list[float]]:
    calls, added = [], []
    for x in latencies:
        k = 0 if x <= first else math.ceil((x - first) / interval)
        calls.append(2 + k)
        added.append(first + k * interval - x)
    return calls, added


def _describe(calls: list[int], added: list[float]) -> dict[str, float]:
    return {"calls_mean": statistics.fmean(calls), "added_mean_s": statistics.fmean(added),
            "added_p50_s": percentile(added, 50), "added_p95_s": percentile(added, 95)}


# -- best (first, interval) on a grid -----------------------------------------------------------------------
def grid_search(name: str, xs: list[float], seed_calls: float, seed_added: float, jitter: float = 1.0,
                points: list[tuple[float, float, float, float]] | None = None) -> dict[str, Any]:
    """Best fixed (first poll, interval) pairs for each goal, on a 0.25 s grid (jitter: mean stretch of delays;
    the worker's ±5 % averages out)."""
    import numpy as np  # noqa: PLC0415 - numpy only for this figure

    arr = np.asarray(xs, dtype=float)
    lat = _latency(name)
    top = lat.mean_s + 2 * lat.stddev_s
    best: dict[str, tuple[float, float, float, float] | None] = {
        "fewest_calls_with_added_le_1s": None, "fewest_calls_with_added_le_seed": None,
        "fewest_calls_with_added_le_seed_plus_1s": None, "least_added_with_calls_le_0_6x_seed": None}
    for first in (0.25 * i for i in range(1, int(top / 0.25) + 1)):
        f = first * jitter
        over = np.maximum(arr - f, 0.0)
        for interval in (0.25 * i for i in range(2, 41)):
            step = interval * jitter
            k = np.ceil(over / step)
            c = float(2.0 + k.mean())
            a = float((f + k * step - arr).mean())
            cand = (c, a, first, interval)
            if points is not None:
                points.append(cand)
            for goal, ok, better in (
                    ("fewest_calls_with_added_le_1s", a <= 1.0, 0),
                    ("fewest_calls_with_added_le_seed", a <= seed_added, 0),
                    ("fewest_calls_with_added_le_seed_plus_1s", a <= seed_added + 1.0, 0),
                    ("least_added_with_calls_le_0_6x_seed", c <= 0.6 * seed_calls, 1)):
                cur = best[goal]
                if ok and (cur is None or cand[better] < cur[better]):
                    best[goal] = cand
    return {goal: None if b is None else {"first_poll_s": b[2], "poll_interval_s": b[3], "calls_mean": b[0],
                                          "added_mean_s": b[1]} for goal, b in best.items()}


def mix_optimum(grids: dict[str, list[tuple[float, float, float, float]]],
                max_calls: float) -> dict[str, Any] | None:
    """Per-kind grid points that minimise the equal mix's mean added latency with its mean calls ≤ max_calls:
    every kind takes its point minimising calls + lam·added, lam bisected (one lam for all kinds is optimal)."""

    def pick(lam: float) -> tuple[dict[str, tuple[float, float, float, float]], float]:
        chosen = {name: min(pts, key=lambda p: p[0] + lam * p[1]) for name, pts in grids.items()}
        return chosen, sum(p[0] for p in chosen.values()) / len(chosen)

    lo, hi = 0.001, 1000.0
    best = None
    for _ in range(40):
        lam = math.sqrt(lo * hi)
        chosen, calls = pick(lam)
        if calls <= max_calls:
            best, lo = chosen, lam
        else:
            hi = lam
    if best is None:
        return None
    return {name: {"first_poll_s": p[2], "poll_interval_s": p[3], "calls_mean": p[0], "added_mean_s": p[1]}
            for name, p in best.items()}


# -- optimal poll sequence (dynamic programming) ------------------------------------------------------------
def optimal_sequence(xs: list[float], lam: float, dt: float = 0.1) -> tuple[list[float], float, float]:
    """Poll times minimising E[calls] + lam * E[added] for the empirical distribution xs (backward induction:
    V(s) = min over the next poll t > s of P(X > s) + lam * E[(t - X); s < X <= t] + V(t))."""
    import numpy as np  # noqa: PLC0415 - numpy only for this figure

    arr = np.sort(np.asarray(xs, dtype=float))
    m = math.ceil(float(arr[-1]) / dt) + 1
    grid = np.arange(m + 1) * dt
    idx = np.searchsorted(arr, grid + 1e-12, side="right")  # how many samples are <= t
    csum = np.concatenate(([0.0], np.cumsum(arr)))
    F = idx / len(arr)
    G = csum[idx] / len(arr)
    V = np.zeros(m + 1)
    nxt = np.full(m + 1, m)
    for s in range(m - 1, -1, -1):
        surv = 1.0 - F[s]
        if surv <= 0:
            continue
        t = np.arange(s + 1, m + 1)
        cost = surv + lam * (grid[t] * (F[t] - F[s]) - (G[t] - G[s])) + V[t]
        k = int(np.argmin(cost))
        V[s], nxt[s] = cost[k], t[k]
    polls, s = [], 0
    while s < m and 1.0 - F[s] > 0:
        s = int(nxt[s])
        polls.append(float(grid[s]))
    calls, added = replay_sequence(list(arr), polls)
    return polls, calls, added


def replay_sequence(xs: list[float], polls: list[float]) -> tuple[float, float]:
    calls = added = 0.0
    for x in xs:
        i = bisect.bisect_left(polls, x)
        i = min(i, len(polls) - 1)
        calls += 2 + i
        added += max(0.0, polls[i] - x)
    return calls / len(xs), added / len(xs)


def optimal_for_budget(xs: list[float], *, max_added: float | None = None,
                       max_calls: float | None = None) -> dict[str, Any] | None:
    """The optimal sequence with mean added ≤ max_added (fewest calls), or with mean calls ≤ max_calls (least
    added), by bisection on the Lagrange multiplier (a larger multiplier buys latency with calls)."""
    lo, hi = 0.005, 200.0
    best: tuple[list[float], float, float] | None = None
    for _ in range(20):
        lam = math.sqrt(lo * hi)
        polls, calls, added = optimal_sequence(xs, lam, dt=0.1)
        ok = added <= max_added if max_added is not None else calls <= (max_calls or 0.0)
        if ok:
            best = (polls, calls, added)
        if (max_added is not None) == ok:
            hi = lam
        else:
            lo = lam
    if best is None:
        return None
    polls, calls, added = best
    return {"calls_mean": calls, "added_mean_s": added, "polls_s": [round(p, 1) for p in polls]}


# -- Monte-Carlo --------------------------------------------------------------------------------------------
def monte_carlo(samples: int, seed: int, with_search: bool) -> dict[str, Any]:
    rng = random.Random(seed)
    per_kind: dict[str, Any] = {}
    mix: dict[str, dict[str, list[float]]] = {"ours": {"calls": [], "added": []}, "seed": {"calls": [], "added": []}}
    drawn: dict[str, list[float]] = {}
    grids: dict[str, list[tuple[float, float, float, float]]] = {}
    for name in KINDS:
        kind = _kind(name)
        xs = drawn[name] = sample_latencies(name, samples, rng)
        oc, oa = replay_ours(kind, xs)
        sc, sa = replay_fixed(xs, SEED_INTERVAL_S, SEED_INTERVAL_S)
        mix["ours"]["calls"] += oc
        mix["ours"]["added"] += oa
        mix["seed"]["calls"] += sc
        mix["seed"]["added"] += sa
        ours, seed_ = _describe(oc, oa), _describe(sc, sa)

        table = PollSchedule.for_kind(kind)
        entry: dict[str, Any] = {
            "latency": str(_latency(name)),
            "schedule": {"first_poll_s": table.first, "poll_interval_s": table.interval,
                         "tail_after_s": table.tail_after, "tail_interval_s": table.tail_interval,
                         "jitter": "each delay x U(0.95, 1.05)", "learning": "LatencyModel, every solve"},
            "ours": ours, "seed": seed_,
            "calls_ratio": ours["calls_mean"] / seed_["calls_mean"],
            "added_vs_seed_s": ours["added_mean_s"] - seed_["added_mean_s"],
        }
        entry["meets_target"] = entry["calls_ratio"] <= 0.6 and ours["added_mean_s"] <= 1.0
        if with_search:
            grids[name] = []
            entry["grid_best"] = grid_search(name, xs, seed_["calls_mean"], seed_["added_mean_s"],
                                             points=grids[name])
            entry["optimal_sequence"] = {
                "fewest_calls_with_added_le_1s": optimal_for_budget(xs, max_added=1.0),
                "fewest_calls_with_added_le_seed": optimal_for_budget(xs, max_added=seed_["added_mean_s"]),
                "fewest_calls_with_added_le_seed_plus_1s": optimal_for_budget(xs,
                                                                              max_added=seed_["added_mean_s"] + 1.0),
                "least_added_with_calls_le_0_6x_seed": optimal_for_budget(xs, max_calls=0.6 * seed_["calls_mean"]),
            }
            for label, pick in entry["grid_best"].items():
                if pick is not None:  # re-check the pick with the worker's ±5 % jitter
                    pick["checked_with_poll_schedule"] = _describe(*replay_first_interval(
                        xs, pick["first_poll_s"], pick["poll_interval_s"], rng))
                    pick["calls_ratio"] = pick["checked_with_poll_schedule"]["calls_mean"] / seed_["calls_mean"]
                    entry["grid_best"][label] = pick
        per_kind[name] = entry
    ours_mix = _describe([int(c) for c in mix["ours"]["calls"]], mix["ours"]["added"])
    seed_mix = _describe([int(c) for c in mix["seed"]["calls"]], mix["seed"]["added"])
    proposals: dict[str, Any] = {}
    if with_search:  # each goal's grid picks for every kind, replayed together through PollSchedule (equal mix)
        goals: dict[str, dict[str, Any]] = {}
        mixed = mix_optimum(grids, max_calls=0.6 * seed_mix["calls_mean"])
        if mixed is not None:
            goals["mix_least_added_with_calls_le_0_6x_seed"] = mixed
        for goal in ("fewest_calls_with_added_le_seed_plus_1s", "fewest_calls_with_added_le_seed",
                     "fewest_calls_with_added_le_1s"):
            goals[goal] = {name: per_kind[name]["grid_best"][goal] for name in KINDS}
        for goal, picks in goals.items():
            if any(p is None for p in picks.values()):
                continue
            calls: list[int] = []
            added: list[float] = []
            for name, pick in picks.items():
                c, a = replay_first_interval(drawn[name], pick["first_poll_s"], pick["poll_interval_s"], rng)
                calls += c
                added += a
            d = _describe(calls, added)
            proposals[goal] = {
                "values": {name: {"first_poll_s": p["first_poll_s"], "poll_interval_s": p["poll_interval_s"]}
                           for name, p in picks.items()},
                "mix": d, "calls_ratio": d["calls_mean"] / seed_mix["calls_mean"],
                "added_vs_seed_s": d["added_mean_s"] - seed_mix["added_mean_s"]}
    return {
        "samples_per_kind": samples,
        "kinds": per_kind,
        "proposals": proposals,
        "mix_equal_thirds": {"ours": ours_mix, "seed": seed_mix,
                             "calls_ratio": ours_mix["calls_mean"] / seed_mix["calls_mean"],
                             "added_vs_seed_s": ours_mix["added_mean_s"] - seed_mix["added_mean_s"],
                             "meets_target": ours_mix["calls_mean"] / seed_mix["calls_mean"] <= 0.6
                             and ours_mix["added_mean_s"] <= 1.0},
    }


# -- real run -----------------------------------------------------------------------------------------------
async def _ours_batch(url: str, name: str, n: int) -> list[dict[str, float]]:
    method, params = PARAMS[name]
    rows = []
    async with CaptchaQueue.from_url(url) as q:
        ids = await q.submit_many([{"method": method, "params": params} for _ in range(n)])
        async for outcome in q.as_completed(ids, timeout=600):
            if isinstance(outcome, Solved) and outcome.timings.started_at and outcome.timings.solved_at:
                rows.append({"calls": outcome.api_calls,
                             "solve_s": outcome.timings.solved_at - outcome.timings.started_at})
    return rows


def _seed_batch(url: str, name: str, n: int, timeout: float) -> list[dict[str, float]]:
    from bench.seed_baseline import SeedQueue  # noqa: PLC0415 - a benchmark stage is imported when it runs

    method, params = PARAMS[name]
    q = SeedQueue(url)
    ids = [q.submit(method, params) for _ in range(n)]
    deadline = time.monotonic() + timeout
    rows: dict[str, dict[str, float]] = {}
    while len(rows) < n and time.monotonic() < deadline:
        time.sleep(0.05)
        for tid in ids:
            if tid not in rows:
                res = q.get_result(tid)
                if res and res.get("status") == "solved":
                    rows[tid] = {"calls": res["api_calls"], "solve_s": res["solved_at"] - res["started_at"]}
    return list(rows.values())


SYSTEMS = ("ours", "pingback", "seed")


def _start_worker(env: dict[str, str], pingback: bool, logdir: Path) -> subprocess.Popen[bytes]:
    """`captcha-worker run`; with `pingback`, its own receiver is the PINGBACK_URL the simulator calls, with no
    relay in the measured path. The URL must be known before the worker starts, so its port is a guess
    (free_port), checked: the worker prints the port its receiver bound (or exits when it cannot bind it: another
    process took it first), and a start that did not bind the guessed port is started again on another."""
    for attempt in range(5):
        extra: dict[str, str] = {}
        if pingback:
            port = str(free_port())
            extra = {"PINGBACK_URL": f"http://127.0.0.1:{port}", "PINGBACK_PORT": port, "PINGBACK_HOST": "127.0.0.1"}
        path = logdir / f"worker.{attempt}.log"
        with open(path, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"], env={**env, **extra},
                                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        if not pingback:
            return proc
        try:
            bound = wait_listening(proc, path, "worker", pattern=PINGBACK_LISTENING)["port"].decode()
        except RuntimeError:  # it exited: the guessed port was taken
            stop_process(proc)
            continue
        if bound == extra["PINGBACK_PORT"]:
            return proc
        stop_process(proc)
    raise RuntimeError("P4: the worker's pingback receiver could not bind a free port in 5 tries")


def real_run(*, speed: float, n: int, reps: int, systems: tuple[str, ...] = SYSTEMS) -> dict[str, Any]:
    """`pingback`: ours in pingback mode (the simulator calls back; polls are the fallback)."""
    out: dict[str, Any] = {"speed": speed, "tasks_per_kind": n, "repetitions": reps, "kinds": {}}
    lat_args = [a for name in KINDS for a in ("--latency", f"{name}={_latency(name)}")]
    acc: dict[str, dict[str, dict[str, list[float]]]] = {
        name: {s: {"calls": [], "added_mean_s": [], "sim_calls": []} for s in systems} for name in KINDS}
    with RedisServer() as rs, SimulatorProcess(["--threads", "100000", "--speed", str(speed), *lat_args]) as sim, \
            tempfile.TemporaryDirectory(prefix="bench-p4-") as logdir:
        r = rs.client()
        for rep in range(reps):
            for system in systems:
                r.flushall()
                if system in ("ours", "pingback"):
                    env = _worker_env(rs.url, concurrency=n, threads=n, api_url=sim.url, API_TIME_SCALE=str(speed),
                                      THREADSINFO_INTERVAL_SECONDS="3600")
                    proc = _start_worker(env, system == "pingback", Path(logdir))
                    wait_for_workers(r, 1, procs=[proc])
                else:
                    proc = subprocess.Popen([sys.executable, "-m", "bench.seed_baseline", "worker", "--redis-url",
                                             rs.url, "--api-url", sim.url, "--key", "0123456789abcdef0123456789abcdef",
                                             "--threads", str(n), "--time-scale", str(speed)],
                                            env=python_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                try:
                    for name in KINDS:
                        time.sleep(0.3)
                        sim.reset()
                        if system != "seed":
                            rows = asyncio.run(_ours_batch(rs.url, name, n))
                        else:
                            rows = _seed_batch(rs.url, name, n, timeout=300)
                        st = sim.stats()
                        true_mean = st["busy_thread_seconds"] / max(1, st["submitted"])  # exact: nothing queued
                        sim_calls = (st["calls"]["in.php"] + st["res_actions"]["get"]) / max(1, st["solved"])
                        worker_mean = statistics.fmean(row["solve_s"] for row in rows) if rows else float("nan")
                        a = acc[name][system]
                        a["calls"].append(statistics.fmean(row["calls"] for row in rows) if rows else float("nan"))
                        a["sim_calls"].append(sim_calls)
                        a["added_mean_s"].append((worker_mean - true_mean) * speed)
                        log(f"P4 real rep {rep + 1}/{reps} {system} {name}: {a['calls'][-1]:.2f} calls/solve "
                            f"(simulator {sim_calls:.2f}), added {a['added_mean_s'][-1]:.2f} s "
                            f"({len(rows)}/{n} solved)")
                finally:
                    stop_process(proc)
    for name in KINDS:
        out["kinds"][name] = {s: {k: summary(v) for k, v in acc[name][s].items()} for s in systems}
        if "ours" in systems and "seed" in systems:
            o, s = out["kinds"][name]["ours"], out["kinds"][name]["seed"]
            out["kinds"][name]["calls_ratio"] = o["calls"]["median"] / s["calls"]["median"]
    if "pingback" in systems:
        pb: list[dict[str, dict[str, float]]] = [out["kinds"][name]["pingback"] for name in KINDS]
        out["pingback_mix"] = {"calls": statistics.fmean(r["calls"]["median"] for r in pb),
                               "sim_calls": statistics.fmean(r["sim_calls"]["median"] for r in pb),
                               "added_mean_s": statistics.fmean(r["added_mean_s"]["median"] for r in pb)}
        mix = out["pingback_mix"]
        mix["meets_target"] = mix["sim_calls"] <= 1.5 and mix["added_mean_s"] <= 0.3
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.p4_polling pingback [--speed S] [--tasks N] [--reps R]``: the real run of pingback mode
    alone (ours in pingback mode; add ``--systems ours,pingback,seed`` for the others), JSON on stdout."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench.p4_polling")
    parser.add_argument("what", choices=["pingback"])
    parser.add_argument("--speed", type=float, default=5.0)
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--systems", default="pingback")
    ns = parser.parse_args(argv)
    systems = tuple(s for s in ns.systems.split(",") if s)
    if not set(systems) <= set(SYSTEMS):
        parser.error(f"--systems: known are {', '.join(SYSTEMS)}")
    print(json.dumps(real_run(speed=ns.speed, n=ns.tasks, reps=ns.reps, systems=systems), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def run(*, samples: int, seed: int, speed: float, real_n: int, real_reps: int, search: bool) -> dict[str, Any]:
    t = time.monotonic()
    mc = monte_carlo(samples, seed, with_search=search)
    log(f"P4 Monte-Carlo ({samples}/kind) in {time.monotonic() - t:.1f}s: " + ", ".join(
        f"{k} ratio {v['calls_ratio']:.2f} added {v['ours']['added_mean_s']:.2f}s"
        for k, v in mc["kinds"].items()))
    real = real_run(speed=speed, n=real_n, reps=real_reps) if real_reps > 0 else None
    return {
        "params": {"kinds": list(KINDS), "seed_interval_s": SEED_INTERVAL_S, "mc_seed": seed,
                   "latency_source": "captcha_worker.simulator.SimConfig().latency_for(kind) (methods table)",
                   "schedule_source": "captcha_worker.polling.PollSchedule + LatencyModel (methods table, learning)"},
        "monte_carlo": mc,
        "real_run": real,
        "targets": {"p4_calls_le_0_6x_seed_and_added_le_1s_mix": mc["mix_equal_thirds"]["meets_target"],
                    "per_kind": {k: v["meets_target"] for k, v in mc["kinds"].items()}},
    }
