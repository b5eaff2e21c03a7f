"""The spend cap (captcha_worker.spend) against a real redis-server: exact money in micro-units, many concurrent
reservers never past the cap, a killed process's reservation expiring into a charge (never leaked, never counted
twice), idempotent reserve and settle, refunds."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from decimal import Decimal

import pytest
from redis.asyncio import Redis

from captcha_worker.spend import Cap, Spend, money, price_micro, to_micro
from tests.helpers import ROOT, cli_env
from tests.procs import RedisServer

Q = "captcha"
LABEL = "twocaptcha|turnstile"
BIG = Cap(hour=10**12, day=10**12)


def test_money_is_exact_micro_units() -> None:
    assert price_micro("1.45") == 1450 and price_micro(Decimal("2.999")) == 2999 and price_micro(0) == 0
    assert to_micro("5.0") == 5_000_000 and to_micro("0.000001") == 1
    assert money(1450) == "0.00145" and money(5_000_000) == "5" and money(0) == "0"
    for bad in ("1.4567", "-1", "nan", "inf", "x"):
        with pytest.raises(ValueError):
            price_micro(bad)
    with pytest.raises(ValueError):
        to_micro("0.0000001")


async def test_reserve_settle_refund_exact(redis: Redis) -> None:
    s = Spend(redis, Q)
    a = await s.reserve("a", 1450, cap=BIG, ttl_s=60, label=LABEL)
    b = await s.reserve("b", 1450, cap=BIG, ttl_s=60, label=LABEL)
    assert (a.outcome, b.outcome, b.hour, b.day) == ("reserved", "reserved", 2900, 2900)
    assert (await s.settle("a", 1450)).outcome == "settled"
    assert (await s.settle("b", 0)).outcome == "settled"  # refunded (UNSOLVABLE)
    st = await s.state()
    assert (st.hour, st.day, st.reserved, st.totals) == (1450, 1450, 0, {LABEL: 1450})


async def test_idempotent_reserve_and_settle(redis: Redis) -> None:
    s = Spend(redis, Q)
    assert (await s.reserve("x", 1000, cap=BIG, ttl_s=60, label=LABEL)).outcome == "reserved"
    again = await s.reserve("x", 1000, cap=BIG, ttl_s=60, label=LABEL)
    assert (again.outcome, again.ok, again.hour) == ("held", True, 1000), "a retried reserve counts once"
    assert (await s.settle("x", 700)).outcome == "settled"
    retry = await s.settle("x", 900)
    assert (retry.outcome, retry.charged) == ("settled_already", 700), "a retried settle changes nothing"
    assert (await s.reserve("x", 1000, cap=BIG, ttl_s=60, label=LABEL)).outcome == "done"
    assert (await s.settle("never", 5)).outcome == "unknown"
    st = await s.state()
    assert (st.hour, st.day, st.reserved, st.totals) == (700, 700, 0, {LABEL: 700})


async def test_hour_and_day_caps_refuse_and_refunds_reopen(redis: Redis) -> None:
    s = Spend(redis, Q)
    cap = Cap(hour=3000, day=10**9)
    assert (await s.reserve("1", 1450, cap=cap, ttl_s=60, label=LABEL)).ok
    assert (await s.reserve("2", 1450, cap=cap, ttl_s=60, label=LABEL)).ok
    over = await s.reserve("3", 1450, cap=cap, ttl_s=60, label=LABEL)
    assert (over.outcome, over.hour) == ("over_hour", 2900)
    assert await s.record("3") is None, "a refused reservation leaves nothing behind"
    await s.settle("1", 0)  # refunded: room again
    assert (await s.reserve("3", 1450, cap=cap, ttl_s=60, label=LABEL)).outcome == "reserved"
    day = await s.reserve("4", 101, cap=Cap(hour=10**9, day=3000), ttl_s=60, label=LABEL)
    assert (day.outcome, day.day) == ("over_day", 2900)


async def _reserve_all(clients: list[Redis], amounts: list[int], cap: Cap) -> list[str]:
    spends = [Spend(c, Q) for c in clients]
    got = await asyncio.gather(*(spends[i % len(spends)].reserve(f"r{i}", a, cap=cap, ttl_s=300, label=LABEL)
                                 for i, a in enumerate(amounts)))
    return [r.outcome for r in got]


async def test_concurrent_reservers_never_pass_the_cap(redis: Redis, redis_server: RedisServer) -> None:
    clients = [Redis.from_url(redis_server.url, decode_responses=True) for _ in range(5)]
    try:
        cap = Cap(hour=1_000_000, day=10**9)
        outcomes = await _reserve_all(clients, [1450] * 1000, cap)
        assert outcomes.count("reserved") == 1_000_000 // 1450 == 689
        assert outcomes.count("over_hour") == 311
        st = await Spend(redis, Q).state()
        assert st.hour == st.reserved == 689 * 1450 <= cap.hour

        # mixed prices: the sum stays under the cap, and every refusal was right (it would not have fitted)
        await redis.flushall()
        rng = random.Random(7)
        amounts = [rng.choice([800, 1450, 2990, 3000, 10_000]) for _ in range(1000)]
        cap = Cap(hour=10**9, day=1_234_567)
        outcomes = await _reserve_all(clients, amounts, cap)
        st = await Spend(redis, Q).state()
        reserved = sum(a for a, o in zip(amounts, outcomes, strict=True) if o == "reserved")
        assert st.day == st.reserved == reserved <= cap.day
        assert all(st.day + a > cap.day for a, o in zip(amounts, outcomes, strict=True) if o == "over_day")
        assert set(outcomes) <= {"reserved", "over_day"} and "over_day" in outcomes
    finally:
        for c in clients:
            await c.aclose()


async def test_concurrent_reserve_and_settle_totals_exact(redis: Redis, redis_server: RedisServer) -> None:
    """Many solves reserving, then settling (a third refunded) while others reserve: the ledger equals the sum
    charged exactly and the cap holds throughout."""
    clients = [Redis.from_url(redis_server.url, decode_responses=True) for _ in range(4)]
    cap = Cap(hour=200 * 1450, day=10**9)
    charged: list[int] = []

    async def solve(i: int) -> None:
        s = Spend(clients[i % 4], Q)
        r = await s.reserve(f"s{i}", 1450, cap=cap, ttl_s=300, label=LABEL)
        assert r.hour <= cap.hour
        if r.outcome == "reserved":
            cost = 0 if i % 3 == 0 else 1450
            assert (await s.settle(f"s{i}", cost)).charged == cost
            assert (await s.settle(f"s{i}", cost)).outcome == "settled_already"
            charged.append(cost)

    try:
        await asyncio.gather(*(solve(i) for i in range(600)))
        st = await Spend(redis, Q).state()
        assert st.reserved == 0 and st.totals[LABEL] == st.hour == sum(charged) <= cap.hour
        assert len(charged) >= 200, "refunds reopened room for more than the cap's 200 at full price"
    finally:
        for c in clients:
            await c.aclose()


_HOLDER = """
import asyncio, sys
from redis.asyncio import Redis
from captcha_worker.spend import Cap, Spend
async def main():
    r = Redis.from_url(sys.argv[1], decode_responses=True)
    print((await Spend(r, 'captcha').reserve('killed', 2990, cap=Cap(10**9, 10**9), ttl_s=1.0,
                                             label='twocaptcha|turnstile')).outcome, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_killed_workers_reservation_expires_into_one_charge(redis: Redis, redis_server: RedisServer) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, redis_server.url], env=cli_env(), cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "reserved"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    s = Spend(redis, Q)
    assert (await s.state()).reserved == 2990
    deadline = time.monotonic() + 10
    # every script sweeps expired reservations first; a plain read does not
    while (st := await s.state()).reserved and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # the reservation's 1 s expiry in server time
    rec = await s.record("killed")
    assert rec is not None and rec.startswith("E|")
    assert (st.reserved, st.hour, st.totals) == (0, 2990, {LABEL: 2990}), "charged once, not leaked"
    assert (await s.state()).totals == {LABEL: 2990}, "a second sweep changes nothing"
    late = await s.settle("killed", 0)  # the worker's successor learns it was refunded
    assert (late.outcome, late.charged) == ("corrected", 0)
    st = await s.state()
    assert (st.reserved, st.hour, st.day, st.totals) == (0, 0, 0, {LABEL: 0})
    assert (await s.settle("killed", 0)).outcome == "settled_already"


