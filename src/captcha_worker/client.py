"""Producer API: submit CAPTCHA tasks to the queue and get their results pushed back (no polling).

::

    async with CaptchaQueue.from_env() as q:  # REDIS_URL, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_*, QUEUE_NAME
        outcome = await q.solve("turnstile", sitekey="0x4AAA...", pageurl="https://example.com/login")
        if isinstance(outcome, Solved):
            use(outcome.solution)

One background listener per ``CaptchaQueue`` blocks on this producer's reply list (``{q}:reply:<producer>``)
on its own connection and resolves the futures of every waiting ``result()`` call, however many there are.
A result whose notification was missed (the reply list expired) is still read from its result key
(``{q}:result:<id>``, kept for ``RESULT_TTL_SECONDS``).  Tasks submitted by *another* process (``captcha-worker
wait``, a restarted producer) notify that process; for those the waiter reads the result keys of all such tasks
in one LOOKUP twice a second.

Submitting is idempotent per task id: a second push of a known id is a no-op, so a push whose reply was lost
(a timeout while Redis stalled) is retried here without ever queueing the task twice, and a caller that retries
with the same ``id=`` is safe too.  Redis outages surface as :class:`QueueUnavailable` (which says why: unreachable,
out of memory, read-only, ...); ``result()`` tells a result that expired (:class:`ResultExpired`) from an id the
queue never had (:class:`UnknownTask`).  ``report_bad`` / ``report_good`` tell CaptchaAI whether a solved task's
answer worked (the refund path); a worker sends them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import hashlib
import math
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from captcha_worker.codes import Code, describe
from captcha_worker.config import (
    DEFAULT_MAX_TASK_BYTES,
    DEFAULT_QUEUE,
    DEFAULT_TASK_TTL,
    ProducerConfig,
    RedisConfig,
    Secret,
)
from captcha_worker.connection import Client, RedisUnavailable, Refusal, connect, refusal, tls_hint
from captcha_worker.guard import NO_SPREAD, Backoff
from captcha_worker.queue import DeadLetter, Keys, Lookup, QueueStats, RedisQueue, Text, Verdict, as_awaitable
from captcha_worker.task import Invalid, Result, Status, Task, Timings, make_task

T = TypeVar("T")
_ARRIVED_MAX = 10_000
#: ids whose result this producer handed over, kept to drop a second notification of the same task (a failover
#: can push one twice: docs/reliability.md). As many as a busy producer notifies in DELIVERED_KEEP_S at most.
DELIVERED_MAX = 200_000
DELIVERED_KEEP_S = 900.0
SUBMIT_RETRY_S = 30.0  # how long a submit keeps retrying a push Redis did not answer (idempotent, so safe)


class QueueUnavailable(RedisUnavailable):
    """Redis cannot serve (``refusal`` says why: unreachable, out of memory, read-only, ...). The message names
    the (redacted) URL and what failed. ``task_ids``: the ids a failed submit was for; submitting them again with
    ``id=`` is safe (a known id is a no-op)."""

    def __init__(self, why: Refusal, display_url: str, doing: str = "", task_ids: Iterable[str] = ()) -> None:
        super().__init__(why, display_url, doing)
        self.task_ids = list(task_ids)


class InvalidTask(ValueError):
    """The task would be rejected by the workers (unknown method, missing param, ...)."""

    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.code = code


# -- typed outcomes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Outcome:
    id: str
    attempts: int  # the attempt that gave the outcome: API-side failures before it + 1
    timings: Timings

    @property
    def queued_s(self) -> float | None:
        return self.timings.queued

    @property
    def solving_s(self) -> float | None:
        return self.timings.solving

    @property
    def total_s(self) -> float | None:
        return self.timings.total


@dataclass(frozen=True)
class Solved(_Outcome):
    solution: str  # the token / text / JSON string CaptchaAI returned
    kind: str | None
    user_agent: str | None  # Enterprise and Cloudflare challenge: use it with the token
    api_calls: int
    token_lifetime_s: float | None
    captcha_id: str | None = None  # CaptchaAI's id of the solve (CaptchaQueue.report_bad / report_good use it)
    provider: str | None = None  # the overflow provider that solved it (None: CaptchaAI, the plan)
    cost: str | None = None  # what that provider charged, as a decimal string of money ("0.00145")

    @property
    def token(self) -> str:
        return self.solution

    def token_age(self, now: float | None = None) -> float | None:
        """Seconds since the worker received the answer (tokens expire: reCAPTCHA ~120 s)."""
        solved = self.timings.solved_at
        return None if solved is None else max(0.0, (time.time() if now is None else now) - solved)

    def expires_in(self, now: float | None = None) -> float | None:
        """Seconds of usable life left, when the kind's token lifetime is known."""
        age = self.token_age(now)
        return None if age is None or self.token_lifetime_s is None else self.token_lifetime_s - age


