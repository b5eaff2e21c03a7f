"""The CaptchaAI v1 wire protocol, client side: reading the replies :mod:`.v1` writes, in either format
(``json=1`` or plain text). It holds no state and knows no HTTP: what a status other than 200 means, and which
error class a code is, stay with the client (``captchaai.parse_reply``).

* :func:`read_reply` — a body -> a :class:`Reply` (the value as text, and the JSON reply's other fields) or a
  :class:`Refusal` (the server's code; ``NON_JSON`` for a body that is no reply at all).
* :func:`answer_of`, :func:`threads_of`, :func:`balance_of` — the value of a ``get``, ``threadsinfo`` and
  ``getbalance`` reply.

``tests/test_protocol_v1.py`` reads every reply :mod:`.v1` can write back to the value it was written from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from captcha_worker.codes import Code
from captcha_worker.methods import Answer

#: a plain-text reply that is a code: a status word or an error (``ERROR_UPLOAD`` comes plain even with ``json=1``)
_CODE_PREFIXES: Final = ("ERROR_", "IP_")
#: a plain balance as :func:`.v1.balance` writes it (``repr`` of a finite float)
_NUMBER_RE: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:e[-+][0-9]+)?")


@dataclass(frozen=True)
class Reply:
    """A success, decoded: ``request`` is its value as text (a task id, an answer, ``OK``, a balance, a status
    word) and ``extra`` the JSON reply's other fields; ``CAPCHA_NOT_READY`` is ``extra == {"not_ready": True}``.
    ``plain``: it came as plain text (``OK|...``), where :func:`answer_of` and :func:`threads_of` split the value.
    ``bare``: a plain body that is a number and nothing else, which only a plain ``getbalance`` reply is
    (:func:`.v1.balance`): the client of any other method refuses it (``captchaai.parse_reply``)."""

    request: str
    extra: Mapping[str, Any]
    plain: bool = False
    bare: bool = False

    @property
    def not_ready(self) -> bool:
        return bool(self.extra.get("not_ready"))


@dataclass(frozen=True)
class Refusal:
    """A reply that is no success: the server's code (:func:`.v1.error`), or ``NON_JSON`` for a body that is no v1
    reply at all (``detail`` says which)."""

    code: str
    detail: str = ""


_NOT_READY: Final = Reply(Code.CAPCHA_NOT_READY.value, {"not_ready": True})


def read_reply(body: bytes) -> Reply | Refusal:
    """An HTTP 200 body, in either format: the reply it is (any of :mod:`.v1`'s ``ok``, ``error``, ``answer``,
    ``threads``, ``balance``, ``report``), or the Refusal."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return _read_json(data)
    if text.startswith("OK|"):
        return Reply(text[3:], {}, plain=True)
    if text == Code.CAPCHA_NOT_READY:
        return _NOT_READY
    if ((text.startswith(_CODE_PREFIXES) or text == Code.MAX_USER_TURN)
            and text.replace("_", "").isalnum() and len(text) < 64):
        return Refusal(text)
    if text.startswith("OK_"):  # reportbad: OK_REPORT_RECORDED
        return Reply(text, {}, plain=True)
    if _NUMBER_RE.fullmatch(text):  # a plain balance
        return Reply(text, {}, plain=True, bare=True)
    return Refusal(Code.NON_JSON, "unexpected body")


def _read_json(data: Mapping[str, Any]) -> Reply | Refusal:
    if "threads" in data and "status" not in data:
        return Reply("OK", data)
    request = data.get("request")
    request_text = request if isinstance(request, str) else json.dumps(request) if request is not None else ""
    if data.get("status") == 1:
        return Reply(request_text, data)
    if request_text == Code.CAPCHA_NOT_READY:
        return _NOT_READY
    if data.get("status") == 0 and request_text:
        return Refusal(request_text)
    return Refusal(Code.NON_JSON, "JSON without status")


def answer_of(reply: Reply, *, with_user_agent: bool = False) -> Answer | None:
    """The answer a ``res.php?action=get`` reply carries (None: not ready yet). JSON: ``result`` before
    ``request``, and ``user_agent``. Plain: ``<answer>|<user agent>`` is split only for a kind answered with a user
    agent (`with_user_agent`); any other answer is taken whole (a text answer may hold ``|``)."""
    if reply.not_ready:
        return None
    if reply.plain:
        if with_user_agent and "|" in reply.request:
            request, _, user_agent = reply.request.partition("|")
            return Answer(request, user_agent)
        return Answer(reply.request)
    result, ua = reply.extra.get("result"), reply.extra.get("user_agent")
    request = result if isinstance(result, str) and result else reply.request
    return Answer(request=request, user_agent=ua if isinstance(ua, str) else None)


def threads_of(reply: Reply) -> tuple[int, int] | None:
    """A ``threadsinfo`` reply's (threads, working threads); None: the reply has no thread count."""
    try:
        if reply.plain:
            total, _, working = reply.request.partition("|")
            return int(total), int(working or 0)
        return int(reply.extra["threads"]), int(reply.extra.get("working_threads", 0))
    except (KeyError, TypeError, ValueError):
        return None


def balance_of(reply: Reply) -> float | None:
    """A ``getbalance`` reply's balance; None: the value is no finite number."""
    return float(reply.request) if _NUMBER_RE.fullmatch(reply.request) else None
