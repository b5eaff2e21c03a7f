"""Worker behaviour against a real redis-server and the real simulator over sockets (in-process workers)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis import exceptions as rexc
from redis.asyncio import Redis

from captcha_worker import metrics
from captcha_worker.client import CaptchaQueue, Expired, Failed, Solved
from captcha_worker.config import WorkerConfig
from captcha_worker.queue import SEED_RESULTS_HASH, Keys, RedisQueue
from captcha_worker.simulator import Faults, OverCap, SimConfig, SimulatorServer
from captcha_worker.worker import Phase, Worker
from tests.helpers import KEY, TURNSTILE, run_cli, running_worker, wait_until

SPEED = 50.0


@asynccontextmanager
async def simulator(**cfg: Any) -> AsyncIterator[SimulatorServer]:
    cfg.setdefault("speed", SPEED)
    cfg.setdefault("seed", 1)
    async with SimulatorServer(SimConfig(**cfg)) as sim:
        yield sim


@asynccontextmanager
async def worker(redis_url: str, sim: SimulatorServer, **env: str) -> AsyncIterator[Worker]:
    base = {"REDIS_URL": redis_url, "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_URL": sim.url, "CAPTCHAAI_THREADS": "10",
            "WORKER_CONCURRENCY": "5", "API_TIME_SCALE": str(SPEED), "LEASE_SECONDS": "3",
            "DRAIN_GRACE_SECONDS": "5"}
    async with running_worker(WorkerConfig.from_env({**base, **env})) as w:
        yield w


@pytest.fixture
async def producer(redis: Redis, redis_server: Any) -> AsyncIterator[CaptchaQueue]:
    async with CaptchaQueue.from_url(redis_server.url) as q:
        yield q


async def test_solves_every_kind_end_to_end(redis_server: Any, producer: CaptchaQueue) -> None:
    tasks = [
        ("turnstile", TURNSTILE),
        ("userrecaptcha", {"googlekey": "6LeAAAA", "pageurl": "https://e.com"}),
        ("userrecaptcha", {"googlekey": "6LeAAAA", "pageurl": "https://e.com", "enterprise": "1"}),
        ("userrecaptcha", {"googlekey": "6LeAAAA", "pageurl": "https://e.com", "version": "v3", "action": "x"}),
        ("geetest", {"gt": "g" * 32, "challenge": "c" * 32, "pageurl": "https://e.com"}),
        ("base64", {"body": "iVBORw0KGgo" + "A" * 200}),
        ("base64", {"body": "iVBORw0KGgo" + "A" * 200, "instructions": "cars", "grid_size": "3x3"}),
        ("cloudflare_challenge", {"pageurl": "https://e.com", "proxy": "u:p@10.0.0.1:3128", "proxytype": "HTTP"}),
    ]
    async with simulator(threads=10) as sim, worker(redis_server.url, sim):
        ids = [await producer.submit(m, p) for m, p in tasks]
        outcomes = {o.id: o async for o in producer.as_completed(ids, timeout=60)}
    assert all(isinstance(outcomes[i], Solved) for i in ids), outcomes
    by_kind = {o.kind: o for o in outcomes.values() if isinstance(o, Solved)}
    assert json.loads(by_kind["geetest"].solution).keys() >= {"challenge", "validate", "seccode"}
    assert by_kind["recaptcha_v2_enterprise"].user_agent and by_kind["cloudflare_challenge"].user_agent
    cells = json.loads(by_kind["grid"].solution)
    assert cells and all(isinstance(i, int) for i in cells)
    assert all(o.api_calls >= 2 and o.attempts == 1 for o in by_kind.values())
    assert sim.stats().solved == len(tasks)


async def test_malformed_payloads_are_dead_lettered_and_the_worker_keeps_going(
        redis: Redis, redis_server: Any, producer: CaptchaQueue) -> None:
    keys = Keys("captcha")
    big = json.dumps({"id": "big", "method": "turnstile", "params": {**TURNSTILE, "x": "a" * 5000}})
    for raw in ["{not json", json.dumps({"id": "u1", "method": "nope", "params": {}}),
                json.dumps({"id": "n1", "method": "turnstile", "params": {"sitekey": {"a": 1}, "pageurl": "u"}}),
                json.dumps({"id": "h1", "method": "hcaptcha", "params": {"sitekey": "s", "pageurl": "u"}}),
                json.dumps({"id": "m1", "method": "turnstile", "params": {"sitekey": "s"},
                            "reply_to": producer.producer_id}), big]:
        await redis.rpush(keys.pending, raw)
    async with simulator() as sim, worker(redis_server.url, sim, MAX_TASK_BYTES="2048"):
        good = await producer.submit("turnstile", TURNSTILE)
        assert isinstance(await producer.result(good, timeout=30), Solved)
        missing = await producer.result("m1", timeout=5)
    assert isinstance(missing, Failed) and missing.code == "ERROR_PAGEURL"
    letters = {d.id or d.code: d for d in await producer.queue.dead_letters()}
    assert letters["INVALID_JSON"].reason == "payload is not valid JSON"
    assert letters["u1"].code == "UNKNOWN_METHOD"
    assert "flat map" in letters["n1"].reason
    assert letters["h1"].reason == "hCaptcha is not solved by CaptchaAI"
    assert letters["TASK_TOO_LARGE"].reason == f"payload is {len(big)} bytes, over the limit of 2048"
    assert await redis.llen(keys.processing) == 0 and await redis.llen(keys.pending) == 0
    assert sim.stats().submitted == 1, "malformed tasks must never reach the API"


COOKIE = "c00kie-PLANTED-9f3a"  # a cookie value and a token of no known shape: nothing can redact them by meaning
TOKEN = "tok3n-PLANTED-51c2"
UNPARSEABLE = [f"Cookie: sid={COOKIE}; theme=dark\r\nAuthorization: Bearer {TOKEN}".encode(),
               f'["not an object", "{COOKIE}", "{TOKEN}"]'.encode(),
               f'{{"id": "half", "params": {{"cookie": "{COOKIE}", "t": "{TOKEN}"'.encode(),  # cut short
               b"\xff\xfe" + COOKIE.encode() + b"\x00" + TOKEN.encode()]  # not UTF-8


async def _holding(redis: Redis, *needles: str) -> list[str]:
    """Every key whose name or any value (any type) contains one of `needles`."""
    found = []
    async for name in redis.scan_iter(count=1000):
        kind = await redis.type(name)
        values = ([await redis.get(name)] if kind == "string" else await redis.lrange(name, 0, -1) if kind == "list"
                  else [*(await redis.hgetall(name)).items()] if kind == "hash"
                  else await redis.zrange(name, 0, -1) if kind == "zset" else list(await redis.smembers(name)))
        text = f"{name} {values!r}"
        if any(n in text for n in needles):
            found.append(name)
    return sorted(found)


async def _dead_letters_reach(redis: Redis, n: int, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while await redis.llen(Keys("captcha").dead) < n:
        assert time.monotonic() < deadline, f"fewer than {n} dead letters within {within_s} s"
        await asyncio.sleep(0.05)


async def test_dead_letters_of_unparseable_items_keep_a_fingerprint_never_the_bytes(
        redis: Redis, redis_server: Any, producer: CaptchaQueue) -> None:
    """Issue 23 item 5: bytes that do not parse cannot be redacted by meaning, so a dead letter keeps their
    fingerprint; an excerpt only while the operator keeps a debugging window open, and only for that window."""
    keys, env = Keys("captcha"), {"REDIS_URL": redis_server.url}
    for raw in UNPARSEABLE:
        await redis.rpush(keys.pending, raw)
    async with simulator() as sim, worker(redis_server.url, sim):
        await _dead_letters_reach(redis, len(UNPARSEABLE), 30)
        at_rest = await _holding(redis, COOKIE, TOKEN)
        listing = run_cli("dead-letters", "list", "--json", env=env)
        opened = run_cli("dead-letters", "keep-raw", "--for", "120", "--json", env=env)
        for raw in UNPARSEABLE:
            await redis.rpush(keys.pending, raw)
        await _dead_letters_reach(redis, 2 * len(UNPARSEABLE), 30)
        window_ms = await redis.pttl(keys.keep_raw)
        kept = {k: await redis.pttl(k) async for k in redis.scan_iter(match=keys.raw_prefix + "*")}
        listing_open = run_cli("dead-letters", "list", "--json", env=env)
        closed = run_cli("dead-letters", "keep-raw", "--off", "--json", env=env)
        after = await _holding(redis, COOKIE, TOKEN)
    assert at_rest == [], "no key holds the planted values after dead-lettering"
    letters = [json.loads(line) for line in listing.stdout.splitlines()]
    assert listing.returncode == 0 and COOKIE not in listing.stdout and TOKEN not in listing.stdout
    by_sha = {d["fingerprint"]["sha256"]: d for d in letters}
    assert set(by_sha) == {hashlib.sha256(raw).hexdigest() for raw in UNPARSEABLE}
    for raw in UNPARSEABLE:
        d = by_sha[hashlib.sha256(raw).hexdigest()]
        assert d["fingerprint"]["bytes"] == len(raw) and d["code"] == "INVALID_JSON" and "excerpt" not in d
    assert json.loads(opened.stdout)["open"] is True
    assert len(kept) == len(UNPARSEABLE) and all(0 < ttl <= window_ms for ttl in kept.values()), \
        f"each excerpt lives until the window ends, no longer: {kept} (window {window_ms} ms)"
    excerpts = [d["excerpt"] for d in map(json.loads, listing_open.stdout.splitlines()) if "excerpt" in d]
    assert len(excerpts) == 2 * len(UNPARSEABLE) and any(COOKIE in e for e in excerpts), \
        "the window shows the bytes (of the letters before it too: the same payloads, the same fingerprints)"
    assert json.loads(closed.stdout) == {"open": False, "seconds_left": None, "excerpts_deleted": len(UNPARSEABLE)}
    assert after == [], "the window closed: no key holds the planted values again"
    assert sim.stats().submitted == 0


async def test_a_task_past_its_deadline_is_expired_without_calling_the_api(
        redis_server: Any, producer: CaptchaQueue) -> None:
    task_id = await producer.submit("turnstile", TURNSTILE, deadline=0.05)
    await asyncio.sleep(0.2)
    async with simulator() as sim, worker(redis_server.url, sim):
        outcome = await producer.result(task_id, timeout=20)
        calls = sim.stats().calls
    assert isinstance(outcome, Expired) and outcome.code == "DEADLINE_PASSED"
    assert calls.get("in.php", 0) == 0


async def test_seed_guide_task_is_accepted_and_compat_hash_written(redis: Redis, redis_server: Any) -> None:
    seed = {"id": "a1b2c3d4", "method": "turnstile", "params": TURNSTILE, "submitted_at": time.time(),
            "priority": "normal"}
    await redis.rpush("{captcha}:pending", json.dumps(seed))
    async with simulator() as sim, worker(redis_server.url, sim, COMPAT_RESULTS_HASH="true"):
        for _ in range(200):
            if await redis.hexists(SEED_RESULTS_HASH, "a1b2c3d4"):
                break
            await asyncio.sleep(0.05)
    result = json.loads(await redis.hget(SEED_RESULTS_HASH, "a1b2c3d4"))
    assert result["status"] == "success" and result["token"] and result["error"] is None
    assert result["duration"] > 0 and result["worker"]
    assert 0 < await redis.ttl(SEED_RESULTS_HASH) <= 3600, "the seed hash is bounded"
    assert json.loads(await redis.get("{captcha}:result:a1b2c3d4"))["id"] == "a1b2c3d4"


async def test_a_bad_key_stops_claiming_keeps_tasks_queued_and_recovers(
        redis: Redis, redis_server: Any, producer: CaptchaQueue) -> None:
    other = "f" * 32
    async with simulator(keys=frozenset({other})) as sim, worker(redis_server.url, sim) as w:
        ids = await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(5)])
        for _ in range(100):
            if w.phase is Phase.FATAL:
                break
            await asyncio.sleep(0.05)
        assert w.phase is Phase.FATAL and w.readiness() == (False, "fatal API error: ERROR_KEY_DOES_NOT_EXIST")
        await asyncio.sleep(0.5)
        assert await redis.llen("{captcha}:processing") == 0
        assert await redis.llen("{captcha}:pending") == 5, "tasks must stay queued while the key is rejected"
        assert sim.stats().submitted == 0
        sim.simulator.reconfigure(dataclasses.replace(sim.simulator.config, keys=None))  # the key was fixed
        outcomes = [o async for o in producer.as_completed(ids, timeout=30)]
    assert all(isinstance(o, Solved) for o in outcomes)
    assert all(o.attempts == 1 for o in outcomes if isinstance(o, Solved)), "a fatal error must not cost attempts"


@pytest.mark.parametrize("over_cap", [OverCap.ZERO_BALANCE, OverCap.NO_SLOT, OverCap.HTTP429])
async def test_capacity_errors_are_retried_never_failed(redis_server: Any, producer: CaptchaQueue,
                                                        over_cap: OverCap) -> None:
    """The worker is told 6 threads and threadsinfo says 6, but the plan has 2 free (it shrank since, or another
    client uses the key): the API refuses the rest, tasks still all succeed."""
    async with simulator(threads=6, over_cap=over_cap) as sim, \
            worker(redis_server.url, sim, CAPTCHAAI_THREADS="6", WORKER_CONCURRENCY="6") as w:
        await asyncio.wait_for(w._plan_read.wait(), 10)
        sim.simulator.reconfigure(dataclasses.replace(sim.simulator.config, threads=2))
        ids = await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(12)])
        outcomes = [o async for o in producer.as_completed(ids, timeout=60)]
        stats = sim.stats()
    assert all(isinstance(o, Solved) for o in outcomes), [o for o in outcomes if not isinstance(o, Solved)]
    assert stats.over_cap_rejections > 0
    # a refusal is retried as the same task: never an attempt, never a second accepted submission
    assert all(o.attempts == 1 for o in outcomes if isinstance(o, Solved))
    assert (stats.submitted, stats.solved) == (len(ids), len(ids))


async def test_unsolvable_is_retried_then_reported(redis_server: Any, producer: CaptchaQueue) -> None:
    async with simulator(faults=Faults(unsolvable=1.0)) as sim, worker(redis_server.url, sim,
                                                                      UNSOLVABLE_RETRIES="2"):
        outcome = await producer.solve("turnstile", TURNSTILE, timeout=30)
        submitted = sim.stats().submitted
    assert isinstance(outcome, Failed) and outcome.code == "ERROR_CAPTCHA_UNSOLVABLE"
    assert submitted == 3


async def test_transient_faults_are_absorbed(redis_server: Any, producer: CaptchaQueue) -> None:
    faults = Faults(html502=0.15, nonjson=0.1, reset=0.05, server_error=0.1)
    async with simulator(faults=faults) as sim, worker(redis_server.url, sim, WORKER_CONCURRENCY="10"):
        ids = await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(30)])
        outcomes = [o async for o in producer.as_completed(ids, timeout=60)]
        injected = sum(sim.stats().faults.values())
    assert injected > 0
    assert all(isinstance(o, Solved) for o in outcomes), [o for o in outcomes if not isinstance(o, Solved)]


async def test_transient_failures_exhaust_attempts_into_the_dead_letter_list(
        redis_server: Any, producer: CaptchaQueue) -> None:
    async with simulator(faults=Faults(html502=1.0)) as sim, worker(redis_server.url, sim, MAX_ATTEMPTS="2"):
        outcome = await producer.solve("turnstile", TURNSTILE, timeout=60)
        assert sim.stats().submitted == 0
    assert isinstance(outcome, Failed) and outcome.code == "MAX_ATTEMPTS_EXCEEDED"
    assert "HTTP_5XX" in outcome.text and outcome.attempts == 2
    (letter,) = await producer.queue.dead_letters()
    assert letter.id == outcome.id and letter.view is not None and '"turnstile"' in letter.view


async def test_readiness_reflects_redis_outage(redis_server: Any) -> None:
    async with simulator() as sim, worker(redis_server.url, sim) as w:
        await asyncio.sleep(0.3)
        assert w.readiness() == (True, "ready")
        redis_server.stop()
        try:
            for _ in range(100):
                if not w.redis_ok:
                    break
                await asyncio.sleep(0.05)
            assert w.readiness() == (False, "redis unavailable: connection")
        finally:
            redis_server.start()
        for _ in range(200):
            if w.redis_ok:
                break
            await asyncio.sleep(0.05)
        assert w.readiness() == (True, "ready")


async def test_redis_client_honours_task_cancellation(redis: Redis) -> None:
    """redis-py 8.0/8.1 swallow a cancel that lands mid-command; the worker's drain depends on it (pinned <8)."""

    async def busy() -> None:
        while True:
            await redis.llen("x")

    task = asyncio.create_task(busy())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)