@dataclass(frozen=True)
class Failed(_Outcome):
    code: str
    text: str


@dataclass(frozen=True)
class Expired(_Outcome):
    code: str
    text: str


@dataclass(frozen=True)
class TimedOut:
    """No result within the time this producer was willing to wait (the task may still be solved later)."""

    id: str
    waited_s: float


@dataclass(frozen=True)
class ResultExpired:
    """The task finished, but its result is no longer kept (``RESULT_TTL_SECONDS``): submit it again."""

    id: str


@dataclass(frozen=True)
class UnknownTask:
    """After the wait, the queue still has no record of this id: never submitted here (another queue? a typo?),
    or finished so long ago (``TASK_TTL_SECONDS``) that even its record expired. (An id is waited for even when
    unknown at first: a raw JSON task pushed onto the list becomes known only when a worker claims it.)"""

    id: str
    waited_s: float


Outcome = Solved | Failed | Expired | TimedOut | ResultExpired | UnknownTask


def outcome_of(result: Result) -> Solved | Failed | Expired:
    base: dict[str, Any] = {"id": result.id, "attempts": result.attempts, "timings": result.timings}
    if result.status is Status.SOLVED:
        return Solved(**base, solution=result.solution or "", kind=result.kind, user_agent=result.user_agent,
                      api_calls=result.api_calls, token_lifetime_s=result.token_lifetime_s,
                      captcha_id=result.captcha_id, provider=result.provider, cost=result.cost)
    if result.status is Status.EXPIRED:
        return Expired(**base, code=result.code or Code.EXPIRED, text=result.text or "")
    return Failed(**base, code=result.code or Code.ERROR, text=result.text or "")


@dataclass(frozen=True)
class TaskSpec:
    """One task for ``submit_many``."""

    method: str
    params: Mapping[str, Any]
    deadline: float | dt.datetime | None = None
    priority: bool = False
    id: str | None = None  # your own task id (see CaptchaQueue.submit); None: a new one


