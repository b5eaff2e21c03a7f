"""Helpers shared by the tests (`from tests.helpers import ...`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from captcha_worker import localredis
from captcha_worker.localredis import free_port as free_port  # noqa: PLC0414 - the tests take it from here
from captcha_worker.localredis import wait_port as wait_port  # noqa: PLC0414

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
