"""Async CaptchaAI v1 client (in.php / res.php) with the error taxonomy of the design.

=============  ===================================================  =========================================
class          codes                                                what the caller does
=============  ===================================================  =========================================
FATAL          ERROR_WRONG_USER_KEY, ERROR_KEY_DOES_NOT_EXIST,      stop claiming, readiness false; tasks stay
               IP_BANNED, ERROR_IP_NOT_ALLOWED                      queued
CAPACITY       ERROR_ZERO_BALANCE, ERROR_NO_SLOT_AVAILABLE,         back off with jitter and retry the same
               ERROR_TOO_MUCH_REQUESTS, MAX_USER_TURN, HTTP 429     task; never fail it for that
TRANSIENT      HTTP 5xx, HTML / non-JSON bodies, ERROR_SERVER_ERROR, retried here (see below), bounded; then
               ERROR_INTERNAL_SERVER_ERROR, timeouts, connection    TransientError
               resets, ERROR_PROXY_CONNECTION_FAILED
TASK           ERROR_CAPTCHA_UNSOLVABLE, ERROR_BAD_PARAMETERS,      the task's result is an error with the code
               image and proxy errors, any other ERROR_*            (UNSOLVABLE is resubmitted a few times)
=============  ===================================================  =========================================

Which code is in which class, and its user-facing text, is the table in :mod:`captcha_worker.codes`; the fatal,
capacity and transient rows above name every code of their class (tests/test_codes.py checks them both ways).

Retries under faults (docs/benchmarks.md, P6, measures them): a transient in.php failure is retried after 0.25-0.5 s,
then with the delay doubling (jittered) up to 4 s, 6 tries in all, so a 5xx burst costs a fraction of a second
and a longer outage a few seconds per slot before the task goes back to the queue.  A failed poll (res.php get)
is not retried on its own schedule: the next poll simply comes sooner (after the same short delay), and only
``transient_attempts`` failed polls *in a row* end the solve.  Polls have their own, shorter timeout
(``HTTP_POLL_TIMEOUT_SECONDS``, 5 s): a poll is cheap and idempotent, so a stuck one is abandoned early, while
in.php, which creates a solve, keeps the full ``HTTP_TIMEOUT_SECONDS``.

The key travels in POST bodies only (never in a URL), and no exception message, log line or metric label
carries the key, the task's params (proxy credentials, cookies) or an answer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlencode

import aiohttp

from captcha_worker import methods, metrics
from captcha_worker.codes import Code

# the taxonomy lives in the codes table; the names stay importable from here (explicit re-exports)
from captcha_worker.codes import ErrorClass as ErrorClass  # noqa: PLC0414
from captcha_worker.codes import classify as classify  # noqa: PLC0414
from captcha_worker.codes import describe as describe  # noqa: PLC0414
from captcha_worker.config import Secret
from captcha_worker.guard import Backoff
from captcha_worker.methods import Answer as Answer  # noqa: PLC0414 - the API's answer, importable from here
from captcha_worker.polling import FallbackSchedule, LatencyModel, PollSchedule
from captcha_worker.protocols import v1_client
from captcha_worker.protocols.v1_client import Reply as Reply  # noqa: PLC0414 - a decoded reply, importable from here

if TYPE_CHECKING:
    from captcha_worker.pingback import Hub, Ticket

_FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}
#: outcomes that are no reply of the server's: the request may have had an effect
_NO_REPLY = frozenset({Code.HTTP_5XX, Code.HTTP_4XX, Code.NON_JSON})


class ApiError(Exception):
    """An API failure. ``str()`` is safe to log and to show users."""

    #: the request certainly had no effect at the server: it answered with an error of its own, or the connection
    #: was never opened. A paid submission that failed otherwise may have created (and charged) a task: MaybeCharged
    no_effect: bool = False

    def __init__(self, code: str, endpoint: str, detail: str = "") -> None:
        self.code = code
        self.endpoint = endpoint
        self.error_class = classify(code)
        super().__init__(f"{endpoint}: {code}" + (f" ({detail})" if detail else ""))


class FatalApiError(ApiError):
    pass


class CapacityError(ApiError):
    pass


class TransientError(ApiError):
    pass


class TaskFailed(ApiError):
    pass


class MaybeCharged(TransientError):
    """A paid submission (a provider's in.php or createTask) went out and its reply was lost or unreadable: the
    provider may have created, and charged, the task. Never retried by the client; overflow settles it spent."""


def no_effect(exc: ApiError) -> ApiError:
    """`exc`, marked as a request that certainly had no effect at the server."""
    exc.no_effect = True
    return exc


def maybe_charged(exc: ApiError, detail: str = "the reply was lost: the task may have been created") -> ApiError:
    """A paid submission's failure: MaybeCharged unless it is not transient or certainly had no effect."""
    if isinstance(exc, TransientError) and not exc.no_effect:
        return MaybeCharged(exc.code, exc.endpoint, detail)
    return exc


_BY_CLASS: dict[ErrorClass, type[ApiError]] = {
    ErrorClass.FATAL: FatalApiError, ErrorClass.CAPACITY: CapacityError,
    ErrorClass.TRANSIENT: TransientError, ErrorClass.TASK: TaskFailed,
}


def api_error(code: str, endpoint: str, detail: str = "") -> ApiError:
    return _BY_CLASS[classify(code)](code, endpoint, detail)


class SolveTimeout(Exception):
    """The overall solve time limit passed (or the task's deadline)."""


@dataclass(frozen=True)
class ThreadsInfo:
    threads: int
    working_threads: int


def parse_reply(status: int, body: bytes, endpoint: str) -> Reply:
    """Decode one HTTP reply (the body: ``protocols.v1_client.read_reply``) into a Reply, or raise the classified
    ApiError."""
    if status == 429:
        raise api_error(Code.HTTP_429, endpoint)
    if status >= 500:
        raise api_error(Code.HTTP_5XX, endpoint, f"HTTP {status}")
    if status != 200:
        raise api_error(Code.HTTP_4XX, endpoint, f"HTTP {status}")
    reply = v1_client.read_reply(body)
    if isinstance(reply, v1_client.Refusal):
        raise api_error(reply.code, endpoint, reply.detail)
    if reply.bare and endpoint != "res_getbalance":  # a bare number answers getbalance only: not an id, an answer
        raise api_error(Code.NON_JSON, endpoint, "unexpected body")
    return reply


@dataclass(frozen=True)
class Solution:
    answer: Answer
    api_calls: int
    polls: int
    started_at: float  # first in.php call (for a resumed solve: when this worker took it over)
    solved_at: float  # answer received
    captcha_id: str | None = None  # CaptchaAI's id of the solve that answered


@dataclass(frozen=True)
class Resume:
    """A solve an earlier owner left running at the API: poll `captcha_id` until `until` (time.time())."""

    captcha_id: str
    until: float


@dataclass
class SolveStats:
    """Counts kept while one task is being solved (readable even when it fails). ``captcha_id`` is the solve that
    may be running at the API now (None once its outcome is known), answerable until ``captcha_until``."""

    api_calls: int = 0
    polls: int = 0
    started_at: float | None = None
    captcha_id: str | None = None
    captcha_until: float = 0.0
    resumed: bool = False  # the answer came from a solve an earlier owner submitted

    def running_s(self, now: float) -> float:
        """How long the current solve may still run at the API (0: none is running)."""
        return max(0.0, self.captcha_until - now) if self.captcha_id is not None else 0.0


#: a CaptchaAI task id as the worker records it (the API answers digits; anything else is not resumed)
CAPTCHA_ID_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
OnSubmit = Callable[[str, float], None]  # (captcha id, seconds it can be answered), called when in.php answers
Hurry = Callable[[], bool]  # True while tasks wait for a plan thread: poll densely


@dataclass(frozen=True)
class RetryPolicy:
    transient_attempts: int = 6  # per request; for polls: failed polls in a row
    transient_initial_s: float = 0.25
    transient_max_s: float = 4.0
    capacity_initial_s: float = 2.0
    capacity_max_s: float = 30.0

    @classmethod
    def scaled(cls, scale: float) -> RetryPolicy:
        """The default delays divided by `scale` (API_TIME_SCALE, paired with the simulator's --speed)."""
        d = cls()
        return cls(transient_attempts=d.transient_attempts, transient_initial_s=d.transient_initial_s / scale,
                   transient_max_s=d.transient_max_s / scale, capacity_initial_s=d.capacity_initial_s / scale,
                   capacity_max_s=d.capacity_max_s / scale)


Sleep = Callable[[float], Any]


class HttpApi:
    """What a solver API's client holds, whatever its protocol (CaptchaAI's v1 here, the JSON API's
    ``createtask.JsonApi``): the key (rotated by `set_key`), base URL, retry policy and timeouts, one aiohttp
    session from ``async with`` to its end, and the learned solve-time model of each kind its polls follow."""

    HEADERS: Mapping[str, str] = {"User-Agent": "captcha-solver/1"}

    def __init__(self, key: Secret, base_url: str, *, http_timeout_s: float, poll_timeout_s: float,
                 retry: RetryPolicy | None, poll_scale: float, max_connections: int, provider: str) -> None:
        """`provider`: the `provider` label of this client's API metrics (an overflow provider's configured name;
        the plan's client keeps captchaai)."""
        self._key = key
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.poll_scale = poll_scale
        self._timeout = aiohttp.ClientTimeout(total=http_timeout_s)
        self._poll_timeout = aiohttp.ClientTimeout(total=min(poll_timeout_s, http_timeout_s))
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._latency: dict[str, LatencyModel] = {}

    def set_key(self, key: Secret) -> None:
        """Use `key` from the next request on (a rotated key file: keyfile.watch_key_file, overflow.key_watchers);
        requests in flight finish with the key they were sent with."""
        self._key = key

    def latency_model(self, kind: methods.Kind) -> LatencyModel:
        """The solve-time model the poll schedule of `kind` uses (learned from this client's solves)."""
        model = self._latency.get(kind.name)
        if model is None:
            model = self._latency[kind.name] = LatencyModel(kind.solve_mean_s / self.poll_scale,
                                                            kind.solve_stddev_s / self.poll_scale)
        return model

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, connector=aiohttp.TCPConnector(limit=self._max_connections),
            headers=dict(self.HEADERS))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class CaptchaAI(HttpApi):
    """One aiohttp session for every call of a process. Use as ``async with CaptchaAI(...) as api``."""

    def __init__(self, key: Secret, base_url: str = "https://ocr.captchaai.com", *,
                 http_timeout_s: float = 30.0, poll_timeout_s: float = 5.0, retry: RetryPolicy | None = None,
                 poll_scale: float = 1.0, max_connections: int = 100, pingback: Hub | None = None,
                 paid: bool = False, provider: str = metrics.PLAN_PROVIDER) -> None:
        super().__init__(key, base_url, http_timeout_s=http_timeout_s, poll_timeout_s=poll_timeout_s, retry=retry,
                         poll_scale=poll_scale, max_connections=max_connections, provider=provider)
        #: a per-solve provider's client (overflow): an in.php that may have created a task is never resent
        #: (MaybeCharged), only one that certainly had no effect
        self.paid = paid
        self.pingback = pingback  # pingback mode (PINGBACK_URL): callbacks answer, polls are the fallback
        #: told the outcome code of every request (OK, CAPCHA_NOT_READY, an error code): the worker's breaker
        self.observe: Callable[[str], None] | None = None

    # low level ----------------------------------------------------------------------------------------
    async def _post_once(self, path: str, endpoint: str, form: aiohttp.FormData | bytes) -> Reply:
        if self._session is None:
            raise RuntimeError("CaptchaAI client used outside 'async with'")
        started = time.monotonic()
        code: str = Code.OK
        timeout = self._poll_timeout if endpoint == "res_get" else self._timeout
        try:
            headers = _FORM_HEADERS if isinstance(form, bytes) else None
            async with self._session.post(f"{self.base_url}/{path}", data=form, headers=headers,
                                          timeout=timeout) as resp:
                body = await resp.read()
                reply = parse_reply(resp.status, body, endpoint)
                code = Code.CAPCHA_NOT_READY if reply.not_ready else Code.OK
                return reply
        except ApiError as exc:
            code = exc.code
            if code not in _NO_REPLY:  # the server's own error (or HTTP 429): refused, nothing done
                no_effect(exc)
            raise
        except TimeoutError:
            code = Code.TIMEOUT
            raise api_error(code, endpoint) from None
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            code = Code.CONNECTION_ERROR
            raise no_effect(api_error(code, endpoint, type(exc).__name__)) from None
        except (aiohttp.ClientError, OSError) as exc:
            # aiohttp errors can print the URL and request info: never chain them into our message
            code = Code.CONNECTION_ERROR
            raise api_error(code, endpoint, type(exc).__name__) from None
        finally:
            metrics.API_REQUESTS.labels(self.provider, endpoint, metrics.code_label(code)).inc()
            metrics.API_LATENCY.labels(self.provider, endpoint).observe(time.monotonic() - started)
            if self.observe is not None:
                self.observe(code)

    async def _call(self, path: str, endpoint: str, fields: Mapping[str, str], *,
                    file: tuple[str, bytes] | None = None, stats: SolveStats | None = None,
                    retry: bool = True) -> Reply:
        """One logical request: transient failures retried with exponential backoff + jitter, bounded
        (`retry=False`: one try, the caller decides).

        The first try goes out directly; the backoff (guard.Backoff: `transient_initial_s` doubling, stretched
        by 0-100 %, no pause longer than `transient_max_s`) is built only once a try has failed.
        """
        r = self.retry
        paid = self.paid and endpoint == "in"
        try:
            return await self._attempt(path, endpoint, fields, file, stats)
        except TransientError as exc:
            if paid and not exc.no_effect:
                raise maybe_charged(exc) from None
            if r.transient_attempts <= 1 or not retry:
                raise
        backoff = Backoff(r.transient_initial_s, r.transient_max_s, limit=r.transient_max_s)
        for attempt in range(2, r.transient_attempts + 1):
            metrics.RETRIES.labels("transient").inc()
            await backoff.sleep()
            try:
                return await self._attempt(path, endpoint, fields, file, stats)
            except TransientError as exc:
                if paid and not exc.no_effect:
                    raise maybe_charged(exc) from None
                if attempt == r.transient_attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, path: str, endpoint: str, fields: Mapping[str, str], file: tuple[str, bytes] | None,
                       stats: SolveStats | None) -> Reply:
        if stats is not None:
            stats.api_calls += 1
        return await self._post_once(path, endpoint, self._form(fields, file))

    def _form(self, fields: Mapping[str, str], file: tuple[str, bytes] | None) -> aiohttp.FormData | bytes:
        """The request body: urlencoded bytes (cheap), or multipart when an image file is uploaded."""
        if file is None:
            return urlencode({"key": self._key.value, "json": "1", **fields}).encode()
        form = aiohttp.FormData()
        form.add_field("key", self._key.value)
        form.add_field("json", "1")
        for name, value in fields.items():
            form.add_field(name, value)
        form.add_field("file", file[1], filename=file[0], content_type="application/octet-stream")
        return form

    # API ------------------------------------------------------------------------------------------------
    async def submit(self, method: str, params: Mapping[str, str], stats: SolveStats | None = None) -> str:
        """in.php: returns the CaptchaAI task id. Raises a classified ApiError."""
        fields = dict(params)
        fields["method"] = method
        file = None
        if method == "post":
            raw = fields.pop("file")
            file = ("captcha.png", _b64decode(raw))
        reply = await self._call("in.php", "in", fields, file=file, stats=stats)
        if self.paid and not CAPTCHA_ID_RE.fullmatch(reply.request):  # no id to poll, nor to count the charge by
            raise MaybeCharged(Code.NON_JSON, "in", "a success without a usable id: the task may have been created")
        return reply.request

    async def get(self, captcha_id: str, stats: SolveStats | None = None, *, retry: bool = True,
                  with_user_agent: bool = False) -> Answer | None:
        """res.php?action=get: the answer, or None while it is not ready (`with_user_agent`: the kind is answered
        with one, for a plain-text reply: ``protocols.v1_client.answer_of``)."""
        reply = await self._call("res.php", "res_get", {"action": "get", "id": captcha_id}, stats=stats,
                                 retry=retry)
        return v1_client.answer_of(reply, with_user_agent=with_user_agent)

    async def threadsinfo(self) -> ThreadsInfo:
        reply = await self._call("res.php", "res_threadsinfo", {"action": "threadsinfo"})
        counts = v1_client.threads_of(reply)
        if counts is None:
            raise api_error(Code.NON_JSON, "res_threadsinfo", "no threads field")
        return ThreadsInfo(*counts)

    async def getbalance(self) -> float:
        reply = await self._call("res.php", "res_getbalance", {"action": "getbalance"})
        balance = v1_client.balance_of(reply)
        if balance is None:
            raise api_error(Code.NON_JSON, "res_getbalance", "balance is not a number")
        return balance

    async def reportbad(self, captcha_id: str) -> None:
        await self._call("res.php", "res_reportbad", {"action": "reportbad", "id": captcha_id})

    async def reportgood(self, captcha_id: str) -> None:
        await self._call("res.php", "res_reportgood", {"action": "reportgood", "id": captcha_id})

    async def report(self, captcha_id: str, *, good: bool) -> None:
        """reportgood or reportbad: tell CaptchaAI whether an answer worked (a bad one is refunded)."""
        await (self.reportgood(captcha_id) if good else self.reportbad(captcha_id))

    def solve_window(self, kind: methods.Kind) -> float:
        """How long a solve of `kind` can be answered after its submission (methods.py, scaled)."""
        return kind.solve_timeout_s / self.poll_scale

    # the whole protocol for one task ----------------------------------------------------------------------
    async def solve(self, kind: methods.Kind, method: str, params: Mapping[str, str], *, deadline: float,
                    unsolvable_retries: int = 1, stats: SolveStats | None = None, sleep: Sleep = asyncio.sleep,
                    resume: Resume | None = None, on_submit: OnSubmit | None = None,
                    hurry: Hurry | None = None) -> Solution:
        """Submit and poll until answered. `deadline` is a time.time() value.

        `resume`: first poll the solve an earlier owner left running, while its id can still be answered; submit
        only when it cannot (its window passed, CaptchaAI forgot it, or it was unsolvable). `on_submit` is told
        each new CaptchaAI id as soon as in.php answers. Capacity errors are retried (same task) until the
        deadline; UNSOLVABLE is resubmitted up to `unsolvable_retries` times. Raises FatalApiError, TaskFailed,
        TransientError (bounded retries exhausted) or SolveTimeout.
        """
        stats = stats if stats is not None else SolveStats()
        p = _Solve(kind, deadline, stats, sleep, hurry)
        rounds = unsolvable_retries + 1
        if resume is not None and time.time() < resume.until:
            answer = await self._resume(p, resume)
            if answer is not None:
                return self._solution(answer, stats)
            if stats.resumed:  # the resumed solve was unsolvable: that was a round
                rounds -= 1
        for round_ in range(max(rounds, 1)):
            ticket = await self.pingback.open(self.solve_window(kind)) if self.pingback is not None else None
            try:
                answer = await self._submit_and_poll(p, method, params, ticket, on_submit)
            except TaskFailed as exc:
                stats.captcha_id = None
                if exc.code == Code.ERROR_CAPTCHA_UNSOLVABLE and round_ < rounds - 1:
                    metrics.RETRIES.labels("unsolvable").inc()
                    continue
                raise
            finally:
                if ticket is not None and self.pingback is not None:
                    await self.pingback.take(ticket)  # idempotent: no answer stays in Redis past the solve
            return self._solution(answer, stats)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _submit_and_poll(self, p: _Solve, method: str, params: Mapping[str, str], ticket: Ticket | None,
                               on_submit: OnSubmit | None) -> Answer:
        """One round: in.php (with the ticket's pingback URL), then the answer (callback or polls)."""
        stats, window = p.stats, self.solve_window(p.kind)
        fields = {**params, "pingback": ticket.url} if ticket is not None else params
        captcha_id = await self._submit_with_capacity_backoff(method, fields, p.deadline, stats, p.sleep)
        stats.captcha_id, stats.captcha_until = captcha_id, time.time() + window
        if on_submit is not None and CAPTCHA_ID_RE.fullmatch(captcha_id):
            on_submit(captcha_id, window)
        if ticket is not None and self.pingback is not None and CAPTCHA_ID_RE.fullmatch(captcha_id):
            early = await self.pingback.bind(ticket, captcha_id, window)
            if early is not None and not _is_api_error(early):
                metrics.PINGBACK_SOLVES.labels("pingback").inc()
                return early
        return await self._poll(captcha_id, p, ticket=ticket)

    async def _resume(self, p: _Solve, resume: Resume) -> Answer | None:
        """Poll a solve an earlier owner submitted. None: submit again (`stats.resumed` is set when it was
        unsolvable, which spends a round)."""
        stats = p.stats
        stats.captcha_id, stats.captcha_until = resume.captcha_id, resume.until
        if stats.started_at is None:
            stats.started_at = time.time()
        elapsed = max(0.0, self.solve_window(p.kind) - (resume.until - time.time()))
        try:
            answer = await self._poll(resume.captcha_id, p, elapsed=elapsed, learn=False)
        except SolveTimeout:
            if time.time() >= p.deadline:
                raise
            metrics.RESUMES.labels("window_passed").inc()
            stats.captcha_id = None
            return None
        except TaskFailed as exc:
            stats.captcha_id = None
            if exc.code == Code.ERROR_CAPTCHA_UNSOLVABLE:
                metrics.RESUMES.labels("unsolvable").inc()
                stats.resumed = True
                return None
            if exc.code in (Code.ERROR_WRONG_CAPTCHA_ID, Code.ERROR_WRONG_ID_FORMAT):
                metrics.RESUMES.labels("unknown_id").inc()
                return None
            raise
        metrics.RESUMES.labels("answered").inc()
        stats.resumed = True
        return answer

    def _solution(self, answer: Answer, stats: SolveStats) -> Solution:
        captcha_id, stats.captcha_id = stats.captcha_id, None
        assert stats.started_at is not None
        return Solution(answer, stats.api_calls, stats.polls, stats.started_at, time.time(), captcha_id)

    async def _submit_with_capacity_backoff(self, method: str, params: Mapping[str, str], deadline: float,
                                            stats: SolveStats, sleep: Sleep) -> str:
        backoff = Backoff(self.retry.capacity_initial_s, self.retry.capacity_max_s, spread=(0.5, 1.0))
        while True:
            if stats.started_at is None:
                stats.started_at = time.time()
            try:
                return await self.submit(method, params, stats)
            except CapacityError:
                metrics.RETRIES.labels("capacity").inc()
                wait = backoff.delay()
                if time.time() + wait >= deadline:
                    raise SolveTimeout("no free thread before the deadline") from None
                await sleep(wait)

    def _schedules(self, kind: methods.Kind) -> tuple[LatencyModel, PollSchedule, PollSchedule]:
        model = self.latency_model(kind)
        return (model, PollSchedule(model.mean, model.stddev, self.poll_scale),
                PollSchedule(model.mean, model.stddev, self.poll_scale, dense=True))

    async def _poll(self, captcha_id: str, p: _Solve, *, elapsed: float = 0.0, learn: bool = True,
                    ticket: Ticket | None = None) -> Answer:
        """Poll until answered, the deadline, or the id's window (`elapsed`: seconds since its submission).
        With a pingback `ticket`, the callback answers and polls follow the FallbackSchedule."""
        model, normal, dense = self._schedules(p.kind)
        if ticket is not None:
            normal = dense = FallbackSchedule(model.mean, model.stddev, self.poll_scale)
        deadline = min(p.deadline, p.stats.captcha_until) if p.stats.captcha_until else p.deadline
        submitted = time.monotonic() - elapsed
        previous: float | None = None  # when the last unanswered poll was made, after the submission
        n = failed = 0
        blurred = not learn  # a failed poll since the last "not ready": when the answer became ready is unknown
        while True:
            schedule = dense if p.hurry is not None and p.hurry() else normal
            wait = schedule.delay(n, time.monotonic() - submitted)
            if failed:  # the answer may be ready: look again soon rather than at the next scheduled poll
                wait = min(wait, self.retry.transient_initial_s * (1 + random.random()))
            if ticket is not None:
                called = await self._wait_for_pingback(ticket, wait, deadline)
                if called is not None:
                    if learn:
                        model.observe(time.monotonic() - submitted)
                    metrics.PINGBACK_SOLVES.labels("pingback").inc()
                    return called
            else:
                await self._wait_for_poll(wait, deadline, p.sleep)
            p.stats.polls += 1
            try:
                answer = await self.get(captcha_id, p.stats, retry=False, with_user_agent=p.with_user_agent)
            except TransientError:
                failed += 1
                blurred = True
                if failed >= self.retry.transient_attempts:
                    raise
                metrics.RETRIES.labels("transient").inc()
                continue
            failed = 0
            since = time.monotonic() - submitted
            if answer is not None:
                if not blurred:  # a failed (maybe slow) poll in the gap would teach a solve time it never took
                    model.observe_found(since, previous)
                if ticket is not None:
                    metrics.PINGBACK_SOLVES.labels("poll").inc()
                return answer
            blurred = not learn
            if time.time() >= deadline:
                raise SolveTimeout("solve time limit reached")
            previous = since
            n += 1

    async def _wait_for_pingback(self, ticket: Ticket, wait: float, deadline: float) -> Answer | None:
        """Wait for the ticket's callback until the next fallback poll is due: its answer, or None (poll now). A
        callback whose code is an API error only cuts the wait short (the poll gives the API's verdict)."""
        assert self.pingback is not None
        remaining = deadline - time.time()
        if remaining <= 0:
            raise SolveTimeout("solve time limit reached")
        if await self.pingback.wait(ticket, min(wait, remaining)):
            answer = await self.pingback.take(ticket)
            if answer is not None and not _is_api_error(answer):
                return answer
        return None

    @staticmethod
    async def _wait_for_poll(wait: float, deadline: float, sleep: Sleep) -> None:
        if time.time() + wait >= deadline:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise SolveTimeout("solve time limit reached")
            wait = remaining  # one last look at the deadline
        await sleep(wait)


@dataclass(frozen=True)
class _Solve:
    """What the poll loop of one solve needs."""

    kind: methods.Kind
    deadline: float
    stats: SolveStats
    sleep: Sleep
    hurry: Hurry | None

    @property
    def with_user_agent(self) -> bool:
        return self.kind.shape is methods.AnswerShape.TOKEN_WITH_UA


def _is_api_error(answer: Answer) -> bool:
    """A callback's code that is an API error (ERROR_CAPTCHA_UNSOLVABLE), not an answer."""
    return answer.request.startswith("ERROR_")


def _b64decode(value: str) -> bytes:
    if value.startswith("data:") and "," in value:
        value = value.split(",", 1)[1]
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise api_error(Code.ERROR_UPLOAD, "in", "file is not base64") from None
