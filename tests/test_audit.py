"""`captcha-worker audit` and AUDIT (issue 23): each check finds what breaks its promise of docs/guarantees.md in a
real redis-server, names the member, passes what the product leaves on purpose (a unit held while its solve may
still run at the API, a requeued task's unit), and the CLI exits 1 on any violation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from captcha_worker.budget import unit_of
from captcha_worker.config import WorkerConfig
from captcha_worker.queue import Ack, AuditCheck, RedisQueue, Violation, confirmed
from captcha_worker.simulator import SimConfig, SimulatorServer
from captcha_worker.task import Result, Status
from tests.helpers import KEY, ROOT, run_cli, running_worker


def body(task_id: str) -> str:
    return json.dumps({"id": task_id, "method": "turnstile", "params": {"sitekey": "s", "pageurl": "https://e.com"}})


async def claimed(q: RedisQueue, *ids: str) -> None:
    await q.push([(i, body(i)) for i in ids], ttl=100)
    assert len(await q.claim(len(ids), lease_s=60, worker="w")) == len(ids)


async def test_a_healthy_queue_has_no_violations(redis: Redis) -> None:
    q = RedisQueue(redis, "audit")
    await claimed(q, "running", "done", "held", "requeued")
    assert await q.ack("done", Result("done", Status.SOLVED, solution="x"), result_ttl=60, worker="w",
                       unit=unit_of("done")) is True
    held = Ack("held", Result("held", Status.ERROR, code="SOLVE_TIMEOUT"), unit=unit_of("held"), hold_s=30,
               worker="w")  # its solve may run 30 s more at the API
    assert await q.ack_many([held], result_ttl=60, reply_ttl=60) == [True]
    await redis.zadd(q.keys.leases, {"requeued": 0})  # its worker died: reaped, its unit left for the next owner
    assert await q.reap(orphan_grace_s=60) == (1, 0)
    assert await q.audit() == []
    assert await redis.zscore(q.keys.budget, unit_of("held")) is not None


async def test_each_check_names_its_members(redis: Redis) -> None:
    q = RedisQueue(redis, "audit")
    await claimed(q, "phantom", "leased-after", "no-lease")
    for tid in ("phantom", "leased-after"):
        assert await q.ack(tid, Result(tid, Status.SOLVED, solution="x"), result_ttl=60, worker="w",
                           unit=unit_of(tid)) is True
    far = float((await redis.time())[0]) + 60
    await redis.zadd(q.keys.budget, {unit_of("phantom"): far})  # what the old heartbeat re-created
    await redis.zadd(q.keys.leases, {"leased-after": far})  # a lease renewed after its ACK
    await redis.zrem(q.keys.leases, "no-lease")
    await redis.rpush(q.keys.processing, b"\xff raw with a secret: proxy=u:p@h")
    found = set(await q.audit())
    assert found == {
        Violation(AuditCheck.UNIT_OF_FINISHED_TASK, unit_of("phantom")),
        Violation(AuditCheck.LEASE_OF_FINISHED_TASK, "leased-after"),
        Violation(AuditCheck.LEASE_WITHOUT_ITEM, "leased-after"),
        Violation(AuditCheck.ITEM_WITHOUT_LEASE, "no-lease"),
        Violation(AuditCheck.ITEM_WITHOUT_LEASE, b"\xff raw with a secret: proxy=u:p@h"),
    }
    later = await q.audit()
    assert set(confirmed(list(found), later)) == found, "what persists is confirmed"
    assert confirmed([], later) == [], "a single snapshot confirms nothing"


async def test_the_report_is_capped_per_check(redis: Redis) -> None:
    q = RedisQueue(redis, "audit")
    await redis.rpush(q.keys.processing, *(f"i{n}" for n in range(5)))
    found = await q.audit(cap=2)
    assert len(found) == 3 and found[-1] == Violation(AuditCheck.ITEM_WITHOUT_LEASE, "(3 more)")


async def test_the_cli_exits_1_naming_each_violation_and_0_when_clean(redis: Redis, redis_server: Any) -> None:
    q = RedisQueue(redis, "captcha")
    env = {"REDIS_URL": redis_server.url}
    clean = run_cli("audit", "--confirm-seconds", "0", env=env)
    assert clean.returncode == 0 and "no violations" in clean.stdout, clean
    await claimed(q, "phantom")
    await q.ack("phantom", Result("phantom", Status.SOLVED, solution="x"), result_ttl=60, worker="w",
                unit=unit_of("phantom"))
    await redis.zadd(q.keys.budget, {unit_of("phantom"): float((await redis.time())[0]) + 60})
    await redis.rpush(q.keys.processing, "{raw: proxy=user:secret@10.0.0.1}")
    out = run_cli("audit", "--json", env=env)  # confirmed by a second audit 1 s later
    assert out.returncode == 1, out
    data = json.loads(out.stdout)
    assert {"check": "unit_of_finished_task", "member": "t:phantom"} in data["violations"]
    assert data["counts"] == {"unit_of_finished_task": 1, "lease_of_finished_task": 0, "lease_without_item": 0,
                              "item_without_lease": 1}
    assert "secret" not in out.stdout + out.stderr, "a raw item is named by its size, never its bytes"
    human = run_cli("audit", "--confirm-seconds", "0", env=env)
    assert human.returncode == 1 and "t:phantom" in human.stdout


async def test_the_worker_exports_what_two_audits_in_a_row_saw(redis: Redis, redis_server: Any) -> None:
    def gauge(check: str) -> float:
        return REGISTRY.get_sample_value("captcha_solver_audit_violations", {"check": check}) or 0.0

    async with SimulatorServer(SimConfig(speed=50, seed=1)) as sim:
        cfg = WorkerConfig.from_env({"REDIS_URL": redis_server.url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url,
                                     "CAPTCHAAI_THREADS": "2", "WORKER_CONCURRENCY": "1", "API_TIME_SCALE": "50",
                                     "LEASE_SECONDS": "6"})  # reaps every ~3 s
        async with running_worker(cfg):
            q = RedisQueue(redis, "captcha")
            # a finished task's tombstone and a unit of it (made by hand: the worker's claimer must not see it)
            await redis.hset(q.keys.task("phantom"), "state", "done")
            await redis.zadd(q.keys.budget, {unit_of("phantom"): float((await redis.time())[0]) + 60})
            for _ in range(300):  # two audits in a row, at most ~9 s
                if gauge("unit_of_finished_task") == 1:
                    break
                await asyncio.sleep(0.1)
            assert gauge("unit_of_finished_task") == 1 and gauge("item_without_lease") == 0
            await redis.zrem(q.keys.budget, unit_of("phantom"))
            for _ in range(300):  # two audits in a row, at most ~9 s
                if gauge("unit_of_finished_task") == 0:
                    break
                await asyncio.sleep(0.1)
            assert gauge("unit_of_finished_task") == 0


def test_guarantees_and_metrics_docs_name_every_check() -> None:
    guarantees = (ROOT / "docs" / "guarantees.md").read_text()
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text()
    for check in AuditCheck:
        assert f"`{check.value}`" in guarantees, f"docs/guarantees.md does not say what {check} checks"
        assert f"`{check.value}`" in metrics_doc, f"docs/metrics.md does not list the label {check}"
    for path in ("tests/test_races.py", "tests/chaos/test_units.py"):
        assert path in guarantees and (ROOT / path).exists(), f"docs/guarantees.md cites {path}"
