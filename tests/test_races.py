"""The races behind once-flaky tests, each forced deterministically (issue 23): a wrapped await holds one side
until the other has landed, against a real redis-server, the real simulator and an in-process worker.

1. Phantom budget units: a job ACKed between its heartbeat's snapshot and the renewal must not get its unit back.
2. False ``lease_lost``: the same interleaving must not report the lease of a job that just finished as lost.
3. Fencing: a worker that lost its task to another one (it stalled past its lease) never touches the new
   owner's item, lease or unit.
4. A durable write (REDIS_WAIT_REPLICAS) is confirmed only by a WAIT on the connection, and node, that ran it
   (Redis Cluster): a batch whose connection fails after the write is reported unconfirmed and run again.
5. Delivered once across a failover: a result read from a master before it was replicated, then pushed again by
   the worker's ACK retried on the new master, reaches the producer's application once (idempotent by id).
6. A unit given back for a paid solve (``Worker.drop_unit``) stays given back: a heartbeat whose snapshot still
   held it, sent before the unit went back and reaching Redis after, must not count it again.
7. One limit per worker: a heartbeat's registration of the limit it read, still on its way while the plan loop
   registers the plan's new limit, must not land after it and put the old limit back in ``{q}:limits``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import Connection

from captcha_worker.budget import unit_of
from captcha_worker.client import CaptchaQueue, Solved
from captcha_worker.config import WorkerConfig
from captcha_worker.connection import NotReplicated
from captcha_worker.queue import Ack, Keys, RedisQueue, Renewal
from captcha_worker.simulator import SimConfig, SimulatorServer
from captcha_worker.simulator.config import Profile
from captcha_worker.task import Result, Status
from captcha_worker.worker import Worker
from tests import helpers
from tests.helpers import KEY
from tests.topology import ClusterTopology, cluster, replica_servers

SPEED = 50.0
#: heartbeats every 2 s; a hook holds a heartbeat while a job solves and ACKs (~0.3 s), and only a loop stall over
#: 6 s would let the reaper take the lease meanwhile (another interleaving than the one forced)
LEASE_S = "6"
TURNSTILE = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}
HCAPTCHA = {"sitekey": "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2", "pageurl": "https://example.com/signup"}
PKEY = "p2captcha0123456789abcdef0123456"  # the simulator takes any 32 letters and digits


@asynccontextmanager
async def running_worker(redis_url: str, **env: str) -> AsyncIterator[Worker]:
    async with SimulatorServer(SimConfig(speed=SPEED, seed=1)) as sim, worker_of(sim, redis_url, **env) as w:
        yield w


def worker_of(sim: SimulatorServer, redis_url: str, **env: str) -> AbstractAsyncContextManager[Worker]:
    """An in-process worker on `sim`: 4 threads, 2 slots, 6 s leases at the simulator's speed."""
    base = {"REDIS_URL": redis_url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url, "CAPTCHAAI_THREADS": "4",
            "WORKER_CONCURRENCY": "2", "API_TIME_SCALE": str(SPEED), "LEASE_SECONDS": LEASE_S,
            "DRAIN_GRACE_SECONDS": "5"}
    return helpers.running_worker(WorkerConfig.from_env({**base, **env}))


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
    score = await redis.zscore(Keys(w.cfg.queue).budget, unit_of(task_id))
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
        in_use = await redis.zcard(Keys(w.cfg.queue).budget)
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
        keys = Keys(w.cfg.queue)

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


