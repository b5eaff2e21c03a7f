"""Worker runtime: N solve slots per process under a cluster-wide thread budget.

One process runs these coroutines:

* **claimer** — while this worker holds budget units that no solve is using, claims that many tasks
  (CLAIM, non-blocking, batched), or waits on BLMOVE for one; each claimed task becomes a *job*.
* **jobs** — one per claimed task: validate, check deadline and attempts, solve through the API client, then
  ACK / BURY / RELEASE (see ``queue``).
* **budget** — keeps ``WORKER_CONCURRENCY`` budget units in ``{q}:budget`` when the cluster-wide limit
  (``CAPTCHAAI_THREADS``) allows; a slot without a unit never calls the API.
* **heartbeat** — renews job leases and budget units, records the worker as alive, exports queue depths.
* **reaper** — requeues expired leases and orphaned claims (every worker runs one; the script is atomic).
* **plan** — reads threadsinfo/getbalance; while a fatal API error (bad key, IP ban) lasts, probes for recovery.

Phases: RUNNING → (fatal API error) FATAL → (probe succeeds) RUNNING; SIGTERM → DRAINING: stop claiming,
let jobs finish within ``DRAIN_GRACE_SECONDS``, then cancel them; a cancelled job puts its task back at the
front of pending without counting the attempt.  Redis outages never crash the worker: every Redis operation that
fails with an outage (``connection.refusal``: connection loss, timeouts, LOADING, OOM, READONLY, ...) is retried
with backoff, readiness is false meanwhile and one log line marks each change of state; a task whose lease lapsed
is requeued by a reaper and the first result written wins.

Every claimed item ends with an outcome on its first claim when it cannot become a task: bytes that are not
UTF-8, JSON nested too deep, payloads over ``MAX_TASK_BYTES`` (buried by the claim script itself), invalid tasks
— each is dead-lettered with a code and a reason, counted in ``captcha_solver_dead_letters_total{code}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from redis import exceptions as rexc

from captcha_worker import log as logs
from captcha_worker import metrics
from captcha_worker.captchaai import (
    CaptchaAI,
    FatalApiError,
    RetryPolicy,
    Solution,
    SolveStats,
    SolveTimeout,
    TaskFailed,
    ThreadsInfo,
    TransientError,
    describe,
)
from captcha_worker.config import WorkerConfig
from captcha_worker.connection import Client, Refusal, connect, describe_refusal, is_cross_slot, refusal
from captcha_worker.log import event
from captcha_worker.methods import Kind
from captcha_worker.queue import Ack, Claimed, ClaimFlag, Queue, Text, dead_entry, is_raw_item, item_ref
from captcha_worker.task import Invalid, Result, Status, Task, Timings, parse_task, payload_view

log = logging.getLogger("captcha_worker.worker")
T = TypeVar("T")
P = ParamSpec("P")

REPLY_TTL_S = 300


class Phase(enum.Enum):
    RUNNING = "running"
    FATAL = "fatal"
    DRAINING = "draining"


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


@dataclass(eq=False)
class Job:
    """One claimed task while this worker owns it. ``item`` is what sits in processing."""

    item: Text
    attempts: int = 0
    task: Task | None = None
    claimed_at: float = field(default_factory=time.time)

    @property
    def kind_label(self) -> str:
        """The bounded `method` metric label: the task's kind, or `unknown` before it is known."""
        return metrics.kind_label(self.task.kind.name if self.task else None)


class Api(Protocol):
    """What the worker needs from the API client (CaptchaAI implements it; benchmarks plug in instant ones)."""

    async def solve(self, kind: Kind, method: str, params: Mapping[str, str], *, deadline: float,
                    unsolvable_retries: int = 1, stats: SolveStats | None = None) -> Solution: ...

    async def threadsinfo(self) -> ThreadsInfo: ...

    async def getbalance(self) -> float: ...


