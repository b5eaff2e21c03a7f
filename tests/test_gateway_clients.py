"""The acceptance test of the gateway: the real client libraries of the compatibility suite (four CaptchaAI v1
clients, four JSON-API clients: capmonstercloudclient, capsolver, python-rucaptcha's v2 classes, the CapMonster npm
client), every call each offers, through two `captcha-worker gateway` replicas (plain HTTP and TLS) in front of a real
redis-server and real workers, with the simulator as the upstream API (tests/clients/through_gateway.py). Every
call ends as it does against the simulator itself (docs/compatibility.md): the same calls work, the same client
bugs show, every kind is solved by some client, every answer is the one the workers stored (and, when results
carry the CaptchaAI id, the one the simulator served), pingbacks arrive signed with the tenant's secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from captcha_worker import methods
from tests.clients import compat, through_gateway

pytestmark = pytest.mark.integration


async def test_client_libraries_through_the_gateway(tmp_path: Path) -> None:
    missing = compat.missing_tools()
    if missing:
        pytest.fail(f"client libraries not installed ({', '.join(missing)}): run scripts/install-tools.sh "
                    "--only clients (make test does)")
    rows = await through_gateway.run_through_gateway(tmp_path)
    unexpected = [f"{r.client.title}: {r.call}: {r.result}" for r in rows if not r.ok]
    assert not unexpected, "\n".join(unexpected) + "\n" + "\n".join(
        f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(tmp_path.glob("*.log")))
    works = {r.kind for r in rows if r.result.startswith("works")}
    assert works >= set(methods.KIND_NAMES), set(methods.KIND_NAMES) - works
    got, doc = through_gateway.results(rows), through_gateway.documented()
    assert len(doc) == len(rows) > 60
    differ = {k: (got.get(k), doc.get(k)) for k in set(got) | set(doc) if got.get(k) != doc.get(k)}
    assert not differ, f"through the gateway vs docs/compatibility.md: {differ}"
    assert sum(1 for r in rows if "back" in r.call) >= 2  # pingbacks were judged (delivered and signed)
    json_kinds = {r.kind for r in rows if r.client.protocol == "json" and r.result == "works"}
    assert json_kinds >= set(methods.KIND_NAMES) - {"bls", "grid", "friendly_captcha", "captchafox", "lemin"}, \
        json_kinds  # every kind a JSON-API client offers went through createTask
