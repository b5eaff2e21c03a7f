"""Every command honours the Redis settings `run` honours (one connection factory): an ACL user with a password,
over TLS with a private CA. Without the CA, or with a wrong password, each says so in one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.procs import RedisServer, simulator, workers

from .conftest import SPEED, Row, crashes, worker_env


def _certs(d: Path) -> Path:
    """A throw-away CA and a server certificate for 127.0.0.1 (trustme)."""
    import trustme  # noqa: PLC0415 - trustme: only the TLS tests need it

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(d / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    return d / "ca.crt"


@dataclass
class TlsRedis(RedisServer):
    """redis-server on TLS only (`port` is its TLS port), the default user off, an ACL user `captcha` with a
    password. RedisServer's start: a port taken first by another process never passes for this server."""

    persistent: bool = False

    def args(self, binary: str, workdir: str) -> list[str]:
        d = Path(workdir)
        return [binary, "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1", "--tls-cert-file",
                str(d / "server.crt"), "--tls-key-file", str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.crt"),
                "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", workdir,
                "--user", "default", "off", "--user", "captcha", "on", ">s3cret-acl-pw", "~*", "&*", "+@all"]


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    d = tmp_path / "tls"
    d.mkdir()
    ca = _certs(d)
    with TlsRedis(dir=str(d), client_kwargs={"ssl": True, "ssl_ca_certs": str(ca), "username": "captcha",
                                             "password": "s3cret-acl-pw"}) as server:
        yield server.port, ca


def test_every_command_honours_username_password_and_tls_ca(tls_redis: tuple[int, Path], tmp_path: Path) -> None:
    port, ca = tls_redis
    redis_env = {"REDIS_URL": f"rediss://127.0.0.1:{port}/0", "REDIS_USERNAME": "captcha",
                 "REDIS_PASSWORD": "s3cret-acl-pw", "REDIS_TLS_CA_FILE": str(ca)}
    with simulator(tmp_path, "--threads", "20", "--speed", SPEED) as sim:
        env = {**worker_env("unused", sim.url), **redis_env}
        with workers(1, env, tmp_path) as procs:
            submitted = run_cli("submit", "turnstile", "-p", "sitekey=0x4AAA", "-p", "pageurl=https://e.com",
                                "--id", "tls-1", "--wait", "--timeout", "60", env=redis_env)
            waited = run_cli("wait", "tls-1", "--timeout", "10", env=redis_env)
            stats = run_cli("stats", "--json", env=redis_env)
            dead = run_cli("dead-letters", "list", "--json", env=redis_env)
            audit = run_cli("audit", "--json", env=redis_env)  # exit 0: no violations (the scenario ends clean)
            check = run_cli("check", "--json", env=env)
            no_ca = run_cli("stats", env={**redis_env, "REDIS_TLS_CA_FILE": ""})
            wrong_pw = run_cli("stats", env={**redis_env, "REDIS_PASSWORD": "nope"})
            alive = procs[0].alive()
        sim_stats = sim.stats()
    results = [submitted, waited, stats, dead, audit, check]
    Row("cli-redis-settings", 1, int(json.loads(waited.stdout)["status"] == "solved"), 0, 0, 0,
        sim_stats["max_in_flight"], 20, {"commands_ok": sum(r.returncode == 0 for r in results),
                                         "commands": len(results), "no_ca": no_ca.stderr.strip(),
                                         "wrong_password": wrong_pw.stderr.strip()}).record()
    for r in results:
        assert r.returncode == 0, (r.args, r.stdout, r.stderr)
    assert json.loads(submitted.stdout)["status"] == "solved" and json.loads(waited.stdout)["status"] == "solved"
    assert json.loads(stats.stdout)["workers_alive"] == 1
    assert all(c["ok"] for c in json.loads(check.stdout)["checks"])
    assert no_ca.returncode == 1 and len(no_ca.stderr.strip().splitlines()) == 1 and "REDIS_TLS_CA_FILE" in no_ca.stderr
    assert wrong_pw.returncode == 1 and "refusing our credentials" in wrong_pw.stderr
    assert "s3cret-acl-pw" not in no_ca.stderr + wrong_pw.stderr + check.stdout
    assert alive and crashes(procs) == 0
