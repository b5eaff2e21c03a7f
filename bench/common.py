"""Shared plumbing for the benchmarks: processes we start (redis-server, simulator: the tests' harness,
tests/procs.py and tests/helpers.py, as the benchmarks run them), statistics, machine facts, result files.

Every benchmark starts its own redis-server (no persistence) on a free port and, when it needs one, its own
simulator process, so nothing else on the machine shares them and a crash leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import venvs
from bench.base import ROOT as ROOT  # noqa: PLC0414 - the benchmarks import it from here
from bench.base import log as log  # noqa: PLC0414
from captcha_worker.localredis import stop_process as stop_process  # noqa: PLC0414 - the benchmarks import it from here
from tests import procs
from tests.helpers import wait_listening

RESULTS = ROOT / "bench" / "results"
KEY = "0123456789abcdef0123456789abcdef"  # a well-formed key the simulator accepts


# -- small process helpers ----------------------------------------------------------------------------------
def python_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python of this repo: no inherited worker/redis settings, repo on the path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CAPTCHAAI_", "REDIS_", "WORKER_", "QUEUE_", "API_TIME_SCALE", "METRICS_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


@dataclass
class RedisServer(procs.RedisServer):
    """The tests' redis starter (its own port, checked to be its own child) as the benchmarks run it: no RDB, no
    AOF, room for the benchmarks' many clients, clients that decode responses."""

    persistent: bool = False
    extra: list[str] = field(default_factory=lambda: ["--protected-mode", "no", "--maxclients", "10000"])

    def client(self, **kwargs: Any) -> Any:
        return super().client(**{"decode_responses": True, **kwargs})


@dataclass
class SimulatorProcess:
    """`captcha-worker simulator` as a separate process (its CPU is never counted as the worker's), on port 0: the
    port is read from its own `listening on` line, as the tests' SimProc does."""

    args: Sequence[str] = ()
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _log: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SimulatorProcess:
        self._log = tempfile.TemporaryDirectory(prefix="captcha-bench-sim-")
        path = Path(self._log.name) / "simulator.log"
        with open(path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "captcha_worker.cli", "simulator", "--port", "0", *self.args],
                env=python_env(), stdout=log, stderr=subprocess.STDOUT)
        self.port = int(wait_listening(self.proc, path, "bench simulator")["port"])
        return self

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
        if self._log is not None:
            self._log.cleanup()
            self._log = None

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_sim/stats", timeout=10) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data

    def reset(self) -> None:
        req = urllib.request.Request(f"{self.url}/_sim/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def configure(self, **patch: Any) -> None:
        """POST /_sim/config (e.g. ``faults={"html502": 0.1}``; faults and latency are merged)."""
        req = urllib.request.Request(f"{self.url}/_sim/config", data=json.dumps(patch).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10):
            pass


# -- statistics ---------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in 0..100."""
    if not values:
        return float("nan")
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


#: each benchmark of `python -m bench.run` and the name of its result file (bench/results/<name>.json)
NAMES = {
    "p1": "p1_queue_overhead",
    "p2": "p2_capacity",
    "p3": "p3_latency",
    "p4": "p4_polling",
    "p5": "p5_utilisation",
    "p6": "p6_faults",
    "p7": "p7_planner",
    "p8": "p8_gateway",
    "demo": "demo_calls",
}


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median and spread of repeated measurements (min, max, IQR) plus the raw runs."""
    xs = [float(v) for v in values]
    if not xs:
        return {"median": None, "min": None, "max": None, "q1": None, "q3": None, "n": 0, "runs": []}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "q1": percentile(xs, 25),
            "q3": percentile(xs, 75), "n": len(xs), "runs": xs}


# -- machine facts ------------------------------------------------------------------------------------------
def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_total_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return None


def _cmd_out(cmd: Sequence[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def machine_facts() -> dict[str, Any]:
    redis_version = _cmd_out(["redis-server", "--version"]) or ""
    rv = next((part.split("=", 1)[1] for part in redis_version.split() if part.startswith("v=")), redis_version)
    commit = _cmd_out(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = bool(_cmd_out(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"]))
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "mem_total_gib": _mem_total_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "redis_server": rv,
        "packages": {
            "captcha-solver": _version("captcha-solver"),
            "redis-py": _version("redis"),
            "hiredis": _version("hiredis"),
            "aiohttp": _version("aiohttp"),
            "saq": _version("saq"),
            **venvs.versions(),
            "psutil": _version("psutil"),
            "matplotlib": _version("matplotlib"),
        },
        "git_commit": commit,
        "src_dirty": dirty,
    }


# -- results ------------------------------------------------------------------------------------------------
def write_result(out_dir: Path, name: str, data: dict[str, Any], *, smoke: bool, started: float) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "smoke": smoke, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "duration_s": round(time.monotonic() - started, 1), "machine": machine_facts(), **data}
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


@contextlib.contextmanager
def timer(label: str) -> Iterator[None]:
    t = time.monotonic()
    try:
        yield
    finally:
        log(f"{label}: {time.monotonic() - t:.1f}s")


def worker_env(redis_url: str, *, concurrency: int, threads: int, api_url: str = "http://127.0.0.1:9",
               **extra: str) -> dict[str, str]:
    """The environment `captcha-worker run` reads (docs/contracts.md), for a bench worker."""
    env = python_env(REDIS_URL=redis_url, CAPTCHAAI_KEY=KEY, CAPTCHAAI_URL=api_url, CAPTCHAAI_THREADS=str(threads),
                     WORKER_CONCURRENCY=str(concurrency), METRICS_PORT="0",
                     METRICS_HOST="127.0.0.1", DRAIN_GRACE_SECONDS="1")
    env.update(extra)
    return env


@contextlib.contextmanager
def listening(cmd: Sequence[str], env: dict[str, str], what: str) -> Iterator[tuple[subprocess.Popen[bytes], Any]]:
    """A child started on port 0 (METRICS_PORT=0, GATEWAY_PORT=0), its output in a temporary log: yields it and the
    match of its own `listening on` line (tests.helpers.wait_listening: `port`, and a gateway's `metrics`), so no
    other process can take its port between a pick and its bind; stopped (SIGTERM, 20 s) at the end."""
    with tempfile.TemporaryDirectory(prefix="bench-child-") as d:
        path = Path(d) / "out.log"
        with open(path, "wb") as out:
            proc = subprocess.Popen(list(cmd), env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc, wait_listening(proc, path, what)
        finally:
            stop_process(proc, timeout=20)


def wait_for_workers(r: Any, n: int, *, timeout: float = 30.0, settle_s: float = 0.5,
                     procs: Sequence[subprocess.Popen[Any]] = ()) -> None:
    """Until `n` workers registered the limit they enforce (`{captcha}:limits`), then `settle_s` for their first
    threadsinfo read (claims wait for it). A worker that exits meanwhile fails the benchmark."""
    deadline = time.monotonic() + timeout
    while r.zcount("{captcha}:limits", time.time(), "+inf") < n:
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise RuntimeError(f"bench: {n} workers did not start")
        time.sleep(0.05)
    time.sleep(settle_s)
