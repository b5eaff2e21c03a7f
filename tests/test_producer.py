"""Producer API against real processes: redis-server, `captcha-worker simulator`, two `captcha-worker run`."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from captcha_worker.client import (
    CaptchaQueue,
    Failed,
    InvalidTask,
    QueueUnavailable,
    ResultExpired,
    Solved,
    SyncCaptchaQueue,
    TaskSpec,
    TimedOut,
    UnknownTask,
)

TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}
RECAPTCHA = {"googlekey": "6LeAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "pageurl": "https://example.com"}


@pytest.fixture
async def q(stack: Any) -> AsyncIterator[CaptchaQueue]:
    async with CaptchaQueue.from_url(stack.redis_url) as queue:
        yield queue


async def test_submit_then_result_is_typed_with_timings(q: CaptchaQueue) -> None:
    task_id = await q.submit("turnstile", TURNSTILE)
    outcome = await q.result(task_id, timeout=30)
    assert isinstance(outcome, Solved) and outcome.id == task_id
    assert outcome.solution.startswith("0.") and outcome.kind == "turnstile" and outcome.attempts == 1
    assert outcome.queued_s is not None and outcome.solving_s is not None and outcome.total_s is not None
    assert 0 < outcome.solving_s <= outcome.total_s
    age = outcome.token_age()
    assert age is not None and 0 <= age < 5
    left = outcome.expires_in()
    assert left is not None and left < 300


async def test_solve_and_params_with_names_python_cannot_spell(q: CaptchaQueue) -> None:
    outcome = await q.solve("userrecaptcha", {**RECAPTCHA, "enterprise": "1", "data-s": "abc"}, timeout=60)
    assert isinstance(outcome, Solved) and outcome.user_agent


async def test_as_completed_streams_in_completion_order(q: CaptchaQueue) -> None:
    slow = await q.submit("userrecaptcha", RECAPTCHA)  # ~3 s at speed 20
    fast = await q.submit("turnstile", TURNSTILE)  # ~0.6 s
    order = [o.id async for o in q.as_completed([slow, fast], timeout=60)]
    assert order == [fast, slow]


async def test_many_concurrent_waiters_share_one_connection(q: CaptchaQueue, stack: Any) -> None:
    ids = await q.submit_many([TaskSpec("turnstile", TURNSTILE) for _ in range(300)])
    waiters = [asyncio.ensure_future(q.result(i, timeout=120)) for i in ids]
    await asyncio.sleep(0.5)
    admin = Redis.from_url(stack.redis_url, decode_responses=True)
    clients = await admin.client_list()
    await admin.aclose()
    mine = [c for c in clients if c.get("name") == f"captcha-producer-{q.producer_id}"]
    outcomes = await asyncio.gather(*waiters)
    assert all(isinstance(o, Solved) for o in outcomes)
    assert len({o.id for o in outcomes}) == 300
    assert 1 <= len(mine) <= 2, f"300 waiters must not need 300 connections: {len(mine)}"


async def test_a_result_is_readable_after_its_notification_expired(q: CaptchaQueue, stack: Any) -> None:
    task_id = await q.submit("turnstile", TURNSTILE)
    assert isinstance(await q.result(task_id, timeout=30), Solved)
    admin = Redis.from_url(stack.redis_url, decode_responses=True)
    await admin.delete(q.keys.reply(q.producer_id))
    await admin.aclose()
    async with CaptchaQueue.from_url(stack.redis_url) as other:  # a restarted producer process
        again = await other.result(task_id, timeout=1)
    assert isinstance(again, Solved) and again.id == task_id


async def test_waiting_longer_than_allowed_is_timed_out(q: CaptchaQueue) -> None:
    # the wait ends on its own timeout: it returns before a wait given five times as long (an order, not a bare
    # wall-clock limit: both timers run on this loop, however loaded the machine is)
    short = asyncio.ensure_future(q.result("no-such-task", timeout=0.3))
    longer = asyncio.ensure_future(q.result("no-such-task-either", timeout=1.5))
    done, _ = await asyncio.wait({short, longer}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {short}, "a 0.3 s wait outlived a 1.5 s one"
    unknown = short.result()
    assert isinstance(unknown, UnknownTask) and unknown.waited_s >= 0.3, "still no record of it after the wait"
    assert isinstance(await longer, UnknownTask)
    slow = await q.submit("cloudflare_challenge", {"pageurl": "https://e.com", "proxy": "u:p@10.0.0.1:3128",
                                                    "proxytype": "HTTP"})  # ~4.5 s at speed 20
    outcome = await q.result(slow, timeout=0.5)
    assert isinstance(outcome, TimedOut) and outcome.waited_s >= 0.5
    assert isinstance(await q.result(slow, timeout=60), Solved), "timing out a wait does not cancel the task"


async def test_deadline_and_priority_reach_the_queue(stack: Any) -> None:
    """On a queue no worker serves: the deadline is stored absolute, priority tasks go to the head.
    (That an expired task is answered without an API call is tests/test_worker.py's job.)"""
    async with CaptchaQueue.from_url(stack.redis_url, queue="idle") as q:
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        first = await q.submit("turnstile", TURNSTILE, deadline=at)
        second = await q.submit("turnstile", TURNSTILE, deadline=60)
        urgent = await q.submit("turnstile", TURNSTILE, priority=True)
        assert await q.redis.lrange(q.keys.pending, 0, -1) == [urgent, first, second]
        bodies = [json.loads(await q.redis.hget(q.keys.task(i), "body")) for i in (first, second, urgent)]
        assert bodies[0]["deadline"] == pytest.approx(at.timestamp())
        assert bodies[1]["deadline"] == pytest.approx(time.time() + 60, abs=5)
        assert "deadline" not in bodies[2]
        with pytest.raises(ValueError, match="timezone-aware"):
            await q.submit("turnstile", TURNSTILE, deadline=dt.datetime.now())
        with pytest.raises(ValueError, match="positive number of seconds"):
            await q.submit("turnstile", TURNSTILE, deadline=-1)
        assert await q.redis.llen(q.keys.pending) == 3, "rejected submissions queue nothing"


async def test_bad_arguments_fail_fast_with_the_workers_reason(q: CaptchaQueue) -> None:
    with pytest.raises(InvalidTask, match="unknown method 'recaptcha'") as info:
        await q.submit("recaptcha", TURNSTILE)
    assert info.value.code == "UNKNOWN_METHOD"
    with pytest.raises(InvalidTask, match="missing required param 'pageurl'"):
        await q.submit("turnstile", {"sitekey": "x"})
    with pytest.raises(InvalidTask, match="hCaptcha is not solved by CaptchaAI"):
        await q.submit("hcaptcha", {"sitekey": "x", "pageurl": "u"})
    with pytest.raises(InvalidTask, match="over the limit"):
        await q.submit("base64", {"body": "A" * 2_000_000})


async def test_unreachable_redis_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(QueueUnavailable) as info:
        async with CaptchaQueue.from_url("redis://:hunter2@127.0.0.1:1/0"):
            pass
    assert "127.0.0.1:1" in str(info.value) and "hunter2" not in str(info.value)


async def test_solve_retries_failures_with_backoff(q: CaptchaQueue, stack: Any) -> None:
    stack.sim_config(faults={"unsolvable": 1.0})
    try:
        outcome = await q.solve("turnstile", TURNSTILE, timeout=60, retries=1, backoff_s=0.05)
    finally:
        stack.sim_config(faults={"unsolvable": 0.0})
    assert isinstance(outcome, Failed) and outcome.code == "ERROR_CAPTCHA_UNSOLVABLE"
    assert isinstance(await q.solve("turnstile", TURNSTILE, timeout=60, retries=1, backoff_s=0.05), Solved)


def test_sync_wrapper(stack: Any) -> None:
    with SyncCaptchaQueue(stack.redis_url) as q:
        outcome = q.solve("turnstile", TURNSTILE, timeout=30)
        assert isinstance(outcome, Solved)
        ids = q.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(5)])
        single = q.submit("turnstile", TURNSTILE)
        assert isinstance(q.result(single, timeout=30), Solved)
        assert sorted(o.id for o in q.results(ids, timeout=30)) == sorted(ids)


