"""Pingback mode in one process: the receiver (real socket) checks handle + token + id against the record the Hub
wrote, wakes the owning solve through Redis (fakeredis and the real redis-server), and the CaptchaAI client
answers from the callback, falling back to polls when the callback is lost. The processes test is
tests/test_pingback_processes.py."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from captcha_worker import methods
from captcha_worker.captchaai import CaptchaAI, RetryPolicy, SolveStats, TaskFailed
from captcha_worker.config import ConfigError, Secret, WorkerConfig
from captcha_worker.connection import Refusal
from captcha_worker.methods import Answer
from captcha_worker.pingback import ENDED_TTL_MS, Hub, PingbackKeys, Receiver, Ticket, token_hash
from captcha_worker.polling import FallbackSchedule
from captcha_worker.simulator import SimConfig
from captcha_worker.simulator.config import Faults, Latency
from captcha_worker.simulator.server import SimulatorServer
from tests.helpers import KEY, refused_port

Q = "pbq"
TURNSTILE = methods.by_name("turnstile")
FAST = RetryPolicy(transient_attempts=3, transient_initial_s=0.01, transient_max_s=0.02,
                   capacity_initial_s=0.01, capacity_max_s=0.02)


def count(outcome: str) -> float:
    return REGISTRY.get_sample_value("captcha_solver_pingbacks_total", {"outcome": outcome}) or 0.0


def via(how: str) -> float:
    return REGISTRY.get_sample_value("captcha_solver_pingback_solves_total", {"via": how}) or 0.0


@dataclass
class Rig:
    hub: Hub
    receiver: Receiver
    session: aiohttp.ClientSession
    redis: Redis

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.receiver.port}"

    async def call(self, ticket: Ticket, **query: str) -> tuple[int, str]:
        """GET the ticket's URL (rebased on the receiver) with extra query fields, as CaptchaAI does."""
        parts = urlsplit(ticket.url)
        fields = {k: v[0] for k, v in parse_qs(parts.query).items()} | query
        async with self.session.get(self.base + parts.path, params=fields) as resp:
            return resp.status, await resp.text()


@pytest.fixture
async def rig(any_redis: Redis) -> AsyncIterator[Rig]:
    async with Hub(any_redis, Q, "w1", "https://pb.example/cb/") as hub, \
            Receiver(any_redis, Q, "127.0.0.1", 0) as receiver, aiohttp.ClientSession() as session:
        yield Rig(hub, receiver, session, any_redis)


def token_of(ticket: Ticket) -> str:
    return parse_qs(urlsplit(ticket.url).query)["t"][0]


async def test_the_url_carries_a_handle_and_a_token_stored_only_hashed(rig: Rig) -> None:
    ticket = await rig.hub.open(60)
    assert ticket is not None
    parts = urlsplit(ticket.url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "pb.example", f"/cb/pingback/{ticket.handle}")
    token = token_of(ticket)
    assert len(token) >= 32
    record = await rig.redis.hgetall(PingbackKeys(Q).record(ticket.handle))
    assert record == {"h": token_hash(token), "w": "w1"}
    assert token not in str(record)
    ttl = await rig.redis.pttl(PingbackKeys(Q).record(ticket.handle))
    assert 60_000 < ttl <= 120_000  # the window, and a margin for in.php itself
    other = await rig.hub.open(60)
    assert other is not None and token_of(other) != token and other.handle != ticket.handle


async def test_wrong_tokens_unknown_handles_and_malformed_calls_are_refused_and_counted(rig: Rig) -> None:
    ticket = await rig.hub.open(60)
    assert ticket is not None
    await rig.hub.bind(ticket, "1234", 60)
    before = {o: count(o) for o in ("forbidden", "unknown", "invalid", "accepted")}
    assert await rig.call(ticket, t="x" * 32, id="1234", code="ANSWER") == (403, "forbidden\n")
    assert await rig.call(ticket, id="999", code="ANSWER") == (403, "forbidden\n")  # right token, wrong id
    unknown = Ticket("A" * 16, ticket.url.replace(ticket.handle, "A" * 16))
    assert (await rig.call(unknown, id="1234", code="ANSWER"))[0] == 404
    assert (await rig.call(ticket, id="1234"))[0] == 400  # no code
    assert (await rig.call(ticket, id="12 34", code="A"))[0] == 400
    assert (await rig.call(Ticket("short", ticket.url.replace(ticket.handle, "short")), id="1", code="A"))[0] == 400
    assert {o: count(o) - before[o] for o in before} == {"forbidden": 2, "unknown": 1, "invalid": 3, "accepted": 0}
    assert not ticket.woken.is_set()
    assert await rig.hub.take(ticket) is None  # nothing was stored


