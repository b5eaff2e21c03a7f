"""The chart's gateway configuration is what `captcha-worker gateway` reads: the rendered ConfigMap (environment and
tenants file) and the generated Secret (one file per key), laid out as the Deployment mounts them, load into the
tenants the values describe; and `captcha-worker gateway --check` accepts them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from captcha_worker.gateway import GatewayConfig

from .chartlib import ROOT, run, template_cmd

TENANTS = [{"name": "team-a", "threads": 3, "reserved": 1, "rateLimit": {"requestsPerSecond": 5, "burst": 10}},
           {"name": "team-b", "threads": 4, "pingbackHosts": ["hooks.b.example"], "pingbackNetworks": ["10.1.0.0/16"],
            "balance": 2.5}]


@pytest.mark.parametrize("helm", ["helm3", "helm4"])
def test_the_rendered_gateway_config_loads(helm: str, chart: Path, helm_env: dict[str, str],
                                           tmp_path: Path) -> None:
    out = run(template_cmd(helm, chart, "default", "--set", "gateway.enabled=true",
                           "--set-json", f"gateway.tenants={json.dumps(TENANTS)}"), env=helm_env).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-gateway"))
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-gateway"))
    tenants_dir, secrets_dir = tmp_path / "tenants", tmp_path / "secrets"
    tenants_dir.mkdir()
    secrets_dir.mkdir()
    (tenants_dir / "tenants.json").write_text(cm["data"].pop("tenants.json"))
    for name, value in secret["data"].items():
        (secrets_dir / name).write_bytes(base64.b64decode(value))
    env = {**cm["data"], "GATEWAY_TENANTS": str(tenants_dir / "tenants.json"), "GATEWAY_SECRETS_DIR": str(secrets_dir)}
    cfg = GatewayConfig.from_env(env)
    a, b = cfg.tenants
    assert (a.name, a.threads, a.reserved, b.name, b.threads, b.reserved) == ("team-a", 3, 1, "team-b", 4, 0)
    assert a.rate_limit is not None and (a.rate_limit.requests_per_second, a.rate_limit.burst) == (5.0, 10)
    assert b.pingback is not None and b.pingback.hosts == ("hooks.b.example",) and b.balance == 2.5
    assert len(b.pingback.secret.value) >= 16 and a.pingback is None
    assert len({a.key.value, b.key.value}) == 2 and all(len(t.key.value) == 32 for t in cfg.tenants)
    assert cfg.queue == "captcha" and cfg.plan_threads == 5
    assert a.key.value not in json.dumps(cm)  # no key in the ConfigMap
    proc = subprocess.run([sys.executable, "-m", "captcha_worker.cli", "gateway", "--check"], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [t["name"] for t in json.loads(proc.stdout)["tenants"]] == ["team-a", "team-b"]