async def test_an_expired_result_is_said_at_once_and_is_not_an_unknown_id(q: CaptchaQueue, stack: Any) -> None:
    task_id = await q.submit("turnstile", TURNSTILE)
    assert isinstance(await q.result(task_id, timeout=30), Solved)
    admin = Redis.from_url(stack.redis_url, decode_responses=True)
    await admin.delete(q.keys.result(task_id))  # RESULT_TTL_SECONDS passed
    await admin.aclose()
    started = time.monotonic()
    assert await q.result(task_id, timeout=30) == ResultExpired(task_id)
    # waiting would take the whole timeout; half of it is a margin no scheduler stall comes near
    assert time.monotonic() - started < 30 / 2, "no waiting for a result that is gone"


async def test_submitting_a_known_id_again_is_a_no_op(q: CaptchaQueue, stack: Any) -> None:
    async with CaptchaQueue.from_url(stack.redis_url, queue="idempotent") as idle:  # no worker serves it
        assert await idle.submit("turnstile", TURNSTILE, id="order-42") == "order-42"
        assert await idle.submit("turnstile", TURNSTILE, id="order-42") == "order-42"
        ids = await idle.submit_many([{"method": "turnstile", "params": TURNSTILE, "id": "order-42"},
                                      {"method": "turnstile", "params": TURNSTILE, "id": "order-43"}])
        assert ids == ["order-42", "order-43"]
        assert await idle.redis.lrange(idle.keys.pending, 0, -1) == ["order-42", "order-43"]
    first = await q.submit("turnstile", TURNSTILE, id="solve-once-1")
    assert isinstance(await q.result(first, timeout=30), Solved)
    assert await q.submit("turnstile", TURNSTILE, id="solve-once-1") == first
    again = await q.result(first, timeout=5)
    assert isinstance(again, Solved) and again.attempts == 1, "the known task's result, not a second solve"


