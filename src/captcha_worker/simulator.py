"""A CaptchaAI-compatible simulator: ``/in.php`` and ``/res.php`` of the v1 protocol, for demos, staging
and load tests that must not spend plan threads.

What it models
--------------
* **The protocol.** GET (query) and POST (``application/x-www-form-urlencoded`` or ``multipart/form-data``;
  query and body are merged, the body wins); ``json=1`` gives ``{"status":1,"request":...}`` /
  ``{"status":0,"request":"ERROR_...","error_text":"..."}``, otherwise plain text ``OK|<value>`` or the bare
  code.  Protocol errors are HTTP 200, as on the real service.  JSON replies are ``application/json``, plain
  ones ``text/plain``.  Which task kinds exist, their required parameters, the error a missing one produces,
  the answer shape and the typical latency all come from :mod:`captcha_worker.methods`.
* **One plan.** The simulator models *one* account: ``threads`` plan threads shared by every accepted key
  (several keys behave like sub-keys of that account; ``threadsinfo`` reports the shared figures to each).
  A task is bound to the key that submitted it: another key asking for it gets ``ERROR_WRONG_CAPTCHA_ID``.
* **Threads.** A solve occupies a thread from its acceptance by ``in.php`` until its answer is ready.  With
  ``threads`` solves in flight a new submission is, depending on :class:`OverCap`: queued silently (its
  latency starts when a thread frees up: the official SDK's view), or refused with ``ERROR_ZERO_BALANCE``
  (the docs' view), ``ERROR_NO_SLOT_AVAILABLE`` or HTTP 429.
* **Time.** No timer or task per solve: every task has a ``ready_at`` timestamp, running tasks sit in a heap
  ordered by it, queued ones in a FIFO.  The state is advanced lazily, in timestamp order, on every request
  and on a cheap periodic tick, so ``in_flight``, ``max_in_flight`` and the time spent at the cap are exact
  whatever the request rate (a queued task starts at the instant a thread was freed, not when somebody
  next looked).
* **Latency** per kind: a normal distribution (mean, stddev) truncated to ``[0.1 * mean, mean + 4 * stddev]``,
  divided by ``speed``.  ``speed`` also divides how long answers are retained (default 10 min), so that load
  tests at high speed do not pile up memory.
* **Faults**, each a probability in 0..1 (see :class:`Faults`), and an IP ban after repeated bad keys.
* **Introspection** under ``/_sim/`` (``GET stats``, ``POST reset``, ``GET``/``POST config``): extra paths
  no CaptchaAI client calls; ``SimConfig.introspection=False`` removes them (for a simulator others reach).

Deliberately not modelled: ``solve.php``, ``res.php?action=get&ids=`` (several ids), pingback, image format
and dimension checks (only size and base64 are checked), a minimum image size, a balance that decreases.

Nothing secret is logged: no key, proxy, parameter or answer ever reaches a log line or the stats.  The only
log lines (logger ``captcha_worker.simulator``, one JSON object each) are an IP ban, a config change and a
reset.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import dataclasses
import enum
import heapq
import json
import logging
import math
import random
import re
import signal
import socket
import string
import struct
import time
import traceback
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Final

from aiohttp import web

from . import methods
from .methods import Answer, Kind

_log = logging.getLogger("captcha_worker.simulator")
_http_log = logging.getLogger("captcha_worker.simulator.http")

Clock = Callable[[], float]

MAX_IMAGE_BYTES: Final = 1024 * 1024  # "≤ 1024 KB" [DOC]
_CLIENT_MAX_SIZE: Final = 16 * 1024 * 1024  # BLS sends 9 images; larger bodies get HTTP 413
_TICK_S: Final = 0.5
_KEY_RE: Final = re.compile(r"[A-Za-z0-9]{32}")
_ID_RE: Final = re.compile(r"[0-9]{1,20}")
_PROXY_RE: Final = re.compile(
    r"(?:[^:@/\s]+:[^@/\s]+@)?"  # optional user:pass@
    r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?)"  # host, IPv4, or [IPv6]
    r":(?P<port>[0-9]{1,5})"
)
_PROXY_TYPES: Final = frozenset({"HTTP", "HTTPS", "SOCKS4", "SOCKS5"})
_GRID_CELLS: Final = MappingProxyType({"3x3": 9, "4x4": 16})
_BLS_PREFIX: Final = "image_base64_"
_DATA_URI_RE: Final = re.compile(r"^\s*data:[^,]*,")


# ------------------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------------------


class OverCap(enum.StrEnum):
    """What ``in.php`` does when all plan threads are busy."""

    QUEUE = "queue"  # accept; the task waits for a free thread before its latency starts (CaptchaAI SDK)
    ZERO_BALANCE = "zero_balance"  # ERROR_ZERO_BALANCE (CaptchaAI docs)
    NO_SLOT = "no_slot"  # ERROR_NO_SLOT_AVAILABLE (2captcha-style services)
    HTTP429 = "http429"  # HTTP 429 Too Many Requests


class Fault(enum.StrEnum):
    """Injectable faults. Each has a rate (field of the same name in :class:`Faults`)."""

    HTML502 = "html502"  # HTTP 502 with an HTML page (in.php and res.php)
    NONJSON = "nonjson"  # HTTP 200 with an HTML body that is neither JSON nor a protocol answer
    RESET = "reset"  # the connection is reset (TCP RST) without any response
    SLOW = "slow"  # the response is delayed by SimConfig.slow_seconds
    UNSOLVABLE = "unsolvable"  # per accepted task: it ends with ERROR_CAPTCHA_UNSOLVABLE (thread freed)
    SERVER_ERROR = "server_error"  # in.php answers ERROR_SERVER_ERROR (after validating the request)


_TRANSPORT_FAULTS: Final = (Fault.RESET, Fault.HTML502, Fault.NONJSON)


def _check_rate(name: str, rate: float) -> None:
    if not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
        raise ValueError(f"fault {name!r}: rate must be a number between 0 and 1, got {rate!r}")


@dataclass(frozen=True)
class Faults:
    """Fault rates, each 0..1. Transport faults (reset, html502, nonjson, slow) are drawn per in.php/res.php
    request and happen before the request has any effect; ``unsolvable`` is drawn per accepted task."""

    html502: float = 0.0
    nonjson: float = 0.0
    reset: float = 0.0
    slow: float = 0.0
    unsolvable: float = 0.0
    server_error: float = 0.0

    def __post_init__(self) -> None:
        for fault in Fault:
            _check_rate(fault.value, self.rate(fault))

    def rate(self, fault: Fault) -> float:
        value: float = getattr(self, fault.value)
        return value

    def with_rates(self, rates: Mapping[str, float]) -> Faults:
        """A copy with some rates changed; unknown names raise ValueError."""
        for name in rates:
            _fault_named(name)
        return dataclasses.replace(self, **{name: float(rate) for name, rate in rates.items()})


def _fault_named(name: str) -> Fault:
    try:
        return Fault(name)
    except ValueError:
        known = ", ".join(f.value for f in Fault)
        raise ValueError(f"unknown fault {name!r} (known: {known})") from None


@dataclass(frozen=True)
class Latency:
    """Solve time distribution of a kind, in seconds at speed 1."""

    mean_s: float
    stddev_s: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean_s) and self.mean_s > 0):
            raise ValueError(f"latency mean must be a positive number of seconds, got {self.mean_s!r}")
        if not (math.isfinite(self.stddev_s) and self.stddev_s >= 0):
            raise ValueError(f"latency stddev must be >= 0 seconds, got {self.stddev_s!r}")

    @classmethod
    def parse(cls, text: str) -> Latency:
        """``"MEAN:STDDEV"`` or ``"MEAN"`` (stddev 0)."""
        mean, _, stddev = text.strip().partition(":")
        try:
            return cls(float(mean), float(stddev) if stddev else 0.0)
        except ValueError as exc:
            raise ValueError(f"latency {text!r}: expected MEAN:STDDEV in seconds ({exc})") from None

    @property
    def low_s(self) -> float:
        return 0.1 * self.mean_s

    @property
    def high_s(self) -> float:
        return self.mean_s + 4.0 * self.stddev_s

    def sample(self, rng: random.Random, speed: float = 1.0) -> float:
        value = rng.gauss(self.mean_s, self.stddev_s) if self.stddev_s > 0 else self.mean_s
        return min(max(value, self.low_s), self.high_s) / speed

    def __str__(self) -> str:
        return f"{self.mean_s:g}:{self.stddev_s:g}"


def _kind_named(name: str) -> str:
    if name not in methods.KIND_NAMES:
        raise ValueError(f"unknown kind {name!r} (known: {', '.join(methods.KIND_NAMES)})")
    return name


def _check_key_format(key: str, where: str) -> None:
    if not _KEY_RE.fullmatch(key):
        raise ValueError(f"{where}: an API key must be 32 letters or digits")


@dataclass(frozen=True)
class SimConfig:
    """Everything configurable. Immutable: change it with :func:`dataclasses.replace` or
    :meth:`Simulator.reconfigure` (or ``POST /_sim/config``)."""

    threads: int = 10  # plan threads of the one simulated account (shared by all keys)
    over_cap: OverCap = OverCap.QUEUE
    latency: Mapping[str, Latency] = field(default_factory=dict)  # kind name -> override of methods' default
    speed: float = 1.0  # latencies and retention are divided by it
    faults: Faults = field(default_factory=Faults)
    keys: frozenset[str] | None = None  # accepted keys; None = any well-formed (32 alphanumeric) key
    balance: float = 10.0  # what getbalance says
    ban_after: int = 5  # bad-key requests from one IP within ban_window_seconds before IP_BANNED; 0 = never
    ban_window_seconds: float = 60.0
    ban_seconds: float = 300.0
    slow_seconds: float = 5.0  # delay of the `slow` fault
    retention_seconds: float = 600.0  # how long a solved task's answer stays readable (divided by speed)
    seed: int | None = None  # RNG seed (answers, latencies, faults, ids); None = unpredictable
    introspection: bool = True  # serve /_sim/*

    def __post_init__(self) -> None:
        object.__setattr__(self, "latency", MappingProxyType(dict(self.latency)))
        object.__setattr__(self, "over_cap", OverCap(self.over_cap))
        if not (isinstance(self.threads, int) and self.threads >= 1):
            raise ValueError(f"threads must be a whole number >= 1, got {self.threads!r}")
        for name in self.latency:
            _kind_named(name)
        _require(self.speed > 0, f"speed must be > 0, got {self.speed!r}")
        _require(self.balance >= 0, f"balance must be >= 0, got {self.balance!r}")
        _require(self.ban_after >= 0, f"ban_after must be >= 0, got {self.ban_after!r}")
        for name in ("ban_window_seconds", "ban_seconds", "slow_seconds"):
            value = getattr(self, name)
            _require(value >= 0, f"{name} must be >= 0, got {value!r}")
        _require(self.retention_seconds > 0, f"retention_seconds must be > 0, got {self.retention_seconds!r}")
        if self.keys is not None:
            object.__setattr__(self, "keys", frozenset(self.keys))
            for i, key in enumerate(sorted(self.keys), 1):
                _check_key_format(key, f"keys entry {i}")

    def latency_for(self, kind: Kind) -> Latency:
        return self.latency.get(kind.name) or Latency(kind.solve_mean_s, kind.solve_stddev_s)

    def describe(self) -> dict[str, object]:
        """JSON-ready view (the keys themselves are never shown, only how many)."""
        return {
            "threads": self.threads,
            "over_cap": self.over_cap.value,
            "latency": {k.name: str(self.latency_for(k)) for k in _unique_kinds()},
            "speed": self.speed,
            "faults": dataclasses.asdict(self.faults),
            "keys": "any" if self.keys is None else len(self.keys),
            "balance": self.balance,
            "ban_after": self.ban_after,
            "ban_window_seconds": self.ban_window_seconds,
            "ban_seconds": self.ban_seconds,
            "slow_seconds": self.slow_seconds,
            "retention_seconds": self.retention_seconds,
        }

    def patched(self, patch: Mapping[str, object]) -> SimConfig:
        """A copy with the fields of a ``POST /_sim/config`` body applied (faults and latency are merged)."""
        changes: dict[str, object] = {}
        for name, value in patch.items():
            parse = _PATCHERS.get(name)
            if parse is None:
                raise ValueError(f"unknown config field {name!r} (known: {', '.join(sorted(_PATCHERS))})")
            changes[name] = parse(self, value)
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _unique_kinds() -> Iterable[Kind]:
    return (methods.by_name(name) for name in methods.KIND_NAMES)


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return value


def _patch_faults(cfg: SimConfig, value: object) -> Faults:
    if not isinstance(value, dict):
        raise ValueError('faults must be an object like {"html502": 0.5}')
    return cfg.faults.with_rates({str(k): _number(v, f"fault {k!r}") for k, v in value.items()})


def _patch_latency(cfg: SimConfig, value: object) -> Mapping[str, Latency]:
    if not isinstance(value, dict):
        raise ValueError('latency must be an object like {"turnstile": "12:3"}')
    merged = dict(cfg.latency)
    for name, spec in value.items():
        if isinstance(spec, list) and len(spec) == 2:
            merged[_kind_named(str(name))] = Latency(_number(spec[0], "mean"), _number(spec[1], "stddev"))
        else:
            merged[_kind_named(str(name))] = Latency.parse(str(spec))
    return merged


def _patch_keys(_cfg: SimConfig, value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _parse_keys(value)
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValueError("keys must be null (any key), a list of keys or a comma-separated string")
    return frozenset(value)


def _float_field(name: str) -> Callable[[SimConfig, object], float]:
    return lambda _cfg, value: _number(value, name)


_PATCHERS: Final[Mapping[str, Callable[[SimConfig, object], object]]] = MappingProxyType({
    "threads": lambda _c, v: _whole(v, "threads"),
    "over_cap": lambda _c, v: _over_cap_named(str(v)),
    "speed": _float_field("speed"),
    "faults": _patch_faults,
    "latency": _patch_latency,
    "keys": _patch_keys,
    "balance": _float_field("balance"),
    "ban_after": lambda _c, v: _whole(v, "ban_after"),
    "ban_window_seconds": _float_field("ban_window_seconds"),
    "ban_seconds": _float_field("ban_seconds"),
    "slow_seconds": _float_field("slow_seconds"),
    "retention_seconds": _float_field("retention_seconds"),
})


def _over_cap_named(name: str) -> OverCap:
    try:
        return OverCap(name)
    except ValueError:
        known = ", ".join(o.value for o in OverCap)
        raise ValueError(f"unknown over-cap behaviour {name!r} (known: {known})") from None


def _parse_keys(text: str) -> frozenset[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise ValueError("--keys: give at least one key")
    for i, key in enumerate(keys, 1):
        _check_key_format(key, f"--keys entry {i}")
    return frozenset(keys)


# ------------------------------------------------------------------------------------------------------------
# Protocol codes and replies
# ------------------------------------------------------------------------------------------------------------


class Code(enum.StrEnum):
    """Codes the simulator answers with (``methods`` may name others as missing-param errors)."""

    NOT_READY = "CAPCHA_NOT_READY"
    REPORT_RECORDED = "OK_REPORT_RECORDED"
    WRONG_USER_KEY = "ERROR_WRONG_USER_KEY"
    KEY_DOES_NOT_EXIST = "ERROR_KEY_DOES_NOT_EXIST"
    IP_BANNED = "IP_BANNED"
    ZERO_BALANCE = "ERROR_ZERO_BALANCE"
    NO_SLOT = "ERROR_NO_SLOT_AVAILABLE"
    BAD_PARAMETERS = "ERROR_BAD_PARAMETERS"
    BAD_PROXY = "ERROR_BAD_PROXY"
    ZERO_FILESIZE = "ERROR_ZERO_CAPTCHA_FILESIZE"
    TOO_BIG = "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
    UPLOAD = "ERROR_UPLOAD"
    SERVER_ERROR = "ERROR_SERVER_ERROR"
    UNSOLVABLE = "ERROR_CAPTCHA_UNSOLVABLE"
    WRONG_ID_FORMAT = "ERROR_WRONG_ID_FORMAT"
    WRONG_CAPTCHA_ID = "ERROR_WRONG_CAPTCHA_ID"
    EMPTY_ACTION = "ERROR_EMPTY_ACTION"


_ERROR_TEXT: Final[Mapping[str, str]] = MappingProxyType({
    Code.WRONG_USER_KEY: "The API key format is wrong: it must be 32 characters.",
    Code.KEY_DOES_NOT_EXIST: "The API key does not exist.",
    Code.IP_BANNED: "Your IP address is banned after repeated requests with a wrong key. Try again later.",
    Code.ZERO_BALANCE: "You don't have free threads. Send fewer captchas at a time or upgrade your plan.",
    Code.NO_SLOT: "No slot available: all threads are busy.",
    Code.BAD_PARAMETERS: "Required parameters are missing or have a wrong format.",
    Code.BAD_PROXY: "The proxy is missing, malformed or marked bad.",
    Code.ZERO_FILESIZE: "The image is empty.",
    Code.TOO_BIG: "The image is bigger than 1024 KB.",
    Code.UPLOAD: "The image could not be decoded.",
    Code.SERVER_ERROR: "Internal server error. Retry later.",
    Code.UNSOLVABLE: "The captcha could not be solved.",
    Code.WRONG_ID_FORMAT: "The captcha id has a wrong format: it must be a number.",
    Code.WRONG_CAPTCHA_ID: "The captcha id does not exist or has expired.",
    Code.EMPTY_ACTION: "The action parameter is missing.",
    "ERROR_PAGEURL": "The pageurl parameter is missing.",
    "ERROR_GOOGLEKEY": "The googlekey parameter is missing or wrong.",
})

_HTML_502: Final = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
_HTML_GARBAGE: Final = (
    "<!DOCTYPE html><html><head><title>Just a moment...</title></head>"
    "<body><p>Service temporarily unavailable, please try again.</p></body></html>"
)


def _json_response(body: Mapping[str, object], status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body, separators=(",", ":")),
                        content_type="application/json")


def _plain(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/plain")


def _ok(value: str | int, as_json: bool, extra: Mapping[str, str] | None = None) -> web.Response:
    if as_json:
        return _json_response({"status": 1, "request": value, **(extra or {})})
    return _plain(f"OK|{value}")


def _error(code: str, as_json: bool) -> web.Response:
    if not as_json:
        return _plain(code)
    body: dict[str, object] = {"status": 0, "request": code}
    if code != Code.NOT_READY:
        body["error_text"] = _ERROR_TEXT.get(code, "Error.")
    return _json_response(body)


def _truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """The merged parameters of one request: text fields and uploaded files (multipart)."""

    fields: Mapping[str, str]
    files: Mapping[str, bytes]

    def text(self, name: str) -> str:
        return self.fields.get(name, "")

    def presence(self) -> Mapping[str, str]:
        """Fields plus non-empty uploads, for :func:`methods.missing_param`."""
        return {**self.fields, **{name: "<file>" for name, data in self.files.items() if data}}

    @property
    def as_json(self) -> bool:
        return _truthy(self.text("json"))


async def read_params(request: web.Request) -> Params:
    fields = {name: value for name, value in request.query.items()}
    files: dict[str, bytes] = {}
    if request.method != "POST" or not request.can_read_body:
        return Params(fields, files)
    try:
        form = await request.post()
    except (ValueError, UnicodeDecodeError):  # malformed body: treated as empty
        return Params(fields, files)
    for name, value in form.items():
        if isinstance(value, web.FileField):
            files[name] = value.file.read()
        elif isinstance(value, bytes | bytearray):
            fields[name] = value.decode("utf-8", "replace")
        else:
            fields[name] = value
    return Params(fields, files)


def decode_base64_image(text: str) -> bytes | None:
    """Lenient base64: strips a ``data:...;base64,`` prefix and whitespace, accepts ``+`` turned into spaces
    by careless form encoding, URL-safe characters and missing padding. None when it cannot be decoded."""
    data = _DATA_URI_RE.sub("", text, count=1).strip().replace(" ", "+")
    data = "".join(data.split()).replace("-", "+").replace("_", "/")
    data += "=" * (-len(data) % 4)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _image_fields(kind: Kind) -> tuple[str, ...]:
    return tuple(p.name for p in kind.required
                 if p.name in ("file", "body") or p.name.startswith(_BLS_PREFIX))


def _image_bytes(name: str, params: Params) -> bytes | None:
    if name in params.files:
        raw = params.files[name]
        return raw if name == "file" else decode_base64_image(raw.decode("latin-1"))
    text = params.text(name)
    return text.encode("latin-1", "replace") if name == "file" else decode_base64_image(text)


def _check_images(kind: Kind, params: Params) -> str | None:
    names = _image_fields(kind)
    if any(n.startswith(_BLS_PREFIX) for n in names):
        extra = {n for n in (*params.fields, *params.files) if n.startswith(_BLS_PREFIX)} - set(names)
        if extra:
            return Code.BAD_PARAMETERS  # BLS takes exactly image_base64_1..9
    for name in names:
        data = _image_bytes(name, params)
        if data is None:
            return Code.UPLOAD
        if not data:
            return Code.ZERO_FILESIZE
        if len(data) > MAX_IMAGE_BYTES:
            return Code.TOO_BIG
    return None


def _check_proxy(_kind: Kind, params: Params) -> str | None:
    proxy = params.text("proxy")
    if proxy:
        match = _PROXY_RE.fullmatch(proxy.strip())
        if match is None or not 1 <= int(match["port"]) <= 65535:
            return Code.BAD_PROXY
    proxytype = params.text("proxytype")
    if proxytype and proxytype.strip().upper() not in _PROXY_TYPES:
        return Code.BAD_PROXY
    return None


def _check_grid(_kind: Kind, params: Params) -> str | None:
    if "grid_size" in params.fields and params.text("grid_size").strip().lower() not in _GRID_CELLS:
        return Code.BAD_PARAMETERS
    return None


def _check_text_rules(kind: Kind, params: Params) -> str | None:
    if kind.answer is Answer.TEXT and TextRules.parse(params) is None:
        return Code.BAD_PARAMETERS
    return None


_CHECKS: Final = (_check_proxy, _check_images, _check_grid, _check_text_rules)


def check_submission(kind: Kind, params: Params) -> str | None:
    """The error code in.php answers for this submission, or None when it is acceptable."""
    missing = methods.missing_param(kind, params.presence())
    if missing is not None:
        return missing.missing_error
    for check in _CHECKS:
        code = check(kind, params)
        if code is not None:
            return code
    return None


# ------------------------------------------------------------------------------------------------------------
# Answers
# ------------------------------------------------------------------------------------------------------------

_URLSAFE: Final = string.ascii_letters + string.digits + "-_"
_B64: Final = string.ascii_letters + string.digits + "+/"
_USER_AGENTS: Final = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36",
)
#: parameters the answer generators read; only these are kept with a task
_ANSWER_INPUTS: Final = frozenset({"challenge", "gt", "userAgent", "grid_size", "numeric", "min_len",
                                   "max_len"})


@dataclass(frozen=True)
class Solution:
    """A solved task's answer: ``request``; kinds answered with a user agent also carry ``result`` (= request)
    and ``user_agent``."""

    request: str
    user_agent: str | None = None

    def extra(self) -> dict[str, str]:
        return {} if self.user_agent is None else {"result": self.request, "user_agent": self.user_agent}


@dataclass(frozen=True)
class TextRules:
    """Image answer constraints: ``numeric`` 0 any, 1 digits, 2 letters, 3 digits or letters, 4 both;
    ``min_len``/``max_len`` 0 = no limit."""

    numeric: int = 0
    min_len: int = 0
    max_len: int = 0

    @classmethod
    def parse(cls, params: Mapping[str, str] | Params) -> TextRules | None:
        fields = params.fields if isinstance(params, Params) else params
        try:
            rules = cls(*(int(fields.get(n) or 0) for n in ("numeric", "min_len", "max_len")))
        except ValueError:
            return None
        return rules if rules.valid() else None

    def valid(self) -> bool:
        lengths_ok = 0 <= self.min_len <= 100 and 0 <= self.max_len <= 100
        ordered = not (self.min_len and self.max_len and self.min_len > self.max_len)
        both_fit = self.numeric != 4 or self.max_len == 0 or self.max_len >= 2
        return 0 <= self.numeric <= 4 and lengths_ok and ordered and both_fit

    def generate(self, rng: random.Random) -> str:
        low = self.min_len or min(4, self.max_len or 4)
        high = self.max_len or max(low, 7)
        length = rng.randint(max(low, 2 if self.numeric == 4 else 1), high)
        digits, letters = string.digits, string.ascii_lowercase
        choices = {1: digits, 2: letters, 3: rng.choice((digits, letters))}
        alphabet = choices.get(self.numeric, digits + letters)
        chars = rng.choices(alphabet, k=length)
        if self.numeric == 4:
            chars[0], chars[1] = rng.choice(digits), rng.choice(letters)
            rng.shuffle(chars)
        return "".join(chars)


def _chars(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choices(alphabet, k=n))


def _hex(rng: random.Random, n: int) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


TokenStyle = Callable[[random.Random, Mapping[str, str], int], str]


def _recaptcha_token(rng: random.Random, _p: Mapping[str, str], _t: int) -> str:
    return "03A" + _chars(rng, _URLSAFE, rng.randint(420, 560))


def _turnstile_token(rng: random.Random, _p: Mapping[str, str], _t: int) -> str:
    return f"0.{_chars(rng, _URLSAFE, rng.randint(300, 600))}.{_hex(rng, 64)}"


def _cf_clearance(rng: random.Random, _p: Mapping[str, str], wall: int) -> str:
    return f"{_chars(rng, _URLSAFE, 43)}-{wall}-1.2.1.1-{_chars(rng, _URLSAFE + '.', rng.randint(250, 320))}"


def _friendly_token(rng: random.Random, _p: Mapping[str, str], _t: int) -> str:
    return ".".join((_hex(rng, 64), _chars(rng, _B64, 120), _chars(rng, _B64, rng.randint(200, 400)),
                     _chars(rng, _B64, 16)))


def _lemin_token(rng: random.Random, _p: Mapping[str, str], _t: int) -> str:
    uuid = "-".join(_hex(rng, n) for n in (8, 4, 4, 4, 12))
    answer = "0x" + _chars(rng, "0123456789abcdefx", rng.randint(60, 90))
    return json.dumps({"answer": answer, "challenge_id": uuid}, separators=(",", ":"))


def _generic_token(rng: random.Random, _p: Mapping[str, str], _t: int) -> str:
    return _chars(rng, _URLSAFE, rng.randint(200, 400))


#: token look per kind name; a kind missing here (e.g. newly added to ``methods``) gets a generic token
_TOKEN_STYLES: Final[Mapping[str, TokenStyle]] = MappingProxyType({
    "recaptcha_v2": _recaptcha_token,
    "recaptcha_v2_enterprise": _recaptcha_token,
    "recaptcha_v3": _recaptcha_token,
    "turnstile": _turnstile_token,
    "cloudflare_challenge": _cf_clearance,
    "friendly_captcha": _friendly_token,
    "lemin": _lemin_token,
})


def _token(kind: Kind, rng: random.Random, params: Mapping[str, str], wall: int) -> str:
    return _TOKEN_STYLES.get(kind.name, _generic_token)(rng, params, wall)


def _user_agent(rng: random.Random, params: Mapping[str, str]) -> str:
    return params.get("userAgent") or rng.choice(_USER_AGENTS).format(v=rng.randint(120, 140))


def _geetest(kind: Kind, rng: random.Random, params: Mapping[str, str], wall: int) -> str:
    if any(p.name == "challenge" for p in kind.required):  # v3
        validate = _hex(rng, 32)
        challenge = params.get("challenge", _hex(rng, 32)) + _chars(rng, string.ascii_lowercase, 2)
        answer = {"challenge": challenge, "validate": validate, "seccode": f"{validate}|jordan"}
    else:  # v4
        answer = {"captcha_id": params.get("gt", _hex(rng, 32)), "lot_number": _hex(rng, 32),
                  "pass_token": _hex(rng, 64), "gen_time": str(wall),
                  "captcha_output": _chars(rng, _URLSAFE, rng.randint(120, 200))}
    return json.dumps(answer, separators=(",", ":"))


def _cells(kind: Kind, params: Mapping[str, str]) -> int:
    grid = params.get("grid_size", "").strip().lower()
    if grid in _GRID_CELLS:
        return _GRID_CELLS[grid]
    return sum(1 for name in _image_fields(kind) if name.startswith(_BLS_PREFIX)) or 9


def _indices(kind: Kind, rng: random.Random, params: Mapping[str, str]) -> str:
    cells = _cells(kind, params)
    chosen = sorted(rng.sample(range(1, cells + 1), rng.randint(1, max(1, cells // 2))))
    return json.dumps(chosen, separators=(",", ":"))


def make_solution(kind: Kind, rng: random.Random, params: Mapping[str, str], wall: int) -> Solution:
    """A random answer in the shape CaptchaAI gives for ``kind`` (``wall``: unix time of the solve)."""
    match kind.answer:
        case Answer.TEXT:
            return Solution((TextRules.parse(params) or TextRules()).generate(rng))
        case Answer.TOKEN:
            return Solution(_token(kind, rng, params, wall))
        case Answer.TOKEN_WITH_UA:
            return Solution(_token(kind, rng, params, wall), _user_agent(rng, params))
        case Answer.GEETEST:
            return Solution(_geetest(kind, rng, params, wall))
        case Answer.INDICES:
            return Solution(_indices(kind, rng, params))


# ------------------------------------------------------------------------------------------------------------
# Plan threads: a heap of running tasks by ready_at and a FIFO of queued ones, advanced lazily
# ------------------------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class SimTask:
    """One accepted task. The answer is regenerated from ``seed`` when read (stable, and cheap to keep)."""

    id: int
    kind: Kind
    owner: str
    inputs: Mapping[str, str]  # the few params the answer depends on
    seed: int
    wall: int  # unix time of submission (answers carrying a timestamp use it)
    unsolvable: bool
    duration: float  # solve time once a thread is free
    ready_at: float | None = None  # None while queued

    def solution(self) -> Solution:
        return make_solution(self.kind, random.Random(self.seed), self.inputs, self.wall)


@dataclass(slots=True)
class Meter:
    """Integrals over time of the in-flight count, from ``since``."""

    since: float
    last: float
    max_in_flight: int = 0
    at_cap_s: float = 0.0  # time with in_flight >= threads
    busy_s: float = 0.0  # thread-seconds in use

    def observe(self, t: float, in_flight: int, threads: int) -> None:
        dt = max(0.0, t - self.last)
        if in_flight >= threads:
            self.at_cap_s += dt
        self.busy_s += in_flight * dt
        self.last = max(self.last, t)


class Scheduler:
    """Thread accounting. Call :meth:`advance` with the current time before looking at or changing the
    state; it processes completions in ``ready_at`` order, starting queued tasks at the exact instant a
    thread frees."""

    def __init__(self, threads: int, now: float) -> None:
        self._threads = threads
        self._running: list[tuple[float, int, SimTask]] = []
        self._waiting: deque[SimTask] = deque()
        self.meter = Meter(since=now, last=now)
        self.queued_total = 0

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def queue_length(self) -> int:
        return len(self._waiting)

    def has_room(self) -> bool:
        return not self._waiting and len(self._running) < self._threads

    def advance(self, now: float) -> list[SimTask]:
        """Completes every task ready by ``now``; returns them in completion order."""
        finished: list[SimTask] = []
        while self._running and self._running[0][0] <= now:
            t = self._running[0][0]
            self._observe(t)
            finished.append(heapq.heappop(self._running)[2])
            self._fill(t)
        self._observe(now)
        return finished

    def start(self, task: SimTask, now: float) -> None:
        self._observe(now)
        task.ready_at = now + task.duration
        heapq.heappush(self._running, (task.ready_at, task.id, task))
        self.meter.max_in_flight = max(self.meter.max_in_flight, len(self._running))

    def wait(self, task: SimTask) -> None:
        self._waiting.append(task)
        self.queued_total += 1

    def set_threads(self, threads: int, now: float) -> None:
        self._observe(now)
        self._threads = threads
        self._fill(now)

    def reset_meter(self, now: float) -> None:
        self.meter = Meter(since=now, last=now, max_in_flight=len(self._running))
        self.queued_total = 0

    def _fill(self, t: float) -> None:
        while self._waiting and len(self._running) < self._threads:
            self.start(self._waiting.popleft(), t)

    def _observe(self, t: float) -> None:
        self.meter.observe(t, len(self._running), self._threads)


# ------------------------------------------------------------------------------------------------------------
# IP bans
# ------------------------------------------------------------------------------------------------------------


class BanList:
    """Bad-key strikes per client IP within a sliding window, and the bans they caused."""

    def __init__(self) -> None:
        self._strikes: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}

    def banned(self, ip: str, now: float) -> bool:
        until = self._until.get(ip)
        if until is not None and until <= now:
            del self._until[ip]
            return False
        return until is not None

    def strike(self, ip: str, now: float, cfg: SimConfig) -> bool:
        """Records a bad-key request; True when it bans the IP."""
        if cfg.ban_after <= 0:
            return False
        strikes = self._strikes.setdefault(ip, deque())
        strikes.append(now)
        while strikes and strikes[0] <= now - cfg.ban_window_seconds:
            strikes.popleft()
        if len(strikes) < cfg.ban_after:
            return False
        del self._strikes[ip]
        self._until[ip] = now + cfg.ban_seconds
        return True

    def prune(self, now: float, window: float) -> None:
        for ip in [ip for ip, s in self._strikes.items() if not s or s[-1] <= now - window]:
            del self._strikes[ip]
        for ip in [ip for ip, until in self._until.items() if until <= now]:
            del self._until[ip]


# ------------------------------------------------------------------------------------------------------------
# Counters and stats
# ------------------------------------------------------------------------------------------------------------


class Endpoint(enum.StrEnum):
    IN = "in.php"
    RES = "res.php"


class Action(enum.StrEnum):
    """res.php actions, plus buckets for a missing and an unknown one."""

    GET = "get"
    THREADSINFO = "threadsinfo"
    GETBALANCE = "getbalance"
    REPORTBAD = "reportbad"
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


@dataclass
class Counters:
    calls: Counter[Endpoint] = field(default_factory=Counter)
    actions: Counter[Action] = field(default_factory=Counter)
    faults: Counter[Fault] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # error code -> replies
    submitted: int = 0
    solved: int = 0
    failed: int = 0
    over_cap_rejections: int = 0
    reportbad: int = 0
    bad_key: int = 0
    ip_bans: int = 0


@dataclass(frozen=True)
class SimStats:
    """A snapshot of the counters (``GET /_sim/stats`` serves :meth:`as_dict`); ``stats["name"]`` works
    too."""

    calls: Mapping[str, int]  # per endpoint
    res_actions: Mapping[str, int]  # per res.php action
    faults: Mapping[str, int]  # injected, per fault
    errors: Mapping[str, int]  # error replies, per code (CAPCHA_NOT_READY included)
    submitted: int  # accepted by in.php (queued ones included)
    solved: int  # finished with an answer
    failed: int  # finished with ERROR_CAPTCHA_UNSOLVABLE
    in_flight: int  # threads in use now
    max_in_flight: int
    threads: int
    queued: int  # tasks that had to wait for a thread (over_cap=queue)
    queue_length: int  # waiting now
    over_cap_rejections: int
    reportbad: int
    bad_key: int  # requests rejected for their key
    ip_bans: int  # bans imposed
    at_cap_seconds: float  # time during which in_flight >= threads
    busy_thread_seconds: float  # integral of in_flight over time
    window_seconds: float  # observation window: since start or the last reset
    utilisation: float  # busy_thread_seconds / (threads * window_seconds)

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def __getitem__(self, name: str) -> object:
        return self.as_dict()[name]


# ------------------------------------------------------------------------------------------------------------
# The simulator
# ------------------------------------------------------------------------------------------------------------

_Handler = Callable[[Params, str, float], web.Response]
_Route = Callable[[web.Request], Awaitable[web.Response]]


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
        self._next_id = self._rng.randrange(10**10, 7 * 10**10)

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
        _event("config_changed", fields=changed)

    def reset(self) -> None:
        """Clears counters and restarts the observation window; config, tasks and bans stay."""
        now = self._clock()
        self._advance(now)
        self._scheduler.reset_meter(now)
        self._counters = Counters()
        _event("reset")

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
            over_cap_rejections=c.over_cap_rejections, reportbad=c.reportbad, bad_key=c.bad_key,
            ip_bans=c.ip_bans, at_cap_seconds=s.meter.at_cap_s, busy_thread_seconds=s.meter.busy_s,
            window_seconds=window,
            utilisation=s.meter.busy_s / (s.threads * window) if window > 0 else 0.0,
        )

    def housekeep(self) -> None:
        """Advances time and drops expired answers and stale ban records (the periodic tick calls it)."""
        now = self._clock()
        self._advance(now)
        while self._expiry and self._expiry[0][0] <= now:
            self._tasks.pop(self._expiry.popleft()[1], None)
        self._bans.prune(now, self._config.ban_window_seconds)

    def _advance(self, now: float) -> None:
        retention = self._config.retention_seconds / self._config.speed
        for task in self._scheduler.advance(now):
            if task.unsolvable:
                self._counters.failed += 1
            else:
                self._counters.solved += 1
            self._expiry.append(((task.ready_at or now) + retention, task.id))

    # -- HTTP ------------------------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=_CLIENT_MAX_SIZE)
        for path, endpoint, handler in (("/in.php", Endpoint.IN, self._submit),
                                        ("/res.php", Endpoint.RES, self._result)):
            route = self._route(endpoint, handler)
            app.router.add_get(path, route, allow_head=False)
            app.router.add_post(path, route)
        if self._config.introspection:
            app.router.add_get("/_sim/stats", self._http_stats)
            app.router.add_post("/_sim/reset", self._http_reset)
            app.router.add_get("/_sim/config", self._http_config)
            app.router.add_post("/_sim/config", self._http_config)
        app.cleanup_ctx.append(self._ticker)
        return app

    async def _ticker(self, _app: web.Application) -> AsyncIterator[None]:
        async def tick() -> None:
            while True:
                await asyncio.sleep(_TICK_S)
                self.housekeep()

        task = asyncio.create_task(tick())
        yield
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task

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
        params = await read_params(request)
        if endpoint is Endpoint.RES:
            self._counters.actions[Action.parse(params.text("action"))] += 1
        now = self._clock()
        self._advance(now)
        refusal = self._gate(request.remote or "", params, now)
        return refusal if refusal is not None else handler(params, params.text("key"), now)

    def _fail(self, code: str, as_json: bool) -> web.Response:
        """An error reply, counted by code."""
        self._counters.errors[code] += 1
        return _error(code, as_json)

    def _draw(self, fault: Fault) -> bool:
        rate = self._config.faults.rate(fault)
        hit = rate > 0 and self._rng.random() < rate
        if hit:
            self._counters.faults[fault] += 1
        return hit

    def _transport_fault(self, request: web.Request) -> web.Response | None:
        for fault in _TRANSPORT_FAULTS:
            if self._draw(fault):
                return _FAULT_RESPONSES[fault](request)
        return None

    def _gate(self, ip: str, params: Params, now: float) -> web.Response | None:
        """IP ban and key checks, common to both endpoints."""
        if self._bans.banned(ip, now):
            return self._fail(Code.IP_BANNED, params.as_json)
        key = params.text("key")
        keys = self._config.keys
        code = (Code.WRONG_USER_KEY if not _KEY_RE.fullmatch(key)
                else Code.KEY_DOES_NOT_EXIST if keys is not None and key not in keys else None)
        if code is None:
            return None
        self._counters.bad_key += 1
        if self._bans.strike(ip, now, self._config):
            self._counters.ip_bans += 1
            _event("ip_banned", ip=ip, seconds=self._config.ban_seconds)
        return self._fail(code, params.as_json)

    # -- in.php ----------------------------------------------------------------------------------------------

    def _submit(self, params: Params, key: str, now: float) -> web.Response:
        as_json = params.as_json
        method = params.text("method").strip()
        kind = methods.kind_of(method, params.fields) if method else None
        code = Code.BAD_PARAMETERS if kind is None else check_submission(kind, params)
        if code is not None or kind is None:
            return self._fail(code or Code.BAD_PARAMETERS, as_json)
        if self._draw(Fault.SERVER_ERROR):
            return self._fail(Code.SERVER_ERROR, as_json)
        if not self._scheduler.has_room() and self._config.over_cap is not OverCap.QUEUE:
            self._counters.over_cap_rejections += 1
            return self._over_cap(as_json)
        task = self._new_task(kind, key, params, now)
        if self._scheduler.has_room():
            self._scheduler.start(task, now)
        else:
            self._scheduler.wait(task)
        self._counters.submitted += 1
        return _ok(task.id if kind.method == "userrecaptcha" else str(task.id), as_json)

    def _over_cap(self, as_json: bool) -> web.Response:
        mode = self._config.over_cap
        if mode is OverCap.HTTP429:
            return web.Response(status=429, text="429 Too Many Requests", headers={"Retry-After": "5"})
        return self._fail(Code.ZERO_BALANCE if mode is OverCap.ZERO_BALANCE else Code.NO_SLOT, as_json)

    def _new_task(self, kind: Kind, key: str, params: Params, now: float) -> SimTask:
        self._next_id += self._rng.randint(1, 97)
        inputs = {k: v for k, v in params.fields.items() if k in _ANSWER_INPUTS}
        task = SimTask(
            id=self._next_id, kind=kind, owner=key, inputs=inputs or _NO_INPUTS,
            seed=self._rng.getrandbits(64), wall=int(time.time()),
            unsolvable=self._draw(Fault.UNSOLVABLE),
            duration=self._config.latency_for(kind).sample(self._rng, self._config.speed),
        )
        self._tasks[task.id] = task
        return task

    # -- res.php ---------------------------------------------------------------------------------------------

    def _result(self, params: Params, key: str, now: float) -> web.Response:
        as_json = params.as_json
        match Action.parse(params.text("action")):
            case Action.GET:
                return self._get(params, key, now)
            case Action.THREADSINFO:
                return _json_response({"status": 1, "request": "OK", "threads": self._scheduler.threads,
                                       "working_threads": self._scheduler.in_flight})
            case Action.GETBALANCE:
                balance = repr(float(self._config.balance))
                return _ok(balance, True) if as_json else _plain(balance)
            case Action.REPORTBAD:
                return self._reportbad(params, key)
            case Action.EMPTY:
                return self._fail(Code.EMPTY_ACTION, as_json)
            case Action.UNKNOWN:
                return self._fail(Code.BAD_PARAMETERS, as_json)

    def _lookup(self, params: Params, key: str) -> SimTask | str:
        task_id = params.text("id").strip()
        if not _ID_RE.fullmatch(task_id):
            return Code.WRONG_ID_FORMAT
        task = self._tasks.get(int(task_id))
        if task is None or task.owner != key:
            return Code.WRONG_CAPTCHA_ID
        return task

    def _get(self, params: Params, key: str, now: float) -> web.Response:
        task = self._lookup(params, key)
        if isinstance(task, str):
            return self._fail(task, params.as_json)
        if task.ready_at is None or task.ready_at > now:
            return self._fail(Code.NOT_READY, params.as_json)
        if task.unsolvable:
            return self._fail(Code.UNSOLVABLE, params.as_json)
        solution = task.solution()
        return _ok(solution.request, params.as_json, solution.extra())

    def _reportbad(self, params: Params, key: str) -> web.Response:
        task = self._lookup(params, key)
        if isinstance(task, str):
            return self._fail(task, params.as_json)
        self._counters.reportbad += 1
        recorded = Code.REPORT_RECORDED.value
        return _ok(recorded, True) if params.as_json else _plain(recorded)

    # -- /_sim/ ----------------------------------------------------------------------------------------------

    async def _http_stats(self, _request: web.Request) -> web.Response:
        return _json_response(self.stats().as_dict())

    async def _http_reset(self, _request: web.Request) -> web.Response:
        self.reset()
        return _json_response({"ok": True})

    async def _http_config(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            try:
                patch = await request.json()
                if not isinstance(patch, dict):
                    raise ValueError("the body must be a JSON object")
                self.reconfigure(self._config.patched(patch))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                return _json_response({"error": str(exc)}, status=400)
        return _json_response(self._config.describe())


_NO_INPUTS: Final[Mapping[str, str]] = MappingProxyType({})


def _reset_connection(request: web.Request) -> web.Response:
    """Aborts the connection with a TCP RST; the response returned is never sent."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=500)


