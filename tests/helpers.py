"""The test harness, part 1 (`from tests.helpers import ...`): the key, the one `wait_until`, the one task factory
(`task_body`), the one worker environment (`worker_env`), the CLI runner, the `listening on` wait, the in-process
worker. Part 2, tests/procs.py: the processes (redis-server, simulator, workers, gateways, a whole stack). The
tests, the chaos suite and the benchmarks (bench/common.py) all start their pieces from these two modules."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from captcha_worker import localredis
from captcha_worker.config import WorkerConfig
from captcha_worker.localredis import free_port as free_port  # noqa: PLC0414 - the tests take it from here
from captcha_worker.localredis import wait_port as wait_port  # noqa: PLC0414
from captcha_worker.service import LISTENING as LISTENING  # noqa: PLC0414 - the children's 'listening on' lines
from captcha_worker.service import PINGBACK_LISTENING as PINGBACK_LISTENING  # noqa: PLC0414
from captcha_worker.worker import Worker, open_worker

ROOT = Path(__file__).resolve().parents[1]
#: the API key every test uses (32 characters, as CaptchaAI issues them); OTHER_KEY: a second, valid one
KEY = "0123456789abcdef0123456789abcdef"
OTHER_KEY = "fedcba9876543210fedcba9876543210"
TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}  # the params of the tests' tasks


def task_body(task_id: str, reply_to: str | None = None, params: dict[str, str] | None = None, *,
              method: str = "turnstile") -> str:
    """A task as a producer pushes it (docs/contracts.md): `method` with `params` (default: TURNSTILE), submitted
    now, its result notified on `reply_to` when given."""
    task: dict[str, Any] = {"id": task_id, "method": method, "params": TURNSTILE if params is None else params,
                            "submitted_at": time.time()}
    if reply_to is not None:
        task["reply_to"] = reply_to
    return json.dumps(task)


def worker_env(redis_url: str, api_url: str, **extra: str) -> dict[str, str]:
    """The environment of a `captcha-worker run` process (docs/contracts.md) against `api_url`: the test key, a
    20-thread plan, 10 slots, the simulator's time at --speed 20, info logs, a 10 s drain; `extra` overrides.
    LEASE_SECONDS stays the default (30 s) unless a test sets it: a short lease only turns a loaded machine's
    scheduler stall into a reaped task."""
    return {"REDIS_URL": redis_url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": api_url, "CAPTCHAAI_THREADS": "20",
            "WORKER_CONCURRENCY": "10", "API_TIME_SCALE": "20", "LOG_LEVEL": "info", "DRAIN_GRACE_SECONDS": "10",
            **extra}


Predicate = Callable[[], "bool | Awaitable[bool]"]


async def wait_until(predicate: Predicate, timeout: float, what: str, *, interval: float = 0.05,
                     not_yet: tuple[type[Exception], ...] = (OSError,)) -> None:
    """Until `predicate()` (a function or a coroutine function) is true; an OSError it raises (nothing listens
    yet, a connection reset; `not_yet`: the exceptions that mean so, e.g. a kubectl call failing while a pod
    starts) counts as not yet. Fails after `timeout` seconds naming `what` and the last error: a deadline for a
    stuck test, never a measurement (assert on what was waited for, not on how long it took)."""
    deadline, last = time.monotonic() + timeout, ""
    while True:
        try:
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
        except not_yet as exc:
            last = f" (last: {type(exc).__name__}: {exc})"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{last}")
        await asyncio.sleep(interval)


def wait_until_blocking(predicate: Callable[[], bool], timeout: float, what: str, *, interval: float = 0.05,
                        not_yet: tuple[type[Exception], ...] = (OSError,)) -> None:
    """`wait_until` for code outside an event loop (threads, synchronous fixtures, tests/e2e/pods.py): the same
    rules."""
    async def check() -> bool:
        return predicate()

    async def wait() -> None:
        await wait_until(check, timeout, what, interval=interval, not_yet=not_yet)

    asyncio.run(wait())


def redis_server_binary() -> str:
    binary = localredis.redis_server_binary()
    if binary is None:
        pytest.fail("redis-server is not installed: run 'make test' (scripts/install-tools.sh installs it)")
    return binary


def cli_env(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CAPTCHAAI_", "REDIS_", "WORKER_", "QUEUE_"))}
    base.update(env)
    return base


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: PLW1510 - callers assert on returncode
[sys.executable, "-m", "captcha_worker.cli", *args], env=cli_env(**(env or {})),
                          input=input, capture_output=True, text=True, timeout=timeout, cwd=ROOT)




def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live child has used (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_listening(proc: subprocess.Popen[bytes], log: Path, what: str, cpu_budget: float = 15.0, *,
                   offset: int = 0, pattern: re.Pattern[bytes] = LISTENING) -> re.Match[bytes]:
    """Wait for a child started on port 0 to print its `listening on URL` line; the match names the ports it bound.

    The child's own signal, not a guessed port: nothing can take its port first. It fails as soon as the child
    exits (with its exit code and last output), or once the child has burnt `cpu_budget` seconds of CPU without
    listening: CPU, not wall time, so a loaded machine only makes the wait longer, never fails it. `offset`: where
    this start's output begins in `log` (a log appended to by restarts); `pattern`: another line of the kind (a
    worker's `PINGBACK_LISTENING`)."""
    while True:
        m = pattern.search(log.read_bytes()[offset:])
        if m:
            return m
        code = proc.poll()
        if code is not None and not pattern.search(log.read_bytes()[offset:]):
            raise RuntimeError(f"{what} exited with code {code} before listening; its last output:\n{tail(log)}")
        if cpu_seconds(proc.pid) > cpu_budget:
            raise RuntimeError(f"{what} (pid {proc.pid}) used {cpu_budget}s of CPU without listening; "
                               f"its last output:\n{tail(log)}")
        time.sleep(0.05)


@contextmanager
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses every connection while the block runs: bound by this process and never
    listening, so no other process can bind it meanwhile (a free_port guess may be another server's by the time a
    client tries it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no output)"


@asynccontextmanager
async def running_worker(cfg: WorkerConfig) -> AsyncIterator[Worker]:
    """A worker running in this event loop (`Worker.run`) until the block ends, then stopped as SIGTERM would."""
    async with open_worker(cfg) as w:
        stop = asyncio.Event()
        task = asyncio.create_task(w.run(stop))
        try:
            yield w
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)


def secret_volume(root: Path, files: dict[str, str], generation: int) -> None:
    """The kubelet's update of a Secret volume: a new directory, `..data` re-pointed atomically, stable links."""
    target = root / f"..{generation}"
    target.mkdir()
    for name, value in files.items():
        (target / name).write_text(value + "\n")
    tmp = root / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "..data")
    for name in files:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
