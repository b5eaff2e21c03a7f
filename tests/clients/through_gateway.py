"""The compatibility suite through the gateway: the same real client libraries (CaptchaAI's v1 clients and the JSON-API
clients), every call each offers, against ``captcha-worker gateway`` (two replicas: one plain HTTP, one TLS for
2captcha-python and two of the JSON-API clients) in front of a real redis-server and two real ``captcha-worker run``
workers, whose upstream is the simulator (in this process, so every answer can be traced to the task the simulator
served).

Each client is a tenant of its own (its own key, ``threads`` as the simulator's plan, ``balance`` as the
simulator's, a pingback policy allowing 127.0.0.1). An answer a client hands over is judged against the result
the workers stored for the gateway's task (``{q}:result:gw:<tenant>:<number>``) and, once workers record the
CaptchaAI id on results (``captcha_id``), against the task the simulator served under that id. A pingback must
reach the receiver with the task's number and answer, signed with the tenant's secret.

    .venv/bin/python -m tests.clients.through_gateway     # print the table; exit 1 when it differs from
                                                          # docs/compatibility.md (the simulator's)
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import redis as sync_redis

from captcha_worker.methods import Answer, by_name
from captcha_worker.simulator import SimConfig, SimulatorServer
from captcha_worker.simulator.app import TaskView
from tests.clients import compat
from tests.procs import GatewayProc, RedisServer, workers
from tests.sim_helpers import KEY, PingbackReceiver

HERE = Path(__file__).resolve().parent

QUEUE = "compat"
SECRET = "pingback-secret-of-the-compat-run"
WORKERS, CONCURRENCY = 2, 100
#: JSON-API clients sent to the TLS replica (trusting the run's CA through SSL_CERT_FILE / REQUESTS_CA_BUNDLE), so
#: both replicas serve both protocols
VIA_TLS = frozenset({"capmonstercloudclient", "capsolver"})


def tenant_key(client: compat.Client) -> str:
    return hashlib.md5(client.key.encode()).hexdigest()


def tenants_json() -> str:
    return json.dumps({"tenants": [
        {"name": c.key, "key": tenant_key(c), "threads": compat.THREADS, "balance": compat.BALANCE,
         "pingback": {"hosts": ["127.0.0.1"], "networks": ["127.0.0.0/8"], "secret": SECRET}}
        for c in compat.CLIENTS]})


def signed(query: Mapping[str, str], headers: Mapping[str, str]) -> bool:
    """The signature docs/gateway.md describes, computed here from the description (not with the gateway's code)."""
    stamp = headers.get("X-Captcha-Timestamp", "")
    message = "\n".join((stamp, query.get("id", ""), query.get("code", ""), query.get("user_agent", "")))
    expected = "v1=" + hmac.new(SECRET.encode(), message.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("X-Captcha-Signature", ""))


class Store:
    """What the workers stored for a tenant's task number, cross-checked against the simulator when the result
    names the CaptchaAI id."""

    def __init__(self, redis_url: str, sim: SimulatorServer) -> None:
        self.redis = sync_redis.Redis.from_url(redis_url, decode_responses=True)
        self.sim = sim

    def view(self, tenant: str, number: str) -> TaskView | None:
        raw = self.redis.get(f"{{{QUEUE}}}:result:gw:{tenant}:{number}") if number.isdigit() else None
        if not raw:
            return None
        data = json.loads(str(raw))
        if data.get("status") != "solved" or data.get("kind") is None:
            return None
        view = TaskView(by_name(data["kind"]), Answer(data.get("solution") or "", data.get("user_agent")))
        captcha_id = data.get("captcha_id")
        if captcha_id is not None:
            served = self.sim.simulator.task_view(int(captcha_id))
            if served is None or served.kind.name != view.kind.name or served.answer != view.answer:
                return None  # the stored answer is not what the simulator served for that id
        return view


async def _client(client: compat.Client, url: str, tmp: Path, store: Store,
                  receiver: PingbackReceiver) -> list[compat.Row]:
    cfg_path = tmp / f"{client.key}.json"
    cfg_path.write_text(json.dumps({"client": client.key, "url": url, "key": tenant_key(client),
                                    "image": str(tmp / "captcha.png"), "proxy": compat.PROXY,
                                    "pingback": receiver.url}))
    lines = await compat._driver(client, cfg_path, tmp / "ca.pem")
    run = compat.Run(receiver, lines, lambda number: store.view(client.key, number), signed)
    wanted = sum(1 for ln in lines if "back" in ln["call"])
    for _ in range(200):  # the result reader calls pingbacks as results arrive
        mine = sum(1 for hit in receiver.hits if run.view(hit.get("id", "")) is not None)
        if mine >= wanted:
            break
        await asyncio.sleep(0.05)
    return [compat.judge(client, line, run) for line in lines]


async def run_through_gateway(logdir: Path) -> list[compat.Row]:
    with compat.scratch("compat-gw-") as (tmp, ca):
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp / "gateway.pem"))
        redis = RedisServer(dir=str(tmp))
        redis.start()
        sim_cfg = SimConfig(speed=compat.SPEED, threads=compat.THREADS * WORKERS, balance=99.0, keys=frozenset({KEY}))
        try:
            async with PingbackReceiver() as receiver, SimulatorServer(sim_cfg) as sim:
                return await _run(tmp, logdir, redis.url, sim, receiver)
        finally:
            redis.stop()


async def _run(tmp: Path, logdir: Path, redis_url: str, sim: SimulatorServer,
               receiver: PingbackReceiver) -> list[compat.Row]:
    common = {"REDIS_URL": redis_url, "QUEUE_NAME": QUEUE}
    worker_env = {**common, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url, "API_TIME_SCALE": str(compat.SPEED),
                  "CAPTCHAAI_THREADS": str(sim.simulator.config.threads), "WORKER_CONCURRENCY": str(CONCURRENCY)}
    gw_env = {**common, "GATEWAY_TENANTS": tenants_json()}
    plain = GatewayProc("gw-plain", gw_env, logdir)
    tls = GatewayProc("gw-tls", {**gw_env, "GATEWAY_TLS_CERT_FILE": str(tmp / "gateway.pem")}, logdir, tls=True)
    with workers(WORKERS, worker_env, logdir):
        try:
            await asyncio.to_thread(plain.start)
            await asyncio.to_thread(tls.start)
            store = Store(redis_url, sim)
            async with asyncio.timeout(compat.RUN_TIMEOUT_S + 30):
                per_client = await asyncio.gather(*(
                    _client(c, tls.url if c.tls or c.key in VIA_TLS else plain.url, tmp, store, receiver)
                    for c in compat.CLIENTS))
        finally:
            plain.stop()
            tls.stop()
    return [row for rows in per_client for row in rows]


def documented() -> dict[tuple[str, str], str]:
    """(client, call) -> result, from docs/compatibility.md's table (the simulator's run)."""
    out: dict[tuple[str, str], str] = {}
    for line in compat.DOC.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 4 and cells[1].startswith("`"):
            out[cells[0], cells[1].strip("`")] = cells[3]
    return out


def results(rows: list[compat.Row]) -> dict[tuple[str, str], str]:
    return {(r.client.title.split(" (")[0], r.call): r.result for r in rows}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="compat-gw-logs-") as logs:
        rows = asyncio.run(run_through_gateway(Path(logs)))
    got, doc = results(rows), documented()
    for key in sorted(set(got) | set(doc)):
        mark = "  " if got.get(key) == doc.get(key) else "≠ "
        print(f"{mark}{key[0]:<18} {key[1]:<60} {got.get(key, '(missing)')}")
    return 0 if got == doc and all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
