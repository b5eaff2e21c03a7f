"""The CaptchaAI v1 wire protocol, server side: reading ``in.php`` / ``res.php`` / ``solve.php`` requests and
writing their replies. It holds no state, so anything that speaks the protocol to clients (this simulator, a
CaptchaAI-compatible gateway) can use it; :mod:`.v1_client` reads the replies back (the API client).

Requests
    :func:`read_request` merges the query string with the body, the body winning: a form
    (``application/x-www-form-urlencoded``), ``multipart/form-data`` (text fields and file uploads) or a JSON object
    (``application/json``, as the npm 2captcha client sends image and grid tasks: numbers and booleans become
    their text, ``true`` → ``1``). A body that cannot be read counts as empty. The :class:`ApiRequest` it returns
    names the ``key``, ``method``, ``action``, whether the reply is JSON (``json=1``) and whether the client asked
    for ``Access-Control-Allow-Origin`` (``header_acao=1``). :func:`submission` gives the kind an ``in.php``
    request denotes, after the spellings CaptchaAI accepts are made canonical (``methods.canonical``; a
    ``method=post`` carrying a base64 ``body`` instead of a file is read as ``method=base64``).

Replies (HTTP 200, as on the real service; JSON as ``application/json``, plain text as ``text/plain``)
    ===================  ==========================================================  ==============================
    reply                ``json=1``                                                  plain
    ===================  ==========================================================  ==============================
    :func:`ok`           ``{"status":1,"request":<value>}``                          ``OK|<value>``
    :func:`error`        ``{"status":0,"request":"<CODE>","error_text":"..."}``       ``<CODE>``
                         (``CAPCHA_NOT_READY`` has no ``error_text``)
    :func:`answer`       ``{"status":1,"request":<answer>}``, and for kinds answered  ``OK|<answer>``, or
                         with a user agent also ``"result":<answer>,"user_agent":..``  ``OK|<answer>|<user agent>``
    :func:`threads`      ``{"status":1,"request":"OK","threads":N,"working_threads":M}``  ``OK|N|M``
    :func:`balance`      ``{"status":1,"request":"<float>"}``                        ``<float>``
    :func:`report`       ``{"status":1,"request":"OK_REPORT_RECORDED"}``             ``OK_REPORT_RECORDED``
    ===================  ==========================================================  ==============================

The shape of ``<answer>`` per kind (``methods.Answer``): text, an opaque token, a JSON object string (GeeTest),
a JSON array string of 1-based cells (grid, BLS). The plain form keeps the answer first, so a client that reads
``split("|")[1]`` gets the token; tokens never contain ``|``.

Reading these replies back is :mod:`.v1_client`'s (the client side); ``tests/test_protocol_v1.py`` reads every
reply above back to the value it was written from.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from captcha_worker import codes, methods
from captcha_worker.codes import Code
from captcha_worker.methods import Answer, Kind, truthy

KEY_RE: Final = re.compile(r"[A-Za-z0-9]{32}")
ID_RE: Final = re.compile(r"[0-9]{1,20}")


class Endpoint(enum.StrEnum):
    IN = "in.php"
    RES = "res.php"
    SOLVE = "solve.php"  # one-request image solving: submit and wait for the answer


class Action(enum.StrEnum):
    """res.php actions, plus buckets for a missing and an unknown one."""

    GET = "get"
    THREADSINFO = "threadsinfo"
    GETBALANCE = "getbalance"
    REPORTBAD = "reportbad"
    REPORTGOOD = "reportgood"
    EMPTY = "(empty)"
    UNKNOWN = "(unknown)"

    @classmethod
    def parse(cls, text: str) -> Action:
        text = text.strip().lower()
        if not text:
            return cls.EMPTY
        try:
            action = cls(text)
        except ValueError:
            return cls.UNKNOWN
        return action if action not in (cls.EMPTY, cls.UNKNOWN) else cls.UNKNOWN


# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request."""

    filename: str
    data: bytes


@dataclass(frozen=True)
class ApiRequest:
    """The merged parameters of one request: text fields and uploaded files."""

    fields: Mapping[str, str]
    files: Mapping[str, Upload]

    def text(self, name: str) -> str:
        return self.fields.get(name, "")

    @property
    def key(self) -> str:
        return self.text("key").strip()

    @property
    def method(self) -> str:
        return self.text("method").strip()

    @property
    def action(self) -> str:
        return self.text("action")

    @property
    def as_json(self) -> bool:
        return truthy(self.text("json"))

    @property
    def acao(self) -> bool:
        """The client asked for ``Access-Control-Allow-Origin: *`` (``header_acao=1``)."""
        return truthy(self.text("header_acao"))

    def presence(self) -> Mapping[str, str]:
        """Fields plus non-empty uploads, for :func:`methods.missing_param`."""
        return {**self.fields, **{name: "<file>" for name, up in self.files.items() if up.data}}