_FAULT_RESPONSES: Final[Mapping[Fault, Callable[[web.Request], web.Response]]] = MappingProxyType({
    Fault.RESET: _reset_connection,
    Fault.HTML502: lambda _r: web.Response(status=502, text=_HTML_502, content_type="text/html"),
    Fault.NONJSON: lambda _r: web.Response(text=_HTML_GARBAGE, content_type="text/html"),
})


class _RedactingLogger(logging.LoggerAdapter[logging.Logger]):
    """Logger for aiohttp's request handler. aiohttp logs a malformed request with an exception whose message
    quotes the request line (``/in.php?key=...``): only the exception type and where it was raised get out."""

    def log(self, level: int, msg: object, *args: object, **kwargs: object) -> None:
        exc = kwargs.get("exc_info")
        error = exc if isinstance(exc, BaseException) else None
        where = ""
        if error is not None and error.__traceback__ is not None:
            frame = traceback.extract_tb(error.__traceback__)[-1]
            where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
        if self.logger.isEnabledFor(level):
            self.logger.log(level, json.dumps({"event": "simulator.http_error",
                                               "error": type(error).__name__ if error else None,
                                               "at": where or None}))


def _event(name: str, **fields: object) -> None:
    if _log.isEnabledFor(logging.INFO):
        _log.info(json.dumps({"event": f"simulator.{name}", **fields}, default=str))


