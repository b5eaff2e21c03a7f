"""The gateway-less CLI and a worker on real topologies, through the one connection factory: a Sentinel deployment
with data and sentinel passwords (and one on TLS only), and a Redis Cluster. `check`, `submit --wait`, `wait`,
`stats` and `dead-letters` each reach the queue by REDIS_MODE alone."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import KEY, run_cli
from tests.procs import Relay, WorkerProc, simulator
from tests.topology import Tls, cluster, sentinel

pytestmark = pytest.mark.integration
TURNSTILE_ARGS = ["turnstile", "-p", "sitekey=0x4AAAAAAA", "-p", "pageurl=https://example.com/login"]


class TopoEnv(dict[str, str]):
    """The env the CLI needs (REDIS_* from the topology), and the topology's worker."""

    worker: WorkerProc


@pytest.fixture(scope="module", params=["sentinel-auth", "sentinel-tls", "cluster"])
def topo_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TopoEnv]:
    """A topology, a simulator and one worker in pingback mode (its receiver on 127.0.0.1, port 0, called by the
    simulator through a Relay): every solve here is woken through the topology's Redis."""
    base = tmp_path_factory.mktemp(request.param)
    if request.param == "sentinel-auth":
        ctx: Any = sentinel(base / "t", password="data-pw", sentinel_password="sentinel-pw")
    elif request.param == "sentinel-tls":
        (base / "tls").mkdir()
        ctx = sentinel(base / "t", tls=Tls(base / "tls"))
    else:
        ctx = cluster(base / "t")
    with ctx as topo, simulator(base, "--threads", "20", "--speed", "20", "--seed", "3") as sim:
        relay = Relay()  # the simulator's callbacks go to it; the receiver binds port 0, the relay learns it
        relay.start()
        env = TopoEnv({**topo.env(), "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url, "CAPTCHAAI_THREADS": "20",
                       "WORKER_CONCURRENCY": "10", "API_TIME_SCALE": "20", "LEASE_SECONDS": "10",
                       "PINGBACK_URL": relay.url, "PINGBACK_HOST": "127.0.0.1", "PINGBACK_PORT": "0"})
        worker = WorkerProc("w", env, base)
        env.worker = worker
        worker.start()
        relay.target = f"http://127.0.0.1:{worker.pingback_port}"
        try:
            yield env
        finally:
            if worker.alive():
                worker.signal(signal.SIGTERM)
                worker.wait(20)


def test_check_passes(topo_env: TopoEnv) -> None:
    proc = run_cli("check", "--json", env=topo_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["redis"]["ok"], checks["redis"]


def test_submit_wait_stats(topo_env: TopoEnv) -> None:
    proc = run_cli("submit", *TURNSTILE_ARGS, "--wait", "--timeout", "60", env=topo_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "solved"
    ids = run_cli("submit", "--file", "-", env=topo_env, input="\n".join(json.dumps(
        {"method": "turnstile", "params": {"sitekey": "s", "pageurl": "https://e"}}) for _ in range(3)) + "\n")
    assert ids.returncode == 0, ids.stderr
    waited = run_cli("wait", *ids.stdout.split(), "--timeout", "60", env=topo_env)
    assert waited.returncode == 0 and len(waited.stdout.splitlines()) == 3
    stats = run_cli("stats", "--json", env=topo_env)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["workers_alive"] == 1
    dead = run_cli("dead-letters", "list", env=topo_env)
    assert dead.returncode == 0, dead.stderr


def test_pingbacks_wake_solves_on_every_topology(topo_env: TopoEnv) -> None:
    """The receiver's script declares every key it touches (the record and the owner's wake list), so a Cluster
    routes it; the callback wakes the solve through the topology's Redis."""
    accepted = topo_env.worker.metric("captcha_solver_pingbacks_total", outcome="accepted")
    woken = topo_env.worker.metric("captcha_solver_pingback_solves_total", via="pingback")
    proc = run_cli("submit", *TURNSTILE_ARGS, "--wait", "--timeout", "60", env=topo_env)
    assert proc.returncode == 0, proc.stderr
    assert topo_env.worker.metric("captcha_solver_pingbacks_total", outcome="accepted") == accepted + 1
    assert topo_env.worker.metric("captcha_solver_pingback_solves_total", via="pingback") == woken + 1


def test_secrets_stay_out_of_output(topo_env: TopoEnv) -> None:
    """A wrong master name is a readable error that names the sentinels, never a password."""
    if topo_env["REDIS_MODE"] != "sentinel":
        pytest.skip("sentinel only")
    env = {**topo_env, "REDIS_SENTINEL_MASTER": "nosuchmaster", "REDIS_CONNECT_TIMEOUT_SECONDS": "1"}
    proc = run_cli("stats", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "nosuchmaster" in out, out
    assert "data-pw" not in out and "sentinel-pw" not in out
    assert len(out.strip().splitlines()) == 1, out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([str(Path(__file__))]))
