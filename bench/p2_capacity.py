"""P2 capacity: one `captcha-worker run` process against the simulator at 20 s mean latency (speed 1, real
timing), at several in-flight levels: its CPU (cores) and RSS over a steady-state window, and whether it held
the level.

Per level L: a fresh redis-server and simulator (plan threads far above L, so nothing queues there), a worker
with WORKER_CONCURRENCY = CAPTCHAAI_THREADS = L.  L tasks are submitted evenly over about one solve cycle (so
the solves' phases are uniform, as in a long-running steady state, instead of L solves polling in lockstep),
then a backlog of 3·L so that every freed slot claims again at once.  After a settle time the worker's CPU
time and RSS are sampled (psutil, once a second) over consecutive sub-windows; each sub-window is one
repetition.  The simulator is a separate process: its CPU is reported, never counted as the worker's.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

import psutil

from bench.common import RedisServer, SimulatorProcess, listening, log, summary, wait_for_workers, worker_env
from captcha_worker.client import CaptchaQueue

LATENCY = "turnstile=20:2"
TURNSTILE = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


async def _submit_staggered(url: str, level: int, spread_s: float, backlog: int) -> None:
    """`level` tasks spread evenly over `spread_s` (about one solve cycle), so that the solves' phases are uniform
    from the start and the window sees a steady state rather than synchronised waves; then the backlog."""

    spec = {"method": "turnstile", "params": TURNSTILE}
    steps = max(1, int(spread_s / 0.25))
    async with CaptchaQueue.from_url(url) as q:
        t0 = time.monotonic()
        sent = 0
        for i in range(1, steps + 1):
            due = round(level * i / steps)
            if due > sent:
                await q.submit_many([spec] * (due - sent))
                sent = due
            await asyncio.sleep(max(0.0, t0 + i * spread_s / steps - time.monotonic()))
        await q.submit_many([spec] * backlog)


def one_level(level: int, *, subwindows: int, subwindow_s: float, settle_s: float,
              ramp_s: float, idle_s: float) -> dict[str, Any]:
    with RedisServer() as rs, SimulatorProcess(["--threads", str(max(10 * level, 1000)), "--latency", LATENCY,
                                                "--speed", "1"]) as sim:
        env = worker_env(rs.url, concurrency=level, threads=level, api_url=sim.url)
        with listening([sys.executable, "-m", "captcha_worker.cli", "run"], env, "bench worker") as (worker, m):
            metrics_port = int(m["port"])  # METRICS_PORT=0: the port its `metrics listening on` line names
            r = rs.client()
            wp = psutil.Process(worker.pid)
            simp = psutil.Process(sim.proc.pid) if sim.proc else None
            wait_for_workers(r, 1, procs=[worker])  # registered, plan read: ready to claim
            t0 = time.monotonic()
            # the worker with its slots and budget but no task: its CPU floor (timers, heartbeats, blocking claim)
            i0, it0 = _cpu(wp), time.monotonic()
            time.sleep(idle_s)
            idle_cores = (_cpu(wp) - i0) / (time.monotonic() - it0)
            asyncio.run(_submit_staggered(rs.url, level, ramp_s, 3 * level))
            ramp_took = time.monotonic() - t0
            time.sleep(settle_s)
            sim.reset()  # max_in_flight etc. from here on
            windows: list[dict[str, Any]] = []
            sim_in_flight: list[int] = []
            processing: list[int] = []
            for _ in range(subwindows):
                c0, s0, w0 = _cpu(wp), _cpu(simp) if simp else 0.0, time.monotonic()
                rss_max = 0
                next_t = w0
                while True:
                    next_t += 1.0
                    time.sleep(max(0.0, next_t - time.monotonic()))
                    rss_max = max(rss_max, wp.memory_info().rss)
                    st = sim.stats()
                    sim_in_flight.append(int(st["in_flight"]))
                    processing.append(int(r.llen("{captcha}:processing")))
                    if time.monotonic() - w0 >= subwindow_s - 0.01:
                        break
                c1, s1, w1 = _cpu(wp), _cpu(simp) if simp else 0.0, time.monotonic()
                windows.append({"cores": (c1 - c0) / (w1 - w0), "rss_mib": rss_max / 2**20,
                                "simulator_cores": (s1 - s0) / (w1 - w0), "seconds": w1 - w0})
            worker_in_flight = _metric(metrics_port, "captcha_solver_in_flight")
            st = sim.stats()
            pending_left = int(r.llen("{captcha}:pending"))
    calls = st["calls"]
    window = st["window_seconds"] or 1.0
    return {
        "level": level,
        "ramp_s": ramp_took,
        "idle_cores": idle_cores,
        "cores": summary([w["cores"] for w in windows]),
        "rss_mib": summary([w["rss_mib"] for w in windows]),
        "simulator_cores": summary([w["simulator_cores"] for w in windows]),
        "windows": windows,
        "sim_in_flight": summary(sim_in_flight),
        "sim_in_flight_min_fraction": min(sim_in_flight) / level if sim_in_flight else None,
        "sim_max_in_flight": st["max_in_flight"],
        "processing": summary(processing),
        "processing_min_fraction": min(processing) / level if processing else None,
        "worker_in_flight_gauge_end": worker_in_flight,
        "pending_left_at_end": pending_left,
        "api_requests_per_s": (calls.get("in.php", 0) + calls.get("res.php", 0)) / window,
        "solved_per_s": st["solved"] / window,
        # held: the median claimed count stays within 2 % of the level with the backlog never empty (dips: `min`)
        "sustained": bool(processing) and statistics.median(processing) >= 0.98 * level and pending_left > 0,
    }


_CALIBRATION = """
import asyncio, time
async def main():
    async def tick(p):
        while True:
            await asyncio.sleep(p)
    ticks = [asyncio.create_task(tick(p)) for p in (0.2, 1.0, 1.0, 5.0)]
    t0 = time.process_time()
    await asyncio.sleep(SECONDS)
    print((time.process_time() - t0) / SECONDS)