async def test_poison_in_one_batch_is_settled_at_first_claim_and_never_delays_the_rest(
        redis: Redis, redis_server: Any, producer: CaptchaQueue) -> None:
    """In process, for quick feedback; tests/chaos/test_poison.py runs the same with processes at scale."""
    keys = Keys("captcha")
    poison: list[bytes | str] = [
        b"\xff\xfe\x00", "[" * 100_000, "x" * 5000, " " * 3 + "{not json", "not an id at all", ""]
    spaced = "  " + json.dumps({"id": "spaced1", "method": "turnstile", "params": TURNSTILE})
    await redis.rpush(keys.pending, *poison, spaced)
    ids = await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(5)])
    async with simulator() as sim, worker(redis_server.url, sim, MAX_TASK_BYTES="4096") as w:
        outcomes = [o async for o in producer.as_completed([*ids, "spaced1"], timeout=30)]
        assert w.redis_ok
    assert all(isinstance(o, Solved) for o in outcomes), outcomes
    letters = await producer.queue.dead_letters(0, 100)
    assert len(letters) == len(poison) and all(d.attempts == 1 for d in letters), "each once, on its first claim"
    assert {d.code for d in letters} == {"INVALID_JSON", "TASK_TOO_LARGE"}
    assert await redis.llen(keys.processing) == 0 and await redis.llen(keys.pending) == 0
    assert not [k for k in await redis.keys("*") if "{not json" in k or "not an id" in k]