async def test_a_callback_wakes_the_owner_and_duplicates_change_nothing(rig: Rig,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ticket = await rig.hub.open(60)
    assert ticket is not None
    assert await rig.hub.bind(ticket, "777", 60) is None
    accepted, duplicate = count("accepted"), count("duplicate")
    assert await rig.call(ticket, id="777", code="TOKEN-abc", user_agent="UA/1") == (200, "accepted\n")
    assert await rig.hub.wait(ticket, 5.0)  # woken through the wake list (BLPOP), not by a poll
    assert await rig.call(ticket, id="777", code="TOKEN-other") == (200, "duplicate\n")
    assert await rig.hub.take(ticket) == Answer("TOKEN-abc", "UA/1")
    key = PingbackKeys(Q).record(ticket.handle)
    assert set(await rig.redis.hgetall(key)) == {"h", "w", "c", "s"}  # the answer left Redis
    assert 0 < await rig.redis.pttl(key) <= ENDED_TTL_MS
    assert await rig.call(ticket, id="777", code="TOKEN-late") == (200, "duplicate\n")
    assert "a" not in await rig.redis.hgetall(key)
    assert (count("accepted") - accepted, count("duplicate") - duplicate) == (1, 2)
    text = caplog.text
    assert token_of(ticket) not in text and "TOKEN-" not in text


async def test_a_callback_before_in_php_answered_is_kept_for_the_bind_of_its_id(rig: Rig) -> None:
    ticket = await rig.hub.open(60)
    assert ticket is not None
    assert await rig.call(ticket, id="55", code="EARLY") == (200, "accepted\n")
    assert await rig.hub.bind(ticket, "55", 60) == Answer("EARLY", None)
    wrong = await rig.hub.open(60)
    assert wrong is not None
    assert await rig.call(wrong, id="66", code="FORGED") == (200, "accepted\n")
    assert await rig.hub.bind(wrong, "67", 60) is None  # it named another id: dropped
    assert "a" not in await rig.redis.hgetall(PingbackKeys(Q).record(wrong.handle))


async def test_the_wake_reaches_the_owning_worker_only(any_redis: Redis) -> None:
    """Two hubs (two workers) share Redis; a callback received anywhere wakes the owner of its submission."""
    async with Hub(any_redis, Q, "owner", "http://x") as owner, Hub(any_redis, Q, "other", "http://x") as other, \
            Receiver(any_redis, Q, "127.0.0.1", 0) as receiver, aiohttp.ClientSession() as session:
        ticket = await owner.open(60)
        decoy = await other.open(60)
        assert ticket is not None and decoy is not None
        await owner.bind(ticket, "1", 60)
        rig = Rig(other, receiver, session, any_redis)
        assert (await rig.call(ticket, id="1", code="A"))[0] == 200
        assert await owner.wait(ticket, 5.0)
        assert await any_redis.llen(PingbackKeys(Q).wake("other")) == 0
        assert not decoy.woken.is_set()


def test_the_fallback_schedule_polls_only_in_the_tail() -> None:
    s = FallbackSchedule(12.0, 3.0)
    assert s.delay(0, 0.0) == pytest.approx(19.5, rel=0.06)  # mean + 2.5 sd
    assert s.delay(1, 20.0) == pytest.approx(5.0, rel=0.06)


def test_pingback_url_config() -> None:
    base = {"CAPTCHAAI_KEY": KEY, "CAPTCHAAI_THREADS": "2"}
    assert WorkerConfig.from_env(base).pingback_url is None
    cfg = WorkerConfig.from_env({**base, "PINGBACK_URL": "https://pb.example.com/x/", "PINGBACK_PORT": "9000"})
    assert (cfg.pingback_url, cfg.pingback_port) == ("https://pb.example.com/x", 9000)
    for bad in ("ftp://x", "https://u:p@x", "https://x/?a=1", "x.example"):
        with pytest.raises(ConfigError, match="PINGBACK_URL") as exc:
            WorkerConfig.from_env({**base, "PINGBACK_URL": bad})
        assert ":p@" not in str(exc.value)


# -- the CaptchaAI client in pingback mode, against the simulator over real sockets ---------------------------
@dataclass
class Live:
    sim: SimulatorServer
    api: CaptchaAI
    hub: Hub


@pytest.fixture
async def live(redis: Redis) -> AsyncIterator[Live]:
    cfg = SimConfig(threads=50, speed=20, latency={"turnstile": Latency(12.0, 3.0)}, seed=3)
    async with SimulatorServer(cfg) as sim, Receiver(redis, Q, "127.0.0.1", 0) as receiver, \
            Hub(redis, Q, "w1", f"http://127.0.0.1:{receiver.port}", time_scale=20) as hub, \
            CaptchaAI(Secret(KEY), sim.url, retry=FAST, poll_scale=20, pingback=hub) as api:
        yield Live(sim, api, hub)


PARAMS = {"sitekey": "0x4AAAAAAAB0000000000000", "pageurl": "https://example.com/login"}


async def test_a_solve_is_answered_by_its_callback_with_one_api_call(live: Live) -> None:
    before = via("pingback")
    stats = SolveStats()
    solution = await live.api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 30, stats=stats)
    assert solution.answer.request
    assert (stats.api_calls, stats.polls) == (1, 0)
    assert via("pingback") - before == 1
    s = live.sim.stats()
    assert (s.pingbacks_sent, s.pingbacks_failed) == (1, 0)


