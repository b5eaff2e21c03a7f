"""Async client of the JSON API (``createTask`` / ``getTaskResult`` / ``getBalance``: Anti-Captcha, CapSolver,
CapMonster Cloud, 2captcha v2) for a per-solve provider of ``PROVIDERS`` whose ``protocol`` is ``createTask``
(issue 27). It has the interface :class:`captcha_worker.overflow.Overflow` solves with (``solve``,
``solve_window``, ``getbalance``, ``set_key``) and raises the error taxonomy of :mod:`captcha_worker.captchaai`
(``FatalApiError``, ``CapacityError``, ``TransientError``, ``TaskFailed``, ``SolveTimeout``), so a paid solve is
reserved, routed and settled the same way whatever the provider's protocol.

The task goes out as the JSON-API type of its kind (``protocols.jsonapi_tasks.to_task``); the solution comes back
as the answer res.php would give (``answer_of``); a provider's ``errorCode`` (or, without one, its numbered
``errorId``) becomes this package's code (``protocols.jsonapi_errors.to_v1``) and with it its class:

=====================================================  ===============================================================
reply                                                  raised
=====================================================  ===============================================================
ERROR_KEY_DOES_NOT_EXIST, ERROR_IP_NOT_ALLOWED, ...    FatalApiError (the provider's: the job gives the task back)
ERROR_NO_SLOT_AVAILABLE, ERROR_ZERO_BALANCE, HTTP 429  CapacityError on getTaskResult; createTask backs off (same
                                                       task) until the deadline, then SolveTimeout
ERROR_CAPTCHA_UNSOLVABLE, bad parameters, ...          TaskFailed with the code
HTTP 5xx, a body that is not a JSON object, no         TransientError (``NON_JSON``, ``HTTP_5XX``, ``TIMEOUT``,
``errorId``, an ``errorId`` without a code this        ``CONNECTION_ERROR``): getTaskResult and getBalance are
package can tell, a ready task without a solution,     retried (bounded, as res.php polls); createTask is not, see
timeouts, connection errors                            below
=====================================================  ===============================================================

**Maybe sent.** createTask creates a paid solve and is not idempotent: when its request went out and no reply could
be read (a timeout, the connection dropped after the request was written, an HTTP 4xx/5xx or a body without the
protocol's error object, a success without a usable ``taskId``), the provider may have created the task and
charged it. That is
:class:`MaybeCharged` (a TransientError), raised at once and never retried here: ``Overflow`` settles its
reservation at the price (spent, not refunded), and the task is retried under a new reservation. Only a request
that certainly never reached the provider (the connection could not be opened) or that the provider refused with an
error reply is retried or settled at 0.

Polls keep CapMonster Cloud's and CapSolver's limits: at least 2 s apart (``MIN_POLL_S``, divided by the
``poll_scale``), at most 120 per task (``MAX_POLLS``). The key travels in the JSON body only (``clientKey``), and
no exception message, log line or metric label carries the key, the task's fields or an answer; the provider's
``errorDescription`` is never quoted (it is the provider's text, of unknown content).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from captcha_worker import methods, metrics
from captcha_worker.captchaai import (
    CAPTCHA_ID_RE,
    ApiError,
    CapacityError,
    HttpApi,
    MaybeCharged,
    OnSubmit,
    RetryPolicy,
    Sleep,
    Solution,
    SolveStats,
    SolveTimeout,
    TaskFailed,
    TransientError,
    api_error,
    maybe_charged,
    no_effect,
)
from captcha_worker.codes import Code
from captcha_worker.config import Secret
from captcha_worker.guard import Backoff
from captcha_worker.methods import Answer
from captcha_worker.polling import LatencyModel, PollSchedule
from captcha_worker.protocols.jsonapi_errors import to_v1
from captcha_worker.protocols.jsonapi_tasks import answer_of, to_task

#: polls of one task at least this far apart (CapMonster Cloud: >= 2 s), before poll_scale
MIN_POLL_S: Final = 2.0
#: polls of one task at most (CapMonster Cloud, CapSolver: 120; more may lock the account)
MAX_POLLS: Final = 120
#: the api_endpoint label of each method (docs/metrics.md; the gateway's JSON API uses the same names)
ENDPOINTS: Final[Mapping[str, str]] = {"createTask": "create_task", "getTaskResult": "get_task_result",
                                       "getBalance": "get_balance"}
_NOT_READY: Final = frozenset({"CAPTCHA_NOT_READY", "ERROR_CAPTCHA_NOT_READY"})  # CapMonster Cloud's spelling
_HEADERS: Final = {"Content-Type": "application/json", "User-Agent": "captcha-solver/1"}


class JsonApi(HttpApi):
    """One provider's JSON API, one aiohttp session. Use as ``async with JsonApi(...) as api``."""

    HEADERS = _HEADERS

    def __init__(self, key: Secret, base_url: str, *, http_timeout_s: float = 30.0, poll_timeout_s: float = 5.0,
                 retry: RetryPolicy | None = None, poll_scale: float = 1.0, max_connections: int = 100,
                 dialect: str = "standard", provider: str) -> None:
        """`dialect`: the provider's spelling of the task types (``jsonapi_tasks.DIALECTS``); `provider`: its
        configured name, the `provider` label of its API metrics."""
        super().__init__(key, base_url, http_timeout_s=http_timeout_s, poll_timeout_s=poll_timeout_s, retry=retry,
                         poll_scale=poll_scale, max_connections=max_connections, provider=provider)
        self.dialect = dialect

    def solve_window(self, kind: methods.Kind) -> float:
        """How long a solve of `kind` may take at the provider (the methods table's, scaled)."""
        return kind.solve_timeout_s / self.poll_scale

    # -- one request ---------------------------------------------------------------------------------------------
    async def _post(self, method: str, fields: Mapping[str, object]) -> dict[str, Any]:
        """POST /<method> once: the reply's object when ``errorId`` is 0, else the classified ApiError. A
        createTask whose request may have reached the provider without a readable reply is MaybeCharged."""
        if self._session is None:
            raise RuntimeError("JsonApi client used outside 'async with'")
        endpoint, started, code = ENDPOINTS[method], time.monotonic(), Code.OK.value
        body = json.dumps({"clientKey": self._key.value, **fields}, separators=(",", ":"))
        try:
            async with self._session.post(f"{self.base_url}/{method}", data=body,
                                          timeout=self._poll_timeout if method == "getTaskResult" else self._timeout
                                          ) as resp:
                raw = await resp.read()
            data = parse_json_reply(resp.status, raw, endpoint)
            if data.get("status") == "processing":
                code = Code.CAPCHA_NOT_READY.value
            return data
        except ApiError as exc:
            code = exc.code
            raise self._maybe(method, exc) from None
        except TimeoutError:
            code = Code.TIMEOUT.value
            raise self._maybe(method, api_error(code, endpoint)) from None
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            code = Code.CONNECTION_ERROR.value
            raise no_effect(api_error(code, endpoint, type(exc).__name__)) from None
        except (aiohttp.ClientError, OSError) as exc:  # aiohttp's messages may print the URL: never chained
            code = Code.CONNECTION_ERROR.value
            raise self._maybe(method, api_error(code, endpoint, type(exc).__name__)) from None
        finally:
            metrics.API_REQUESTS.labels(self.provider, endpoint, metrics.code_label(code)).inc()
            metrics.API_LATENCY.labels(self.provider, endpoint).observe(time.monotonic() - started)

    @staticmethod
    def _maybe(method: str, exc: ApiError) -> ApiError:
        """A createTask failure that may have had an effect (a transient one: the request went out and the reply
        was lost or unreadable) as MaybeCharged; anything else as it is."""
        return maybe_charged(exc) if method == "createTask" else exc

    async def _call(self, method: str, fields: Mapping[str, object]) -> dict[str, Any]:
        """getBalance: transient failures retried with backoff, bounded (it changes nothing at the provider)."""
        r = self.retry
        backoff = Backoff(r.transient_initial_s, r.transient_max_s, limit=r.transient_max_s)
        for attempt in range(1, r.transient_attempts + 1):
            try:
                return await self._post(method, fields)
            except TransientError:
                if attempt == r.transient_attempts:
                    raise
                metrics.RETRIES.labels("transient").inc()
                await backoff.sleep()
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the API -------------------------------------------------------------------------------------------------
    async def getbalance(self) -> float:
        data = await self._call("getBalance", {})
        value = data.get("balance")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise api_error(Code.NON_JSON, "get_balance", "no balance field")
        try:
            return float(value)
        except ValueError:
            raise api_error(Code.NON_JSON, "get_balance", "balance is not a number") from None

    async def create(self, task: Mapping[str, object], stats: SolveStats | None = None
                     ) -> tuple[int | str, dict[str, Any]]:
        """createTask: the provider's task id (as it sent it: an integer, or CapSolver's UUID) and the reply (a
        synchronous solve's holds its ``solution``). A refusal that is transient (the provider said so) is retried;
        a maybe-sent one raises MaybeCharged."""
        r = self.retry
        backoff = Backoff(r.transient_initial_s, r.transient_max_s, limit=r.transient_max_s)
        for attempt in range(1, r.transient_attempts + 1):
            if stats is not None:
                stats.api_calls += 1
            try:
                data = await self._post("createTask", {"task": task})
            except MaybeCharged:
                raise
            except TransientError:
                if attempt == r.transient_attempts:
                    raise
                metrics.RETRIES.labels("transient").inc()
                await backoff.sleep()
                continue
            task_id = data.get("taskId")
            if not _is_task_id(task_id):
                raise MaybeCharged(Code.NON_JSON, "create_task", "a success without a usable taskId")
            assert isinstance(task_id, int | str)
            return task_id, data
        raise AssertionError("unreachable")  # pragma: no cover

    async def result(self, task_id: int | str, kind: methods.Kind, stats: SolveStats | None = None
                     ) -> Answer | None:
        """getTaskResult once: the answer, or None while the provider is still solving."""
        if stats is not None:
            stats.api_calls += 1
        data = await self._post("getTaskResult", {"taskId": task_id})
        return _answer(data, kind)

    async def solve(self, kind: methods.Kind, method: str, params: Mapping[str, str], *, deadline: float,
                    unsolvable_retries: int = 0, stats: SolveStats | None = None, sleep: Sleep = asyncio.sleep,
                    on_submit: OnSubmit | None = None) -> Solution:
        """createTask, then getTaskResult until answered (`deadline`: a time.time() value). `on_submit` is told the
        provider's task id as soon as createTask answers. UNSOLVABLE is resubmitted `unsolvable_retries` times.
        Raises TaskFailed, FatalApiError, TransientError (MaybeCharged for a lost createTask reply), SolveTimeout."""
        stats = stats if stats is not None else SolveStats()
        task = to_task(method, params, self.dialect)
        if task is None:
            raise TaskFailed(Code.ERROR_BAD_PARAMETERS, "create_task",
                             f"no JSON-API task type for {kind.name} ({self.dialect} names)")
        for round_ in range(unsolvable_retries + 1):
            try:
                answer = await self._round(kind, task, deadline, stats, sleep=sleep, on_submit=on_submit)
            except TaskFailed as exc:
                stats.captcha_id = None
                if exc.code == Code.ERROR_CAPTCHA_UNSOLVABLE and round_ < unsolvable_retries:
                    metrics.RETRIES.labels("unsolvable").inc()
                    continue
                raise
            captcha_id, stats.captcha_id = stats.captcha_id, None
            assert stats.started_at is not None
            return Solution(answer, stats.api_calls, stats.polls, stats.started_at, time.time(), captcha_id)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _round(self, kind: methods.Kind, task: Mapping[str, object], deadline: float, stats: SolveStats, *,
                     sleep: Sleep, on_submit: OnSubmit | None) -> Answer:
        window = self.solve_window(kind)
        task_id, reply = await self._create_with_capacity_backoff(task, deadline, stats, sleep)
        stats.captcha_id, stats.captcha_until = str(task_id), time.time() + window
        if on_submit is not None and CAPTCHA_ID_RE.fullmatch(str(task_id)):
            on_submit(str(task_id), window)
        early = _answer(reply, kind) if reply.get("status") == "ready" else None  # CapSolver's synchronous tasks
        return early if early is not None else await self._poll(kind, task_id, min(deadline, stats.captcha_until),
                                                                stats, sleep)

    async def _create_with_capacity_backoff(self, task: Mapping[str, object], deadline: float, stats: SolveStats,
                                            sleep: Sleep) -> tuple[int | str, dict[str, Any]]:
        backoff = Backoff(self.retry.capacity_initial_s, self.retry.capacity_max_s, spread=(0.5, 1.0))
        while True:
            if stats.started_at is None:
                stats.started_at = time.time()
            try:
                return await self.create(task, stats)
            except CapacityError:
                metrics.RETRIES.labels("capacity").inc()
                wait = backoff.delay()
                if time.time() + wait >= deadline:
                    raise SolveTimeout("the provider had no capacity before the deadline") from None
                await sleep(wait)

    def _schedule(self, kind: methods.Kind) -> tuple[LatencyModel, PollSchedule]:
        model = self.latency_model(kind)
        return model, PollSchedule(model.mean, model.stddev, self.poll_scale)

    async def _poll(self, kind: methods.Kind, task_id: int | str, deadline: float, stats: SolveStats,
                    sleep: Sleep) -> Answer:
        """getTaskResult by the kind's poll schedule (never closer than MIN_POLL_S, at most MAX_POLLS) until the
        answer, the deadline, or `transient_attempts` failed polls in a row."""
        model, schedule = self._schedule(kind)
        floor = MIN_POLL_S / self.poll_scale
        submitted, previous, failed = time.monotonic(), None, 0
        for n in range(MAX_POLLS):
            wait = max(schedule.delay(n, time.monotonic() - submitted), floor)
            remaining = deadline - time.time()
            if remaining <= 0:
                raise SolveTimeout("solve time limit reached")
            await sleep(min(wait, remaining))
            stats.polls += 1
            try:
                answer = await self.result(task_id, kind, stats)
            except CapacityError:  # a poll rate limit: the next poll is the next one due
                continue
            except TransientError:
                failed += 1
                if failed >= self.retry.transient_attempts:
                    raise
                metrics.RETRIES.labels("transient").inc()
                continue
            failed, since = 0, time.monotonic() - submitted
            if answer is not None:
                model.observe_found(since, previous)
                return answer
            previous = since
        raise SolveTimeout(f"no answer after {MAX_POLLS} polls")