class Worker:
    def __init__(self, cfg: WorkerConfig, redis: Client, api: Api, *, worker_id: str | None = None) -> None:
        self.cfg = cfg
        self.api = api
        self.queue = Queue(redis, cfg.queue, wait_replicas=cfg.redis.wait_replicas,
                           wait_timeout_ms=cfg.redis.wait_timeout_ms)
        self.id = worker_id or default_worker_id()
        self.members = [f"{self.id}:{i}" for i in range(cfg.concurrency)]
        self.held: set[str] = set()  # budget units this worker holds
        self.phase = Phase.RUNNING
        self.fatal_code: str | None = None
        self.redis_down: Refusal | None = None  # why Redis cannot serve, while it lasts
        self._redis_down_since = 0.0
        self._failing: set[object] = set()  # Redis calls retrying an outage (one token per call)
        self.compat_list = cfg.compat_queue_list  # None after a CROSSSLOT (Redis Cluster): logged once
        self.last_pending = 0
        self._wake = asyncio.Event()  # capacity changed: the claimer looks again
        self._stop = asyncio.Event()  # SIGTERM: stop claiming
        self._closing = asyncio.Event()  # jobs are done: background loops end
        self._jobs: dict[asyncio.Task[None], Job] = {}  # running jobs by their task
        self._acks = AckBatcher(self._ack_many)

    # -- readiness ----------------------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        if self.phase is Phase.DRAINING:
            return False, "draining"
        if self.phase is Phase.FATAL:
            return False, f"fatal API error: {self.fatal_code}"
        if self.redis_down is not None:
            return False, f"redis unavailable: {self.redis_down.value}"
        return True, "ready"

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
        event(log, "worker_started", worker=self.id, concurrency=self.cfg.concurrency, threads=self.cfg.threads,
              queue=self.cfg.queue)
        if self.cfg.concurrency > self.cfg.threads:
            event(log, "concurrency_above_threads", logging.WARNING, concurrency=self.cfg.concurrency,
                  threads=self.cfg.threads, hint="slots above the plan's threads only wait for budget")
        loops = [asyncio.create_task(self._supervise(name, fn)) for name, fn in (
            ("plan", self._plan_loop), ("budget", self._budget_loop),
            ("heartbeat", self._heartbeat_loop), ("reaper", self._reaper_loop))]
        claimer = asyncio.create_task(self._supervise("claimer", self._claim_loop))
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

    async def _pause(self, seconds: float) -> bool:
        """Sleep, but wake up at once when the worker closes. True when closing."""
        with suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closing.wait()
        return self._closing.is_set()

    async def _say_goodbye(self) -> None:
        with suppress(Exception):
            await asyncio.wait_for(self.queue.budget_release(sorted(self.held)), 2)
            await asyncio.wait_for(self.queue.forget_worker(self.id), 2)
        self.held.clear()
        metrics.BUDGET_HELD.set(0)

    async def _supervise(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop forever; a bug in one iteration is logged and the loop restarted, after a pause
        that doubles while it keeps crashing (1 s to 30 s), so a persistent fault cannot flood the log."""
        pause = 1.0
        while not self._closing.is_set() and not (name == "claimer" and self._stop.is_set()):
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
        Anything else (a bug, a wrong key type) is raised.

        Redis is *down* while any call is retrying an outage; it is back when every such call went through (a
        refusal can be partial: with maxmemory reached, deletions still pass while writes fail).
        Returns None only for claims while the worker is stopping and Redis is still unavailable.
        """
        delay, token = 0.05, object()
        try:
            while True:
                try:
                    result = await op(*args, **kwargs)
                except Exception as exc:
                    why = refusal(exc)
                    if why is None:
                        raise
                    metrics.REDIS_ERRORS.labels(why.value).inc()
                    self._failing.add(token)
                    self._redis_failed(why, what, exc)
                    if self._closing.is_set() or (self._stop.is_set() and what in {"claim", "claim_blocking"}):
                        return None
                    await asyncio.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 5.0)
                    continue
                return result
        finally:
            self._redis_settled(token, what)

    def _redis_failed(self, why: Refusal, what: str, exc: Exception) -> None:
        """One log line per change of Redis state (not per attempt); readiness follows."""
        if self.redis_down is why:
            return
        if self.redis_down is None:
            self._redis_down_since = time.monotonic()
        self.redis_down = why
        self._set_ready_gauge()
        event(log, "redis_unavailable", logging.WARNING, reason=why.value, op=what, error=type(exc).__name__,
              detail=f"Redis is {describe_refusal(why)}", hint="retrying with backoff; readiness is false")

    def _redis_settled(self, token: object, what: str) -> None:
        self._failing.discard(token)
        if self.redis_down is not None and not self._failing:
            event(log, "redis_reconnected", op=what, was=self.redis_down.value,
                  down_s=round(time.monotonic() - self._redis_down_since, 1))
            self.redis_down = None
            self._set_ready_gauge()

    # -- claiming -----------------------------------------------------------------------------------------
    def _room(self) -> int:
        if self.phase is not Phase.RUNNING:
            return 0
        return len(self.held) - len(self._jobs)

    async def _claim_loop(self) -> None:
        cfg = self.cfg
        limits: dict[str, Any] = {"lease_s": cfg.lease_seconds, "max_bytes": cfg.max_task_bytes,
                                  "dead_max": cfg.dead_letter_max}
        while not self._stop.is_set():
            room = self._room()
            if room <= 0:
                self._wake.clear()
                with suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._wake.wait()
                continue
            claimed = await self._claim_batch(room, limits)
            if not claimed:
                if self._stop.is_set():
                    break
                # BLMOVE watches pending only: with a compat list, wake up often enough to look at it too
                one = await self._redis("claim_blocking", self.queue.claim_blocking,
                                        timeout_s=0.25 if self.compat_list else 1.0, **limits)
                claimed = [one] if one is not None else []
            for c in claimed:
                self._start(c)

    async def _claim_batch(self, room: int, limits: dict[str, Any]) -> list[Claimed]:
        try:
            return await self._redis("claim", self.queue.claim, room, compat_list=self.compat_list, **limits) or []
        except rexc.ResponseError as exc:
            if self.compat_list is None or not is_cross_slot(exc):
                raise
            event(log, "compat_queue_unusable", logging.ERROR, list=self.compat_list,
                  reason="CROSSSLOT: the list is not in the queue's hash slot (Redis Cluster)",
                  hint=f"name it with the queue's hash tag (e.g. {{{self.cfg.queue}}}:queue) or unset "
                       "COMPAT_QUEUE_LIST; serving the queue without it")
            self.compat_list = None
            return []

    def _start(self, claimed: Claimed) -> None:
        if claimed.flag is ClaimFlag.ITEM_TOO_LARGE:  # dead-lettered by the claim script itself, never read
            metrics.TASKS.labels("unknown", "dead_lettered").inc()
            metrics.DEAD_LETTERS.labels("TASK_TOO_LARGE").inc()
            event(log, "task_dead_lettered", logging.WARNING, id=None, code="TASK_TOO_LARGE", attempts=1,
                  reason=f"payload is {claimed.attempts} bytes, over the limit of {self.cfg.max_task_bytes}",
                  sha1=claimed.item)
            return
        job = Job(claimed.item, claimed.attempts)
        t = asyncio.create_task(self._handle(job, claimed))
        self._jobs[t] = job
        t.add_done_callback(self._job_done)

    def _job_done(self, t: asyncio.Task[None]) -> None:
        self._jobs.pop(t, None)
        self._wake.set()

    async def _handle(self, job: Job, claimed: Claimed) -> None:
        try:
            await self._process(job, claimed)
        except asyncio.CancelledError:
            # the drain grace ran out: give the task back without counting this attempt
            with suppress(Exception):
                await asyncio.shield(self.queue.release(job.item, refund_attempt=True, front=True,
                                                        last_error="worker shut down"))
            metrics.TASKS.labels(job.kind_label, "released").inc()
            raise
        except Exception as exc:
            event(log, "job_crashed", logging.ERROR, item=item_ref(job.item), error=type(exc).__name__)
            with suppress(Exception):
                if is_raw_item(job.item):  # no attempt count would ever end it: settle it now
                    await self._bury(job, f"the worker failed on this payload ({type(exc).__name__})",
                                     "WORKER_ERROR", task_id=None, reply_to=None, view=self._view(job.item))
                else:
                    await self.queue.release(job.item, refund_attempt=False, front=False, last_error="worker error")

    # -- one task -----------------------------------------------------------------------------------------
    async def _process(self, job: Job, claimed: Claimed) -> None:
        task = await self._load(job, claimed)
        if task is None:
            return
        job.task = task
        metrics.QUEUE_WAIT.observe(max(0.0, job.claimed_at - task.submitted_at))
        if job.attempts > self.cfg.max_attempts:
            last = await self._redis("last_error", self.queue.last_error, task.id)
            await self._give_up(job, task, job.attempts - 1, last or "unknown")
        elif task.expired(time.time()):
            await self._finish(job, task, Result(task.id, Status.EXPIRED, code="DEADLINE_PASSED",
                                                 text="the task's deadline passed before it was solved"))
        elif self.phase is not Phase.RUNNING:
            # a blocking claim that returned just as the worker stopped (fatal error, SIGTERM): give it back
            await self._release(job, refund=True, front=True, why=f"worker {self.phase.value}")
        else:
            await self._solve(job, task)

    async def _load(self, job: Job, claimed: Claimed) -> Task | None:
        """The claimed item's Task, or None when it was settled here (invalid, no body, duplicate)."""
        if is_raw_item(claimed.item):
            return await self._adopt(job, claimed.item)
        task_id = cast(str, claimed.item)
        if claimed.done:
            await self._redis("ack", self.queue.ack, job.item, None)
            metrics.TASKS.labels("unknown", "duplicate").inc()
            return None
        if claimed.flag is ClaimFlag.BODY_TOO_LARGE:
            await self._bury(job, f"the stored task body is over the limit of {self.cfg.max_task_bytes} bytes",
                             "TASK_TOO_LARGE", task_id=task_id, reply_to=None, view=None)
            return None
        if claimed.body is None:
            await self._bury(job, "the task body expired before a worker claimed it (TASK_TTL_SECONDS), or was "
                                  "never stored", "TASK_EXPIRED", task_id=task_id, reply_to=None, view=None,
                             status=Status.EXPIRED)
            return None
        parsed = parse_task(claimed.body, max_bytes=self.cfg.max_task_bytes)
        if isinstance(parsed, Invalid):
            await self._bury(job, parsed.reason, parsed.code, task_id=task_id, reply_to=parsed.reply_to,
                             view=self._view(claimed.body))
            return None
        return parsed

    async def _adopt(self, job: Job, raw: Text) -> Task | None:
        """A raw payload (a seed-guide producer's JSON task, or anything else): validate it, then give it a task
        hash and an id item; a repeated push of a known id is dropped (the task it names goes on)."""
        parsed = parse_task(raw, max_bytes=self.cfg.max_task_bytes)
        if isinstance(parsed, Invalid):
            await self._bury(job, parsed.reason, parsed.code, task_id=parsed.task_id, reply_to=parsed.reply_to,
                             view=self._view(raw), raw=True)
            return None
        attempts = await self._redis("adopt", self.queue.adopt, raw, parsed.id, parsed.body(),
                                     ttl=self.cfg.task_ttl_seconds, lease_s=self.cfg.lease_seconds)
        if attempts is None:
            return None  # a reaper took it back meanwhile
        if attempts == 0:
            metrics.TASKS.labels(metrics.kind_label(parsed.kind.name), "duplicate").inc()
            event(log, "task_duplicate", id=parsed.id, why="a raw push of a known id: the existing task stands")
            return None
        job.item, job.attempts = parsed.id, attempts
        return parsed

    def _view(self, payload: Text) -> str:
        return payload_view(payload, logs.redact, max_bytes=self.cfg.max_task_bytes)

    async def _solve(self, job: Job, task: Task) -> None:
        cfg = self.cfg
        now = time.time()
        deadline = now + cfg.solve_timeout_seconds
        if task.deadline is not None:
            deadline = min(deadline, task.deadline)
        stats = SolveStats()
        metrics.IN_FLIGHT.inc()
        try:
            solution = await self.api.solve(task.kind, task.method, task.params, deadline=deadline,
                                            unsolvable_retries=cfg.unsolvable_retries, stats=stats)
        except FatalApiError as exc:
            self._enter_fatal(exc.code)
            await self._release(job, refund=True, front=True, why=exc.code)
            return
        except TaskFailed as exc:
            await self._finish(job, task, Result(task.id, Status.ERROR, code=exc.code, text=describe(exc.code)),
                               stats)
            return
        except TransientError as exc:
            await self._retry_later(job, task, exc.code)
            return
        except SolveTimeout:
            await self._timed_out(job, task, stats)
            return
        finally:
            metrics.IN_FLIGHT.dec()
        answer = solution.answer
        result = Result(task.id, Status.SOLVED, solution=answer.request, user_agent=answer.user_agent)
        await self._finish(job, task, result, stats, solved_at=solution.solved_at)

    async def _timed_out(self, job: Job, task: Task, stats: SolveStats) -> None:
        if task.expired(time.time()):
            await self._finish(job, task, Result(task.id, Status.EXPIRED, code="DEADLINE_PASSED",
                                                 text="the task's deadline passed while it was being solved"), stats)
        elif stats.polls == 0:
            # never got a thread: capacity is not the task's fault, so no attempt is counted
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, refund=True, front=False, why="no free thread within the solve timeout")
        else:
            await self._finish(job, task, Result(task.id, Status.ERROR, code="SOLVE_TIMEOUT",
                                                 text=describe("SOLVE_TIMEOUT")), stats)

    async def _retry_later(self, job: Job, task: Task, code: str) -> None:
        if job.attempts >= self.cfg.max_attempts:
            await self._give_up(job, task, job.attempts, code)
        else:
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, refund=False, front=False, why=code)

    async def _give_up(self, job: Job, task: Task, attempts: int, last_error: str) -> None:
        await self._bury(job, f"gave up after {attempts} attempts (last: {last_error})", "MAX_ATTEMPTS_EXCEEDED",
                         task_id=task.id, reply_to=task.reply_to, view=self._view(task.body()))

    # -- outcomes -----------------------------------------------------------------------------------------
    async def _finish(self, job: Job, task: Task | None, result: Result, stats: SolveStats | None = None,
                      solved_at: float | None = None) -> None:
        finished = time.time()
        kind = task.kind if task else None
        full = dataclasses.replace(
            result, kind=kind.name if kind else None, attempts=job.attempts, api_calls=stats.api_calls if stats else 0,
            timings=Timings(submitted_at=task.submitted_at if task else None, claimed_at=job.claimed_at,
                            started_at=stats.started_at if stats else None, solved_at=solved_at,
                            finished_at=finished),
            token_lifetime_s=kind.token_lifetime_s if kind and result.status is Status.SOLVED else None,
        )
        won = await self._acks.ack(Ack(job.item, full, task.reply_to if task else None))
        label = job.kind_label
        outcome = result.status.value if won else "duplicate"
        metrics.TASKS.labels(label, outcome).inc()
        if stats is not None and stats.started_at is not None:
            metrics.POLLS.labels(label).observe(stats.polls)
        if won and solved_at is not None and stats is not None and stats.started_at is not None:
            metrics.SOLVE_DURATION.labels(label).observe(solved_at - stats.started_at)
            metrics.TOKEN_AGE.observe(max(0.0, time.time() - solved_at))
        if won:
            await self._seed_result(full)
        event(log, "task_done", logging.DEBUG, id=result.id, kind=label, status=outcome, code=result.code,
              attempts=job.attempts, api_calls=full.api_calls, seconds=round(finished - job.claimed_at, 3))

    async def _bury(self, job: Job, reason: str, code: str, *, task_id: str | None, reply_to: str | None,
                    view: str | None, status: Status = Status.ERROR, raw: bool = False) -> None:
        """Dead-letter the job's item; `view` is already redacted. With a task id, its producer gets a result
        with this code (`raw`: only when no task of that id exists, see Queue.bury)."""
        entry = dead_entry(reason=reason, code=code, task_id=task_id, view=view, attempts=job.attempts)
        result = None
        if task_id is not None:
            result = Result(task_id, status, kind=job.task.kind.name if job.task else None, code=code,
                            text=reason, attempts=job.attempts,
                            timings=Timings(claimed_at=job.claimed_at, finished_at=time.time()))
        done = await self._redis("bury", self.queue.bury, job.item, entry, result=result, reply_to=reply_to,
                                 dead_max=self.cfg.dead_letter_max, result_ttl=self.cfg.result_ttl_seconds,
                                 reply_ttl=REPLY_TTL_S, raw=raw)
        if done is None or not done[0]:
            return  # no longer ours (a reaper took it back after a stall): its next claim settles it
        metrics.TASKS.labels(job.kind_label, "dead_lettered").inc()
        metrics.DEAD_LETTERS.labels(metrics.dead_letter_label(code)).inc()
        event(log, "task_dead_lettered", logging.WARNING, id=task_id, code=code, reason=reason,
              attempts=job.attempts)
        if result is not None and done[1]:
            await self._seed_result(result)

    async def _seed_result(self, result: Result) -> None:
        """COMPAT_RESULTS_HASH: the result in the seed guide's shape, in its `captcha:results` hash."""
        if self.cfg.compat_results_hash:
            await self._redis("compat_results", self.queue.write_seed_result, result.id,
                              seed_entry(result, self.id), ttl=self.cfg.result_ttl_seconds)

    async def _release(self, job: Job, *, refund: bool, front: bool, why: str) -> None:
        await self._redis("release", self.queue.release, job.item, refund_attempt=refund, front=front,
                          last_error=why)
        metrics.TASKS.labels(job.kind_label, "released").inc()
        event(log, "task_released", id=item_ref(job.item), why=why, attempt_refunded=refund)

    async def _ack_many(self, acks: list[Ack]) -> list[bool]:
        won = await self._redis("ack", self.queue.ack_many, acks, result_ttl=self.cfg.result_ttl_seconds,
                                reply_ttl=REPLY_TTL_S)
        return won if won is not None else [False] * len(acks)

    # -- fatal state --------------------------------------------------------------------------------------
    def _enter_fatal(self, code: str) -> None:
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

    # -- background loops ---------------------------------------------------------------------------------
    async def _plan_loop(self) -> None:
        """threadsinfo + getbalance now and then; while FATAL, probe every 30 s (scaled) to recover."""
        cfg = self.cfg
        while True:
            try:
                info = await self.api.threadsinfo()
                metrics.PLAN_THREADS.set(info.threads)
                metrics.PLAN_WORKING_THREADS.set(info.working_threads)
                if info.threads != cfg.threads:
                    event(log, "plan_threads_mismatch", logging.WARNING, plan_threads=info.threads,
                          configured=cfg.threads)
                metrics.BALANCE.set(await self.api.getbalance())
                self._leave_fatal()
            except FatalApiError as exc:
                self._enter_fatal(exc.code)
            except (TransientError, TaskFailed) as exc:
                event(log, "plan_check_failed", logging.WARNING, code=exc.code)
            pause = cfg.threadsinfo_interval_seconds if self.phase is not Phase.FATAL else 30.0 / cfg.time_scale
            if await self._pause(pause):
                return

    async def _budget_loop(self) -> None:
        cfg = self.cfg
        last = time.monotonic()
        while True:
            if self.phase is Phase.RUNNING:
                want = [m for m in self.members if m not in self.held]
                if want:
                    granted = await self._redis("budget_acquire", self.queue.budget_acquire, want,
                                                limit=cfg.threads, lease_s=cfg.lease_seconds)
                    if granted:
                        self.held.update(granted)
                        self._wake.set()
            elif self.phase is Phase.FATAL and self.held:
                # a worker that cannot call the API must not sit on the plan's threads
                idle = sorted(self.held)[: max(0, len(self.held) - len(self._jobs))]
                await self._redis("budget_release", self.queue.budget_release, idle)
                self.held.difference_update(idle)
            now = time.monotonic()
            missing = len(self.members) - len(self.held)
            if missing > 0 and self.last_pending > 0 and self.phase is Phase.RUNNING:
                metrics.BUDGET_WAIT.inc(missing * (now - last))
            last = now
            metrics.BUDGET_HELD.set(len(self.held))
            if await self._pause(0.2 if missing else 1.0):
                return

    async def _heartbeat_loop(self) -> None:
        cfg = self.cfg
        period = cfg.lease_seconds / 3
        while True:
            items = [j.item for j in self._jobs.values()]
            lost = await self._redis("renew", self.queue.renew, items, lease_s=cfg.lease_seconds) or []
            for item in lost:
                metrics.LEASES_LOST.inc()
                event(log, "lease_lost", logging.WARNING, item=item_ref(item))
            units = sorted(self.held)
            gone = await self._redis("budget_renew", self.queue.budget_renew, units,
                                     lease_s=cfg.lease_seconds) or []
            if gone:
                self.held.difference_update(gone)
                event(log, "budget_units_lost", logging.WARNING, count=len(gone))
            seen = await self._redis("heartbeat", self.queue.heartbeat, self.id)
            if seen is not None:
                self.last_pending = seen.pending
                metrics.BUDGET_IN_USE.set(seen.budget_in_use)
                metrics.WORKERS_ALIVE.set(seen.workers_alive)
                metrics.QUEUE_DEPTH.labels("pending").set(seen.pending)
                metrics.QUEUE_DEPTH.labels("processing").set(seen.processing)
                metrics.QUEUE_DEPTH.labels("dead").set(seen.dead)
            if await self._pause(min(period, 5.0)):
                return

    async def _reaper_loop(self) -> None:
        cfg = self.cfg
        while not await self._pause(cfg.lease_seconds / 2 * (0.75 + 0.5 * random.random())):
            counts = await self._redis("reap", self.queue.reap, orphan_grace_s=cfg.orphan_grace_seconds)
            if counts and any(counts):
                expired, orphaned = counts
                metrics.LEASES_REAPED.labels("expired").inc(expired)
                metrics.LEASES_REAPED.labels("orphaned").inc(orphaned)
                event(log, "leases_reaped", logging.WARNING, expired=expired, orphaned=orphaned)


