"""The gateway's HTTP handlers: ``/in.php``, ``/res.php`` and ``/solve.php`` of CaptchaAI's v1 protocol, answered
from the queue.

Every request: the body is read by the protocol module (GET, form, multipart, JSON) within the body cap
(``GATEWAY_MAX_BODY_BYTES``: larger bodies get HTTP 413), the key is identified (``tenants``), the tenant's rate
limit is applied, then the endpoint runs. Over the rate limit, ``in.php`` answers ``ERROR_NO_SLOT_AVAILABLE`` (HTTP
200: CaptchaAI's "no free thread, retry" code, which client libraries retry) and ``res.php`` HTTP 429 with
``Retry-After`` and ``ERROR_TOO_MUCH_REQUESTS``. While Redis cannot serve, requests are answered
``ERROR_SERVER_ERROR`` (retry later) and readiness is false.

``in.php``: the kind (``protocol.submission``), the same validation the workers run (``task.make_task``, whose
missing-parameter codes are CaptchaAI's), the pingback URL against the tenant's policy, then a push of the task
tagged with its tenant (``ids``: ``gw:<tenant>:<number>``). ``res.php``: ``get`` from the result store;
``threadsinfo`` the tenant's share and its tasks in flight; ``getbalance`` the tenant's configured ``balance``
(the plan's balance only with ``GATEWAY_UPSTREAM_BALANCE``); ``reportbad`` / ``reportgood`` forwarded to
CaptchaAI with the id the worker recorded. ``solve.php`` (image tasks in one request) submits as ``in.php`` and
answers when the task is solved. docs/gateway.md is the reference.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from typing import Any, TypeVar

from aiohttp import web

from captcha_worker import codes, log
from captcha_worker.captchaai import ApiError, CaptchaAI
from captcha_worker.client import CaptchaQueue, Expired, Failed, Outcome, Solved
from captcha_worker.codes import Code, ErrorClass
from captcha_worker.connection import refusal
from captcha_worker.gateway import callbacks, ids
from captcha_worker.gateway import metrics as gm
from captcha_worker.gateway.callbacks import check_url
from captcha_worker.gateway.config import GatewayConfig, Tenant
from captcha_worker.gateway.tenants import Tenants
from captcha_worker.guard import RedisGuard
from captcha_worker.methods import Answer, AnswerShape, Kind
from captcha_worker.metrics import code_label
from captcha_worker.protocols import v1 as protocol
from captcha_worker.protocols.v1 import Action, ApiRequest
from captcha_worker.queue import Lookup, RedisQueue
from captcha_worker.task import RESERVED_PARAMS, Invalid, Task, make_task

_log = logging.getLogger("captcha_worker.gateway")
#: the gateway replicas' shared producer id: results come back on {q}:reply:gateway
REPLY_TO = "gateway"
_PUSH_TRIES = 5  # fresh numbers drawn when one hits a known id
Reply = tuple[str, web.Response]  # the code answered (for the metrics) and the response
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Throttled:
    wait_s: float  # until the tenant's next token


@dataclasses.dataclass(frozen=True)
class Submitted:
    number: int  # what the client is told
    kind: Kind


class Gateway:
    """One gateway process's state: its tenants, the queue, the reader of results, the upstream client."""

    def __init__(self, cfg: GatewayConfig, producer: CaptchaQueue, tenants: Tenants, *,
                 upstream: CaptchaAI | None = None) -> None:
        self.cfg = cfg
        self.producer = producer
        self.queue: RedisQueue = producer.queue
        self.tenants = tenants
        self.upstream = upstream
        # Redis as the gateway sees it: readiness false while the last operations failed with an outage
        self.health = RedisGuard(_log, gm.REDIS_ERRORS, on_change=self._set_ready)
        self.in_flight: dict[str, int] = {}  # tenant -> claimed tasks, refreshed by the server's scan loop
        self.waiters: dict[str, asyncio.Event] = {}  # solve.php requests waiting, by task id (set by the reader)

    def _set_ready(self) -> None:
        gm.READY.set(1 if self.health.down is None else 0)

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.cfg.max_body_bytes)
        for path, handler in (("/in.php", self._in), ("/res.php", self._res), ("/solve.php", self._solve)):
            route = self._route(handler)
            app.router.add_get(path, route, allow_head=False)
            app.router.add_post(path, route)
        return app

    # -- every request ---------------------------------------------------------------------------------------
    def _route(self, handler: Callable[[ApiRequest, Tenant], Awaitable[Reply]]
               ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def route(request: web.Request) -> web.Response:
            started = time.monotonic()
            endpoint = {"/in.php": "in", "/solve.php": "solve"}.get(request.path, "res_other")
            try:
                req = await protocol.read_request(request)
            except web.HTTPRequestEntityTooLarge:
                gm.REQUESTS.labels(gm.V1, endpoint, "HTTP_4XX").inc()
                raise
            if endpoint == "res_other":
                endpoint = _res_endpoint(Action.parse(req.action))
            code, response = await self._serve(req, endpoint, handler)
            gm.REQUESTS.labels(gm.V1, endpoint, code_label(code)).inc()
            gm.REQUEST_DURATION.labels(gm.V1, endpoint).observe(time.monotonic() - started)
            return response

        return route

    async def _serve(self, req: ApiRequest, endpoint: str,
                     handler: Callable[[ApiRequest, Tenant], Awaitable[Reply]]) -> Reply:
        tenant = self.admit(req.key)
        if isinstance(tenant, Code):
            return _error(req, tenant)
        if isinstance(tenant, Throttled):
            return _throttled(req, endpoint, tenant.wait_s)
        reply = await self.guarded(handler(req, tenant), endpoint)
        return reply if reply is not None else _error(req, Code.ERROR_SERVER_ERROR)

    def admit(self, key: str) -> Tenant | Code | Throttled:
        """The tenant a key is (``tenants``), within its rate limit; else the refusal, counted. Both protocols'
        requests pass here first."""
        tenant = self.tenants.identify(key)
        if isinstance(tenant, Code):
            gm.REJECTED.labels(gm.UNAUTHENTICATED, "bad_key").inc()
            return tenant
        wait = self.tenants.admit(tenant)
        if wait is not None:
            gm.REJECTED.labels(tenant.name, "rate_limited").inc()
            return Throttled(wait)
        return tenant

    async def guarded(self, work: Awaitable[T], endpoint: str) -> T | None:
        """`work`'s value; None when it raised (a Redis outage marks the gateway unready, anything else is logged
        by its type only): the caller answers its protocol's "retry later" error, never a traceback."""
        try:
            value = await work
        except Exception as exc:
            why = refusal(exc)
            if why is None:
                log.event(_log, "request_failed", logging.ERROR, endpoint=endpoint, error=type(exc).__name__)
            else:
                self.health.failed(why, endpoint)
            return None
        self.health.ok(endpoint)
        return value

    # -- in.php and solve.php --------------------------------------------------------------------------------
    async def _in(self, req: ApiRequest, tenant: Tenant) -> Reply:
        submitted = await self.submit(req, tenant, self.cfg.task_deadline_seconds, req.text("pingback").strip())
        if not isinstance(submitted, Submitted):
            return _error(req, submitted)
        gm.SUBMITTED.labels(gm.V1, tenant.name).inc()
        number = submitted.number
        return "OK", protocol.ok(req, number if submitted.kind.method == "userrecaptcha" else str(number))

    async def _solve(self, req: ApiRequest, tenant: Tenant) -> Reply:
        """One-request image solving: submitted as by in.php, answered when solved (at most
        GATEWAY_SOLVE_TIMEOUT_SECONDS later: then ERROR_CAPTCHA_UNSOLVABLE, and the task's deadline stops it)."""
        kind, _ = protocol.submission(req)
        if kind is None or kind.shape is not AnswerShape.TEXT:
            return _error(req, Code.ERROR_BAD_PARAMETERS)
        timeout = self.cfg.solve_timeout_seconds
        submitted = await self.submit(req, tenant, timeout, req.text("pingback").strip())
        if not isinstance(submitted, Submitted):
            return _error(req, submitted)
        gm.SUBMITTED.labels(gm.V1, tenant.name).inc()
        outcome = await self._wait(ids.task_id(tenant.name, submitted.number), timeout)
        if isinstance(outcome, Solved):
            return "OK", protocol.answer(req, Answer(outcome.solution, outcome.user_agent))
        return _error(req, codes.wire_code(outcome.code) if isinstance(outcome, Failed | Expired)
                      else Code.ERROR_CAPTCHA_UNSOLVABLE)

    async def _wait(self, task_id: str, timeout: float) -> Outcome | None:
        """The task's outcome once it has one (None after `timeout`): woken by the result reader when this replica
        receives the result, else found by a lookup every half second."""
        give_up = time.monotonic() + timeout
        event = self.waiters.setdefault(task_id, asyncio.Event())
        try:
            while (outcome := await self.producer.peek(task_id)) is None:
                left = give_up - time.monotonic()
                if left <= 0:
                    return None
                with suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(0.5, left))
            return outcome
        finally:
            self.waiters.pop(task_id, None)

    async def submit(self, req: ApiRequest, tenant: Tenant, deadline_s: float, pingback: str, *,
                     callback_protocol: str = callbacks.V1) -> Submitted | str:
        """Validate and queue one submission (in v1 fields: the JSON API's ``jsonapi_tasks`` maps a task to
        them): its number and kind, or the CaptchaAI code refusing it. `pingback` is called when it ends, in
        `callback_protocol`'s form."""
        kind, req = protocol.submission(req)
        if kind is None:
            return Code.ERROR_BAD_PARAMETERS
        if pingback and check_url(tenant.pingback, pingback) is not None:
            return Code.ERROR_BAD_PARAMETERS
        task = self._task(req, tenant, deadline_s)
        if isinstance(task, Invalid):
            return codes.wire_code(task.code)
        number = await self._push(task, tenant, callbacks.stored(callback_protocol, pingback) if pingback else "")
        if number is None:
            return Code.ERROR_TOO_BIG_CAPTCHA_FILESIZE
        return Submitted(number, kind)

    def _task(self, req: ApiRequest, tenant: Tenant, deadline_s: float) -> Task | Invalid:
        """The task as the workers will validate it (its id is a placeholder until the push draws one)."""
        now = time.time()
        data: dict[str, Any] = {"id": ids.task_id(tenant.name, 0), "method": req.method, "params": _params(req),
                                "submitted_at": now, "reply_to": REPLY_TO, "tenant": tenant.name}
        if deadline_s > 0:
            data["deadline"] = now + deadline_s
        return make_task(data, now=now)

    async def _push(self, task: Task, tenant: Tenant, pingback: str) -> int | None:
        """Queue the task under a fresh number; None when its body is over MAX_TASK_BYTES."""
        ttl = self.cfg.task_ttl_seconds
        for _ in range(_PUSH_TRIES):
            number = ids.new_number()
            tid = ids.task_id(tenant.name, number)
            body = dataclasses.replace(task, id=tid).body()
            if len(body.encode()) > self.cfg.max_task_bytes:
                return None
            callback = self.queue.keys.callback(tid)
            if pingback and not await self.queue.redis.set(callback, pingback, nx=True, ex=ttl):
                continue  # a task of that number has a callback: the number is taken
            if await self.queue.push([(tid, body)], ttl=ttl):
                return number
            if pingback:
                await self.queue.redis.delete(callback)
        raise RuntimeError(f"{_PUSH_TRIES} task numbers in a row were taken")  # pragma: no cover - 1e-15 odds

    # -- res.php ---------------------------------------------------------------------------------------------
    async def _res(self, req: ApiRequest, tenant: Tenant) -> Reply:
        match Action.parse(req.action):
            case Action.GET:
                return await self._get(req, tenant)
            case Action.THREADSINFO:
                return "OK", protocol.threads(req, tenant.threads, self.in_flight.get(tenant.name, 0))
            case Action.GETBALANCE:
                return await self._balance(req, tenant)
            case Action.REPORTBAD | Action.REPORTGOOD as action:
                return await self._report(req, tenant, action)
            case Action.EMPTY:
                return _error(req, Code.ERROR_EMPTY_ACTION)
            case Action.UNKNOWN:
                return _error(req, Code.ERROR_BAD_PARAMETERS)

    async def _get(self, req: ApiRequest, tenant: Tenant) -> Reply:
        number = req.text("id").strip()
        if not protocol.ID_RE.fullmatch(number):
            return _error(req, Code.ERROR_WRONG_ID_FORMAT)
        outcome = await self.producer.peek(ids.task_id(tenant.name, number))
        if outcome is None:
            return _error(req, Code.CAPCHA_NOT_READY)
        if isinstance(outcome, Solved):
            return "OK", protocol.answer(req, Answer(outcome.solution, outcome.user_agent))
        if isinstance(outcome, Failed | Expired):
            return _error(req, codes.wire_code(outcome.code))
        return _error(req, Code.ERROR_WRONG_CAPTCHA_ID)  # ResultExpired, UnknownTask

    async def _balance(self, req: ApiRequest, tenant: Tenant) -> Reply:
        value = await self.balance(tenant)
        return ("OK", protocol.balance(req, value)) if isinstance(value, float) else _error(req, value)

    async def balance(self, tenant: Tenant) -> float | str:
        """The tenant's configured ``balance`` (the plan's, with GATEWAY_UPSTREAM_BALANCE), or the code refusing."""
        if self.upstream is None or not self.cfg.upstream_balance:
            return float(tenant.balance)
        try:
            return float(await self.upstream.getbalance())
        except ApiError as exc:
            return _upstream_code(exc)

    async def _report(self, req: ApiRequest, tenant: Tenant, action: Action) -> Reply:
        number = req.text("id").strip()
        if not protocol.ID_RE.fullmatch(number):
            return _error(req, Code.ERROR_WRONG_ID_FORMAT)
        refused = await self.report(tenant, number, bad=action is Action.REPORTBAD)
        return ("OK", protocol.report(req)) if refused is None else _error(req, refused)

    async def report(self, tenant: Tenant, number: str | int, *, bad: bool) -> str | None:
        """Forwarded with the CaptchaAI id the worker recorded on the result (``captcha_id``). Without an upstream
        key the report is counted here only (and answered as recorded). None when recorded, else the code."""
        (stored,) = await self.queue.lookup([ids.task_id(tenant.name, number)])
        result = _solved_result(stored)
        if result is None:
            return Code.ERROR_WRONG_CAPTCHA_ID
        if self.upstream is not None:
            captcha_id = result.get("captcha_id")
            if not isinstance(captcha_id, str | int) or not protocol.ID_RE.fullmatch(str(captcha_id)):
                return Code.ERROR_WRONG_CAPTCHA_ID  # recorded by a worker that keeps no id
            try:
                send = self.upstream.reportbad if bad else self.upstream.reportgood
                await send(str(captcha_id))
            except ApiError as exc:
                return _upstream_code(exc)
        gm.REPORTS.labels(tenant.name, "bad" if bad else "good").inc()
        return None


