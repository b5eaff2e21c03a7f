"""`captcha-worker stats --watch` as a process against a real redis-server: through a pipe (one block per
refresh), on a real terminal under tmux (redrawn in place), and through a Redis outage. Its Prometheus figures
are checked against the observability lab (test_observability.py)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from captcha_worker.queue import Keys, RedisQueue, dead_entry
from tests.helpers import ROOT, cli_env, free_port
from tests.procs import RedisServer

QUEUE = "watchq"


def _watch_cmd(url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "captcha_worker.cli", "stats", "--watch", "--redis-url", url, "--queue", QUEUE,
            *extra]


async def _seed(url: str, pending: int, dead_codes: list[str]) -> None:
    redis = Redis.from_url(url, decode_responses=True)
    try:
        q = RedisQueue(redis, QUEUE)
        if pending:
            await q.push([(f"w{i}", f'{{"id": "w{i}", "method": "turnstile", "params": {{}}}}')
                          for i in range(pending)], ttl=600)
        for code in dead_codes:
            await redis.lpush(Keys(QUEUE).dead, dead_entry(reason="test", code=code, task_id=None, view="{}",
                                                           attempts=3))
    finally:
        await redis.aclose()


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """The rest of stdout through the same buffered reader the first lines came from (communicate() would read
    the pipe underneath it and lose what the reader had buffered), then stderr."""
    assert proc.stdout is not None and proc.stderr is not None
    rest = proc.stdout.read()
    proc.wait(timeout)
    return rest, proc.stderr.read()


def _blocks(text: str) -> list[str]:
    return [b for b in text.split("captcha-solver  queue ") if b.strip()]


def test_watch_through_a_pipe_counts_new_dead_letters(redis_server: Any) -> None:
    asyncio.run(redis_server_flush(redis_server.url))
    asyncio.run(_seed(redis_server.url, 3, ["OLD_CODE"]))  # a dead letter from before the watch: not counted
    proc = subprocess.Popen(_watch_cmd(redis_server.url, "--count", "3", "--interval", "1", "--budget", "10"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=ROOT)
    assert proc.stdout is not None
    first = [proc.stdout.readline() for _ in range(4)]
    assert first[0].startswith("captcha-solver  queue 'watchq'"), first
    asyncio.run(_seed(redis_server.url, 0, ["MAX_ATTEMPTS_EXCEEDED", "MAX_ATTEMPTS_EXCEEDED", "INVALID_JSON"]))
    rest, err = _finish(proc, 30)
    assert proc.returncode == 0, err
    blocks = _blocks("".join(first) + rest)
    assert len(blocks) == 3, blocks
    head = blocks[0].splitlines()[3].split()
    assert head[:5] == ["3", "0", "/", "10", "(0"] and head[-2] == "1", blocks[0]  # pending, in flight, dead
    assert "none" in blocks[0].split("dead-lettered since")[1], blocks
    last = blocks[-1]
    assert last.splitlines()[3].split()[-2] == "4"
    dead = last.split("dead-lettered since the watch started, by code")[1]
    assert "MAX_ATTEMPTS_EXCEEDED" in dead and " 2" in dead and "INVALID_JSON" in dead and "OLD_CODE" not in dead
    assert "add --prometheus URL" in last
    assert "\033[" not in rest  # no terminal control codes into a pipe


async def redis_server_flush(url: str) -> None:
    redis = Redis.from_url(url)
    try:
        await redis.flushall()
    finally:
        await redis.aclose()


def test_watch_survives_a_redis_outage(tmp_path: Any) -> None:
    with RedisServer(dir=str(tmp_path), persistent=False) as server:  # a port checked to be its own
        url = f"redis://:hunter2@127.0.0.1:{server.port}/0"
        subprocess.run(["redis-cli", "-p", str(server.port), "config", "set", "requirepass", "hunter2"], check=True,
                       capture_output=True)
        proc = subprocess.Popen(_watch_cmd(url, "--count", "4", "--interval", "1"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=ROOT)
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(4)]
        server.stop(signal.SIGKILL)
        rest, err = _finish(proc, 60)
    assert proc.returncode == 0, err
    blocks = _blocks("".join(first) + rest)
    assert len(blocks) == 4 and "pending" in blocks[0]
    assert "Redis unreachable" in blocks[-1] and "retrying" in blocks[-1]
    assert "hunter2" not in "".join(first) + rest + err


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_watch_redraws_in_place_on_a_terminal(redis_server: Any) -> None:
    asyncio.run(redis_server_flush(redis_server.url))
    asyncio.run(_seed(redis_server.url, 7, []))
    session = f"watch{free_port()}"
    cmd = " ".join(_watch_cmd(redis_server.url, "--count", "3", "--interval", "0.5")) + "; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd], check=True,
                   env=cli_env(), cwd=ROOT)
    try:
        screen = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.5)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                                    check=True).stdout
            if screen.count("captcha-solver  queue") == 1 and "dead-lettered since" in screen:
                break
        history = subprocess.run(["tmux", "capture-pane", "-p", "-S", "-1000", "-t", session], capture_output=True,
                                 text=True, check=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
    assert screen.count("captcha-solver  queue 'watchq'") == 1, screen  # one frame on screen: redrawn in place
    row = next(line for line in screen.splitlines() if line.split()[:1] == ["7"])
    assert "0 / ?" in row
    assert history.count("captcha-solver  queue") <= 2, history  # clears, not scrolls


def test_watch_argument_errors() -> None:
    proc = subprocess.run(_watch_cmd("redis://127.0.0.1:9/0", "--interval", "0"), capture_output=True, text=True,
                          env=cli_env(), cwd=ROOT, timeout=30, check=False)
    assert proc.returncode == 2 and "--interval must be > 0" in proc.stderr