async def test_from_env_reads_the_workers_variables(stack: Any) -> None:
    async with CaptchaQueue.from_env({"REDIS_URL": stack.redis_url, "QUEUE_NAME": "envq", "TASK_TTL_SECONDS": "120",
                                      "MAX_TASK_BYTES": "2048"}) as q:
        assert (q.keys.queue, q.task_ttl, q.max_task_bytes) == ("envq", 120, 2048)
        with pytest.raises(InvalidTask, match="over the limit of 2048"):
            await q.submit("base64", {"body": "A" * 3000})
        clients = await q.redis.client_list()
        assert any(c.get("name") == f"captcha-producer-{q.producer_id}" for c in clients)


async def test_redis_refusing_writes_is_a_typed_error(stack: Any) -> None:
    async with CaptchaQueue.from_url(stack.redis_url, queue="oom", submit_retry_s=0.5) as q:
        await q.redis.config_set("maxmemory-policy", "noeviction")
        await q.redis.config_set("maxmemory", "1")
        try:
            with pytest.raises(QueueUnavailable) as info:
                await q.submit("turnstile", TURNSTILE, id="oom-1")
        finally:
            await q.redis.config_set("maxmemory", "0")
        assert info.value.refusal.value == "oom" and info.value.task_ids == ["oom-1"]
        assert "out of memory" in str(info.value)
        assert await q.submit("turnstile", TURNSTILE, id="oom-1") == "oom-1", "retrying the same id is safe"
