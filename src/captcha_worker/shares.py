"""Tenant shares of the plan, enforced by the claim: a tenant's cap (``threads``), its reservation (``reserved``),
and a fair choice between tenants so that none blocks another.

Keys (their rows are in ``queue``'s key table too):

* ``{q}:tenants`` (hash) ``tenant -> "<threads> <reserved>"``: the share table, published whole by the gateway
  (SHARES, every few seconds; a tenant dropped from it has its waiting tasks put back into pending).
* ``{q}:waiting:<tenant>`` (list): the tenant's tasks the claim sorted out of pending, oldest first.

A tenant's *in flight* is its budget units (``t:gw:<tenant>:…``, ``budget``): a solve left running by a worker that
died still counts against its tenant, as it does against the plan. The claim (CLAIM, and LEASE after a blocking
BLMOVE) works in three steps, in the same script as its budget acquire:

1. *sort*: tasks of known tenants at the head of pending move to their tenant's waiting list (at most
   :data:`SORT_MAX` per call), so a flood sits in the flooder's own list, never in front of anyone;
2. *pick*: among the waiting lists whose tenant may take a thread, and the head of pending (untenanted tasks: the
   producer library, seed-guide producers, tenants not in the table; they compete as one tenant whose share is the
   whole plan), the one with the lowest ``in flight / threads``. A tenant may take a thread when it is below its
   ``threads`` and either inside its ``reserved``, or leaves after taking it enough free threads for the unmet
   reservations of the other tenants with work (in flight or waiting). A resumed solve (its unit still held) and a
   raw item (no unit) are taken at once. When the head of pending is an untenanted task the reservations hold back,
   the known tenants' tasks among the next :data:`LOOKAHEAD` are sorted too, so a reservation's own tenant never
   waits behind a task that its reservation blocks;
3. *take*: the picked list's head moves to processing and is leased with its unit (``budget``).

When tasks wait but no tenant may take a thread, the claim stops with :data:`STOP_CAPPED`; the worker tries again
as its own solves end (or within 0.2 s). Caps may add up to more than the plan (overbooking): the plan budget is
checked by the unit itself. KEDA sees the waiting lists as triggers of its one metric (the chart lists one per
configured tenant).
"""

from __future__ import annotations

from dataclasses import dataclass

from captcha_worker.store.records import ClaimStop
from captcha_worker.store.scripts import Constant

#: gateway task ids are ``gw:<tenant>:<public id>`` (gateway.ids): the tenant is read from the id
GATEWAY_ID_PREFIX = "gw"
#: tasks moved from pending to waiting lists per claim call (bounds a call's work under a flood)
SORT_MAX = 2000
#: tasks behind an untenanted head that reservations hold back, looked at for known tenants' tasks (per claim)
LOOKAHEAD = 100
#: a claim's stop reasons (CLAIM and LEASE reply, ``store.records.ClaimStop``): none, no budget unit free, every
#: waiting task's tenant capped
STOP_NONE, STOP_FULL, STOP_CAPPED = ClaimStop.NONE, ClaimStop.FULL, ClaimStop.CAPPED

#: the constants of the shares' Lua (store/lua/lib/shares.lua, shares.lua)
LUA_CONSTANTS: dict[str, Constant] = {
    "GATEWAY_ID_PREFIX": GATEWAY_ID_PREFIX, "SORT_MAX": SORT_MAX, "LOOKAHEAD": LOOKAHEAD, "STOP_NONE": STOP_NONE,
    "STOP_FULL": STOP_FULL, "STOP_CAPPED": STOP_CAPPED}


def share_value(threads: int, reserved: int) -> str:
    """A tenant's entry in ``{q}:tenants``."""
    return f"{threads} {reserved}"


@dataclass(frozen=True)
class TenantShare:
    """A row of the share table: a tenant's cap and reservation (``shares``)."""

    name: str
    threads: int
    reserved: int = 0

    def value(self) -> str:
        return share_value(self.threads, self.reserved)


@dataclass(frozen=True)
class TenantLoad:
    in_flight: int  # its budget units: solves that may be running at CaptchaAI
    waiting: int  # its tasks in its waiting list (not the ones still in pending)
