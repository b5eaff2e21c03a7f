"""P1, ours only, this tree against an earlier commit, interleaved on one redis-server: the check that a change
kept the queue's throughput (issue 12: "P1 within 10 % of today's").

``python -m bench.p1_ab --base main --reps 5`` (``flock /tmp/captcha-bench.lock`` first, note ``cat
/proc/loadavg``): the base commit's ``src`` and ``bench`` are exported with ``git archive`` to a temporary
directory and run by this venv's Python with that directory first on ``PYTHONPATH``; each repetition drains
10,000 no-op tasks with the base worker, then with this tree's (``bench.instant``, as P1 does), so both see the
same load. Prints one JSON object: the medians, the ratio head ÷ base, every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import ROOT, RedisServer, log, python_env, summary, worker_env


def export(ref: str, into: Path) -> Path:
    """`ref`'s src/ and bench/ in `into` (no work tree touched)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src", "bench"], check=True,
                             capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _child(cmd: list[str], env: dict[str, str], cwd: Path, out: Path) -> dict[str, Any]:
    subprocess.run([*cmd, "--result", str(out)], env=env, cwd=cwd, check=True, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def drain(root: Path, rs: RedisServer, n: int, concurrency: int, tmp: Path) -> dict[str, float]:
    path = os.pathsep.join((str(root / "src"), str(root)))
    rs.client().flushall()
    # this tree's producer for both: the task format is the queue's contract, the base's bench CLI may differ
    _child([sys.executable, "-m", "bench.p1_child", "produce", "--url", rs.url, "--n", str(n)],
           python_env(), ROOT, tmp / "produce.json")
    env = worker_env(rs.url, concurrency=concurrency, threads=concurrency, PYTHONPATH=path)
    r = rs.client()
    r.config_resetstat()
    res = _child([sys.executable, "-m", "bench.instant", "drain", "--n", str(n)], env, root, tmp / "drain.json")
    scripts = r.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)
    return {"tasks_per_s": n / res["first_to_done_s"], "cpu_us_per_task": 1e6 * res["cpu_s"] / n,
            "redis_script_us_per_task": scripts / n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.p1_ab")
    p.add_argument("--base", default="main", help="the commit to compare with (default: main)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=50)
    ns = p.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    load = []
    with tempfile.TemporaryDirectory(prefix="captcha-p1ab-") as d, RedisServer() as rs:
        tmp = Path(d)
        base = export(ns.base, tmp / "base")
        (tmp / "io").mkdir()
        for rep in range(ns.reps):
            load.append(os.getloadavg()[0])
            for name, root in (("base", base), ("head", ROOT)):
                runs[name].append(drain(root, rs, ns.n, ns.concurrency, tmp / "io"))
                log(f"P1 a/b rep {rep + 1}/{ns.reps} {name}: {runs[name][-1]['tasks_per_s']:.0f} tasks/s")
    keys = ("tasks_per_s", "cpu_us_per_task", "redis_script_us_per_task")
    med = {name: {k: summary([r[k] for r in rs_])["median"] for k in keys} for name, rs_ in runs.items()}
    base_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ns.base], capture_output=True,
                              text=True, check=True).stdout.strip()
    print(json.dumps({"base": f"{ns.base} ({base_rev})", "n": ns.n, "concurrency": ns.concurrency,
                      "load_1min": load, "median": med,
                      "head_over_base": med["head"]["tasks_per_s"] / med["base"]["tasks_per_s"], "runs": runs},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
