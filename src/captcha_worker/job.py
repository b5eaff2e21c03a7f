"""The path of one claimed item: claimed → outcome → ack.

A *job* is one claimed item while this worker owns it (``Worker`` starts one per claimed item and keeps the loops):

1. **load** — a raw payload is validated and adopted (its task hash written, its id put at the front of pending to
   be claimed as a task); a finished id is dropped; a body that is missing, too large or invalid is dead-lettered
   with its code, on the first claim;
2. **checks** — workers that died under the task (``MAX_WORKER_DEATHS``), API-side failures (``MAX_ATTEMPTS``), the
   task's deadline, the worker's phase;
3. **solve** — resume the solve an earlier owner left running at the API (its captcha id, while it can still be
   answered), else submit; the captcha id is recorded on the task as soon as ``in.php`` answers (RECORD, batched
   with the ACKs of the same event-loop turn, and dropped when the job's own ACK overtakes it);
4. **outcome** — ACK with the result, BURY into the dead letters, or RELEASE back to pending.

The budget unit the claim took travels with the job: the outcome releases it, or holds it as long as the job's solve
may still be running at CaptchaAI (a drain past its grace, failed polls, a timeout), so that the plan's threads are
never over-committed and the next owner resumes that solve under the same unit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from captcha_worker import log as logs
from captcha_worker import methods, metrics
from captcha_worker.budget import stray_unit
from captcha_worker.captchaai import (
    FatalApiError,
    MaybeCharged,
    Resume,
    Solution,
    SolveStats,
    SolveTimeout,
    TaskFailed,
    ThreadsInfo,
    TransientError,
    describe,
)
from captcha_worker.codes import Code
from captcha_worker.config import ProviderConfig, WorkerConfig
from captcha_worker.log import event
from captcha_worker.methods import Answer, Kind
from captcha_worker.overflow import OverCap, Overflow, PaidSolution, RoundsUsed
from captcha_worker.spend import money
from captcha_worker.store.keys import Text, is_raw_item, item_ref
from captcha_worker.store.records import Ack, Claimed, ClaimFlag, ClaimReply, Record, RecordOutcome, dead_entry
from captcha_worker.task import Invalid, PayloadView, Result, Status, Task, Timings, parse_task, payload_view
from captcha_worker.worker_queue import WorkerQueue

log = logging.getLogger("captcha_worker.worker")
T = TypeVar("T")
P = ParamSpec("P")

REPLY_TTL_S = 300
_CAP_RETRY_S, _CAP_RETRY_MAX_S = 0.5, 5.0  # a task the spend cap refused tries again after this, doubling


class Api(Protocol):
    """What the worker needs from the API client (CaptchaAI implements it; benchmarks plug in instant ones)."""

    async def solve(self, kind: Kind, method: str, params: Mapping[str, str], *, deadline: float,
                    unsolvable_retries: int = 1, stats: SolveStats | None = None, resume: Resume | None = None,
                    on_submit: Callable[[str, float], None] | None = None,
                    hurry: Callable[[], bool] | None = None) -> Solution: ...

    async def threadsinfo(self) -> ThreadsInfo: ...

    async def getbalance(self) -> float: ...

    async def report(self, captcha_id: str, *, good: bool) -> None: ...


class Host(Protocol):
    """What a job needs from its worker."""

    cfg: WorkerConfig
    api: Api
    queue: WorkerQueue
    id: str

    @property
    def running(self) -> bool: ...

    def hurry(self) -> bool: ...

    def enter_fatal(self, code: str) -> None: ...

    def claim_ahead(self, acks: int) -> int: ...

    def claimed_ahead(self, reply: ClaimReply | None, reserved: int) -> None: ...

    def claim_limits(self) -> dict[str, Any]: ...

    def phase_name(self) -> str: ...

    @property
    def overflow(self) -> Overflow | None: ...

    @property
    def foreign_kinds(self) -> frozenset[str]: ...

    def route(self, task: Task, job: Job) -> ProviderConfig | None: ...

    def overflow_mode(self) -> bool: ...

    def may_solve(self) -> bool: ...

    def provider_slot(self, provider: str) -> asyncio.Semaphore: ...

    async def drop_unit(self, job: Job) -> None: ...

    async def redis(self, what: str, op: Callable[P, Awaitable[T]], *args: P.args,
                    **kwargs: P.kwargs) -> T | None: ...


@dataclass(eq=False)
class Job:
    """One claimed item while this worker owns it. ``item`` is what sits in processing."""

    item: Text
    failures: int = 0
    deaths: int = 0
    unit: str | None = None  # the budget unit the claim took (None: no API call is to come)
    task: Task | None = None
    claimed_at: float = field(default_factory=time.time)
    stats: SolveStats = field(default_factory=SolveStats)
    resume: Resume | None = None  # a solve an earlier owner left running at the API
    record: PendingRecord | None = None  # the RECORD of the captcha id, once sent
    settling: bool = False  # its outcome (ACK, BURY, RELEASE, ADOPT) is being written: a lease gone is no loss
    lease_lost: bool = False  # the heartbeat found its lease gone while it ran (a stall): no longer renewed
    unit_dropped: bool = False  # its unit was given back: a per-solve provider solves it, not a plan thread

    @classmethod
    def from_claim(cls, c: Claimed) -> Job:
        job = cls(c.item, c.failures, c.deaths, c.unit)
        if c.resumable and c.captcha_id is not None and c.captcha_left_s is not None:
            job.resume = Resume(c.captcha_id, time.time() + c.captcha_left_s)
            job.stats.captcha_id, job.stats.captcha_until = job.resume.captcha_id, job.resume.until
        return job

    @property
    def attempt(self) -> int:
        return self.failures + 1

    @property
    def kind_label(self) -> str:
        """The bounded `method` metric label: the task's kind, or `unknown` before it is known."""
        return metrics.kind_label(self.task.kind.name if self.task else None)

    def hold_s(self) -> float:
        """How long this job's solve may still be running at the API (its unit stays counted that long)."""
        return self.stats.running_s(time.time())

    def settle(self) -> Job:
        """Its outcome is about to be written: from now on its lease going is no loss (the heartbeat says nothing)."""
        self.settling = True
        return self

    def current_unit(self) -> str | None:
        """The unit that counts this job's solve: the claimed one, or a stray one (see budget.stray_unit)."""
        if self.unit_dropped:
            return None
        rec = self.record
        if rec is not None and rec.outcome is RecordOutcome.STRAY:
            assert self.task is not None and self.stats.captcha_id is not None
            return stray_unit(self.task.id, self.stats.captcha_id)
        return self.unit

    def outcome_unit(self) -> str | None:
        """The unit its outcome settles: the current one, or the one it gave back (a heartbeat that renewed it
        meanwhile may have counted it again: the outcome removes it for good)."""
        return self.unit if self.unit_dropped else self.current_unit()