# -- helpers ---------------------------------------------------------------------------------------------------
def _params(req: ApiRequest) -> dict[str, str]:
    """The task's params: the request's fields but the ones the worker sets (key, json, method, ...), and each
    uploaded file as base64 (the worker uploads ``file`` again as a file)."""
    params = {name: value for name, value in req.fields.items() if name not in RESERVED_PARAMS}
    for name, upload in req.files.items():
        if name not in RESERVED_PARAMS:
            params[name] = base64.b64encode(upload.data).decode()
    return params


def _solved_result(stored: str | bytes | Lookup) -> Mapping[str, Any] | None:
    """The stored result JSON of a solved task, as a mapping (None: none, or not solved)."""
    if isinstance(stored, Lookup):
        return None
    try:
        data = json.loads(stored)
    except (ValueError, TypeError):
        return None
    return data if isinstance(data, dict) and data.get("status") == "solved" else None


def _upstream_code(exc: ApiError) -> str:
    """What the client is told when CaptchaAI refused a forwarded call: its task codes as they are; anything about
    the plan's key or capacity is not the tenant's business (ERROR_SERVER_ERROR: retry later)."""
    if exc.error_class is ErrorClass.TASK and codes.Code.of(exc.code) is not None:
        return codes.wire_code(exc.code)
    return Code.ERROR_SERVER_ERROR


def _error(req: ApiRequest, code: str) -> Reply:
    return code, protocol.error(req, code)


def _throttled(req: ApiRequest, endpoint: str, wait: float) -> Reply:
    if endpoint in ("in", "solve"):
        return _error(req, Code.ERROR_NO_SLOT_AVAILABLE)
    response = protocol.error(req, Code.ERROR_TOO_MUCH_REQUESTS)
    response.set_status(429)
    response.headers["Retry-After"] = str(max(1, round(wait + 0.5)))
    return "HTTP_429", response


def _res_endpoint(action: Action) -> str:
    return {Action.GET: "res_get", Action.THREADSINFO: "res_threadsinfo", Action.GETBALANCE: "res_getbalance",
            Action.REPORTBAD: "res_report", Action.REPORTGOOD: "res_report"}.get(action, "res_other")
