"""The probe server (`/metrics`, `/healthz`, `/readyz`) as `captcha-worker run` starts it."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from captcha_worker.metrics import ProbeServer


async def test_port_zero_reports_the_port_the_os_chose() -> None:
    ready = {"now": (True, "ok")}
    async with ProbeServer("127.0.0.1", 0, lambda: ready["now"]) as probes, aiohttp.ClientSession() as http:
        assert probes.port > 0
        base = f"http://127.0.0.1:{probes.port}"
        async with http.get(f"{base}/healthz") as resp:
            assert (resp.status, await resp.text()) == (200, "ok\n")
        ready["now"] = (False, "draining")
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 503 and "draining" in await resp.text()
        async with http.get(f"{base}/metrics") as resp:
            assert resp.status == 200 and "captcha_solver_" in await resp.text()


async def test_a_port_in_use_is_an_os_error() -> None:
    """`run` turns it into one line and exit 2: the probe server must raise, not serve elsewhere."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            async with ProbeServer("127.0.0.1", taken.getsockname()[1], lambda: (True, "ok")):
                pass
