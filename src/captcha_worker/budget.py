"""The plan-thread budget: one limit for the whole cluster, held in Redis, and one unit for every solve that may be
running at CaptchaAI.

Keys (their rows are in ``queue``'s key table too):

* ``{q}:budget`` (zset) ``unit -> expiry`` (server time). A unit is ``t:<task id>``: the task takes it when it is
  claimed (atomically with the claim: *acquire*), its worker's heartbeat keeps it alive with the lease (*renew*),
  and once ``in.php`` answered it is held until the latest time that solve can still be running at the API
  (``methods.Kind.solve_timeout_s`` after the submission: *hold*), whoever holds the task then — a worker that dies
  or drains leaves it counted, and the next worker resumes the solve under the same unit. It goes when the solve's
  outcome is known (*release*: an answer, an error answer), or expires by itself. ``t:<task id>~<captcha id>`` is
  a solve of a worker that lost its task to another one (it stalled past its lease) and submitted all the same.
* ``{q}:limits`` (zset) ``<limit>:<worker id> -> expiry``: the limit each live worker enforces
  (``CAPTCHAAI_THREADS``, or the plan's threads when ``threadsinfo`` reports fewer), renewed with its heartbeat.
  A *hold* (``captcha-worker limit``, the chart's pre-upgrade hook) is an entry of the same form whose holder is no
  worker (``<limit>:rollout-<release>``): nobody renews it, it expires at the time it was given.

The *effective limit* is the smallest limit a live worker enforces, the caller's own included: raising threads
takes effect once no live worker enforces a lower limit; lowering takes effect at once, because no claim takes a
unit while the units in use reach it (the solves already running finish, none starts).

The Lua functions of :data:`LUA` run inside the queue's scripts (CLAIM and LEASE acquire, ACK / BURY / RELEASE
release or hold) so that a claim and its unit are one atomic step; :class:`Budget` is the Python side.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from captcha_worker.connection import Client, SlotScript

#: no limit of the caller's own (``stats`` from a CLI); a limit registered by a live worker still applies
UNLIMITED = -1
UNIT_PREFIX = "t:"
STRAY_MARK = "~"

# Need a local `now` (the scripts' server time) declared before them. SETTLE_LUA, for the scripts that only
# release or hold a unit (ACK, BURY, RELEASE, RECORD), reads `now` only to hold one; LUA adds acquiring and the limit.
# `b` is {units = key, limits = key, own = limit or UNLIMITED}.
SETTLE_LUA = f"""
local UNLIMITED, UNIT_PREFIX, STRAY_MARK = {UNLIMITED}, '{UNIT_PREFIX}', '{STRAY_MARK}'
""" + """
-- release (hold_s 0) or hold: the solve may run hold_s more seconds at the API, so the unit stays counted that long.
-- `mine`: the caller still owns the task (a unit named after a task another worker took over is left to it).
local function budget_settle(units, unit, hold_s, mine)
  if unit == '' then return end
  if hold_s > 0 then
    redis.call('ZADD', units, 'GT', now + hold_s, unit)
  elseif mine or string.find(unit, STRAY_MARK, 1, true) then
    redis.call('ZREM', units, unit)
  end
end
"""
LUA = SETTLE_LUA + """
local BUDGET_FULL, BUDGET_TAKEN, BUDGET_HELD = 0, 1, 2
-- the smallest limit of a live worker, and the caller's own
local function budget_limit(b)
  local limit = b.own
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', b.limits, now, '+inf')) do
    local l = tonumber(string.match(member, '^(%d+):'))
    if l and (limit == UNLIMITED or l < limit) then limit = l end
  end
  return limit
end
-- drop expired units; read the limit and the units in use
local function budget_open(b)
  redis.call('ZREMRANGEBYSCORE', b.units, '-inf', now)
  b.limit = budget_limit(b)
  b.in_use = redis.call('ZCARD', b.units)
  return b
end
-- acquire: HELD when the unit exists (a solve left running by an earlier owner), TAKEN when a free one was taken,
-- FULL when none is free
local function budget_take(b, unit, lease_s)
  if b.limit == UNLIMITED or b.in_use < b.limit then
    if redis.call('ZADD', b.units, 'NX', now + lease_s, unit) == 1 then  -- one call on the common path
      b.in_use = b.in_use + 1
      return BUDGET_TAKEN
    end
  elseif not redis.call('ZSCORE', b.units, unit) then
    return BUDGET_FULL
  end
  redis.call('ZADD', b.units, 'GT', now + lease_s, unit)
  return BUDGET_HELD
