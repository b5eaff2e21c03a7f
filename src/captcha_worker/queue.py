"""Every Redis key and Lua script of a queue, in one place.

Keys (queue ``q``, default ``captcha``).  All share the hash tag ``{q}`` so scripts and BLMOVE work on Redis
Cluster; several queues are several tags.

=========================  ======  ==========================================================================
key                        type    meaning
=========================  ======  ==========================================================================
``{q}:pending``            list    Items waiting, FIFO (pushed right, claimed left; priority pushes left).
                                   An item is a task id, or the raw JSON of a task a seed-guide producer
                                   RPUSHed. KEDA trigger 1 counts it.
``{q}:processing``         list    Claimed items. KEDA trigger 2 counts it, so in-flight work keeps pods.
``{q}:leases``             zset    processing item -> lease expiry (Redis server time, seconds).
``{q}:orphans``            zset    processing item without a lease -> when a reaper first saw it.
``{q}:task:<id>``          hash    ``body`` (task JSON), ``attempts`` (claims so far), ``last_error``. TTL.
``{q}:result:<id>``        string  Result JSON. Written once (SET NX): the first writer wins. TTL.
``{q}:reply:<producer>``   list    Result JSON pushed for the producer process waiting on it. TTL.
``{q}:dead``               list    Dead letters, newest first: JSON ``{id, reason, code, body|raw, ...}``.
                                   Capped (LTRIM).
``{q}:budget``             zset    Plan-thread budget: ``<worker>:<slot>`` -> expiry. At most
                                   ``CAPTCHAAI_THREADS`` live members cluster-wide; a slot holds one while it
                                   may call the API.
``{q}:workers``            zset    worker id -> last heartbeat (server time).
=========================  ======  ==========================================================================

Transitions of one item (each arrow is one atomic step):

    push           producer        -> pending                     (task hash written with TTL, attempts 0)
    CLAIM          pending         -> processing + lease          (attempts + 1; batch, non-blocking)
    BLMOVE+LEASE   pending         -> processing, then lease      (blocking path; the gap is covered by
                                                                   the orphan rule below)
    ADOPT          raw seed JSON in processing -> its id in processing + lease (task hash created)
    RENEW          lease expiry pushed forward by the owning worker's heartbeat
    ACK            processing + lease -> result (NX) + reply push  (task hash deleted)
    BURY           processing + lease -> dead (+ error result + reply push when the id is known)
    RELEASE        processing + lease -> pending (front or back; attempt refunded on graceful drain)
    REAP           expired lease, or lease-less item older than the orphan grace -> pending (front)

A reaper runs in every worker; REAP is one script, so two reapers never requeue an item twice (LREM decides).
An item requeued by a reaper that its old owner still solves may be solved twice; ACK's SET NX makes the
producer see exactly one result. When a claim finds a result already written, the worker acks it unsolved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from captcha_worker.task import Result

T = TypeVar("T")

# -- Lua ----------------------------------------------------------------------------------------------------
# Server time keeps leases independent of worker clocks. Scripts are replicated by effects (Redis >= 5).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS[1] pending  KEYS[2..] task hashes | ARGV[1] ttl  ARGV[2] '1' = push to the front  ARGV[3..] id, body pairs
_PUSH = """
local ids = {}
for i = 2, #KEYS do
  local id, body = ARGV[2 * i - 1], ARGV[2 * i]
  redis.call('HSET', KEYS[i], 'body', body, 'attempts', 0)
  redis.call('EXPIRE', KEYS[i], ARGV[1])
  ids[#ids + 1] = id
end
if ARGV[2] == '1' then redis.call('LPUSH', KEYS[1], unpack(ids)) else redis.call('RPUSH', KEYS[1], unpack(ids)) end
return #ids
"""

# Shared by CLAIM and LEASE: lease one item that is in processing; count the attempt; return
# {item, body|false, attempts, result already written (0/1)}.
_LEASE_ITEM = """
local function lease(item, leases, orphans, task_prefix, result_prefix, lease_s)
  redis.call('ZADD', leases, now + lease_s, item)
  redis.call('ZREM', orphans, item)
  if string.sub(item, 1, 1) == '{' then return {item, false, 0, 0} end
  local done = redis.call('EXISTS', result_prefix .. item)
  local task = task_prefix .. item
  local body = redis.call('HGET', task, 'body')
  if not body then return {item, false, 0, done} end
  return {item, body, redis.call('HINCRBY', task, 'attempts', 1), done}
end
"""

# KEYS[1] pending  KEYS[2] processing  KEYS[3] leases  KEYS[4] orphans | ARGV[1] max items  ARGV[2] lease s
# ARGV[3] task key prefix  ARGV[4] result key prefix.  Returns the lease() quadruples, flattened.
_CLAIM = _NOW + _LEASE_ITEM + """
local out = {}
for _ = 1, tonumber(ARGV[1]) do
  local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not item then break end
  for _, v in ipairs(lease(item, KEYS[3], KEYS[4], ARGV[3], ARGV[4], tonumber(ARGV[2]))) do out[#out + 1] = v end
end
return out
"""

# After a blocking BLMOVE. KEYS[1] processing  KEYS[2] leases  KEYS[3] orphans | ARGV[1] item  ARGV[2] lease s
# ARGV[3] task key prefix  ARGV[4] result key prefix.  Returns {} when a reaper already took the item back.
_LEASE = _NOW + _LEASE_ITEM + """
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return {} end
return lease(ARGV[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4], tonumber(ARGV[2]))
"""

# KEYS[1] zset of leases or budget | ARGV[1] lease s  ARGV[2..] members.  Renews members still present and
# returns the ones that are gone (reaped, expired).
_RENEW = _NOW + """
local lost = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] task hash (of the id)  KEYS[4] orphans | ARGV[1] raw  ARGV[2] body
# ARGV[3] task ttl  ARGV[4] lease s  ARGV[5] id.   Replaces a raw seed item by its id. Returns attempts, or -1.
_ADOPT = _NOW + """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return -1 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[3], 'body', ARGV[2])
local attempts = redis.call('HINCRBY', KEYS[3], 'attempts', 1)
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('RPUSH', KEYS[1], ARGV[5])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[5])
return attempts
"""

# Shared by ACK and BURY: write the result once and notify the producer.
_DELIVER = """
local function deliver(result_key, reply_key, result, result_ttl, reply_ttl)
  if result == '' then return 0 end
  if not redis.call('SET', result_key, result, 'NX', 'EX', result_ttl) then return 0 end
  if reply_key ~= result_key then
    redis.call('RPUSH', reply_key, result)
    redis.call('EXPIRE', reply_key, reply_ttl)
  end
  return 1
end
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] task hash  KEYS[4] result  KEYS[5] reply list (= KEYS[4]: none)
# ARGV[1] item  ARGV[2] result JSON  ARGV[3] result ttl  ARGV[4] reply ttl.   Returns 1 if this result won.
_ACK = _DELIVER + """
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return deliver(KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4])
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] dead  KEYS[4] task hash  KEYS[5] result  KEYS[6] reply (= KEYS[5]
# when none) | ARGV[1] item  ARGV[2] dead entry JSON  ARGV[3] dead cap  ARGV[4] result JSON or ''
# ARGV[5] result ttl  ARGV[6] reply ttl.   Returns 0 when the item was no longer in processing.
_BURY = _DELIVER + """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[2])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[3]) - 1)
redis.call('DEL', KEYS[4])
deliver(KEYS[5], KEYS[6], ARGV[4], ARGV[5], ARGV[6])
return 1
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] pending  KEYS[4] task hash | ARGV[1] item  ARGV[2] '1' = refund
# the attempt  ARGV[3] '1' = front  ARGV[4] last error ('' = keep).   Returns 1 if requeued.
_RELEASE = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[3] == '1' then redis.call('LPUSH', KEYS[3], ARGV[1]) else redis.call('RPUSH', KEYS[3], ARGV[1]) end
if redis.call('EXISTS', KEYS[4]) == 1 then
  if ARGV[2] == '1' then redis.call('HINCRBY', KEYS[4], 'attempts', -1) end
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], 'last_error', ARGV[4]) end
end
return 1
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] pending  KEYS[4] orphans | ARGV[1] orphan grace s  ARGV[2] max
# items per run  ARGV[3] task key prefix.   Returns {expired requeued, orphans requeued}.
_REAP = _NOW + """
local function requeue(item, why)
  if redis.call('LREM', KEYS[1], 1, item) == 0 then return 0 end
  redis.call('LPUSH', KEYS[3], item)
  local task = ARGV[3] .. item
  if redis.call('EXISTS', task) == 1 then redis.call('HSET', task, 'last_error', why) end
  return 1
end
local limit, grace = tonumber(ARGV[2]), tonumber(ARGV[1])
local expired = 0
for _, item in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[2], item)
  expired = expired + requeue(item, 'lease expired')
