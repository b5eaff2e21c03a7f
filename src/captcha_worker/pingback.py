"""Pingback mode (``PINGBACK_URL``): CaptchaAI calls us back when an answer is ready, instead of being polled.

Every ``in.php`` of a worker in pingback mode carries ``pingback=<PINGBACK_URL>/pingback/<handle>?t=<token>``:
``handle`` names this one submission (random, not secret), ``token`` is ``secrets.token_urlsafe(24)`` and is
stored only as its SHA-256, in the submission's Redis record (its TTL is the solve's window: the record never
outlives the task). CaptchaAI (and the simulator, ``simulator.pingback``) GETs that URL with ``&id=<captcha
id>&code=<answer>`` (``&user_agent=`` for the kinds answered with one) when the solve ends.

The receiver (:class:`Receiver`, on ``PINGBACK_PORT`` of every worker process; the chart's pingback Service and
optional Ingress route to it) checks handle + token + id in one script (RECEIVE) and, when they match, stores the
answer on the record and pushes the handle to the owning worker's wake list: the callback may reach any pod, the
solve is woken on the pod that owns it (:class:`Hub`, one BLPOP loop per process). Answers:

=========  ======  ===================================================================================
outcome    HTTP    when
=========  ======  ===================================================================================
accepted   200     the first callback of a live submission with its token (and its captcha id)
duplicate  200     a repeated callback (or one after the solve ended): nothing changes (idempotent)
unknown    404     no such submission (never existed, or its record expired with the task)
forbidden  403     the token, or the captcha id, does not match the submission's
invalid    400     the request is not a pingback (no token, no id, no code, a malformed handle)
failed     503     Redis could not be reached: the solve is answered by its fallback polls
=========  ======  ===================================================================================

Each is counted in ``captcha_solver_pingbacks_total{outcome}``; no log line or label carries a token, a handle's
answer or the callback's URL (the receiver has no access log).

Polling goes on as the fallback (``polling.FallbackSchedule``: the first poll in the tail of the solve-time
distribution, then every 5 s scaled), so a lost callback costs latency, never a solve, and a Redis outage only
turns pingback mode back into (slow) polling. An answer ``ERROR_*`` (the simulator's unsolvable) only wakes the
solve: its next ``res.php`` poll, at once, gives the API's own verdict.

Keys (under the queue's hash tag, so they live on the queue's Cluster slot):

``{q}:pingback:<handle>``       hash  ``h`` SHA-256 of the token, ``w`` the owning worker, ``c`` the captcha id
                                      (once in.php answered), ``a``/``u``/``i`` the answer, its user agent and the
                                      id it came with (until taken), ``s`` set once the solve ended. TTL: the
                                      solve's window; once ended, :data:`ENDED_TTL_MS` (duplicates stay
                                      recognised, the answer is gone).
``{q}:pingback-wake:<worker>``  list  handles whose answer arrived, for that worker's BLPOP loop. TTL 60 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote

from aiohttp import web

from captcha_worker import metrics
from captcha_worker.connection import Client, refusal
from captcha_worker.guard import Backoff, RedisGuard
from captcha_worker.log import event
from captcha_worker.methods import Answer
from captcha_worker.service import Site
from captcha_worker.store.keys import Keys
from captcha_worker.store.scripts import SlotScript, lua

log = logging.getLogger("captcha_worker.pingback")

HANDLE_RE: Final = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_ID_RE: Final = re.compile(r"^[0-9A-Za-z_-]{1,64}$")  # captchaai.CAPTCHA_ID_RE (not imported: no cycle)
MAX_TOKEN_CHARS: Final = 128
MAX_CODE_CHARS: Final = 16384  # an answer: reCAPTCHA Enterprise tokens run to a few kB
ENDED_TTL_MS: Final = 60_000
WAKE_TTL_S: Final = 60
WAKE_BATCH: Final = 256

_RECEIVE = lua("pingback_receive")
_OPEN = lua("pingback_open")
_BIND = lua("pingback_bind")
_TAKE = lua("pingback_take")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class PingbackKeys:
    """Pingback mode's keys, as ``queue.Keys`` names them."""

    queue: str

    def record(self, handle: str) -> str:
        return Keys(self.queue).pingback(handle)

    def wake(self, worker: str) -> str:
        return Keys(self.queue).pingback_wake(worker)


