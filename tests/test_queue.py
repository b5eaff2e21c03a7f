"""Transitions of every queue script, on fakeredis and on the real redis-server."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from captcha_worker.connection import NotReplicated
from captcha_worker.log import Redactor
from captcha_worker.queue import (
    SEED_RESULTS_HASH,
    Ack,
    ClaimFlag,
    Keys,
    Lookup,
    QueueStats,
    Record,
    RecordOutcome,
    RedisQueue,
    Verdict,
    dead_entry,
    is_raw_item,
)
from captcha_worker.task import Result, Status, payload_view
from captcha_worker.worker import default_worker_id
from tests.procs import RedisServer

#: lease s, prefixes, max bytes, dead cap, worker, its limit (none), the tenants' waiting lists
LEASE_ARGS: list[str | int] = [60, "{tq}:task:", "{tq}:result:", 1_048_576, 100, "w", -1, "{tq}:waiting:"]


def body(task_id: str, reply_to: str | None = None) -> str:
    data = {"id": task_id, "method": "turnstile", "params": {"sitekey": "k", "pageurl": "https://x"}}
    if reply_to:
        data["reply_to"] = reply_to
    return json.dumps(data)


@pytest.fixture
def q(any_redis: Redis) -> RedisQueue:
    return RedisQueue(any_redis, "tq")


def test_all_keys_share_the_hash_tag() -> None:
    k = Keys("captcha")
    names = [k.pending, k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits, k.workers, k.reports,
             k.task("x"), k.result("x"), k.reply("p"), k.callback("x"), k.tenants, k.waiting("team-a")]
    assert all(n.startswith("{captcha}:") for n in names)
    assert k.pending == "{captcha}:pending"  # the KEDA trigger's listName


async def test_push_keeps_fifo_and_priority_goes_first(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.push([("p", body("p"))], ttl=100, front=True)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["p", "a", "b"]
    assert await any_redis.hgetall(q.keys.task("a")) == {"body": body("a")}
    assert 0 < await any_redis.ttl(q.keys.task("a")) <= 100


async def test_claim_moves_to_processing_leases_and_takes_a_unit(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([(t, body(t)) for t in "abc"], ttl=100)
    claimed = await q.claim(2, lease_s=30, worker="w1")
    assert [c.item for c in claimed] == ["a", "b"]
    assert all(c.attempt == 1 and c.body == body(str(c.item)) and not c.done for c in claimed)
    assert [c.unit for c in claimed] == ["t:a", "t:b"] and not any(c.resumable for c in claimed)
    assert sorted(await any_redis.zrange(q.keys.budget, 0, -1)) == ["t:a", "t:b"]
    assert await any_redis.hget(q.keys.task("a"), "owner") == "w1"
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["a", "b"]
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["c"]
    assert await any_redis.zcard(q.keys.leases) == 2
    assert await q.claim(5, lease_s=30) and await q.claim(5, lease_s=30) == []


async def test_claim_reports_an_existing_result_and_an_expired_body(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await any_redis.set(q.keys.result("a"), "{}")
    await any_redis.delete(q.keys.task("b"))
    a, b = await q.claim(2, lease_s=30)
    assert a.done and a.body is None, "a finished task's body is not shipped"
    assert b.body is None and b.failures == 0
    assert a.unit is None and b.unit is None and await any_redis.zcard(q.keys.budget) == 0, "no API call to come"
    assert not await any_redis.exists(q.keys.task("b")), "a missing body must not be recreated without TTL"


async def test_claim_blocking_waits_for_an_item_then_leases_it(redis: Redis) -> None:
    """Real server only: fakeredis cannot serve a blocking command and a push concurrently."""
    q = RedisQueue(redis, "tq")
    any_redis = redis
    assert await q.claim_blocking(timeout_s=0.2, lease_s=30) is None

    async def later() -> None:
        await asyncio.sleep(0.2)
        await q.push([("a", body("a"))], ttl=100)

    pusher = asyncio.create_task(later())
    got = await q.claim_blocking(timeout_s=5, lease_s=30)
    await pusher
    assert got is not None and [c.item for c in got.items] == ["a"] and got.items[0].unit == "t:a"
    assert await any_redis.zscore(q.keys.leases, "a") is not None


async def test_ack_first_writer_wins_and_notifies_once(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a", "prod1"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    first = Result("a", Status.SOLVED, solution="tok-1")
    second = Result("a", Status.SOLVED, solution="tok-2")
    assert await q.ack(c.item, first, reply_to="prod1", result_ttl=60, reply_ttl=60) is True
    assert await q.ack(c.item, second, reply_to="prod1", result_ttl=60, reply_ttl=60) is False
    assert Result.from_json(await any_redis.get(q.keys.result("a"))).solution == "tok-1"
    assert await any_redis.lrange(q.keys.reply("prod1"), 0, -1) == [first.to_json()]
    assert await any_redis.llen(q.keys.processing) == 0
    assert await any_redis.zcard(q.keys.leases) == 0
    assert await any_redis.hgetall(q.keys.task("a")) == {"state": "done"}, \
        "the body goes, a tombstone stays (result expired vs unknown id, idempotent submit)"
    assert 0 < await any_redis.ttl(q.keys.task("a")) <= 100, "the tombstone keeps the task's TTL"
    assert 0 < await any_redis.ttl(q.keys.result("a")) <= 60


async def test_ack_without_result_only_drops_the_item(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    assert await q.ack(c.item, None) is False
    assert await any_redis.llen(q.keys.processing) == 0 and await any_redis.zcard(q.keys.leases) == 0


async def test_renew_extends_and_reports_lost_leases(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.claim(2, lease_s=5)
    before = await any_redis.zscore(q.keys.leases, "a")
    await any_redis.zrem(q.keys.leases, "b")
    renewed = await q.renew(["a", "b"], lease_s=60)
    assert renewed.lost == ["b"] and renewed.recounted == []
    assert await any_redis.zscore(q.keys.leases, "a") > before + 50


async def test_release_requeues_and_counts_only_api_side_failures(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    (a,) = await q.claim(1, lease_s=30, worker="w")
    assert await q.release(a.item, failure=False, front=True, last_error="shutdown", worker="w", unit=a.unit) is True
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a", "b"]
    assert await any_redis.hget(q.keys.task("a"), "failures") is None
    assert await q.last_error("a") == "shutdown"
    assert await any_redis.zcard(q.keys.budget) == 0, "no solve left running: the unit is released"
    assert await q.release(a.item, failure=False, front=True) is False, "not in processing any more"
    (a,) = await q.claim(1, lease_s=30, worker="w")
    await q.release(a.item, failure=True, front=False, last_error="HTTP_5XX", worker="w", unit=a.unit)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["b", "a"]
    assert await any_redis.hget(q.keys.task("a"), "failures") == "1"
    (_, a) = await q.claim(2, lease_s=30, worker="w")
    assert a.attempt == 2 and a.deaths == 0


async def test_reap_requeues_expired_leases_exactly_once(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.claim(1, lease_s=0.05)
    await q.claim(1, lease_s=60)
    await asyncio.sleep(0.1)
    results = await asyncio.gather(*(q.reap(orphan_grace_s=60) for _ in range(5)))
    assert sum(expired for expired, _ in results) == 1, "two reapers must never requeue one item twice"
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a"]
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["b"]
    assert await q.last_error("a") == "lease expired"
    (again,) = await q.claim(1, lease_s=60)
    assert again.item == "a" and again.attempt == 1 and again.deaths == 1, "a worker death is not an attempt"


async def test_reap_rescues_an_orphan_claimed_without_lease(q: RedisQueue, any_redis: Redis) -> None:
    """A worker that dies between BLMOVE and LEASE leaves an item in processing without a lease."""
    await q.push([("a", body("a"))], ttl=100)
    await any_redis.lmove(q.keys.pending, q.keys.processing, "LEFT", "RIGHT")
    assert await q.reap(orphan_grace_s=0.5) == (0, 0), "first sighting only marks it"
    assert await q.reap(orphan_grace_s=0.5) == (0, 0), "seen again within the grace: still left alone"
    assert await any_redis.llen(q.keys.processing) == 1
    await asyncio.sleep(0.6)
    assert await q.reap(orphan_grace_s=0.5) == (0, 1)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a"]
    assert await any_redis.zcard(q.keys.orphans) == 0


async def test_a_lease_taken_in_time_clears_the_orphan_mark(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    item = await any_redis.lmove(q.keys.pending, q.keys.processing, "LEFT", "RIGHT")
    await q.reap(orphan_grace_s=0.2)
    assert await any_redis.zscore(q.keys.orphans, "a") is not None
    leased = await q._lease(keys=[q.keys.processing, q.keys.leases, q.keys.orphans, q.keys.dead, q.keys.budget,
                                  q.keys.limits, q.keys.pending, q.keys.tenants], args=[item, *LEASE_ARGS])
    assert leased[4][0] == "a"
    await asyncio.sleep(0.3)
    assert await q.reap(orphan_grace_s=0.2) == (0, 0)
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["a"]


async def test_lease_after_blmove_refuses_an_item_the_reaper_took_back(q: RedisQueue) -> None:
    got = await q._lease(keys=[q.keys.processing, q.keys.leases, q.keys.orphans, q.keys.dead, q.keys.budget,
                               q.keys.limits, q.keys.pending, q.keys.tenants], args=["ghost", *LEASE_ARGS])
    assert got[4] == []


async def test_bury_dead_letters_with_reason_and_answers_the_producer(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a", "prod1"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    entry = dead_entry(reason="unknown method 'x'", code="UNKNOWN_METHOD", task_id="a", view="{}", attempts=1)
    result = Result("a", Status.ERROR, code="UNKNOWN_METHOD", text="unknown method 'x'")
    assert await q.bury(c.item, entry, result=result, reply_to="prod1", dead_max=2, result_ttl=60,
                        reply_ttl=60) == (True, True)
    (letter,) = await q.dead_letters()
    assert (letter.id, letter.code, letter.reason) == ("a", "UNKNOWN_METHOD", "unknown method 'x'")
    assert await any_redis.llen(q.keys.processing) == 0
    assert Result.from_json(await any_redis.get(q.keys.result("a"))).code == "UNKNOWN_METHOD"
    assert await any_redis.llen(q.keys.reply("prod1")) == 1


async def test_dead_letters_are_capped(q: RedisQueue, any_redis: Redis) -> None:
    for i in range(5):
        tid = f"t{i}"
        await q.push([(tid, body(tid))], ttl=100)
        (c,) = await q.claim(1, lease_s=30)
        entry = dead_entry(reason="r", code="C", task_id=tid, view=None, attempts=1)
        await q.bury(c.item, entry, result=None, reply_to=None, dead_max=3, result_ttl=60, reply_ttl=60)
    assert [d.id for d in await q.dead_letters()] == ["t4", "t3", "t2"]


async def test_raw_seed_item_is_adopted_under_its_id(q: RedisQueue, any_redis: Redis) -> None:
    raw = '{"id": "seed1", "method": "turnstile", "params": {"sitekey": "k", "pageurl": "https://x"}}'
    await any_redis.rpush(q.keys.pending, raw)
    (c,) = await q.claim(1, lease_s=30)
    assert c.item == raw and c.body is None and c.unit is None, "a raw item is read before any unit is taken"
    assert await q.adopt(raw, "seed1", body("seed1"), ttl=100) is True
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["seed1"], "its id goes first, to be claimed as a task"
    assert await any_redis.llen(q.keys.processing) == 0 and await any_redis.zcard(q.keys.leases) == 0
    assert await any_redis.hget(q.keys.task("seed1"), "body") == body("seed1")
    assert await q.adopt(raw, "seed1", body("seed1"), ttl=100) is None


async def test_budget_never_grants_more_than_the_limit(q: RedisQueue) -> None:
    granted = await asyncio.gather(*(q.budget.acquire([f"t:w{w}-{i}" for i in range(10)], limit=12, lease_s=30)
                                     for w in range(3)))
    assert sum(len(g) for g in granted) == 12
    seen = await q.heartbeat("w0", limit=12)
    assert (seen.budget_in_use, seen.workers_alive, seen.budget_limit) == (12, 1, 12)
    holder = next(g for g in granted if len(g) >= 2)  # which caller ran first is up to the server
    await q.budget.release(holder[:2])
    again = await q.budget.acquire(["t:x0", "t:x1", "t:x2"], limit=12, lease_s=30)
    assert len(again) == 2


async def test_expired_budget_units_are_reclaimed_and_renewed_ones_counted_again(q: RedisQueue) -> None:
    assert await q.budget.acquire(["t:a", "t:b"], limit=2, lease_s=0.05) == ["t:a", "t:b"]
    await asyncio.sleep(0.1)
    assert await q.budget.acquire(["t:c"], limit=2, lease_s=30) == ["t:c"]
    assert sorted(await q.budget.renew(["t:a", "t:b"], lease_s=30)) == ["t:a", "t:b"], "reported lost..."
    assert (await q.budget.state()).in_use == 3, "... and counted again: their solves run on"


async def test_the_effective_limit_is_the_smallest_a_live_worker_enforces(q: RedisQueue) -> None:
    """Raising takes effect once no live worker enforces a lower limit; lowering at once."""
    await q.heartbeat("old", limit=10, limit_alive_s=0.3)
    await q.heartbeat("new", limit=20)
    assert (await q.budget.state()).limit == await q.budget.limit() == 10
    assert (await q.budget.state(limit=5)).limit == await q.budget.limit(own=5) == 5, "the caller's own counts too"
    assert len(await q.budget.acquire([f"t:{i}" for i in range(30)], limit=20, lease_s=30)) == 10
    await asyncio.sleep(0.4)  # "old" stopped heartbeating (killed): its limit lapses
    assert (await q.budget.state()).limit == 20
    assert len(await q.budget.acquire([f"t:{i}" for i in range(30)], limit=20, lease_s=30)) == 20
    await q.heartbeat("new", limit=8)  # the plan shrank: this worker follows it
    assert (await q.budget.state()).limit == 8
    assert await q.budget.acquire(["t:more"], limit=20, lease_s=30) == [], "no unit while 20 >= 8 are in use"
    await q.forget_worker("new")
    assert (await q.budget.state()).limit is None, "no live worker left: no limit known"
    assert await q.budget.limit() is None and await q.budget.limit(own=3) == 3


async def test_a_workers_limit_replaces_its_earlier_ones_and_its_goodbye_removes_them_all(
        q: RedisQueue, any_redis: Redis) -> None:
    """HEARTBEAT needs no memory of what the worker registered before: its entry replaces every other entry of that
    worker (here a stray one its client never saw answered), and no other holder's; FORGET removes them all."""
    await q.heartbeat("w-1", limit=10)
    await q.budget.hold_limit("w-1x", 6, hold_s=60)  # another holder, whose name starts the same
    await any_redis.zadd(q.keys.limits, {"3:w-1": 2**40})  # a registration whose answer never came back
    await q.heartbeat("w-1", limit=12)
    assert sorted(await any_redis.zrange(q.keys.limits, 0, -1)) == ["12:w-1", "6:hold:w-1x"]
    await any_redis.zadd(q.keys.limits, {"3:w-1": 2**40})
    await q.forget_worker("w-1")
    assert await any_redis.zrange(q.keys.limits, 0, -1) == ["6:hold:w-1x"]
    assert await any_redis.zscore(q.keys.workers, "w-1") is None