class JobRunner:
    """Runs jobs for one worker: the path of one claimed item, and its writes (batched)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.cfg = host.cfg
        self.writes = Writes(self._write_batch)

    async def run(self, job: Job, claimed: Claimed) -> None:
        try:
            await self._process(job, claimed)
        except asyncio.CancelledError:
            # the drain grace ran out: give the task back (no failure counted), its solve left for the next owner
            with suppress(Exception):
                await asyncio.shield(self._give_back(job))
            metrics.TASKS.labels(job.kind_label, "released").inc()
            raise
        except Exception as exc:
            event(log, "job_crashed", logging.ERROR, item=item_ref(job.item), error=type(exc).__name__)
            with suppress(Exception):
                if is_raw_item(job.item):  # no count would ever end it: settle it now
                    await self._bury(job, f"the worker failed on this payload ({type(exc).__name__})",
                                     Code.WORKER_ERROR, task_id=None, reply_to=None, view=self._view(job.item))
                else:  # counted as a failure, so that MAX_ATTEMPTS ends a task the worker keeps failing on
                    await self.host.queue.release(job.settle().item, failure=True, front=False,
                                                  last_error="worker error", **self._settle_args(job))

    async def _give_back(self, job: Job) -> None:
        await self.host.queue.release(job.settle().item, failure=False, front=True, last_error="worker shut down",
                                      **self._settle_args(job))

    def _settle_args(self, job: Job) -> dict[str, Any]:
        return {"worker": self.host.id, "unit": job.outcome_unit(), "hold_s": job.hold_s(),
                "captcha_id": job.stats.captcha_id}

    # -- load and checks ------------------------------------------------------------------------------------
    async def _process(self, job: Job, claimed: Claimed) -> None:
        task = await self._load(job, claimed)
        if task is None:
            return
        job.task = task
        metrics.QUEUE_WAIT.observe(max(0.0, job.claimed_at - task.submitted_at))
        cfg = self.cfg
        if job.deaths >= cfg.max_worker_deaths:
            await self._bury(job, f"{job.deaths} workers died or stalled while holding this task (the payload may "
                                  "crash workers)", Code.MAX_WORKER_DEATHS_EXCEEDED, task_id=task.id,
                             reply_to=task.reply_to, view=self._view(task.body()))
        elif job.failures >= cfg.max_attempts:
            last = await self.host.redis("last_error", self.host.queue.last_error, task.id)
            await self._give_up(job, task, job.failures, last or "unknown")
        elif task.expired(time.time()):
            await self._finish(job, task, Result(task.id, Status.EXPIRED, code=Code.DEADLINE_PASSED,
                                                 text="the task's deadline passed before it was solved"))
        elif not self.host.may_solve():
            # a blocking claim that returned just as the worker stopped (fatal error, SIGTERM): give it back
            await self._release(job, failure=False, front=True, why=f"worker {self.host.phase_name()}")
        else:
            await self._solve(job, task)

    async def _load(self, job: Job, claimed: Claimed) -> Task | None:
        """The claimed item's Task, or None when it was settled here (invalid, no body, duplicate, adopted)."""
        if claimed.body is None and is_raw_item(claimed.item):  # a body: the claim script saw a task id
            await self._adopt(job, claimed.item)
            return None
        task_id = cast(str, claimed.item)
        if claimed.done:
            await self.host.redis("ack", self.host.queue.ack, job.settle().item, None)
            metrics.TASKS.labels("unknown", "duplicate").inc()
            return None
        if claimed.flag is ClaimFlag.BODY_TOO_LARGE:
            await self._bury(job, f"the stored task body is over the limit of {self.cfg.max_task_bytes} bytes",
                             Code.TASK_TOO_LARGE, task_id=task_id, reply_to=None, view=None)
            return None
        if claimed.body is None:
            await self._bury(job, "the task body expired before a worker claimed it (TASK_TTL_SECONDS), or was "
                                  "never stored", Code.TASK_EXPIRED, task_id=task_id, reply_to=None, view=None,
                             status=Status.EXPIRED)
            return None
        parsed = parse_task(claimed.body, max_bytes=self.cfg.max_task_bytes, foreign=self.host.foreign_kinds)
        if isinstance(parsed, Invalid):
            await self._bury(job, parsed.reason, parsed.code, task_id=task_id, reply_to=parsed.reply_to,
                             view=self._view(claimed.body))
            return None
        return parsed

    async def _adopt(self, job: Job, raw: Text) -> None:
        """A raw payload (a seed-guide producer's JSON task, or anything else): validate it, then give it a task
        hash and its id at the front of pending, to be claimed as a task (with a budget unit); a repeated push of
        a known id is dropped (the task it names goes on)."""
        parsed = parse_task(raw, max_bytes=self.cfg.max_task_bytes, foreign=self.host.foreign_kinds)
        if isinstance(parsed, Invalid):
            await self._bury(job, parsed.reason, parsed.code, task_id=parsed.task_id, reply_to=parsed.reply_to,
                             view=self._view(raw), raw=True)
            return
        adopted = await self.host.redis("adopt", self.host.queue.adopt, job.settle().item, parsed.id, parsed.body(),
                                        ttl=self.cfg.task_ttl_seconds)
        if adopted is False:
            metrics.TASKS.labels(metrics.kind_label(parsed.kind.name), "duplicate").inc()
            event(log, "task_duplicate", id=parsed.id, why="a raw push of a known id: the existing task stands")

    def _view(self, payload: Text) -> PayloadView:
        return payload_view(payload, logs.redact, max_bytes=self.cfg.max_task_bytes)

    # -- solve ------------------------------------------------------------------------------------------------
    def _deadline(self, task: Task) -> float:
        deadline = time.time() + self.cfg.solve_timeout_seconds
        return deadline if task.deadline is None else min(deadline, task.deadline)

    async def _solve(self, job: Job, task: Task) -> None:
        cfg = self.cfg
        provider = self.host.route(task, job)
        if provider is not None:
            await self._solve_paid(job, task, provider)
            return
        if task.kind.captchaai and (job.unit is None or not self.host.running):
            # claimed for overflow (no plan-thread unit), or CaptchaAI is out (FATAL), and no provider takes it
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, failure=False, front=False, why=f"no provider takes {task.kind.name} while "
                                "CaptchaAI is out")
            return
        if not task.kind.captchaai:  # accepted by a worker whose provider took it; none here does
            await self._bury(job, f"{methods.UNSUPPORTED.get(task.method.lower(), task.kind.title)} and no "
                             "provider of PROVIDERS takes it", Code.UNSUPPORTED_METHOD, task_id=task.id,
                             reply_to=task.reply_to, view=self._view(task.body()))
            return
        deadline = self._deadline(task)

        def submitted(captcha_id: str, window_s: float) -> None:
            job.record = self.writes.record(Record(task.id, self.host.id, job.unit or "", captcha_id, window_s))

        metrics.IN_FLIGHT.inc()
        try:
            solution = await self.host.api.solve(task.kind, task.method, task.params, deadline=deadline,
                                                 unsolvable_retries=cfg.unsolvable_retries, stats=job.stats,
                                                 resume=job.resume, on_submit=submitted, hurry=self.host.hurry)
        except FatalApiError as exc:
            self.host.enter_fatal(exc.code)
            await self._release(job, failure=False, front=True, why=exc.code)
            return
        except TaskFailed as exc:
            await self._finish(job, task, Result(task.id, Status.ERROR, code=exc.code, text=describe(exc.code)))
            return
        except TransientError as exc:
            await self._retry_later(job, task, exc.code)
            return
        except SolveTimeout:
            await self._timed_out(job, task, outage=self.host.overflow_mode())
            return
        finally:
            metrics.IN_FLIGHT.dec()
        result = solved_result(task, solution.answer, captcha_id=solution.captcha_id)
        await self._finish(job, task, result, solved_at=solution.solved_at)

    async def _solve_paid(self, job: Job, task: Task, provider: ProviderConfig) -> None:
        """At a per-solve provider (``overflow``), without a plan thread: the job's unit goes back first; the price
        is reserved under the spend cap before the provider sees the task. While the cap has no room the job waits
        (backing off) until its deadline, then gives the task back without a failure (or answers it expired)."""
        overflow = self.host.overflow
        assert overflow is not None
        await self.host.drop_unit(job)
        deadline, pause = self._deadline(task), _CAP_RETRY_S / self.cfg.time_scale
        ids: list[str] = []  # the provider's ids: a timeout after one is a solve that timed out, not a wait

        def submitted(captcha_id: str, _window_s: float) -> None:
            ids.append(captcha_id)

        metrics.IN_FLIGHT.inc()
        try:
            while True:
                try:
                    async with self.host.provider_slot(provider.name):
                        paid = await overflow.solve(task.id, provider, task.kind, task.method, task.params,
                                                    deadline=deadline, unsolvable_retries=self.cfg.unsolvable_retries,
                                                    tenant=task.tenant or "", on_submit=submitted)
                    break
                except OverCap:
                    if time.time() + pause >= deadline or not self.host.may_solve():
                        await self._capped(job, task)
                        return
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _CAP_RETRY_MAX_S / self.cfg.time_scale)
        except TaskFailed as exc:
            await self._finish(job, task, Result(task.id, Status.ERROR, code=exc.code, text=describe(exc.code),
                                                 provider=provider.name))
            return
        except MaybeCharged as exc:  # settled at its price: an attempt, even while CaptchaAI is out
            await self._retry_later(job, task, f"{provider.name}: {exc.code}", spent=True)
            return
        except (TransientError, FatalApiError) as exc:  # the provider's: never this worker's FATAL (CaptchaAI's)
            await self._retry_later(job, task, f"{provider.name}: {exc.code}")
            return
        except SolveTimeout:
            await self._timed_out(job, task, submitted=bool(ids))
            return
        except RoundsUsed as exc:  # submitted that often already (each possibly charged): not the cap's doing
            await self._bury(job, str(exc), exc.code, task_id=task.id, reply_to=task.reply_to,
                             view=self._view(task.body()))
            return
        finally:
            metrics.IN_FLIGHT.dec()
        await self._finish(job, task, paid_result(task, paid), solved_at=paid.solution.solved_at)

    async def _capped(self, job: Job, task: Task) -> None:
        if task.expired(time.time()):
            await self._finish(job, task, Result(task.id, Status.EXPIRED, code=Code.DEADLINE_PASSED,
                                                 text="the task's deadline passed while the spend cap was reached"))
        else:
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, failure=False, front=False, why="spend cap reached")

    async def _timed_out(self, job: Job, task: Task, *, outage: bool = False, submitted: bool = False) -> None:
        """`outage`: CaptchaAI's breaker is open (its polls went unanswered): no failure of the task's, it goes
        back to be solved at a provider. `submitted`: a provider took the task (a paid solve; its polls are not
        the job's), so it timed out solving, not waiting for capacity: never resubmitted for free."""
        if task.expired(time.time()):
            await self._finish(job, task, Result(task.id, Status.EXPIRED, code=Code.DEADLINE_PASSED,
                                                 text="the task's deadline passed while it was being solved"))
        elif outage:
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, failure=False, front=False, why="no answer from CaptchaAI (breaker open)")
        elif job.stats.polls == 0 and not submitted:
            # never got a thread: capacity is not the task's fault, so no failure is counted
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, failure=False, front=False, why="no free thread within the solve timeout")
        else:
            await self._finish(job, task, Result(task.id, Status.ERROR, code=Code.SOLVE_TIMEOUT,
                                                 text=describe(Code.SOLVE_TIMEOUT)))

    async def _retry_later(self, job: Job, task: Task, code: str, *, spent: bool = False) -> None:
        """Put the task back (a failure counted towards MAX_ATTEMPTS), or give up after the last attempt. While
        CaptchaAI's breaker is open no failure is counted (the outage is not the task's fault), except for an attempt
        that was `spent` (a provider's MaybeCharged, settled at its price): those stay bounded by MAX_ATTEMPTS."""
        if not spent and self.host.overflow_mode():
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, failure=False, front=False, why=f"{code} (CaptchaAI's breaker open)")
            return
        if job.attempt >= self.cfg.max_attempts:
            await self._give_up(job, task, job.attempt, code)
        else:
            metrics.RETRIES.labels("requeue").inc()
            await self._release(job, failure=True, front=False, why=code)

    async def _give_up(self, job: Job, task: Task, attempts: int, last_error: str) -> None:
        await self._bury(job, f"gave up after {attempts} attempts (last: {last_error})", Code.MAX_ATTEMPTS_EXCEEDED,
                         task_id=task.id, reply_to=task.reply_to, view=self._view(task.body()))

    # -- outcomes ---------------------------------------------------------------------------------------------
    def _full_result(self, job: Job, task: Task | None, result: Result, solved_at: float | None) -> Result:
        kind, stats = (task.kind if task else None), job.stats
        # built field by field rather than with dataclasses.replace, which reads the fields anew per task (P1)
        return Result(
            result.id, result.status, kind=kind.name if kind else None, solution=result.solution,
            user_agent=result.user_agent, code=result.code, text=result.text, attempts=job.attempt,
            api_calls=stats.api_calls,
            timings=Timings(submitted_at=task.submitted_at if task else None, claimed_at=job.claimed_at,
                            started_at=stats.started_at, solved_at=solved_at, finished_at=time.time()),
            token_lifetime_s=kind.token_lifetime_s if kind and result.status is Status.SOLVED else None,
            captcha_id=result.captcha_id, worker_deaths=job.deaths, provider=result.provider, cost=result.cost,
        )

    async def _finish(self, job: Job, task: Task, result: Result, solved_at: float | None = None) -> None:
        full = self._full_result(job, task, result, solved_at)
        if job.record is not None:
            job.record.cancel()  # not sent yet: the ACK carries the captcha id and settles the unit itself
        won = await self.writes.ack(Ack(job.settle().item, full, task.reply_to, unit=job.outcome_unit(),
                                        hold_s=job.hold_s(), worker=self.host.id))
        label, stats = job.kind_label, job.stats
        outcome = result.status.value if won else "duplicate"
        metrics.TASKS.labels(label, outcome).inc()
        if stats.started_at is not None:
            metrics.POLLS.labels(label).observe(stats.polls)
        if won and solved_at is not None and stats.started_at is not None and not stats.resumed:
            metrics.SOLVE_DURATION.labels(label).observe(solved_at - stats.started_at)
        if won and solved_at is not None:
            metrics.TOKEN_AGE.observe(max(0.0, time.time() - solved_at))
        if won:
            await self._seed_result(full)
        event(log, "task_done", logging.DEBUG, id=result.id, kind=label, status=outcome, code=result.code,
              attempts=job.attempt, api_calls=full.api_calls, seconds=round(time.time() - job.claimed_at, 3))

    async def _bury(self, job: Job, reason: str, code: str, *, task_id: str | None, reply_to: str | None,
                    view: PayloadView | None, status: Status = Status.ERROR, raw: bool = False) -> None:
        """Dead-letter the job's item; `view` is already redacted. With a task id, its producer gets a result
        with this code (`raw`: only when no task of that id exists, see WorkerQueue.bury). A payload kept only as
        its fingerprint has its excerpt kept too while the operator's debugging window is open."""
        entry = dead_entry(reason=reason, code=code, task_id=task_id, view=view, attempts=job.attempt,
                           worker_deaths=job.deaths)
        result = None
        if task_id is not None:
            result = Result(task_id, status, kind=job.task.kind.name if job.task else None, code=code, text=reason,
                            attempts=job.attempt, worker_deaths=job.deaths,
                            timings=Timings(claimed_at=job.claimed_at, finished_at=time.time()))
        done = await self.host.redis("bury", self.host.queue.bury, job.settle().item, entry, result=result,
                                     reply_to=reply_to, dead_max=self.cfg.dead_letter_max,
                                     result_ttl=self.cfg.result_ttl_seconds, reply_ttl=REPLY_TTL_S, raw=raw,
                                     worker=self.host.id, unit=job.outcome_unit(), hold_s=job.hold_s())
        if done is None or not done[0]:
            return  # no longer ours (a reaper took it back after a stall): its next claim settles it
        if view is not None and view.fingerprint is not None and view.excerpt is not None:
            await self.host.redis("keep_raw", self.host.queue.keep_excerpt, view.fingerprint.sha256, view.excerpt)
        metrics.TASKS.labels(job.kind_label, "dead_lettered").inc()
        metrics.DEAD_LETTERS.labels(metrics.dead_letter_label(code)).inc()
        event(log, "task_dead_lettered", logging.WARNING, id=task_id, code=code, reason=reason,
              attempts=job.attempt, worker_deaths=job.deaths)
        if result is not None and done[1]:
            await self._seed_result(result)

    async def _seed_result(self, result: Result) -> None:
        """COMPAT_RESULTS_HASH: the result in the seed guide's shape, in its `captcha:results` hash."""
        if self.cfg.compat_results_hash:
            await self.host.redis("compat_results", self.host.queue.write_seed_result, result.id,
                                  seed_entry(result, self.host.id), ttl=self.cfg.result_ttl_seconds)

    async def _release(self, job: Job, *, failure: bool, front: bool, why: str) -> None:
        await self.host.redis("release", self.host.queue.release, job.settle().item, failure=failure, front=front,
                              last_error=why, **self._settle_args(job))
        metrics.TASKS.labels(job.kind_label, "released").inc()
        event(log, "task_released", id=item_ref(job.item), why=why, failure_counted=failure,
              solve_left_running=job.hold_s() > 0)

    async def _write_batch(self, acks: list[Ack], records: list[Record]) -> tuple[list[bool], list[RecordOutcome]]:
        ahead = self.host.claim_ahead(len(acks)) if acks else 0
        if ahead:  # the next claim rides on this batch: one round trip for both (P1)
            try:
                written, reply = await self.host.queue.write_batch_and_claim(
                    acks, records, result_ttl=self.cfg.result_ttl_seconds, reply_ttl=REPLY_TTL_S, claim_n=ahead,
                    **self.host.claim_limits())
            except Exception:  # the round trip failed: the writes go the usual way, retried below
                self.host.claimed_ahead(None, ahead)
            else:
                self.host.claimed_ahead(reply, ahead)
                if not isinstance(written, Exception):
                    return written
                # a script answered an error (NOSCRIPT after a restart, OOM, ...): sent again below, idempotent
        out = await self.host.redis("ack", self.host.queue.write_batch, acks, records,
                                    result_ttl=self.cfg.result_ttl_seconds, reply_ttl=REPLY_TTL_S)
        return out if out is not None else ([False] * len(acks), [RecordOutcome.STRAY] * len(records))


