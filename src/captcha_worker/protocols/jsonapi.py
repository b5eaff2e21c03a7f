"""The JSON API of the ``createTask`` family, server side: reading a request body and writing the replies. No
state: the gateway (``gateway.jsonapi``) and the simulator both use it.

Every method is ``POST /<method>`` with a JSON object body (any content type: Anti-Captcha's docs say
"application-json"). :func:`read_body` reads any bytes: a body over the cap is ERROR_TOO_BIG_CAPTCHA_FILESIZE,
one that is not UTF-8 JSON nested at most ``task.MAX_DEPTH`` deep, or not an object, is ERROR_BAD_PARAMETERS — a
:class:`~captcha_worker.protocols.jsonapi_errors.JsonError`, never an exception. Replies are HTTP 200 with
``errorId`` (0 on success), as Anti-Captcha, 2captcha and CapMonster Cloud answer; over the rate limit a request
gets HTTP 429 with ``Retry-After`` besides its error body.

============================  ==========================================================================
reply                         body
============================  ==========================================================================
:func:`created`               ``{"errorId":0,"errorCode":"","errorDescription":"","taskId":N,"status":"idle"}``
:func:`processing`            ``{"errorId":0,"status":"processing"}``
:func:`ready`                 ``{"errorId":0,"status":"ready","solution":{..},"cost":"0","ip":..,``
                              ``"createTime":T,"endTime":T,"solveCount":N}``
:func:`balance`               ``{"errorId":0,"balance":F}``
:func:`success`               ``{"errorId":0,"status":"success"}`` (the report methods)
:func:`error`                 ``{"errorId":N,"errorCode":"ERROR_..","errorDescription":".."}``
============================  ==========================================================================

``taskId`` is an integer (CapSolver's clients take it as it comes); ``status: "idle"`` and the empty error fields
on ``createTask`` are CapSolver's, which its client reads unconditionally.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from captcha_worker.protocols.jsonapi_errors import JsonError
from captcha_worker.task import Invalid, decode_json

MAX_TASK_ID: Final = 2**63 - 1


class Method(enum.StrEnum):
    """The methods, by path (``/createTask``); the report methods of every provider's spelling are one."""

    CREATE_TASK = "createTask"
    GET_TASK_RESULT = "getTaskResult"
    GET_BALANCE = "getBalance"
    REPORT_INCORRECT = "reportIncorrect"
    REPORT_CORRECT = "reportCorrect"


#: path -> method: Anti-Captcha's, CapMonster Cloud's and 2captcha's report spellings
PATHS: Final[Mapping[str, Method]] = {
    "createTask": Method.CREATE_TASK,
    "getTaskResult": Method.GET_TASK_RESULT,
    "getBalance": Method.GET_BALANCE,
    "reportIncorrectRecaptcha": Method.REPORT_INCORRECT,
    "reportIncorrectImageCaptcha": Method.REPORT_INCORRECT,
    "reportIncorrectHcaptcha": Method.REPORT_INCORRECT,
    "reportIncorrectTokenCaptcha": Method.REPORT_INCORRECT,
    "reportIncorrect": Method.REPORT_INCORRECT,
    "reportCorrectRecaptcha": Method.REPORT_CORRECT,
    "reportCorrect": Method.REPORT_CORRECT,
}


@dataclass(frozen=True)
class JsonRequest:
    """One request's body: a JSON object."""

    body: Mapping[str, Any]

    @property
    def client_key(self) -> str:
        key = self.body.get("clientKey")
        return key.strip() if isinstance(key, str) else ""

    @property
    def task(self) -> object:
        return self.body.get("task")

    @property
    def callback_url(self) -> str | None:
        """``callbackUrl`` when it is a non-empty string; '' when it is there but not one (refused)."""
        url = self.body.get("callbackUrl")
        if url is None or url == "":
            return None
        return url.strip() if isinstance(url, str) else ""

    def task_id(self) -> int | None:
        """``taskId`` as a positive integer (a JSON number or a string of digits); None otherwise."""
        value = self.body.get("taskId")
        if isinstance(value, bool):
            return None
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            value = int(value.strip()) if len(value.strip()) <= 19 else None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return value if isinstance(value, int) and 0 < value <= MAX_TASK_ID else None


async def read_body(request: web.Request, max_bytes: int) -> JsonRequest | tuple[JsonError, str]:
    """The request's JSON object, or the error (and its description) to answer."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return JsonError.TOO_BIG_CAPTCHA_FILESIZE, f"The request body is over {max_bytes} bytes."
    if not raw:
        return JsonError.BAD_PARAMETERS, "The request body is empty: send a JSON object."
    data = decode_json(raw, max_bytes=max_bytes)
    if isinstance(data, Invalid):
        return JsonError.BAD_PARAMETERS, "The request body is not valid JSON."
    if not isinstance(data, dict):
        return JsonError.BAD_PARAMETERS, "The request body must be a JSON object."
    return JsonRequest(data)


# -- replies --------------------------------------------------------------------------------------------------------
def reply(body: Mapping[str, object], status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body, separators=(",", ":")),
                        content_type="application/json")


def error(err: JsonError, description: str | None = None, status: int = 200) -> web.Response:
    return reply(err.body(description), status)


def created(task_id: int) -> web.Response:
    return reply({"errorId": 0, "errorCode": "", "errorDescription": "", "taskId": task_id, "status": "idle"})


def processing() -> web.Response:
    return reply({"errorId": 0, "status": "processing"})


def ready_body(solution: Mapping[str, object], *, ip: str, create_time: float | None, end_time: float | None,
               solve_count: int) -> dict[str, object]:
    """getTaskResult's body for a solved task (also what a callbackUrl receives)."""
    return {"errorId": 0, "status": "ready", "solution": dict(solution), "cost": "0", "ip": ip,
            "createTime": int(create_time or 0), "endTime": int(end_time or 0), "solveCount": solve_count}


def ready(solution: Mapping[str, object], *, ip: str, create_time: float | None, end_time: float | None,
          solve_count: int) -> web.Response:
    return reply(ready_body(solution, ip=ip, create_time=create_time, end_time=end_time, solve_count=solve_count))


def balance(value: float) -> web.Response:
    return reply({"errorId": 0, "balance": float(value)})


def success() -> web.Response:
    return reply({"errorId": 0, "status": "success"})
