"""Tenant shares in the claim (shares.py): caps, overbooking, reservations, no head-of-line blocking, fair picks,
the blocking path, resumes, and the gateway's share table; on fakeredis and on the real redis-server."""

from __future__ import annotations

import json

import pytest
from redis.asyncio import Redis

from captcha_worker.queue import Record, RecordOutcome, RedisQueue, TenantLoad, TenantShare
from captcha_worker.shares import SORT_MAX
from captcha_worker.task import Result, Status


def gw(tenant: str, n: int) -> str:
    return f"gw:{tenant}:{n}"


def body(task_id: str) -> str:
    return json.dumps({"id": task_id, "method": "turnstile", "params": {"sitekey": "k", "pageurl": "https://x"}})


@pytest.fixture
def q(any_redis: Redis) -> RedisQueue:
    return RedisQueue(any_redis, "sq")


async def push(q: RedisQueue, ids: list[str]) -> None:
    await q.push([(i, body(i)) for i in ids], ttl=300)


async def claim(q: RedisQueue, n: int, limit: int) -> tuple[list[str], bool, bool]:
    reply = await q.claim_reply(n, lease_s=30, worker="w", limit=limit)
    return [c.item for c in reply.items], reply.budget_full, reply.capped


def tenants(items: list[str]) -> list[str]:
    return [i.split(":")[1] if i.startswith("gw:") else "-" for i in items]


async def test_a_tenant_never_exceeds_its_threads_and_waits_in_its_own_list(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("a", 2), TenantShare("b", 2)])
    await push(q, [gw("a", i) for i in range(5)] + [gw("b", i) for i in range(2)])
    items, full, capped = await claim(q, 10, limit=10)
    assert sorted(tenants(items)) == ["a", "a", "b", "b"] and capped and not full
    assert await any_redis.lrange(q.keys.waiting("a"), 0, -1) == [gw("a", i) for i in range(2, 5)]
    assert await any_redis.llen(q.keys.pending) == 0
    assert await claim(q, 10, limit=10) == ([], False, True), "a stays at 2 while its two solves run"
    await q.ack(gw("a", 0), Result(gw("a", 0), Status.SOLVED), unit="t:" + gw("a", 0), worker="w", result_ttl=60)
    assert (await claim(q, 10, limit=10))[0] == [gw("a", 2)], "one ended, one more starts: FIFO within a tenant"
    loads = await q.publish_shares([TenantShare("a", 2), TenantShare("b", 2)])
    assert loads == {"a": TenantLoad(2, 2), "b": TenantLoad(2, 0)}


async def test_a_capped_tenants_flood_does_not_block_the_task_behind_it(q: RedisQueue) -> None:
    await q.publish_shares([TenantShare("a", 1), TenantShare("b", 5)])
    await push(q, [gw("a", i) for i in range(200)] + [gw("b", 0)])
    items, _, _ = await claim(q, 5, limit=20)
    assert items == [gw("a", 0), gw("b", 0)], "no head-of-line blocking"


async def test_overbooked_shares_are_picked_fairly_and_the_plan_holds(q: RedisQueue) -> None:
    """Caps add up to 8 on a 4-thread plan: a flood of a's does not take the plan from b; the plan budget stops
    the claim (budget_full), not the caps."""
    await q.publish_shares([TenantShare("a", 4), TenantShare("b", 4)])
    await push(q, [gw("a", i) for i in range(50)] + [gw("b", i) for i in range(2)])
    items, full, capped = await claim(q, 8, limit=4)
    assert sorted(tenants(items)) == ["a", "a", "b", "b"] and full and not capped
    await push(q, [gw("b", 9)])
    assert await claim(q, 8, limit=4) == ([], True, False)


async def test_a_busy_tenant_uses_what_idle_tenants_leave(q: RedisQueue) -> None:
    await q.publish_shares([TenantShare("a", 6), TenantShare("b", 6)])
    await push(q, [gw("a", i) for i in range(10)])
    items, full, _ = await claim(q, 10, limit=8)
    assert tenants(items) == ["a"] * 6 and not full, "a's cap, not b's idle share, is what bounds a"


async def test_a_reservation_is_kept_for_its_tenant_while_it_has_work(q: RedisQueue) -> None:
    await q.publish_shares([TenantShare("a", 4), TenantShare("b", 4, reserved=2)])
    await push(q, [gw("b", 0)])
    assert (await claim(q, 1, limit=4))[0] == [gw("b", 0)]
    await push(q, [gw("a", i) for i in range(10)])
    items, _, capped = await claim(q, 10, limit=4)
    assert items == [gw("a", 0), gw("a", 1)] and capped, "b in flight with 1 of its 2 reserved: 1 thread kept"
    await push(q, [gw("b", 1)])
    assert (await claim(q, 10, limit=4))[0] == [gw("b", 1)], "b takes its reserved thread at once"


async def test_an_idle_tenant_holds_no_reservation(q: RedisQueue) -> None:
    await q.publish_shares([TenantShare("a", 4), TenantShare("b", 4, reserved=2)])
    await push(q, [gw("a", i) for i in range(10)])
    items, _, _ = await claim(q, 10, limit=4)
    assert len(items) == 4, "b has nothing in flight nor waiting: a may use the whole plan"


