"""The races behind once-flaky tests, each forced deterministically (issue 23): a wrapped await holds one side
until the other has landed, against a real redis-server, the real simulator and an in-process worker.

1. Phantom budget units: a job ACKed between its heartbeat's snapshot and the renewal must not get its unit back.
2. False ``lease_lost``: the same interleaving must not report the lease of a job that just finished as lost.
3. Fencing: a worker that lost its task to another one (it stalled past its lease) never touches the new
   owner's item, lease or unit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from captcha_worker.budget import unit_of
from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.config import WorkerConfig
from captcha_worker.queue import RedisQueue
from captcha_worker.simulator import SimConfig, SimulatorServer
from captcha_worker.task import Result, Status
from captcha_worker.worker import Worker, open_worker
from tests.helpers import KEY

SPEED = 50.0
TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}


@asynccontextmanager
async def running_worker(redis_url: str, **env: str) -> AsyncIterator[Worker]:
    async with SimulatorServer(SimConfig(speed=SPEED, seed=1)) as sim:
        base = {"REDIS_URL": redis_url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url, "CAPTCHAAI_THREADS": "4",
                "WORKER_CONCURRENCY": "2", "API_TIME_SCALE": str(SPEED), "LEASE_SECONDS": "3",
                "DRAIN_GRACE_SECONDS": "5"}
        async with open_worker(WorkerConfig.from_env({**base, **env})) as w:
            stop = asyncio.Event()
            task = asyncio.create_task(w.run(stop))
            try:
                yield w
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)


def leases_lost() -> float:
    return REGISTRY.get_sample_value("captcha_solver_leases_lost_total") or 0.0


@dataclass
class AfterRace:
    task_id: str
    unit_score: float | None  # the task's budget unit once the heartbeat's renewal went through
    lease_lost_logged: int
    leases_lost_counted: float


async def ack_between_snapshot_and_renewal(w: Worker, redis: Redis, producer: CaptchaQueue,
                                           caplog: pytest.LogCaptureFixture) -> AfterRace:
    """Hold a job's solve until the heartbeat renews it; then, inside the heartbeat's renewal call, before it
    reaches Redis, let the job solve and ACK (its outcome lands). Read the budget once that heartbeat is done."""
    gate, heartbeat_done = asyncio.Event(), asyncio.Event()
    real_solve, real_renew = w.api.solve, w.queue.renew

    async def gated_solve(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await real_solve(*args, **kwargs)

    async def renew_after_the_ack(items: Any, *args: Any, **kwargs: Any) -> Any:
        if items and not gate.is_set():  # the heartbeat's snapshot holds the running job
            jobs = list(w._jobs)
            gate.set()
            await asyncio.wait(jobs)  # solved, ACKed (unit released, lease removed), done
        elif gate.is_set():
            heartbeat_done.set()  # the next heartbeat: the one that raced has finished every step
        return await real_renew(items, *args, **kwargs)

    setattr(w.api, "solve", gated_solve)
    setattr(w.queue, "renew", renew_after_the_ack)
    counted = leases_lost()
    caplog.set_level(logging.WARNING, logger="captcha_worker.worker")
    task_id = await producer.submit("turnstile", TURNSTILE)
    await asyncio.wait_for(heartbeat_done.wait(), 30)
    assert isinstance(await producer.result(task_id, timeout=5), Solved)
    score = await redis.zscore(w.queue.keys.budget, unit_of(task_id))
    logged = [r for r in caplog.records if r.getMessage() == "lease_lost"]
    return AfterRace(task_id, score, len(logged), leases_lost() - counted)


@pytest.fixture
async def producer(redis: Redis, redis_server: Any) -> AsyncIterator[CaptchaQueue]:
    async with CaptchaQueue.from_url(redis_server.url) as q:
        yield q


async def test_a_job_acked_during_its_heartbeat_does_not_get_its_budget_unit_back(
        redis: Redis, redis_server: Any, producer: CaptchaQueue, caplog: pytest.LogCaptureFixture) -> None:
    async with running_worker(redis_server.url) as w:
        race = await ack_between_snapshot_and_renewal(w, redis, producer, caplog)
        in_use = await redis.zcard(w.queue.keys.budget)
    assert race.unit_score is None, "the heartbeat re-created the unit of a task delivered before its renewal"
    assert in_use == 0, "a unit outlived its solve"


async def test_a_job_acked_during_its_heartbeat_is_not_reported_as_a_lost_lease(
        redis: Redis, redis_server: Any, producer: CaptchaQueue, caplog: pytest.LogCaptureFixture) -> None:
    async with running_worker(redis_server.url) as w:
        race = await ack_between_snapshot_and_renewal(w, redis, producer, caplog)
    assert race.lease_lost_logged == 0 and race.leases_lost_counted == 0, \
        "lease_lost for a task this worker had just delivered"


async def test_a_heartbeat_never_renews_a_lease_another_worker_took(
        redis: Redis, redis_server: Any, producer: CaptchaQueue, caplog: pytest.LogCaptureFixture) -> None:
    """A worker that stalled past its lease: the reaper requeued its task and another worker claimed it. Its
    heartbeat reports the lease lost, once, and leaves the new owner's lease and unit alone."""
    caplog.set_level(logging.WARNING, logger="captcha_worker.worker")
    async with running_worker(redis_server.url) as w:
        gate, renewed_after = asyncio.Event(), asyncio.Event()
        real_solve, real_renew = w.api.solve, w.queue.renew
        after_takeover = 0
        keys = w.queue.keys

        async def gated_solve(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await real_solve(*args, **kwargs)

        async def renew(items: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal after_takeover
            if items and after_takeover == 0:  # the task is taken over before this renewal reaches Redis
                # what a reap and another worker's claim leave (one step here: this worker's own claimer would
                # take the requeued task back first): that worker owns the task, leases it and holds its unit
                far = float((await redis.time())[0]) + 600
                await redis.hset(keys.task(task_id), "owner", "other-worker")
                await redis.zadd(keys.leases, {task_id: far})
                await redis.zadd(keys.budget, {unit_of(task_id): far})
                after_takeover = 1
            elif after_takeover:
                after_takeover += 1
            result = await real_renew(items, *args, **kwargs)
            if after_takeover >= 3:  # two more heartbeats after the one that found the lease gone
                renewed_after.set()
            return result

        setattr(w.api, "solve", gated_solve)
        setattr(w.queue, "renew", renew)
        counted = leases_lost()
        task_id = await producer.submit("turnstile", TURNSTILE)
        await asyncio.wait_for(renewed_after.wait(), 30)
        lease = await redis.zscore(keys.leases, task_id)
        unit = await redis.zscore(keys.budget, unit_of(task_id))
        now = float((await redis.time())[0])
        gate.set()
    assert lease is not None and lease > now + 500, "the other worker's lease was renewed (or removed) by the first"
    assert unit is not None and unit > now + 500, "the other worker's unit was shortened"
    assert [r.getMessage() for r in caplog.records].count("lease_lost") == 1, "reported once, not per heartbeat"
    assert leases_lost() - counted == 1


async def test_a_worker_that_lost_its_task_leaves_the_new_owners_item_alone(redis: Redis) -> None:
    """Fencing: ACK, BURY and RELEASE of a worker whose task another worker owns now. Its ACK only delivers its
    result (first writer wins); the item, its lease and its unit stay the new owner's."""
    q = RedisQueue(redis, "race")
    await q.push([("a", '{"id":"a","method":"turnstile","params":{}}')], ttl=100)
    (mine,) = await q.claim(1, lease_s=0.05, worker="stalled")
    await redis.zadd(q.keys.leases, {"a": 0})
    assert await q.reap(orphan_grace_s=60) == (1, 0)
    (theirs,) = await q.claim(1, lease_s=600, worker="new-owner")
    assert theirs.unit == mine.unit == unit_of("a")

    async def untouched() -> None:
        assert await redis.lrange(q.keys.processing, 0, -1) == ["a"]
        assert await redis.zscore(q.keys.leases, "a") is not None
        assert await redis.zscore(q.keys.budget, unit_of("a")) is not None
        assert await redis.hget(q.keys.task("a"), "owner") == "new-owner"

    assert await q.release("a", failure=True, front=True, worker="stalled", unit=mine.unit) is False
    assert await redis.llen(q.keys.pending) == 0, "the stalled worker's release queued the task a second time"
    await untouched()
    assert await q.bury("a", "{}", result=None, reply_to=None, dead_max=10, result_ttl=60, reply_ttl=60,
                        worker="stalled", unit=mine.unit) == (False, False)
    await untouched()
    assert await q.ack("a", Result("a", Status.SOLVED, solution="tok"), result_ttl=60, worker="stalled",
                       unit=mine.unit) is True, "its result is delivered: the first writer wins"
    await untouched()
    assert await q.ack("a", Result("a", Status.SOLVED, solution="tok2"), result_ttl=60, worker="new-owner",
                       unit=theirs.unit) is False
    assert await redis.llen(q.keys.processing) == 0 and await redis.zcard(q.keys.budget) == 0