async def test_a_compat_list_outside_the_hash_slot_is_logged_once_and_dropped(
        redis_server: Any, producer: CaptchaQueue, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """On Redis Cluster the claim script touching COMPAT_QUEUE_LIST fails with CROSSSLOT (a single redis-server
    cannot say it, so the reply is planted): one error line, then the queue is served without the list."""


    real_claim = RedisQueue.claim_reply

    async def claim(self: RedisQueue, n: int, **kw: Any) -> Any:
        if kw.get("compat_list"):
            raise rexc.ClusterCrossSlotError("Keys in request don't hash to the same slot")
        return await real_claim(self, n, **kw)

    monkeypatch.setattr(RedisQueue, "claim_reply", claim)
    async with simulator() as sim, worker(redis_server.url, sim, COMPAT_QUEUE_LIST="captcha:queue") as w:
        outcome = await producer.solve("turnstile", TURNSTILE, timeout=30)
        assert w.compat_list is None and w.redis_ok
    assert isinstance(outcome, Solved)
    lines = [r for r in caplog.records if r.getMessage() == "compat_queue_unusable"]
    assert len(lines) == 1 and "CROSSSLOT" in lines[0].fields["reason"]  # type: ignore[attr-defined]


async def test_the_workers_follow_a_plan_smaller_than_configured(redis_server: Any, producer: CaptchaQueue,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """threadsinfo says 3 threads, CAPTCHAAI_THREADS says 10: the worker enforces 3 and registers it, so the budget
    in Redis is 3 for every worker; one log line; the metric says it follows the plan."""

    async with simulator(threads=3) as sim, worker(redis_server.url, sim, CAPTCHAAI_THREADS="10",
                                                   WORKER_CONCURRENCY="10") as w:
        await asyncio.wait_for(w._plan_read.wait(), 10)
        ids = await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(20)])
        outcomes = [o async for o in producer.as_completed(ids, timeout=60)]
        state = await producer.queue.budget.state()
        follows = metrics.BUDGET_FOLLOWS_PLAN._value.get()
        stats = sim.stats()
    assert all(isinstance(o, Solved) for o in outcomes)
    assert w.limit == 3 and state.limit == 3 and follows == 1
    assert stats.max_in_flight <= 3 and stats.over_cap_rejections == 0 and stats.queued == 0
    assert [r.getMessage() for r in caplog.records].count("budget_follows_plan") == 1