def _deadline(value: float | dt.datetime | None, now: float) -> float | None:
    """`deadline` is seconds from now, or an aware datetime."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError("deadline datetime must be timezone-aware")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError("deadline must be a positive number of seconds from now, or an aware datetime")
    return now + float(value)


def new_task_ids(n: int) -> list[str]:
    """n random 128-bit ids as 32 hex characters, from one os.urandom call (uuid4 per id costs a syscall each)."""
    block = os.urandom(16 * n).hex()
    return [block[i:i + 32] for i in range(0, 32 * n, 32)]


def new_producer_id() -> str:
    return f"p-{secrets.token_hex(8)}"


def _stored_outcome(task_id: str, value: Text | Lookup) -> Outcome | None:
    """What a LOOKUP value means for a waiter: an outcome, or None to keep waiting (queued, or not known yet)."""
    if value is Lookup.QUEUED or value is Lookup.UNKNOWN:
        return None
    if value is Lookup.FINISHED:
        return ResultExpired(task_id)
    try:
        return outcome_of(Result.from_json(value))
    except (ValueError, KeyError, TypeError):
        return Failed(task_id, 0, Timings(), code=Code.INVALID_RESULT, text=describe(Code.INVALID_RESULT))


class CaptchaQueue:
    """Async producer. Use ``async with``; one instance per process serves any number of waiters."""

    def __init__(self, redis: Client, *, queue: str = DEFAULT_QUEUE, producer_id: str | None = None,
                 task_ttl: int = DEFAULT_TASK_TTL, max_task_bytes: int = DEFAULT_MAX_TASK_BYTES,
                 owns_redis: bool = False, display_url: str = "redis", submit_retry_s: float = SUBMIT_RETRY_S,
                 wait_replicas: int = 0, wait_timeout_ms: int = 500, overflow_kinds: Iterable[str] = ()) -> None:
        self.redis = redis
        #: kinds CaptchaAI lacks that the workers' PROVIDERS take (``methods.FOREIGN_KINDS``, e.g. "hcaptcha"):
        #: accepted here; any other such kind is refused at submit with UNSUPPORTED_METHOD, as the workers would
        self.overflow_kinds = frozenset(overflow_kinds)
        self.queue = RedisQueue(redis, queue, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
        self.producer_id = producer_id or new_producer_id()
        self.task_ttl = task_ttl
        self.max_task_bytes = max_task_bytes
        self.submit_retry_s = submit_retry_s
        self._owns_redis = owns_redis
        self._url = display_url
        self._waiters: dict[str, list[asyncio.Future[Outcome]]] = {}
        self._arrived: OrderedDict[str, Result] = OrderedDict()
        self._listener: asyncio.Task[None] | None = None
        self._lookups: dict[str, list[asyncio.Future[Text | Lookup]]] = {}
        self._lookup_task: asyncio.Task[None] | None = None
        self._own: set[str] = set()  # submitted here, result not yet notified
        #: id -> (when notified, monotonic; the notification's SHA-256), oldest first
        self._delivered: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        #: second notifications of one result, dropped: read from a master before it was replicated, and pushed
        #: again by the worker's ACK retried on the new master
        self.duplicates_dropped = 0
        self._foreign_task: asyncio.Task[None] | None = None
        self._closing = False

    @classmethod
    def from_config(cls, rc: RedisConfig, *, producer_id: str | None = None, **kwargs: Any) -> CaptchaQueue:
        """A producer on the package's one connection factory (TLS, CA, ACL user, password, timeouts).
        Connects lazily; `async with` checks the connection. Connections are named
        ``captcha-producer-<producer id>`` (visible in CLIENT LIST)."""
        producer_id = producer_id or new_producer_id()
        redis = connect(rc, client_name=f"captcha-producer-{producer_id}")
        kwargs = {"wait_replicas": rc.wait_replicas, "wait_timeout_ms": rc.wait_timeout_ms, **kwargs}
        return cls(redis, owns_redis=True, display_url=rc.display_url(), producer_id=producer_id, **kwargs)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> CaptchaQueue:
        """Configured like the workers: REDIS_URL, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA_FILE,
        REDIS_TLS_INSECURE, REDIS_*_TIMEOUT_SECONDS, REDIS_MODE with its Sentinel / Cluster settings,
        REDIS_WAIT_REPLICAS, QUEUE_NAME, TASK_TTL_SECONDS, MAX_TASK_BYTES (ConfigError, a ValueError, on a bad
        value)."""
        pc = ProducerConfig.from_env(env)
        kwargs = {"queue": pc.queue, "task_ttl": pc.task_ttl_seconds, "max_task_bytes": pc.max_task_bytes, **kwargs}
        return cls.from_config(pc.redis, **kwargs)

    @classmethod
    def from_url(cls, url: str, *, password: str | None = None, username: str | None = None,
                 **kwargs: Any) -> CaptchaQueue:
        """A producer for a Redis URL (credentials in the URL, or as arguments)."""
        rc = RedisConfig.from_env({"REDIS_URL": url})
        rc = dataclasses.replace(rc, username=username or rc.username, password=Secret(password or ""))
        return cls.from_config(rc, **kwargs)

    @property
    def keys(self) -> Keys:
        return self.queue.keys

    async def __aenter__(self) -> CaptchaQueue:
        await self._guarded(as_awaitable(self.redis.ping()), doing="connecting")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Background loops end by themselves once closing (each wakes at least once a second); cancelling them
        is the fallback, repeated: redis-py can lose a cancel that lands while it reads a reply."""
        self._closing = True
        pending = {t for t in (self._listener, self._foreign_task, self._lookup_task) if t is not None}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=2.5)
        while pending:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=1)
        self._listener = self._foreign_task = self._lookup_task = None
        if self._owns_redis:
            await self.redis.aclose()

    # -- submitting -------------------------------------------------------------------------------------
    def _task(self, method: str, params: Mapping[str, Any], deadline: float | dt.datetime | None,
              task_id: str, now: float) -> tuple[Task, str]:
        """Build and validate a task exactly as the workers will (so bad input fails here, not later).
        Returns the task and its JSON body (encoded once)."""
        data = {"id": task_id, "method": method, "params": dict(params), "submitted_at": now,
                "reply_to": self.producer_id, "deadline": _deadline(deadline, now)}
        task = make_task(data, now=now, foreign=self.overflow_kinds)
        if isinstance(task, Invalid):
            raise InvalidTask(task.reason, task.code)
        body = task.body()
        size = len(body.encode())
        if size > self.max_task_bytes:
            raise InvalidTask(f"task is {size} bytes, over the limit of {self.max_task_bytes}", Code.TASK_TOO_LARGE)
        return task, body

    async def submit(self, method: str, params: Mapping[str, Any] | None = None, *,
                     deadline: float | dt.datetime | None = None, priority: bool = False,
                     id: str | None = None, task_id: str | None = None, **more_params: Any) -> str:
        """Queue one task; returns its id. Params as keywords, or `params=` for names like ``data-s``.

        `deadline`: seconds from now (or an aware datetime) after which the task is answered `expired`
        instead of being solved. `priority`: put the task at the head of the queue. `id`: your own task id
        (1-128 letters, digits, ``. _ : -``); submitting an id the queue knows (queued, or finished within
        TASK_TTL_SECONDS) is a no-op that returns it, so retrying a submit with the same id never solves twice.
        (`task_id` is the earlier name of `id`.)
        """
        task, body = self._task(method, {**(params or {}), **more_params}, deadline,
                                id or task_id or new_task_ids(1)[0], time.time())
        await self._push([(task.id, body)], front=priority)
        self._own.add(task.id)
        self._ensure_listener()
        return task.id

    async def submit_many(self, tasks: Iterable[TaskSpec | Mapping[str, Any]], *, batch: int = 500) -> list[str]:
        """Queue many tasks with one script call per `batch`, pipelined. Returns ids in order.

        Items are TaskSpec or mappings ``{"method": ..., "params": {...}, "deadline": ..., "priority": ...,
        "id": ...}`` (``id`` optional, as in :meth:`submit`).
        """
        now = time.time()
        specs = [t if isinstance(t, TaskSpec) else TaskSpec(t["method"], t.get("params") or {}, t.get("deadline"),
                                                             bool(t.get("priority", False)), t.get("id"))
                 for t in tasks]
        ids = [s.id or fresh for s, fresh in zip(specs, new_task_ids(len(specs)), strict=True)]
        built = [(*self._task(s.method, s.params, s.deadline, tid, now), s.priority)
                 for s, tid in zip(specs, ids, strict=True)]
        for front in (False, True):
            group = [(t.id, body) for t, body, p in built if p is front]
            if group:
                await self._push(group, front=front, batch=batch)
        self._own.update(ids)
        self._ensure_listener()
        return ids

    async def _push(self, tasks: list[tuple[str, str]], *, front: bool, batch: int = 500) -> None:
        """PUSH, retried while Redis does not answer (for up to `submit_retry_s`): PUSH is idempotent per id, so
        a push that did run but whose reply was lost is, sent again, a no-op."""
        backoff, give_up = Backoff(0.1, 2.0, spread=(0.5, 1.0)), time.monotonic() + self.submit_retry_s
        while True:
            try:
                await self.queue.push(tasks, ttl=self.task_ttl, front=front, batch=batch)
                return
            except Exception as exc:
                why = refusal(exc)
                if why is None:
                    raise
                pause = backoff.delay()
                if time.monotonic() + pause > give_up:
                    raise QueueUnavailable(why, self._url, "submit", [tid for tid, _ in tasks]) from None
            await asyncio.sleep(pause)

    async def _guarded(self, aw: Awaitable[T], *, doing: str = "") -> T:
        try:
            return await aw
        except Exception as exc:
            why = refusal(exc)
            if why is None:
                raise
            hint = tls_hint(exc)
            raise QueueUnavailable(why, self._url, f"{doing}: {hint}" if hint else doing) from None

    # -- operating the queue (the `stats` and `dead-letters` commands) ------------------------------------
    async def stats(self) -> QueueStats:
        """Pending, processing, dead, budget in use, workers alive (QueueUnavailable when Redis refuses)."""
        return await self._guarded(self.queue.stats(), doing="reading stats")

    async def dead_letters(self, start: int = 0, count: int = 100) -> list[DeadLetter]:
        """Dead letters, newest first."""
        return await self._guarded(self.queue.dead_letters(start, count), doing="reading dead letters")

    async def requeue_dead(self, letter: DeadLetter) -> bool | None:
        """Put a dead letter's task back on pending (attempts reset, this producer's task TTL): True when
        requeued, False when the entry is gone meanwhile, None when there is nothing left to requeue."""
        return await self._guarded(self.queue.requeue_dead(letter, ttl=self.task_ttl), doing="requeueing")

    async def purge_dead(self) -> int:
        """Delete every dead letter; returns how many there were."""
        return await self._guarded(self.queue.purge_dead(), doing="purging dead letters")

    # -- results ----------------------------------------------------------------------------------------
    def _ensure_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        """Block on this producer's reply list (one pooled connection); hand each result to its waiters."""
        reply_key = self.keys.reply(self.producer_id)
        backoff = Backoff(0.05, 2.0, spread=NO_SPREAD)
        while not self._closing:
            try:
                item = await as_awaitable(self.redis.blpop([reply_key], timeout=1))
                backoff.reset()
            except Exception:  # an outage, or a value that is not text: back off, never die (waiters depend on it)
                await backoff.sleep()
                continue
            if item is None:
                continue
            try:
                result = Result.from_json(item[1])
            except (ValueError, KeyError, TypeError):
                continue
            if self._notified_before(result.id, item[1]):
                self.duplicates_dropped += 1
                continue
            self._deliver(result)

    def _notified_before(self, task_id: str, text: str | bytes) -> bool:
        """Whether this producer was handed this very notification already (the same result of the same task);
        records it if not. A failover with a reader ahead of replication pushes one result twice: the reply was
        read from the old master, and the worker's ACK, unconfirmed, ran again on the new one with the same result.
        The application hears of it once. A different result of the same id is news (a dead letter requeued and
        solved; or, rarer, a task solved again after a lost claim: docs/reliability.md)."""
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        now, digest = time.monotonic(), hashlib.sha256(raw).digest()
        seen = self._delivered
        while seen and (len(seen) >= DELIVERED_MAX or now - next(iter(seen.values()))[0] > DELIVERED_KEEP_S):
            seen.popitem(last=False)
        if seen.get(task_id, (0.0, b""))[1] == digest:
            return True
        seen.pop(task_id, None)
        seen[task_id] = (now, digest)
        return False

    def _deliver(self, result: Result) -> None:
        self._own.discard(result.id)
        futures = self._waiters.pop(result.id, [])
        for fut in futures:
            if not fut.done():
                fut.set_result(outcome_of(result))
        if not futures:
            self._arrived[result.id] = result
            while len(self._arrived) > _ARRIVED_MAX:
                self._arrived.popitem(last=False)

    def _settle(self, task_id: str, outcome: Outcome) -> None:
        self._own.discard(task_id)
        for fut in self._waiters.pop(task_id, []):
            if not fut.done():
                fut.set_result(outcome)

    async def result(self, task_id: str, timeout: float = 300.0) -> Outcome:
        """Wait up to `timeout` seconds for a task's result: TimedOut when none came, or UnknownTask when by then
        the queue still has no record of the id. ResultExpired, without waiting, when the task finished but its
        result is no longer kept."""
        started = time.monotonic()
        if task_id in self._arrived:
            return outcome_of(self._arrived.pop(task_id))
        self._ensure_listener()
        fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, []).append(fut)
        try:
            known = _stored_outcome(task_id, await self._guarded(self._stored(task_id), doing="reading a result"))
            if known is not None:  # the notification may be long gone
                return known
            if task_id not in self._own and (self._foreign_task is None or self._foreign_task.done()):
                self._foreign_task = asyncio.create_task(self._watch_foreign())
            try:
                return await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                waited = time.monotonic() - started
                last = await self._guarded(self._stored(task_id), doing="reading a result")
                if last is Lookup.UNKNOWN:
                    return UnknownTask(task_id, waited)
                return _stored_outcome(task_id, last) or TimedOut(task_id, waited)
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self._waiters[task_id]

    async def peek(self, task_id: str) -> Outcome | None:
        """What the queue holds for a task now, without waiting: its outcome (Solved, Failed, Expired),
        ResultExpired, UnknownTask (``waited_s`` 0) when the queue has no record of the id, or None while it is
        queued or being solved. Concurrent peeks and waits share one LOOKUP per round trip (the gateway answers
        every ``res.php`` poll with one)."""
        value = await self._guarded(self._stored(task_id), doing="reading a result")
        if value is Lookup.UNKNOWN:
            return UnknownTask(task_id, 0.0)
        return _stored_outcome(task_id, value)

    async def _watch_foreign(self, every_s: float = 0.5) -> None:
        """Tasks submitted by another process (`captcha-worker wait`, a restarted producer) notify that
        process, not this one: look them up, all in one LOOKUP, twice a second while any waits."""
        while not self._closing:
            await asyncio.sleep(every_s)
            foreign = [i for i in self._waiters if i not in self._own]
            if not foreign:
                return
            try:
                values = await asyncio.gather(*(self._stored(i) for i in foreign))  # batched: one LOOKUP
            except Exception:  # noqa: S112 - an outage: the next round tries again
                continue
            for task_id, value in zip(foreign, values, strict=True):
                outcome = _stored_outcome(task_id, value)
                if outcome is not None:
                    self._settle(task_id, outcome)

    def _stored(self, task_id: str) -> asyncio.Future[Text | Lookup]:
        """What the queue holds for a task. Lookups of all concurrent waiters go out as one LOOKUP per round
        trip, so any number of waiters needs one connection for this and one for the notifications."""
        fut: asyncio.Future[Text | Lookup] = asyncio.get_running_loop().create_future()
        self._lookups.setdefault(task_id, []).append(fut)
        if self._lookup_task is None or self._lookup_task.done():
            self._lookup_task = asyncio.create_task(self._lookup_loop())
        return fut

    async def _lookup_loop(self) -> None:
        while self._lookups:
            batch, self._lookups = self._lookups, {}
            ids = list(batch)
            try:
                values = await self.queue.lookup(ids)
            except Exception as exc:
                for futures in batch.values():
                    for fut in futures:
                        if not fut.done():
                            fut.set_exception(exc)
                continue
            for task_id, value in zip(ids, values, strict=True):
                for fut in batch[task_id]:
                    if not fut.done():
                        fut.set_result(value)

    async def as_completed(self, ids: Iterable[str], timeout: float = 300.0) -> AsyncIterator[Outcome]:
        """Yield outcomes as they arrive; ids still unanswered when `timeout` passes yield TimedOut."""
        pending = [asyncio.ensure_future(self.result(i, timeout)) for i in ids]
        try:
            for fut in asyncio.as_completed(pending):
                yield await fut
        finally:
            for fut in pending:
                fut.cancel()

    # -- reporting answers ------------------------------------------------------------------------------
    async def report_bad(self, task_id: str) -> bool:
        """Tell CaptchaAI that a solved task's answer did not work (res.php reportbad: CaptchaAI refunds it and
        learns from it). A worker sends the report; True when it is queued, False when the task has no answer
        from the API to report (not solved yet, failed, never submitted here, or its record expired:
        TASK_TTL_SECONDS)."""
        return await self._report(task_id, Verdict.BAD)

    async def report_good(self, task_id: str) -> bool:
        """Tell CaptchaAI that a solved task's answer worked (res.php reportgood); True when queued, as
        report_bad."""
        return await self._report(task_id, Verdict.GOOD)

    async def _report(self, task_id: str, verdict: Verdict) -> bool:
        captcha = await self._guarded(self.queue.report(task_id, verdict), doing=f"report {verdict.value}")
        return captcha is not None

    async def solve(self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = 300.0,
                    retries: int = 0, backoff_s: float = 2.0, deadline: float | dt.datetime | None = None,
                    priority: bool = False, **more_params: Any) -> Outcome:
        """Submit and wait. With `retries`, a Failed or TimedOut outcome is resubmitted after an exponential
        backoff (with jitter): ``backoff_s``, ``2*backoff_s``, ... Other outcomes are not retried."""
        outcome: Outcome
        backoff = Backoff(backoff_s, math.inf, spread=(0.5, 1.0))
        for attempt in range(retries + 1):
            task_id = await self.submit(method, params, deadline=deadline, priority=priority, **more_params)
            outcome = await self.result(task_id, timeout)
            if not isinstance(outcome, Failed | TimedOut) or attempt == retries:
                return outcome
            await backoff.sleep()
        raise AssertionError("unreachable")  # pragma: no cover


