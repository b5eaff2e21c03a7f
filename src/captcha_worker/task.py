"""Task and Result models, their JSON codec and task validation.

A task body is a JSON object::

    {"id": "3f2a…", "method": "turnstile", "params": {"sitekey": "…", "pageurl": "…"},
     "submitted_at": 1764400000.1, "deadline": 1764400120.0, "reply_to": "p-1b2c…", "tenant": "team-a"}

``tenant`` names the share of the plan the task counts against (the gateway tags every task with its tenant,
docs/gateway.md); it is a DNS-label-like name (:data:`TENANT_RE`). Only ``id``, ``method`` and ``params`` are
required, so a task pushed by the seed guide's producer (a plain
``RPUSH`` of ``{"id", "method", "params"}``) is accepted as is.  Validation never raises for bad input: it
returns :class:`Invalid` with a reason that ends up in the dead-letter entry and in the producer's result.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from captcha_worker import methods
from captcha_worker.codes import Code

MAX_ID_LENGTH = 128
_ID_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
_REPLY_RE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
#: a tenant name: 1-32 lowercase letters, digits and inner hyphens (a DNS label; also a metric label value)
TENANT_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")
_JSON = json.JSONEncoder(separators=(",", ":"))  # one encoder: json.dumps(separators=...) builds one per call
#: params the worker sets itself; a task may not carry them
RESERVED_PARAMS = frozenset({"key", "json", "method", "soft_id", "header_acao", "pingback"})
#: deepest JSON nesting accepted (a task needs 2: the object and its params); checked before parsing
MAX_DEPTH = 32
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
#: params whose values are secrets: kept out of dead letters and any output (proxy keeps its host)
SECRET_PARAMS = frozenset({"proxy", "cookies", "cookie", "key", "password", "proxy_password", "proxypassword",
                           "api_key", "apikey"})
_PROXY_CREDENTIALS = re.compile(r"^[^@]*@")
_SECRET_NAMES = "|".join(sorted(SECRET_PARAMS))
#: secret params as they appear in text that is not JSON: "name": "value" and name=value
_SECRET_FIELD = re.compile(rf'("(?:{_SECRET_NAMES})"\s*:\s*")[^"]*|((?:{_SECRET_NAMES})=)[^&\s"]*', re.I)


@dataclass(frozen=True)
class Task:
    id: str
    method: str
    params: Mapping[str, str]
    kind: methods.Kind
    submitted_at: float
    deadline: float | None = None
    reply_to: str | None = None
    tenant: str | None = None

    def body(self) -> str:
        data: dict[str, Any] = {
            "id": self.id,
            "method": self.method,
            "params": dict(self.params),
            "submitted_at": self.submitted_at,
        }
        if self.deadline is not None:
            data["deadline"] = self.deadline
        if self.reply_to is not None:
            data["reply_to"] = self.reply_to
        if self.tenant is not None:
            data["tenant"] = self.tenant
        return _JSON.encode(data)

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline


@dataclass(frozen=True)
class Invalid:
    """A payload that cannot become a Task. ``task_id``/``reply_to`` are set when they could be read."""

    reason: str
    code: str = Code.INVALID_TASK
    task_id: str | None = None
    reply_to: str | None = None


def valid_task_id(task_id: str) -> bool:
    return bool(_ID_RE.fullmatch(task_id))


def valid_reply_to(reply_to: str) -> bool:
    return bool(_REPLY_RE.fullmatch(reply_to))


def valid_tenant(name: str) -> bool:
    return bool(TENANT_RE.fullmatch(name))


def _flat_params(raw: object) -> dict[str, str] | str:
    """Params as a flat str→str map, or the reason they are not one."""
    if not isinstance(raw, dict):
        return "params must be a JSON object"
    out: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            out[key] = "1" if value else "0"
        elif isinstance(value, str):
            out[key] = value
        elif isinstance(value, int | float) and math.isfinite(value):
            out[key] = str(value)
        else:
            return f"params must be a flat map of strings and numbers (param {_short(key)} is {type(value).__name__})"
    reserved = sorted(RESERVED_PARAMS.intersection(out))
    if reserved:
        return f"params must not set {', '.join(reserved)} (the worker sets them)"
    return out


def _timestamp(data: Mapping[str, Any], name: str) -> float | str | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"{name} must be a unix timestamp (number)"
    return float(value)


def parse_task(payload: bytes | str, *, max_bytes: int, now: float | None = None,
               foreign: Collection[str] = ()) -> Task | Invalid:
    """Decode and validate one task body (as stored in Redis or pushed raw by a seed-guide producer).

    Byte-safe and bounded: the size is checked before anything is decoded, the UTF-8 decode cannot raise, and
    the nesting depth is measured before ``json.loads`` (which would recurse), so any bytes give a Task or an
    Invalid with a reason."""
    data = decode_json(payload, max_bytes=max_bytes)
    if isinstance(data, Invalid):
        return data
    if not isinstance(data, dict):
        return Invalid("payload must be a JSON object with id, method and params", code=Code.INVALID_JSON)
    return make_task(data, now=now, foreign=foreign)


def decode_json(payload: bytes | str, *, max_bytes: int) -> object:
    """The decoded JSON value of a payload, or Invalid: too large, not UTF-8, nested too deep, not JSON."""
    if isinstance(payload, str) and payload.isascii():  # the common case: its UTF-8 is itself, one byte a char
        if len(payload) > max_bytes:
            return Invalid(f"payload is {len(payload)} bytes, over the limit of {max_bytes}",
                           code=Code.TASK_TOO_LARGE)
        text = payload
    else:
        raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
        if len(raw) > max_bytes:
            return Invalid(f"payload is {len(raw)} bytes, over the limit of {max_bytes}", code=Code.TASK_TOO_LARGE)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Invalid(f"payload is not valid UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start})",
                           code=Code.INVALID_JSON)
    if nesting_depth(text) > MAX_DEPTH:
        return Invalid(f"payload nests deeper than {MAX_DEPTH} levels", code=Code.INVALID_JSON)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError cannot happen below MAX_DEPTH; kept as a last guard
        return Invalid("payload is not valid JSON", code=Code.INVALID_JSON)


def nesting_depth(text: str) -> int:
    """The deepest nesting of [ and { in a JSON text, ignoring brackets inside strings. Linear time, no
    recursion: an upper bound first (the count of openers), the exact figure only when that bound is high."""
    bound = text.count("{") + text.count("[")
    if bound <= MAX_DEPTH:
        return bound
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(_BRACKET_STEP[c] for c in brackets), default=0)


def make_task(data: Mapping[str, Any], *, now: float | None = None, foreign: Collection[str] = ()) -> Task | Invalid:
    """Validate a decoded task object: id, method, flat params, required params, timestamps. `foreign`: the
    names of the kinds CaptchaAI does not solve (``methods.FOREIGN_KINDS``) that are accepted here, because an
    overflow provider takes them; any other such kind is UNSUPPORTED_METHOD."""
    task_id = data.get("id")
    if not isinstance(task_id, str) or not valid_task_id(task_id):
        return Invalid(f"id must be 1-{MAX_ID_LENGTH} characters of letters, digits and . _ : -")
    reply_to = data.get("reply_to")
    if reply_to is not None and (not isinstance(reply_to, str) or not valid_reply_to(reply_to)):
        return Invalid("reply_to must be a producer id (letters, digits, _ and -)", task_id=task_id)
    invalid = _Invalidator(task_id, reply_to)
    tenant = data.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not valid_tenant(tenant)):
        return invalid("tenant must be 1-32 lowercase letters, digits and inner hyphens")
    method = data.get("method")
    if not isinstance(method, str) or not method:
        return invalid("method must be a non-empty string")
    foreign_kind = methods.foreign_kind(method)
    if method.lower() in methods.UNSUPPORTED and (foreign_kind is None or foreign_kind.name not in foreign):
        return invalid(methods.UNSUPPORTED[method.lower()], code=Code.UNSUPPORTED_METHOD)
    params = _flat_params(data.get("params", {}))
    if isinstance(params, str):
        return invalid(params)
    accepted = foreign_kind is not None and foreign_kind.name in foreign
    kind = foreign_kind if accepted else methods.kind_of(method, params)
    if kind is None:
        known = ", ".join(sorted(methods.METHODS))
        return invalid(f"unknown method {_short(method)} (known: {known})", code=Code.UNKNOWN_METHOD)
    missing = methods.missing_param(kind, params)
    if missing is not None:
        return invalid(f"missing required param {missing.name!r} for {kind.name}", code=missing.missing_error)
    submitted_at = _timestamp(data, "submitted_at")
    deadline = _timestamp(data, "deadline")
    if isinstance(submitted_at, str):
        return invalid(submitted_at)
    if isinstance(deadline, str):
        return invalid(deadline)
    return Task(
        id=task_id,
        method=method,
        params=params,
        kind=kind,
        submitted_at=submitted_at if submitted_at is not None else (time.time() if now is None else now),
        deadline=deadline,
        reply_to=reply_to,
        tenant=tenant,
    )


def _short(value: str, limit: int = 40) -> str:
    """A user-supplied name quoted for a reason text, bounded (reasons are stored and shown)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


# -- safe views of payloads (dead letters, CLI output) ------------------------------------------------------
VIEW_MAX = 2048  # characters of a payload view kept in a dead letter
_VALUE_MAX = 200  # characters of one string value kept in a view
EXCERPT_BYTES = 2048  # bytes of a payload that is not a JSON object kept in a debugging window's excerpt


class ByteClass(enum.StrEnum):
    """The classes of bytes a fingerprint says were seen (what an operator needs to tell an encoding bug from a
    truncated body from binary garbage, without the bytes)."""

    PRINTABLE = "printable"  # ASCII 0x20-0x7e
    WHITESPACE = "whitespace"  # tab, newline, carriage return
    CONTROL = "control"  # the other ASCII control bytes, 0x7f included
    UTF8 = "non-ascii utf-8"  # bytes >= 0x80, and the payload is valid UTF-8
    NOT_UTF8 = "non-ascii not utf-8"  # bytes >= 0x80, and the payload is not valid UTF-8


_PRINTABLE = bytes(range(0x20, 0x7F))
_WHITESPACE = b"\t\n\r"
_ASCII = bytes(range(0x80))


@dataclass(frozen=True)
class Fingerprint:
    """What a dead letter keeps of a payload that is not a JSON object: its SHA-256, its length and the byte
    classes seen. Never the bytes: what does not parse cannot be redacted by meaning."""

    sha256: str
    size: int
    classes: tuple[ByteClass, ...]

    def text(self) -> str:
        return f"({self.size} bytes, sha256 {self.sha256}, bytes seen: {', '.join(self.classes) or 'none'})"

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "bytes": self.size, "classes": [c.value for c in self.classes]}

    @staticmethod
    def from_json(data: object) -> Fingerprint | None:
        """A fingerprint as a dead letter stores it; None for anything else."""
        try:
            if not isinstance(data, dict) or not isinstance(data["sha256"], str) or len(data["sha256"]) != 64:
                return None
            return Fingerprint(data["sha256"], int(data["bytes"]), tuple(ByteClass(c) for c in data["classes"]))
        except (KeyError, TypeError, ValueError):
            return None


def fingerprint(payload: bytes | str) -> Fingerprint:
    raw = _as_bytes(payload)
    seen: list[ByteClass] = []
    rest = raw.translate(None, _PRINTABLE)
    if len(rest) < len(raw):
        seen.append(ByteClass.PRINTABLE)
    ascii_rest = rest.translate(None, _WHITESPACE)
    if len(ascii_rest) < len(rest):
        seen.append(ByteClass.WHITESPACE)
    high = ascii_rest.translate(None, _ASCII)
    if len(high) < len(ascii_rest):
        seen.append(ByteClass.CONTROL)
    if high:
        seen.append(ByteClass.UTF8 if _utf8(raw) else ByteClass.NOT_UTF8)
    return Fingerprint(hashlib.sha256(raw).hexdigest(), len(raw), tuple(seen))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _as_bytes(payload: bytes | str) -> bytes:
    return payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload


@dataclass(frozen=True)
class PayloadView:
    """What a dead letter keeps of a payload. A JSON object is redacted by meaning (``text``: secret params
    masked); anything else only as its ``fingerprint`` (``text`` is its summary). ``excerpt``: the redacted head
    of such a payload, which is stored only while the operator keeps a debugging window open
    (``dead-letters keep-raw``), and only for that window."""

    text: str
    fingerprint: Fingerprint | None = None
    excerpt: str | None = None


def payload_view(payload: bytes | str, redact: Callable[[str], str], *, max_bytes: int) -> PayloadView:
    """What a dead letter may keep of a payload. A JSON object: secret params masked (proxy keeps its host), long
    values cut, then `redact` (the log redactor: registered secrets, ``user:pass@`` anywhere), then at most
    VIEW_MAX characters. Anything else (not JSON, not UTF-8, too large, a JSON value that is not an object, with
    no names to redact by): its fingerprint, and an excerpt for a debugging window (``raw_excerpt``)."""
    data = decode_json(payload, max_bytes=max_bytes)
    if isinstance(data, dict):
        return PayloadView(redact(_JSON.encode(_masked(data)))[:VIEW_MAX])
    fp = fingerprint(payload)
    return PayloadView(fp.text(), fp, raw_excerpt(payload, redact))


def raw_excerpt(payload: bytes | str, redact: Callable[[str], str]) -> str:
    """The head of a payload as text (bytes that are not UTF-8 escaped), secret fields shaped ``"name": "..."``
    and ``name=...`` masked, then `redact`: what a debugging window keeps. Only a pattern can be masked here:
    a secret of another shape stays, which is why it is kept only while the operator asks for it."""
    raw = _as_bytes(payload)
    head = raw[:EXCERPT_BYTES].decode("utf-8", "backslashreplace")
    masked = redact(_SECRET_FIELD.sub(lambda m: (m.group(1) or m.group(2)) + "***", head))
    return masked + (f"... ({len(raw)} bytes)" if len(raw) > EXCERPT_BYTES else "")


def _masked(value: object, name: str = "") -> object:
    """A copy with secret values masked and long strings cut (depth is bounded by decode_json)."""
    if name.lower() in SECRET_PARAMS:
        if name.lower() == "proxy" and isinstance(value, str) and "@" in value:
            return _PROXY_CREDENTIALS.sub("***@", value)
        return "***"
    if isinstance(value, dict):
        return {str(k): _masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str) and len(value) > _VALUE_MAX:
        return f"{value[:_VALUE_MAX]}... ({len(value)} characters)"
    return value


@dataclass(frozen=True)
class _Invalidator:
    task_id: str
    reply_to: str | None

    def __call__(self, reason: str, code: str = Code.INVALID_TASK) -> Invalid:
        return Invalid(reason, code=code, task_id=self.task_id, reply_to=self.reply_to)


class Status(enum.Enum):
    SOLVED = "solved"
    ERROR = "error"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Timings:
    """Unix timestamps of one task's life; any may be None when the stage did not happen."""

    submitted_at: float | None = None
    claimed_at: float | None = None
    started_at: float | None = None  # first in.php call
    solved_at: float | None = None  # answer received from res.php
    finished_at: float | None = None  # result written

    @property
    def queued(self) -> float | None:
        return _span(self.submitted_at, self.claimed_at)

    @property
    def solving(self) -> float | None:
        return _span(self.started_at, self.solved_at or self.finished_at)

    @property
    def total(self) -> float | None:
        return _span(self.submitted_at, self.finished_at)


def _span(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


@dataclass(frozen=True)
class Result:
    """What the worker writes for a task and the producer reads back."""

    id: str
    status: Status
    kind: str | None = None
    solution: str | None = None  # res.php `request` for solved tasks
    user_agent: str | None = None  # Enterprise / Cloudflare challenge answers
    code: str | None = None  # error code (CaptchaAI's, or ours: INVALID_TASK, MAX_ATTEMPTS_EXCEEDED, ...)
    text: str | None = None  # human-readable reason
    attempts: int = 0  # the attempt that gave this result: API-side failures before it + 1
    api_calls: int = 0
    timings: Timings = field(default_factory=Timings)
    token_lifetime_s: float | None = None
    captcha_id: str | None = None  # CaptchaAI's id of the solve that answered (for reportbad / reportgood)
    worker_deaths: int = 0  # workers that died (or stalled past their lease) while they held the task
    provider: str | None = None  # the overflow provider that solved it (None: CaptchaAI, the plan)
    cost: str | None = None  # what the overflow provider charged for it, money as a decimal string ("0.00145")

    def to_json(self) -> str:
        data: dict[str, Any] = {"id": self.id, "status": self.status.value}
        for name in ("kind", "solution", "user_agent", "code", "text", "token_lifetime_s", "captcha_id", "provider",
                     "cost"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        data["attempts"] = self.attempts
        data["api_calls"] = self.api_calls
        if self.worker_deaths:
            data["worker_deaths"] = self.worker_deaths
        data["timings"] = {k: v for k, v in vars(self.timings).items() if v is not None}
        return _JSON.encode(data)

    @staticmethod
    def from_json(payload: bytes | str) -> Result:
        data = json.loads(payload)
        timings = data.get("timings") or {}
        return Result(
            id=str(data["id"]),
            status=Status(data["status"]),
            kind=data.get("kind"),
            solution=data.get("solution"),
            user_agent=data.get("user_agent"),
            code=data.get("code"),
            text=data.get("text"),
            attempts=int(data.get("attempts", 0)),
            api_calls=int(data.get("api_calls", 0)),
            timings=Timings(**{k: float(v) for k, v in timings.items() if k in Timings.__dataclass_fields__}),
            token_lifetime_s=data.get("token_lifetime_s"),
            captcha_id=_opt_text(data.get("captcha_id")),
            worker_deaths=int(data.get("worker_deaths", 0)),
            provider=_opt_text(data.get("provider")),
            cost=_opt_text(data.get("cost")),
        )


def _opt_text(value: object) -> str | None:
    return None if value is None else str(value)
