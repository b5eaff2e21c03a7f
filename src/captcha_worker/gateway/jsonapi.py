"""The gateway's JSON API: ``POST /createTask``, ``/getTaskResult``, ``/getBalance`` and the report methods
(``protocols.jsonapi.PATHS``) beside ``/in.php`` and ``/res.php``, on the same port, for the same tenants.

Nothing here owns a concern of its own: the body is read by ``protocols.jsonapi``, the task mapped to CaptchaAI's
method and params by ``protocols.jsonapi_tasks``, and then the v1 handlers' code does the rest — the key and the
rate limit (``Gateway.admit``), the workers' validation and the push (``Gateway.submit``), polls
(``CaptchaQueue.peek``), balance and reports (``Gateway.balance`` / ``Gateway.report``), Redis outages
(``Gateway.guarded``). Errors are the JSON API's (``protocols.jsonapi_errors``): a bad key is
ERROR_KEY_DOES_NOT_EXIST, over the rate limit ``createTask`` is ERROR_NO_SLOT_AVAILABLE and the other methods
ERROR_TOO_MUCH_REQUESTS with HTTP 429 and ``Retry-After``, Redis unavailable is ERROR_NO_SLOT_AVAILABLE ("retry
later"). A task's number is its ``taskId``: the same number res.php knows, so a task created here can be polled
there and the other way round.

``callbackUrl`` is checked against the tenant's pingback policy as ``pingback`` is; when the task ends the URL is
POSTed the task's getTaskResult body with its ``taskId``, signed (``callbacks``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from captcha_worker import codes, methods
from captcha_worker.client import Expired, Failed, Solved
from captcha_worker.codes import Code
from captcha_worker.gateway import callbacks, ids
from captcha_worker.gateway import metrics as gm
from captcha_worker.gateway.app import Gateway, Submitted, Throttled
from captcha_worker.gateway.config import Tenant
from captcha_worker.methods import Answer, Kind
from captcha_worker.metrics import code_label
from captcha_worker.protocols import jsonapi
from captcha_worker.protocols.jsonapi import JsonRequest, Method
from captcha_worker.protocols.jsonapi_errors import JsonError, from_v1
from captcha_worker.protocols.jsonapi_tasks import Refused, map_task, solution
from captcha_worker.protocols.v1 import ApiRequest
from captcha_worker.task import Result, Status

Reply = tuple[str, web.Response]  # the code answered (the metric's label) and the response
_Handler = Callable[[JsonRequest, Tenant, web.Request], Awaitable[Reply]]
_ENDPOINT = {Method.CREATE_TASK: "create_task", Method.GET_TASK_RESULT: "get_task_result",
             Method.GET_BALANCE: "get_balance", Method.REPORT_INCORRECT: "report", Method.REPORT_CORRECT: "report"}


def _error(err: JsonError, description: str | None = None, status: int = 200) -> Reply:
    return err.code, jsonapi.error(err, description, status)


def kind_named(name: str | None) -> Kind | None:
    try:
        return methods.by_name(name) if name else None
    except KeyError:
        return None


def solution_of(kind_name: str | None, answer: Answer) -> dict[str, object]:
    kind = kind_named(kind_name)
    if kind is None:  # a result without a known kind: every field a client may read
        return {"token": answer.request, "text": answer.request, "gRecaptchaResponse": answer.request}
    return solution(kind, answer)


def callback_body(result: Result) -> bytes:
    """What a task's callbackUrl is POSTed: its getTaskResult body, with its ``taskId``."""
    number = int(ids.number_of(result.id))
    body: dict[str, object]
    if result.status is Status.SOLVED:
        t = result.timings
        body = jsonapi.ready_body(solution_of(result.kind, Answer(result.solution or "", result.user_agent)),
                                  ip="", create_time=t.submitted_at, end_time=t.finished_at,
                                  solve_count=result.attempts)
    else:
        body = from_v1(codes.wire_code(result.code or "")).body()
    return json.dumps({"taskId": number, **body}, separators=(",", ":")).encode()