@dataclass(eq=False)
class Ticket:
    """One submission in pingback mode: the URL its in.php carries, and the event its callback sets."""

    handle: str
    url: str
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False  # taken: its record holds no answer and accepts none


class Hub:
    """The worker side: opens a record per submission, binds it to the captcha id, wakes the waiting solve when
    its callback's handle arrives on this worker's wake list, and takes the answer out of Redis.

    Every Redis failure here is logged (once per change) and answered as "no pingback": the solve polls."""

    def __init__(self, redis: Client, queue: str, worker: str, base_url: str, *, time_scale: float = 1.0) -> None:
        self.redis, self.keys, self.worker = redis, PingbackKeys(queue), worker
        self.base_url = base_url.rstrip("/")
        self.ended_ttl_ms = max(1000, int(ENDED_TTL_MS / time_scale))
        self._open, self._bind = SlotScript(redis, _OPEN), SlotScript(redis, _BIND)
        self._take = SlotScript(redis, _TAKE)
        self._waiting: dict[str, Ticket] = {}
        self._loop: asyncio.Task[None] | None = None
        self.guard = RedisGuard(log, metrics.REDIS_ERRORS, hint="solves fall back to polling until Redis is back",
                                prefix="pingback_")  # the hub's own view: the worker's readiness does not follow it

    async def __aenter__(self) -> Hub:
        self._loop = asyncio.create_task(self._wake_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    def url(self, handle: str, token: str) -> str:
        return f"{self.base_url}/pingback/{handle}?t={quote(token, safe='')}"

    async def open(self, window_s: float) -> Ticket | None:
        """A new submission's ticket (its record written first, so no callback can come before it), or None
        when Redis failed: submit without a pingback."""
        handle, token = secrets.token_urlsafe(12), secrets.token_urlsafe(24)
        ttl_ms = int(window_s * 1000) + 60_000  # in.php itself may take a while
        if not await self._call("pingback_open", self._open, [self.keys.record(handle)],
                                [token_hash(token), self.worker, ttl_ms]):
            return None
        ticket = Ticket(handle, self.url(handle, token))
        self._waiting[handle] = ticket
        return ticket

    async def bind(self, ticket: Ticket, captcha_id: str, window_s: float) -> Answer | None:
        """in.php answered `captcha_id`: the record now accepts callbacks of that id only. The answer when its
        callback came even before this (an instant solve)."""
        got = await self._call("pingback_bind", self._bind, [self.keys.record(ticket.handle)],
                               [captcha_id, int(window_s * 1000) + 1000, self.ended_ttl_ms])
        if got:
            self._waiting.pop(ticket.handle, None)
            ticket.ended = True
            return _answer(got)
        return None

    async def wait(self, ticket: Ticket, seconds: float) -> bool:
        """Wait up to `seconds` for the ticket's callback. True when it came."""
        if not ticket.woken.is_set():
            with suppress(TimeoutError):
                async with asyncio.timeout(max(seconds, 0.0)):
                    await ticket.woken.wait()
        return ticket.woken.is_set()

    async def take(self, ticket: Ticket) -> Answer | None:
        """End the ticket: its answer if a callback stored one (it leaves Redis), else None. Idempotent."""
        self._waiting.pop(ticket.handle, None)
        ticket.woken.clear()
        if ticket.ended:
            return None
        ticket.ended = True
        got = await self._call("pingback_take", self._take, [self.keys.record(ticket.handle)], [self.ended_ttl_ms])
        return _answer(got) if got else None

    async def _call(self, what: str, script: SlotScript, keys: list[str], args: list[object]) -> object:
        try:
            result = await script(keys=keys, args=args)
        except Exception as exc:  # pingbacks are best effort: any failure leaves the solve to its polls
            self._failed(what, exc)
            return None
        self.guard.ok(what)
        return result

    def _failed(self, what: str, exc: Exception) -> None:
        """A refusal goes to the hub's guard (one line per change of state); anything else is not Redis being
        down but a failure of this call, logged as such."""
        why = refusal(exc)
        if why is not None:
            self.guard.failed(why, what, exc)
        else:
            event(log, "pingback_call_failed", logging.WARNING, op=what, error=type(exc).__name__,
                  hint="this solve falls back to polling")

    async def _wake_loop(self) -> None:
        """BLPOP this worker's wake list; every handle popped wakes its solve (handles of solves no longer
        waiting are ignored: a duplicate, or a solve its polls already answered)."""
        key, backoff = self.keys.wake(self.worker), Backoff()
        while True:
            try:
                popped = await self.redis.blpop([key], timeout=1)  # type: ignore[misc]
                handles: list[str] = []
                if popped:
                    handles.append(popped[1])
                    more = await self.redis.lpop(key, WAKE_BATCH)  # type: ignore[misc]
                    handles += more or []
                backoff.reset()
                self.guard.ok("pingback_wake")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed("pingback_wake", exc)
                await asyncio.sleep(backoff.delay())
                continue
            for handle in handles:
                ticket = self._waiting.get(handle)
                if ticket is not None:
                    ticket.woken.set()


def _answer(got: object) -> Answer:
    assert isinstance(got, list) and len(got) == 2
    request, ua = str(got[0]), str(got[1])
    return Answer(request=request, user_agent=ua or None)


class Receiver:
    """The HTTP endpoint CaptchaAI calls: ``GET <any prefix>/pingback/<handle>?t=&id=&code=[&user_agent=]`` on
    ``host:port`` (and ``/healthz``). No access log: the query carries the token and the answer."""

    def __init__(self, redis: Client, queue: str, host: str, port: int) -> None:
        self.keys, self.host, self.port = PingbackKeys(queue), host, port
        self._receive = SlotScript(redis, _RECEIVE)
        self._site: Site | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get(r"/{prefix:(.*/)?}pingback/{handle}", self.handle, allow_head=False)
        app.router.add_get("/healthz", _healthz)
        return app

    async def __aenter__(self) -> Receiver:
        self._site = Site(self.app(), self.host, self.port, access_log=None, max_line_size=32768)
        await self._site.start()
        self.port = self._site.port
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._site is not None:
            await self._site.stop()

    async def handle(self, request: web.Request) -> web.Response:
        outcome = await self._outcome(request)
        metrics.PINGBACKS.labels(outcome).inc()
        status = {"accepted": 200, "duplicate": 200, "unknown": 404, "forbidden": 403, "invalid": 400}.get(outcome,
                                                                                                        503)
        return web.Response(text=f"{outcome}\n", status=status)

    async def _outcome(self, request: web.Request) -> str:
        q, handle = request.query, request.match_info["handle"]
        token, captcha_id, code = q.get("t", ""), q.get("id", ""), q.get("code", "")
        ua = q.get("user_agent", "")
        if (not HANDLE_RE.fullmatch(handle) or not 0 < len(token) <= MAX_TOKEN_CHARS
                or not _ID_RE.fullmatch(captcha_id) or not 0 < len(code) <= MAX_CODE_CHARS or len(ua) > 1024):
            return "invalid"
        try:
            outcome = await self._deliver(handle, [token_hash(token), captcha_id, code, ua])
        except Exception as exc:  # an outage, or anything else: the protocol's 503, never a traceback
            why = refusal(exc)
            if why is not None:
                metrics.REDIS_ERRORS.labels(why.value).inc()
            event(log, "pingback_receive_failed", logging.WARNING, error=type(exc).__name__,
                  reason=why.value if why is not None else None, hint="the solve is answered by its fallback polls")
            return "failed"
        return str(outcome)


    async def _deliver(self, handle: str, args: list[str]) -> str:
        """The receive script with the owning worker's wake list as a declared key: read the worker from the
        record, then let the script check it is still the one (twice at most; the record is written once)."""
        record = self.keys.record(handle)
        for _ in range(2):
            worker = await self._receive.redis.hget(record, "w")  # type: ignore[misc]
            if worker is None:
                return "unknown"
            owner = worker.decode() if isinstance(worker, bytes) else str(worker)
            outcome = await self._receive(keys=[record, self.keys.wake(owner)],
                                          args=[*args, owner, WAKE_TTL_S, handle])
            outcome = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
            if outcome != "moved":
                return outcome
        return "failed"


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")
