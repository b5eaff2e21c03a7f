"""The simulated account and its HTTP handlers: ``/in.php``, ``/res.php``, ``/solve.php``, the JSON API
(``/createTask``, ``/getTaskResult``, ``/getBalance``, the report methods: ``protocols.jsonapi``) and ``/_sim/*``.

A JSON-API task is mapped to CaptchaAI's method and params (``protocols.jsonapi_tasks``) and then accepted exactly
as in.php accepts it (the same checks, faults, plan threads, ids); its errors are the JSON API's numbered ones
(``protocols.jsonapi_errors.from_v1``). A ``callbackUrl`` is POSTed the getTaskResult body when the task ends."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import suppress
from types import MappingProxyType
from typing import Final

from aiohttp import web

from captcha_worker import log, methods
from captcha_worker.codes import Code
from captcha_worker.methods import Answer, AnswerShape, Kind
from captcha_worker.protocols import jsonapi
from captcha_worker.protocols import v1 as protocol
from captcha_worker.protocols.jsonapi import JsonRequest, Method
from captcha_worker.protocols.jsonapi_errors import JsonError, from_v1
from captcha_worker.protocols.jsonapi_tasks import Refused, map_task, solution
from captcha_worker.protocols.v1 import Action, ApiRequest, Endpoint
from captcha_worker.simulator.answers import ANSWER_INPUTS
from captcha_worker.simulator.bans import BanList
from captcha_worker.simulator.checks import ImageLimits, check_submission, pingback_url
from captcha_worker.simulator.config import Fault, OverCap, SimConfig
from captcha_worker.simulator.faults import FAULT_RESPONSES, TRANSPORT_FAULTS, reset_connection
from captcha_worker.simulator.pingback import Pingbacks
from captcha_worker.simulator.scheduler import Scheduler, SimTask
from captcha_worker.simulator.stats import Counters, SimStats

_log = logging.getLogger("captcha_worker.simulator")

Clock = Callable[[], float]
CLIENT_MAX_SIZE: Final = 16 * 1024 * 1024  # BLS sends 9 images; larger bodies get HTTP 413
_TICK_S: Final = 0.5
_SOLVE_WAIT_S: Final = 0.05  # how often a waiting solve.php request looks at its task
_NO_INPUTS: Final[Mapping[str, str]] = MappingProxyType({})

_Handler = Callable[[ApiRequest, float], Awaitable[web.Response]]
_Route = Callable[[web.Request], Awaitable[web.Response]]


@dataclasses.dataclass(frozen=True)
class TaskView:
    kind: Kind
    answer: Answer | None


class Simulator:
    """The state of one simulated CaptchaAI account and its HTTP handlers. ``clock`` is monotonic seconds."""

    def __init__(self, config: SimConfig | None = None, clock: Clock = time.monotonic) -> None:
        self._config = config or SimConfig()
        self._clock = clock
        self._rng = random.Random(self._config.seed)
        self._scheduler = Scheduler(self._config.threads, clock())
        self._tasks: dict[int, SimTask] = {}
        self._expiry: deque[tuple[float, int]] = deque()
        self._bans = BanList()
        self._counters = Counters()
        self._pingbacks = Pingbacks(self._count_pingback)
        self._started = asyncio.Event()  # a task started: the tick looks at when it is ready
        self._next_id = self._rng.randrange(10**10, 7 * 10**10)
        self._spent_micro = 0  # a per-solve profile's charges over the account's life (the balance moves by them)

    @property
    def config(self) -> SimConfig:
        return self._config

    # -- control ---------------------------------------------------------------------------------------------

    def reconfigure(self, config: SimConfig) -> None:
        now = self._clock()
        self._advance(now)
        if config.threads != self._scheduler.threads:
            self._scheduler.set_threads(config.threads, now)
            self._advance(now)
        changed = [f.name for f in dataclasses.fields(SimConfig)
                   if getattr(config, f.name) != getattr(self._config, f.name)]
        self._config = config
        log.event(_log, "simulator.config_changed", changed=changed)

    def reset(self) -> None:
        """Clears counters and restarts the observation window; config, tasks and bans stay."""
        now = self._clock()
        self._advance(now)
        self._scheduler.reset_meter(now)
        self._counters = Counters()
        log.event(_log, "simulator.reset")

    def stats(self) -> SimStats:
        now = self._clock()
        self._advance(now)
        c, s = self._counters, self._scheduler
        window = max(0.0, now - s.meter.since)
        return SimStats(
            calls={e.value: c.calls[e] for e in Endpoint},
            res_actions={a.value: c.actions[a] for a in Action},
            faults={f.value: c.faults[f] for f in Fault},
            errors=dict(sorted(c.errors.items())),
            submitted=c.submitted, solved=c.solved, failed=c.failed,
            in_flight=s.in_flight, max_in_flight=s.meter.max_in_flight, threads=s.threads,
            queued=s.queued_total, queue_length=s.queue_length,
            over_cap_rejections=c.over_cap_rejections, reportbad=c.reportbad, reportgood=c.reportgood,
            bad_key=c.bad_key, ip_bans=c.ip_bans, pingbacks_sent=c.pingbacks_sent,
            pingbacks_failed=c.pingbacks_failed, at_cap_seconds=s.meter.at_cap_s,
            busy_thread_seconds=s.meter.busy_s, window_seconds=window,
            utilisation=s.meter.busy_s / (s.threads * window) if window > 0 else 0.0,
            json_calls={m.value: c.calls_json[m] for m in Method},
            profile=self._config.profile.value, charged_micro=c.charged_micro, charges=c.charges,
            balance_micro=self._balance_micro(),
        )

    def _balance_micro(self) -> int:
        return max(0, round(self._config.balance * 1_000_000) - self._spent_micro)

    def _balance(self) -> float:
        """What getbalance reports: the configured balance, less a per-solve profile's charges."""
        return self._balance_micro() / 1_000_000 if self._config.profile.per_solve else self._config.balance

    def task_view(self, task_id: int) -> TaskView | None:
        """What the simulator knows of a task, for in-process callers (tests, tools): its kind, and its answer
        once solved (None before, and for an unsolvable task). Never served over HTTP."""
        now = self._clock()
        self._advance(now)
        task = self._tasks.get(task_id)
        if task is None:
            return None
        ready = task.ready_at is not None and task.ready_at <= now and not task.unsolvable
        return TaskView(task.kind, task.answer() if ready else None)

    def housekeep(self) -> None:
        """Advances time and drops expired answers and stale ban records (the periodic tick calls it)."""
        now = self._clock()
        self._advance(now)
        while self._expiry and self._expiry[0][0] <= now:
            self._tasks.pop(self._expiry.popleft()[1], None)
        self._bans.prune(now, self._config.ban_window_seconds)

    def _advance(self, now: float) -> None:
        """Completes the tasks ready by ``now``. Answers stay readable ``retention_seconds`` of real time
        (``speed`` scales solve times only)."""
        for task in self._scheduler.advance(now):
            if task.unsolvable:
                self._counters.failed += 1
            else:
                self._counters.solved += 1
            self._expiry.append(((task.ready_at or now) + self._config.retention_seconds, task.id))
            if task.pingback and self._config.pingback:
                if task.callback_json:
                    self._pingbacks.post(task.id, task.pingback, self._json_body(task, with_id=True))
                else:
                    self._pingbacks.send(task.id, task.pingback, None if task.unsolvable else task.answer())

    def _count_pingback(self, delivered: bool) -> None:
        if delivered:
            self._counters.pingbacks_sent += 1
        else:
            self._counters.pingbacks_failed += 1

    # -- HTTP ------------------------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=CLIENT_MAX_SIZE)
        for endpoint, handler in ((Endpoint.IN, self._in), (Endpoint.RES, self._res),
                                  (Endpoint.SOLVE, self._solve)):
            route = self._route(endpoint, handler)
            app.router.add_get(f"/{endpoint.value}", route, allow_head=False)
            app.router.add_post(f"/{endpoint.value}", route)
        for path, method in jsonapi.PATHS.items():
            app.router.add_route("*", f"/{path}", self._json_route(method))
        if self._config.introspection:
            app.router.add_get("/_sim/stats", self._http_stats)
            app.router.add_post("/_sim/reset", self._http_reset)
            app.router.add_get("/_sim/config", self._http_config)
            app.router.add_post("/_sim/config", self._http_config)
        app.cleanup_ctx.append(self._background)
        return app

    async def _background(self, _app: web.Application) -> AsyncIterator[None]:
        """The periodic tick (completions, pingbacks, expiry) and the pingback client, for the app's life. The
        tick also comes when the next running task is ready, so a pingback leaves at its task's ready time (not up
        to a tick later: at --speed S that would be S times as long in the clients' scaled seconds)."""
        async def tick() -> None:
            while True:
                ready = self._scheduler.next_ready()
                wait = _TICK_S if ready is None else min(_TICK_S, max(ready - self._clock(), 0.0) + 0.001)
                self._started.clear()
                with suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._started.wait()
                self.housekeep()

        await self._pingbacks.start()
        task = asyncio.create_task(tick())
        yield
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await self._pingbacks.stop()

    def _route(self, endpoint: Endpoint, handler: _Handler) -> _Route:
        async def route(request: web.Request) -> web.Response:
            return await self._api(request, endpoint, handler)

        return route

    async def _api(self, request: web.Request, endpoint: Endpoint, handler: _Handler) -> web.Response:
        self._counters.calls[endpoint] += 1
        faulty = self._transport_fault(request)
        if faulty is not None:
            return faulty
        if self._draw(Fault.SLOW):
            await asyncio.sleep(self._config.slow_seconds)
        req = await protocol.read_request(request)
        if endpoint is Endpoint.RES:
            self._counters.actions[Action.parse(req.action)] += 1
        now = self._clock()
        self._advance(now)
        refusal = self._gate(request.remote or "", req, now)
        return self._maybe_lost(request, refusal if refusal is not None else await handler(req, now))

    def _maybe_lost(self, request: web.Request, response: web.Response) -> web.Response:
        """The `lost` fault: the request took effect; its reply never arrives (the connection is reset)."""
        return reset_connection(request) if self._draw(Fault.LOST) else response

    def _fail(self, req: ApiRequest, code: str) -> web.Response:
        """An error reply, counted by code."""
        self._counters.errors[code] += 1
        return protocol.error(req, code)

    def _draw(self, fault: Fault) -> bool:
        rate = self._config.faults.rate(fault)
        hit = rate > 0 and self._rng.random() < rate
        if hit:
            self._counters.faults[fault] += 1
        return hit

    def _transport_fault(self, request: web.Request) -> web.Response | None:
        for fault in TRANSPORT_FAULTS:
            if self._draw(fault):
                return FAULT_RESPONSES[fault](request)
        return None

    def _gate(self, ip: str, req: ApiRequest, now: float) -> web.Response | None:
        code = self._gate_code(ip, req.key, now)
        return None if code is None else self._fail(req, code)

    def _gate_code(self, ip: str, key: str, now: float) -> str | None:
        """IP ban and key checks, common to every endpoint of both protocols: the code refusing, or None. Only a
        key that is there and wrong counts towards an IP ban: a request without any key is a client bug, not a
        guess."""
        if self._bans.banned(ip, now):
            return Code.IP_BANNED
        keys = self._config.keys
        code = (Code.ERROR_WRONG_USER_KEY if not protocol.KEY_RE.fullmatch(key)
                else Code.ERROR_KEY_DOES_NOT_EXIST if keys is not None and key not in keys else None)
        if code is None:
            return None
        self._counters.bad_key += 1
        if key and self._bans.strike(ip, now, self._config):
            self._counters.ip_bans += 1
            log.event(_log, "simulator.ip_banned", logging.WARNING, ip=ip, seconds=self._config.ban_seconds,
                      strikes=self._config.ban_after)
        return code

    # -- in.php and solve.php --------------------------------------------------------------------------------

    async def _in(self, req: ApiRequest, now: float) -> web.Response:
        task = self._accept(req, now)
        if isinstance(task, web.Response):
            return task
        if isinstance(task, str):
            return protocol.error(req, task)
        return protocol.ok(req, task.id if task.kind.method == "userrecaptcha" else str(task.id))

    async def _solve(self, req: ApiRequest, now: float) -> web.Response:
        """One-request image solving: the task is accepted as by in.php, and the reply is its answer."""
        task = self._accept(req, now, only=AnswerShape.TEXT)
        if isinstance(task, web.Response):
            return task
        if isinstance(task, str):
            return protocol.error(req, task)
        while task.ready_at is None or task.ready_at > now:
            wait = _SOLVE_WAIT_S if task.ready_at is None else min(_SOLVE_WAIT_S, task.ready_at - now)
            await asyncio.sleep(max(wait, 0.001))
            now = self._clock()
            self._advance(now)
        return self._result(req, task)

    def _accept(self, req: ApiRequest, now: float, only: AnswerShape | None = None, *,
                callback_json: bool = False) -> SimTask | str | web.Response:
        """Checks a submission and starts (or queues) its task; the code refusing it (counted), or the HTTP 429
        reply of ``over_cap=http429``."""
        kind, req = protocol.submission(req)
        if kind is None and self._config.profile.per_solve:
            kind = methods.foreign_kind(req.method)
        if kind is None or (only is not None and kind.shape is not only):
            return self._refuse(Code.ERROR_BAD_PARAMETERS)
        limits = ImageLimits(self._config.min_image_bytes, self._config.max_image_bytes)
        code = check_submission(kind, req, limits)
        if code is not None:
            return self._refuse(code)
        if self._draw(Fault.SERVER_ERROR):
            return self._refuse(Code.ERROR_SERVER_ERROR)
        if not self._scheduler.has_room() and self._config.over_cap is not OverCap.QUEUE:
            self._counters.over_cap_rejections += 1
            return self._over_cap()
        price = self._config.price_micro(kind)
        if price > self._balance_micro():
            return self._refuse(Code.ERROR_ZERO_BALANCE)
        task = self._new_task(kind, req, now, callback_json)
        if price and (not task.unsolvable or self._config.profile.charges_unsolvable):  # charged once, when accepted
            self._spent_micro += price
            self._counters.charged_micro += price
            self._counters.charges += 1
        if self._scheduler.has_room():
            self._scheduler.start(task, now)
            self._started.set()
        else:
            self._scheduler.wait(task)
        self._counters.submitted += 1
        return task

    def _refuse(self, code: str) -> str:
        self._counters.errors[code] += 1
        return code

    def _over_cap(self) -> str | web.Response:
        mode = self._config.over_cap
        if mode is OverCap.HTTP429:
            return web.Response(status=429, text="429 Too Many Requests", headers={"Retry-After": "5"})
        return self._refuse(Code.ERROR_ZERO_BALANCE if mode is OverCap.ZERO_BALANCE else Code.ERROR_NO_SLOT_AVAILABLE)

    def _new_task(self, kind: Kind, req: ApiRequest, now: float, callback_json: bool = False) -> SimTask:
        self._next_id += self._rng.randint(1, 97)
        inputs = {k: v for k, v in req.fields.items() if k in ANSWER_INPUTS}
        task = SimTask(
            id=self._next_id, kind=kind, owner=req.key, inputs=inputs or _NO_INPUTS,
            seed=self._rng.getrandbits(64), wall=int(time.time()),
            unsolvable=self._draw(Fault.UNSOLVABLE),
            duration=self._config.latency_for(kind).sample(self._rng, self._config.speed),
            pingback=pingback_url(req) or "", callback_json=callback_json,
        )
        self._tasks[task.id] = task
        return task

    # -- res.php ---------------------------------------------------------------------------------------------

    async def _res(self, req: ApiRequest, now: float) -> web.Response:
        match Action.parse(req.action):
            case Action.GET:
                return self._get(req, now)
            case Action.THREADSINFO:
                return protocol.threads(req, self._scheduler.threads, self._scheduler.in_flight)
            case Action.GETBALANCE:
                return protocol.balance(req, self._balance())
            case Action.REPORTBAD | Action.REPORTGOOD as action:
                return self._report(req, action)
            case Action.EMPTY:
                return self._fail(req, Code.ERROR_EMPTY_ACTION)
            case Action.UNKNOWN:
                return self._fail(req, Code.ERROR_BAD_PARAMETERS)

    def _lookup(self, req: ApiRequest) -> SimTask | str:
        task_id = req.text("id").strip()
        if not protocol.ID_RE.fullmatch(task_id):
            return Code.ERROR_WRONG_ID_FORMAT
        task = self._tasks.get(int(task_id))
        if task is None or task.owner != req.key:
            return Code.ERROR_WRONG_CAPTCHA_ID
        return task

    def _get(self, req: ApiRequest, now: float) -> web.Response:
        task = self._lookup(req)
        if isinstance(task, str):
            return self._fail(req, task)
        if task.ready_at is None or task.ready_at > now:
            return self._fail(req, Code.CAPCHA_NOT_READY)
        return self._result(req, task)

    def _result(self, req: ApiRequest, task: SimTask) -> web.Response:
        if task.unsolvable:
            return self._fail(req, Code.ERROR_CAPTCHA_UNSOLVABLE)
        return protocol.answer(req, task.answer())

    def _report(self, req: ApiRequest, action: Action) -> web.Response:
        task = self._lookup(req)
        if isinstance(task, str):
            return self._fail(req, task)
        if action is Action.REPORTGOOD:
            self._counters.reportgood += 1
        else:
            self._counters.reportbad += 1
        return protocol.report(req)

    # -- the JSON API ----------------------------------------------------------------------------------------------

    def _json_route(self, method: Method) -> _Route:
        async def route(request: web.Request) -> web.Response:
            self._counters.calls_json[method] += 1
            faulty = self._transport_fault(request)
            if faulty is not None:
                return faulty
            if self._draw(Fault.SLOW):
                await asyncio.sleep(self._config.slow_seconds)
            if request.method != "POST":
                return self._json_fail(JsonError.NO_SUCH_METHOD, f"{method.value} is called with POST.")
            body = await jsonapi.read_body(request, CLIENT_MAX_SIZE)
            if isinstance(body, tuple):
                return self._json_fail(*body)
            now = self._clock()
            self._advance(now)
            code = self._gate_code(request.remote or "", body.client_key, now)
            if code is not None:
                return self._json_fail(from_v1(code))
            return self._maybe_lost(request, self._json_method(method, body, request, now))

        return route

    def _json_fail(self, err: JsonError, description: str | None = None) -> web.Response:
        self._counters.errors[err.code] += 1
        return jsonapi.error(err, description)

    def _json_method(self, method: Method, body: JsonRequest, request: web.Request, now: float) -> web.Response:
        match method:
            case Method.CREATE_TASK:
                return self._create_task(body, now)
            case Method.GET_BALANCE:
                return jsonapi.balance(self._balance())
        task = self._json_lookup(body)
        if task is None:
            return self._json_fail(JsonError.NO_SUCH_CAPCHA_ID)
        if method is Method.GET_TASK_RESULT:
            if task.ready_at is None or task.ready_at > now:
                return jsonapi.processing()
            if task.unsolvable:
                return self._json_fail(JsonError.CAPTCHA_UNSOLVABLE)
            return jsonapi.reply(self._json_body(task, ip=request.remote or ""))
        if method is Method.REPORT_CORRECT:
            self._counters.reportgood += 1
        else:
            self._counters.reportbad += 1
        return jsonapi.success()

    def _create_task(self, body: JsonRequest, now: float) -> web.Response:
        mapped = map_task(body.task, foreign=self._config.profile.per_solve)
        if isinstance(mapped, Refused):
            return self._json_fail(mapped.error, mapped.description)
        fields = {**mapped.params, "key": body.client_key, "method": mapped.method}
        url = body.callback_url
        if url is not None:
            if not url.startswith(("http://", "https://")):
                return self._json_fail(JsonError.BAD_PARAMETERS, "callbackUrl must be an http(s) URL.")
            fields["pingback"] = url
        task = self._accept(ApiRequest(fields, {}), now, callback_json=url is not None)
        if isinstance(task, web.Response):
            return task
        if isinstance(task, str):
            return jsonapi.error(from_v1(task))
        return jsonapi.created(task.id)

    def _json_lookup(self, body: JsonRequest) -> SimTask | None:
        task_id = body.task_id()
        task = self._tasks.get(task_id) if task_id is not None else None
        return task if task is not None and task.owner == body.client_key else None

    def _json_body(self, task: SimTask, *, ip: str = "", with_id: bool = False) -> dict[str, object]:
        """A finished task's getTaskResult body (a callbackUrl's also names the ``taskId``)."""
        head: dict[str, object] = {"taskId": task.id} if with_id else {}
        if task.unsolvable:
            return {**head, **JsonError.CAPTCHA_UNSOLVABLE.body()}
        return {**head, **jsonapi.ready_body(solution(task.kind, task.answer()), ip=ip, create_time=task.wall,
                                             end_time=task.wall + task.duration, solve_count=1)}

    # -- /_sim/ ----------------------------------------------------------------------------------------------

    async def _http_stats(self, _request: web.Request) -> web.Response:
        return protocol.json_response(self.stats().as_dict())

    async def _http_reset(self, _request: web.Request) -> web.Response:
        self.reset()
        return protocol.json_response({"ok": True})

    async def _http_config(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            try:
                patch = await request.json()
                if not isinstance(patch, dict):
                    raise ValueError("the body must be a JSON object")
                self.reconfigure(self._config.patched(patch))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                return protocol.json_response({"error": str(exc)}, status=400)
        return protocol.json_response(self._config.describe())
