"""Worker runtime: N solve slots per process under a cluster-wide thread budget.

One process runs these coroutines:

* **claimer** — while this worker has idle slots, claims that many tasks (CLAIM, non-blocking, batched: each task
  takes a budget unit with its claim, so a task is claimed only when a plan thread is free for it), or waits on
  BLMOVE for one; each claimed task becomes a *job* (``job``: claimed → outcome → ack).
* **heartbeat** — renews job leases and budget units, records the worker as alive with the limit it enforces
  (``budget``: the smallest limit of the live workers is the budget), exports queue depths.
* **reaper** — requeues expired leases and orphaned claims (every worker runs one; the script is atomic).
* **plan** — reads threadsinfo/getbalance: when the plan has fewer threads than ``CAPTCHAAI_THREADS`` the worker
  enforces the plan's (every worker follows at once: the limit is in Redis); while a fatal API error (bad key, IP
  ban) lasts, probes for recovery.
* **reports** — sends the ``report_bad`` / ``report_good`` requests producers queued to CaptchaAI.

Phases: RUNNING → (fatal API error) FATAL → (probe succeeds) RUNNING; SIGTERM → DRAINING: stop claiming,
let jobs finish within ``DRAIN_GRACE_SECONDS``, then cancel them; a cancelled job puts its task back at the
front of pending without counting a failure, its solve left running at the API under its budget unit, and the
next owner resumes it.  Redis outages never crash the worker: every Redis operation that fails with an outage
(``connection.refusal``: connection loss, timeouts, LOADING, OOM, READONLY, ...) is retried with backoff,
readiness is false meanwhile and one log line marks each change of state; a task whose lease lapsed is requeued
by a reaper (a worker death counted on it) and resumed by its next owner; the first result written wins.

Every claimed item ends with an outcome on its first claim when it cannot become a task: bytes that are not
UTF-8, JSON nested too deep, payloads over ``MAX_TASK_BYTES`` (buried by the claim script itself), invalid tasks
— each is dead-lettered with a code and a reason, counted in ``captcha_solver_dead_letters_total{code}``.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any, ParamSpec, TypeVar

from redis import exceptions as rexc

from captcha_worker import budget, methods, metrics
from captcha_worker import log as logs
from captcha_worker.breaker import Breaker, Policy, State
from captcha_worker.captchaai import CapacityError, CaptchaAI, FatalApiError, RetryPolicy, TaskFailed, TransientError
from captcha_worker.codes import Code
from captcha_worker.config import ProviderConfig, Secret, WorkerConfig
from captcha_worker.connection import Client, Refusal, connect, is_cross_slot
from captcha_worker.deadline import Line, ServiceTimes, Waiting, late
from captcha_worker.guard import RedisGuard
from captcha_worker.job import Api, Job, JobRunner
from captcha_worker.keyfile import KeyFileWatcher, watch_key_file
from captcha_worker.log import event
from captcha_worker.overflow import Overflow, ProviderPool
from captcha_worker.pingback import Hub
from captcha_worker.planner import service_time
from captcha_worker.queue import RedisQueue  # built by redis_queue only: the Worker depends on WorkerQueue
from captcha_worker.store.keys import item_ref
from captcha_worker.store.records import (
    AuditCheck,
    BudgetState,
    Claimed,
    ClaimFlag,
    ClaimReply,
    QueueStats,
    Renewal,
    Report,
    Violation,
)
from captcha_worker.task import Invalid, Task, parse_task
from captcha_worker.worker_queue import WorkerQueue

log = logging.getLogger("captcha_worker.worker")
T = TypeVar("T")
P = ParamSpec("P")

__all__ = ["Api", "Phase", "Worker", "default_worker_id", "open_worker", "redis_queue"]

PLAN_WAIT_S = 5.0  # at start, how long claims wait for the plan's threads (threadsinfo) to be known
#: routing on a deadline: the most tasks of pending looked at, and how often (seconds, at API_TIME_SCALE 1)
LATE_SCAN_TASKS = 200
LATE_SCAN_S = 1.0
REPORT_BATCH = 20
#: an audit record outlives its turn this many periods (then no worker exports stale counts: a queue no worker
#: audits shows 0, as at start)
AUDIT_RECORD_PERIODS = 3


class Phase(enum.Enum):
    RUNNING = "running"
    FATAL = "fatal"
    DRAINING = "draining"


def default_worker_id() -> str:
    """``<host>-<pid>-<4 hex>``, never with a ``:`` (``budget.limit_member``: a hold's entry is never a worker's)."""
    return f"{socket.gethostname().replace(':', '-')}-{os.getpid()}-{secrets.token_hex(2)}"


class Worker:
    def __init__(self, cfg: WorkerConfig, queue: WorkerQueue, api: Api, *, worker_id: str | None = None,
                 overflow: Overflow | None = None) -> None:
        self.cfg = cfg
        self.queue = queue  # the queue's operations (``open_worker`` builds a RedisQueue on the worker's client)
        self.api = api
        self._overflow = overflow  # the per-solve providers (PROVIDERS), None: overflow off
        self._foreign = frozenset(k.name for k in methods.FOREIGN_KINDS
                                  if overflow is not None and overflow.provider_for(k.name) is not None)
        self._provider_slots = {p.name: asyncio.Semaphore(p.concurrency)
                                for p in (overflow.config.providers if overflow is not None else ())}
        #: overflow claims at once (no unit): the routable providers' concurrency
        self._paid_capacity = sum(p.concurrency for p in overflow.config.providers
                                  if p.name in overflow.clients) if overflow is not None else 0
        #: CaptchaAI's circuit breaker: only with PROVIDERS (overflow off: nothing to break to)
        self.breaker = Breaker(Policy.scaled(cfg.time_scale, cfg.http_timeout_seconds),
                               on_change=self._breaker_changed) if overflow is not None else None
        #: routing on a deadline: how long plan solves hold a thread (observed; before that the methods table's)
        self.service_times = ServiceTimes({k.name: service_time(k)[0] / cfg.time_scale
                                           for k in methods.KINDS if k.captchaai})
        self._late_next = 0.0  # monotonic: the next look at pending for tasks that would miss their deadline
        self.id = worker_id or default_worker_id()
        budget.limit_member(self.id, 0)  # refuses an id with a ':' now, not at the first heartbeat
        self.phase = Phase.RUNNING
        self._started = False  # ready once its limit is registered and its loops and metrics are up
        self.fatal_code: str | None = None
        self.redis_guard = RedisGuard(log, metrics.REDIS_ERRORS, on_change=self._set_ready_gauge,
                                      hint="retrying with backoff; readiness is false")
        self.compat_list = cfg.compat_queue_list  # None after a CROSSSLOT (Redis Cluster): logged once
        self.limit = cfg.threads  # the limit this worker enforces: CAPTCHAAI_THREADS, or the plan's when fewer
        self._registration = asyncio.Lock()  # one HEARTBEAT (or the goodbye) at a time: `_register`
        #: registrations answered so far. A claim's reply shows the budget (its limit: min of {q}:limits and this
        #: worker's own) as Redis saw it; one sent before a registration answered may have counted with the limit
        #: that registration replaced, so only a claim sent since the last one sets the exported budget
        self._registered = 0
        self._ahead_sent: list[int] = []  # `_registered` when each claim riding on an ACK batch was sent
        self.budget_limit: int | None = None  # the effective limit, as last read
        self.plan_threads: int | None = None  # threadsinfo's, as last read
        self.last_pending = 0
        self._contended = False  # tasks wait for a plan thread: polls may go dense (hurry)
        self._waiting_slots, self._waiting_since = 0, time.monotonic()
        self._wake = asyncio.Event()  # capacity changed: the claimer looks again
        self._stop = asyncio.Event()  # SIGTERM: stop claiming
        self._closing = asyncio.Event()  # jobs are done: background loops end
        self._key_changed = asyncio.Event()  # a new API key (CAPTCHAAI_KEY_FILE): a FATAL worker probes it now
        self._plan_read = asyncio.Event()  # the first threadsinfo answered (or failed)
        self._jobs: dict[asyncio.Task[None], Job] = {}  # running jobs by their task
        self._held = 0  # of them, those holding a budget unit
        self._reserved = 0  # slots of claims in flight (the claimer's, or one riding on an ACK batch: claim_ahead)
        self._audit_logged: list[Violation] = []  # the violations last logged (one line per change)
        self.runner = JobRunner(self)

    # -- what jobs read -----------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.phase is Phase.RUNNING

    def phase_name(self) -> str:
        return self.phase.value

    @property
    def overflow(self) -> Overflow | None:
        return self._overflow

    @property
    def foreign_kinds(self) -> frozenset[str]:
        """The kinds CaptchaAI lacks that this worker's providers take (tasks of others are UNSUPPORTED_METHOD)."""
        return self._foreign

    def route(self, task: Task, job: Job) -> ProviderConfig | None:
        """Where `task` is solved: None for CaptchaAI (the plan), else the per-solve provider. A kind CaptchaAI
        does not solve goes to the provider that takes it; so does any task while CaptchaAI is out (its breaker
        not closed, or FATAL) or claimed without a unit for overflow."""
        if self._overflow is None:
            return None
        if not task.kind.captchaai or job.unit is None or self.overflow_mode():
            return self._overflow.provider_for(task.kind.name)
        return None

    def overflow_mode(self) -> bool:
        """CaptchaAI is out: its breaker is open or half-open, or a fatal API error stopped the plan's claims."""
        b = self.breaker
        return b is not None and (self.phase is Phase.FATAL or not b.closed())

    def may_solve(self) -> bool:
        """Jobs may start solving: RUNNING, or FATAL with overflow providers to solve at."""
        return self.phase is Phase.RUNNING or (self.phase is Phase.FATAL and self.breaker is not None)

    def _breaker_changed(self, old: State, new: State, why: str) -> None:
        metrics.BREAKER_OPEN.labels("captchaai").set(0 if new is State.CLOSED else 1)
        event(log, "captchaai_breaker", logging.WARNING if new is State.OPEN else logging.INFO, state=new.value,
              was=old.value, why=why)
        self._wake.set()

    def _paid_jobs(self) -> int:
        """Jobs solving (or about to) at a provider: claimed without a unit, or their unit given back."""
        if self._overflow is None:
            return 0
        return sum(1 for j in self._jobs.values() if j.unit is None or j.unit_dropped)

    def provider_slot(self, provider: str) -> asyncio.Semaphore:
        """A provider's concurrency in this process (``concurrency`` of its PROVIDERS entry)."""
        return self._provider_slots[provider]

    async def drop_unit(self, job: Job) -> None:
        """Give the job's plan-thread unit back: a per-solve provider solves it. From now on no heartbeat renews
        it, not even one whose snapshot was taken before (UNIT_DROP marks the claim; RENEW reads the mark with the
        lease); the job's outcome removes it again all the same (idempotent)."""
        if job.unit is None or job.unit_dropped:
            return
        assert job.task is not None  # a unit is taken for a task only
        job.unit_dropped = True
        self._held -= 1
        metrics.BUDGET_HELD.set(self._held)
        await self._redis("unit_release", self.queue.drop_unit, job.task.id, job.unit, worker=self.id)
        self._wake.set()  # a unit is free: a claim may take it

    def hurry(self) -> bool:
        """Whether polls come densely: tasks are waiting for a plan thread (then every second a solved answer waits
        to be fetched is a thread lost to them) and POLL_DENSE_WHEN_CONTENDED is on (off by default: about twice
        the calls per solve for a few points of utilisation; docs/benchmarks.md, P5)."""
        return self.cfg.poll_dense_when_contended and self._contended

    async def redis(self, what: str, op: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T | None:
        return await self._redis(what, op, *args, **kwargs)

    # -- readiness ----------------------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        if not self._started:
            return False, "starting"
        if self.phase is Phase.DRAINING:
            return False, "draining"
        if self.phase is Phase.FATAL:
            return False, f"fatal API error: {self.fatal_code}"
        if self.redis_down is not None:
            return False, f"redis unavailable: {self.redis_down.value}"
        return True, "ready"

    @property
    def redis_down(self) -> Refusal | None:
        """Why Redis cannot serve, while it lasts."""
        return self.redis_guard.down

    @property
    def redis_ok(self) -> bool:
        return self.redis_down is None

    def _set_ready_gauge(self) -> None:
        metrics.READY.set(1 if self.readiness()[0] else 0)

    # -- lifecycle ----------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, hard_stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set, then drain. `hard_stop` (a second signal) cuts the drain short."""
        metrics.init(concurrency=self.cfg.concurrency, budget_limit=self.cfg.threads,
                     monthly_price=self.cfg.monthly_price)
        self._export_audit({})  # every check's series at 0 from the start
        event(log, "worker_started", worker=self.id, concurrency=self.cfg.concurrency, threads=self.cfg.threads,
              queue=self.cfg.queue)
        if self.cfg.concurrency > self.cfg.threads:
            event(log, "concurrency_above_threads", logging.WARNING, concurrency=self.cfg.concurrency,
                  threads=self.cfg.threads, hint="slots above the plan's threads only wait for budget")
        await self._register()  # before any claim: a lower limit applies to every worker at once
        loops = [asyncio.create_task(self._supervise(name, fn)) for name, fn in (
            ("plan", self._plan_loop), ("heartbeat", self._heartbeat_loop), ("reaper", self._reaper_loop),
            ("reports", self._report_loop), *([("breaker", self._breaker_loop)] if self.breaker else []))]
        claimer = asyncio.create_task(self._supervise("claimer", self._claim_loop, ends_with_stop=True))
        self._started = True
        self._set_ready_gauge()
        try:
            await stop.wait()
        finally:
            self.phase = Phase.DRAINING
            self._set_ready_gauge()
            self._stop.set()
            self._wake.set()
            await asyncio.gather(claimer, return_exceptions=True)
            await self._drain(hard_stop or asyncio.Event())
            await self._close(loops)
            await self._say_goodbye()
            event(log, "worker_stopped", worker=self.id)

    async def _drain(self, hard_stop: asyncio.Event) -> None:
        """Let running jobs finish within the grace (or until a second signal), then cancel the rest."""
        if not self._jobs:
            return
        event(log, "draining", jobs=len(self._jobs), grace_s=self.cfg.drain_grace_seconds)
        all_done = asyncio.ensure_future(asyncio.wait(list(self._jobs)))
        hard = asyncio.ensure_future(hard_stop.wait())
        await asyncio.wait({all_done, hard}, timeout=self.cfg.drain_grace_seconds,
                           return_when=asyncio.FIRST_COMPLETED)
        all_done.cancel()
        hard.cancel()
        left = list(self._jobs)
        if left:
            event(log, "drain_grace_exceeded", logging.WARNING, requeued=len(left))
            for t in left:
                t.cancel()
            await asyncio.gather(*left, return_exceptions=True)

    async def _close(self, loops: list[asyncio.Task[None]]) -> None:
        """Loops end by themselves once `_closing` is set (no reliance on cancellation reaching them)."""
        self._closing.set()
        _, stuck = await asyncio.wait(loops, timeout=5)
        for t in stuck:
            t.cancel()
        if stuck:
            await asyncio.wait(stuck, timeout=2)

    async def _pause(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Sleep, but wake up at once when the worker closes (or `wake` is set). True when closing."""
        if wake is None:
            with suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._closing.wait()
            return self._closing.is_set()
        waits = [asyncio.ensure_future(self._closing.wait()), asyncio.ensure_future(wake.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return self._closing.is_set()

    def key_changed(self) -> None:
        """The API key was replaced: a worker stopped by a rejected key probes the new one at once."""
        self._key_changed.set()

    async def _say_goodbye(self) -> None:
        """The worker's heartbeat and limit go (units of solves left running stay with their tasks): after any
        registration still on its way (the same lock), and every limit entry of this worker, whichever landed."""
        with suppress(Exception):
            async with asyncio.timeout(2):
                async with self._registration:
                    await self.queue.forget_worker(self.id)
        metrics.BUDGET_HELD.set(0)

    async def _supervise(self, name: str, loop: Callable[[], Awaitable[None]], *, ends_with_stop: bool = False) -> None:
        """Run a background loop forever; a bug in one iteration is logged and the loop restarted, after a pause
        that doubles while it keeps crashing (1 s to 30 s), so a persistent fault cannot flood the log.
        `ends_with_stop`: not restarted once the worker stops (the claimer: a draining worker claims nothing)."""
        pause = 1.0
        while not self._closing.is_set() and not (ends_with_stop and self._stop.is_set()):
            started = time.monotonic()
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.monotonic() - started > 60:
                    pause = 1.0
                event(log, "loop_crashed", logging.ERROR, loop=name, error=type(exc).__name__,
                      detail=logs.redact(str(exc))[:200], retry_in_s=pause)
                await self._pause(pause)
                pause = min(pause * 2, 30.0)

    async def _redis(self, what: str, op: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T | None:
        """Run a Redis operation, retrying outages (``connection.refusal``) with backoff until it succeeds.
        Anything else (a bug, a wrong key type) is raised. None only once the worker closes."""
        return await self._retrying(what, functools.partial(op, *args, **kwargs), gives_up_on_stop=False)

    async def _redis_claim(self, what: str, op: Callable[P, Awaitable[T]], *args: P.args,
                           **kwargs: P.kwargs) -> T | None:
        """A claim, retried as `_redis` does; it gives up (None) as soon as the worker stops: a draining worker
        does not wait for Redis to claim what it would not run."""
        return await self._retrying(what, functools.partial(op, *args, **kwargs), gives_up_on_stop=True)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]], *, gives_up_on_stop: bool) -> T | None:
        """Redis is *down* while any call is retrying an outage; it is back when every such call went through
        (``guard.RedisGuard``)."""
        return await self.redis_guard.retry(
            what, call, give_up=lambda: self._closing.is_set() or (gives_up_on_stop and self._stop.is_set()))

    # -- claiming -----------------------------------------------------------------------------------------
    def _room(self) -> int:
        if self.phase is not Phase.RUNNING:
            return 0
        return self.cfg.concurrency - (len(self._jobs) - self._paid_jobs()) - self._reserved

    def claim_ahead(self, acks: int) -> int:
        """How many items an ACK batch of `acks` jobs claims in the same round trip (``write_batch_and_claim``:
        the ACKs run first, so the units they release are the claim's to take): the slots those jobs free and any
        other free one, while tasks wait (the last claim saw some) and the fold is allowed (no durable writes, no
        Cluster, no compat list: its CROSSSLOT is the claimer's to handle; no overflow providers: their jobs hold
        no slot of the plan's). Reserved until `claimed_ahead`, so the
        claimer never claims the same slots. 0: no claim rides on this batch."""
        if (self.phase is not Phase.RUNNING or self._stop.is_set() or self.last_pending <= 0 or self.compat_list
                or not self.queue.folds_claims or self._overflow is not None):
            return 0
        room = self._room() + acks
        if room <= 0:
            return 0
        self._reserved += room
        self._ahead_sent.append(self._registered)
        return room

    def claimed_ahead(self, reply: ClaimReply | None, reserved: int) -> None:
        """The claim that rode on an ACK batch came back (None: it failed or its round trip did): its jobs start
        now, before the acked jobs leave (for an instant this worker runs up to `reserved` jobs more than its
        concurrency; their solves are over, and the budget units are counted in Redis, not here)."""
        self._reserved -= reserved
        sent_at = self._ahead_sent.pop(0)  # the oldest in flight: never newer than this one's
        if reply is not None:
            self._observe_claim(reply, reserved, sent_at)
            for c in reply.items:
                self._start(c)
        self._wake.set()

    def claim_limits(self) -> dict[str, Any]:
        return self._claim_limits()

    def _claim_limits(self) -> dict[str, Any]:
        cfg = self.cfg
        return {"lease_s": cfg.lease_seconds, "max_bytes": cfg.max_task_bytes, "dead_max": cfg.dead_letter_max,
                "worker": self.id, "limit": self.limit}

    async def _claim_loop(self) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._plan_read.wait(), PLAN_WAIT_S)
        full_wait = 0.02
        while not self._stop.is_set():
            if self.overflow_mode():
                await self._claim_for_overflow()
                continue
            room = self._room()
            if room <= 0:
                self._contended = self.last_pending > 0
                await self._wait_wake(1.0)
                continue
            self._reserved += room  # an ACK batch claiming meanwhile leaves these slots to this claim
            sent_at = self._registered
            try:
                reply = await self._claim_batch(room)
            finally:
                self._reserved -= room
            if reply is None:
                break  # stopping while Redis is unavailable
            self._observe_claim(reply, room, sent_at)
            for c in reply.items:
                self._start(c)
            if reply.items or self._stop.is_set():
                full_wait = 0.02
            elif reply.budget_full or reply.capped:  # a unit frees when any solve ends: this worker's own wake it
                if reply.budget_full and reply.pending > 0:
                    await self._claim_late()
                await self._wait_wake(full_wait)
                full_wait = min(full_wait * 2, 0.2)
            else:
                await self._claim_blocking()

    async def _claim_for_overflow(self) -> None:
        """CaptchaAI is out: claim from pending without units, up to the providers' concurrency."""
        room = self._paid_capacity - self._paid_jobs()
        if room <= 0:
            await self._wait_wake(0.2)
            return
        reply = await self._redis_claim("claim_overflow", self.queue.claim_reply, room, no_unit=True,
                                        **self._claim_limits())
        if reply is None:
            return
        for c in reply.items:
            self._start(c)
        if not reply.items:
            await self._wait_wake(0.1)

    async def _claim_late(self) -> None:
        """Routing on a deadline (``deadline``): every plan thread is busy and tasks wait; the ones predicted to miss
        their deadline waiting (the first LATE_SCAN_TASKS of pending, at most every LATE_SCAN_S) are claimed without
        units for a provider, as many as the providers' free concurrency and the cap's room allow."""
        ov, limit, now = self._overflow, self.budget_limit, time.monotonic()
        room = self._paid_capacity - self._paid_jobs()
        if ov is None or not ov.config.on_deadline or limit is None or limit <= 0 or room <= 0 \
                or now < self._late_next:
            return
        self._late_next = now + LATE_SCAN_S / self.cfg.time_scale
        peeked = await self._redis("peek_pending", self.queue.peek_pending, LATE_SCAN_TASKS)
        waiting, prices = self._waiting(peeked or [])
        if not waiting:
            return
        line = Line(limit, sum(w.service_s for w in waiting) / len(waiting))  # E[S]: the line's mix
        ids = late(waiting, line, now=time.time(), room=room)
        ids = await self._within_cap(ids, prices) if ids else ids
        if not ids:
            return
        reply = await self._redis_claim("claim_late", self.queue.claim_late, ids, **self._claim_limits())
        for c in reply.items if reply is not None else ():
            self._start(c)
        if reply is not None and reply.items:
            event(log, "claimed_late", n=len(reply.items), threads=limit, mean_s=round(line.mean_s, 3))

    def _waiting(self, peeked: list[tuple[str, str | None]]) -> tuple[list[Waiting], dict[str, tuple[str, int]]]:
        """Pending's tasks as routing on a deadline sees them, and each routable one's (kind, price in micro)."""
        assert self._overflow is not None
        waiting, prices = [], {}
        for tid, body in peeked:
            task = parse_task(body, max_bytes=self.cfg.max_task_bytes, foreign=self._foreign) if body else None
            if task is None or isinstance(task, Invalid) or not task.kind.captchaai:
                continue  # settled at its claim at once (no body, invalid), or a provider's kind: not in the line
            provider = self._overflow.provider_for(task.kind.name)
            if provider is not None:
                prices[tid] = (task.kind.name, provider.price_micro(task.kind.name))
            waiting.append(Waiting(tid, task.deadline, self.service_times.of(task.kind.name), provider is not None))
        return waiting, prices

    async def _within_cap(self, ids: list[str], prices: Mapping[str, tuple[str, int]]) -> list[str]:
        """The first of `ids` whose prices together fit the cap's room now (the reservation before each solve is
        still what holds the cap: this only keeps a full cap from claiming tasks the plan would answer)."""
        assert self._overflow is not None
        state = await self._redis("spend_state", self._overflow.spend.state)
        if state is None:
            return []
        cap = self._overflow.cap
        hour, day, out = cap.hour - state.hour, cap.day - state.day, []
        for tid in ids:
            price = prices[tid][1]
            if price > hour or price > day:
                break
            hour, day = hour - price, day - price
            out.append(tid)
        return out

    async def _breaker_loop(self) -> None:
        """The breaker's half-open probe: one threadsinfo when due; it answering closes the breaker."""
        breaker = self.breaker
        assert breaker is not None
        metrics.BREAKER_OPEN.labels("captchaai").set(0 if breaker.closed() else 1)
        while not await self._pause(0.1):
            if not breaker.probe_due():
                continue
            try:
                await self.api.threadsinfo()
            except (FatalApiError, TransientError, TaskFailed, CapacityError) as exc:
                breaker.probed(False, exc.code)
            else:
                breaker.probed(True)

    async def _wait_wake(self, timeout_s: float) -> None:
        self._wake.clear()
        with suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()

    async def _claim_blocking(self) -> None:
        """Pending is empty: block on BLMOVE (it watches pending only; with a compat list, wake up often enough
        to look at that too)."""
        self._reserved += 1
        sent_at = self._registered
        try:
            reply = await self._redis_claim("claim_blocking", self.queue.claim_blocking,
                                            timeout_s=0.25 if self.compat_list else 1.0, **self._claim_limits())
        finally:
            self._reserved -= 1
        if reply is not None:
            self._observe_claim(reply, 1, sent_at)
            for c in reply.items:
                self._start(c)

    async def _claim_batch(self, room: int) -> ClaimReply | None:
        try:
            return await self._redis_claim("claim", self.queue.claim_reply, room, compat_list=self.compat_list,
                                           **self._claim_limits())
        except rexc.ResponseError as exc:
            if self.compat_list is None or not is_cross_slot(exc):
                raise
            event(log, "compat_queue_unusable", logging.ERROR, list=self.compat_list,
                  reason="CROSSSLOT: the list is not in the queue's hash slot (Redis Cluster)",
                  hint=f"name it with the queue's hash tag (e.g. {{{self.cfg.queue}}}:queue) or unset "
                       "COMPAT_QUEUE_LIST; serving the queue without it")
            self.compat_list = None
            return ClaimReply([], BudgetState(self.budget_limit, 0), False, 0)

    def _observe_claim(self, reply: ClaimReply, room: int, sent_at: int) -> None:
        """The budget as the claim saw it: metrics, slot-seconds spent waiting for a unit, and whether tasks wait
        for a plan thread (dense polls)."""
        now = time.monotonic()
        if self._waiting_slots:
            metrics.BUDGET_WAIT.inc(self._waiting_slots * (now - self._waiting_since))
        self._waiting_slots = room - len(reply.items) if reply.budget_full else 0
        self._waiting_since = now
        self.last_pending = reply.pending
        self._contended = reply.pending > 0 and (reply.budget_full or len(reply.items) >= room)
        if sent_at == self._registered:  # else a registration landed while it was on its way: its view is newer
            self._set_budget(reply.budget.limit, reply.budget.in_use)
        metrics.BUDGET_HELD.set(self._held + sum(1 for c in reply.items if c.unit))

    def _set_budget(self, limit: int | None, in_use: int) -> None:
        self.budget_limit = limit
        if limit is not None:
            metrics.BUDGET_LIMIT.set(limit)
        metrics.BUDGET_IN_USE.set(in_use)
        if self.plan_threads is not None and limit is not None:
            metrics.PLAN_THREADS_IDLE.set(max(0, self.plan_threads - limit))

    def _start(self, claimed: Claimed) -> None:
        if claimed.flag is ClaimFlag.ITEM_TOO_LARGE:  # dead-lettered by the claim script itself, never read
            metrics.TASKS.labels("unknown", "dead_lettered").inc()
            metrics.DEAD_LETTERS.labels(Code.TASK_TOO_LARGE).inc()
            event(log, "task_dead_lettered", logging.WARNING, id=None, code=Code.TASK_TOO_LARGE, attempts=1,
                  reason=f"payload is {claimed.failures} bytes, over the limit of {self.cfg.max_task_bytes}",
                  sha1=claimed.item)
            return
        job = Job.from_claim(claimed)
        t = asyncio.create_task(self.runner.run(job, claimed))
        self._jobs[t] = job
        t.add_done_callback(self._job_done)
        if job.unit:
            self._held += 1  # exported with the claims' figures (_observe_claim) and the heartbeat (_export)

    def _job_done(self, t: asyncio.Task[None]) -> None:
        job = self._jobs.pop(t, None)
        if job is not None and job.unit and not job.unit_dropped:
            self._held -= 1
            if job.task is not None and job.stats.polls > 0:  # a plan solve: how long it held its thread
                self.service_times.observe(job.task.kind.name, time.time() - job.claimed_at)
        self._wake.set()

    # -- fatal state --------------------------------------------------------------------------------------
    def enter_fatal(self, code: str) -> None:
        metrics.FATAL_ERRORS.labels(metrics.code_label(code)).inc()
        if self.phase is Phase.RUNNING:
            self.phase = Phase.FATAL
            self.fatal_code = code
            metrics.FATAL_STATE.labels(metrics.code_label(code)).set(1)
            self._set_ready_gauge()
            event(log, "fatal_api_error", logging.ERROR, code=code,
                  hint="check CAPTCHAAI_KEY and the plan; claiming stopped, tasks stay queued")

    def _leave_fatal(self) -> None:
        if self.phase is Phase.FATAL:
            metrics.FATAL_STATE.labels(metrics.code_label(self.fatal_code or "")).set(0)
            self.phase = Phase.RUNNING
            self.fatal_code = None
            self._set_ready_gauge()
            self._wake.set()
            event(log, "fatal_api_error_cleared")

    # -- the plan and the limit ---------------------------------------------------------------------------
    async def _plan_loop(self) -> None:
        """threadsinfo + getbalance now and then; while FATAL, probe every 30 s (scaled) to recover; at once when
        the API key changes (a set during a probe is kept for the next pause)."""
        cfg = self.cfg
        while True:
            self._key_changed.clear()
            try:
                info = await self.api.threadsinfo()
                metrics.PLAN_THREADS.set(info.threads)
                metrics.PLAN_WORKING_THREADS.set(info.working_threads)
                if self._follow_plan(info.threads):
                    await self._register()
                metrics.BALANCE.set(await self.api.getbalance())
                self._leave_fatal()
            except FatalApiError as exc:
                self.enter_fatal(exc.code)
            except (TransientError, TaskFailed) as exc:
                event(log, "plan_check_failed", logging.WARNING, code=exc.code)
            self._plan_read.set()
            pause = cfg.threadsinfo_interval_seconds if self.phase is not Phase.FATAL else 30.0 / cfg.time_scale
            if await self._pause(pause, self._key_changed):
                return

    def _follow_plan(self, plan: int) -> bool:
        """The plan's threads against CAPTCHAAI_THREADS: fewer, and this worker enforces the plan's (so does every
        worker, through the limit in Redis); more, and the paid threads above the budget stay idle (a metric).
        One log line per change. True when the limit this worker enforces changed."""
        configured, changed = self.cfg.threads, plan != self.plan_threads
        self.plan_threads = plan
        want = plan if 1 <= plan < configured else configured
        metrics.BUDGET_FOLLOWS_PLAN.set(1 if want < configured else 0)
        if self.budget_limit is not None:
            metrics.PLAN_THREADS_IDLE.set(max(0, plan - self.budget_limit))
        if changed and plan < configured:
            event(log, "budget_follows_plan", logging.WARNING, plan_threads=plan, configured=configured,
                  hint="CaptchaAI reports fewer threads than CAPTCHAAI_THREADS: the workers enforce the plan's"
                  if plan >= 1 else "threadsinfo reports no threads: the limit stays as configured")
        elif changed and plan > configured:
            event(log, "plan_threads_unused", logging.WARNING, plan_threads=plan, configured=configured,
                  hint="the plan has more threads than CAPTCHAAI_THREADS: paid threads stay idle")
        elif changed and self.limit != configured:
            event(log, "budget_follows_config", plan_threads=plan, configured=configured)
        if want == self.limit:
            return False
        self.limit = want
        return True

    async def _register(self) -> None:
        """Heartbeat: this worker alive, with the limit it enforces (renewed well within a lease), in place of the
        one it registered before. The heartbeat and plan loops both register: one at a time, the limit read
        inside the lock, so a call with a limit the plan has since replaced never lands after the new one's
        (it would put the old limit back until it expired, and export it)."""
        async with self._registration:
            limit = self.limit
            seen = await self._redis("heartbeat", self.queue.heartbeat, self.id, limit=limit,
                                     limit_alive_s=self.cfg.lease_seconds)
            if seen is not None:
                self._registered += 1
                self._export(seen, budget=limit == self.limit)  # a limit replaced meanwhile: its own call tells

    def _export(self, seen: QueueStats, *, budget: bool) -> None:
        self.last_pending = seen.pending
        metrics.BUDGET_HELD.set(self._held)
        if budget:
            self._set_budget(seen.budget_limit, seen.budget_in_use)
        metrics.WORKERS_ALIVE.set(seen.workers_alive)
        metrics.QUEUE_DEPTH.labels("pending").set(seen.pending)
        metrics.QUEUE_DEPTH.labels("processing").set(seen.processing)
        metrics.QUEUE_DEPTH.labels("dead").set(seen.dead)

    # -- background loops ---------------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        cfg = self.cfg
        period = cfg.lease_seconds / 3
        while not await self._pause(min(period, 5.0)):
            await self._renew()
            await self._register()

    async def _renew(self) -> None:
        """RENEW the leases of the running jobs, each with its unit, in one atomic step per item. The script renews
        nothing whose lease is gone, so a task finished meanwhile (its outcome written after this snapshot) never
        gets its unit back; its lease is reported gone, which is no loss when the job's outcome is on its way or
        written. A job whose lease is gone while it still runs lost its task (a stall): logged once, never renewed
        again (its solve's unit, if any, was held by RECORD). A job settling keeps its lease renewed until its
        outcome lands (an ACK retried through an outage must not lose its lease)."""
        jobs = [j for j in self._jobs.values() if not j.lease_lost]
        renewed = await self._redis("renew", self.queue.renew, [Renewal(j.item, j.current_unit()) for j in jobs],
                                    lease_s=self.cfg.lease_seconds, worker=self.id)
        if renewed is None:
            return
        by_item = {j.item: j for j in jobs}
        for item in renewed.lost:
            job = by_item.get(item)
            if job is None or job.settling:
                continue  # its outcome was written meanwhile (or is being): that removed the lease
            job.lease_lost = True
            metrics.LEASES_LOST.inc()
            event(log, "lease_lost", logging.WARNING, item=item_ref(item))
        if renewed.recounted:
            event(log, "budget_units_lost", logging.WARNING, count=len(renewed.recounted),
                  hint="they had expired (a stall): counted again, their solves run on")

    async def _reaper_loop(self) -> None:
        cfg = self.cfg
        while not await self._pause(cfg.lease_seconds / 2 * (0.75 + 0.5 * random.random())):
            counts = await self._redis("reap", self.queue.reap, orphan_grace_s=cfg.orphan_grace_seconds)
            if counts and any(counts):
                expired, orphaned = counts
                metrics.LEASES_REAPED.labels("expired").inc(expired)
                metrics.LEASES_REAPED.labels("orphaned").inc(orphaned)
                event(log, "leases_reaped", logging.WARNING, expired=expired, orphaned=orphaned)
            await self._audit()

    async def _audit(self) -> None:
        """One audit per AUDIT_SECONDS across the queue's workers: the first to find the turn free runs AUDIT
        (O(in flight)) and confirms against the turn before; every worker exports the last turn's counts (O(1))."""
        period = self.cfg.audit_seconds
        turn = await self._redis("audit_turn", self.queue.audit_turn, self.id, period_s=period)
        if turn is None:
            return
        mine, record = turn
        if not mine:
            self._export_audit(record.counts if record else {})
            return
        seen = await self._redis("audit", self.queue.audit)
        if seen is None:
            return
        found = await self._redis("audit_publish", self.queue.publish_audit, seen, record, worker=self.id,
                                  ttl_s=AUDIT_RECORD_PERIODS * period)
        if found is None:
            return
        self._export_audit({c: sum(1 for v in found if v.check is c) for c in AuditCheck})
        if found and found != self._audit_logged:
            event(log, "audit_violations", logging.WARNING,
                  **{c.value: n for c in AuditCheck if (n := sum(1 for v in found if v.check is c))},
                  members=[item_ref(v.member) for v in found[:10]],
                  hint="captcha-worker audit names every one; docs/guarantees.md says what each breaks")
        self._audit_logged = found

    def _export_audit(self, counts: Mapping[AuditCheck, int]) -> None:
        """The last cluster-wide audit's confirmed violations, by check (0 for a check it did not find)."""
        for check in AuditCheck:
            metrics.AUDIT_VIOLATIONS.labels(check.value).set(counts.get(check, 0))

    async def _report_loop(self) -> None:
        """report_bad / report_good requests, sent to CaptchaAI (res.php reportbad / reportgood)."""
        while not await self._pause(1.0):
            if self.phase is Phase.FATAL:
                continue
            for report in await self._redis("reports", self.queue.take_reports, REPORT_BATCH) or []:
                await self._send_report(report)

    async def _send_report(self, report: Report) -> None:
        verdict = report.verdict.value
        try:
            await self.api.report(report.captcha_id, good=verdict == "good")
        except TaskFailed as exc:  # e.g. ERROR_WRONG_CAPTCHA_ID: CaptchaAI no longer takes reports of it
            metrics.REPORTS.labels(verdict, "rejected").inc()
            event(log, "report_rejected", logging.WARNING, id=report.task_id, verdict=verdict, code=exc.code)
            return
        except (TransientError, FatalApiError) as exc:
            metrics.REPORTS.labels(verdict, "failed").inc()
            event(log, "report_failed", logging.WARNING, id=report.task_id, verdict=verdict, code=exc.code)
            return
        metrics.REPORTS.labels(verdict, "sent").inc()
        event(log, "report_sent", id=report.task_id, verdict=verdict)


def redis_queue(cfg: WorkerConfig, redis: Client) -> RedisQueue:
    """The worker's queue on `redis`: the one place the worker side builds the concrete RedisQueue (durable writes
    as REDIS_WAIT_REPLICAS asks)."""
    return RedisQueue(redis, cfg.queue, wait_replicas=cfg.redis.wait_replicas,
                      wait_timeout_ms=cfg.redis.wait_timeout_ms)


@asynccontextmanager
async def open_worker(cfg: WorkerConfig, *, worker_id: str | None = None,
                      redis: Client | None = None) -> AsyncIterator[Worker]:
    """A Worker with its queue (a RedisQueue on `redis`) and its API session, closed on exit. `redis` None: a
    client of its own, closed on exit too; given, the caller's (``cli`` shares it with the pingback receiver)."""
    worker_id = worker_id or default_worker_id()
    own = redis is None
    if redis is None:
        redis = connect(cfg.redis, client_name=f"captcha-worker-{worker_id}")
    try:
        async with AsyncExitStack() as stack:
            hub = None
            if cfg.pingback_url:  # pingback mode: this process's solves are woken through its wake list
                hub = await stack.enter_async_context(Hub(redis, cfg.queue, worker_id, cfg.pingback_url,
                                                          time_scale=cfg.time_scale))
            api = await stack.enter_async_context(CaptchaAI(
                cfg.api_key, cfg.api_url, http_timeout_s=cfg.http_timeout_seconds,
                poll_timeout_s=cfg.http_poll_timeout_seconds, retry=RetryPolicy.scaled(cfg.time_scale),
                poll_scale=cfg.time_scale, max_connections=max(100, cfg.concurrency), pingback=hub))
            overflow = None
            if cfg.providers is not None:  # provider clients, their key files, balances and spend (the operator's view)
                overflow = (await stack.enter_async_context(ProviderPool(cfg, redis))).overflow
            worker, reload = Worker(cfg, redis_queue(cfg, redis), api, worker_id=worker_id, overflow=overflow), None
            if worker.breaker is not None:  # every CaptchaAI request's outcome feeds the breaker
                api.observe = worker.breaker.record
            if cfg.api_key_file:  # a key rotated in its Secret reaches this process without a restart
                def rotate(key: Secret) -> None:
                    api.set_key(key)
                    worker.key_changed()

                watcher = KeyFileWatcher(cfg.api_key_file, cfg.api_key.value, rotate)
                reload = asyncio.create_task(watch_key_file(watcher, cfg.key_reload_seconds))
            try:
                yield worker
            finally:
                if reload is not None:
                    reload.cancel()
                    with suppress(asyncio.CancelledError):
                        await reload
    finally:
        if own:
            await redis.aclose()