def solved_result(task: Task, answer: Answer, *, captcha_id: str | None = None, provider: str | None = None,
                  cost: str | None = None) -> Result:
    """The one builder of a solved task's Result (``JobRunner._full_result`` adds the job's counts and timings):
    the answer and its user agent, and where it came from: CaptchaAI's `captcha_id` (reports go there) or an
    overflow `provider` and its `cost`."""
    return Result(task.id, Status.SOLVED, solution=answer.request, user_agent=answer.user_agent,
                  captcha_id=captcha_id, provider=provider, cost=cost)


def paid_result(task: Task, paid: PaidSolution) -> Result:
    """A task solved at an overflow provider: its provider and cost, and no captcha id (the provider's id means
    nothing to CaptchaAI, where reports go)."""
    return solved_result(task, paid.solution.answer, provider=paid.provider, cost=money(paid.cost_micro))


class PendingRecord:
    """A RECORD queued with the next batch: `outcome` once it was sent; cancelled while still queued, it is not."""

    __slots__ = ("cancelled", "outcome", "rec", "sent")

    def __init__(self, rec: Record) -> None:
        self.rec = rec
        self.sent = self.cancelled = False
        self.outcome: RecordOutcome | None = None

    def cancel(self) -> None:
        if not self.sent:
            self.cancelled = True


