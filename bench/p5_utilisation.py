"""P5 plan utilisation: plan threads T, a backlog, several worker processes whose slots together exceed T.

The simulator enforces the plan (``--threads T --over-cap zero_balance``: every in.php beyond T is refused
with ERROR_ZERO_BALANCE and counted), at ``--speed S`` with the workers' ``API_TIME_SCALE=S``.  Workers start
first (they share the cluster-wide budget of T units in Redis), then the backlog is pushed at once.  While the
backlog is non-empty the parent samples ``/_sim/stats`` (in flight over time, for the plot) and Redis; the
figures are the simulator's exact integrals over that window:

* at-cap fraction = time with T solves in flight ÷ window (``at_cap_seconds``);
* utilisation = busy thread-seconds ÷ (T × window);
* over-cap rejections over the whole run (must be 0).

The simulator counts a thread busy from in.php acceptance until the answer is *ready*; a worker holds its budget
unit until it has *fetched* the answer (and then claims the next task and calls in.php).  The poll delay after
the answer is ready is therefore idle plan capacity, by construction.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from bench.common import ROOT, RedisServer, SimulatorProcess, log, stop_process, summary, wait_for_workers, worker_env
from captcha_worker.client import CaptchaQueue

TURNSTILE = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}


async def _push(url: str, n: int) -> None:
    async with CaptchaQueue.from_url(url) as q:
        await q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(n)])


#: the poll modes measured: the default (P4's learned schedule) and dense polls while tasks wait for a thread
MODES: dict[str, dict[str, str]] = {"default": {}, "dense": {"POLL_DENSE_WHEN_CONTENDED": "true"}}


def one_run(*, threads: int, backlog: int, workers: int, concurrency: int, speed: float,
            sample_s: float = 0.2, env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    with RedisServer() as rs, SimulatorProcess(["--threads", str(threads), "--over-cap", "zero_balance",
                                                "--speed", str(speed)]) as sim:
        r = rs.client()
        procs = []
        try:
            for _ in range(workers):
                env = worker_env(rs.url, concurrency=concurrency, threads=threads, api_url=sim.url,
                                 API_TIME_SCALE=str(speed), **(env_extra or {}))
                procs.append(subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "run"], env=env, cwd=ROOT,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_for_workers(r, workers, procs=procs)
            sim.reset()
            t0 = time.monotonic()
            asyncio.run(_push(rs.url, backlog))
            series: list[tuple[float, int, int]] = []  # (t, sim in_flight, pending)
            while True:
                st = sim.stats()
                pending = int(r.llen("{captcha}:pending"))
                series.append((round(time.monotonic() - t0, 3), int(st["in_flight"]), pending))
                if pending == 0:
                    break
                if time.monotonic() - t0 > 1800:
                    raise RuntimeError("P5: backlog not drained in 30 min")
                time.sleep(sample_s)
            window = st  # the stats at the moment the backlog became empty
            # the tail: every task answered, then the whole-run counters
            while int(r.llen("{captcha}:processing")) > 0 and time.monotonic() - t0 < 1900:
                st = sim.stats()
                series.append((round(time.monotonic() - t0, 3), int(st["in_flight"]), 0))
                time.sleep(sample_s)
            final = sim.stats()
        finally:
            for p in procs:
                stop_process(p)
    w = float(window["window_seconds"]) or 1.0
    steady = [s for s in series if s[0] >= 2.0 and s[2] > 0]
    return {
        "window_s": w,
        "window_s_at_speed_1": w * speed,
        "at_cap_fraction": float(window["at_cap_seconds"]) / w,
        "utilisation": float(window["utilisation"]),
        "over_cap_rejections": int(final["over_cap_rejections"]),
        "max_in_flight": int(final["max_in_flight"]),
        "solved": int(final["solved"]),
        "api_calls_per_solve": sum(int(final["calls"][e]) for e in ("in.php", "res.php"))
        / max(1, int(final["solved"])),
        "in_flight_sampled_mean": sum(s[1] for s in steady) / len(steady) if steady else None,
        "in_flight_sampled_min": min(s[1] for s in steady) if steady else None,
        "series": series,
    }


def run(*, threads: int, backlog: int, workers: int, concurrency: int, speed: float, reps: int) -> dict[str, Any]:
    """Each repetition runs every mode of MODES in turn (interleaved, so load on the machine hits both alike); the
    top-level figures are the default mode's, ``modes`` has each mode's."""
    by_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for rep in range(reps):
        for mode, env in MODES.items():
            res = one_run(threads=threads, backlog=backlog, workers=workers, concurrency=concurrency, speed=speed,
                          env_extra=env)
            log(f"P5 rep {rep + 1}/{reps} ({mode}): at cap {res['at_cap_fraction']:.1%} of {res['window_s']:.1f}s, "
                f"utilisation {res['utilisation']:.1%}, calls/solve {res['api_calls_per_solve']:.2f}, over-cap "
                f"{res['over_cap_rejections']}, max in flight {res['max_in_flight']}")
            by_mode[mode].append(res)
    runs = by_mode["default"]
    for mode_runs in by_mode.values():
        for r in mode_runs[:-1]:
            r.pop("series")  # keep one time series per mode (the last run); the plot draws the default's
    modes = {m: {"env": MODES[m], "utilisation": summary([r["utilisation"] for r in rs]),
                 "at_cap_fraction": summary([r["at_cap_fraction"] for r in rs]),
                 "api_calls_per_solve": summary([r["api_calls_per_solve"] for r in rs]),
                 "over_cap_rejections": summary([r["over_cap_rejections"] for r in rs])}
             for m, rs in by_mode.items()}
    return {
        "params": {"threads": threads, "backlog": backlog, "workers": workers, "concurrency_per_worker": concurrency,
                   "slots_total": workers * concurrency, "speed": speed, "api_time_scale": speed,
                   "kind": "turnstile (simulator default latency, methods table)", "over_cap": "zero_balance",
                   "repetitions": reps},
        "at_cap_fraction": summary([r["at_cap_fraction"] for r in runs]),
        "utilisation": summary([r["utilisation"] for r in runs]),
        "over_cap_rejections": summary([r["over_cap_rejections"] for r in runs]),
        "max_in_flight": summary([r["max_in_flight"] for r in runs]),
        "window_s": summary([r["window_s"] for r in runs]),
        "runs": runs,
        "modes": modes,
        "mode_runs": {m: rs for m, rs in by_mode.items() if m != "default"},
        "targets": {
            "p5_at_cap_ge_98pct": summary([r["at_cap_fraction"] for r in runs])["median"] >= 0.98,
            "p5_utilisation_ge_98pct": summary([r["utilisation"] for r in runs])["median"] >= 0.98,
            "p5_utilisation_ge_95pct": summary([r["utilisation"] for r in runs])["median"] >= 0.95,
            "p5_zero_over_cap": all(r["over_cap_rejections"] == 0 for rs in by_mode.values() for r in rs),
            "p5_dense_utilisation_ge_95pct": modes["dense"]["utilisation"]["median"] >= 0.95,
        },
    }
