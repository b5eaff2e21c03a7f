"""The one table of result and error codes: what CaptchaAI answers, the names this package gives to transport
outcomes, and the codes it writes on a task's result.

Each row of :class:`Code` says

* its **class** (:class:`ErrorClass`, the taxonomy of ``captchaai`` and docs/architecture.md: fatal, capacity,
  transient, task; ``None`` for the codes that are not errors: ``OK``, ``CAPCHA_NOT_READY``,
  ``OK_REPORT_RECORDED``),
* where it comes from (:class:`Origin`: the API, a transport outcome named by the client, or a task result),
* ``text``: the user-facing sentence a result carries (:func:`describe`), when there is one,
* ``server_text``: the ``error_text`` a CaptchaAI-compatible server (the simulator, the gateway) sends with it,
* ``label``: whether it is kept as a metric label value (the set is bounded; any other code is ``OTHER``),
* ``simulated``: whether the simulator can produce it,
* ``wire``: for the codes this package writes on results, the CaptchaAI code a CaptchaAI-compatible server (the
  gateway) answers in its place (:func:`wire_code`): a client library only knows CaptchaAI's codes.

``captchaai.classify``/``describe``, ``metrics.code_label``/``FATAL_CODES`` and the simulator read this table;
a code CaptchaAI adds later and nobody listed here is a task failure, described as "CaptchaAI answered X" and
counted as ``OTHER``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class ErrorClass(enum.Enum):
    FATAL = "fatal"  # the key or the account is unusable: stop claiming
    CAPACITY = "capacity"  # no free thread: back off and retry the same task
    TRANSIENT = "transient"  # a failed request: retry it with backoff
    TASK = "task"  # this task fails with the code


class Origin(enum.Enum):
    API = "api"  # CaptchaAI answers it (in.php / res.php)
    TRANSPORT = "transport"  # the client's name for what the HTTP exchange did (status, body, socket)
    RESULT = "result"  # written on a task's result by this package (validation, deadlines, give-ups)


@dataclass(frozen=True)
class Row:
    error_class: ErrorClass | None
    origin: Origin
    text: str | None = None
    server_text: str | None = None
    label: bool = True
    simulated: bool = False
    wire: str | None = None


_F, _C, _R, _T = ErrorClass.FATAL, ErrorClass.CAPACITY, ErrorClass.TRANSIENT, ErrorClass.TASK


def _api(cls: ErrorClass | None, server_text: str | None = None, *, text: str | None = None,
         label: bool = True, simulated: bool = True) -> Row:
    return Row(cls, Origin.API, text, server_text, label, simulated)


def _transport(cls: ErrorClass, *, simulated: bool = True) -> Row:
    return Row(cls, Origin.TRANSPORT, simulated=simulated)


_UNSOLVABLE = "ERROR_CAPTCHA_UNSOLVABLE"
_BAD_PARAMETERS = "ERROR_BAD_PARAMETERS"


def _result(text: str | None = None, *, wire: str = _UNSOLVABLE) -> Row:
    return Row(_T, Origin.RESULT, text, label=False, wire=wire)


class Code(enum.StrEnum):
    """A code, compared and formatted as its wire string (``Code.IP_BANNED == "IP_BANNED"``)."""

    row: Row

    def __new__(cls, value: str, row: Row) -> Code:
        member = str.__new__(cls, value)
        member._value_ = value
        member.row = row
        return member

    # -- not errors ------------------------------------------------------------------------------------------
    OK = "OK", _api(None, simulated=False)  # a successful request (metric label only)
    CAPCHA_NOT_READY = "CAPCHA_NOT_READY", _api(None)
    OK_REPORT_RECORDED = "OK_REPORT_RECORDED", _api(None, label=False)
    # -- fatal: the key or the account ---------------------------------------------------------------------------
    ERROR_WRONG_USER_KEY = "ERROR_WRONG_USER_KEY", _api(
        _F, "The API key format is wrong: it must be 32 characters.")
    ERROR_KEY_DOES_NOT_EXIST = "ERROR_KEY_DOES_NOT_EXIST", _api(
        _F, "The API key does not exist, or the account has no threads.")
    IP_BANNED = "IP_BANNED", _api(
        _F, "Your IP address is banned after repeated requests with a wrong key. Try again later.")
    ERROR_IP_NOT_ALLOWED = "ERROR_IP_NOT_ALLOWED", _api(_F, "Requests from this IP are not allowed.", simulated=False)
    # -- capacity: no free thread ----------------------------------------------------------------------------
    ERROR_ZERO_BALANCE = "ERROR_ZERO_BALANCE", _api(
        _C, "You don't have free threads. Send fewer captchas at a time or upgrade your plan.")
    ERROR_NO_SLOT_AVAILABLE = "ERROR_NO_SLOT_AVAILABLE", _api(_C, "No slot available: all threads are busy.")
    ERROR_TOO_MUCH_REQUESTS = "ERROR_TOO_MUCH_REQUESTS", _api(_C, "Too many requests.", simulated=False)
    MAX_USER_TURN = "MAX_USER_TURN", _api(_C, "Too many requests.", label=False, simulated=False)
    # -- transient: retry the request ------------------------------------------------------------------------
    ERROR_SERVER_ERROR = "ERROR_SERVER_ERROR", _api(_R, "Internal server error. Retry later.")
    ERROR_INTERNAL_SERVER_ERROR = "ERROR_INTERNAL_SERVER_ERROR", _api(
        _R, "Internal server error. Retry later.", simulated=False)
    ERROR_PROXY_CONNECTION_FAILED = "ERROR_PROXY_CONNECTION_FAILED", _api(
        _R, "Could not connect through the proxy.", text="CaptchaAI could not connect through the proxy",
        simulated=False)
    # -- task: this task fails -------------------------------------------------------------------------------
    ERROR_CAPTCHA_UNSOLVABLE = "ERROR_CAPTCHA_UNSOLVABLE", _api(
        _T, "The captcha could not be solved.", text="CaptchaAI could not solve this captcha")
    ERROR_BAD_PARAMETERS = "ERROR_BAD_PARAMETERS", _api(
        _T, "Required parameters are missing or have a wrong format.",
        text="CaptchaAI rejected the task's parameters")
    ERROR_PAGEURL = "ERROR_PAGEURL", _api(
        _T, "The pageurl parameter is missing.", text="pageurl is missing or invalid")
    ERROR_GOOGLEKEY = "ERROR_GOOGLEKEY", _api(
        _T, "The googlekey parameter is missing or wrong.", text="googlekey (site key) is missing or malformed")
    ERROR_WRONG_GOOGLEKEY = "ERROR_WRONG_GOOGLEKEY", _api(
        _T, "The googlekey parameter is wrong.", text="googlekey is not valid for this page", simulated=False)
    ERROR_BAD_TOKEN_OR_PAGEURL = "ERROR_BAD_TOKEN_OR_PAGEURL", _api(
        _T, "The googlekey and pageurl pair is invalid.", text="the sitekey/pageurl pair is invalid",
        simulated=False)
    ERROR_BAD_PROXY = "ERROR_BAD_PROXY", _api(
        _T, "The proxy is missing, malformed or marked bad.", text="CaptchaAI marked the proxy as bad")
    ERROR_ZERO_CAPTCHA_FILESIZE = "ERROR_ZERO_CAPTCHA_FILESIZE", _api(
        _T, "The image is empty or smaller than the minimum size.", text="the image is empty or too small")
    ERROR_TOO_BIG_CAPTCHA_FILESIZE = "ERROR_TOO_BIG_CAPTCHA_FILESIZE", _api(
        _T, "The image is bigger than the maximum size.", text="the image is too large")
    ERROR_WRONG_FILE_EXTENSION = "ERROR_WRONG_FILE_EXTENSION", _api(
        _T, "Unsupported image extension. Allowed: jpg, jpeg, png, gif.", text="the image format is not supported")
    ERROR_IMAGE_TYPE_NOT_SUPPORTED = "ERROR_IMAGE_TYPE_NOT_SUPPORTED", _api(
        _T, "The image type is not recognised: send PNG, JPEG or GIF.", text="the image type is not supported")
    ERROR_UPLOAD = "ERROR_UPLOAD", _api(
        _T, "The image could not be read.", text="the image could not be uploaded (not a valid image)")
    ERROR_IMAGE_DIMENSIONS_TOO_LARGE = "ERROR_IMAGE_DIMENSIONS_TOO_LARGE", _api(
        _T, "The image dimensions are too large.", text="the image dimensions are too large", simulated=False)
    ERROR_WRONG_ID_FORMAT = "ERROR_WRONG_ID_FORMAT", _api(
        _T, "The captcha id has a wrong format: it must be a number.",
        text="CaptchaAI rejected the task id format")
    ERROR_WRONG_CAPTCHA_ID = "ERROR_WRONG_CAPTCHA_ID", _api(
        _T, "The captcha id does not exist or has expired.", text="CaptchaAI no longer knows this task id")
    ERROR_EMPTY_ACTION = "ERROR_EMPTY_ACTION", _api(_T, "The action parameter is missing.")
    # -- transport outcomes, named by the client ------------------------------------------------------------
    HTTP_429 = "HTTP_429", _transport(_C)  # the simulator's over_cap=http429
    HTTP_5XX = "HTTP_5XX", _transport(_R)  # the html502 fault
    HTTP_4XX = "HTTP_4XX", _transport(_R)  # e.g. 413 for an over-sized body
    NON_JSON = "NON_JSON", _transport(_R)  # the nonjson fault
    TIMEOUT = "TIMEOUT", _transport(_R)  # the slow fault, when slower than the client's timeout
    CONNECTION_ERROR = "CONNECTION_ERROR", _transport(_R)  # the reset fault
    # -- results this package writes --------------------------------------------------------------------------
    INVALID_TASK = "INVALID_TASK", _result(wire=_BAD_PARAMETERS)
    INVALID_JSON = "INVALID_JSON", _result(wire=_BAD_PARAMETERS)
    UNKNOWN_METHOD = "UNKNOWN_METHOD", _result(wire=_BAD_PARAMETERS)
    UNSUPPORTED_METHOD = "UNSUPPORTED_METHOD", _result(wire=_BAD_PARAMETERS)
    TASK_TOO_LARGE = "TASK_TOO_LARGE", _result(wire="ERROR_TOO_BIG_CAPTCHA_FILESIZE")
    MAX_ATTEMPTS_EXCEEDED = "MAX_ATTEMPTS_EXCEEDED", _result()  # MAX_ATTEMPTS failures at the API
    MAX_WORKER_DEATHS_EXCEEDED = "MAX_WORKER_DEATHS_EXCEEDED", _result()  # the task outlived MAX_WORKER_DEATHS workers
    DEADLINE_PASSED = "DEADLINE_PASSED", _result()
    TASK_EXPIRED = "TASK_EXPIRED", _result()
    WORKER_ERROR = "WORKER_ERROR", _result()  # a raw payload the worker failed on: dead-lettered, never retried
    SOLVE_TIMEOUT = "SOLVE_TIMEOUT", _result("no answer within the solve time limit")
    EXPIRED = "EXPIRED", _result()  # the producer's default for an expired result without a code
    ERROR = "ERROR", _result()  # the producer's default for a failed result without a code
    INVALID_RESULT = "INVALID_RESULT", _result("the stored result could not be read")  # the producer's reading

    @property
    def error_class(self) -> ErrorClass | None:
        return self.row.error_class

    @classmethod
    def of(cls, code: str) -> Code | None:
        """The row of a code string, or None for a code this table does not know."""
        return _BY_VALUE.get(code)


_BY_VALUE: Final[dict[str, Code]] = {c.value: c for c in Code}

#: the fatal codes, in table order (metrics pre-creates a series for each)
FATAL: Final = tuple(c for c in Code if c.error_class is ErrorClass.FATAL)
#: codes kept as metric label values
LABELS: Final = frozenset(c.value for c in Code if c.row.label)


def classify(code: str) -> ErrorClass:
    """The class of an error code; an unknown one fails only its task."""
    row = _BY_VALUE.get(code)
    return row.error_class if row is not None and row.error_class is not None else ErrorClass.TASK


def describe(code: str) -> str:
    """A short human-readable text for an error code (safe to show users)."""
    row = _BY_VALUE.get(code)
    text = row.row.text if row is not None else None
    return text or f"CaptchaAI answered {code}"


_WIRE_SHAPE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def wire_code(code: str) -> str:
    """The code a CaptchaAI-compatible server answers for a task that ended with `code`: CaptchaAI's own task
    codes as they are, a code of this package as its ``wire`` column says, anything else (a transport outcome,
    a fatal or capacity code, text that is not a code) ``ERROR_CAPTCHA_UNSOLVABLE``. A code CaptchaAI added later
    (unknown here, shaped like a code) is passed on: it came from CaptchaAI."""
    row = _BY_VALUE.get(code)
    if row is None:
        shaped = code.startswith("ERROR_") and len(code) <= 64 and set(code) <= _WIRE_SHAPE
        return code if shaped else _UNSOLVABLE
    if row.row.wire is not None:
        return row.row.wire
    if row.row.origin is Origin.API and row.error_class is ErrorClass.TASK:
        return row.value
    return _UNSOLVABLE


def server_text(code: str) -> str:
    """The ``error_text`` a CaptchaAI-compatible server sends with ``code``."""
    row = _BY_VALUE.get(code)
    text = row.row.server_text if row is not None else None
    return text or "Error."