async def test_a_lost_callback_is_answered_by_the_fallback_polls(live: Live) -> None:
    # the simulator accepts pingback=URL and never calls it
    live.sim.simulator.reconfigure(dataclasses.replace(live.sim.simulator.config, pingback=False))
    before = via("poll")
    stats = SolveStats()
    solution = await live.api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 30, stats=stats)
    assert solution.answer.request
    assert stats.polls >= 1 and stats.api_calls == 1 + stats.polls
    assert via("poll") - before == 1


async def test_an_unsolvable_callback_is_confirmed_by_a_poll(live: Live) -> None:
    live.sim.simulator.reconfigure(dataclasses.replace(live.sim.simulator.config, faults=Faults(unsolvable=1.0)))
    live.api.latency_model(TURNSTILE).mean = 25.0  # the fallback's first poll: past 25 s
    stats = SolveStats()
    started = time.monotonic()
    with pytest.raises(TaskFailed, match="ERROR_CAPTCHA_UNSOLVABLE"):
        await live.api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 30, stats=stats,
                             unsolvable_retries=0)
    assert stats.polls == 1  # woken by the callback, then one res.php call for the API's own verdict
    assert time.monotonic() - started < 5


async def test_without_redis_a_solve_submits_without_pingback_and_polls(live: Live,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """... and the hub says so once (its own guard: one line per change of state, however many calls failed)."""
    caplog.set_level(logging.INFO, "captcha_worker.pingback")
    with refused_port() as port:
        dead = Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
        async with Hub(dead, Q, "w1", "http://127.0.0.1:1") as hub:
            live.api.pingback = hub
            stats = SolveStats()
            solution = await live.api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 30, stats=stats)
            assert solution.answer.request and stats.polls >= 1
            assert hub.guard.down is Refusal.CONNECTION
        await dead.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "captcha_worker.pingback"]
    assert lines.count("pingback_redis_unavailable") == 1 and "pingback_redis_reconnected" not in lines, lines
    assert live.sim.stats().pingbacks_sent == 0


async def test_many_solves_at_once_are_each_woken_by_their_own_callback(live: Live) -> None:
    stats = [SolveStats() for _ in range(20)]
    solutions = await asyncio.gather(*(live.api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 30,
                                                      stats=s) for s in stats))
    assert len({s.captcha_id for s in solutions}) == 20
    assert sum(s.api_calls for s in stats) <= 20 + 2  # the odd solve in the tail may be polled once
