"""Helpers shared by the tests (`from tests.helpers import ...`)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from captcha_worker import localredis
from captcha_worker.config import WorkerConfig
from captcha_worker.localredis import free_port as free_port  # noqa: PLC0414 - the tests take it from here
from captcha_worker.localredis import wait_port as wait_port  # noqa: PLC0414
from captcha_worker.worker import Worker, open_worker

ROOT = Path(__file__).resolve().parents[1]
#: the API key every test uses (32 characters, as CaptchaAI issues them); OTHER_KEY: a second, valid one
KEY = "0123456789abcdef0123456789abcdef"
OTHER_KEY = "fedcba9876543210fedcba9876543210"


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


#: the line `captcha-worker simulator` and `captcha-worker gateway` print once their sockets are bound
LISTENING = re.compile(rb"listening on (?P<url>https?://\S+:(?P<port>\d+))"
                       rb"(?: \(metrics on port (?P<metrics>\d+)\))?")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live child has used (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_listening(proc: subprocess.Popen[bytes], log: Path, what: str, cpu_budget: float = 15.0) -> re.Match[bytes]:
    """Wait for a child started on port 0 to print its `listening on URL` line; the match names the ports it bound.

    The child's own signal, not a guessed port: nothing can take its port first. It fails as soon as the child
    exits (with its exit code and last output), or once the child has burnt `cpu_budget` seconds of CPU without
    listening: CPU, not wall time, so a loaded machine only makes the wait longer, never fails it."""
    while True:
        m = LISTENING.search(log.read_bytes())
        if m:
            return m
        code = proc.poll()
        if code is not None and not LISTENING.search(log.read_bytes()):
            raise RuntimeError(f"{what} exited with code {code} before listening; its last output:\n{tail(log)}")
        if cpu_seconds(proc.pid) > cpu_budget:
            raise RuntimeError(f"{what} (pid {proc.pid}) used {cpu_budget}s of CPU without listening; "
                               f"its last output:\n{tail(log)}")
        time.sleep(0.05)


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