async def test_untenanted_tasks_compete_as_one_more_tenant(q: RedisQueue) -> None:
    await q.publish_shares([TenantShare("a", 10)])
    await push(q, [gw("a", i) for i in range(10)] + ["plain-1", "plain-2", "gw:unknown:1"])
    items, _, _ = await claim(q, 4, limit=4)
    assert items == ["plain-1", gw("a", 0), gw("a", 1), gw("a", 2)], (
        "by share used: untenanted 1 of the plan's 4 (0.25) vs a 3 of its 10 (0.3)")
    assert (await claim(q, 10, limit=5))[0] == ["plain-2"], "then FIFO among the untenanted: a is at 3/10 > 1/5"


async def test_a_resumed_solve_is_taken_at_once_and_counts_against_its_tenant(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("a", 1), TenantShare("b", 1)])
    await push(q, [gw("a", 0)])
    assert (await claim(q, 1, limit=2))[0] == [gw("a", 0)]
    unit = "t:" + gw("a", 0)
    assert await q.record(Record(gw("a", 0), "w", unit, "9001", 60)) is RecordOutcome.RECORDED
    await q.release(gw("a", 0), failure=False, front=True, worker="w", unit=unit, hold_s=55, captcha_id="9001")
    await push(q, [gw("a", 1)])
    items, _, _ = await claim(q, 2, limit=2)
    assert items == [gw("a", 0)], "the resume needs no new unit; a's next task waits: a is at 1"
    assert await any_redis.lrange(q.keys.waiting("a"), 0, -1) == [gw("a", 1)]


async def test_the_blocking_path_sorts_a_tenants_task_for_the_claim(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("a", 1)])
    await push(q, [gw("a", 0)])
    reply = await q.claim_blocking(timeout_s=1, lease_s=30, worker="w", limit=4)
    assert reply is not None and reply.items == [] and reply.pending == 1
    assert await any_redis.lrange(q.keys.waiting("a"), 0, -1) == [gw("a", 0)]
    assert (await claim(q, 1, limit=4))[0] == [gw("a", 0)]


async def test_the_blocking_path_respects_reservations(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("b", 2, reserved=2)])
    await push(q, [gw("b", 0)])
    assert (await claim(q, 1, limit=2))[0] == [gw("b", 0)]
    await push(q, ["plain"])
    reply = await q.claim_blocking(timeout_s=1, lease_s=30, worker="w", limit=2)
    assert reply is not None and reply.items == [] and reply.capped, "the last thread is b's"
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["plain"]


async def test_a_flood_is_sorted_a_bounded_number_per_call(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("a", 1), TenantShare("b", 1)])
    await push(q, [gw("a", i) for i in range(SORT_MAX + 10)] + [gw("b", 0)])
    items, _, _ = await claim(q, 5, limit=5)
    assert items == [gw("a", 0)] and await any_redis.llen(q.keys.pending) == 11
    assert (await claim(q, 5, limit=5))[0] == [gw("b", 0)], "the next call reaches b"


async def test_dropping_a_tenant_puts_its_waiting_tasks_back_in_pending(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("a", 1), TenantShare("b", 1)])
    await push(q, [gw("a", i) for i in range(3)])
    await claim(q, 3, limit=5)
    assert await any_redis.llen(q.keys.waiting("a")) == 2
    assert await q.publish_shares([TenantShare("b", 3)]) == {"b": TenantLoad(0, 0)}
    assert await any_redis.lrange(q.keys.pending, 0, -1) == [gw("a", 1), gw("a", 2)]
    assert await any_redis.hgetall(q.keys.tenants) == {"b": "3 0"}
    items, _, _ = await claim(q, 3, limit=5)
    assert items == [gw("a", 1), gw("a", 2)], "no longer in the table: served as untenanted"


async def test_without_a_share_table_the_claim_is_fifo(q: RedisQueue) -> None:
    await push(q, [gw("a", i) for i in range(3)] + ["plain"])
    assert await claim(q, 10, limit=10) == ([gw("a", 0), gw("a", 1), gw("a", 2), "plain"], False, False)


@pytest.mark.parametrize("table", [[], [TenantShare("a", 1)]])
async def test_an_empty_queue_is_neither_full_nor_capped(q: RedisQueue, table: list[TenantShare]) -> None:
    """Nothing waits: the worker blocks on pending (BLMOVE) instead of polling as if a tenant were capped."""
    if table:
        await q.publish_shares(table)
    assert await claim(q, 5, limit=5) == ([], False, False)
    reply = await q.claim_blocking(timeout_s=0.1, lease_s=30, worker="w", limit=5)
    assert reply is None


async def test_stats_count_the_waiting_lists_as_pending(q: RedisQueue) -> None:
    await q.publish_shares([TenantShare("a", 1)])
    await push(q, [gw("a", i) for i in range(4)] + ["plain"])
    await claim(q, 2, limit=5)
    stats = await q.stats()
    assert (stats.pending, stats.processing) == (3, 2), "a waits with 3 (none left in pending); a 1 and plain claimed"


async def test_a_reservation_never_waits_behind_the_untenanted_task_it_blocks(q: RedisQueue, any_redis: Redis) -> None:
    await q.publish_shares([TenantShare("b", 2, reserved=2)])
    await push(q, [gw("b", 0)])
    assert (await claim(q, 1, limit=2))[0] == [gw("b", 0)]
    await push(q, ["plain", gw("b", 1)])
    items, _, _ = await claim(q, 2, limit=2)
    assert items == [gw("b", 1)], "the last thread is b's: b's task behind the blocked one takes it"
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["plain"]