async def test_a_hold_named_like_a_worker_and_that_worker_never_drop_each_others_limit(
        q: RedisQueue, any_redis: Redis) -> None:
    """A hold (``captcha-worker limit --holder``) and a worker's entry live in two namespaces of {q}:limits: a hold
    named like a worker id survives that worker's heartbeat and goodbye, and the hold (and its replacement) leaves
    the worker's limit in place. The Lua that drops a worker's entries is the one older workers run too."""
    await q.heartbeat("pod-1-ab12", limit=10)
    await q.budget.hold_limit("pod-1-ab12", 6, hold_s=60)
    assert sorted(await any_redis.zrange(q.keys.limits, 0, -1)) == ["10:pod-1-ab12", "6:hold:pod-1-ab12"]
    await q.heartbeat("pod-1-ab12", limit=12)
    assert sorted(await any_redis.zrange(q.keys.limits, 0, -1)) == ["12:pod-1-ab12", "6:hold:pod-1-ab12"]
    await q.forget_worker("pod-1-ab12")
    assert await any_redis.zrange(q.keys.limits, 0, -1) == ["6:hold:pod-1-ab12"]
    assert (await q.budget.state()).limit == 6, "the hold outlives the worker's goodbye"
    await q.heartbeat("pod-1-ab12", limit=4)
    await q.budget.hold_limit("pod-1-ab12", 8, hold_s=60)  # replaces the hold, not the worker's 4
    assert sorted(await any_redis.zrange(q.keys.limits, 0, -1)) == ["4:pod-1-ab12", "8:hold:pod-1-ab12"]
    assert (await q.budget.state()).limit == 4
    with pytest.raises(ValueError, match="no ':'"):
        await q.heartbeat("hold:pod-1-ab12", limit=20)  # no worker id reaches the holds' namespace
    assert ":" not in default_worker_id()