end
local orphaned = 0
for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, limit - 1)) do
  if not redis.call('ZSCORE', KEYS[2], item) then
    local seen = redis.call('ZSCORE', KEYS[4], item)
    if not seen then
      redis.call('ZADD', KEYS[4], now, item)
    elseif now - tonumber(seen) >= grace then
      redis.call('ZREM', KEYS[4], item)
      orphaned = orphaned + requeue(item, 'orphaned after claim')
    end
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - 10 * grace)
return {expired, orphaned}
"""

# KEYS[1] budget | ARGV[1] limit  ARGV[2] lease s  ARGV[3..] members wanted.   Returns the members granted.
_BUDGET_ACQUIRE = _NOW + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
local granted = {}
for i = 3, #ARGV do
  if free <= 0 then break end
  if redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[2]), ARGV[i]) == 1 then
    free = free - 1
    granted[#granted + 1] = ARGV[i]
  end
end
return granted
"""

# KEYS[1] dead  KEYS[2] pending  KEYS[3] task hash  KEYS[4] result | ARGV[1] dead entry  ARGV[2] item to push
# ARGV[3] body ('' for raw items)  ARGV[4] task ttl.   Moves one dead letter back to pending.
_REQUEUE_DEAD = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], 'body', ARGV[3], 'attempts', 0)
  redis.call('EXPIRE', KEYS[3], ARGV[4])
  redis.call('DEL', KEYS[4])
