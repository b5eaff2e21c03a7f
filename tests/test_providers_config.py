"""PROVIDERS (issue 27): the overflow providers and the spend cap, parsed with a one-line ConfigError naming the
field for every bad value of any JSON shape; keys are Secrets (never in repr, errors or CLI output); unset: off."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from captcha_worker.config import ConfigError, WorkerConfig, providers_from_env
from tests.helpers import KEY, run_cli

BASE = {"CAPTCHAAI_KEY": KEY, "CAPTCHAAI_THREADS": "4"}
PKEY = "2captcha-secret-key-0123456789"


def provider(**patch: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"name": "twocaptcha", "protocol": "res.php", "url": "http://127.0.0.1:9/",
                         "key": PKEY, "kinds": ["turnstile", "hcaptcha"],
                         "price_per_1000": {"turnstile": 1.45, "hcaptcha": 2.99}}
    p.update(patch)
    return {k: v for k, v in p.items() if v is not None}


def doc(*providers: dict[str, Any], cap: Any = None) -> str:
    return json.dumps({"providers": list(providers) or [provider()],
                       "cap": {"hour": 5.0, "day": 50.0} if cap is None else cap})


def test_unset_or_empty_is_off_and_nothing_changes() -> None:
    assert WorkerConfig.from_env(BASE).providers is None
    assert WorkerConfig.from_env({**BASE, "PROVIDERS": "  "}).providers is None
    assert WorkerConfig.from_env(BASE) == WorkerConfig.from_env({**BASE, "PROVIDERS": ""})


def test_the_issue_shape_parses_to_exact_micro_units() -> None:
    cfg = WorkerConfig.from_env({**BASE, "PROVIDERS": doc(provider(), provider(
        name="anticaptcha", protocol="createTask", url="https://api.anti-captcha.com", kinds=["turnstile"],
        price_per_1000={"turnstile": 2}, concurrency=3, refund_unsolvable=False))})
    pc = cfg.providers
    assert pc is not None and (pc.cap_hour_micro, pc.cap_day_micro) == (5_000_000, 50_000_000)
    two, anti = pc.providers
    assert (two.price_micro("turnstile"), two.price_micro("hcaptcha"), anti.price_micro("turnstile")) == \
        (1450, 2990, 2000)
    assert (two.url, two.key.value, two.concurrency, two.refund_unsolvable) == ("http://127.0.0.1:9", PKEY, 10, True)
    assert (anti.protocol, anti.concurrency, anti.refund_unsolvable) == ("createTask", 3, False)
    assert pc.for_kind("turnstile") is two and pc.for_kind("hcaptcha") is two and pc.for_kind("lemin") is None
    assert PKEY not in repr(cfg) and PKEY not in str(pc)


def test_key_file(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text(PKEY + "\n")
    pc = providers_from_env({"PROVIDERS": doc(provider(key=None, key_file=str(f)))})
    assert pc is not None and pc.providers[0].key.value == PKEY and pc.providers[0].key_file == str(f)
    with pytest.raises(ConfigError, match=r"key_file points to a missing file"):
        providers_from_env({"PROVIDERS": doc(provider(key=None, key_file=str(tmp_path / "nope")))})
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"cannot be read as UTF-8"):
        providers_from_env({"PROVIDERS": doc(provider(key=None, key_file=str(tmp_path / "bin")))})


BAD: list[tuple[str, str]] = [
    ("{", r"^PROVIDERS is not valid JSON \(line 1 column 2\)$"),
    ("[1]", r"must be a JSON object"),
    ('{"providers": [], "cap": {"hour": 1, "day": 1}}', r"providers must be a list of 1-32"),
    ('{"providers": [' + json.dumps(provider()) + '], "cap": {"hour": NaN, "day": 1}}', r"not valid JSON"),
    (json.dumps({"providers": [provider()], "cap": {"hour": 1, "day": 1}, "typo": 1}), r"unknown field 'typo'"),
    (doc(provider(), cap=[]), r"cap is required"),
    (doc(provider(), cap={"hour": 1}), r"cap.day must be a number, got nothing"),
    (doc(provider(), cap={"hour": "5", "day": 1}), r"cap.hour must be a number, got str"),
    (doc(provider(), cap={"hour": True, "day": 1}), r"cap.hour must be a number"),
    (doc(provider(), cap={"hour": -1, "day": 1}), r"cap.hour must be >= 0"),
    (doc(provider(), cap={"hour": 0.0000001, "day": 1}), r"cap.hour is finer than whole millionths"),
    (doc(provider(), cap={"hour": 1, "day": 1, "week": 3}), r"PROVIDERS.cap has an unknown field 'week'"),
    (doc("x"), r"providers\[0\] must be an object"),  # type: ignore[arg-type]
    (doc(provider(name="Two Captcha")), r"providers\[0\].name must be"),
    (doc(provider(name="captchaai")), r"not captchaai"),
    (doc(provider(), provider()), r"every name must be different"),
    (doc(provider(protocol="in.php")), r"\(twocaptcha\).protocol must be"),
    (doc(provider(url="ftp://h")), r"url must be an http\(s\) base URL"),
    (doc(provider(url="https://u:p@h/")), r"url must be an http\(s\) base URL"),
    (doc(provider(url=7)), r"url must be"),
    (doc(provider(key=None)), r"needs exactly one of key and key_file"),
    (doc(provider(key_file="/x")), r"needs exactly one of key and key_file"),
    (doc(provider(key="has space " + PKEY)), r"\.key must hold the provider's API key"),
    (doc(provider(key=12345)), r"\.key must hold"),
    (doc(provider(kinds=[])), r"kinds must be a list"),
    (doc(provider(kinds=["turnstile", "turnstile"])), r"kinds must be a list of different"),
    (doc(provider(kinds=["Turn Stile"])), r"kinds must be"),
    (doc(provider(price_per_1000={"turnstile": 1})), r"price for exactly its kinds \(turnstile, hcaptcha\)"),
    (doc(provider(price_per_1000={"turnstile": 1.4567, "hcaptcha": 1})), r"price_per_1000.turnstile is finer"),
    (doc(provider(price_per_1000={"turnstile": -1, "hcaptcha": 1})), r"price_per_1000.turnstile must be between"),
    (doc(provider(price_per_1000={"turnstile": 1e300, "hcaptcha": 1})), r"must be between 0 and 1000000"),
    (doc(provider(price_per_1000={"turnstile": None, "hcaptcha": 1})), r"turnstile must be a number"),
    (doc(provider(concurrency=0)), r"concurrency must be an integer between 1 and 1000"),
    (doc(provider(concurrency=True)), r"concurrency must be"),
    (doc(provider(refund_unsolvable="yes")), r"refund_unsolvable must be true or false"),
    (doc(provider(keys="x")), r"unknown field 'keys'"),
    ("[" * 100_000, r"not valid JSON"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_every_bad_field_is_one_line_naming_it_and_never_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        WorkerConfig.from_env({**BASE, "PROVIDERS": text})
    assert "\n" not in str(err.value) and PKEY not in str(err.value) and len(str(err.value)) < 300


def test_any_json_is_a_config_or_a_config_error() -> None:
    """Random JSON values, and random mutations of a good document, never raise anything but ConfigError."""
    rng = random.Random(27)
    leaves: list[Any] = [None, True, 0, -1, 1.5, 10**30, "", "x", PKEY, [], {}, "res.php", ["turnstile"]]

    def mutate(value: Any, depth: int = 0) -> Any:
        if isinstance(value, dict) and value and rng.random() < 0.7:
            k = rng.choice(list(value))
            return {**value, k: mutate(value[k], depth + 1)} if rng.random() < 0.8 else \
                {kk: vv for kk, vv in value.items() if kk != k}
        if isinstance(value, list) and value and rng.random() < 0.7:
            i = rng.randrange(len(value))
            return [*value[:i], mutate(value[i], depth + 1), *value[i + 1:]]
        return rng.choice(leaves)

    good = json.loads(doc(provider()))
    ok = 0
    for _ in range(2000):
        try:
            providers_from_env({"PROVIDERS": json.dumps(mutate(good))})
            ok += 1
        except ConfigError as exc:
            assert "\n" not in str(exc) and PKEY not in str(exc)
    assert 0 < ok < 2000, "some mutations stay valid (a key changed to another key), most do not"


def test_cli_prints_one_line_and_exits_2_without_the_key() -> None:
    bad = doc(provider(price_per_1000={"turnstile": "cheap", "hcaptcha": 1}))
    res = run_cli("run", env={**BASE, "REDIS_URL": "redis://127.0.0.1:9/0", "PROVIDERS": bad})
    assert res.returncode == 2, res.stderr
    assert "price_per_1000.turnstile must be a number" in res.stderr and PKEY not in res.stderr + res.stdout
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_createtask_providers_dialect() -> None:
    ct = provider(name="capsolver", protocol="createTask", kinds=["turnstile", "grid"],
                  price_per_1000={"turnstile": 1.2, "grid": 1.0})
    plain = providers_from_env({"PROVIDERS": doc(ct)})
    cs = providers_from_env({"PROVIDERS": doc({**ct, "dialect": "capsolver"})})
    assert plain is not None and plain.providers[0].dialect == "standard"
    assert cs is not None and cs.providers[0].dialect == "capsolver"  # grid listed: not routed (overflow)
    for bad, message in (({**ct, "dialect": "CapSolver"}, "dialect must be one of standard, capsolver"),
                         ({**ct, "dialect": 1}, "dialect must be one of"),
                         (provider(dialect="capsolver"), "dialect is for a createTask provider")):
        with pytest.raises(ConfigError, match=message):
            providers_from_env({"PROVIDERS": doc(bad)})