async def test_a_full_budget_stops_the_claim_and_leaves_the_item_first(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([(t, body(t)) for t in "abc"], ttl=100)
    await any_redis.rpush(q.keys.pending, '{"id": "raw"}')
    reply = await q.claim_reply(10, lease_s=30, worker="w", limit=2)
    assert [c.item for c in reply.items] == ["a", "b"] and reply.budget_full
    assert (reply.budget.limit, reply.budget.in_use, reply.pending) == (2, 2, 2)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["c", '{"id": "raw"}']
    await q.ack("a", Result("a", Status.SOLVED), unit="t:a", worker="w", result_ttl=60)
    reply = await q.claim_reply(10, lease_s=30, worker="w", limit=2)
    assert [c.item for c in reply.items] == ["c", '{"id": "raw"}'] and not reply.budget_full
    assert reply.items[1].unit is None, "a raw payload needs no unit (no API call before it is adopted)"


async def test_a_solve_left_running_keeps_its_unit_and_is_resumed(q: RedisQueue, any_redis: Redis) -> None:
    """in.php answered (RECORD), then the worker drained past its grace: the task goes back with its captcha id and
    its unit; the next claim takes that unit over (none free needed) and is told the id and its time left."""
    await q.push([("a", body("a"))], ttl=100)
    await q.claim(1, lease_s=30, worker="w1", limit=1)
    assert await q.record(Record("a", "w1", "t:a", "9001", 60)) is RecordOutcome.RECORDED
    assert await any_redis.hget(q.keys.task("a"), "captcha_id") == "9001"
    assert await any_redis.zscore(q.keys.budget, "t:a") > (await any_redis.time())[0] + 50, "held past the lease"
    await q.release("a", failure=False, front=True, worker="w1", unit="t:a", hold_s=55, captcha_id="9001")
    assert await any_redis.zcard(q.keys.budget) == 1, "its solve may still run: the unit stays counted"
    await q.push([("b", body("b"))], ttl=100)
    reply = await q.claim_reply(5, lease_s=30, worker="w2", limit=1)
    (again,) = reply.items
    assert again.item == "a" and again.unit == "t:a" and again.captcha_id == "9001"
    assert again.resumable and 50 < (again.captcha_left_s or 0) <= 55 and again.attempt == 1
    assert reply.budget_full and await any_redis.lrange(q.keys.pending, 0, -1) == ["b"], "b waits for a thread"


async def test_a_solve_whose_window_passed_is_not_resumed(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    await q.claim(1, lease_s=30, worker="w1")
    await q.record(Record("a", "w1", "t:a", "9001", 0.05))
    await q.release("a", failure=False, front=True, worker="w1", unit="t:a", hold_s=0.05, captcha_id="9001")
    await asyncio.sleep(0.1)
    (again,) = await q.claim(1, lease_s=30, worker="w2", limit=1)
    assert again.unit == "t:a" and not again.resumable, "a fresh unit, and a new submission to come"


async def test_a_worker_that_lost_its_task_records_its_solve_apart(q: RedisQueue, any_redis: Redis) -> None:
    """w1 stalled past its lease; the task was reaped and w2 claimed it; then w1's in.php answered: its solve runs
    at the API too, so it gets a unit of its own, and w2's captcha id is left alone."""
    await q.push([("a", body("a"))], ttl=100)
    await q.claim(1, lease_s=0.05, worker="w1")
    await asyncio.sleep(0.1)
    await q.reap(orphan_grace_s=60)
    await q.claim(1, lease_s=30, worker="w2")
    await q.record(Record("a", "w2", "t:a", "2002", 60))
    assert await q.record(Record("a", "w1", "t:a", "1001", 60)) is RecordOutcome.STRAY
    assert await any_redis.hget(q.keys.task("a"), "captcha_id") == "2002"
    assert sorted(await any_redis.zrange(q.keys.budget, 0, -1)) == ["t:a", "t:a~1001"]
    await q.ack("a", Result("a", Status.SOLVED, solution="s", captcha_id="1001"), unit="t:a~1001", worker="w1",
                result_ttl=60)
    assert await any_redis.zrange(q.keys.budget, 0, -1) == ["t:a"], "w1 settles only its own unit"


async def test_ack_releases_the_unit_or_holds_it_while_the_api_may_still_solve(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.claim(2, lease_s=30, worker="w")
    ok = Result("a", Status.SOLVED, solution="tok", captcha_id="77")
    timeout = Result("b", Status.ERROR, code="SOLVE_TIMEOUT")
    await q.ack_many([Ack("a", ok, unit="t:a", worker="w"), Ack("b", timeout, unit="t:b", hold_s=40, worker="w")],
                     result_ttl=60, reply_ttl=60)
    assert await any_redis.zrange(q.keys.budget, 0, -1) == ["t:b"]
    assert await any_redis.hgetall(q.keys.task("a")) == {"state": "done", "captcha_id": "77"}, "kept for reports"
    assert Result.from_json(await any_redis.get(q.keys.result("a"))).captcha_id == "77"


async def test_reports_are_queued_only_for_solved_tasks(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.claim(2, lease_s=30, worker="w")
    assert await q.report("a", Verdict.BAD) is None, "not answered yet"
    await q.ack("a", Result("a", Status.SOLVED, solution="tok", captcha_id="77"), unit="t:a", worker="w", result_ttl=60)
    await q.ack("b", Result("b", Status.ERROR, code="ERROR_CAPTCHA_UNSOLVABLE"), unit="t:b", worker="w", result_ttl=60)
    assert await q.report("a", Verdict.BAD) == "77" and await q.report("a", Verdict.GOOD) == "77"
    assert await q.report("b", Verdict.BAD) is None and await q.report("nope", Verdict.BAD) is None
    taken = await q.take_reports(10)
    assert [(r.task_id, r.captcha_id, r.verdict) for r in taken] == [("a", "77", Verdict.BAD),
                                                                      ("a", "77", Verdict.GOOD)]
    assert await q.take_reports(10) == []


async def test_requeue_dead_restores_the_task(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    entry = dead_entry(reason="gave up", code="MAX_ATTEMPTS_EXCEEDED", task_id="a", view=None, attempts=3)
    await q.bury(c.item, entry, result=Result("a", Status.ERROR, code="MAX_ATTEMPTS_EXCEEDED"), reply_to=None,
                 dead_max=10, result_ttl=60, reply_ttl=60)
    (letter,) = await q.dead_letters()
    assert await any_redis.hget(q.keys.task("a"), "state") == "dead", "BURY keeps the body for a requeue"
    await any_redis.hset(q.keys.task("a"), mapping={"failures": 3, "deaths": 2, "captcha_id": "5"})
    assert await q.requeue_dead(letter, ttl=100)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a"]
    assert await any_redis.hgetall(q.keys.task("a")) == {"body": body("a")}, "counts reset, no old solve resumed"
    assert not await any_redis.exists(q.keys.result("a")), "the old error result must not shadow a new solve"
    assert await q.requeue_dead(letter, ttl=100) is False
    assert await q.purge_dead() == 0


async def test_requeue_dead_says_when_the_body_expired(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    entry = dead_entry(reason="gave up", code="MAX_ATTEMPTS_EXCEEDED", task_id="a", view=None, attempts=3)
    await q.bury(c.item, entry, result=None, reply_to=None, dead_max=10, result_ttl=60, reply_ttl=60)
    await any_redis.delete(q.keys.task("a"))  # TASK_TTL_SECONDS passed
    (letter,) = await q.dead_letters()
    assert await q.requeue_dead(letter, ttl=100) is None
    assert await any_redis.llen(q.keys.dead) == 1 and await any_redis.llen(q.keys.pending) == 0


async def test_requeue_dead_raw_payload_keeps_only_a_view(q: RedisQueue, any_redis: Redis) -> None:
    raw = '{"id": "s", "method": "nope"}'
    await any_redis.rpush(q.keys.pending, raw)
    (c,) = await q.claim(1, lease_s=30)
    assert c.item == raw and c.body is None and c.attempt == 1
    entry = dead_entry(reason="unknown method", code="UNKNOWN_METHOD", task_id="s", view='{"id":"s"}', attempts=1)
    await q.bury(c.item, entry, result=None, reply_to=None, dead_max=10, result_ttl=60, reply_ttl=60, raw=True)
    (letter,) = await q.dead_letters()
    assert letter.view == '{"id":"s"}' and letter.legacy_raw is None
    assert await q.requeue_dead(letter, ttl=100) is None, "an invalid raw payload is not stored: nothing to requeue"


async def test_requeue_dead_entries_of_the_previous_version(q: RedisQueue, any_redis: Redis) -> None:
    """Entries written before views existed held the body or the raw payload: they can still be requeued."""
    raw = '{"id": "s", "method": "turnstile"}'
    await any_redis.lpush(q.keys.dead, json.dumps({"id": "s", "reason": "r", "code": "C", "raw": raw}),
                          json.dumps({"id": "b", "reason": "r", "code": "C", "body": body("b")}))
    old_body, old_raw = await q.dead_letters()
    assert old_body.legacy_body == body("b") and old_raw.legacy_raw == raw
    assert await q.requeue_dead(old_body, ttl=100) and await q.requeue_dead(old_raw, ttl=100)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["b", raw]
    assert await any_redis.hget(q.keys.task("b"), "body") == body("b")


async def test_a_dead_letter_keeps_the_fingerprint_and_an_excerpt_only_in_a_window(
        q: RedisQueue, any_redis: Redis) -> None:
    view = payload_view(b"Cookie: sid=PLANTEDv4lue", Redactor(), max_bytes=1000)
    assert view.fingerprint is not None and view.excerpt is not None
    entry = dead_entry(reason="payload is not valid JSON", code="INVALID_JSON", task_id=None, view=view, attempts=1)
    assert "PLANTED" not in entry
    await any_redis.lpush(q.keys.dead, entry)
    (letter,) = await q.dead_letters()
    assert letter.fingerprint == view.fingerprint and letter.view == view.fingerprint.text()
    sha = view.fingerprint.sha256
    assert await q.raw_window() is None
    assert await q.keep_excerpt(sha, view.excerpt) is False and await q.excerpt(sha) is None, "no window: nothing"
    await q.open_raw_window(60)
    left = await q.raw_window()
    assert left is not None and 0 < left <= 60
    assert await q.keep_excerpt(sha, view.excerpt) is True and await q.excerpt(sha) == view.excerpt
    assert await any_redis.pexpiretime(q.keys.raw(sha)) == await any_redis.pexpiretime(q.keys.keep_raw), \
        "the excerpt ends when the window does, to the millisecond"
    assert await q.close_raw_window() == 1
    assert await q.excerpt(sha) is None and await q.raw_window() is None
    assert await any_redis.exists(q.keys.keep_raw, q.keys.raw(sha)) == 0
    assert await q.keep_excerpt(sha, view.excerpt) is False and await q.excerpt(sha) is None, "closed: nothing"


async def test_a_window_not_opened_by_open_raw_window_keeps_nothing(q: RedisQueue, any_redis: Redis) -> None:
    """A window an older version opened (its end in seconds) or one set by hand without a TTL: no excerpt, rather
    than one whose end nobody knows."""
    view = payload_view(b"cookie=hunter2 not json", Redactor(), max_bytes=1000)
    assert view.fingerprint is not None and view.excerpt is not None
    sha = view.fingerprint.sha256
    await any_redis.set(q.keys.keep_raw, "1764770000", ex=60)  # seconds, as before OPEN_RAW_WINDOW
    assert await q.keep_excerpt(sha, view.excerpt) is False and await any_redis.exists(q.keys.raw(sha)) == 0
    await any_redis.set(q.keys.keep_raw, str(10**13))  # no TTL
    assert await q.keep_excerpt(sha, view.excerpt) is False and await any_redis.exists(q.keys.raw(sha)) == 0


async def test_an_excerpt_never_outlives_the_window_however_slow_its_writer(
        q: RedisQueue, any_redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the window's time left and writing the excerpt are one step: a client paused between two commands
    (a loaded machine) once made the excerpt outlive the window by the pause, and could write one after `--off`.
    Every command of this client is delayed by 200 ms here."""
    view = payload_view(b"cookie=hunter2 not json", Redactor(), max_bytes=1000)
    assert view.fingerprint is not None and view.excerpt is not None
    await q.open_raw_window(60)
    execute = type(q.redis).execute_command

    async def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(type(q.redis), "execute_command", slow)
    assert await q.keep_excerpt(view.fingerprint.sha256, view.excerpt) is True
    monkeypatch.undo()
    assert await any_redis.pexpiretime(q.keys.raw(view.fingerprint.sha256)) == \
        await any_redis.pexpiretime(q.keys.keep_raw)


async def test_unreadable_dead_letter_entries_are_listed_not_fatal(q: RedisQueue, any_redis: Redis) -> None:
    await any_redis.lpush(q.keys.dead, b"\xff\xfe not json", "[1]")
    letters = await q.dead_letters()
    assert [d.reason for d in letters] == ["unreadable dead-letter entry"] * 2
    assert await q.requeue_dead(letters[0], ttl=100) is None


async def test_stats_counts_lists_budget_and_workers(q: RedisQueue) -> None:
    await q.push([(t, body(t)) for t in "abcd"], ttl=100)
    await q.claim(1, lease_s=30)
    await q.budget.acquire(["t:x"], limit=5, lease_s=30)
    assert await q.stats() == QueueStats(3, 1, 0, 2, 0, None), "no heartbeat yet"
    assert await q.heartbeat("w", limit=5) == QueueStats(3, 1, 0, 2, 1, 5)
    assert await q.stats() == QueueStats(3, 1, 0, 2, 1, 5)


async def test_ack_many_acknowledges_a_batch_in_one_round_trip(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a", "p")), ("b", body("b", "p"))], ttl=100)
    a, b = await q.claim(2, lease_s=30)
    acks = [Ack(a.item, Result("a", Status.SOLVED, solution="1"), "p"),
            Ack(b.item, Result("b", Status.ERROR, code="X"), "p"),
            Ack(a.item, Result("a", Status.SOLVED, solution="2"), "p")]
    assert await q.ack_many(acks, result_ttl=60, reply_ttl=60) == [True, True, False]
    assert [Result.from_json(r).id for r in await any_redis.lrange(q.keys.reply("p"), 0, -1)] == ["a", "b"]
    assert await any_redis.llen(q.keys.processing) == 0


async def test_batches_survive_a_flushed_script_cache(q: RedisQueue, any_redis: Redis) -> None:
    await any_redis.script_flush()
    assert await q.push([("a", body("a")), ("b", body("b"))], ttl=100, batch=1) == 2
    a, b = await q.claim(2, lease_s=30)
    await any_redis.script_flush()
    assert await q.ack_many([Ack(a.item, Result("a", Status.SOLVED)), Ack(b.item, Result("b", Status.SOLVED))],
                            result_ttl=60, reply_ttl=60) == [True, True]
    assert await any_redis.llen(q.keys.processing) == 0


async def test_a_batch_is_one_round_trip_without_script_exists(redis: Redis) -> None:
    """redis-py sends SCRIPT EXISTS before every pipeline holding a registered script; ours must not."""
    q = RedisQueue(redis, "tq")
    await q.push([("warm", body("warm"))], ttl=100)  # scripts loaded
    await redis.config_resetstat()
    await q.push([(f"t{i}", body(f"t{i}")) for i in range(10)], ttl=100, batch=4)
    stats = await redis.info("commandstats")
    assert "cmdstat_script|exists" not in stats and "cmdstat_script" not in stats
    assert stats["cmdstat_evalsha"]["calls"] == 3


async def test_a_batch_of_acks_is_one_script_call_that_settles_each_on_its_own(redis: Redis) -> None:
    """ACK takes the whole batch: each ack releases or holds its own unit and wins or loses on its own."""
    q = RedisQueue(redis, "tq")
    await q.push([(t, body(t, "p")) for t in "abc"], ttl=100)
    await q.claim(3, lease_s=30, worker="w")
    await q.ack_many([], result_ttl=60, reply_ttl=60)
    await q.ack("gone", None)  # the script loaded
    await redis.config_resetstat()
    won = await q.ack_many([Ack("a", Result("a", Status.SOLVED, solution="1", captcha_id="9"), "p", unit="t:a",
                                worker="w"),
                            Ack("b", Result("b", Status.ERROR, code="SOLVE_TIMEOUT"), "p", unit="t:b", hold_s=40,
                                worker="w"),
                            Ack("a", Result("a", Status.SOLVED, solution="2"), "p", unit="t:a", worker="w"),
                            Ack("c", None, unit="t:c", worker="w")], result_ttl=60, reply_ttl=60)
    assert won == [True, True, False, False]
    assert (await redis.info("commandstats"))["cmdstat_evalsha"]["calls"] == 1
    assert await redis.zrange(q.keys.budget, 0, -1) == ["t:b"], "a and c released, b held while the API may solve"
    assert 35 < (await redis.zscore(q.keys.budget, "t:b")) - time.time() <= 40
    assert [Result.from_json(r).solution for r in await redis.lrange(q.keys.reply("p"), 0, -1)] == ["1", None]
    assert await redis.hgetall(q.keys.task("a")) == {"state": "done", "captcha_id": "9"}
    assert await redis.llen(q.keys.processing) == 0 and await redis.zcard(q.keys.leases) == 0


# -- byte-safe, per-item claiming ---------------------------------------------------------------------------
async def test_a_batch_with_bytes_that_are_not_utf8_is_claimed_item_by_item(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    await any_redis.rpush(q.keys.pending, b"\xff\xfe\x00poison", "  " + body("s"), "")
    await q.push([("b", body("b"))], ttl=100)
    claimed = await q.claim(10, lease_s=30)
    assert [c.item for c in claimed] == ["a", b"\xff\xfe\x00poison", "  " + body("s"), "", "b"]
    assert [c.body is not None for c in claimed] == [True, False, False, False, True]
    assert [c.unit for c in claimed] == ["t:a", None, None, None, "t:b"]
    assert await any_redis.zcard(q.keys.leases) == 5
    assert (await q.renew([b"\xff\xfe\x00poison", "gone"], lease_s=30)).lost == ["gone"]


async def test_a_raw_item_over_the_limit_is_dead_lettered_by_the_claim_itself(redis: Redis) -> None:
    """Real server only: fakeredis's Lua has no redis.sha1hex."""
    q, any_redis = RedisQueue(redis, "tq"), redis
    huge = "[" * 5000
    await any_redis.rpush(q.keys.pending, huge)
    await q.push([("a", body("a"))], ttl=100)
    big, a = await q.claim(5, lease_s=30, max_bytes=4096, dead_max=10)
    assert big.flag is ClaimFlag.ITEM_TOO_LARGE and big.failures == 5000 and len(big.item) == 40  # its SHA-1
    assert a.item == "a" and a.flag is ClaimFlag.NONE
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["a"]
    assert await any_redis.zrange(q.keys.leases, 0, -1) == ["a"]
    (letter,) = await q.dead_letters()
    assert (letter.id, letter.code, letter.attempts) == (None, "TASK_TOO_LARGE", 1)
    assert letter.reason == "payload is 5000 bytes, over the limit of 4096"
    assert letter.view == f"(5000 bytes, sha1 {big.item!s})"


async def test_the_blocking_claim_buries_an_item_over_the_limit_too(redis: Redis) -> None:
    q = RedisQueue(redis, "tq")
    await redis.rpush(q.keys.pending, b"\x80" * 5000)
    got = await q.claim_blocking(timeout_s=1, lease_s=30, max_bytes=4096, dead_max=10)
    assert got is not None and got.items[0].flag is ClaimFlag.ITEM_TOO_LARGE
    assert await redis.llen(q.keys.processing) == 0 and await redis.zcard(q.keys.leases) == 0
    assert (await q.dead_letters())[0].code == "TASK_TOO_LARGE"


async def test_a_stored_body_over_the_limit_is_not_shipped(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", json.dumps({"id": "a", "pad": "x" * 5000}))], ttl=100)
    (c,) = await q.claim(1, lease_s=30, max_bytes=4096)
    assert (c.item, c.body, c.unit, c.flag) == ("a", None, None, ClaimFlag.BODY_TOO_LARGE)


@pytest.mark.parametrize("item", ["abc\n", "a" * 129, "a b", "ünï", "{}", "-", "a" * 128, "A.b:c_d-1"])
async def test_lua_and_python_agree_on_what_is_a_task_id(q: RedisQueue, any_redis: Redis, item: str) -> None:

    await any_redis.hset(q.keys.task(item), "body", body("x"))  # a task of that name, if Lua takes it for an id
    await any_redis.rpush(q.keys.pending, item)
    (c,) = await q.claim(1, lease_s=30)
    lua_says_raw = c.unit is None
    assert lua_says_raw == is_raw_item(item)


# -- idempotent submit and lookups --------------------------------------------------------------------------
async def test_a_second_push_of_a_known_id_is_a_no_op(q: RedisQueue, any_redis: Redis) -> None:
    assert await q.push([("a", body("a")), ("b", body("b"))], ttl=100) == 2
    assert await q.push([("a", body("a")), ("c", body("c"))], ttl=100) == 1
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a", "b", "c"]
    (a,) = await q.claim(1, lease_s=30)
    await q.ack(a.item, Result("a", Status.SOLVED, solution="t"), result_ttl=60)
    assert await q.push([("a", body("a"))], ttl=100, front=True) == 0, "finished: the tombstone remembers it"
    await any_redis.delete(q.keys.result("a"), q.keys.task("a"))
    assert await q.push([("a", body("a"))], ttl=100) == 1, "forgotten entirely: a new task"


async def test_lookup_tells_queued_finished_and_unknown_apart(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    (a,) = await q.claim(1, lease_s=30)
    await q.ack(a.item, Result("a", Status.SOLVED, solution="t"), result_ttl=60)
    found = await q.lookup(["a", "b", "nope"])
    assert isinstance(found[0], str | bytes) and Result.from_json(found[0]).solution == "t"
    assert found[1:] == [Lookup.QUEUED, Lookup.UNKNOWN]
    await any_redis.delete(q.keys.result("a"))  # RESULT_TTL_SECONDS passed
    assert await q.lookup(["a"]) == [Lookup.FINISHED]


async def test_a_repeated_raw_push_of_a_known_id_is_dropped_on_adoption(q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("s", body("s"))], ttl=100)
    raw = body("s")
    await any_redis.rpush(q.keys.pending, raw)
    await q.claim(2, lease_s=30)
    assert await q.adopt(raw, "s", body("s"), ttl=100) is False
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["s"], "only the original stays"


async def test_an_invalid_raw_payload_never_pre_empts_the_result_of_a_real_task(
        q: RedisQueue, any_redis: Redis) -> None:
    await q.push([("s", body("s"))], ttl=100)
    raw = json.dumps({"id": "s", "method": "nope"})
    await any_redis.rpush(q.keys.pending, raw)
    await q.claim(2, lease_s=30)
    entry = dead_entry(reason="unknown method", code="UNKNOWN_METHOD", task_id="s", view=None, attempts=1)
    assert await q.bury(raw, entry, result=Result("s", Status.ERROR, code="UNKNOWN_METHOD"), reply_to=None,
                        dead_max=10, result_ttl=60, reply_ttl=60, raw=True) == (True, False)
    assert not await any_redis.exists(q.keys.result("s"))
    assert await any_redis.hget(q.keys.task("s"), "state") is None, "the real task goes on"


async def test_seed_results_hash_is_bounded_by_a_ttl(q: RedisQueue, any_redis: Redis) -> None:
    await q.write_seed_result("a1", '{"status":"success"}', ttl=60)
    assert await any_redis.hget(SEED_RESULTS_HASH, "a1") == '{"status":"success"}'
    assert 0 < await any_redis.ttl(SEED_RESULTS_HASH) <= 60


# -- durability (REDIS_WAIT_REPLICAS) on a real master and replica -------------------------------------------
async def test_a_retried_push_is_not_confirmed_by_an_older_connection(redis_server: Any, tmp_path: Any) -> None:
    """WAIT counts the writes of its own connection only, and a retried push of a known id writes nothing: that
    retry, on another connection of the pool, must not be confirmed while the replica lags behind the first push,
    or a failover loses a task the producer was told is safe. On Redis 7 a connection's WAIT waits for the
    master's offset as of its last command, written or not, so it is not confirmed; this pins that the queue's
    durable push relies on nothing weaker."""
    with RedisServer(dir=str(tmp_path), extra=["--replicaof", "127.0.0.1", str(redis_server.port)]) as rep:
        master = Redis.from_url(redis_server.url, decode_responses=True)
        await master.flushall()
        for _ in range(100):
            if (await master.info("replication")).get("slave0", {}).get("state") == "online":
                break
            await asyncio.sleep(0.1)
        assert rep.proc is not None
        assert await RedisQueue(master, "tq", wait_replicas=1, wait_timeout_ms=2000).push([("a", body("a"))], ttl=100)
        rep.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(NotReplicated):
                await RedisQueue(master, "tq", wait_replicas=1, wait_timeout_ms=300).push([("b", body("b"))], ttl=100)
            other = Redis.from_url(redis_server.url, decode_responses=True)  # a connection that never wrote
            with pytest.raises(NotReplicated):  # b is known: the retry's PUSH writes nothing
                await RedisQueue(other, "tq", wait_replicas=1, wait_timeout_ms=300).push([("b", body("b"))], ttl=100)
            await other.aclose()
        finally:
            rep.proc.send_signal(signal.SIGCONT)
        await master.aclose()
