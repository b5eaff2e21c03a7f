"""The demo's own figures, as a new user sees them: ``captcha-worker demo`` (the README's first command, default
settings) run ``reps`` times; API calls per solve (the simulator's in.php + res.php count over the run, plan
checks included) and plan utilisation, parsed from the summary table it prints.

This row guards the README's demo table: issue 12 made polls dense whenever tasks wait for a plan thread, which
is always the case in the demo (200 tasks at once on 20 threads), and the demo went from 5.14 to 12.04 calls per
solve without any figure noticing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from bench.common import ROOT, log, summary

ROW = re.compile(r"^\| (?P<name>[A-Za-z /0-9-]+?) +\| (?P<value>[0-9.]+)", re.M)


def parse(table: str) -> dict[str, float]:
    """The numeric rows of the demo's summary table, by name (e.g. "API calls / solve": 5.14)."""
    return {m["name"].strip(): float(m["value"]) for m in ROW.finditer(table)}


def one_run(tasks: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-m", "captcha_worker.cli", "demo", "--tasks", str(tasks)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"demo exited {proc.returncode}: {proc.stderr[-2000:]}")
    rows = parse(proc.stdout)
    return {"api_calls_per_solve": rows["API calls / solve"], "utilisation_pct": rows["plan utilisation"],
            "wall_s": rows["wall time"], "throughput": rows["throughput"]}


def run(*, tasks: int, reps: int) -> dict[str, Any]:
    runs = []
    for rep in range(reps):
        res = one_run(tasks)
        log(f"demo rep {rep + 1}/{reps}: {res['api_calls_per_solve']:.2f} calls/solve, utilisation "
            f"{res['utilisation_pct']:.0f} %, {res['wall_s']:.1f} s")
        runs.append(res)
    calls = summary([r["api_calls_per_solve"] for r in runs])
    return {
        "params": {"tasks": tasks, "repetitions": reps, "command": f"captcha-worker demo --tasks {tasks}"},
        "api_calls_per_solve": calls,
        "utilisation_pct": summary([r["utilisation_pct"] for r in runs]),
        "wall_s": summary([r["wall_s"] for r in runs]),
        "runs": runs,
        "targets": {"demo_calls_per_solve_le_5_2": calls["median"] <= 5.2},
    }
