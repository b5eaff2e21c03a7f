"""P1 queue overhead: N tasks through one worker process with an instant solver, ours against the queues users
would pick instead, on the same redis-server; redis-benchmark on that server as the ceiling; and the submit rate of
each producer.

Peers (``SYSTEMS``; each child is ``bench/peer_<family>.py``, in a venv of its own where its pins demand it,
``bench/venvs.py``): SAQ, arq (its default poll delay and tuned), Dramatiq (Redis broker, one process, 50
threads), taskiq with taskiq-redis (list and stream brokers), Celery 5 (threads pool; without a result backend,
with the Redis backend, with the backend and late acks). Each is configured for throughput as its own docs advise
(the child's docstring cites the setting); what each does per task (result stored? when does the task leave
Redis? how it talks to Redis) travels with it into the results and the table.

Per repetition (systems interleaved, so machine load hits all of them alike):

* each system's producer enqueues N tasks (timed: the submit rate), then a fresh worker process drains them
  (timed from the first job start to the last job's completion bookkeeping: result stored / message acked,
  whatever the system does last);
* ``CONFIG RESETSTAT`` before each drain and ``INFO commandstats`` after give Redis commands per task (those run
  inside Lua scripts included), and redis-server's CPU time per task;
* extra producer variants: our one-by-one ``submit()``, and the asyncio peers with 50 enqueues in flight;
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench import venvs
from bench.common import ROOT, RedisServer, log, python_env, summary, worker_env
from captcha_worker import queue  # noqa: F401 - imported: its scripts are registered
from captcha_worker.store import scripts

# commands of the harness itself, or one-off connection / script setup (SCRIPT EXISTS is not here: redis-py's
# pipelines send it before every execute that holds a Script, so it is a per-batch cost of the worker)
HARNESS_COMMANDS = {"config|resetstat", "info", "config|get", "flushall", "client|setinfo", "client|setname",
                    "hello", "script|load", "select", "command|docs", "command"}


@dataclass(frozen=True)
class System:
    """One row of P1's table: the child that runs its producer and worker, and what it does for each task."""

    name: str  # key in the results
    label: str  # row of the table in docs/benchmarks.md
    family: str  # child module bench.peer_<family> ("ours": bench.p1_child / bench.instant)
    venv: str | None  # its bench venv (bench/venvs.py); None: this repo's venv
    variant: str  # --variant of the child
    producer: str  # key of its producer's rate in submit_tasks_per_s
    result: str  # what it keeps as the task's result
    ack: str  # when the task leaves Redis (is acknowledged)
    traffic: str  # how it talks to Redis for one task
    tuned: bool = True  # configured for throughput as its docs advise: competes for "the best peer"
    keeps_result_acks_after: bool = False  # stores the result and acks only after the run, as ours does


SYSTEMS = (
    System("ours", "ours (instant solver)", "ours", None, "", "ours_submit_many",
           "yes: result key (SET NX, TTL) and a push to the producer's reply list", "after the run (ACK script)",
           "CLAIM script per batch of free slots; one ACK script call per event-loop turn for every job that ended "
           "in it",
           keeps_result_acks_after=True),
    System("saq", "SAQ", "saq", None, "default", "saq_enqueue", "yes: job key rewritten with the result (TTL 600 s)",
           "after the run (LREM from the active list)",
           "one BLMOVE and a GET per job; SET + PUBLISH at the start; MULTI (LREM, ZREM, SETEX) + PUBLISH at the end",
           keeps_result_acks_after=True),
    System("arq_default", "arq, poll_delay 0.5 s (default)", "arq", "arq", "default", "arq_enqueue_job",
           "yes: result key (kept 3600 s)", "after the run (job key deleted)",
           "polls its sorted set; per job 3 MULTIs (WATCH + in-progress key, result, cleanup) and a GET",
           tuned=False, keeps_result_acks_after=True),
    System("arq_tuned", "arq, poll_delay 0.01 s", "arq", "arq", "tuned", "arq_enqueue_job",
           "yes: result key (kept 3600 s)", "after the run (job key deleted)",
           "polls its sorted set; per job 3 MULTIs (WATCH + in-progress key, result, cleanup) and a GET",
           keeps_result_acks_after=True),
    System("dramatiq", "Dramatiq, Redis broker, one process, threads", "dramatiq", "dramatiq", "default",
           "dramatiq_send", "no (no Results middleware: the default)", "after the run (Lua ack, per message)",
           "Lua fetch of up to 2 × threads ids per call; one Lua ack per message"),
    System("taskiq_list", "taskiq, ListQueueBroker", "taskiq", "taskiq", "list", "taskiq_list_kiq",
           "no (DummyResultBackend: the default)", "never: BRPOP removes it on receipt (lost if the worker dies)",
           "one BRPOP per message"),
    System("taskiq_stream", "taskiq, RedisStreamBroker", "taskiq", "taskiq", "stream", "taskiq_stream_kiq",
           "no (DummyResultBackend: the default)", "after the run (XACK when_saved; entry stays in the stream)",
           "XREADGROUP of up to 100 per call; one XACK per message"),
    System("celery", "Celery, threads pool, no result backend", "celery", "celery", "plain", "celery_delay",
           "no (task_ignore_result)", "before the run (early ack, the default)",
           "one BRPOP per message; MULTI into the unacked hash + index (HSET, ZADD), MULTI out on ack"),
    System("celery_results", "Celery, threads pool, Redis result backend", "celery", "celery", "results",
           "celery_delay_results", "yes: celery-task-meta key (GET, then SETEX + PUBLISH; expires in 1 day)",
           "before the run (early ack, the default)",
           "as without a backend, plus a GET and a MULTI (SETEX, PUBLISH) for the result"),
    System("celery_results_late", "Celery, threads pool, Redis result backend, acks_late", "celery", "celery",
           "results-late", "celery_delay_results",
           "yes: celery-task-meta key (GET, then SETEX + PUBLISH; expires in 1 day)",
           "after the run (task_acks_late)",
           "as without a backend, plus a GET and a MULTI (SETEX, PUBLISH) for the result",
           keeps_result_acks_after=True),
)