_RESERVER = """
import asyncio, random, sys
from redis.asyncio import Redis
from captcha_worker.spend import Cap, Spend
async def main():
    r = Redis.from_url(sys.argv[1], decode_responses=True)
    s, name, rng = Spend(r, 'captcha'), sys.argv[2], random.Random(sys.argv[2])
    cap = Cap(int(sys.argv[3]), 10**12)
    for i in range(int(sys.argv[4])):
        rid = f'{name}-{i}'
        got = await s.reserve(rid, 1450, cap=cap, ttl_s=1.0, label='twocaptcha|turnstile')
        if got.outcome == 'reserved':
            if i == int(sys.argv[5]):  # the hook: hold this reservation until killed
                print('R', rid, flush=True)
                await asyncio.to_thread(sys.stdin.readline)
            await asyncio.sleep(rng.random() * 0.02)  # the solve
            cost = 0 if i % 3 == 0 else 1450
            print('S', rid, (await s.settle(rid, cost)).charged, flush=True)
        else:
            print('X', rid, got.outcome, flush=True)
            await asyncio.sleep(0.005)
asyncio.run(main())
"""


async def test_reserver_processes_some_killed_keep_the_cap_and_an_exact_ledger(redis: Redis,
                                                                               redis_server: RedisServer) -> None:
    """4 processes reserving and settling (a third refunded) under a cap of 150 solves, 2 SIGKILLed holding one: the
    window never passes the cap at any sample, and after the killed ones' reservations expire the window = the
    ledger = the records' charges, every printed settlement is its record, every killed reservation one charge."""
    cap = 150 * 1450
    procs = [subprocess.Popen([sys.executable, "-c", _RESERVER, redis_server.url, f"p{i}", str(cap), "400",
                               "10" if i < 2 else "-1"], env=cli_env(), cwd=ROOT, stdout=subprocess.PIPE,
                              stdin=subprocess.PIPE, text=True) for i in range(4)]
    s = Spend(redis, Q)
    samples: list[int] = []
    lines: dict[int, list[str]] = {i: [] for i in range(4)}
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            samples.append((await s.state()).hour)

    sampler = asyncio.create_task(sample())
    try:
        for i in (0, 1):  # each killed while it holds its 11th reservation (it waits on stdin there)
            out = procs[i].stdout
            assert out is not None
            while not (lines[i] and lines[i][-1].startswith("R ")):
                lines[i].append(await asyncio.to_thread(out.readline))
                assert lines[i][-1], "the reserver ended before its hook"
            procs[i].send_signal(signal.SIGKILL)
            procs[i].wait(10)
        for i in (2, 3):
            proc = procs[i]

            def finish(proc: subprocess.Popen[str] = proc) -> str:
                return proc.communicate("", 120)[0]

            lines[i] = (await asyncio.to_thread(finish)).splitlines()
            assert procs[i].returncode == 0
    finally:
        done.set()
        await sampler
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert max(samples) <= cap, f"window passed the cap: {max(samples)} > {cap}"
    deadline = time.monotonic() + 10
    while (st := await s.state()).reserved and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # the killed ones' reservations expire (1 s, server time)
    records = {k: v.split("|") for k, v in (await redis.hgetall(s.keys.rec)).items()}
    assert st.reserved == 0 and all(r[0] in "SE" for r in records.values())
    charged = sum(int(r[2]) for r in records.values())
    assert st.hour == st.day == st.totals[LABEL] == charged <= cap
    printed = [ln.split() for i in lines for ln in lines[i] if ln.startswith("S ")]
    assert all(records[rid][0] == "S" and records[rid][2] == cost for _, rid, cost in printed)
    expired = [r for r in records.values() if r[0] == "E"]
    assert len(expired) == 2 and all(r[2] == r[1] == "1450" for r in expired), "each killed hold: one charge"
    assert len(printed) > 150, "refunds reopened room"