class JsonApi:
    """The JSON API's handlers on a :class:`Gateway`."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.cfg = gateway.cfg

    def add_routes(self, app: web.Application) -> None:
        handlers: dict[Method, _Handler] = {
            Method.CREATE_TASK: self._create, Method.GET_TASK_RESULT: self._result,
            Method.GET_BALANCE: self._balance, Method.REPORT_INCORRECT: self._report,
            Method.REPORT_CORRECT: self._report}
        for path, method in jsonapi.PATHS.items():
            app.router.add_route("*", f"/{path}", self._route(method, handlers[method]))

    def _route(self, method: Method, handler: _Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
        endpoint = _ENDPOINT[method]

        async def route(request: web.Request) -> web.Response:
            started = time.monotonic()
            code, response = await self._serve(request, method, handler)
            gm.REQUESTS.labels(gm.JSON, endpoint, code_label(code)).inc()
            gm.REQUEST_DURATION.labels(gm.JSON, endpoint).observe(time.monotonic() - started)
            return response

        return route

    async def _serve(self, request: web.Request, method: Method, handler: _Handler) -> Reply:
        if request.method != "POST":
            return _error(JsonError.NO_SUCH_METHOD, f"{method.value} is called with POST and a JSON body.")
        body = await jsonapi.read_body(request, self.cfg.max_body_bytes)
        if isinstance(body, tuple):
            return _error(*body)
        tenant = self.gateway.admit(body.client_key)
        if isinstance(tenant, Code):
            return _error(from_v1(tenant))
        if isinstance(tenant, Throttled):
            if method is Method.CREATE_TASK:
                return _error(JsonError.NO_SLOT_AVAILABLE)
            code, response = _error(JsonError.TOO_MUCH_REQUESTS, status=429)
            response.headers["Retry-After"] = str(max(1, round(tenant.wait_s + 0.5)))
            return code, response
        reply = await self.gateway.guarded(handler(body, tenant, request), _ENDPOINT[method])
        return reply if reply is not None else _error(JsonError.SERVICE_UNAVAILABLE)

    # -- the methods ----------------------------------------------------------------------------------------------
    async def _create(self, req: JsonRequest, tenant: Tenant, _request: web.Request) -> Reply:
        mapped = map_task(req.task)
        if isinstance(mapped, Refused):
            return _error(mapped.error, mapped.description)
        url = req.callback_url
        if url is not None:
            why = "it is not a string" if url == "" else callbacks.check_url(tenant.pingback, url)
            if why is not None:
                return _error(JsonError.BAD_PARAMETERS, f"callbackUrl is refused: {why}.")
        fields = {**mapped.params, "method": mapped.method}
        submitted = await self.gateway.submit(ApiRequest(fields, {}), tenant, self.cfg.task_deadline_seconds,
                                              url or "", callback_protocol=callbacks.JSON)
        if not isinstance(submitted, Submitted):
            return _error(from_v1(submitted))
        gm.SUBMITTED.labels(gm.JSON, tenant.name).inc()
        return "OK", jsonapi.created(submitted.number)

    async def _result(self, req: JsonRequest, tenant: Tenant, request: web.Request) -> Reply:
        number = req.task_id()
        if number is None:
            return _error(JsonError.NO_SUCH_CAPCHA_ID, "taskId must be a positive integer.")
        outcome = await self.gateway.producer.peek(ids.task_id(tenant.name, number))
        if outcome is None:
            return Code.CAPCHA_NOT_READY, jsonapi.processing()
        if isinstance(outcome, Solved):
            t = outcome.timings
            return "OK", jsonapi.ready(solution_of(outcome.kind, Answer(outcome.solution, outcome.user_agent)),
                                       ip=request.remote or "", create_time=t.submitted_at,
                                       end_time=t.finished_at or t.solved_at, solve_count=outcome.attempts)
        if isinstance(outcome, Failed | Expired):
            return _error(from_v1(codes.wire_code(outcome.code)))
        return _error(JsonError.NO_SUCH_CAPCHA_ID)  # ResultExpired, UnknownTask

    async def _balance(self, _req: JsonRequest, tenant: Tenant, _request: web.Request) -> Reply:
        value = await self.gateway.balance(tenant)
        return ("OK", jsonapi.balance(value)) if isinstance(value, float) else _error(from_v1(value))

    async def _report(self, req: JsonRequest, tenant: Tenant, request: web.Request) -> Reply:
        number = req.task_id()
        if number is None:
            return _error(JsonError.NO_SUCH_CAPCHA_ID, "taskId must be a positive integer.")
        bad = jsonapi.PATHS.get(request.path.lstrip("/")) is Method.REPORT_INCORRECT
        refused = await self.gateway.report(tenant, number, bad=bad)
        return ("OK", jsonapi.success()) if refused is None else _error(from_v1(refused))