@dataclass(frozen=True)
class ExtraProducer:
    """A producer variant timed once per repetition, on its own (no worker drains it)."""

    key: str
    family: str
    venv: str | None
    variant: str
    args: tuple[str, ...]


EXTRA_PRODUCERS = (
    ExtraProducer("ours_submit", "ours", None, "", ("--one-by-one",)),
    ExtraProducer("saq_enqueue_gather50", "saq", None, "default", ("--gather",)),
    ExtraProducer("arq_enqueue_job_gather50", "arq", "arq", "default", ("--gather",)),
    ExtraProducer("taskiq_list_kiq_gather50", "taskiq", "taskiq", "list", ("--gather",)),
)


def script_internal_commands() -> set[str]:
    """Commands our Lua scripts call (read from the scripts as assembled, ``store.scripts.REGISTRY``, so it follows
    the code)."""
    names: set[str] = set()
    for text in scripts.REGISTRY.values():
        names.update(m.lower() for m in re.findall(r"redis\.call\('([A-Za-z]+)'", text))
    names.update(m.lower() for text in scripts.REGISTRY.values()
                 for m in re.findall(r"batched\('([A-Za-z]+)'", text))
    return names


def saq_available() -> bool:
    try:
        import saq  # noqa: F401, PLC0415 - optional: only the SAQ comparison needs it
    except ImportError:
        return False
    return True


def available_pythons(install: bool) -> dict[str | None, Path]:
    """The python of every venv a system needs: this repo's (None) and each peer venv that is (or was) built."""
    pythons: dict[str | None, Path] = {None: Path(sys.executable)}
    for name in venvs.PEERS:
        py = venvs.python(name, install=install)
        if py is None:
            log(f"{name} is not available (python -m bench.run p1 builds .venv/bench-{name}): skipping it")
        else:
            pythons[name] = py
    return pythons


def usable(systems: tuple[System, ...], pythons: dict[str | None, Path]) -> list[System]:
    has_saq = saq_available()
    if not has_saq:
        log("saq is not installed (pip install -e '.[bench]'): skipping saq")
    return [s for s in systems if s.venv in pythons and (s.family != "saq" or has_saq)]


class Child:
    """Runs one child process that writes a JSON result file."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="captcha-bench-p1-")
        self.i = 0

    def run(self, cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
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


def child_cmd(py: Path, family: str, variant: str, mode: str, *, url: str, n: int, concurrency: int,
              extra: tuple[str, ...] = ()) -> list[str]:
    """The command line of one producer or worker child (see bench/peer_common.py for the peers' protocol)."""
    if family == "ours" and mode == "work":
        return [str(py), "-m", "bench.instant", "drain", "--n", str(n)]
    if family == "ours":
        return [str(py), "-m", "bench.p1_child", "produce", "--url", url, "--n", str(n), *extra]
    return [str(py), "-m", f"bench.peer_{family}", mode, "--url", url, "--n", str(n), "--variant", variant,
            "--concurrency", str(concurrency), *extra]


def _commandstats(r: Any) -> dict[str, dict[str, float]]:
    stats = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): {"calls": v["calls"], "usec": v["usec"]} for k, v in stats.items()}


