"""Plots for docs/benchmarks.md from the result files: ``python -m bench.plots [--results DIR] [--img DIR]``.

* ``bench-capacity.png``: P2, the worker's CPU (cores) and RSS (MiB) against solves in flight, with the
  targets (0.25 core, 150 MiB at 1000 in flight);
* ``bench-utilisation.png``: P5, solves in flight at the simulator over time against the plan's threads T,
  with the backlog on a second axis.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, log

IMG = ROOT / "docs" / "img"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def capacity(p2: dict[str, Any], out: Path) -> None:
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib: only the plots need it

    levels = [r["level"] for r in p2["levels"]]

    def series(key: str) -> tuple[list[float], list[list[float]]]:
        med = [r[key]["median"] for r in p2["levels"]]
        err = [[m - r[key]["min"] for m, r in zip(med, p2["levels"], strict=True)],
               [r[key]["max"] - m for m, r in zip(med, p2["levels"], strict=True)]]
        return med, err

    cores, cores_err = series("cores")
    rss, rss_err = series("rss_mib")
    fig, ax1 = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    ax1.errorbar(levels, cores, yerr=cores_err, marker="o", color="tab:blue", capsize=3, label="CPU (cores)")
    ax1.axhline(0.25, color="tab:blue", linestyle=":", linewidth=1, label="target 0.25 core")
    ax1.set_xlabel("solves in flight (one worker process, 20 s mean solve time)")
    ax1.set_ylabel("CPU, cores", color="tab:blue")
    ax1.set_ylim(bottom=0)
    ax2 = ax1.twinx()
    ax2.errorbar(levels, rss, yerr=rss_err, marker="s", color="tab:red", capsize=3, label="RSS (MiB)")
    ax2.axhline(150, color="tab:red", linestyle=":", linewidth=1, label="target 150 MiB")
    ax2.set_ylabel("RSS, MiB", color="tab:red")
    ax2.set_ylim(0, max(160.0, max(rss) * 1.15))
    ax1.axvline(1000, color="grey", linewidth=0.6)
    lines = ax1.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax1.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    ax1.set_title("P2 capacity: worker CPU and memory vs in-flight solves (median, min-max of 3 windows)",
                  fontsize=9)
    fig.tight_layout()
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)


def utilisation(p5: dict[str, Any], out: Path) -> None:
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib: only the plots need it

    run = next((r for r in reversed(p5["runs"]) if "series" in r), None)
    if run is None:
        return
    speed = p5["params"]["speed"]
    t = [s[0] * speed for s in run["series"]]  # seconds at speed 1
    in_flight = [s[1] for s in run["series"]]
    pending = [s[2] for s in run["series"]]
    threads = p5["params"]["threads"]
    fig, ax1 = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    ax1.plot(t, in_flight, color="tab:blue", linewidth=1, label="in flight at the simulator")
    ax1.axhline(threads, color="black", linestyle="--", linewidth=1, label=f"plan threads T = {threads}")
    ax1.set_xlabel(f"time, s (at speed 1; run at speed {speed:g})")
    ax1.set_ylabel("solves in flight")
    ax1.set_ylim(0, threads * 1.15)
    ax2 = ax1.twinx()
    ax2.plot(t, pending, color="tab:grey", linewidth=1, linestyle=":", label="backlog (pending)")
    ax2.set_ylabel("pending tasks", color="tab:grey")
    ax2.set_ylim(bottom=0)
    lines = ax1.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax1.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower left", fontsize=8)
    p = p5["params"]
    ax1.set_title(f"P5 plan utilisation: {p['workers']} workers x {p['concurrency_per_worker']} slots, "
                  f"T = {threads}, backlog {p['backlog']} (utilisation {run['utilisation']:.1%}, "
                  f"over-cap {run['over_cap_rejections']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plots")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--img", type=Path, default=IMG)
    ns = p.parse_args(argv)
    try:
        import matplotlib  # noqa: PLC0415 - matplotlib: only the plots need it
    except ImportError:
        log("matplotlib is not installed (pip install -e '.[bench]'): no plots")
        return 0
    matplotlib.use("Agg")
    ns.img.mkdir(parents=True, exist_ok=True)
    p2 = _load(ns.results, "p2_capacity")
    if p2:
        capacity(p2, ns.img / "bench-capacity.png")
        log(f"wrote {ns.img / 'bench-capacity.png'}")
    p5 = _load(ns.results, "p5_utilisation")
    if p5:
        utilisation(p5, ns.img / "bench-utilisation.png")
        log(f"wrote {ns.img / 'bench-utilisation.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