asyncio.run(main())
"""


def calibration(seconds: float) -> float:
    """CPU of a bare asyncio process with four timers (0.2, 1, 1, 5 s): what this machine charges for wake-ups."""
    out = subprocess.run([sys.executable, "-c", _CALIBRATION.replace("SECONDS", str(seconds))], capture_output=True,
                         text=True, check=True).stdout
    return float(out.strip())


def run(*, levels: list[int], subwindows: int, subwindow_s: float, settle_s: float,
        ramp_s: float = 20.0, idle_s: float = 5.0) -> dict[str, Any]:
    bare = calibration(idle_s)
    log(f"P2 calibration: a bare asyncio process with four timers uses {bare:.3f} cores here")
    results = []
    for level in levels:
        res = one_level(level, subwindows=subwindows, subwindow_s=subwindow_s, settle_s=settle_s,
                        ramp_s=ramp_s, idle_s=idle_s)
        log(f"P2 level {level}: {res['cores']['median']:.3f} cores, {res['rss_mib']['median']:.0f} MiB, "
            f"processing min {res['processing']['min']}, sim in_flight median {res['sim_in_flight']['median']}, "
            f"{res['api_requests_per_s']:.0f} API req/s, simulator {res['simulator_cores']['median']:.2f} cores")
        results.append(res)
    at = {r["level"]: r for r in results}
    target_level = 1000 if 1000 in at else max(at)
    t = at[target_level]
    return {
        "params": {"levels": levels, "latency": LATENCY, "speed": 1, "subwindows": subwindows,
                   "subwindow_s": subwindow_s, "settle_s": settle_s, "ramp_s": ramp_s, "idle_s": idle_s,
                   "load": "level tasks spread evenly over ramp_s (uniform solve phases), then a backlog of "
                           "3 x level",
                   "worker": "captcha-worker run (subprocess), WORKER_CONCURRENCY = CAPTCHAAI_THREADS = level, "
                             "LOG_LEVEL info, stdout to /dev/null",
                   "repetitions": "consecutive sub-windows of one steady-state run per level"},
        "bare_asyncio_timers_cores": bare,
        "levels": results,
        "targets": {
            "level": target_level,
            "p2_ge_1000_in_flight_le_0_25_core_le_150_mib": bool(
                target_level >= 1000 and t["sustained"] and t["cores"]["median"] <= 0.25
                and t["rss_mib"]["median"] <= 150),
            "cores_ok": t["cores"]["median"] <= 0.25,
            "rss_ok": t["rss_mib"]["median"] <= 150,
            "sustained": t["sustained"],
        },
    }
