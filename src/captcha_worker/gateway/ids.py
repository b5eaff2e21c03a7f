"""Task ids: the number a client sees, and the queue's task id behind it.

A client gets a number, as from CaptchaAI (``in.php`` answers it as a JSON integer for ``userrecaptcha`` and as a
string otherwise). The queue's id is ``gw:<tenant>:<number>``: the tenant is part of it, so a number only means
something together with the key that submitted it (another tenant asking for it reaches no task and is answered
``ERROR_WRONG_CAPTCHA_ID``), and the tenant can be read back from a result or a claimed item without a lookup.

Numbers are drawn at random from [10^14, 9 * 10^15): 15-16 digits, below 2^53 so JavaScript clients hold them
exactly. A draw that hits an id the queue knows is detected by the push (it reports no new task) and redrawn.
"""

from __future__ import annotations

import secrets

from captcha_worker.shares import GATEWAY_ID_PREFIX

LOW, HIGH = 10**14, 9 * 10**15


def new_number() -> int:
    return LOW + secrets.randbelow(HIGH - LOW)


def task_id(tenant: str, number: int | str) -> str:
    return f"{GATEWAY_ID_PREFIX}:{tenant}:{number}"


def tenant_of(task_id: str) -> str | None:
    """The tenant of a gateway task id (None: not one)."""
    prefix, sep, rest = task_id.partition(":")
    if prefix != GATEWAY_ID_PREFIX or not sep:
        return None
    tenant, sep, number = rest.partition(":")
    return tenant if sep and number.isdigit() else None


def number_of(task_id: str) -> str:
    return task_id.rsplit(":", 1)[-1]