async def test_paid_threads_above_the_budget_are_reported_idle(redis_server: Any) -> None:
    async with simulator(threads=25) as sim, worker(redis_server.url, sim, CAPTCHAAI_THREADS="10") as w:
        await asyncio.wait_for(w._plan_read.wait(), 10)
        await asyncio.sleep(0.2)
        idle = metrics.PLAN_THREADS_IDLE._value.get()
    assert w.limit == 10 and idle == 15


async def test_a_drained_worker_leaves_no_unit_and_no_limit_behind(redis: Redis, redis_server: Any,
                                                                   producer: CaptchaQueue) -> None:
    async with simulator() as sim, worker(redis_server.url, sim):
        outcome = await producer.solve("turnstile", TURNSTILE, timeout=30)
        assert await redis.zcard(Keys("captcha").limits) == 1
    assert isinstance(outcome, Solved) and outcome.captcha_id
    assert await redis.zcard(Keys("captcha").budget) == 0 and await redis.zcard(Keys("captcha").limits) == 0


async def test_a_held_lower_limit_takes_effect_at_once_for_live_workers_then_expires(
        redis: Redis, redis_server: Any, producer: CaptchaQueue) -> None:
    """`captcha-worker limit` (the chart's pre-upgrade hook) lowers the budget of workers that still enforce a
    higher limit: the solves running finish, none starts while the units in use reach the hold; when the hold
    expires the workers' own limit applies again.

    Watched in the budget itself: the units live when the hold landed, then samples of the live units. The CLI runs
    while this event loop (the worker's too) is blocked, so no claim of this worker runs between the hold and the
    first reading: every unit not in that reading was taken after the hold, and the promise is that one is taken
    only while fewer than 2 are in use (so a sample that holds a new unit holds at most 2). Simulator submissions
    would not tell: a task claimed just before the hold reaches in.php after it."""
    speed = "4"  # turnstile ~3 s: long enough to watch the units fall
    units_key = Keys("captcha").budget

    async def live_units() -> tuple[float, set[str]]:
        """(server time, the units live then)."""
        sec, usec = await redis.time()
        now = sec + usec / 1e6
        return now, {u.decode() if isinstance(u, bytes) else u
                     for u in await redis.zrangebyscore(units_key, now, "+inf")}

    async with simulator(threads=10, speed=float(speed)) as sim, \
            worker(redis_server.url, sim, CAPTCHAAI_THREADS="6", WORKER_CONCURRENCY="6", API_TIME_SCALE=speed,
                   LEASE_SECONDS="30"):  # the blocked loop renews no lease: 3 s ones expired under load (new units)
        await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(60)])
        await wait_until(lambda: sim.stats().in_flight == 6, 15, "6 solves in flight")
        proc = run_cli("limit", "--threads", "2", "--hold", "8", "--holder", "rollout-t",  # blocks the loop
                       env={"REDIS_URL": redis_server.url, "CAPTCHAAI_KEY": KEY})
        _, at_hold = await live_units()
        assert proc.returncode == 0, proc.stderr
        assert "effective limit 2" in proc.stdout and KEY not in proc.stdout + proc.stderr
        # The hold runs 8 s of server time from the CLI's call, not from its exit (which a loaded machine delays):
        # only samples taken while it is in force are judged.
        hold_ends = await redis.zscore(Keys("captcha").limits, "2:hold:rollout-t")
        assert hold_ends is not None, "the hold is in force"
        samples: list[tuple[int, int]] = []  # (live units, of them taken after the hold)
        while True:
            at, now = await live_units()
            if at >= hold_ends:
                break
            samples.append((len(now), len(now - at_hold)))
            await asyncio.sleep(0.05)
        await wait_until(lambda: sim.stats().in_flight == 6, 15, "the workers' 6 solves again (the hold expired)")
        expiry, (sec, usec) = await redis.zscore(Keys("captcha").limits, "2:hold:rollout-t"), await redis.time()
    assert len(at_hold) > 2 and samples, (at_hold, samples)
    assert all(live <= 2 for live, new in samples if new), samples  # a unit taken after the hold: fewer than 2 in use
    assert min(live for live, _ in samples) <= 2 and any(new for _, new in samples), samples
    assert expiry is None or expiry <= sec + usec / 1e6, "expired (the next heartbeat drops it)"


