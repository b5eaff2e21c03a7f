"""Where P1's Redis commands go: our worker drains N no-op tasks while ``MONITOR`` records every command, and each
command run inside a script is charged to the script that ran it (Redis logs a script call before the commands it
runs). Counts only: MONITOR slows the server, so no time here is a figure (``python -m bench.run p1`` times).

    python -m bench.p1_commands [--n 10000] [--concurrency 50]

Prints one JSON object: per script (the worker's attribute name of its ``SlotScript``, e.g. ``_claim``) its calls
per task and the commands it ran per task by name, the top-level commands per task, and the totals (the same
total as P1's ``commands_per_task``, which INFO commandstats gives).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import redis
import redis.asyncio

from bench.common import ROOT, RedisServer, python_env, worker_env
from bench.p1_queue import HARNESS_COMMANDS
from captcha_worker import queue


def _is_script(value: object) -> bool:
    """A registered script (``SlotScript``: its sha1 and its text), wherever the loader keeps its class."""
    return isinstance(getattr(value, "sha", None), str) and isinstance(getattr(value, "script", None), str)


def script_names() -> dict[str, str]:
    """sha1 -> the name of the attribute holding that script in the worker's queue and budget objects."""
    q = queue.RedisQueue(redis.asyncio.Redis(), "captcha")  # never connects: the scripts are only named
    names: dict[str, str] = {}
    for owner in (q, q.budget):
        for attr, value in vars(owner).items():
            for i, v in enumerate(value if isinstance(value, (list, tuple)) else [value]):
                if _is_script(v):
                    suffix = f"[{i}]" if isinstance(value, (list, tuple)) else ""
                    names.setdefault(v.sha, f"{type(owner).__name__}.{attr}{suffix}")
    return names


class Monitor:
    """MONITOR on its own connection, in a thread: top-level commands, and script-run ones by script."""

    def __init__(self, port: int, names: dict[str, str]) -> None:
        self.port, self.names = port, names
        self.top: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.inside: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        current = "?"
        with redis.Redis(port=self.port, decode_responses=True).monitor() as mon:
            self.ready.set()
            for c in mon.listen():
                if self.stop.is_set():
                    return
                words = c["command"].split(" ", 2)
                name = words[0].lower()
                if c.get("client_type") == "lua":
                    self.inside[current][name] += 1
                    continue
                if name in HARNESS_COMMANDS or name == "monitor":
                    continue
                self.top[name] += 1
                if name in ("evalsha", "eval"):
                    current = self.names.get(words[1], words[1][:12]) if len(words) > 1 else "?"
                    self.calls[current] += 1

    def __enter__(self) -> Monitor:
        self.thread.start()
        self.ready.wait(10)
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        with redis.Redis(port=self.port) as r:
            r.ping()  # one more line, so that the thread sees the flag
        self.thread.join(5)


def run(n: int, concurrency: int) -> dict[str, Any]:
    names = script_names()
    with RedisServer() as rs, tempfile.TemporaryDirectory(prefix="captcha-p1cmd-") as d:
        r = rs.client()
        subprocess.run([sys.executable, "-m", "bench.p1_child", "produce", "--url", rs.url, "--n", str(n),
                        "--result", os.path.join(d, "p.json")], env=python_env(), check=True, cwd=ROOT)
        r.config_resetstat()
        with Monitor(rs.port, names) as mon:
            subprocess.run([sys.executable, "-m", "bench.instant", "drain", "--n", str(n), "--result",
                            os.path.join(d, "w.json")], env=worker_env(rs.url, concurrency=concurrency,
                                                                       threads=concurrency),
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        stats = {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}
    per = {k: round(v / n, 4) for k, v in sorted(mon.top.items())}
    scripts = {name: {"calls_per_task": round(mon.calls[name] / n, 4),
                      "commands_per_task": round(sum(mon.inside[name].values()) / n, 4),
                      "by_command": {k: round(v / n, 4) for k, v in mon.inside[name].most_common()}}
               for name in sorted(mon.calls, key=lambda s: -sum(mon.inside[s].values()))}
    inside = sum(sum(c.values()) for c in mon.inside.values())
    monitored = sum(mon.top.values()) + inside
    stat_total = sum(v for k, v in stats.items() if k not in HARNESS_COMMANDS and k != "monitor")
    return {"n": n, "concurrency": concurrency, "load_average_1m": os.getloadavg()[0],
            "commands_per_task": round(monitored / n, 4), "round_trips_per_task": round(sum(mon.top.values()) / n, 4),
            "commandstats_commands_per_task": round(stat_total / n, 4),
            "top_level_per_task": per, "scripts": scripts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.p1_commands")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=50)
    ns = p.parse_args(argv)
    print(json.dumps(run(ns.n, ns.concurrency), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
