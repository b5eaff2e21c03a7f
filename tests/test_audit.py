"""`captcha-worker audit` and AUDIT (issue 23): each check finds what breaks its promise of docs/guarantees.md in a
real redis-server, names the member, passes what the product leaves on purpose (a unit held while its solve may
still run at the API, a requeued task's unit), and the CLI exits 1 on any violation."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
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


async def test_one_worker_at_a_time_takes_the_audit_turn_and_the_next_turn_confirms(redis: Redis) -> None:
    a, b = RedisQueue(redis, "audit"), RedisQueue(redis, "audit")
    assert await a.audit_turn("w1", period_s=60) == (True, None)
    assert await b.audit_turn("w2", period_s=60) == (False, None), "the turn is w1's for the period"
    assert await a.audit_turn("w1", period_s=60) == (False, None), "even w1's next look waits for the period"
    assert 0 < await redis.pttl(a.keys.audit_turn) <= 60_000
    phantom = Violation(AuditCheck.UNIT_OF_FINISHED_TASK, unit_of("phantom"))
    raw = Violation(AuditCheck.ITEM_WITHOUT_LEASE, b"\xff raw with a secret: proxy=u:p@h")
    assert await a.publish_audit([phantom, raw], None, worker="w1", ttl_s=90) == [], "one snapshot confirms nothing"
    await redis.delete(a.keys.audit_turn)  # the period is over
    took, record = await b.audit_turn("w2", period_s=60)
    assert took and record is not None and record.by == "w1" and set(record.counts.values()) == {0}
    assert await b.publish_audit([phantom], record, worker="w2", ttl_s=90) == [phantom], "seen twice: confirmed"
    _, record = await a.audit_turn("w1", period_s=60)
    assert record is not None and record.by == "w2" and record.counts[AuditCheck.UNIT_OF_FINISHED_TASK] == 1
    assert sum(record.counts.values()) == 1, "the raw item was seen once only"
    assert 0 < await redis.pttl(a.keys.audit) <= 90_000
    assert b"secret" not in b"".join(await redis.execute_command("HVALS", a.keys.audit, NEVER_DECODE=True)), \
        "a record keeps digests of the members, never a raw item's bytes"


async def test_n_workers_audit_once_per_period_and_all_export_the_confirmed_counts(
        redis: Redis, redis_server: Any) -> None:
    """The audit's cost is one AUDIT per AUDIT_SECONDS across the queue's workers (it was one per reap period in
    every worker), and the counts every worker exports are the queue's (two turns in a row saw the violation)."""
    def gauge(check: str) -> float:
        return REGISTRY.get_sample_value("captcha_solver_audit_violations", {"check": check}) or 0.0

    audit_s, lease_s, n = 2.0, 6.0, 4  # reaps (and looks at the turn) every 2.25-3.75 s in each worker
    audits: list[tuple[int, float]] = []
    q = RedisQueue(redis, "captcha")

    async def until(check: str, value: float) -> None:
        # confirmed by the second turn after the change: at most 2 periods plus a reap period per turn, twice over
        deadline = time.monotonic() + 2 * 2 * (audit_s + lease_s / 2 * 1.25)
        while gauge(check) != value:
            assert time.monotonic() < deadline, f"{check} not {value} within two turns"
            await asyncio.sleep(0.05)

    async with SimulatorServer(SimConfig(speed=50, seed=1)) as sim, AsyncExitStack() as stack:
        env = {"REDIS_URL": redis_server.url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url,
               "CAPTCHAAI_THREADS": "2", "WORKER_CONCURRENCY": "1", "API_TIME_SCALE": "50",
               "LEASE_SECONDS": str(lease_s), "AUDIT_SECONDS": str(audit_s)}
        for _ in range(n):
            w = await stack.enter_async_context(running_worker(WorkerConfig.from_env(env)))
            w.queue.audit = _counting(w.queue.audit, audits)  # type: ignore[method-assign,assignment]
        started = time.monotonic()
        # a finished task's tombstone and a unit of it (made by hand: the workers' claimers must not see it)
        await redis.hset(q.keys.task("phantom"), "state", "done")
        await redis.zadd(q.keys.budget, {unit_of("phantom"): float((await redis.time())[0]) + 600})
        await until("unit_of_finished_task", 1)
        assert gauge("item_without_lease") == 0
        await redis.zrem(q.keys.budget, unit_of("phantom"))
        await until("unit_of_finished_task", 0)
        elapsed = time.monotonic() - started
    print(f"audits: {len(audits)} in {elapsed:.1f} s by {len({by for by, _ in audits})} of {n} workers")
    assert len(audits) <= elapsed / audit_s + 1, \
        f"{len(audits)} audits in {elapsed:.1f} s by {n} workers: more than one per {audit_s} s period"
    assert len(audits) >= 3, "a violation is confirmed by a second turn, and cleared by another"


def _counting(audit: Callable[..., Awaitable[list[Violation]]], calls: list[tuple[int, float]]
              ) -> Callable[..., Awaitable[list[Violation]]]:
    async def counted(*args: Any, **kwargs: Any) -> list[Violation]:
        calls.append((id(audit), time.monotonic()))
        return await audit(*args, **kwargs)
    return counted


def test_guarantees_and_metrics_docs_name_every_check() -> None:
    guarantees = (ROOT / "docs" / "guarantees.md").read_text()
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text()
    for check in AuditCheck:
        assert f"`{check.value}`" in guarantees, f"docs/guarantees.md does not say what {check} checks"
        assert f"`{check.value}`" in metrics_doc, f"docs/metrics.md does not list the label {check}"
    for path in ("tests/test_races.py", "tests/chaos/test_units.py"):
        assert path in guarantees and (ROOT / path).exists(), f"docs/guarantees.md cites {path}"
