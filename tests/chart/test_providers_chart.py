"""The chart's overflow providers are what the worker reads: the rendered PROVIDERS (worker ConfigMap), with each
provider's key file laid out where the Deployment mounts its Secret, loads into the providers and cap the values
describe, to the exact micro-unit; prices and caps survive Helm's number handling (YAML floats) exactly."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from captcha_worker.config import providers_from_env

from .chartlib import HELMS, run, template_cmd

# prices with 1-3 decimals that binary floats do not hold exactly, and the extremes the worker accepts
PRICES = ["0.001", "0.1", "0.3", "1.45", "2.99", "0.57", "9.999", "123456.789", "1000000", "0"]


def _render(helm: str, chart: Path, env: dict[str, str], case: str, *extra: str) -> list[dict[str, Any]]:
    out = run(template_cmd(helm, chart, case, *extra), env=env).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _one(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))


def _lay_out_key_files(deployment: dict[str, Any], root: Path, keys: dict[str, str]) -> None:
    """Each provider-<name> volume's items written under `root` at the container's mountPath."""
    spec = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    for volume in spec["volumes"]:
        if volume["name"].startswith("provider-"):
            assert volume["secret"]["defaultMode"] == 0o444
            directory = root / mounts[volume["name"]].lstrip("/")
            directory.mkdir(parents=True)
            for item in volume["secret"]["items"]:
                (directory / item["path"]).write_text(keys[volume["secret"]["secretName"]] + "\n")


def _rooted(providers_json: str, root: Path) -> str:
    doc = json.loads(providers_json)
    for p in doc["providers"]:
        p["key_file"] = str(root / p["key_file"].lstrip("/"))
    return json.dumps(doc)


@pytest.mark.parametrize("helm", HELMS)
def test_the_rendered_providers_load_as_the_values_say(helm: str, chart: Path, helm_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    docs = _render(helm, chart, helm_env, "overflow")
    text = _one(docs, "ConfigMap", "-worker")["data"]["PROVIDERS"]
    keys = {"twocaptcha-api-key": "0123456789abcdef0123456789abcdef", "capsolver-api-key": "CAP-0123456789ABCDEF"}
    assert not any(k in json.dumps(docs) for k in keys.values())
    _lay_out_key_files(_one(docs, "Deployment", "-worker"), tmp_path, keys)
    cfg = providers_from_env({"PROVIDERS": _rooted(text, tmp_path)})
    assert cfg is not None and (cfg.cap_hour_micro, cfg.cap_day_micro) == (5_000_000, 50_000_000)
    two, cap = cfg.providers
    assert (two.name, two.protocol, two.url, two.kinds) == ("twocaptcha", "res.php", "https://2captcha.com",
                                                            ("turnstile", "hcaptcha"))
    assert dict(two.prices) == {"turnstile": 1450, "hcaptcha": 2990} and two.concurrency == 10
    assert two.key.value == keys["twocaptcha-api-key"] and two.refund_unsolvable
    assert (cap.protocol, dict(cap.prices), cap.concurrency, cap.dialect) == ("createTask", {"turnstile": 1200}, 20,
                                                                              "capsolver")
    assert two.dialect == "standard" and "dialect" not in json.loads(text)["providers"][0], "left out when unset"
    assert cap.key.value == keys["capsolver-api-key"]


@pytest.mark.parametrize("helm", HELMS)
def test_prices_and_caps_reach_the_worker_exactly(helm: str, chart: Path, helm_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    kinds = [f"k{i}" for i in range(len(PRICES))]
    provider = {"name": "twocaptcha", "protocol": "res.php", "url": "https://2captcha.com", "kinds": kinds,
                "pricePer1000": {k: float(p) for k, p in zip(kinds, PRICES, strict=True)}, "existingSecret": "s"}
    values = tmp_path / "values.yaml"  # YAML numbers, as a values file gives them (not --set strings)
    values.write_text(yaml.safe_dump({"providers": [provider], "spendCap": {"hour": 0.000001, "day": 1234.567891}}))
    docs = _render(helm, chart, helm_env, "default", "-f", str(values))
    _lay_out_key_files(_one(docs, "Deployment", "-worker"), tmp_path, {"s": "k" * 32})
    cfg = providers_from_env({"PROVIDERS": _rooted(_one(docs, "ConfigMap", "-worker")["data"]["PROVIDERS"],
                                                   tmp_path)})
    assert cfg is not None
    assert dict(cfg.providers[0].prices) == {k: int(Decimal(p) * 1000) for k, p in zip(kinds, PRICES, strict=True)}
    assert (cfg.cap_hour_micro, cfg.cap_day_micro) == (1, 1_234_567_891)


@pytest.mark.parametrize("helm", HELMS)
def test_routing_on_a_deadline_is_on_unless_switched_off(helm: str, chart: Path, helm_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    keys = {"twocaptcha-api-key": "0" * 32, "capsolver-api-key": "CAP-0123456789ABCDEF"}
    for extra, on in (((), True), (("--set", "overflowOnDeadline=false"), False)):
        docs = _render(helm, chart, helm_env, "overflow", *extra)
        root = tmp_path / str(on)
        _lay_out_key_files(_one(docs, "Deployment", "-worker"), root, keys)
        text = _one(docs, "ConfigMap", "-worker")["data"]["PROVIDERS"]
        assert ("on_deadline" in json.loads(text)) is not on, "left out when on: the worker's default"
        cfg = providers_from_env({"PROVIDERS": _rooted(text, root)})
        assert cfg is not None and cfg.on_deadline is on