end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""

# Shared by STATS and HEARTBEAT. KEYS[1] pending  KEYS[2] processing  KEYS[3] dead  KEYS[4] budget  KEYS[5] workers
# ARGV[1] worker alive window s.   Everything `stats` shows, in one reply.
_COUNTS = """
return {redis.call('LLEN', KEYS[1]), redis.call('LLEN', KEYS[2]), redis.call('LLEN', KEYS[3]),
        redis.call('ZCOUNT', KEYS[4], now, '+inf'), redis.call('ZCOUNT', KEYS[5], now - tonumber(ARGV[1]), '+inf')}
"""
_STATS = _NOW + _COUNTS

# KEYS as _COUNTS | ARGV[1] alive window s  ARGV[2] worker id.   Records the worker as alive, returns the counts.
_HEARTBEAT = _NOW + """
redis.call('ZADD', KEYS[5], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - 3600)
""" + _COUNTS


# -- Python side --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Keys:
    queue: str

    def _k(self, suffix: str) -> str:
        return f"{{{self.queue}}}:{suffix}"

    @property
    def pending(self) -> str:
        return self._k("pending")

    @property
    def processing(self) -> str:
        return self._k("processing")

    @property
    def leases(self) -> str:
        return self._k("leases")

    @property
    def orphans(self) -> str:
        return self._k("orphans")

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def budget(self) -> str:
        return self._k("budget")

    @property
    def workers(self) -> str:
        return self._k("workers")

    @property
    def task_prefix(self) -> str:
        return self._k("task:")

    @property
    def result_prefix(self) -> str:
        return self._k("result:")

    def task(self, task_id: str) -> str:
        return self.task_prefix + task_id

    def result(self, task_id: str) -> str:
        return self.result_prefix + task_id

    def reply(self, producer: str) -> str:
        return self._k("reply:") + producer


