"""CaptchaAI's circuit breaker (captcha_worker.breaker) on a fake clock, and the claim without budget units it
sends tasks to overflow with (real redis-server)."""

from __future__ import annotations

from redis.asyncio import Redis

from captcha_worker.breaker import Breaker, Policy, State, Verdict, verdict
from captcha_worker.codes import Code
from captcha_worker.queue import RedisQueue

POLICY = Policy(window_s=10.0, min_failures=5, failure_ratio=0.5, open_s=30.0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def breaker() -> tuple[Breaker, Clock, list[tuple[State, State]]]:
    clock, moves = Clock(), []
    b = Breaker(POLICY, clock=clock, on_change=lambda old, new, _why: moves.append((old, new)))
    return b, clock, moves


def test_verdicts() -> None:
    assert verdict(Code.TIMEOUT) is verdict(Code.CONNECTION_ERROR) is verdict(Code.ERROR_ZERO_BALANCE) \
        is Verdict.OUTAGE
    assert verdict(Code.ERROR_KEY_DOES_NOT_EXIST) is verdict(Code.ERROR_WRONG_USER_KEY) is Verdict.NO_PLAN
    assert verdict(Code.OK) is verdict(Code.CAPCHA_NOT_READY) is verdict(Code.ERROR_NO_SLOT_AVAILABLE) \
        is verdict(Code.ERROR_CAPTCHA_UNSOLVABLE) is Verdict.UP


def state(b: Breaker) -> State:
    return b.state


def test_opens_on_failures_in_a_row() -> None:
    b, _, _ = breaker()
    for _ in range(20):  # many answered: the ratio is far off
        b.record(Code.OK)
    for _ in range(4):
        b.record(Code.TIMEOUT)
    assert b.closed(), "4 in a row"
    b.record(Code.OK)
    for _ in range(4):
        b.record(Code.TIMEOUT)
    assert b.closed(), "the streak was broken; 8 of 29 is under the ratio"
    b.record(Code.TIMEOUT)
    assert state(b) is State.OPEN


def test_opens_on_enough_failures_at_the_ratio_within_the_window_only() -> None:
    b, clock, moves = breaker()
    for _ in range(4):
        b.record(Code.TIMEOUT)
        b.record(Code.OK)
    assert b.closed(), "4 failures: under min_failures"
    for _ in range(4):
        b.record(Code.OK)
    b.record(Code.TIMEOUT)
    assert b.closed(), "5 failures of 13: under the ratio"
    clock.t += POLICY.window_s + 1  # the window forgets them
    for _ in range(4):
        b.record(Code.TIMEOUT)
        b.record(Code.OK)
    assert b.closed()
    b.record(Code.HTTP_5XX)
    assert state(b) is State.OPEN and moves == [(State.CLOSED, State.OPEN)]


def test_no_plan_opens_at_once_then_half_open_probe_closes_or_reopens() -> None:
    b, clock, moves = breaker()
    b.record(Code.ERROR_KEY_DOES_NOT_EXIST)
    assert state(b) is State.OPEN and not b.probe_due()
    clock.t += POLICY.open_s
    assert state(b) is State.HALF_OPEN and not b.closed()
    assert b.probe_due() and not b.probe_due(), "one probe at a time"
    b.probed(False, Code.TIMEOUT)
    assert state(b) is State.OPEN
    clock.t += POLICY.open_s - 0.001
    assert state(b) is State.OPEN, "open for open_s again after a failed probe"
    clock.t += 0.001
    assert b.probe_due()
    b.record(Code.OK)  # a request answered meanwhile does not close it: the probe decides
    assert not b.closed()
    b.probed(True)
    assert b.closed()
    assert moves == [(State.CLOSED, State.OPEN), (State.OPEN, State.HALF_OPEN), (State.HALF_OPEN, State.OPEN),
                     (State.OPEN, State.HALF_OPEN), (State.HALF_OPEN, State.CLOSED)]


def test_a_failure_while_half_open_reopens() -> None:
    b, clock, _ = breaker()
    b.record(Code.IP_BANNED)
    clock.t += POLICY.open_s
    assert b.probe_due()
    b.record(Code.CONNECTION_ERROR)
    assert state(b) is State.OPEN
    b.probed(True)  # the probe that was running comes back late: the breaker stays open
    assert state(b) is State.OPEN


def test_scaled_policy() -> None:
    p = Policy.scaled(10.0)
    assert (p.window_s, p.open_s, p.min_failures) == (3.0, 3.0, 5)
    assert Policy.scaled(10.0, http_timeout_s=2.0).window_s == 6.0, "never shorter than 3 HTTP timeouts"


async def test_a_claim_without_units_takes_tasks_while_the_budget_is_full(redis: Redis) -> None:
    """The overflow claim (CLAIM with no_unit): the plan's one unit is taken, yet tasks are claimed, none with a
    unit, and the budget is unchanged; the plain claim still takes nothing."""
    q = RedisQueue(redis, "captcha")
    body = '{"id":"%s","method":"turnstile","params":{"sitekey":"s","pageurl":"https://e"}}'
    await q.push([(f"t{i}", body % f"t{i}") for i in range(4)], ttl=600)
    first = await q.claim_reply(1, lease_s=30, worker="w1", limit=1)
    assert [c.unit for c in first.items] == ["t:t0"]
    blocked = await q.claim_reply(3, lease_s=30, worker="w1", limit=1)
    assert blocked.items == [] and blocked.budget_full
    paid = await q.claim_reply(3, lease_s=30, worker="w1", limit=1, no_unit=True)
    assert [(c.item, c.unit) for c in paid.items] == [("t1", None), ("t2", None), ("t3", None)]
    assert [u.decode() if isinstance(u, bytes) else u for u in await redis.zrange(q.keys.budget, 0, -1)] == ["t:t0"]
    assert await redis.llen(q.keys.processing) == 4 and await redis.zcard(q.keys.leases) == 4
