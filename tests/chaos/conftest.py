"""The chaos suite's plumbing: every test here runs real processes only (its own redis-server, `captcha-worker
simulator`, `captcha-worker run` workers) and records one row of docs/reliability.md.

A row is printed (run with ``-s`` to see it) and, when ``CHAOS_REPORT`` names a file, appended to it as a JSON
line: ``CHAOS_REPORT=/tmp/rows.jsonl .venv/bin/pytest tests/chaos -s``. Figures are recorded, never asserted as
timings; what is asserted is the outcome of every item (solved once, or dead-lettered with a reason, nothing lost).

Every scenario ends with an audit of 0 violations (docs/guarantees.md, issue 23): the ``audited`` fixture runs
``AUDIT`` on every queue of a scenario's own redis-server (``rs``) once the test is over (restarting the server
if the scenario left it down: a scenario ends with a live Redis), and the scenarios on other topologies call
``assert_audit_clean`` themselves. A violation is a bug report, not noise.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from captcha_worker.queue import Keys, RedisQueue, Violation, confirmed, item_ref
from captcha_worker.task import Result
from tests import helpers
from tests.procs import RedisServer

KEYS = Keys("captcha")
SPEED = "20"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.slow)


@dataclass
class Row:
    """One scenario's figures (a row of docs/reliability.md)."""

    scenario: str
    submitted: int
    solved: int
    dead_lettered: int
    lost: int
    delivered_twice: int
    peak_in_flight: int
    budget: int
    notes: dict[str, Any] = field(default_factory=dict)

    def record(self) -> None:
        line = json.dumps(asdict(self))
        print(f"\nchaos row: {line}")
        path = os.environ.get("CHAOS_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")


def worker_env(redis_url: str, sim_url: str, **extra: str) -> dict[str, str]:
    """The harness's worker environment with the chaos suite's settings: 3 s leases (workers are killed here, and
    their tasks must come back soon), the simulator's time at SPEED, room for every dead letter."""
    return helpers.worker_env(redis_url, sim_url, **{"API_TIME_SCALE": SPEED, "LEASE_SECONDS": "3",
                                                    "DEAD_LETTER_MAX": "100000", **extra})


@pytest.fixture
def rs(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone (AOF, fsync always), so it may be stopped, killed, starved."""
    d = tmp_path / "redis"
    d.mkdir()
    server = RedisServer(dir=str(d))
    server.start()
    try:
        yield server
    finally:
        server.stop()


#: how far apart the two snapshots of an end-of-scenario audit are (as `captcha-worker audit --confirm-seconds`)
AUDIT_CONFIRM_S = 1.0


async def audit_violations(q: RedisQueue) -> list[Violation]:
    """What two audits AUDIT_CONFIRM_S apart both show (a step in progress shows in one snapshot only)."""
    first = await q.audit()
    if not first:
        return []
    await asyncio.sleep(AUDIT_CONFIRM_S)
    return confirmed(first, await q.audit())


async def assert_audit_clean(q: RedisQueue) -> None:
    found = await audit_violations(q)
    assert not found, f"queue {q.keys.queue}: the audit found {len(found)} violations at the end of the " \
                      f"scenario: {[(v.check.value, item_ref(v.member)) for v in found[:20]]}"


async def _audit_every_queue(url: str) -> None:
    client = Redis.from_url(url)
    try:
        tags = {k[1:k.index(b"}")].decode() async for k in client.scan_iter(match="{*}:*", count=1000)}
        for tag in sorted(tags):
            await assert_audit_clean(RedisQueue(client, tag))
    finally:
        await client.aclose()


@pytest.fixture(autouse=True)
def audited(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a scenario on its own redis-server (``rs``): every queue in it audits clean. Taken before ``rs``, so
    it runs while that server is still up (restarted here if the scenario left it down)."""
    server: RedisServer | None = request.getfixturevalue("rs") if "rs" in request.fixturenames else None
    yield
    if server is None or getattr(request.node, "rep_call_failed", True):
        return  # the scenario failed already: its own assertion is the report
    if not server.alive():
        server.start()
    asyncio.run(_audit_every_queue(server.url))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Marks whether the test's own call failed (the ``audited`` fixture audits only scenarios that passed)."""
    report = yield
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]
    return report


@pytest.fixture
async def admin(rs: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(rs.url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def replies(admin: Redis, reply_to: str) -> collections.Counter[str]:
    """Result notifications per task id pushed to a producer's reply list (more than one = delivered twice)."""
    raw = await admin.lrange(KEYS.reply(reply_to), 0, -1)
    return collections.Counter(Result.from_json(r).id for r in raw)


def crashes(procs: list[Any]) -> int:
    return sum(len(p.events("loop_crashed")) + len(p.events("job_crashed")) for p in procs)