#: the seed guide's results hash, written only when COMPAT_RESULTS_HASH is on (not under the hash tag)
SEED_RESULTS_HASH = "captcha:results"


def is_raw_item(item: str) -> bool:
    """A processing/pending item that is a seed producer's raw JSON rather than a task id."""
    return item.startswith("{")


@dataclass(frozen=True)
class Claimed:
    item: str  # exactly what sits in processing (a task id, or raw seed JSON)
    body: str | None  # task JSON; None when the task hash expired (or for raw items, see `item`)
    attempts: int
    done: bool = False  # a result for this id exists already (solved by an earlier owner)


@dataclass(frozen=True)
class Ack:
    item: str  # as in processing
    result: Result | None  # None: drop the item (its result exists already)
    reply_to: str | None = None


@dataclass(frozen=True)
class QueueStats:
    pending: int
    processing: int
    dead: int
    budget_in_use: int
    workers_alive: int


@dataclass(frozen=True)
class DeadLetter:
    raw: str  # the stored entry, needed to requeue/remove it exactly
    id: str | None
    reason: str
    code: str
    attempts: int
    at: float
    body: str | None  # task JSON when known
    item: str | None  # the raw seed payload when the task never had a body

    @staticmethod
    def parse(raw: str) -> DeadLetter:
        data: dict[str, Any] = json.loads(raw)
        return DeadLetter(raw=raw, id=data.get("id"), reason=str(data.get("reason", "")),
                          code=str(data.get("code", "")), attempts=int(data.get("attempts", 0)),
                          at=float(data.get("at", 0)), body=data.get("body"), item=data.get("raw"))


def dead_entry(*, reason: str, code: str, task_id: str | None, body: str | None, raw: str | None,
               attempts: int) -> str:
    data: dict[str, Any] = {"id": task_id, "reason": reason, "code": code, "attempts": attempts, "at": time.time()}
    if body is not None:
        data["body"] = body
    elif raw is not None:
        data["raw"] = raw
    return json.dumps(data, separators=(",", ":"))


def as_awaitable(value: Awaitable[T] | T) -> Awaitable[T]:
    """redis-py types commands as `Awaitable[T] | T` (sync and async share stubs); ours are async."""
    return cast(Awaitable[T], value)