async def test_the_next_claim_rides_on_an_ack_batch_and_takes_the_units_it_released(
        redis_server: Any, producer: CaptchaQueue) -> None:
    """P1: with tasks waiting, an ACK batch carries the next CLAIM in its round trip (write_batch_and_claim). With
    as many plan threads as slots every unit is in use while the batch is sent, so a ridden claim gets items only
    because Redis runs the ACKs (releasing their units) before it; each task still ends once."""
    rides: list[int] = []
    async with simulator() as sim, worker(redis_server.url, sim, CAPTCHAAI_THREADS="5") as w:
        fold = w.queue.write_batch_and_claim

        async def counted(*args: Any, **kwargs: Any) -> Any:
            written, reply = await fold(*args, **kwargs)
            rides.append(len(reply.items) if reply is not None else -1)
            return written, reply

        w.queue.write_batch_and_claim = counted  # type: ignore[method-assign]
        ids = await producer.submit_many([{"method": "turnstile", "params": TURNSTILE} for _ in range(40)])
        outcomes = [o async for o in producer.as_completed(ids, timeout=60)]
        stats = sim.stats()
    assert all(isinstance(o, Solved) for o in outcomes) and len({o.id for o in outcomes}) == 40
    assert stats.submitted == 40, "each task solved once"
    assert rides and -1 not in rides, rides
    assert sum(rides) >= 10, f"claims rode on ACK batches and took the units those released: {rides}"