def _redis_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def drain_one(child: Child, rs: RedisServer, system: System, py: Path, *, n: int, concurrency: int,
              internal: set[str]) -> tuple[float, dict[str, Any]]:
    """Enqueue n tasks with the system's producer (timed), drain them with a fresh worker (timed, with the Redis
    commands and server CPU it cost). Returns (submit rate, the drain's figures)."""
    r = rs.client()
    r.flushall()
    common: dict[str, Any] = {"url": rs.url, "n": n, "concurrency": concurrency}
    timeout = 60 + n / 20  # at least 20 tasks/s, or the child is stuck
    prod = child.run(child_cmd(py, system.family, system.variant, "produce", **common), python_env(), timeout)
    r.config_resetstat()
    assert rs.proc is not None
    cpu0 = _redis_cpu(rs.proc.pid)
    env = (worker_env(rs.url, concurrency=concurrency, threads=concurrency) if system.family == "ours"
           else python_env())
    res = child.run(child_cmd(py, system.family, system.variant, "work", **common), env, timeout)
    redis_cpu = _redis_cpu(rs.proc.pid) - cpu0
    work_cmds = {k: v for k, v in _commandstats(r).items() if k not in HARNESS_COMMANDS}
    total = sum(v["calls"] for v in work_cmds.values())
    scripts = sum(work_cmds.get(k, {}).get("calls", 0) for k in ("evalsha", "eval"))
    entry = {"tasks_per_s": n / res["first_to_done_s"], "tasks_per_s_to_nth": n / res["first_to_nth_s"],
             "cpu_us_per_task": 1e6 * res["cpu_s"] / n, "redis_cpu_us_per_task": 1e6 * redis_cpu / n,
             "commands_per_task": total / n, "script_calls_per_task": scripts / n,
             "by_command": {k: round(v["calls"] / n, 4) for k, v in sorted(work_cmds.items())}}
    if system.family == "ours":
        top = {k: v for k, v in work_cmds.items() if k not in internal}
        entry["round_trips_per_task"] = sum(v["calls"] for v in top.values()) / n
        entry["redis_usec_per_task"] = sum(v["usec"] for v in top.values()) / n
    return n / prod["seconds"], entry


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
    pythons = available_pythons(install)
    systems = usable(SYSTEMS, pythons)
    extras = [p for p in EXTRA_PRODUCERS if p.venv in pythons and (p.family != "saq" or saq_available())]
    internal = script_internal_commands()
    child = Child()
    workers: dict[str, list[dict[str, Any]]] = {}
    producers: dict[str, list[float]] = {}
    bench_runs: list[dict[str, float]] = []
    load: list[float] = []
    try:
        with RedisServer() as rs:
            for rep in range(reps):
                load.append(os.getloadavg()[0])
                for system in systems:
                    rate, entry = drain_one(child, rs, system, pythons[system.venv], n=n, concurrency=concurrency,
                                            internal=internal)
                    producers.setdefault(system.producer, []).append(rate)
                    workers.setdefault(system.name, []).append(entry)
                    log(f"P1 rep {rep + 1}/{reps} {system.name}: {entry['tasks_per_s']:.0f} tasks/s, "
                        f"{entry['commands_per_task']:.2f} cmds/task, submit {rate:.0f}/s")
                for extra in extras:
                    rs.client().flushall()
                    prod = child.run(child_cmd(pythons[extra.venv], extra.family, extra.variant, "produce",
                                               url=rs.url, n=submit_n, concurrency=concurrency, extra=extra.args),
                                     python_env(), 60 + submit_n / 20)
                    producers.setdefault(extra.key, []).append(submit_n / prod["seconds"])
                rs.client().flushall()
                bench_runs.append(redis_benchmark(rs.port, concurrency, bench_requests))
                log(f"P1 rep {rep + 1}/{reps} redis-benchmark: {bench_runs[-1]}")
            if profile_dir is not None:
                profile_ours(rs, n=n, concurrency=concurrency, out=profile_dir)
    finally:
        child.close()
    return assemble(workers, producers, bench_runs, systems, n=n, submit_n=submit_n, concurrency=concurrency,
                    reps=reps, load=load)