async def test_a_unit_given_back_for_a_paid_solve_is_not_counted_again_by_a_heartbeat_sent_before(
        redis: Redis, redis_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A kind CaptchaAI lacks (hCaptcha) is claimed with a unit, then solved at a per-solve provider: the job gives
    its unit back first (drop_unit). Forced: the heartbeat's snapshot holds the job with its unit; the unit goes
    back before that renewal reaches Redis. While the provider still solves, the budget must not hold the unit
    (on the code before the fix RENEW re-created it and logged budget_units_lost), and no unit outlives the task."""
    caplog.set_level(logging.WARNING, logger="captcha_worker.worker")
    async with SimulatorServer(SimConfig(profile=Profile.TWOCAPTCHA, speed=SPEED, seed=2)) as paid:
        doc = {"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": paid.url, "key": PKEY,
                              "kinds": ["hcaptcha"], "price_per_1000": {"hcaptcha": 1.45}}],
               "cap": {"hour": 5.0, "day": 50.0}}
        async with running_worker(redis_server.url, PROVIDERS=json.dumps(doc)) as w, \
                CaptchaQueue.from_url(redis_server.url, overflow_kinds={"hcaptcha"}) as producer:
            snapshot_taken, given_back, raced, solve_on = (asyncio.Event() for _ in range(4))
            real_drop, real_renew = w.drop_unit, w.queue.renew
            overflow = w.overflow
            assert overflow is not None
            real_paid = overflow.solve

            async def drop_after_the_snapshot(job: Any) -> None:
                await snapshot_taken.wait()
                await real_drop(job)
                given_back.set()

            async def paid_held(*args: Any, **kwargs: Any) -> Any:
                await solve_on.wait()
                return await real_paid(*args, **kwargs)

            async def renew_after_the_drop(items: Any, *args: Any, **kwargs: Any) -> Any:
                if not snapshot_taken.is_set() and any(r.unit for r in items):  # the job, with its unit
                    snapshot_taken.set()
                    await given_back.wait()  # the unit went back before this renewal reaches Redis
                    result = await real_renew(items, *args, **kwargs)
                    raced.set()
                    return result
                return await real_renew(items, *args, **kwargs)

            setattr(w, "drop_unit", drop_after_the_snapshot)
            setattr(w.queue, "renew", renew_after_the_drop)
            setattr(overflow, "solve", paid_held)
            task_id = await producer.submit("hcaptcha", HCAPTCHA)
            await asyncio.wait_for(raced.wait(), 30)
            unit_while_paid = await redis.zscore(Keys(w.cfg.queue).budget, unit_of(task_id))
            solve_on.set()
            outcome = await producer.result(task_id, timeout=30)
            in_use = await redis.zcard(Keys(w.cfg.queue).budget)
    assert isinstance(outcome, Solved)
    assert unit_while_paid is None, "a heartbeat sent before the unit went back counted it again (a phantom unit)"
    assert [r.getMessage() for r in caplog.records].count("budget_units_lost") == 0
    assert in_use == 0, "a unit outlived its task"


async def test_a_unit_given_back_is_fenced_by_owner_and_ends_with_the_claim(redis: Redis) -> None:
    """UNIT_DROP on its own: a stale renewal after it renews the lease, not the unit; a worker that lost the task
    cannot give back the new owner's unit; the task's next claim (after a RELEASE) renews its unit again."""
    q = RedisQueue(redis, "given")
    await q.push([("a", '{"id":"a","method":"hcaptcha","params":{}}')], ttl=100)
    (first,) = await q.claim(1, lease_s=600, worker="w1")
    assert first.unit == unit_of("a")
    assert await q.drop_unit("a", first.unit, worker="w1") is True
    stale = await q.renew([Renewal("a", first.unit)], lease_s=600, worker="w1")
    assert (stale.lost, stale.recounted) == ([], [])
    assert await redis.zscore(q.keys.budget, unit_of("a")) is None, "the stale renewal counted the unit again"
    assert await q.release("a", failure=False, front=True, worker="w1", unit=first.unit) is True
    (second,) = await q.claim(1, lease_s=600, worker="w2")
    assert second.unit == unit_of("a")
    assert await q.drop_unit("a", unit_of("a"), worker="w1") is False, "w1 gave back w2's unit"
    await redis.zadd(q.keys.budget, {unit_of("a"): 1})  # w2's unit expired while it stalled...
    await redis.zremrangebyscore(q.keys.budget, "-inf", 1)
    again = await q.renew([Renewal("a", second.unit)], lease_s=600, worker="w2")
    assert again.recounted == [unit_of("a")], "...and is counted again: its solve runs on"
    assert await q.release("a", failure=False, front=True, worker="w2", unit=second.unit) is True
    (third,) = await q.claim(1, lease_s=600, worker="w1")  # w1 claims it anew: its earlier give-back is over
    await redis.zrem(q.keys.budget, unit_of("a"))
    assert (await q.renew([Renewal("a", third.unit)], lease_s=600, worker="w1")).recounted == [unit_of("a")]


# -- 4. a durable write confirmed only by a WAIT on its own connection (Redis Cluster) ------------------------
@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    with cluster(tmp_path_factory.mktemp("race-cluster")) as topo:
        yield topo


def drop_after_the_write(monkeypatch: pytest.MonkeyPatch, port: int) -> list[str]:
    """The next batch that writes and WAITs on a connection to `port` loses that connection right after the
    write's reply (the master dying while WAIT blocks): the WAIT's reply never comes. Returns what happened."""
    seen: list[str] = []
    doomed: dict[int, int] = {}  # id(connection) -> replies read since the batch was sent
    real_send, real_read = Connection.send_packed_command, Connection.read_response

    async def send(self: Connection, command: Any, *args: Any, **kwargs: Any) -> None:
        packed = command if isinstance(command, bytes | str) else b"".join(command)
        text = packed.encode() if isinstance(packed, str) else packed
        if self.port == port and not seen and b"EVALSHA" in text and b"WAIT" in text:
            doomed[id(self)] = 0
            seen.append("batch sent")
        elif b"WAIT" in text:
            seen.append(f"WAIT sent to {self.port} {'with' if b'EVALSHA' in text else 'without'} its write")
        await real_send(self, command, *args, **kwargs)

    async def read(self: Connection, *args: Any, **kwargs: Any) -> Any:
        if id(self) in doomed:
            if doomed[id(self)] == 1:
                del doomed[id(self)]
                seen.append("connection lost after the write's reply")
                await self.disconnect()
                raise rexc.ConnectionError("Connection closed by server.")
            doomed[id(self)] += 1
        return await real_read(self, *args, **kwargs)

    monkeypatch.setattr(Connection, "send_packed_command", send)
    monkeypatch.setattr(Connection, "read_response", read)
    return seen


async def test_a_durable_push_is_never_confirmed_by_a_wait_on_another_connection(
        redis_cluster: ClusterTopology, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py's cluster pipeline retries a ConnectionError by sending again only the commands without a reply,
    to whatever node routing picks (the pin to the slot's master is gone): the push's WAIT alone, on another
    connection, answered for writes it never saw. Forced here: the slot master's replica is stopped (a WAIT after
    the write cannot be satisfied), and the connection of the push drops right after the EVALSHA's reply."""
    topo = redis_cluster
    client = RedisCluster.from_url(topo.url, decode_responses=True, require_full_coverage=False)
    q = RedisQueue(client, "race", wait_replicas=1, wait_timeout_ms=300)  # the push no replica can confirm
    confirmed = RedisQueue(client, "race", wait_replicas=1, wait_timeout_ms=2000)  # pushes that must be confirmed
    master = topo.node(topo.slot_master(q.keys.pending))
    replicas = [s.proc for s in replica_servers(master, topo.node) if s.proc is not None]
    await confirmed.push([("warm", '{"id":"warm"}')], ttl=100)  # scripts loaded, slot map known
    seen = drop_after_the_write(monkeypatch, master.port)
    for p in replicas:
        p.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises((rexc.ConnectionError, NotReplicated)):
            await q.push([("t1", '{"id":"t1"}')], ttl=100)
    finally:
        for p in replicas:
            p.send_signal(signal.SIGCONT)
        monkeypatch.undo()
    assert seen[:2] == ["batch sent", "connection lost after the write's reply"], seen
    assert not any(s.startswith("WAIT sent") for s in seen), f"a WAIT was sent apart from its write: {seen}"
    assert await confirmed.push([("t1", '{"id":"t1"}')], ttl=100) == 0, "the batch is run again: a no-op, confirmed"
    replica = Redis(port=replica_servers(master, topo.node)[0].port, decode_responses=True)
    await replica.execute_command("READONLY")  # a cluster replica answers reads of its master's slots
    assert await replica.hget(q.keys.task("t1"), "body") == '{"id":"t1"}'
    await replica.aclose()
    await client.aclose()


async def test_an_ack_batch_run_again_is_a_no_op_that_reports_the_same_outcome(redis: Redis) -> None:
    """What running an unconfirmed durable batch again must be: the ACK of an item it already finished delivers
    nothing twice (one reply), and still reports its result as the one delivered (not a duplicate)."""
    q = RedisQueue(redis, "race")
    await q.push([("a", '{"id":"a","method":"turnstile","params":{}}')], ttl=100)
    (c,) = await q.claim(1, lease_s=60, worker="w")
    ack = Ack(c.item, Result("a", Status.SOLVED, solution="tok", captcha_id="c1"), "p", unit=c.unit, worker="w")
    assert await q.ack_many([ack], result_ttl=60, reply_ttl=60) == [True]
    assert await q.ack_many([ack], result_ttl=60, reply_ttl=60) == [True], "the same result, already delivered"
    assert await redis.llen(q.keys.reply("p")) == 1, "delivered once"
    other = Ack(c.item, Result("a", Status.SOLVED, solution="tok2"), "p", unit=c.unit, worker="w")
    assert await q.ack_many([other], result_ttl=60, reply_ttl=60) == [False], "another result is a duplicate"
    assert await redis.hget(q.keys.task("a"), "captcha_id") == "c1"
    assert await redis.zcard(q.keys.budget) == 0 and await redis.llen(q.keys.processing) == 0


async def test_a_result_pushed_again_after_a_lost_ack_reaches_the_producer_once(
        redis: Redis, redis_server: Any) -> None:
    """Item 4 of issue 23, forced on one real redis-server: the ACK's result and reply land on a master, the
    producer reads the reply, then the master dies before replicating them. The new master is the state before the
    ACK (emulated: the keys the ACK wrote restored from DUMPs taken before it); the worker's ACK, unconfirmed, runs
    again there, wins SET NX again and pushes the same result again. The producer hands it over once."""
    q = CaptchaQueue.from_url(redis_server.url, producer_id="p-dup")
    handed: list[str] = []
    original = q._deliver

    def deliver(result: Result) -> None:
        handed.append(result.id)
        original(result)

    q._deliver = deliver  # type: ignore[method-assign]
    async with q:
        (tid,) = await q.submit_many([{"method": "turnstile", "params": TURNSTILE}])
        (c,) = await q.queue.claim(1, lease_s=60, worker="w")
        k = q.keys
        written = [k.processing, k.leases, k.budget, k.task(tid), k.result(tid), k.reply("p-dup")]
        before = {key: await redis.dump(key) for key in written}  # what a lagging replica has: up to the claim
        ack = Ack(c.item, Result(tid, Status.SOLVED, solution="tok"), "p-dup", unit=c.unit, worker="w")
        waiting = asyncio.ensure_future(q.result(tid, timeout=30))
        assert await q.queue.ack_many([ack], result_ttl=60, reply_ttl=60) == [True]
        first = await waiting
        assert isinstance(first, Solved) and first.token == "tok"
        for key, dumped in before.items():  # the failover: the new master never saw the ACK
            await redis.delete(key)
            if dumped is not None:
                await redis.restore(key, 0, dumped)
        assert await q.queue.ack_many([ack], result_ttl=60, reply_ttl=60) == [True], "the retry wins SET NX again"
        for _ in range(500):  # until the listener took the second push (handed over, or dropped)
            if len(handed) + getattr(q, "duplicates_dropped", 0) >= 2:
                break
            await asyncio.sleep(0.02)
    assert handed == [tid], f"the producer was handed the result {len(handed)} times"
    assert q.duplicates_dropped == 1 and not await redis.exists(k.reply("p-dup"))


async def test_a_different_result_of_the_same_id_is_still_news(redis: Redis, redis_server: Any) -> None:
    """Idempotent by result, not by id alone: a dead letter requeued and solved notifies its producer again."""
    q = CaptchaQueue.from_url(redis_server.url, producer_id="p-news")
    handed: list[Result] = []
    original = q._deliver

    def deliver(result: Result) -> None:
        handed.append(result)
        original(result)

    q._deliver = deliver  # type: ignore[method-assign]
    async with q:
        q._ensure_listener()
        failed = Result("t-news", Status.ERROR, code="MAX_ATTEMPTS_EXCEEDED").to_json()
        solved = Result("t-news", Status.SOLVED, solution="tok").to_json()
        await redis.rpush(q.keys.reply("p-news"), failed, failed, solved)
        for _ in range(500):
            if len(handed) + q.duplicates_dropped >= 3:
                break
            await asyncio.sleep(0.02)
    assert [r.status for r in handed] == [Status.ERROR, Status.SOLVED] and q.duplicates_dropped == 1


# -- 7. one limit per worker: a registration in flight never lands after a newer one ------------------------------
async def test_a_heartbeat_in_flight_never_puts_back_the_limit_the_plan_replaced(
        redis: Redis, redis_server: Any) -> None:
    """The plan grows from 2 threads to 4 (CAPTCHAAI_THREADS) while the heartbeat loop's registration of 2 is on its
    way. Forced: that call is held; the plan loop reads threadsinfo (4) and follows it; its registration lands
    first where nothing orders the two (the code before the fix), then the held one goes to Redis. Once both
    answered, ``{q}:limits`` holds this worker's 4 alone and the budget in effect, as Redis says and as the worker
    last read it, is 4: before the fix the held call put 2 back (a limit the plan no longer has, in effect until
    it expired a lease later) and the worker exported 2."""
    async with SimulatorServer(SimConfig(speed=SPEED, seed=1, threads=2)) as sim, \
            worker_of(sim, redis_server.url) as w:
        await asyncio.wait_for(w._plan_read.wait(), 10)
        keys = Keys(w.cfg.queue)
        assert await redis.zrange(keys.limits, 0, -1) == [f"2:{w.id}"]
        real_heartbeat, real_threadsinfo = w.queue.heartbeat, w.api.threadsinfo
        followed, plan_sent, plan_done, held_done = (asyncio.Event() for _ in range(4))
        held: list[int] = []

        async def threadsinfo() -> Any:
            info = await real_threadsinfo()
            if info.threads == 4:
                followed.set()  # the plan loop runs on from here, follows 4 and registers it, to its first await
            return info

        async def heartbeat(worker_id: str, *, limit: int, **kwargs: Any) -> Any:
            if not held:  # the heartbeat loop's next registration, of the limit it read: 2
                held.append(limit)
                sim.simulator.reconfigure(replace(sim.simulator.config, threads=4))
                w.key_changed()  # the plan loop reads threadsinfo now
                await followed.wait()
                if plan_sent.is_set():  # nothing held the plan loop's registration back: it lands first
                    await plan_done.wait()
                seen = await real_heartbeat(worker_id, limit=limit, **kwargs)
                held_done.set()
                return seen
            if limit == 4:
                plan_sent.set()
                seen = await real_heartbeat(worker_id, limit=limit, **kwargs)
                plan_done.set()
                return seen
            return await real_heartbeat(worker_id, limit=limit, **kwargs)

        setattr(w.api, "threadsinfo", threadsinfo)
        setattr(w.queue, "heartbeat", heartbeat)
        await asyncio.wait_for(asyncio.gather(held_done.wait(), plan_done.wait()), 30)
        members = await redis.zrange(keys.limits, 0, -1)
        in_effect = await RedisQueue(redis, w.cfg.queue).budget.limit()
        exported = w.budget_limit
    assert held == [2] and w.limit == 4
    assert members == [f"4:{w.id}"], "a registration that was on its way put back a limit the plan replaced"
    assert in_effect == 4 and exported == 4


async def test_a_claim_on_its_way_while_the_plan_changes_never_exports_the_replaced_limit(
        redis: Redis, redis_server: Any) -> None:
    """A claim's reply carries the budget as Redis saw it, counted with the worker's own limit when it was sent.
    Forced: the claim loop's claim, sent with the plan's 2, is held; the plan grows to 4 and its registration is
    answered (exported: 4); then the held claim goes to Redis, which counts it with its own limit of 2. The worker
    must not export that 2 over the registration's 4 (before the fix it did, until its next claim: the fast tier
    failed so once in a fresh-clone run, the claim loop and the plan loop meeting by chance)."""
    async with SimulatorServer(SimConfig(speed=SPEED, seed=1, threads=2)) as sim, \
            worker_of(sim, redis_server.url) as w:
        await asyncio.wait_for(w._plan_read.wait(), 10)
        real_claim, real_heartbeat, real_set = w.queue.claim_reply, w.queue.heartbeat, w._set_budget
        registered, next_claim = asyncio.Event(), asyncio.Event()
        held: list[int] = []
        exported: list[int | None] = []  # the budget limits the worker set once the registration of 4 answered

        async def heartbeat(worker_id: str, *, limit: int, **kwargs: Any) -> Any:
            seen = await real_heartbeat(worker_id, limit=limit, **kwargs)
            if limit == 4:
                registered.set()  # _register exports it before any other task runs
            return seen

        async def claim_reply(n: int, *, limit: int, **kwargs: Any) -> Any:
            if held and registered.is_set():
                next_claim.set()  # the held claim's reply was observed (the claim loop came round again)
            elif not held and limit == 2:
                held.append(limit)
                sim.simulator.reconfigure(replace(sim.simulator.config, threads=4))
                w.key_changed()  # the plan loop reads threadsinfo now, follows 4 and registers it
                await registered.wait()
            return await real_claim(n, limit=limit, **kwargs)

        def set_budget(limit: int | None, in_use: int) -> None:
            if registered.is_set():
                exported.append(limit)
            real_set(limit, in_use)

        setattr(w.queue, "heartbeat", heartbeat)
        setattr(w.queue, "claim_reply", claim_reply)
        setattr(w, "_set_budget", set_budget)
        await asyncio.wait_for(next_claim.wait(), 30)
        in_effect = await RedisQueue(redis, w.cfg.queue).budget.limit()
    assert held == [2] and w.limit == 4 and in_effect == 4
    assert 2 not in exported and w.budget_limit == 4, f"exported after the plan's registration: {exported}"


async def test_a_goodbye_removes_a_limit_whose_registration_was_never_answered(
        redis: Redis, redis_server: Any) -> None:
    """The plan grows from 2 to 4 and the registration of 4 lands, but its answer is never read (Redis slow, the
    worker stopping: its loop is cancelled on the way out). The worker's goodbye must still remove the 4 it never
    saw land: before the fix it removed only the 2 it last saw registered, and the 4 stayed a lease after the
    worker had gone."""
    async with SimulatorServer(SimConfig(speed=SPEED, seed=1, threads=2)) as sim:
        async with worker_of(sim, redis_server.url) as w:
            await asyncio.wait_for(w._plan_read.wait(), 10)
            real_heartbeat, landed, never = w.queue.heartbeat, asyncio.Event(), asyncio.Event()

            async def heartbeat(worker_id: str, *, limit: int, **kwargs: Any) -> Any:
                seen = await real_heartbeat(worker_id, limit=limit, **kwargs)
                if limit == 4:  # every registration of 4 lands; no answer comes back
                    landed.set()
                    await never.wait()
                return seen

            setattr(w.queue, "heartbeat", heartbeat)
            sim.simulator.reconfigure(replace(sim.simulator.config, threads=4))
            w.key_changed()
            await asyncio.wait_for(landed.wait(), 10)
            assert await redis.zrange(Keys(w.cfg.queue).limits, 0, -1) == [f"4:{w.id}"]
        members = await redis.zrange(Keys(w.cfg.queue).limits, 0, -1)
        alive = await redis.zscore(Keys(w.cfg.queue).workers, w.id)
    assert members == [], "a limit of a worker that had said goodbye stayed in effect"
    assert alive is None