def _strs(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class Queue:
    """One queue's Redis operations. Stateless apart from the registered scripts; safe to share."""

    def __init__(self, redis: Redis, name: str) -> None:
        self.redis = redis
        self.keys = Keys(name)
        reg = redis.register_script
        self._push, self._claim, self._lease = reg(_PUSH), reg(_CLAIM), reg(_LEASE)
        self._renew, self._adopt, self._ack = reg(_RENEW), reg(_ADOPT), reg(_ACK)
        self._bury, self._release, self._reap = reg(_BURY), reg(_RELEASE), reg(_REAP)
        self._budget_acquire, self._heartbeat = reg(_BUDGET_ACQUIRE), reg(_HEARTBEAT)
        self._requeue_dead, self._stats = reg(_REQUEUE_DEAD), reg(_STATS)

    # producer ---------------------------------------------------------------------------------------------
    async def push(self, tasks: Sequence[tuple[str, str]], *, ttl: int, front: bool = False,
                   batch: int = 500) -> int:
        """Store (id, body) pairs and enqueue their ids: one PUSH call per `batch` tasks, all pipelined."""
        calls = []
        for i in range(0, len(tasks), batch):
            chunk = tasks[i:i + batch]
            args: list[Any] = [ttl, "1" if front else "0"]
            for tid, body in chunk:
                args += [tid, body]
            calls.append(([self.keys.pending, *(self.keys.task(tid) for tid, _ in chunk)], args))
        return sum(int(n) for n in await self._run_many(self._push, calls)) if calls else 0

    # claim ------------------------------------------------------------------------------------------------
    async def claim(self, n: int, *, lease_s: float) -> list[Claimed]:
        k = self.keys
        flat = await self._claim(keys=[k.pending, k.processing, k.leases, k.orphans],
                                 args=[n, lease_s, k.task_prefix, k.result_prefix])
        return [_claimed(flat[i:i + 4]) for i in range(0, len(flat), 4)]

    async def claim_blocking(self, *, timeout_s: float, lease_s: float) -> Claimed | None:
        """Wait up to timeout_s for one item (BLMOVE), then lease it."""
        k = self.keys
        item = await self.redis.blmove(k.pending, k.processing, timeout_s, "LEFT", "RIGHT")  # type: ignore[arg-type]
        if item is None:
            return None
        quad = await self._lease(keys=[k.processing, k.leases, k.orphans],
                                 args=[_str_or_none(item) or "", lease_s, k.task_prefix, k.result_prefix])
        return _claimed(quad) if quad else None

    async def adopt(self, raw: str, task_id: str, body: str, *, ttl: int, lease_s: float) -> int | None:
        """Turn a raw seed item in processing into a task hash + id item. Returns attempts, None if lost."""
        k = self.keys
        attempts = int(await self._adopt(keys=[k.processing, k.leases, k.task(task_id), k.orphans],
                                         args=[raw, body, ttl, lease_s, task_id]))
        return None if attempts < 0 else attempts

    # lease and budget upkeep ------------------------------------------------------------------------------
    async def renew(self, items: Sequence[str], *, lease_s: float) -> list[str]:
        """Extend leases; returns items whose lease is gone."""
        if not items:
            return []
        return _strs(await self._renew(keys=[self.keys.leases], args=[lease_s, *items]))

    async def budget_acquire(self, members: Sequence[str], *, limit: int, lease_s: float) -> list[str]:
        if not members:
            return []
        return _strs(await self._budget_acquire(keys=[self.keys.budget], args=[limit, lease_s, *members]))

    async def budget_renew(self, members: Sequence[str], *, lease_s: float) -> list[str]:
        if not members:
            return []
        return _strs(await self._renew(keys=[self.keys.budget], args=[lease_s, *members]))

    async def budget_release(self, members: Sequence[str]) -> None:
        if members:
            await self.redis.zrem(self.keys.budget, *members)

    def _count_keys(self) -> list[str]:
        k = self.keys
        return [k.pending, k.processing, k.dead, k.budget, k.workers]

    async def heartbeat(self, worker_id: str, *, alive_s: float = 60) -> QueueStats:
        """Record this worker as alive; returns the queue's stats (one round trip for both)."""
        counts = await self._heartbeat(keys=self._count_keys(), args=[alive_s, worker_id])
        return QueueStats(*(int(c) for c in counts))

    async def forget_worker(self, worker_id: str) -> None:
        await self.redis.zrem(self.keys.workers, worker_id)

    # outcomes ---------------------------------------------------------------------------------------------
    def _reply_key(self, reply_to: str | None, task_id: str) -> str:
        return self.keys.reply(reply_to) if reply_to else self.keys.result(task_id)

    async def ack(self, item: str, result: Result | None, *, reply_to: str | None = None, result_ttl: int = 0,
                  reply_ttl: int = 0) -> bool:
        """Finish an item with a result (None: drop it, a result exists). True if this result won."""
        (won,) = await self.ack_many([Ack(item, result, reply_to)], result_ttl=result_ttl, reply_ttl=reply_ttl)
        return won

    async def ack_many(self, acks: Sequence[Ack], *, result_ttl: int, reply_ttl: int) -> list[bool]:
        """ACK several items in one round trip (one ACK script call each, pipelined)."""
        k = self.keys
        calls = []
        for a in acks:
            tid = a.result.id if a.result else a.item
            calls.append(([k.processing, k.leases, k.task(tid), k.result(tid), self._reply_key(a.reply_to, tid)],
                          [a.item, a.result.to_json() if a.result else "", result_ttl, reply_ttl]))
        return [bool(won) for won in await self._run_many(self._ack, calls)]

    async def _run_many(self, script: AsyncScript, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """Calls of one script in one pipelined round trip. EVALSHA directly: redis-py would otherwise send a
        SCRIPT EXISTS round trip before every pipeline. On NOSCRIPT (Redis restarted or flushed its scripts)
        the script is loaded and the batch sent again: then no call of the batch has run, as they share it."""
        for attempt in (1, 2):
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                try:
                    return list(await pipe.execute())
                except rexc.NoScriptError:
                    if attempt == 2:
                        raise
            await as_awaitable(self.redis.script_load(script.script))
        raise AssertionError("unreachable")  # pragma: no cover

    async def bury(self, item: str, entry: str, *, result: Result | None, reply_to: str | None,
                   dead_max: int, result_ttl: int, reply_ttl: int) -> bool:
        """Dead-letter an item (and answer its producer with `result` when the id is known)."""
        k = self.keys
        tid = result.id if result else "-"
        done = await self._bury(
            keys=[k.processing, k.leases, k.dead, k.task(tid), k.result(tid), self._reply_key(reply_to, tid)],
            args=[item, entry, dead_max, result.to_json() if result else "", result_ttl, reply_ttl])
        return bool(done)

    async def release(self, item: str, *, refund_attempt: bool, front: bool, last_error: str = "") -> bool:
        """Put a claimed item back on pending."""
        k = self.keys
        task_key = k.task(item) if not is_raw_item(item) else k.task("-")
        done = await self._release(keys=[k.processing, k.leases, k.pending, task_key],
                                   args=[item, "1" if refund_attempt else "0", "1" if front else "0", last_error])
        return bool(done)

    async def reap(self, *, orphan_grace_s: float, limit: int = 1000) -> tuple[int, int]:
        """Requeue expired leases and stale orphans. Returns (expired, orphaned) counts."""
        k = self.keys
        expired, orphaned = await self._reap(keys=[k.processing, k.leases, k.pending, k.orphans],
                                             args=[orphan_grace_s, limit, k.task_prefix])
        return int(expired), int(orphaned)

    async def last_error(self, task_id: str) -> str | None:
        return _str_or_none(await as_awaitable(self.redis.hget(self.keys.task(task_id), "last_error")))

    async def write_seed_result(self, result: Result) -> None:
        """Compatibility with the seed guide's producers, which poll HGET captcha:results <id>."""
        await as_awaitable(self.redis.hset(SEED_RESULTS_HASH, result.id, result.to_json()))

    # inspection and operations ----------------------------------------------------------------------------
    async def stats(self, *, worker_alive_s: float = 60) -> QueueStats:
        counts = await self._stats(keys=self._count_keys(), args=[worker_alive_s])
        return QueueStats(*(int(c) for c in counts))

    async def dead_letters(self, start: int = 0, count: int = 100) -> list[DeadLetter]:
        raws = await as_awaitable(self.redis.lrange(self.keys.dead, start, start + count - 1))
        return [DeadLetter.parse(r) for r in _strs(raws)]

    async def requeue_dead(self, letter: DeadLetter, *, ttl: int) -> bool:
        k = self.keys
        if letter.body is not None and letter.id:
            item, body, tid = letter.id, letter.body, letter.id
        elif letter.item is not None:
            item, body, tid = letter.item, "", "-"
        else:
            return False
        done = await self._requeue_dead(keys=[k.dead, k.pending, k.task(tid), k.result(tid)],
                                        args=[letter.raw, item, body, ttl])
        return bool(done)

    async def purge_dead(self) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.dead)
            pipe.delete(self.keys.dead)
            count, _ = await pipe.execute()
        return int(count)


def _claimed(quad: Sequence[Any]) -> Claimed:
    item, body, attempts, done = quad
    return Claimed(item=_str_or_none(item) or "", body=_str_or_none(body), attempts=int(cast(int, attempts or 0)),
                   done=bool(done))