class AckBatcher:
    """Jobs that finish in the same event-loop turn are acknowledged together: one round trip for all."""

    def __init__(self, flush: Callable[[list[Ack]], Awaitable[list[bool]]], max_batch: int = 500) -> None:
        self._flush = flush
        self._max = max_batch
        self._pending: list[tuple[Ack, asyncio.Future[bool]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def ack(self, ack: Ack) -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((ack, fut))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await fut

    async def _run(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max:]
            try:
                won = await self._flush([a for a, _ in batch])
            except Exception as exc:  # handed to each waiting job
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), w in zip(batch, won, strict=True):
                if not fut.done():
                    fut.set_result(w)


def seed_entry(result: Result, worker_id: str) -> str:
    """A result as the seed guide's consumer reads it: ``status`` success/error, ``token``, ``error``,
    ``duration`` (seconds from submission, or from the claim, to the result) and ``worker``."""
    solved = result.status is Status.SOLVED
    t = result.timings
    duration = t.total if t.total is not None else _span_or_none(t.claimed_at, t.finished_at)
    return json.dumps({"status": "success" if solved else "error", "token": result.solution if solved else None,
                       "error": None if solved else (result.code or result.status.value),
                       "duration": None if duration is None else round(duration, 3), "worker": worker_id},
                      separators=(",", ":"))


def _span_or_none(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


@asynccontextmanager
async def open_worker(cfg: WorkerConfig, *, worker_id: str | None = None) -> AsyncIterator[Worker]:
    """A Worker with its Redis client and API session; both closed on exit."""
    worker_id = worker_id or default_worker_id()
    redis = connect(cfg.redis, client_name=f"captcha-worker-{worker_id}")
    try:
        async with CaptchaAI(cfg.api_key, cfg.api_url, http_timeout_s=cfg.http_timeout_seconds,
                             poll_timeout_s=cfg.http_poll_timeout_seconds,
                             retry=RetryPolicy.scaled(cfg.time_scale), poll_scale=cfg.time_scale,
                             max_connections=max(100, cfg.concurrency)) as api:
            yield Worker(cfg, redis, api, worker_id=worker_id)
    finally:
        await redis.aclose()
