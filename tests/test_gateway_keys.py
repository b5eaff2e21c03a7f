"""Tenant keys rotated in the mounted Secret (GATEWAY_SECRETS_DIR) reach a running gateway without a restart: a
real `captcha-worker gateway` process, a real redis-server, the key files swapped the way the kubelet updates a
Secret volume (the ..data link re-pointed)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp

from captcha_worker.gateway.config import GatewayConfig
from captcha_worker.gateway.keys import TenantKeyReloader
from captcha_worker.gateway.tenants import Tenants
from tests.helpers import KEY, OTHER_KEY
from tests.procs import GatewayProc

TENANTS = json.dumps({"tenants": [{"name": "team-a", "threads": 2, "balance": 3.5},
                                  {"name": "team-b", "threads": 2}]})
B_KEY = "b" * 32


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


def test_reloader_takes_a_new_key_once_and_keeps_the_old_through_a_bad_write(tmp_path: Path) -> None:
    secret_volume(tmp_path, {"team-a.key": KEY, "team-b.key": B_KEY}, 1)
    cfg = GatewayConfig.from_env({"GATEWAY_TENANTS": TENANTS, "GATEWAY_SECRETS_DIR": str(tmp_path)})
    tenants = Tenants(cfg.tenants)
    reloader = TenantKeyReloader(cfg, tenants)
    assert reloader.check() == []
    secret_volume(tmp_path, {"team-a.key": "short", "team-b.key": B_KEY}, 2)
    assert reloader.check() == [] and tenants.identify(KEY) == tenants.by_name["team-a"]
    secret_volume(tmp_path, {"team-a.key": B_KEY, "team-b.key": B_KEY}, 3)  # two tenants, one key: refused
    assert reloader.check() == [] and tenants.identify(KEY) == tenants.by_name["team-a"]
    secret_volume(tmp_path, {"team-a.key": OTHER_KEY, "team-b.key": B_KEY}, 4)
    assert reloader.check() == ["team-a"] and reloader.check() == []
    assert tenants.identify(OTHER_KEY) == tenants.by_name["team-a"]
    assert tenants.identify(B_KEY) == tenants.by_name["team-b"]
    assert str(tenants.identify(KEY)) == "ERROR_KEY_DOES_NOT_EXIST"


async def test_a_rotated_tenant_key_reaches_the_running_gateway(redis_server: Any, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    secret_volume(secrets, {"team-a.key": KEY, "team-b.key": B_KEY}, 1)
    env = {"REDIS_URL": redis_server.url, "GATEWAY_TENANTS": TENANTS, "GATEWAY_SECRETS_DIR": str(secrets),
           "KEY_RELOAD_SECONDS": "1"}
    gw = GatewayProc("gw", env, tmp_path).start()
    try:
        async with aiohttp.ClientSession() as http:
            async def balance(key: str) -> str:
                async with http.post(f"{gw.url}/res.php", data={"key": key, "action": "getbalance"}) as resp:
                    return await resp.text()

            assert await balance(KEY) == "3.5"
            assert await balance(OTHER_KEY) == "ERROR_KEY_DOES_NOT_EXIST"
            pid = gw.proc.pid if gw.proc else 0
            rotated = time.monotonic()
            secret_volume(secrets, {"team-a.key": OTHER_KEY, "team-b.key": B_KEY}, 2)
            while await balance(OTHER_KEY) != "3.5":
                assert time.monotonic() - rotated < 30, gw.logs()[-2000:]
                await asyncio.sleep(0.1)
            latency = time.monotonic() - rotated
            assert await balance(KEY) == "ERROR_KEY_DOES_NOT_EXIST", "the old key is refused once replaced"
            assert await balance(B_KEY) == "0.0", "the other tenant keeps its key"
            assert gw.proc is not None and gw.proc.pid == pid and gw.proc.poll() is None
    finally:
        gw.stop()
    logs = gw.logs()
    lines = [json.loads(ln) for ln in logs.splitlines() if ln.startswith("{")]
    assert [ln["tenant"] for ln in lines if ln.get("event") == "tenant_key_reloaded"] == ["team-a"]
    assert KEY not in logs and OTHER_KEY not in logs and B_KEY not in logs
    print(f"\ntenant key rotation: file swapped -> new key accepted in {latency:.1f} s (KEY_RELOAD_SECONDS=1), "
          f"same gateway pid {pid}")
