"""The spend cap: money for pay-per-solve providers, reserved in Redis before a solve is submitted and settled after
it, so that N workers together never spend past the cap (per hour and per day), as the thread budget
(:mod:`captcha_worker.budget`) never exceeds the plan.

Money is integer *micro-units* (1/1,000,000 of the currency) everywhere: in Redis, in the scripts, in Python.
A price of 1.45 per 1,000 solves is 1450 micro per solve; a cap of 5.00 per hour is 5,000,000.

Windows are fixed in server time (Redis ``TIME``): the hour ``floor(now / 3600)`` and the day ``floor(now / 86400)``
(UTC days). A window counts what was charged in it and what is reserved in it and not settled yet; a reservation
stays in the windows it was made in (a solve reserved at 10:59 and settled at 11:01 is 10:00's).

Keys (one hash tag, ``{<queue>}``, so a Cluster runs every script on one node):

=========================  ======  =====================================================================
key                        type    contents
=========================  ======  =====================================================================
``{q}:spend:rec``          hash    ``<id> -> "<state>|<amount>|<charged>|<hour>|<day>|<label>"``: a
                                   reservation (state ``R``), one expired (``E``) or settled (``S``)
``{q}:spend:exp``          zset    ``<id> -> time``: when an ``R`` expires; when an ``E``/``S`` is forgotten
``{q}:spend:win``          hash    ``h:<hour> -> micro``, ``d:<day> -> micro`` (charged + reserved in the
                                   window), ``reserved -> micro`` (all reservations outstanding)
``{q}:spend:total``        hash    ``<label> -> micro`` charged (the ledger: ``<provider>|<kind>``)
=========================  ======  =====================================================================

Transitions (each a named script below; every one first runs *sweep*):

==========  ==================  ==================  =============================================================
script      from                to                  money
==========  ==================  ==================  =============================================================
(sweep)     ``R`` past expiry   ``E``               none moves: the reserved amount stays in its windows and is
                                                    charged to the ledger (a killed worker's solve may well have
                                                    been charged by the provider: the cap stays hard)
(sweep)     ``E``/``S`` past    (forgotten)         none (kept :data:`KEEP_S` for late and repeated settles)
            keep
RESERVE     (none)              ``R``               +amount in the hour, the day and ``reserved``, refused
                                                    (``over_hour`` / ``over_day``) when either window would pass
                                                    its cap
RESERVE     ``R``               ``R``               none: ``held`` (a retried call; the first one counted)
RESERVE     ``E``/``S``         unchanged           none: ``done`` (that solve happened; a new one needs a new id)
SETTLE      ``R``               ``S``               windows +(cost - amount), ``reserved`` -amount, ledger +cost
SETTLE      ``E``               ``S``               windows and ledger +(cost - amount): ``corrected`` (a late
                                                    settle of an expired reservation)
SETTLE      ``S``               ``S``               none: ``settled_already`` with the first cost (a retry)
SETTLE      (none)              (none)              none: ``unknown``
STATE       —                   —                   none: reads this hour, this day, ``reserved``, the ledger
==========  ==================  ==================  =============================================================

A refund (UNSOLVABLE where the provider refunds it) is ``settle(id, 0)``. A cost above the reservation is charged
as it is (money spent is spent): the windows may then pass the cap, and reservations are refused until they close.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, cast

from captcha_worker.connection import Client
from captcha_worker.store.keys import Keys
from captcha_worker.store.scripts import Constant, SlotScript, lua

MICRO = 1_000_000
HOUR_S, DAY_S = 3600, 86400
#: how long an expired or settled reservation is remembered (retried settles are no-ops; a late one corrects)
KEEP_S = 2 * DAY_S
#: window fields older than this many hours / days are dropped when a reservation is made
_KEEP_HOURS, _KEEP_DAYS = 48, 35

ReserveOutcome = Literal["reserved", "held", "done", "over_hour", "over_day"]
SettleOutcome = Literal["settled", "corrected", "settled_already", "unknown"]

#: the constants of the spend cap's Lua (store/lua/lib/spend.lua, spend_*.lua)
LUA_CONSTANTS: dict[str, Constant] = {"KEEP_S": KEEP_S, "HOUR_S": HOUR_S, "DAY_S": DAY_S}
_RESERVE = lua("spend_reserve", LUA_CONSTANTS)
_SETTLE = lua("spend_settle", LUA_CONSTANTS)
_STATE = lua("spend_state", LUA_CONSTANTS)


def to_micro(amount: Decimal | int | str, *, what: str = "amount") -> int:
    """An amount of money as whole micro-units; ValueError when it is negative, not finite or finer than that."""
    try:
        d = Decimal(amount)
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what} must be a number") from None
    if not d.is_finite() or d < 0:
        raise ValueError(f"{what} must be a finite number >= 0")
    micro = d * MICRO
    if micro != micro.to_integral_value():
        raise ValueError(f"{what} has more than 6 decimals (money is counted in millionths)")
    return int(micro)


def price_micro(price_per_1000: Decimal | int | str, *, what: str = "price_per_1000") -> int:
    """The price of one solve in micro-units, from a price per 1,000 solves (at most 3 decimals)."""
    try:
        d = Decimal(price_per_1000)
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what} must be a number") from None
    if not d.is_finite() or d < 0:
        raise ValueError(f"{what} must be a finite number >= 0")
    micro = d * MICRO / 1000
    if micro != micro.to_integral_value():
        raise ValueError(f"{what} has more than 3 decimals (one solve must cost whole millionths)")
    return int(micro)


def money(micro: int) -> str:
    """Micro-units as a decimal string (exact): 1450 -> '0.00145'."""
    return format((Decimal(micro) / MICRO).normalize(), "f")


@dataclass(frozen=True)
class Cap:
    hour: int  # micro
    day: int  # micro


@dataclass(frozen=True)
class Reservation:
    outcome: ReserveOutcome
    hour: int  # this hour's micro after the call (charged + reserved)
    day: int

    @property
    def ok(self) -> bool:
        """The id holds a reservation now (made by this call or a retried earlier one)."""
        return self.outcome in ("reserved", "held")


@dataclass(frozen=True)
class Settlement:
    outcome: SettleOutcome
    charged: int  # micro charged for the id (the first settle's cost on a retry)


@dataclass(frozen=True)
class SpendState:
    hour: int
    day: int
    reserved: int
    totals: dict[str, int]  # label -> micro charged


@dataclass(frozen=True)
class SpendKeys:
    rec: str
    exp: str
    win: str
    total: str

    @classmethod
    def of(cls, queue: str) -> SpendKeys:
        k = Keys(queue)
        return cls(k.spend_records, k.spend_expiries, k.spend_windows, k.spend_totals)

    def all(self) -> list[str]:
        return [self.rec, self.exp, self.win, self.total]


class Spend:
    """The spend cap's operations on a queue's keys (see the module docstring)."""

    def __init__(self, redis: Client, queue: str) -> None:
        self.redis = redis
        self.keys = SpendKeys.of(queue)
        self._reserve, self._settle, self._state = (SlotScript(redis, s) for s in (_RESERVE, _SETTLE, _STATE))

    async def reserve(self, rid: str, amount: int, *, cap: Cap, ttl_s: float, label: str) -> Reservation:
        """Reserve `amount` micro under `rid` until `ttl_s` from now (then it is charged as it is), unless this
        hour's or this day's window would pass `cap`."""
        _check_id(rid)
        if amount < 0 or not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError("amount must be >= 0 and ttl_s > 0")
        got = await self._reserve(keys=self.keys.all(),
                                  args=[rid, amount, ttl_s, cap.hour, cap.day, label, _KEEP_HOURS, _KEEP_DAYS])
        outcome, hour, day = _strs(got)
        return Reservation(cast(ReserveOutcome, outcome), int(hour), int(day))

    async def settle(self, rid: str, cost: int) -> Settlement:
        """Charge `cost` micro for `rid` (0: refunded) in place of its reservation; a retry changes nothing."""
        _check_id(rid)
        if cost < 0:
            raise ValueError("cost must be >= 0")
        outcome, charged = _strs(await self._settle(keys=self.keys.all(), args=[rid, cost]))
        return Settlement(cast(SettleOutcome, outcome), int(charged))

    async def state(self) -> SpendState:
        values = _strs(await self._state(keys=self.keys.all()))
        totals = {values[i]: int(values[i + 1]) for i in range(3, len(values) - 1, 2)}
        return SpendState(int(values[0]), int(values[1]), int(values[2]), totals)

    async def record(self, rid: str) -> str | None:
        """The raw record of `rid` (for tests and ``stats``)."""
        return _str_or_none(await cast(Awaitable[Any], self.redis.hget(self.keys.rec, rid)))


def _check_id(rid: str) -> None:
    if not rid or len(rid) > 256:
        raise ValueError("a reservation id is 1-256 characters")


def _str_or_none(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def _strs(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]
