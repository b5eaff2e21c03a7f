"""P1 queue overhead: N tasks through one worker process with an instant solver, ours vs SAQ and arq, on the
same redis-server; redis-benchmark on that server as the ceiling; and the submit rate of each producer.

Per repetition (systems interleaved, so machine load hits all of them alike):

* each system's producer enqueues N tasks (timed: the submit rate), then a fresh worker process drains them
  (timed from the first job start to the last job's completion bookkeeping);
* ``CONFIG RESETSTAT`` before each drain and ``INFO commandstats`` after give Redis commands per task (those run
  inside Lua scripts included), and redis-server's CPU time per task;
* extra producer variants: our one-by-one ``submit()``, and SAQ / arq with 50 enqueues in flight;
* ``redis-benchmark -P 1 -c <concurrency>`` for SET, LPUSH, LPOP and EVALSHA of a trivial script.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

from bench.common import ARQ_VENV, ROOT, RedisServer, log, python_env, summary, worker_env
from captcha_worker import queue

# commands of the harness itself, or one-off connection / script setup (SCRIPT EXISTS is not here: redis-py's
# pipelines send it before every execute that holds a Script, so it is a per-batch cost of the worker)
HARNESS_COMMANDS = {"config|resetstat", "info", "config|get", "flushall", "client|setinfo", "client|setname",
                    "hello", "script|load", "select", "command|docs", "command"}


def script_internal_commands() -> set[str]:
    """Commands our Lua scripts call (read from captcha_worker.queue, so it follows the code)."""

    names: set[str] = set()
    for value in vars(queue).values():
        if isinstance(value, str) and "redis.call" in value:
            names.update(m.lower() for m in re.findall(r"redis\.call\('([A-Za-z]+)'", value))
    return names


def ensure_arq_venv(install: bool) -> Path | None:
    """arq's own venv (arq requires redis-py < 6; this repo uses redis-py 7). Created on first full run."""
    py = ARQ_VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([str(py), "-c", "import arq"], capture_output=True, check=False).returncode == 0
    if ok:
        return py
    if not install:
        return None
    log("creating the arq venv (.venv/bench-arq) and installing arq from PyPI")
    subprocess.run([sys.executable, "-m", "venv", str(ARQ_VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "arq"], check=True)
    return py


def saq_available() -> bool:
    try:
        import saq  # noqa: PLC0415, F401
    except ImportError:
        return False
    return True


class Child:
    """Runs one child process that writes a JSON result file."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="captcha-bench-p1-")
        self.i = 0

    def run(self, cmd: list[str], env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
        self.i += 1
        path = os.path.join(self.dir.name, f"r{self.i}.json")
        err_path = path + ".stderr"
        with open(err_path, "w") as err:
            proc = subprocess.run([*cmd, "--result", path], env=env, check=False, timeout=timeout, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=err)
        if proc.returncode != 0:
            with open(err_path) as f:
                tail = f.read()[-3000:]
            raise RuntimeError(f"{' '.join(cmd[:4])} failed with exit code {proc.returncode}:\n{tail}")
        with open(path) as f:
            data: dict[str, Any] = json.load(f)
        return data

    def close(self) -> None:
        self.dir.cleanup()


def _commandstats(r: Any) -> dict[str, dict[str, float]]:
    stats = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): {"calls": v["calls"], "usec": v["usec"]} for k, v in stats.items()}


def _redis_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def redis_benchmark(port: int, clients: int, requests: int) -> dict[str, float]:
    """requests/s of SET, LPUSH, LPOP and EVALSHA (a script returning 1), -P 1 with `clients` connections."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return {}
    base = [binary, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(requests), "-P", "1", "--csv"]
    out: dict[str, float] = {}
    text = subprocess.run([*base, "-t", "set,lpush,lpop"], capture_output=True, text=True, check=True).stdout
    sha = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", "return 1"], capture_output=True,
                         text=True, check=True).stdout.strip()
    text += subprocess.run([*base, "EVALSHA", sha, "0"], capture_output=True, text=True, check=True).stdout
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[0] != "test":
            with contextlib.suppress(ValueError):
                name = row[0].split()[0].upper()
                out["EVALSHA" if name.startswith("EVALSHA") else name] = float(row[1])
    return out


