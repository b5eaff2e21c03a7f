"""The tenants' keys re-read while the gateway runs: a key rotated in the mounted Secret (``GATEWAY_SECRETS_DIR``,
``<tenant>.key``) is taken without a restart.

Every ``KEY_RELOAD_SECONDS`` the tenants are loaded again exactly as at start (``GATEWAY_TENANTS`` and the secrets
directory, every check applied: 32 letters and digits, no two tenants with one key). A changed key replaces the
old one at once (the old key is refused from then on), one ``tenant_key_reloaded`` line per tenant and change,
never the key. A load that fails (a file being rewritten, a malformed key) changes nothing and is logged once per
reason as ``tenant_keys_invalid``. Tenants added or removed, shares or limits changed, wait for a restart (the
chart rolls the pods on such a change).

The plan's key (``CAPTCHAAI_KEY_FILE``: forwarded reports, the upstream balance) is re-read on the same period by
the worker's :class:`~captcha_worker.keyfile.KeyFileWatcher` (``api_key_reloaded``, never the key): the next
upstream request uses the new key.
"""

from __future__ import annotations

import asyncio
import logging

from captcha_worker import log
from captcha_worker.config import ConfigError
from captcha_worker.gateway.config import GatewayConfig, load_tenants
from captcha_worker.gateway.tenants import Tenants
from captcha_worker.keyfile import KeyFileWatcher

_log = logging.getLogger("captcha_worker.gateway.keys")


class TenantKeyReloader:
    def __init__(self, cfg: GatewayConfig, tenants: Tenants) -> None:
        self.cfg = cfg
        self.tenants = tenants
        self._problem: str | None = None

    def check(self) -> list[str]:
        """Load the tenants once; the names whose key was replaced."""
        try:
            loaded = load_tenants(self.cfg.tenants_source, self.cfg.secrets_dir)
        except ConfigError as exc:
            if str(exc) != self._problem:
                self._problem = str(exc)
                log.event(_log, "tenant_keys_invalid", logging.WARNING, reason=str(exc),
                          hint="the gateway keeps the keys it has")
            return []
        self._problem = None
        keys = {t.name: t.key.value for t in loaded}
        for key in keys.values():
            log.add_secret(key)
        changed = self.tenants.rekey(keys)
        for name in changed:
            log.event(_log, "tenant_key_reloaded", tenant=name)
        return changed


async def reload_loop(reloader: TenantKeyReloader, closing: asyncio.Event) -> None:
    """Check every KEY_RELOAD_SECONDS until the gateway closes."""
    while not closing.is_set():
        try:
            await asyncio.wait_for(closing.wait(), reloader.cfg.key_reload_seconds)
        except TimeoutError:
            reloader.check()


async def plan_key_loop(watcher: KeyFileWatcher, interval_s: float, closing: asyncio.Event) -> None:
    """Re-read the plan's key file every `interval_s` until the gateway closes."""
    while not closing.is_set():
        try:
            await asyncio.wait_for(closing.wait(), interval_s)
        except TimeoutError:
            watcher.check()