async def read_request(request: web.Request) -> ApiRequest:
    fields = dict(request.query.items())
    files: dict[str, Upload] = {}
    if request.method != "POST" or not request.can_read_body:
        return ApiRequest(fields, files)
    if request.content_type == "application/json":
        fields.update(await _json_fields(request))
        return ApiRequest(fields, files)
    try:
        form = await request.post()
    except (ValueError, UnicodeDecodeError):  # malformed body: treated as empty
        return ApiRequest(fields, files)
    for name, value in form.items():
        if isinstance(value, web.FileField):
            files[name] = Upload(value.filename or "", value.file.read())
        elif isinstance(value, bytes | bytearray):
            fields[name] = value.decode("utf-8", "replace")
        else:
            fields[name] = value
    return ApiRequest(fields, files)


async def _json_fields(request: web.Request) -> dict[str, str]:
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(body, dict):
        return {}
    return {str(name): text for name, value in body.items() if (text := _json_text(value)) is not None}


def _json_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def submission(req: ApiRequest) -> tuple[Kind | None, ApiRequest]:
    """The kind an in.php request denotes (None: no such method) and the request in canonical spelling."""
    method = req.method
    fields = methods.canonical(method, req.fields)
    if method == "post" and "file" not in req.files and fields.get("body") and not fields.get("file"):
        method = fields["method"] = "base64"  # a base64 body under method=post (CaptchaAI's grid examples)
    canonical = ApiRequest(fields, req.files)
    return (methods.kind_of(method, fields) if method else None), canonical


# ------------------------------------------------------------------------------------------------------------
# Replies
# ------------------------------------------------------------------------------------------------------------


def answer_fields(answer: Answer) -> dict[str, str]:
    """The JSON reply's fields: ``request``, and ``result`` (the same answer) + ``user_agent`` when there is a
    user agent (the official SDK reads ``result``, the official examples ``request``)."""
    if answer.user_agent is None:
        return {"request": answer.request}
    return {"request": answer.request, "result": answer.request, "user_agent": answer.user_agent}


def plain_answer(answer: Answer) -> str:
    """The plain-text reply: ``OK|<answer>``, ``OK|<answer>|<user agent>`` for the kinds answered with one."""
    return f"OK|{answer.request}" if answer.user_agent is None else f"OK|{answer.request}|{answer.user_agent}"


def json_response(body: Mapping[str, object], status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body, separators=(",", ":")),
                        content_type="application/json")


def plain(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/plain")


def _finish(req: ApiRequest, response: web.Response) -> web.Response:
    if req.acao:
        response.headers["Access-Control-Allow-Origin"] = "*"
    return response


def ok(req: ApiRequest, value: str | int) -> web.Response:
    """A success whose value is a task id (an int for ``userrecaptcha``, as the real API does) or text."""
    return _finish(req, json_response({"status": 1, "request": value}) if req.as_json else plain(f"OK|{value}"))


def error(req: ApiRequest, code: str) -> web.Response:
    if not req.as_json:
        return _finish(req, plain(code))
    body: dict[str, object] = {"status": 0, "request": code}
    if code != Code.CAPCHA_NOT_READY:
        body["error_text"] = codes.server_text(code)
    return _finish(req, json_response(body))


def answer(req: ApiRequest, solved: Answer) -> web.Response:
    if req.as_json:
        return _finish(req, json_response({"status": 1, **answer_fields(solved)}))
    return _finish(req, plain(plain_answer(solved)))


def threads(req: ApiRequest, total: int, working: int) -> web.Response:
    if req.as_json:
        body = {"status": 1, "request": "OK", "threads": total, "working_threads": working}
        return _finish(req, json_response(body))
    return _finish(req, plain(f"OK|{total}|{working}"))


def balance(req: ApiRequest, value: float) -> web.Response:
    text = repr(float(value))
    return _finish(req, json_response({"status": 1, "request": text}) if req.as_json else plain(text))


def report(req: ApiRequest) -> web.Response:
    """The reply to ``reportbad`` and ``reportgood``."""
    recorded = Code.OK_REPORT_RECORDED.value
    return _finish(req, json_response({"status": 1, "request": recorded}) if req.as_json else plain(recorded))
