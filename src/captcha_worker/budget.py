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
  A *hold* (``captcha-worker limit``, the chart's pre-upgrade hook) is an entry ``<limit>:hold:<holder>``
  (``<limit>:hold:rollout-<release>``, :func:`hold_member`): nobody renews it, it expires at the time it was given.
  A worker id never contains ``:`` (:func:`limit_member` refuses one), so the part after ``<limit>:`` of a hold
  (``hold:<holder>``) is never a worker's id: a worker's HEARTBEAT / FORGET, which drop the entries of its id, leave
  every hold alone (an older worker's script too: the Lua is unchanged), and a hold replaces the holder's earlier
  hold, never a worker's entry. A hold written by a CLI before this mark (``<limit>:<holder>``) is read as a worker's
  entry of that name until it expires (at most its ``--hold``); a new hold of the holder does not replace it (the
  smaller of the two applies until then).

The *effective limit* is the smallest limit a live worker enforces, the caller's own included: raising threads
takes effect once no live worker enforces a lower limit; lowering takes effect at once, because no claim takes a
unit while the units in use reach it (the solves already running finish, none starts).

The Lua functions of ``store/lua/lib/budget.lua`` run inside the queue's scripts (CLAIM and LEASE acquire, ACK /
BURY / RELEASE release or hold) so that a claim and its unit are one atomic step; :class:`Budget` is the Python
side.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, cast

from captcha_worker.connection import Client
from captcha_worker.store.records import UNLIMITED, BudgetState
from captcha_worker.store.scripts import Constant, SlotScript, lua

UNIT_PREFIX = "t:"
STRAY_MARK = "~"

#: the constants of the budget's Lua (store/lua/lib/budget.lua, budget_*.lua)
LUA_CONSTANTS: dict[str, Constant] = {"UNLIMITED": UNLIMITED, "UNIT_PREFIX": UNIT_PREFIX, "STRAY_MARK": STRAY_MARK}
_ACQUIRE = lua("budget_acquire", LUA_CONSTANTS)
_RENEW = lua("budget_renew", LUA_CONSTANTS)
_STATE = lua("budget_state", LUA_CONSTANTS)
_HOLD = lua("budget_hold", LUA_CONSTANTS)


def unit_of(task_id: str) -> str:
    """The budget unit of a task's solve."""
    return UNIT_PREFIX + task_id


def stray_unit(task_id: str, captcha_id: str) -> str:
    """The unit of a solve submitted by a worker that no longer owns its task (see the module docstring)."""
    return f"{UNIT_PREFIX}{task_id}{STRAY_MARK}{captcha_id}"


HOLD_MARK = "hold:"


def limit_member(worker_id: str, limit: int) -> str:
    """A worker's entry in ``{q}:limits``. A worker id holds no ``:`` (``worker.default_worker_id``): a hold's entry
    (:func:`hold_member`) is never taken for a worker's."""
    if ":" in worker_id:
        raise ValueError(f"a worker id holds no ':' (got {worker_id!r})")
    return f"{limit}:{worker_id}"


def hold_member(holder: str, limit: int) -> str:
    """A hold's entry in ``{q}:limits``: ``<limit>:hold:<holder>``, a namespace no worker id reaches."""
    return f"{limit}:{HOLD_MARK}{holder}"


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
        """Enforce `limit` for `hold_s` seconds (server time) under `holder` (entry :func:`hold_member`, apart from
        every worker's; an earlier hold of the holder is replaced); returns the state in effect then. Lower than the
        others: in effect at once (no claim takes a unit while the units in use reach it); higher: no change (the
        smallest limit applies)."""
        effective, in_use = await self._hold(keys=[self.units, self.limits], args=[hold_member(holder, limit), hold_s])
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
