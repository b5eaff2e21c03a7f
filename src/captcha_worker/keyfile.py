"""The API key from a file (``CAPTCHAAI_KEY_FILE``), re-read while the worker (or the gateway: its copy of the
plan's key, for reports and the balance; an overflow provider's ``key_file``: overflow.key_watchers) runs: a key
rotated in its Secret reaches the pods without a restart.

Kubernetes updates a mounted Secret in place (an atomic swap of the volume's ``..data`` link) within the kubelet's
sync period, about a minute. :func:`watch_key_file` reads the file every ``KEY_RELOAD_SECONDS`` and hands a new,
well-formed key to the API client: the next request uses it, and a worker stopped by a rejected key
(``fatal_api_error``) resumes at its next probe. One log line per change, never with the key: ``api_key_reloaded``,
or ``api_key_file_invalid`` with the reason (the worker keeps the key it has) -- and one ``api_key_file_ok`` when
the file is readable again with the key already in use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from captcha_worker import log
from captcha_worker.config import ConfigError, Secret, read_key_file
from captcha_worker.log import event

logger = logging.getLogger("captcha_worker.keyfile")


class KeyFileWatcher:
    """Compares the file's key with the one in use; `check()` applies a change (one log line per change)."""

    def __init__(self, path: str, current: str, apply: Callable[[Secret], None], *, holder: str = "worker",
                 read: Callable[[str], str] = read_key_file) -> None:
        self.path = path
        self.holder = holder  # whose key: named in the hint and on every line ("worker", "gateway", "provider x")
        self.read = read  # the file's key, or ConfigError (a CaptchaAI key's shape by default)
        self.current = current
        self.apply = apply
        self.reloads = 0
        self._problem: str | None = None  # the reason last logged, so a lasting problem is logged once

    def check(self) -> bool:
        """Read the file once; True when a new key was applied."""
        try:
            key = self.read(self.path)
        except ConfigError as exc:
            reason = str(exc)
            if reason != self._problem:
                self._problem = reason
                event(logger, "api_key_file_invalid", logging.WARNING, path=self.path, holder=self.holder,
                      reason=reason, hint=f"the {self.holder} keeps the key it has; write a valid key to the Secret")
            return False
        if key == self.current:
            if self._problem is not None:
                self._problem = None
                event(logger, "api_key_file_ok", path=self.path, holder=self.holder)
            return False
        self._problem = None
        log.add_secret(key)  # scrubbed from every later line, like the key it replaces
        self.apply(Secret(key))
        self.current = key
        self.reloads += 1
        event(logger, "api_key_reloaded", path=self.path, holder=self.holder, reloads=self.reloads)
        return True


async def watch_key_file(watcher: KeyFileWatcher, interval_s: float) -> None:
    """Check the file every `interval_s` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        watcher.check()