def run(*, n: int, concurrency: int, reps: int, submit_n: int, bench_requests: int, install: bool,
        profile_dir: Path | None = None) -> dict[str, Any]:
    arq_py = ensure_arq_venv(install)
    has_saq = saq_available()
    if arq_py is None:
        log("arq is not available (run the full benchmark once to create .venv/bench-arq): skipping arq")
    if not has_saq:
        log("saq is not installed (pip install -e '.[bench]'): skipping saq")
    internal = script_internal_commands()
    child = Child()
    py = [sys.executable]
    workers: dict[str, Any] = {}
    producers: dict[str, Any] = {}

    def add(store: dict[str, Any], name: str, value: Any) -> None:
        store.setdefault(name, []).append(value)

    systems: list[tuple[str, str]] = [("ours", "ours")]
    if has_saq:
        systems.append(("saq", "saq"))
    if arq_py is not None:
        systems += [("arq_default", "arq"), ("arq_tuned", "arq")]
    bench_runs: list[dict[str, float]] = []
    load: list[float] = []
    try:
        with RedisServer() as rs:
            r = rs.client()
            assert rs.proc is not None
            for rep in range(reps):
                load.append(os.getloadavg()[0])
                for name, family in systems:
                    r.flushall()
                    # producer: enqueue n tasks (timed)
                    if family == "ours":
                        prod = child.run([*py, "-m", "bench.p1_child", "produce", "--system", "ours", "--url", rs.url,
                                          "--n", str(n)], python_env())
                        add(producers, "ours_submit_many", n / prod["seconds"])
                    elif family == "saq":
                        prod = child.run([*py, "-m", "bench.p1_child", "produce", "--system", "saq", "--url", rs.url,
                                          "--n", str(n)], python_env())
                        add(producers, "saq_enqueue", n / prod["seconds"])
                    else:
                        assert arq_py is not None
                        prod = child.run([str(arq_py), "bench/peer_arq.py", "produce", "--port", str(rs.port),
                                          "--n", str(n)], python_env())
                        add(producers, "arq_enqueue_job", n / prod["seconds"])
                    # worker: drain them (timed), with command stats
                    r.config_resetstat()
                    cpu0 = _redis_cpu(rs.proc.pid)
                    if family == "ours":
                        env = worker_env(rs.url, concurrency=concurrency, threads=concurrency)
                        res = child.run([*py, "-m", "bench.instant", "drain", "--n", str(n)], env)
                    elif family == "saq":
                        res = child.run([*py, "-m", "bench.p1_child", "work", "--system", "saq", "--url", rs.url,
                                         "--n", str(n), "--concurrency", str(concurrency)], python_env())
                    else:
                        assert arq_py is not None
                        delay = "0.5" if name == "arq_default" else "0.01"
                        res = child.run([str(arq_py), "bench/peer_arq.py", "work", "--port", str(rs.port), "--n",
                                         str(n), "--concurrency", str(concurrency), "--poll-delay", delay],
                                        python_env())
                    redis_cpu = _redis_cpu(rs.proc.pid) - cpu0
                    stats = _commandstats(r)
                    work_cmds = {k: v for k, v in stats.items() if k not in HARNESS_COMMANDS}
                    total = sum(v["calls"] for v in work_cmds.values())
                    scripts = sum(work_cmds.get(k, {}).get("calls", 0) for k in ("evalsha", "eval"))
                    entry = {"tasks_per_s": n / res["first_to_done_s"], "tasks_per_s_to_nth": n / res["first_to_nth_s"],
                             "cpu_us_per_task": 1e6 * res["cpu_s"] / n, "redis_cpu_us_per_task": 1e6 * redis_cpu / n,
                             "commands_per_task": total / n, "script_calls_per_task": scripts / n,
                             "by_command": {k: round(v["calls"] / n, 4) for k, v in sorted(work_cmds.items())}}
                    if family == "ours":
                        top = {k: v for k, v in work_cmds.items() if k not in internal}
                        entry["round_trips_per_task"] = sum(v["calls"] for v in top.values()) / n
                        entry["redis_usec_per_task"] = sum(v["usec"] for v in top.values()) / n
                    add(workers, name, entry)
                    log(f"P1 rep {rep + 1}/{reps} {name}: {entry['tasks_per_s']:.0f} tasks/s, "
                        f"{entry['commands_per_task']:.2f} cmds/task, submit {n / prod['seconds']:.0f}/s")
                # producer variants (one-by-one submit; SAQ/arq with 50 enqueues in flight)
                r.flushall()
                prod = child.run([*py, "-m", "bench.p1_child", "produce", "--system", "ours-seq", "--url", rs.url,
                                  "--n", str(submit_n)], python_env())
                add(producers, "ours_submit", submit_n / prod["seconds"])
                if has_saq:
                    r.flushall()
                    prod = child.run([*py, "-m", "bench.p1_child", "produce", "--system", "saq-gather", "--url",
                                      rs.url, "--n", str(submit_n)], python_env())
                    add(producers, "saq_enqueue_gather50", submit_n / prod["seconds"])
                if arq_py is not None:
                    r.flushall()
                    prod = child.run([str(arq_py), "bench/peer_arq.py", "produce-gather", "--port", str(rs.port),
                                      "--n", str(submit_n)], python_env())
                    add(producers, "arq_enqueue_job_gather50", submit_n / prod["seconds"])
                r.flushall()
                bench_runs.append(redis_benchmark(rs.port, concurrency, bench_requests))
                log(f"P1 rep {rep + 1}/{reps} redis-benchmark: {bench_runs[-1]}")
            if profile_dir is not None:
                profile_ours(rs, n=n, concurrency=concurrency, out=profile_dir)
    finally:
        child.close()
    return assemble(workers, producers, bench_runs, n=n, submit_n=submit_n, concurrency=concurrency, reps=reps,
                    load=load, has_saq=has_saq, has_arq=arq_py is not None)


