"""The API key from a file (CAPTCHAAI_KEY_FILE), re-read while running: a rotated Secret reaches the worker without
a restart, one log line per change, never the key. The process test rotates the file the way the kubelet updates
a mounted Secret (an atomic swap of the ..data link) under a real worker, a real redis-server and the simulator."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from captcha_worker import log
from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.config import ConfigError, Secret, WorkerConfig
from captcha_worker.keyfile import KeyFileWatcher
from captcha_worker.simulator import SimConfig, SimulatorServer
from tests.helpers import KEY, OTHER_KEY, run_cli
from tests.procs import workers

BASE = {"CAPTCHAAI_THREADS": "10"}
TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}


def mounted_secret(root: Path, key: str, generation: int) -> Path:
    """Write `key` the way the kubelet updates a Secret volume: a new timestamped directory, then `..data`
    re-pointed atomically (rename of a temporary link); the file itself is a link through `..data`."""
    target = root / f"..{generation}"
    target.mkdir()
    (target / "api-key").write_text(key + "\n")
    tmp = root / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "..data")
    link = root / "api-key"
    if not link.is_symlink():
        link.symlink_to("..data/api-key")
    return link


def test_the_key_is_read_from_the_file(tmp_path: Path) -> None:
    path = mounted_secret(tmp_path, KEY, 1)
    cfg = WorkerConfig.from_env({**BASE, "CAPTCHAAI_KEY_FILE": str(path)})
    assert cfg.api_key == Secret(KEY) and cfg.api_key_file == str(path) and cfg.key_reload_seconds == 10.0
    assert WorkerConfig.from_env({**BASE, "CAPTCHAAI_KEY": KEY}).api_key_file is None


@pytest.mark.parametrize(("content", "message"), [
    (None, "CAPTCHAAI_KEY_FILE points to a missing file"),
    (b"", "CAPTCHAAI_KEY_FILE must be 32 letters and digits (got 0 characters)"),
    (b"short-secret-value\n", "CAPTCHAAI_KEY_FILE must be 32 letters and digits (got 18 characters)"),
    (b"\xff" * 32, "CAPTCHAAI_KEY_FILE is not UTF-8 text"),
    (b"k" * 5000, "CAPTCHAAI_KEY_FILE is not a key file (over 4096 bytes)"),
])
def test_a_bad_key_file_is_one_sentence_without_its_content(tmp_path: Path, content: bytes | None,
                                                            message: str) -> None:
    path = tmp_path / "api-key"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        WorkerConfig.from_env({**BASE, "CAPTCHAAI_KEY_FILE": str(path)})
    text = str(info.value)
    assert message in text and "\n" not in text and "short-secret-value" not in text


def test_key_and_key_file_together_are_refused(tmp_path: Path) -> None:
    path = mounted_secret(tmp_path, KEY, 1)
    with pytest.raises(ConfigError, match="set CAPTCHAAI_KEY or CAPTCHAAI_KEY_FILE, not both"):
        WorkerConfig.from_env({**BASE, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_KEY_FILE": str(path)})
    with pytest.raises(ConfigError, match=r"KEY_RELOAD_SECONDS must be >= 1\.0"):
        WorkerConfig.from_env({**BASE, "CAPTCHAAI_KEY_FILE": str(path), "KEY_RELOAD_SECONDS": "0"})


def test_check_reads_the_key_file_too(tmp_path: Path) -> None:
    """`helm test` runs `captcha-worker check` with the workers' environment: an unreadable or empty file is a
    config error (a malformed key goes to the API, whose verdict `check` shows: test_cli)."""
    path = tmp_path / "api-key"
    path.write_text("\n")
    env = {"CAPTCHAAI_KEY_FILE": str(path), "REDIS_URL": "redis://127.0.0.1:1/0"}
    proc = run_cli("check", env=env)
    assert proc.returncode == 2 and "CAPTCHAAI_KEY_FILE is empty" in proc.stderr, proc.stderr
    proc = run_cli("check", env={**env, "CAPTCHAAI_KEY_FILE": str(tmp_path / "missing")})
    assert proc.returncode == 2 and "CAPTCHAAI_KEY_FILE points to a missing file" in proc.stderr, proc.stderr


def _events(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_watcher_applies_a_change_once_and_logs_it_without_the_key(tmp_path: Path) -> None:
    stream = io.StringIO()
    log.setup("info", secrets=[KEY], stream=stream)
    path = mounted_secret(tmp_path, KEY, 1)
    applied: list[Secret] = []
    watcher = KeyFileWatcher(str(path), KEY, applied.append)
    assert watcher.check() is False and applied == []  # unchanged
    mounted_secret(tmp_path, OTHER_KEY, 2)
    assert watcher.check() is True and applied == [Secret(OTHER_KEY)]
    assert watcher.check() is False and watcher.check() is False  # logged and applied once
    events = _events(stream)
    assert [e["event"] for e in events] == ["api_key_reloaded"]
    assert events[0]["path"] == str(path) and events[0]["reloads"] == 1
    logging_key = log.redact(f"the new key {OTHER_KEY}")  # registered with the redactor on reload
    assert OTHER_KEY not in logging_key and KEY not in stream.getvalue() and OTHER_KEY not in stream.getvalue()


def test_watcher_keeps_the_key_through_a_bad_write_and_says_so_once(tmp_path: Path) -> None:
    stream = io.StringIO()
    log.setup("info", secrets=[KEY], stream=stream)
    path = mounted_secret(tmp_path, KEY, 1)
    applied: list[Secret] = []
    watcher = KeyFileWatcher(str(path), KEY, applied.append)
    mounted_secret(tmp_path, "not-a-key", 2)
    assert [watcher.check() for _ in range(3)] == [False, False, False]
    mounted_secret(tmp_path, KEY, 3)
    assert watcher.check() is False
    mounted_secret(tmp_path, OTHER_KEY, 4)
    assert watcher.check() is True
    events = _events(stream)
    assert [e["event"] for e in events] == ["api_key_file_invalid", "api_key_file_ok", "api_key_reloaded"]
    assert "got 9 characters" in events[0]["reason"] and "not-a-key" not in stream.getvalue()
    assert applied == [Secret(OTHER_KEY)]


async def test_a_rotated_key_file_resumes_a_running_worker_without_a_restart(redis: Redis, redis_server: Any,
                                                                           tmp_path: Path) -> None:
    """The file holds a key CaptchaAI rejects: the worker stops claiming (readiness 503), the task waits. The right
    key is written (a Secret update): the same process solves the task, with one api_key_reloaded line."""
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    path = mounted_secret(secret_dir, OTHER_KEY, 1)
    async with SimulatorServer(SimConfig(threads=5, speed=20, keys=frozenset({KEY}))) as sim:
        env = {"REDIS_URL": redis_server.url, "CAPTCHAAI_KEY_FILE": str(path), "CAPTCHAAI_URL": sim.url,
               "CAPTCHAAI_THREADS": "5", "WORKER_CONCURRENCY": "5", "API_TIME_SCALE": "1", "LEASE_SECONDS": "3",
               "KEY_RELOAD_SECONDS": "10", "DRAIN_GRACE_SECONDS": "5"}
        with workers(1, env, tmp_path) as (w,):
            async with aiohttp.ClientSession() as http:
                async def readyz() -> int:
                    try:
                        async with http.get(f"http://127.0.0.1:{w.metrics_port}/readyz") as resp:
                            return resp.status
                    except aiohttp.ClientError:
                        return 0

                deadline = time.monotonic() + 30
                while not w.events("fatal_api_error"):
                    assert time.monotonic() < deadline, w.logs()[-2000:]
                    await asyncio.sleep(0.1)
                assert await readyz() == 503
                pid = w.proc.pid if w.proc else 0
                async with CaptchaQueue(redis) as q:
                    task_id = await q.submit("turnstile", TURNSTILE)
                    await asyncio.sleep(1)
                    assert (await q.stats()).pending == 1, "no claim while the key is rejected"
                    rotated = time.monotonic()
                    mounted_secret(secret_dir, KEY, 2)
                    outcome = await q.result(task_id, timeout=90)
                    latency = time.monotonic() - rotated
                assert isinstance(outcome, Solved), outcome
                assert w.alive() and w.proc is not None and w.proc.pid == pid and w.starts == 1
                assert await readyz() == 200
    reloaded = w.events("api_key_reloaded")
    assert len(reloaded) == 1 and reloaded[0]["path"] == str(path)
    assert len(w.events("fatal_api_error_cleared")) == 1
    assert KEY not in w.logs() and OTHER_KEY not in w.logs()
    print(f"\nkey rotation: rejected key -> right key in the file -> task solved in {latency:.1f} s "
          f"(KEY_RELOAD_SECONDS=10; the reload wakes the FATAL probe), same pid {pid}")