def test_the_full_result_keeps_every_field_of_the_outcome_it_does_not_set() -> None:
    """_full_result builds the Result field by field (P1: cheaper than dataclasses.replace): a field added to
    Result and not carried over there fails here."""
    from types import SimpleNamespace  # noqa: PLC0415 - this test only

    from captcha_worker.captchaai import SolveStats  # noqa: PLC0415
    from captcha_worker.job import Job, JobRunner  # noqa: PLC0415
    from captcha_worker.task import Result, Status, Task, Timings, parse_task  # noqa: PLC0415

    task = parse_task(json.dumps({"id": "t1", "method": "turnstile", "submitted_at": 100.0,
                                  "params": {"sitekey": "k", "pageurl": "https://example.com/"}}), max_bytes=65536)
    assert isinstance(task, Task)
    outcome = Result("t1", Status.SOLVED, kind="x", solution="tok", user_agent="ua", code="C", text="why",
                     attempts=9, api_calls=9, timings=Timings(1.0, 1.0, 1.0, 1.0, 1.0), token_lifetime_s=1.0,
                     captcha_id="77", worker_deaths=9)
    job = Job("t1", failures=2, deaths=1, stats=SolveStats(api_calls=3, started_at=101.0))
    full = JobRunner(SimpleNamespace(cfg=None))._full_result(job, task, outcome, 102.0)
    set_by_worker = {"kind", "attempts", "api_calls", "timings", "token_lifetime_s", "worker_deaths"}
    for f in dataclasses.fields(Result):
        if f.name not in set_by_worker:
            assert getattr(full, f.name) == getattr(outcome, f.name), f.name
    assert (full.kind, full.attempts, full.api_calls, full.worker_deaths) == ("turnstile", 3, 3, 1)
    assert full.timings.submitted_at == 100.0 and full.timings.solved_at == 102.0
    assert full.token_lifetime_s == task.kind.token_lifetime_s