def parse_json_reply(status: int, body: bytes, endpoint: str) -> dict[str, Any]:
    """One reply as its JSON object when ``errorId`` is 0 (a processing getTaskResult included), else the
    classified ApiError (``.no_effect``: the provider answered with an error of its own, nothing was created)."""
    data = _object(body)
    if data is not None and data.get("errorCode") in _NOT_READY:  # CapMonster Cloud's "still solving"
        return {"errorId": 0, "status": "processing"}
    if data is not None and "errorId" in data and data.get("errorId") not in (0, "0"):
        raise _refusal(data, endpoint, status)
    if status == 429:
        raise no_effect(api_error(Code.HTTP_429, endpoint))
    if status >= 500:
        raise api_error(Code.HTTP_5XX, endpoint, f"HTTP {status}")
    if status in (401, 403):  # CapSolver: 401 for a bad key
        raise no_effect(api_error(Code.ERROR_KEY_DOES_NOT_EXIST, endpoint, f"HTTP {status}"))
    if status != 200:
        raise api_error(Code.HTTP_4XX, endpoint, f"HTTP {status}")
    if data is None:
        raise api_error(Code.NON_JSON, endpoint, "not a JSON object")
    if "errorId" not in data:
        raise api_error(Code.NON_JSON, endpoint, "no errorId")
    return data


def _object(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _refusal(data: Mapping[str, Any], endpoint: str, status: int) -> ApiError:
    """The error of a reply with a non-zero errorId; one naming no error this package can tell is NON_JSON."""
    code = to_v1(data.get("errorCode"), data.get("errorId"))
    if code is None:
        return no_effect(api_error(Code.NON_JSON, endpoint, f"HTTP {status}, an errorId without a known errorCode"))
    return no_effect(api_error(code, endpoint))


def _answer(data: Mapping[str, Any], kind: methods.Kind) -> Answer | None:
    """getTaskResult's (or a synchronous createTask's) answer; None while processing."""
    status = data.get("status")
    if status == "ready":
        answer = answer_of(kind, data.get("solution"))
        if answer is None:
            raise api_error(Code.NON_JSON, "get_task_result", f"a ready task without a {kind.name} solution")
        return answer
    if status in ("processing", "idle", None):
        return None
    raise api_error(Code.NON_JSON, "get_task_result", "an unknown status")


def _is_task_id(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 < value < 2**63
    return isinstance(value, str) and bool(CAPTCHA_ID_RE.fullmatch(value))
