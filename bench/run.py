"""Run the benchmarks: ``python -m bench.run [p1 .. p8] [--smoke] [--out DIR]`` (``make bench`` runs all).

Full mode writes ``bench/results/<name>.json``, the plots in ``docs/img/`` and rewrites the generated tables of
``docs/benchmarks.md`` (``python -m bench.report``).  ``--smoke`` runs every benchmark at toy sizes in about two
minutes (no timing assertions: the test suite checks the files and their keys) and writes to ``--out`` only.
Full and smoke runs of P1 build the peers' venvs when they are missing (``bench/venvs.py``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import NAMES, RESULTS, ROOT, log, write_result


def ensure_bench_deps() -> None:
    """Full runs need the `bench` extra (SAQ, matplotlib, requests, py-spy): install it if something is missing."""
    missing = []
    for mod in ("saq", "matplotlib", "requests", "psutil"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        log(f"installing the bench extra (missing: {', '.join(missing)})")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e",
                        f"{ROOT}[bench]"], check=True)


def _p1(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p1_queue  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:  # install: the first smoke run builds the peers' venvs too (bench/venvs.py), so every peer runs
        return p1_queue.run(n=200, concurrency=10, reps=1, submit_n=200, bench_requests=2000, install=True)
    return p1_queue.run(n=10_000, concurrency=50, reps=3, submit_n=10_000, bench_requests=100_000, install=True,
                        profile_dir=profile)


def _p2(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p2_capacity  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p2_capacity.run(levels=[20], subwindows=3, subwindow_s=1.0, settle_s=0.2, ramp_s=1.0, idle_s=0.5)
    return p2_capacity.run(levels=[250, 500, 1000, 2000], subwindows=3, subwindow_s=10.0, settle_s=2.0,
                           ramp_s=20.0)


def _p3(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p3_latency  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p3_latency.run(rate=20, duration=1.5, reps=1, concurrency=40)
    return p3_latency.run(rate=50, duration=12, reps=3)


def _p4(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p4_polling  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p4_polling.run(samples=2000, seed=1, speed=50, real_n=5, real_reps=1, search=True)
    return p4_polling.run(samples=20_000, seed=1, speed=5, real_n=60, real_reps=3, search=True)


def _p5(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p5_utilisation  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p5_utilisation.run(threads=5, backlog=20, workers=2, concurrency=3, speed=50, reps=1)
    return p5_utilisation.run(threads=50, backlog=2000, workers=4, concurrency=15, speed=10, reps=3)


def _p6(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p6_faults  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p6_faults.run(tasks=20, rate=20, warmup=2, reps=1, slow_s=3.0, http_timeout_s=2.0, concurrency=10,
                             threads=20, burst=False)
    return p6_faults.run(tasks=300, rate=30, reps=3)


def _p7(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p7_planner  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p7_planner.run(cases=p7_planner.CASES[:1], speed=50, duration_s=6, warmup_s=1)
    return p7_planner.run()


def _p8(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import p8_gateway  # noqa: PLC0415 - a benchmark stage is imported when it runs

    if smoke:
        return p8_gateway.run(window_s=1.0, reps=1, clients=10, duration_s=4.0, warm_s=0.0, hold="0.1:0.3")
    return p8_gateway.run(window_s=10.0, reps=3, clients=500, duration_s=60.0, warm_s=10.0)


def _demo(smoke: bool, profile: Path | None) -> dict[str, Any]:
    from bench import demo_calls  # noqa: PLC0415 - a benchmark stage is imported when it runs
    if smoke:
        return demo_calls.run(tasks=20, reps=1)
    return demo_calls.run(tasks=200, reps=5)


RUNNERS: dict[str, Callable[[bool, Path | None], dict[str, Any]]] = {
    "p1": _p1, "p2": _p2, "p3": _p3, "p4": _p4, "p5": _p5, "p6": _p6, "p7": _p7, "p8": _p8, "demo": _demo}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmarks", nargs="*", choices=[*RUNNERS, []], metavar="p1..p8|demo",
                   help="which benchmarks (default: all)")
    p.add_argument("--smoke", action="store_true", help="toy sizes, a few seconds each, no timing claims")
    p.add_argument("--out", type=Path, help="result directory (default bench/results; required with --smoke)")
    p.add_argument("--no-docs", action="store_true", help="do not redraw the plots nor rewrite docs/benchmarks.md")
    p.add_argument("--profile", action="store_true", help="P1: also record a py-spy profile of our worker")
    ns = p.parse_args(argv)
    chosen = ns.benchmarks or list(RUNNERS)
    if ns.smoke and ns.out is None:
        p.error("--smoke needs --out (smoke figures must not overwrite the committed results)")
    out = ns.out or RESULTS
    if not ns.smoke:
        ensure_bench_deps()
    profile = out / "profile" if ns.profile else None
    t_all = time.monotonic()
    for key in chosen:
        started = time.monotonic()
        load_before = os.getloadavg()[0]
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip() or None
        log(f"{key} ({NAMES[key]}){' smoke' if ns.smoke else ''} ... (load average {load_before:.1f})")
        data = RUNNERS[key](ns.smoke, profile)
        data.setdefault("load_average_1m", [load_before, os.getloadavg()[0]])
        data["git_commit_at_start"] = commit
        path = write_result(out, NAMES[key], data, smoke=ns.smoke, started=started)
        log(f"{key} done in {time.monotonic() - started:.0f}s -> {path}")
    if not ns.smoke and not ns.no_docs:
        from bench import plots, report  # noqa: PLC0415 - a benchmark stage is imported when it runs

        plots.main(["--results", str(out)])
        report.main(["--results", str(out)])
    log(f"all done in {time.monotonic() - t_all:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