class SyncCaptchaQueue:
    """Blocking wrapper for non-async code: runs a CaptchaQueue on a private event loop thread.

    ::

        with SyncCaptchaQueue("redis://localhost:6379/0") as q:  # or SyncCaptchaQueue(): from the environment
            outcome = q.solve("userrecaptcha", googlekey="6Le...", pageurl="https://example.com")
    """

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="captcha-queue", daemon=True)
        self._thread.start()
        self._q = self._run(self._make(url, kwargs))

    @staticmethod
    async def _make(url: str | None, kwargs: dict[str, Any]) -> CaptchaQueue:
        q = CaptchaQueue.from_env(**kwargs) if url is None else CaptchaQueue.from_url(url, **kwargs)
        return await q.__aenter__()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> SyncCaptchaQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._q.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def submit(self, method: str, params: Mapping[str, Any] | None = None, **kwargs: Any) -> str:
        return self._run(self._q.submit(method, params, **kwargs))

    def submit_many(self, tasks: Iterable[TaskSpec | Mapping[str, Any]], **kwargs: Any) -> list[str]:
        return self._run(self._q.submit_many(list(tasks), **kwargs))

    def result(self, task_id: str, timeout: float = 300.0) -> Outcome:
        return self._run(self._q.result(task_id, timeout))

    def solve(self, method: str, params: Mapping[str, Any] | None = None, **kwargs: Any) -> Outcome:
        return self._run(self._q.solve(method, params, **kwargs))

    def report_bad(self, task_id: str) -> bool:
        return self._run(self._q.report_bad(task_id))

    def report_good(self, task_id: str) -> bool:
        return self._run(self._q.report_good(task_id))

    def results(self, ids: Iterable[str], timeout: float = 300.0) -> list[Outcome]:
        """Outcomes in completion order."""

        async def collect() -> list[Outcome]:
            return [o async for o in self._q.as_completed(list(ids), timeout)]

        return self._run(collect())
