"""The one Redis guard and the one backoff (``captcha_worker.guard``): state, readiness and one log line per change
of state; retries of outages only. Against real processes: tests/chaos/test_redis_refusals.py (one
``redis_unavailable`` line per worker per episode) and test_gateway's Redis restart."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry, Counter
from redis import exceptions as rexc

from captcha_worker.connection import Refusal
from captcha_worker.guard import NO_SPREAD, Backoff, RedisGuard

LOG = logging.getLogger("captcha_worker.test_guard")


def _guard() -> tuple[RedisGuard, Counter, list[bool]]:
    errors = Counter("redis_errors", "refusals", ["reason"], registry=CollectorRegistry())
    changes: list[bool] = []
    guard = RedisGuard(LOG, errors, on_change=lambda: changes.append(guard.down is None), hint="h")
    return guard, errors, changes


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    return [(r.getMessage(), getattr(r, "fields", {})) for r in caplog.records if r.name == LOG.name]


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.1, 0.5, spread=NO_SPREAD)
    assert [b.delay() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    b.reset()
    assert b.delay() == 0.1
    jittered = Backoff(1.0, 8.0)
    for expected in (1.0, 2.0, 4.0, 8.0, 8.0):
        assert expected <= jittered.delay() <= 2 * expected


def test_backoff_spread_and_limit() -> None:
    """The producer's and the capacity wait's spread (half to all of the delay) and the transient retries'
    limit (no pause past transient_max_s) are one Backoff's options."""
    half = Backoff(2.0, 8.0, spread=(0.5, 1.0))
    for expected in (2.0, 4.0, 8.0, 8.0):
        assert expected / 2 <= half.delay() <= expected
    limited = Backoff(1.0, 4.0, limit=4.0)
    delays = [limited.delay() for _ in range(6)]
    assert 1.0 <= delays[0] <= 2.0 and max(delays) <= 4.0 and delays[-1] == 4.0


def test_one_line_per_change_of_state_and_readiness_follows(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    guard, errors, changes = _guard()
    assert guard.readiness() == (True, "ready")
    for _ in range(3):
        guard.failed(Refusal.CONNECTION, "claim", ConnectionError())
    assert guard.readiness() == (False, "redis unavailable: connection")
    guard.failed(Refusal.OOM, "ack")  # a new reason is a new line
    guard.ok("ack")
    guard.ok("claim")  # up already: no line
    lines = _lines(caplog)
    assert [name for name, _ in lines] == ["redis_unavailable", "redis_unavailable", "redis_reconnected"]
    assert lines[0][1] == {"reason": "connection", "op": "claim", "detail": lines[0][1]["detail"],
                           "error": "ConnectionError", "hint": "h"}
    assert lines[2][1]["was"] == "oom" and lines[2][1]["op"] == "ack"
    assert changes == [False, False, True] and guard.readiness() == (True, "ready")
    assert errors.labels("connection")._value.get() == 3 and errors.labels("oom")._value.get() == 1


def test_redis_stays_down_while_any_retrying_call_has_not_gone_through() -> None:
    guard, _, _ = _guard()
    first, second = object(), object()
    guard.failed(Refusal.OOM, "ack", token=first)
    guard.failed(Refusal.OOM, "push", token=second)
    guard.ok("delete")  # a call that needed no retry passed (deletions do under OOM): writes still fail
    guard.ok("ack", token=first)
    assert guard.down is Refusal.OOM
    guard.ok("push", token=second)
    assert guard.down is None


async def test_retry_retries_outages_only_and_gives_up_when_told() -> None:
    guard, _, _ = _guard()
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise rexc.ConnectionError("down")
        return "done"

    assert await guard.retry("op", flaky, backoff=Backoff(0.001, 0.001)) == "done" and calls == 3
    assert guard.down is None

    async def bug() -> str:
        raise rexc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    with pytest.raises(rexc.ResponseError):
        await guard.retry("op", bug)

    async def down() -> str:
        raise rexc.TimeoutError()

    stop = asyncio.Event()
    stop.set()
    assert await guard.retry("op", down, give_up=stop.is_set) is None