class Writes:
    """RECORDs and ACKs that jobs reach in the same event-loop turn go out together: one round trip for all. A
    RECORD cancelled before its turn came (the job's ACK overtook it) is not sent."""

    def __init__(self, flush: Callable[[list[Ack], list[Record]], Awaitable[tuple[list[bool], list[RecordOutcome]]]],
                 max_batch: int = 500) -> None:
        self._flush = flush
        self._max = max_batch
        self._acks: list[tuple[Ack, asyncio.Future[bool]]] = []
        self._records: list[PendingRecord] = []
        self._runner: asyncio.Task[None] | None = None

    def record(self, rec: Record) -> PendingRecord:
        pending = PendingRecord(rec)
        self._records.append(pending)
        self._kick()
        return pending

    async def ack(self, ack: Ack) -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._acks.append((ack, fut))
        self._kick()
        return await fut

    def _kick(self) -> None:
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while self._acks or self._records:
            acks, self._acks = self._acks[: self._max], self._acks[self._max:]
            records = [r for r in self._records if not r.cancelled]
            self._records = []
            for r in records:
                r.sent = True
            recorded: list[RecordOutcome | None] = [None] * len(records)
            try:
                won, outcomes = await self._flush([a for a, _ in acks], [r.rec for r in records])
                recorded = list(outcomes)
            except Exception as exc:  # handed to each waiting job; a RECORD is best effort
                for _, fut in acks:
                    if not fut.done():
                        fut.set_exception(exc)
                won = []
            for (_, fut), w in zip(acks, won, strict=False):
                if not fut.done():
                    fut.set_result(w)
            for r, outcome in zip(records, recorded, strict=True):
                r.outcome = outcome


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
