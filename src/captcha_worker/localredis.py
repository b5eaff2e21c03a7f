"""A redis-server of our own on 127.0.0.1: the one way the demo, the tests and the benchmarks start one.

Each server is stopped by its own process handle, never by name.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Self, cast

import redis as sync_redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (right now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Stop one process we started, by its own handle (never by name): ``sig``, then SIGKILL after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


class RedisNotInstalled(RuntimeError):
    def __init__(self) -> None:
        super().__init__("redis-server is not installed: run 'make tools' (scripts/install-tools.sh installs it)")


@dataclass
class LocalRedis:
    """redis-server on ``port`` (0, the default: a free one, chosen by `start`). ``persistent``: AOF with fsync
    always, so a restart keeps the data; otherwise no RDB and no AOF. ``dir``: its working directory (default: a
    temporary one of its own, removed by ``stop``). ``extra``: more redis-server arguments."""

    port: int = 0
    dir: str | None = None
    persistent: bool = False
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    started: bool = False  # it has served on `port` (a restart must keep that port)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self, binary: str, workdir: str) -> list[str]:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        return [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", workdir, "--save", "",
                *persistence, *self.extra]

    def start(self, timeout: float = 15.0) -> Self:
        """Start it and wait until it answers PING as itself (INFO's process_id is this child's pid), after loading
        its AOF when persistent: a port that another process took first never passes for this server. redis-server
        cannot bind port 0 and say which it got, so on a first start with port 0 the port is a guess (free_port),
        and a child that could not bind it is started again on another; a restart keeps its port (the clients have
        its URL) and fails instead, and so does a port the caller chose."""
        movable = not self.started and self.port == 0
        for _ in range(5):
            if movable:
                self.port = free_port()
            try:
                self._start_once(timeout)
            except (RuntimeError, sync_redis.exceptions.ConnectionError):
                if not movable or self.proc is None or self.proc.poll() is None:
                    raise
            else:
                if self._is_mine():
                    self.started = True
                    return self
                if not movable:
                    raise RuntimeError(f"127.0.0.1:{self.port} answers for another redis-server")
            self.stop()
        raise RuntimeError("redis-server could not bind a free port in 5 tries")

    def _is_mine(self) -> bool:
        client = self._ping_client()
        try:
            info = cast(dict[str, Any], client.info("server"))
        except sync_redis.exceptions.RedisError:
            return False
        finally:
            client.close()
        return self.proc is not None and self.proc.poll() is None and info.get("process_id") == self.proc.pid

    def _start_once(self, timeout: float) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RedisNotInstalled
        workdir = self.dir
        if workdir is None:
            self._tmp = self._tmp or tempfile.TemporaryDirectory(prefix="captcha-redis-")
            workdir = self._tmp.name
        self.proc = subprocess.Popen(self.args(binary, workdir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, timeout)
        self._wait_loaded(time.monotonic() + timeout)

    def _ping_client(self) -> sync_redis.Redis:
        """The client `start` waits with (a subclass may add TLS or a password)."""
        return sync_redis.Redis(host="127.0.0.1", port=self.port)

    def _wait_loaded(self, deadline: float) -> None:
        client = self._ping_client()
        try:
            while True:
                try:
                    client.ping()
                    return
                except sync_redis.exceptions.BusyLoadingError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Stop the process (SIGKILL when it outlives ``timeout``); the data directory stays until ``close``."""
        proc, self.proc = self.proc, None
        stop_process(proc, sig, timeout)

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()

    def close(self) -> None:
        """Stop it and remove its temporary directory."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
