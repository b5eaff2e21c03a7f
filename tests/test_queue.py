"""Transitions of every queue script, on fakeredis and on the real redis-server."""

from __future__ import annotations

import asyncio
import json

import pytest
from redis.asyncio import Redis

from captcha_worker.queue import Ack, DeadLetter, Keys, Queue, QueueStats, dead_entry
from captcha_worker.task import Result, Status


def body(task_id: str, reply_to: str | None = None) -> str:
    data = {"id": task_id, "method": "turnstile", "params": {"sitekey": "k", "pageurl": "https://x"}}
    if reply_to:
        data["reply_to"] = reply_to
    return json.dumps(data)


@pytest.fixture
def q(any_redis: Redis) -> Queue:
    return Queue(any_redis, "tq")


def test_all_keys_share_the_hash_tag() -> None:
    k = Keys("captcha")
    names = [k.pending, k.processing, k.leases, k.orphans, k.dead, k.budget, k.workers, k.task("x"),
             k.result("x"), k.reply("p")]
    assert all(n.startswith("{captcha}:") for n in names)
    assert k.pending == "{captcha}:pending"  # the KEDA trigger's listName


async def test_push_keeps_fifo_and_priority_goes_first(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.push([("p", body("p"))], ttl=100, front=True)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["p", "a", "b"]
    assert await any_redis.hget(q.keys.task("a"), "attempts") == "0"
    assert 0 < await any_redis.ttl(q.keys.task("a")) <= 100


async def test_claim_moves_to_processing_leases_and_counts_attempts(q: Queue, any_redis: Redis) -> None:
    await q.push([(t, body(t)) for t in "abc"], ttl=100)
    claimed = await q.claim(2, lease_s=30)
    assert [c.item for c in claimed] == ["a", "b"]
    assert all(c.attempts == 1 and c.body == body(c.item) and not c.done for c in claimed)
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["a", "b"]
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["c"]
    assert await any_redis.zcard(q.keys.leases) == 2
    assert await q.claim(5, lease_s=30) and await q.claim(5, lease_s=30) == []


async def test_claim_reports_an_existing_result_and_an_expired_body(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await any_redis.set(q.keys.result("a"), "{}")
    await any_redis.delete(q.keys.task("b"))
    a, b = await q.claim(2, lease_s=30)
    assert a.done and a.body is not None
    assert b.body is None and b.attempts == 0
    assert not await any_redis.exists(q.keys.task("b")), "a missing body must not be recreated without TTL"


async def test_claim_blocking_waits_for_an_item_then_leases_it(redis: Redis) -> None:
    """Real server only: fakeredis cannot serve a blocking command and a push concurrently."""
    q = Queue(redis, "tq")
    any_redis = redis
    assert await q.claim_blocking(timeout_s=0.2, lease_s=30) is None

    async def later() -> None:
        await asyncio.sleep(0.2)
        await q.push([("a", body("a"))], ttl=100)

    pusher = asyncio.create_task(later())
    got = await q.claim_blocking(timeout_s=5, lease_s=30)
    await pusher
    assert got is not None and got.item == "a" and got.attempts == 1
    assert await any_redis.zscore(q.keys.leases, "a") is not None


async def test_ack_first_writer_wins_and_notifies_once(q: Queue, any_redis: Redis) -> None:
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
    assert not await any_redis.exists(q.keys.task("a"))
    assert 0 < await any_redis.ttl(q.keys.result("a")) <= 60


async def test_ack_without_result_only_drops_the_item(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    assert await q.ack(c.item, None) is False
    assert await any_redis.llen(q.keys.processing) == 0 and await any_redis.zcard(q.keys.leases) == 0


async def test_renew_extends_and_reports_lost_leases(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    await q.claim(2, lease_s=5)
    before = await any_redis.zscore(q.keys.leases, "a")
    await any_redis.zrem(q.keys.leases, "b")
    lost = await q.renew(["a", "b"], lease_s=60)
    assert lost == ["b"]
    assert await any_redis.zscore(q.keys.leases, "a") > before + 50


async def test_release_requeues_and_refunds_the_attempt(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a")), ("b", body("b"))], ttl=100)
    (a,) = await q.claim(1, lease_s=30)
    assert await q.release(a.item, refund_attempt=True, front=True, last_error="shutdown") is True
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a", "b"]
    assert await any_redis.hget(q.keys.task("a"), "attempts") == "0"
    assert await q.last_error("a") == "shutdown"
    assert await q.release(a.item, refund_attempt=True, front=True) is False, "not in processing any more"
    (a,) = await q.claim(1, lease_s=30)
    await q.release(a.item, refund_attempt=False, front=False, last_error="HTTP_5XX")
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["b", "a"]
    assert await any_redis.hget(q.keys.task("a"), "attempts") == "1"


async def test_reap_requeues_expired_leases_exactly_once(q: Queue, any_redis: Redis) -> None:
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
    assert again.item == "a" and again.attempts == 2


async def test_reap_rescues_an_orphan_claimed_without_lease(q: Queue, any_redis: Redis) -> None:
    """A worker that dies between BLMOVE and LEASE leaves an item in processing without a lease."""
    await q.push([("a", body("a"))], ttl=100)
    await any_redis.lmove(q.keys.pending, q.keys.processing, "LEFT", "RIGHT")
    assert await q.reap(orphan_grace_s=0.2) == (0, 0), "first sighting only marks it"
    assert await any_redis.llen(q.keys.processing) == 1
    await asyncio.sleep(0.3)
    assert await q.reap(orphan_grace_s=0.2) == (0, 1)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a"]
    assert await any_redis.zcard(q.keys.orphans) == 0


async def test_a_lease_taken_in_time_clears_the_orphan_mark(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    item = await any_redis.lmove(q.keys.pending, q.keys.processing, "LEFT", "RIGHT")
    await q.reap(orphan_grace_s=0.2)
    assert await any_redis.zscore(q.keys.orphans, "a") is not None
    leased = await q._lease(keys=[q.keys.processing, q.keys.leases, q.keys.orphans],
                            args=[item, 60, q.keys.task_prefix, q.keys.result_prefix])
    assert leased[0] == "a"
    await asyncio.sleep(0.3)
    assert await q.reap(orphan_grace_s=0.2) == (0, 0)
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["a"]


async def test_lease_after_blmove_refuses_an_item_the_reaper_took_back(q: Queue) -> None:
    got = await q._lease(keys=[q.keys.processing, q.keys.leases, q.keys.orphans],
                         args=["ghost", 60, q.keys.task_prefix, q.keys.result_prefix])
    assert got == []


async def test_bury_dead_letters_with_reason_and_answers_the_producer(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a", "prod1"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    entry = dead_entry(reason="unknown method 'x'", code="UNKNOWN_METHOD", task_id="a", body=c.body, raw=None,
                       attempts=1)
    result = Result("a", Status.ERROR, code="UNKNOWN_METHOD", text="unknown method 'x'")
    assert await q.bury(c.item, entry, result=result, reply_to="prod1", dead_max=2, result_ttl=60, reply_ttl=60)
    (letter,) = await q.dead_letters()
    assert (letter.id, letter.code, letter.reason) == ("a", "UNKNOWN_METHOD", "unknown method 'x'")
    assert await any_redis.llen(q.keys.processing) == 0
    assert Result.from_json(await any_redis.get(q.keys.result("a"))).code == "UNKNOWN_METHOD"
    assert await any_redis.llen(q.keys.reply("prod1")) == 1


async def test_dead_letters_are_capped(q: Queue, any_redis: Redis) -> None:
    for i in range(5):
        tid = f"t{i}"
        await q.push([(tid, body(tid))], ttl=100)
        (c,) = await q.claim(1, lease_s=30)
        entry = dead_entry(reason="r", code="C", task_id=tid, body=c.body, raw=None, attempts=1)
        await q.bury(c.item, entry, result=None, reply_to=None, dead_max=3, result_ttl=60, reply_ttl=60)
    assert [d.id for d in await q.dead_letters()] == ["t4", "t3", "t2"]


async def test_raw_seed_item_is_adopted_under_its_id(q: Queue, any_redis: Redis) -> None:
    raw = '{"id": "seed1", "method": "turnstile", "params": {"sitekey": "k", "pageurl": "https://x"}}'
    await any_redis.rpush(q.keys.pending, raw)
    (c,) = await q.claim(1, lease_s=30)
    assert c.item == raw and c.body is None
    attempts = await q.adopt(raw, "seed1", body("seed1"), ttl=100, lease_s=30)
    assert attempts == 1
    assert await any_redis.lrange(q.keys.processing, 0, -1) == ["seed1"]
    assert await any_redis.zrange(q.keys.leases, 0, -1) == ["seed1"]
    assert await any_redis.hget(q.keys.task("seed1"), "body") == body("seed1")
    assert await q.adopt(raw, "seed1", body("seed1"), ttl=100, lease_s=30) is None


async def test_budget_never_grants_more_than_the_limit(q: Queue) -> None:
    granted = await asyncio.gather(*(q.budget_acquire([f"w{w}:{i}" for i in range(10)], limit=12, lease_s=30)
                                     for w in range(3)))
    assert sum(len(g) for g in granted) == 12
    seen = await q.heartbeat("w0")
    assert (seen.budget_in_use, seen.workers_alive) == (12, 1)
    holder = next(g for g in granted if len(g) >= 2)  # which caller ran first is up to the server
    await q.budget_release(holder[:2])
    again = await q.budget_acquire(["w9:0", "w9:1", "w9:2"], limit=12, lease_s=30)
    assert len(again) == 2


async def test_expired_budget_units_are_reclaimed_and_reported_lost(q: Queue) -> None:
    assert await q.budget_acquire(["a:0", "a:1"], limit=2, lease_s=0.05) == ["a:0", "a:1"]
    await asyncio.sleep(0.1)
    assert await q.budget_acquire(["b:0"], limit=2, lease_s=30) == ["b:0"]
    assert sorted(await q.budget_renew(["a:0", "a:1"], lease_s=30)) == ["a:0", "a:1"]


async def test_requeue_dead_restores_the_task(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a"))], ttl=100)
    (c,) = await q.claim(1, lease_s=30)
    entry = dead_entry(reason="gave up", code="MAX_ATTEMPTS_EXCEEDED", task_id="a", body=c.body, raw=None,
                       attempts=3)
    await q.bury(c.item, entry, result=Result("a", Status.ERROR, code="MAX_ATTEMPTS_EXCEEDED"), reply_to=None,
                 dead_max=10, result_ttl=60, reply_ttl=60)
    (letter,) = await q.dead_letters()
    assert await q.requeue_dead(letter, ttl=100)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == ["a"]
    assert await any_redis.hget(q.keys.task("a"), "attempts") == "0"
    assert not await any_redis.exists(q.keys.result("a")), "the old error result must not shadow a new solve"
    assert await q.requeue_dead(letter, ttl=100) is False
    assert await q.purge_dead() == 0


async def test_requeue_dead_raw_item_pushes_the_raw_payload(q: Queue, any_redis: Redis) -> None:
    raw = '{"id": "s", "method": "nope"}'
    await any_redis.rpush(q.keys.pending, raw)
    (c,) = await q.claim(1, lease_s=30)
    entry = dead_entry(reason="unknown method", code="UNKNOWN_METHOD", task_id="s", body=None, raw=raw,
                       attempts=0)
    await q.bury(c.item, entry, result=None, reply_to=None, dead_max=10, result_ttl=60, reply_ttl=60)
    letter = DeadLetter.parse((await any_redis.lrange(q.keys.dead, 0, 0))[0])
    assert letter.item == raw
    assert await q.requeue_dead(letter, ttl=100)
    assert await any_redis.lrange(q.keys.pending, 0, -1) == [raw]


async def test_stats_counts_lists_budget_and_workers(q: Queue) -> None:
    await q.push([(t, body(t)) for t in "abcd"], ttl=100)
    await q.claim(1, lease_s=30)
    await q.budget_acquire(["w:0", "w:1"], limit=5, lease_s=30)
    assert await q.stats() == QueueStats(3, 1, 0, 2, 0), "no heartbeat yet"
    assert await q.heartbeat("w") == QueueStats(3, 1, 0, 2, 1)
    assert await q.stats() == QueueStats(3, 1, 0, 2, 1)


async def test_ack_many_acknowledges_a_batch_in_one_round_trip(q: Queue, any_redis: Redis) -> None:
    await q.push([("a", body("a", "p")), ("b", body("b", "p"))], ttl=100)
    a, b = await q.claim(2, lease_s=30)
    acks = [Ack(a.item, Result("a", Status.SOLVED, solution="1"), "p"),
            Ack(b.item, Result("b", Status.ERROR, code="X"), "p"),
            Ack(a.item, Result("a", Status.SOLVED, solution="2"), "p")]
    assert await q.ack_many(acks, result_ttl=60, reply_ttl=60) == [True, True, False]
    assert [Result.from_json(r).id for r in await any_redis.lrange(q.keys.reply("p"), 0, -1)] == ["a", "b"]
    assert await any_redis.llen(q.keys.processing) == 0


async def test_batches_survive_a_flushed_script_cache(q: Queue, any_redis: Redis) -> None:
    await any_redis.script_flush()
    assert await q.push([("a", body("a")), ("b", body("b"))], ttl=100, batch=1) == 2
    a, b = await q.claim(2, lease_s=30)
    await any_redis.script_flush()
    assert await q.ack_many([Ack(a.item, Result("a", Status.SOLVED)), Ack(b.item, Result("b", Status.SOLVED))],
                            result_ttl=60, reply_ttl=60) == [True, True]
    assert await any_redis.llen(q.keys.processing) == 0


async def test_a_batch_is_one_round_trip_without_script_exists(redis: Redis) -> None:
    """redis-py sends SCRIPT EXISTS before every pipeline holding a registered script; ours must not."""
    q = Queue(redis, "tq")
    await q.push([("warm", body("warm"))], ttl=100)  # scripts loaded
    await redis.config_resetstat()
    await q.push([(f"t{i}", body(f"t{i}")) for i in range(10)], ttl=100, batch=4)
    stats = await redis.info("commandstats")
    assert "cmdstat_script|exists" not in stats and "cmdstat_script" not in stats
    assert stats["cmdstat_evalsha"]["calls"] == 3