def profile_ours(rs: RedisServer, *, n: int, concurrency: int, out: Path) -> None:
    """py-spy flame graph of our worker draining n tasks (a separate run, not timed)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(pyspy):
        log("py-spy not installed: no profile")
        return
    out.mkdir(parents=True, exist_ok=True)
    r = rs.client()
    r.flushall()
    subprocess.run([sys.executable, "-m", "bench.p1_child", "produce", "--system", "ours", "--url", rs.url, "--n",
                    str(n), "--result", os.devnull], env=python_env(), check=True, cwd=ROOT)
    env = worker_env(rs.url, concurrency=concurrency, threads=concurrency)
    for fmt, name in (("speedscope", "p1-ours.speedscope.json"), ("raw", "p1-ours.folded.txt")):
        r.flushall()
        subprocess.run([sys.executable, "-m", "bench.p1_child", "produce", "--system", "ours", "--url", rs.url,
                        "--n", str(n), "--result", os.devnull], env=python_env(), check=True, cwd=ROOT)
        subprocess.run([pyspy, "record", "-r", "200", "-f", fmt, "-o", str(out / name), "--", sys.executable, "-m",
                        "bench.instant", "drain", "--n", str(n)], env=env, check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log(f"P1 profile written to {out}")


def _metric(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return summary([x[key] for x in runs if key in x])


def assemble(workers: dict[str, Any], producers: dict[str, Any], bench_runs: list[dict[str, float]], *, n: int,
             submit_n: int, concurrency: int, reps: int, load: list[float], has_saq: bool,
             has_arq: bool) -> dict[str, Any]:
    throughput = {name: _metric(runs, "tasks_per_s") for name, runs in workers.items()}
    ours = workers["ours"]
    per_task = {name: {"commands_per_task": _metric(runs, "commands_per_task"),
                       "script_calls_per_task": _metric(runs, "script_calls_per_task"),
                       "cpu_us_per_task": _metric(runs, "cpu_us_per_task"),
                       "redis_cpu_us_per_task": _metric(runs, "redis_cpu_us_per_task"),
                       "by_command": runs[-1]["by_command"]} for name, runs in workers.items()}
    per_task["ours"]["round_trips_per_task"] = _metric(ours, "round_trips_per_task")
    per_task["ours"]["redis_usec_per_task"] = _metric(ours, "redis_usec_per_task")
    submit = {name: summary(v) for name, v in producers.items()}
    rb_keys = sorted({k for run in bench_runs for k in run})
    rb = {k: summary([run[k] for run in bench_runs if k in run]) for k in rb_keys}
    rt = per_task["ours"]["round_trips_per_task"]["median"] or 1.0
    ceiling = {f"{k}_rps_div_round_trips": (v["median"] or 0) / rt for k, v in rb.items()}
    usec = per_task["ours"]["redis_usec_per_task"]["median"]
    if usec:
        ceiling["redis_busy_1e6_div_usec_per_task"] = 1e6 / usec
    peers = {k: v["median"] for k, v in throughput.items() if k in {"saq", "arq_tuned"} and v["median"]}
    best_name = max(peers, key=lambda k: peers[k]) if peers else None
    ours_tps = throughput["ours"]["median"]
    ratios: dict[str, Any] = {}
    if best_name:
        ratios["ours_vs_best_tuned_peer"] = ours_tps / peers[best_name]
        ratios["best_tuned_peer"] = best_name
    for k, v in throughput.items():
        if k != "ours" and v["median"]:
            ratios[f"ours_vs_{k}"] = ours_tps / v["median"]
    sm = submit.get("ours_submit_many", {}).get("median")
    for peer in ("saq_enqueue", "saq_enqueue_gather50", "arq_enqueue_job", "arq_enqueue_job_gather50"):
        pv = submit.get(peer, {}).get("median")
        if sm and pv:
            ratios[f"submit_many_vs_{peer}"] = sm / pv
    targets = {
        "p1_ours_ge_2x_best_tuned_peer": (ratios.get("ours_vs_best_tuned_peer") or 0) >= 2.0 if best_name else None,
        "submit_many_ge_10x_saq_enqueue": (ratios.get("submit_many_vs_saq_enqueue") or 0) >= 10.0
        if "submit_many_vs_saq_enqueue" in ratios else None,
    }
    return {
        "params": {"tasks": n, "concurrency": concurrency, "repetitions": reps, "arq_poll_delay_default_s": 0.5,
                   "arq_poll_delay_tuned_s": 0.01, "submit_variant_tasks": submit_n, "peers_included":
                   {"saq": has_saq, "arq": has_arq},
                   "logging": "each system as its CLI configures it by default, to /dev/null: ours JSON at info "
                              "(one line per task), arq INFO (two lines per job), SAQ errors only",
                   "timing": "first job start -> last job's completion bookkeeping (ours: processing and pending "
                             "empty; SAQ: after_process; arq: after_job_end)"},
        "load_average_1m": load,
        "throughput_tasks_per_s": throughput,
        "per_task": per_task,
        "submit_tasks_per_s": submit,
        "redis_benchmark_rps": rb,
        "ceiling_tasks_per_s": ceiling,
        "ratios": ratios,
        "targets": targets,
    }