def profile_ours(rs: RedisServer, *, n: int, concurrency: int, out: Path) -> None:
    """py-spy flame graph of our worker draining n tasks (a separate run, not timed)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(pyspy):
        log("py-spy not installed: no profile")
        return
    out.mkdir(parents=True, exist_ok=True)
    r = rs.client()
    env = worker_env(rs.url, concurrency=concurrency, threads=concurrency)
    produce = [*child_cmd(Path(sys.executable), "ours", "", "produce", url=rs.url, n=n, concurrency=concurrency),
               "--result", os.devnull]
    for fmt, name in (("speedscope", "p1-ours.speedscope.json"), ("raw", "p1-ours.folded.txt")):
        r.flushall()
        subprocess.run(produce, env=python_env(), check=True, cwd=ROOT)
        subprocess.run([pyspy, "record", "-r", "200", "-f", fmt, "-o", str(out / name), "--", sys.executable, "-m",
                        "bench.instant", "drain", "--n", str(n)], env=env, check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log(f"P1 profile written to {out}")


def _metric(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return summary([x[key] for x in runs if key in x])


def _best(medians: dict[str, float]) -> str | None:
    return max(medians, key=lambda k: medians[k]) if medians else None


def peer_ratios(throughput: dict[str, dict[str, Any]], systems: list[System]) -> dict[str, Any]:
    """ours ÷ each peer; the fastest tuned peer; the fastest tuned peer that, like ours, stores the result and
    acknowledges after the run."""
    meta = {s.name: s for s in systems}
    ours = throughput["ours"]["median"]
    ratios: dict[str, Any] = {f"ours_vs_{k}": ours / v["median"] for k, v in throughput.items()
                              if k != "ours" and v["median"]}
    tuned = {k: v["median"] for k, v in throughput.items() if k != "ours" and meta[k].tuned and v["median"]}
    alike = {k: v for k, v in tuned.items() if meta[k].keeps_result_acks_after}
    for key, group in (("best_tuned_peer", tuned), ("best_peer_keeping_results_acking_after", alike)):
        best = _best(group)
        if best is not None:
            ratios[key] = best
            ratios[f"ours_vs_{key}"] = ours / group[best]
    return ratios


def assemble(workers: dict[str, list[dict[str, Any]]], producers: dict[str, list[float]],
             bench_runs: list[dict[str, float]], systems: list[System], *, n: int, submit_n: int, concurrency: int,
             reps: int, load: list[float]) -> dict[str, Any]:
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
    ratios = peer_ratios(throughput, systems)
    sm = submit.get("ours_submit_many", {}).get("median")
    for key, s in submit.items():
        if sm and s["median"] and key != "ours_submit_many":
            ratios[f"submit_many_vs_{key}"] = sm / s["median"]
    best = ratios.get("best_tuned_peer")
    targets = {
        "p1_ours_ge_2x_best_tuned_peer": (ratios.get("ours_vs_best_tuned_peer") or 0) >= 2.0 if best else None,
        "submit_many_ge_10x_saq_enqueue": (ratios.get("submit_many_vs_saq_enqueue") or 0) >= 10.0
        if "submit_many_vs_saq_enqueue" in ratios else None,
    }
    return {
        "params": params(systems, n=n, submit_n=submit_n, concurrency=concurrency, reps=reps),
        "systems": {s.name: {k: v for k, v in asdict(s).items() if k not in {"name", "family", "venv"}}
                    for s in systems},
        "load_average_1m": load,
        "throughput_tasks_per_s": throughput,
        "per_task": per_task,
        "submit_tasks_per_s": submit,
        "redis_benchmark_rps": rb,
        "ceiling_tasks_per_s": ceiling,
        "ratios": ratios,
        "targets": targets,
    }


def params(systems: list[System], *, n: int, submit_n: int, concurrency: int, reps: int) -> dict[str, Any]:
    return {"tasks": n, "concurrency": concurrency, "repetitions": reps, "submit_variant_tasks": submit_n,
            "systems": [s.name for s in systems],
            "logging": "each system as its CLI configures it by default, to a file: ours JSON at info (no line "
                       "per task), arq INFO (two lines per job), taskiq INFO (one line per task), Dramatiq INFO "
                       "and Celery WARNING (none per task), SAQ errors only",
            "timing": "first job start -> the n-th job's last step (ours: processing and pending empty; SAQ: "
                      "after_process; arq: after_job_end; Dramatiq: after_ack; taskiq: post_save (list) / XACK "
                      "returned (stream); Celery: task_postrun, or the ack returned with acks_late)"}