# ------------------------------------------------------------------------------------------------------------
# Running it
# ------------------------------------------------------------------------------------------------------------


class SimulatorServer:
    """Runs a :class:`Simulator` on a real socket: ``async with SimulatorServer(cfg) as srv: srv.url``."""

    def __init__(self, config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0, *,
                 clock: Clock = time.monotonic) -> None:
        self.simulator = Simulator(config, clock)
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.url = ""

    @property
    def port(self) -> int:
        return self._port

    def stats(self) -> SimStats:
        return self.simulator.stats()

    async def start(self) -> None:
        runner = web.AppRunner(self.simulator.make_app(), access_log=None, handle_signals=False,
                               shutdown_timeout=1.0, logger=_RedactingLogger(_http_log, {}))
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"http://{host}:{self._port}"

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> SimulatorServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()


async def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serves until cancelled, SIGTERM or SIGINT; prints one line with the URL."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        async with SimulatorServer(config, host, port) as server:
            print(f"captcha-worker simulator listening on {server.url}", flush=True)
            await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


# ------------------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------------------

_DEFAULTS: Final = SimConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``captcha-worker simulator``. Defaults are None so that SimConfig holds the only defaults."""
    d = _DEFAULTS
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, default=8080, help="port to listen on (default 8080)")
    add("--threads", type=int, help=f"plan threads, shared by all keys (default {d.threads})")
    add("--over-cap", metavar="|".join(o.value for o in OverCap),
        help=f"what in.php does when all threads are busy (default {d.over_cap.value})")
    add("--latency", action="append", default=[], metavar="KIND=MEAN:STDDEV",
        help=f"solve time of a kind in seconds (repeatable; kinds: {', '.join(methods.KIND_NAMES)})")
    add("--speed", type=float, help=f"divide every latency by this (default {d.speed:g})")
    add("--fault", action="append", default=[], metavar="NAME=RATE",
        help=f"fault rate 0..1 (repeatable; faults: {', '.join(f.value for f in Fault)})")
    add("--keys", metavar="K1,K2", help="accepted API keys (default: any 32-character key)")
    add("--balance", type=float, help=f"what getbalance reports (default {d.balance:g})")
    add("--slow-seconds", type=float, help=f"delay of the slow fault (default {d.slow_seconds:g})")
    add("--ban-after", type=int, help=f"bad-key requests before IP_BANNED, 0 = never (default {d.ban_after})")
    add("--ban-window-seconds", type=float, help=f"window for --ban-after (default {d.ban_window_seconds:g})")
    add("--ban-seconds", type=float, help=f"IP ban duration (default {d.ban_seconds:g})")
    add("--retention-seconds", type=float,
        help=f"how long answers stay readable, divided by --speed (default {d.retention_seconds:g})")
    add("--seed", type=int, help="RNG seed for reproducible runs")
    add("--no-introspection", action="store_true", help="do not serve /_sim/stats, /_sim/reset, /_sim/config")


def _arg(ns: argparse.Namespace, name: str) -> object:
    return getattr(ns, name, None)


def _assignments(values: object, flag: str) -> list[tuple[str, str]]:
    pairs = []
    for item in values if isinstance(values, list) else []:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE")
        pairs.append((name.strip(), value.strip()))
    return pairs


def _parse_latency_args(values: object) -> dict[str, Latency]:
    result = {}
    for name, spec in _assignments(values, "--latency"):
        try:
            result[_kind_named(name)] = Latency.parse(spec)
        except ValueError as exc:
            raise ValueError(f"--latency {name}={spec}: {exc}") from None
    return result


def _parse_fault_args(values: object) -> Faults:
    rates: dict[str, float] = {}
    for name, spec in _assignments(values, "--fault"):
        try:
            rate = float(spec)
            _check_rate(_fault_named(name).value, rate)
        except ValueError as exc:
            raise ValueError(f"--fault {name}={spec}: {exc}") from None
        rates[name] = rate
    return Faults().with_rates(rates)


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """The SimConfig the flags of :func:`add_arguments` describe; ValueError with one line on bad input."""
    d = _DEFAULTS

    def pick(name: str, default: float) -> float:
        value = _arg(ns, name)
        return default if value is None else _number(value, "--" + name.replace("_", "-"))

    def pick_int(name: str, default: int) -> int:
        value = _arg(ns, name)
        return default if value is None else _whole(value, "--" + name.replace("_", "-"))

    over_cap = _arg(ns, "over_cap")
    keys = _arg(ns, "keys")
    seed = _arg(ns, "seed")
    return SimConfig(
        threads=pick_int("threads", d.threads),
        over_cap=d.over_cap if over_cap is None else _over_cap_named(str(over_cap)),
        latency=_parse_latency_args(_arg(ns, "latency")),
        speed=pick("speed", d.speed),
        faults=_parse_fault_args(_arg(ns, "fault")),
        keys=None if keys is None else _parse_keys(str(keys)),
        balance=pick("balance", d.balance),
        ban_after=pick_int("ban_after", d.ban_after),
        ban_window_seconds=pick("ban_window_seconds", d.ban_window_seconds),
        ban_seconds=pick("ban_seconds", d.ban_seconds),
        slow_seconds=pick("slow_seconds", d.slow_seconds),
        retention_seconds=pick("retention_seconds", d.retention_seconds),
        seed=None if seed is None else _whole(seed, "--seed"),
        introspection=not _arg(ns, "no_introspection"),
    )