end
"""

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS[1] units  KEYS[2] limits | ARGV[1] own limit  ARGV[2] lease s  ARGV[3..] units wanted.   Returns the units
# the caller holds now (taken, or held already).
_ACQUIRE = _NOW + LUA + """
local b = budget_open({units = KEYS[1], limits = KEYS[2], own = tonumber(ARGV[1])})
local lease_s = tonumber(ARGV[2])
local got = {}
for i = 3, #ARGV do
  if budget_take(b, ARGV[i], lease_s) ~= BUDGET_FULL then got[#got + 1] = ARGV[i] end
end
return got
"""

# KEYS[1] units | ARGV[1] lease s  ARGV[2..] units.   Keeps each unit at least a lease from now (never shortens a
# hold); a unit that is gone (it expired while its worker stalled) is counted again at once, since its solve runs
# on. Returns those.
_RENEW = _NOW + """
local units, lease_s = KEYS[1], tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  if not redis.call('ZSCORE', units, ARGV[i]) then lost[#lost + 1] = ARGV[i] end
  redis.call('ZADD', units, 'GT', now + lease_s, ARGV[i])
end
return lost
"""

# KEYS[1] units  KEYS[2] limits | ARGV[1] own limit.   Returns {effective limit, units in use}.
_STATE = _NOW + LUA + """
local b = budget_open({units = KEYS[1], limits = KEYS[2], own = tonumber(ARGV[1])})
return {b.limit, b.in_use}
"""

# KEYS[1] units  KEYS[2] limits | ARGV[1] member (``limit_member``)  ARGV[2] hold s.   Registers the member until
# hold s from now, replacing an earlier entry of the same holder; returns {effective limit, units in use}.
_HOLD = _NOW + LUA + """
local units, limits, member, hold_s = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local HOLDER = '^%d+:(.*)$'
local holder = string.match(member, HOLDER)
for _, m in ipairs(redis.call('ZRANGE', limits, 0, -1)) do
  if m ~= member and string.match(m, HOLDER) == holder then redis.call('ZREM', limits, m) end
end
redis.call('ZADD', limits, now + hold_s, member)
redis.call('ZREMRANGEBYSCORE', limits, '-inf', now)
local b = budget_open({units = units, limits = limits, own = UNLIMITED})
return {b.limit, b.in_use}
"""


def unit_of(task_id: str) -> str:
    """The budget unit of a task's solve."""
    return UNIT_PREFIX + task_id


def stray_unit(task_id: str, captcha_id: str) -> str:
    """The unit of a solve submitted by a worker that no longer owns its task (see the module docstring)."""
    return f"{UNIT_PREFIX}{task_id}{STRAY_MARK}{captcha_id}"


def limit_member(worker_id: str, limit: int) -> str:
    """A worker's (or a hold's) entry in ``{q}:limits``: the one format ``_HOLD`` writes too."""
    return f"{limit}:{worker_id}"


@dataclass(frozen=True)
class BudgetState:
    limit: int | None  # the effective limit; None when no live worker registered one (and the caller has none)
    in_use: int

    @classmethod
    def of(cls, limit: int, in_use: int) -> BudgetState:
        return cls(None if limit == UNLIMITED else limit, in_use)


class Budget:
    """The budget's operations outside a claim: acquire, renew, release, and the limit in effect (``limit``;
    ``state`` adds the units in use). ``RedisQueue.budget`` is one, on the queue's keys; a caller that shares the plan
    some other way (tenant shares of a gateway) builds on these four and the key layout above."""

    def __init__(self, redis: Client, *, units: str, limits: str) -> None:
        self.redis = redis
        self.units, self.limits = units, limits
        self._acquire, self._renew, self._state, self._hold = (
            SlotScript(redis, s) for s in (_ACQUIRE, _RENEW, _STATE, _HOLD))

    async def acquire(self, units: Sequence[str], *, limit: int, lease_s: float) -> list[str]:
        """Take free units (or find them held already) up to the effective limit; returns the units held."""
        if not units:
            return []
        got = await self._acquire(keys=[self.units, self.limits], args=[limit, lease_s, *units])
        return _strs(got)

    async def renew(self, units: Sequence[str], *, lease_s: float) -> list[str]:
        """Keep units alive a lease longer (a hold is never shortened); returns the units that had expired (they
        are counted again: their solves run on)."""
        if not units:
            return []
        return _strs(await self._renew(keys=[self.units], args=[lease_s, *units]))

    async def release(self, units: Sequence[str]) -> None:
        if units:
            await cast(Awaitable[Any], self.redis.zrem(self.units, *units))

    async def hold_limit(self, holder: str, limit: int, *, hold_s: float) -> BudgetState:
        """Enforce `limit` for `hold_s` seconds (server time) under `holder`, a name no worker uses (an earlier hold
        of the holder is replaced); returns the state in effect then. Lower than the others: in effect at once (no
        claim takes a unit while the units in use reach it); higher: no change (the smallest limit applies)."""
        effective, in_use = await self._hold(keys=[self.units, self.limits], args=[limit_member(holder, limit), hold_s])
        return BudgetState.of(int(effective), int(in_use))

    async def limit(self, *, own: int = UNLIMITED) -> int | None:
        """The limit in effect: the smallest of `own` and every live worker's; None when there is none."""
        return (await self.state(limit=own)).limit

    async def state(self, *, limit: int = UNLIMITED) -> BudgetState:
        """The effective limit (with the caller's own `limit`) and the units in use."""
        effective, in_use = await self._state(keys=[self.units, self.limits], args=[limit])
        return BudgetState.of(int(effective), int(in_use))


def _strs(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]
