"""Every Redis key and Lua script of a queue, in one place.

Keys (queue ``q``, default ``captcha``).  All share the hash tag ``{q}`` so scripts and BLMOVE work on Redis
Cluster; several queues are several tags.

=========================  ======  ==========================================================================
key                        type    meaning
=========================  ======  ==========================================================================
``{q}:pending``            list    Items waiting, FIFO (pushed right, claimed left; priority pushes left).
                                   An item is a task id, or anything else a producer RPUSHed (the raw JSON of
                                   a seed-guide task, or garbage). KEDA trigger 1 counts it.
``{q}:processing``         list    Claimed items. KEDA trigger 2 counts it, so in-flight work keeps pods.
``{q}:leases``             zset    processing item -> lease expiry (Redis server time, seconds).
``{q}:orphans``            zset    processing item without a lease -> when a reaper first saw it.
``{q}:task:<id>``          hash    ``body`` (task JSON), ``attempts`` (claims so far), ``last_error``,
                                   ``state`` (absent while queued; ``done`` / ``dead`` once finished). TTL
                                   ``TASK_TTL_SECONDS`` from submission. ACK drops the body and keeps the rest
                                   as a tombstone (so a late ``result()`` can tell "result expired" from
                                   "unknown id", and a second submit of the id is a no-op); BURY keeps the body
                                   for ``dead-letters requeue``.
``{q}:result:<id>``        string  Result JSON. Written once (SET NX): the first writer wins. TTL.
``{q}:reply:<producer>``   list    Result JSON pushed for the producer process waiting on it. TTL. The
                                   gateway's replicas share one, ``{q}:reply:gateway``: each result reaches
                                   exactly one of them (metrics, callbacks).
``{q}:callback:<id>``      string  A gateway task's ``pingback`` URL, written before its push (SET NX) and
                                   taken (GETDEL) by the gateway replica that receives the result. TTL
                                   ``TASK_TTL_SECONDS``.
``{q}:dead``               list    Dead letters, newest first: JSON ``{id, reason, code, attempts, at, view}``;
                                   ``view`` is a redacted, bounded view of the payload (no secret in clear).
                                   Capped (LTRIM).
``{q}:budget``             zset    Plan-thread budget: ``<worker>:<slot>`` -> expiry. At most
                                   ``CAPTCHAAI_THREADS`` live members cluster-wide; a slot holds one while it
                                   may call the API.
``{q}:workers``            zset    worker id -> last heartbeat (server time).
``COMPAT_QUEUE_LIST``      list    Optional (off by default): a list seed-guide producers RPUSH raw tasks to
                                   (``captcha:queue``). CLAIM takes from it when pending is empty. Not under
                                   the hash tag unless named so: fine on standalone/Sentinel, CROSSSLOT on
                                   Cluster (the worker then logs it once and serves the queue without it).
=========================  ======  ==========================================================================

An *item* is a task id when it matches ``task.valid_task_id`` (the Lua ``is_id`` pattern is the same rule);
anything else is a raw payload. Items are read as bytes: any bytes are a valid item, and decoding happens per
item in Python (``Claimed``), so one bad item never holds up the others of its batch.

Transitions of one item (each arrow is one atomic step):

    push           producer        -> pending                     (task hash written with TTL, attempts 0;
                                                                   a known id is left alone: idempotent)
    CLAIM          pending (then the compat list) -> processing + lease
                                                                  (attempts + 1; batch, non-blocking).
                                                                   A raw item over MAX_TASK_BYTES goes
                                                                   straight to dead, unread by any worker.
    BLMOVE+LEASE   pending         -> processing, then lease      (blocking path; the gap is covered by
                                                                   the orphan rule below)
    ADOPT          raw JSON task in processing -> its id in processing + lease (task hash created), or
                                   dropped when its id is known already (a repeated push)
    RENEW          lease expiry pushed forward by the owning worker's heartbeat
    ACK            processing + lease -> result (NX) + reply push  (task body dropped, tombstone kept)
    BURY           processing + lease -> dead (+ result + reply push when the id is known)
    RELEASE        processing + lease -> pending (front or back; attempt refunded on graceful drain)
    REAP           expired lease, or lease-less item older than the orphan grace -> pending (front)
    REQUEUE_DEAD   dead -> pending (attempts reset) while the task body is still stored
    LOOKUP         result, or the state of the id: queued / finished (result expired) / unknown
    TENANT_COUNTS  processing items that are gateway task ids (``gw:<tenant>:<n>``), counted by tenant

A reaper runs in every worker; REAP is one script, so two reapers never requeue an item twice (LREM decides).
An item requeued by a reaper that its old owner still solves may be solved twice; ACK's SET NX makes the
producer see exactly one result. When a claim finds a result (or a tombstone) already written, the worker acks
it unsolved.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from redis import exceptions as rexc
from redis.asyncio import Redis
from redis.client import NEVER_DECODE
from redis.commands.core import AsyncScript

from captcha_worker.config import DEFAULT_DEAD_LETTER_MAX, DEFAULT_MAX_TASK_BYTES
from captcha_worker.task import MAX_ID_LENGTH, Result, valid_task_id

T = TypeVar("T")
#: a value read from Redis as it is stored: decoded when it is valid UTF-8, else the bytes themselves
Text = str | bytes

# -- Lua ----------------------------------------------------------------------------------------------------
# Server time keeps leases independent of worker clocks. Scripts are replicated by effects (Redis >= 5).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS[1] pending  then per task: KEYS[2k] task hash, KEYS[2k+1] result | ARGV[1] ttl  ARGV[2] '1' = push to
# the front  ARGV[3..] id, body pairs.   A task whose id is known (hash or result exists) is left alone: a
# repeated submit is a no-op.  Returns how many tasks were new.
_PUSH = """
local pending, ttl, front = KEYS[1], ARGV[1], ARGV[2] == '1'
local ids = {}
for k = 1, (#KEYS - 1) / 2 do
  local task, result = KEYS[2 * k], KEYS[2 * k + 1]
  local id, body = ARGV[2 * k + 1], ARGV[2 * k + 2]
  if redis.call('EXISTS', task) == 0 and redis.call('EXISTS', result) == 0 then
    redis.call('HSET', task, 'body', body, 'attempts', 0)
    redis.call('EXPIRE', task, ttl)
    ids[#ids + 1] = id
  end
end
if #ids > 0 then
  if front then redis.call('LPUSH', pending, unpack(ids)) else redis.call('RPUSH', pending, unpack(ids)) end
end
return #ids
"""

# Shared by CLAIM and LEASE: lease one item that is in processing; return {item, body|false, attempts, flag}
# (flags as ClaimFlag). A raw item over the size limit is buried here, unread: {sha1, false, size, too large}.
_LEASE_ITEM = f"\nlocal MAX_ID = {MAX_ID_LENGTH}" + """
local FLAG_NONE, FLAG_DONE, FLAG_ITEM_TOO_LARGE, FLAG_BODY_TOO_LARGE = 0, 1, 2, 3
local function is_id(item)
  return #item <= MAX_ID and string.find(item, '^[%w_.:%-]+$') ~= nil
end
local function bury_too_large(c, item)
  redis.call('LREM', c.processing, -1, item)
  redis.call('ZREM', c.leases, item)
  local sha1 = redis.sha1hex(item)
  redis.call('LPUSH', c.dead, string.format('{"id":null,"reason":"payload is %d bytes, over the limit of %d",'
    .. '"code":"TASK_TOO_LARGE","attempts":1,"at":%.3f,"view":"(%d bytes, sha1 %s)"}',
    #item, c.max_bytes, now, #item, sha1))
  redis.call('LTRIM', c.dead, 0, c.dead_cap - 1)
  return {sha1, false, #item, FLAG_ITEM_TOO_LARGE}
end
local function lease(c, item)
  if #item > c.max_bytes then return bury_too_large(c, item) end
  redis.call('ZADD', c.leases, now + c.lease_s, item)
  redis.call('ZREM', c.orphans, item)
  if not is_id(item) then return {item, false, 1, FLAG_NONE} end
  local task = c.task_prefix .. item
  if redis.call('EXISTS', c.result_prefix .. item) == 1 or redis.call('HEXISTS', task, 'state') == 1 then
    return {item, false, 0, FLAG_DONE}
  end
  local size = redis.call('HSTRLEN', task, 'body')
  if size == 0 then return {item, false, 0, FLAG_NONE} end
  local attempts = redis.call('HINCRBY', task, 'attempts', 1)
  if size > c.max_bytes then return {item, false, attempts, FLAG_BODY_TOO_LARGE} end
  return {item, redis.call('HGET', task, 'body'), attempts, FLAG_NONE}
end
"""

# KEYS[1] pending  KEYS[2] processing  KEYS[3] leases  KEYS[4] orphans  KEYS[5] dead  KEYS[6] compat list (absent
# when off) | ARGV[1] max items  ARGV[2] lease s  ARGV[3] task key prefix  ARGV[4] result key prefix  ARGV[5] max
# item bytes  ARGV[6] dead cap.   Returns the lease() quadruples, flattened.
_CLAIM = _NOW + _LEASE_ITEM + """
local pending, processing, compat = KEYS[1], KEYS[2], KEYS[6]
local c = {processing = processing, leases = KEYS[3], orphans = KEYS[4], dead = KEYS[5], lease_s = tonumber(ARGV[2]),
           task_prefix = ARGV[3], result_prefix = ARGV[4], max_bytes = tonumber(ARGV[5]), dead_cap = tonumber(ARGV[6])}
local out = {}
for _ = 1, tonumber(ARGV[1]) do
  local item = redis.call('LMOVE', pending, processing, 'LEFT', 'RIGHT')
  if not item and compat then item = redis.call('LMOVE', compat, processing, 'LEFT', 'RIGHT') end
  if not item then break end
  for _, v in ipairs(lease(c, item)) do out[#out + 1] = v end
end
return out
"""

# After a blocking BLMOVE. KEYS[1] processing  KEYS[2] leases  KEYS[3] orphans  KEYS[4] dead | ARGV[1] item
# ARGV[2] lease s  ARGV[3] task key prefix  ARGV[4] result key prefix  ARGV[5] max item bytes  ARGV[6] dead cap.
# Returns {} when a reaper already took the item back, else the lease() quadruple.
_LEASE = _NOW + _LEASE_ITEM + """
local processing, item = KEYS[1], ARGV[1]
if not redis.call('LPOS', processing, item) then return {} end
return lease({processing = processing, leases = KEYS[2], orphans = KEYS[3], dead = KEYS[4],
              lease_s = tonumber(ARGV[2]), task_prefix = ARGV[3], result_prefix = ARGV[4],
              max_bytes = tonumber(ARGV[5]), dead_cap = tonumber(ARGV[6])}, item)
"""

# KEYS[1] zset of leases or budget | ARGV[1] lease s  ARGV[2..] members.  Renews members still present and
# returns the ones that are gone (reaped, expired).
_RENEW = _NOW + """
local zset, lease_s = KEYS[1], tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', zset, ARGV[i]) then
    redis.call('ZADD', zset, now + lease_s, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] task hash (of the id)  KEYS[4] orphans  KEYS[5] result (of the id)
# ARGV[1] raw  ARGV[2] body  ARGV[3] task ttl  ARGV[4] lease s  ARGV[5] id.   Replaces a raw item by its id.
# Returns attempts, LOST (a reaper took the raw item back) or DUPLICATE (the id is known: the raw item is dropped).
_ADOPT = _NOW + """
local LOST, DUPLICATE = -1, -2
local processing, leases, task, orphans, result = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local raw, body, ttl, lease_s, id = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if redis.call('LREM', processing, 1, raw) == 0 then return LOST end
redis.call('ZREM', leases, raw)
redis.call('ZREM', orphans, raw)
if redis.call('EXISTS', task) == 1 or redis.call('EXISTS', result) == 1 then return DUPLICATE end
redis.call('HSET', task, 'body', body)
local attempts = redis.call('HINCRBY', task, 'attempts', 1)
redis.call('EXPIRE', task, ttl)
redis.call('RPUSH', processing, id)
redis.call('ZADD', leases, now + lease_s, id)
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
# ARGV[1] item  ARGV[2] result JSON ('' = drop the item: its result exists)  ARGV[3] result ttl  ARGV[4] reply
# ttl.   Returns 1 if this result won.  The task hash loses its body and stays, until its TTL, as a tombstone.
_ACK = _DELIVER + """
local processing, leases, task, item = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
redis.call('LREM', processing, 1, item)
redis.call('ZREM', leases, item)
if ARGV[2] ~= '' and redis.call('EXISTS', task) == 1 then
  redis.call('HDEL', task, 'body')
  redis.call('HSET', task, 'state', 'done')
end
return deliver(KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4])
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] dead  KEYS[4] task hash  KEYS[5] result  KEYS[6] reply (= KEYS[5]
# when none) | ARGV[1] item  ARGV[2] dead entry JSON  ARGV[3] dead cap  ARGV[4] result JSON or ''  ARGV[5] result
# ttl  ARGV[6] reply ttl  ARGV[7] '1' = the item is a raw payload naming the id: answer only an unknown id (never
# pre-empt the result of a real task of that id).   Returns {buried, answered}: buried 0 when the item was no
# longer in processing; answered 1 when the result was written.
_BURY = _DELIVER + """
local processing, leases, dead, task, item = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
if redis.call('LREM', processing, 1, item) == 0 then return {0, 0} end
redis.call('ZREM', leases, item)
redis.call('LPUSH', dead, ARGV[2])
redis.call('LTRIM', dead, 0, tonumber(ARGV[3]) - 1)
local known = redis.call('EXISTS', task) == 1
if known and ARGV[7] ~= '1' then redis.call('HSET', task, 'state', 'dead') end
if known and ARGV[7] == '1' then return {1, 0} end
return {1, deliver(KEYS[5], KEYS[6], ARGV[4], ARGV[5], ARGV[6])}
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] pending  KEYS[4] task hash | ARGV[1] item  ARGV[2] '1' = refund
# the attempt  ARGV[3] '1' = front  ARGV[4] last error ('' = keep).   Returns 1 if requeued.
_RELEASE = """
local processing, leases, pending, task, item = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
if redis.call('LREM', processing, 1, item) == 0 then return 0 end
redis.call('ZREM', leases, item)
if ARGV[3] == '1' then redis.call('LPUSH', pending, item) else redis.call('RPUSH', pending, item) end
if redis.call('EXISTS', task) == 1 then
  if ARGV[2] == '1' then redis.call('HINCRBY', task, 'attempts', -1) end
  if ARGV[4] ~= '' then redis.call('HSET', task, 'last_error', ARGV[4]) end
end
return 1
"""

# KEYS[1] processing  KEYS[2] leases  KEYS[3] pending  KEYS[4] orphans | ARGV[1] orphan grace s  ARGV[2] max
# items per run  ARGV[3] task key prefix.   Returns {expired requeued, orphans requeued}.
_REAP = _NOW + """
local processing, leases, pending, orphans = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local grace, limit, task_prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local function requeue(item, why)
  if redis.call('LREM', processing, 1, item) == 0 then return 0 end
  redis.call('LPUSH', pending, item)
  local task = task_prefix .. item
  if redis.call('EXISTS', task) == 1 then redis.call('HSET', task, 'last_error', why) end
  return 1
end
local expired = 0
for _, item in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', leases, item)
  expired = expired + requeue(item, 'lease expired')
end
local orphaned = 0
for _, item in ipairs(redis.call('LRANGE', processing, 0, limit - 1)) do
  if not redis.call('ZSCORE', leases, item) then
    local seen = redis.call('ZSCORE', orphans, item)
    if not seen then
      redis.call('ZADD', orphans, now, item)
    elseif now - tonumber(seen) >= grace then
      redis.call('ZREM', orphans, item)
      orphaned = orphaned + requeue(item, 'orphaned after claim')
    end
  end
end
redis.call('ZREMRANGEBYSCORE', orphans, '-inf', now - 10 * grace)
return {expired, orphaned}
"""

# KEYS[1] budget | ARGV[1] limit  ARGV[2] lease s  ARGV[3..] members wanted.   Returns the members granted.
_BUDGET_ACQUIRE = _NOW + """
local budget, lease_s = KEYS[1], tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', budget, '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', budget)
local granted = {}
for i = 3, #ARGV do
  if free <= 0 then break end
  if redis.call('ZADD', budget, 'NX', now + lease_s, ARGV[i]) == 1 then
    free = free - 1
    granted[#granted + 1] = ARGV[i]
  end
end
return granted
"""

# KEYS[1] dead  KEYS[2] pending  KEYS[3] task hash  KEYS[4] result | ARGV[1] dead entry  ARGV[2] item to push
# ARGV[3] mode: 'stored' (the task's stored body), 'body' (ARGV[5], from an entry of an older version), 'raw'
# (push ARGV[2] as it is)  ARGV[4] task ttl  ARGV[5] body.   Returns 1, 0 (entry gone) or GONE (no body left).
_REQUEUE_DEAD = """
local GONE = -1
local dead, pending, task, result = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local entry, item, mode, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not redis.call('LPOS', dead, entry) then return 0 end
if mode == 'stored' and redis.call('HEXISTS', task, 'body') == 0 then return GONE end
redis.call('LREM', dead, 1, entry)
if mode ~= 'raw' then
  if mode == 'body' then redis.call('HSET', task, 'body', ARGV[5]) end
  redis.call('HSET', task, 'attempts', 0)
  redis.call('HDEL', task, 'state', 'last_error')
  redis.call('EXPIRE', task, ttl)
  redis.call('DEL', result)
end
redis.call('RPUSH', pending, item)
return 1
"""

# KEYS[2k-1] result, KEYS[2k] task hash of the k-th id.   Per id: its result JSON, or a marker (Lookup).
_LOOKUP = """
local QUEUED, FINISHED, UNKNOWN = 'queued', 'finished', ''
local out = {}
for i = 1, #KEYS, 2 do
  local result, task = redis.call('GET', KEYS[i]), KEYS[i + 1]
  if result then out[#out + 1] = result
  elseif redis.call('HEXISTS', task, 'state') == 1 then out[#out + 1] = FINISHED
  elseif redis.call('EXISTS', task) == 1 then out[#out + 1] = QUEUED
  else out[#out + 1] = UNKNOWN end
end
return out
"""

#: gateway task ids are ``gw:<tenant>:<public id>`` (gateway.ids); TENANT_COUNTS reads the tenant from them
GATEWAY_ID_PREFIX = "gw"

# KEYS[1] processing | ARGV[1] gateway id prefix.   Returns {tenant, count, ...} for the gateway ids in processing
# (one reply of a few entries, whatever the size of the items).
_TENANT_COUNTS = """
local processing, prefix = KEYS[1], '^' .. ARGV[1] .. ':([a-z0-9%-]+):%d+$'
local counts, names = {}, {}
for _, item in ipairs(redis.call('LRANGE', processing, 0, -1)) do
  local tenant = #item <= 128 and string.match(item, prefix) or nil
  if tenant then
    if not counts[tenant] then counts[tenant] = 0; names[#names + 1] = tenant end
    counts[tenant] = counts[tenant] + 1
  end
end
local out = {}
for _, name in ipairs(names) do out[#out + 1] = name; out[#out + 1] = counts[name] end
return out
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

# KEYS[1] the seed guide's results hash | ARGV[1] field (task id)  ARGV[2] entry JSON  ARGV[3] ttl s.   The hash
# is bounded: its TTL is refreshed by every write, and each field expires by itself where the server has
# HEXPIRE (Redis >= 7.4; pcall: older servers just keep the hash TTL).
_SEED_RESULT = """
local hash, field, ttl = KEYS[1], ARGV[1], ARGV[3]
redis.call('HSET', hash, field, ARGV[2])
redis.call('EXPIRE', hash, ttl)
redis.pcall('HEXPIRE', hash, ttl, 'FIELDS', 1, field)
return 1
"""


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

    def callback(self, task_id: str) -> str:
        return self._k("callback:") + task_id

    def own(self, name: str) -> bool:
        """Whether a key name is one of this queue's own keys (under its hash tag)."""
        return name.startswith(self._k(""))


#: the seed guide's results hash, written only when COMPAT_RESULTS_HASH is on (not under the hash tag)
SEED_RESULTS_HASH = "captcha:results"
#: the list the seed guide's producers RPUSH to (COMPAT_QUEUE_LIST, off unless set)
SEED_QUEUE_LIST = "captcha:queue"


def is_raw_item(item: Text) -> bool:
    """A queue item that is not a task id: a raw payload (a seed producer's JSON, or anything else)."""
    return isinstance(item, bytes) or not valid_task_id(item)


def _tid(item: Text) -> str:
    """The task id an item is, or '-' (no task key) for a raw payload."""
    return "-" if is_raw_item(item) else cast(str, item)


def item_ref(item: Text) -> str:
    """A loggable reference to a queue item: the id, or the size of a raw payload (which may hold params)."""
    return f"<raw item, {len(item)} bytes>" if is_raw_item(item) else cast(str, item)


class ClaimFlag(enum.IntEnum):
    """What CLAIM/LEASE found besides the item (the Lua FLAG_* sentinels)."""

    NONE = 0
    DONE = 1  # a result (or a tombstone) for this id exists: solved by an earlier owner, or a repeated push
    ITEM_TOO_LARGE = 2  # a raw item over the size limit: dead-lettered by the script, never read
    BODY_TOO_LARGE = 3  # the stored body is over the size limit (not shipped)


@dataclass(frozen=True)
class Claimed:
    item: Text  # exactly what sits in processing (a task id, or a raw payload); for ITEM_TOO_LARGE its SHA-1
    body: Text | None  # task JSON; None for raw items, a missing body, and the flags
    attempts: int  # claims so far; for ITEM_TOO_LARGE the item's size in bytes
    flag: ClaimFlag = ClaimFlag.NONE

    @property
    def done(self) -> bool:
        return self.flag is ClaimFlag.DONE


@dataclass(frozen=True)
class Ack:
    item: Text  # as in processing
    result: Result | None  # None: drop the item (its result exists already)
    reply_to: str | None = None


@dataclass(frozen=True)
class QueueStats:
    pending: int
    processing: int
    dead: int
    budget_in_use: int
    workers_alive: int


class Lookup(enum.Enum):
    """What LOOKUP says of an id that has no result (the Lua markers)."""

    QUEUED = "queued"  # pending or being solved
    FINISHED = "finished"  # finished, but its result expired (RESULT_TTL_SECONDS)
    UNKNOWN = ""  # never submitted to this queue, or so long ago that even its tombstone expired


@dataclass(frozen=True)
class DeadLetter:
    raw: Text  # the stored entry, needed to requeue/remove it exactly
    id: str | None
    reason: str
    code: str
    attempts: int
    at: float
    view: str | None  # a redacted, bounded view of the payload
    legacy_body: str | None = None  # entries written before views existed held the body in clear...
    legacy_raw: str | None = None  # ... or the raw payload

    @staticmethod
    def parse(raw: Text) -> DeadLetter:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise TypeError
            return DeadLetter(raw=raw, id=_opt_str(data.get("id")), reason=str(data.get("reason", "")),
                              code=str(data.get("code", "")), attempts=int(data.get("attempts", 0)),
                              at=float(data.get("at", 0)), view=_opt_str(data.get("view")),
                              legacy_body=_opt_str(data.get("body")), legacy_raw=_opt_str(data.get("raw")))
        except (ValueError, TypeError):
            return DeadLetter(raw=raw, id=None, reason="unreadable dead-letter entry", code="", attempts=0, at=0.0,
                              view=None)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def dead_entry(*, reason: str, code: str, task_id: str | None, view: str | None, attempts: int) -> str:
    """A dead-letter entry. `view` must already be redacted (task.payload_view)."""
    data: dict[str, Any] = {"id": task_id, "reason": reason, "code": code, "attempts": attempts, "at": time.time()}
    if view is not None:
        data["view"] = view
    return json.dumps(data, separators=(",", ":"))


def as_awaitable(value: Awaitable[T] | T) -> Awaitable[T]:
    """redis-py types commands as `Awaitable[T] | T` (sync and async share stubs); ours are async."""
    return cast(Awaitable[T], value)


def as_text(value: bytes) -> Text:
    """A raw reply value as Text: str when it is valid UTF-8 (what redis-py would have decoded), else bytes."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


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
        self._requeue_dead, self._stats, self._lookup = reg(_REQUEUE_DEAD), reg(_STATS), reg(_LOOKUP)
        self._seed_result, self._tenant_counts = reg(_SEED_RESULT), reg(_TENANT_COUNTS)

    # producer ---------------------------------------------------------------------------------------------
    async def push(self, tasks: Sequence[tuple[str, str]], *, ttl: int, front: bool = False,
                   batch: int = 500) -> int:
        """Store (id, body) pairs and enqueue their ids: one PUSH call per `batch` tasks, all pipelined.
        Ids already known (queued, or finished within the task TTL) are left alone. Returns how many were new."""
        calls = []
        for i in range(0, len(tasks), batch):
            chunk = tasks[i:i + batch]
            keys, args = [self.keys.pending], [ttl, "1" if front else "0"]
            for tid, body in chunk:
                keys += [self.keys.task(tid), self.keys.result(tid)]
                args += [tid, body]
            calls.append((keys, args))
        return sum(int(n) for n in await self._run_many(self._push, calls)) if calls else 0

    async def lookup(self, ids: Sequence[str]) -> list[Text | Lookup]:
        """Per id: its stored result JSON, or what is known of it (one script call for all)."""
        if not ids:
            return []
        keys = [k for i in ids for k in (self.keys.result(i), self.keys.task(i))]
        values = await self._eval_raw(self._lookup, keys, [])
        return [_lookup_marker(v) for v in values]

    # claim ------------------------------------------------------------------------------------------------
    def _claim_args(self, lease_s: float, max_bytes: int, dead_max: int) -> list[Any]:
        return [lease_s, self.keys.task_prefix, self.keys.result_prefix, max_bytes, dead_max]

    async def claim(self, n: int, *, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                    dead_max: int = DEFAULT_DEAD_LETTER_MAX, compat_list: str | None = None) -> list[Claimed]:
        """Claim up to n items from pending (then from `compat_list`), leased. Raw items over `max_bytes` are
        dead-lettered by the script and come back flagged ITEM_TOO_LARGE."""
        k = self.keys
        keys = [k.pending, k.processing, k.leases, k.orphans, k.dead, *([compat_list] if compat_list else [])]
        flat = await self._eval_raw(self._claim, keys, [n, *self._claim_args(lease_s, max_bytes, dead_max)])
        return [_claimed(flat[i:i + 4]) for i in range(0, len(flat), 4)]

    async def claim_blocking(self, *, timeout_s: float, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                             dead_max: int = DEFAULT_DEAD_LETTER_MAX) -> Claimed | None:
        """Wait up to timeout_s for one item (BLMOVE), then lease it."""
        k = self.keys
        item = await self._raw("BLMOVE", k.pending, k.processing, "LEFT", "RIGHT", timeout_s)
        if item is None:
            return None
        quad = await self._eval_raw(self._lease, [k.processing, k.leases, k.orphans, k.dead],
                                    [item, *self._claim_args(lease_s, max_bytes, dead_max)])
        return _claimed(quad) if quad else None

    async def adopt(self, raw: Text, task_id: str, body: str, *, ttl: int, lease_s: float) -> int | None:
        """Turn a raw item in processing into a task hash + id item. Returns attempts; None when a reaper took
        the item back; 0 when the id is known already (the raw item was a repeated push: dropped)."""
        k = self.keys
        attempts = int(await self._adopt(keys=[k.processing, k.leases, k.task(task_id), k.orphans, k.result(task_id)],
                                         args=[raw, body, ttl, lease_s, task_id]))
        return None if attempts == -1 else max(attempts, 0)

    # lease and budget upkeep ------------------------------------------------------------------------------
    async def renew(self, items: Sequence[Text], *, lease_s: float) -> list[Text]:
        """Extend leases; returns items whose lease is gone."""
        if not items:
            return []
        return [as_text(v) for v in await self._eval_raw(self._renew, [self.keys.leases], [lease_s, *items])]

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

    async def ack(self, item: Text, result: Result | None, *, reply_to: str | None = None, result_ttl: int = 0,
                  reply_ttl: int = 0) -> bool:
        """Finish an item with a result (None: drop it, a result exists). True if this result won."""
        (won,) = await self.ack_many([Ack(item, result, reply_to)], result_ttl=result_ttl, reply_ttl=reply_ttl)
        return won

    async def ack_many(self, acks: Sequence[Ack], *, result_ttl: int, reply_ttl: int) -> list[bool]:
        """ACK several items in one round trip (one ACK script call each, pipelined)."""
        k = self.keys
        calls = []
        for a in acks:
            tid = a.result.id if a.result else _tid(a.item)
            calls.append(([k.processing, k.leases, k.task(tid), k.result(tid), self._reply_key(a.reply_to, tid)],
                          [a.item, a.result.to_json() if a.result else "", result_ttl, reply_ttl]))
        return [bool(won) for won in await self._run_many(self._ack, calls)]

    async def _run_many(self, script: AsyncScript, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """Calls of one script in one pipelined round trip. EVALSHA directly: redis-py would otherwise send a
        SCRIPT EXISTS round trip before every pipeline. On NOSCRIPT (Redis restarted or flushed its scripts)
        the script is loaded and the batch sent again: then no call of the batch has run, as they share it.
        A single call goes without a pipeline (a gateway's in.php pushes one task per request)."""
        for attempt in (1, 2):
            if len(calls) == 1:
                keys, args = calls[0]
                try:
                    return [await as_awaitable(self.redis.evalsha(script.sha, len(keys), *keys, *args))]
                except rexc.NoScriptError:
                    if attempt == 2:
                        raise
                await as_awaitable(self.redis.script_load(script.script))
                continue
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

    async def _eval_raw(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call whose reply is left as bytes (it carries queue items, which may be any bytes)."""
        for attempt in (1, 2):
            try:
                return await self._raw("EVALSHA", script.sha, len(keys), *keys, *args)
            except rexc.NoScriptError:
                if attempt == 2:
                    raise
            await as_awaitable(self.redis.script_load(script.script))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _raw(self, *args: Any) -> Any:
        """A command whose reply is left as bytes: it carries queue items, which may be any bytes."""
        return await self.redis.execute_command(*args, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]

    async def bury(self, item: Text, entry: str, *, result: Result | None, reply_to: str | None,
                   dead_max: int, result_ttl: int, reply_ttl: int, raw: bool = False) -> tuple[bool, bool]:
        """Dead-letter an item (and answer its producer with `result` when the id is known). `raw`: the item is
        a raw payload naming `result.id`; a task of that id that exists already is then not answered.
        Returns (buried, answered)."""
        k = self.keys
        tid = result.id if result else "-"
        done = await self._bury(
            keys=[k.processing, k.leases, k.dead, k.task(tid), k.result(tid), self._reply_key(reply_to, tid)],
            args=[item, entry, dead_max, result.to_json() if result else "", result_ttl, reply_ttl,
                  "1" if raw else "0"])
        buried, answered = done
        return bool(buried), bool(answered)

    async def release(self, item: Text, *, refund_attempt: bool, front: bool, last_error: str = "") -> bool:
        """Put a claimed item back on pending."""
        k = self.keys
        task_key = k.task(_tid(item))
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

    async def write_seed_result(self, task_id: str, entry: str, *, ttl: int) -> None:
        """Compatibility with the seed guide's consumers, which poll HGET captcha:results <id> (bounded: TTL)."""
        await self._seed_result(keys=[SEED_RESULTS_HASH], args=[task_id, entry, ttl])

    # inspection and operations ----------------------------------------------------------------------------
    async def tenant_counts(self) -> dict[str, int]:
        """Claimed gateway tasks (in processing) by tenant."""
        flat = await self._tenant_counts(keys=[self.keys.processing], args=[GATEWAY_ID_PREFIX])
        names = _strs(flat[0::2])
        return {name: int(n) for name, n in zip(names, flat[1::2], strict=True)}

    async def stats(self, *, worker_alive_s: float = 60) -> QueueStats:
        counts = await self._stats(keys=self._count_keys(), args=[worker_alive_s])
        return QueueStats(*(int(c) for c in counts))

    async def dead_letters(self, start: int = 0, count: int = 100) -> list[DeadLetter]:
        raws = await self._raw("LRANGE", self.keys.dead, start, start + count - 1)
        return [DeadLetter.parse(as_text(r)) for r in raws]

    async def requeue_dead(self, letter: DeadLetter, *, ttl: int) -> bool | None:
        """Put a dead letter's task back on pending (attempts reset). True when requeued, False when the entry
        is gone (requeued or purged meanwhile), None when there is nothing to requeue: the task's body has
        expired (TASK_TTL_SECONDS), or the payload was never a storable task (a raw payload is kept only as a
        redacted view)."""
        k = self.keys
        if letter.id and valid_task_id(letter.id) and letter.legacy_raw is None:
            item, tid = letter.id, letter.id
            mode, body = ("body", letter.legacy_body) if letter.legacy_body is not None else ("stored", "")
        elif letter.legacy_raw is not None:
            item, tid, mode, body = letter.legacy_raw, "-", "raw", ""
        else:
            return None
        done = int(await self._requeue_dead(keys=[k.dead, k.pending, k.task(tid), k.result(tid)],
                                            args=[letter.raw, item, mode, ttl, body]))
        return None if done < 0 else bool(done)

    async def purge_dead(self) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.dead)
            pipe.delete(self.keys.dead)
            count, _ = await pipe.execute()
        return int(count)


def _lookup_marker(value: bytes) -> Text | Lookup:
    """A LOOKUP value: a marker, or a result (never equal to a marker: results are JSON objects)."""
    try:
        return Lookup(value.decode())
    except (UnicodeDecodeError, ValueError):
        return as_text(value)


def _claimed(quad: Sequence[Any]) -> Claimed:
    item, body, attempts, flag = quad
    return Claimed(item=as_text(item), body=None if body is None else as_text(body), attempts=int(attempts or 0),
                   flag=ClaimFlag(int(flag)))
