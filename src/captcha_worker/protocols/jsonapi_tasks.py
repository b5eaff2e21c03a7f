"""JSON-API task types: a ``task`` object -> the queue's ``method`` and CaptchaAI ``params`` (so a task sent to
``createTask`` is the very task ``in.php`` would have queued, validated by the same code), and an answer -> the
type's ``solution`` object.

Type names are matched without regard to case, so each provider's spelling is one row (``RecaptchaV2TaskProxyless``
and CapSolver's ``ReCaptchaV2TaskProxyLess``). A ``...Proxyless`` type ignores proxy fields; the other types take
the flat proxy fields (``proxyType``, ``proxyAddress``, ``proxyPort``, ``proxyLogin``, ``proxyPassword``) when
given, as CaptchaAI's ``proxy``/``proxytype``, and require them where CaptchaAI does (Cloudflare challenge,
CaptchaFox). A field of the wrong JSON type is ERROR_BAD_PARAMETERS naming the field; a missing required field
gets the error the workers' validation gives it (``task.make_task``: websiteURL -> ERROR_PAGEURL, a reCAPTCHA
websiteKey -> ERROR_RECAPTCHA_INVALID_SITEKEY), mapped by ``jsonapi_errors.from_v1``. Types CaptchaAI does not
solve (hCaptcha, FunCaptcha, ...) are ERROR_TASK_NOT_SUPPORTED saying so, unless the caller solves the foreign
kinds (``map_task(..., foreign=True)``: the simulator's per-solve profiles, :data:`FOREIGN_TYPES`).

The other way, for the ``createTask`` client (``captcha_worker.createtask``): :func:`to_task` is a queued task's
``task`` object (Anti-Captcha's and CapMonster Cloud's type names: the ``...Proxyless`` type without a proxy, the
flat proxy fields with one; ``dialect="capsolver"``: CapSolver's, :func:`to_capsolver`) and :func:`answer_of`
reads a ``solution`` back into the answer res.php would give.
``map_task(to_task(method, params))`` is the task again (tests/test_jsonapi.py checks every type both ways).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from captcha_worker import methods
from captcha_worker.methods import Answer, AnswerShape, Kind
from captcha_worker.protocols.jsonapi_errors import JsonError

PROXY_TYPES: Final = {"http": "HTTP", "https": "HTTPS", "socks4": "SOCKS4", "socks5": "SOCKS5"}
_V3_DEFAULT_ACTION: Final = "verify"  # CapMonster Cloud's default pageAction


@dataclass(frozen=True)
class Mapped:
    """A task as the queue takes it: CaptchaAI's ``method`` and ``params`` (all text)."""

    type_name: str  # the canonical spelling of the type
    method: str
    params: dict[str, str]


@dataclass(frozen=True)
class Refused:
    error: JsonError
    description: str


class _Bad(Exception):
    def __init__(self, error: JsonError, description: str) -> None:
        super().__init__(description)
        self.error, self.description = error, description


class _Fields:
    """A task object's fields, read with their JSON types checked."""

    def __init__(self, task: Mapping[str, Any]) -> None:
        self.task = task

    def text(self, name: str) -> str | None:
        value = self.task.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be a string")
        return value

    def flag(self, name: str) -> str | None:
        value = self.task.get(name)
        if value is None:
            return None
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, int) and value in (0, 1):
            return str(value)
        if isinstance(value, str) and value.lower() in ("true", "false", "0", "1"):
            return "1" if value.lower() in ("true", "1") else "0"
        raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be true or false")

    def number(self, name: str) -> str | None:
        value = self.task.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be a number")
        try:
            as_float = float(value)
        except ValueError:
            raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be a number") from None
        if not math.isfinite(as_float):
            raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be a number")
        return str(int(as_float)) if as_float.is_integer() else str(as_float)

    def obj(self, name: str) -> Mapping[str, Any]:
        value = self.task.get(name)
        if value is None:
            return {}
        if isinstance(value, str):  # sent as a JSON string by some clients (geetestGetLib, enterprisePayload)
            try:
                value = json.loads(value)
            except ValueError:
                raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be an object") from None
        if not isinstance(value, dict):
            raise _Bad(JsonError.BAD_PARAMETERS, f"task.{name} must be an object")
        return value


def _put(out: dict[str, str], name: str, value: str | None) -> None:
    if value is not None and value != "":
        out[name] = value


def _cookies(f: _Fields) -> str | None:
    value = f.task.get("cookies")
    if isinstance(value, list):  # CapSolver's array form: [{"name": .., "value": ..}]
        pairs = [f"{c.get('name')}={c.get('value')}" for c in value if isinstance(c, dict)]
        return "; ".join(pairs) if len(pairs) == len(value) else _bad_cookies()
    return f.text("cookies")


def _bad_cookies() -> str:
    raise _Bad(JsonError.BAD_PARAMETERS, "task.cookies must be a string or a list of {name, value}")


def proxy_params(f: _Fields) -> dict[str, str]:
    """``proxy`` (``login:password@address:port``) and ``proxytype`` from the flat proxy fields; {} without any."""
    kind_, address, login, password = (f.text("proxyType"), f.text("proxyAddress"), f.text("proxyLogin"),
                                       f.text("proxyPassword"))
    raw_port = f.task.get("proxyPort")
    port = str(raw_port) if isinstance(raw_port, int | str) and not isinstance(raw_port, bool) else None
    if not (kind_ or address or raw_port is not None):
        return {}
    if not kind_ or kind_.lower() not in PROXY_TYPES:
        raise _Bad(JsonError.BAD_PROXY, "task.proxyType must be http, https, socks4 or socks5")
    if not address or any(c in address for c in "@/ \t\r\n") or len(address) > 255:
        raise _Bad(JsonError.BAD_PROXY, "task.proxyAddress must be a host name or an IP address")
    if port is None or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Bad(JsonError.BAD_PROXY, "task.proxyPort must be a port number")
    host = f"[{address}]" if ":" in address else address
    creds = ""
    if login or password:
        if any(c in (login or "") for c in ":@") or "@" in (password or ""):
            raise _Bad(JsonError.BAD_PROXY, "task.proxyLogin / proxyPassword cannot hold ':' or '@'")
        creds = f"{login or ''}:{password or ''}@"
    return {"proxy": f"{creds}{host}:{port}", "proxytype": PROXY_TYPES[kind_.lower()]}


# -- the families: task fields -> CaptchaAI params ------------------------------------------------------------------
def _image(f: _Fields) -> dict[str, str]:
    out = {"method": "base64"}
    body = f.text("body") or ""
    if body.startswith("data:") and "," in body:  # a data URL: its base64 part
        body = body.split(",", 1)[1]
    _put(out, "body", body)
    for src, dst in (("phrase", "phrase"), ("case", "regsense"), ("math", "calc")):
        _put(out, dst, f.flag(src))
    for src, dst in (("numeric", "numeric"), ("minLength", "min_len"), ("maxLength", "max_len")):
        _put(out, dst, f.number(src))
    _put(out, "textinstructions", f.text("comment"))
    return out


def _grid(f: _Fields) -> dict[str, str]:
    out = {"method": "base64"}
    _put(out, "body", f.text("body"))
    rows, cols = f.number("rows") or "3", f.number("columns") or "3"
    out["grid_size"] = f"{rows}x{cols}"
    _put(out, "instructions", f.text("comment"))
    _put(out, "img_instructions", f.text("imgInstructions"))
    return out


def _recaptcha_common(f: _Fields, out: dict[str, str]) -> dict[str, str]:
    _put(out, "pageurl", f.text("websiteURL"))
    _put(out, "googlekey", f.text("websiteKey"))
    _put(out, "userAgent", f.text("userAgent"))
    _put(out, "cookies", _cookies(f))
    _put(out, "domain", f.text("apiDomain"))
    return out


def _recaptcha_v2(f: _Fields) -> dict[str, str]:
    out = _recaptcha_common(f, {"method": "userrecaptcha"})
    _put(out, "data-s", f.text("recaptchaDataSValue"))
    _put(out, "invisible", f.flag("isInvisible"))
    return out


def _recaptcha_v2_enterprise(f: _Fields) -> dict[str, str]:
    out = {**_recaptcha_v2(f), "enterprise": "1"}
    payload = f.obj("enterprisePayload")
    if "s" in payload:
        if not isinstance(payload["s"], str):
            raise _Bad(JsonError.BAD_PARAMETERS, "task.enterprisePayload.s must be a string")
        out["data-s"] = payload["s"]
    _put(out, "action", f.text("pageAction"))
    return out


def _recaptcha_v3(f: _Fields, *, enterprise: bool = False) -> dict[str, str]:
    out = _recaptcha_common(f, {"method": "userrecaptcha", "version": "v3"})
    out["action"] = f.text("pageAction") or _V3_DEFAULT_ACTION
    _put(out, "min_score", f.number("minScore"))
    if enterprise or f.flag("isEnterprise") == "1":
        out["enterprise"] = "1"
    return out


def _turnstile(f: _Fields) -> dict[str, str]:
    if (f.text("cloudflareTaskType") or "").lower() == "cf_clearance":  # CapMonster's challenge mode
        out = {"method": "cloudflare_challenge"}
        _put(out, "pageurl", f.text("websiteURL"))
        _put(out, "userAgent", f.text("userAgent"))
        return out
    out = {"method": "turnstile"}
    _put(out, "pageurl", f.text("websiteURL"))
    _put(out, "sitekey", f.text("websiteKey"))
    metadata = f.obj("metadata")  # CapSolver: metadata.action, metadata.cdata
    action = f.text("action") or f.text("pageAction") or _meta(metadata, "action")
    _put(out, "action", action)
    _put(out, "data", f.text("cData") or f.text("data") or f.text("turnstileCData") or _meta(metadata, "cdata"))
    _put(out, "pagedata", f.text("chlPageData") or f.text("pageData") or f.text("pagedata"))
    _put(out, "userAgent", f.text("userAgent"))
    return out


def _meta(metadata: Mapping[str, Any], name: str) -> str | None:
    value = metadata.get(name)
    if value is not None and not isinstance(value, str):
        raise _Bad(JsonError.BAD_PARAMETERS, f"task.metadata.{name} must be a string")
    return value


def _geetest(f: _Fields) -> dict[str, str]:
    out = {"method": "geetest"}
    _put(out, "pageurl", f.text("websiteURL"))
    _put(out, "api_server", f.text("geetestApiServerSubdomain"))
    _put(out, "userAgent", f.text("userAgent"))
    if f.number("version") == "4":
        init = f.obj("initParameters")
        captcha_id = init.get("captcha_id")
        if captcha_id is not None and not isinstance(captcha_id, str):
            raise _Bad(JsonError.BAD_PARAMETERS, "task.initParameters.captcha_id must be a string")
        out["version"] = "4"
        _put(out, "gt", f.text("gt") or captcha_id)  # CapMonster: gt; 2captcha: initParameters.captcha_id
        return out
    _put(out, "gt", f.text("gt"))
    _put(out, "challenge", f.text("challenge"))
    return out


def _site(method: str, key_param: str = "sitekey") -> Callable[[_Fields], dict[str, str]]:
    def family(f: _Fields) -> dict[str, str]:
        out = {"method": method}
        _put(out, "pageurl", f.text("websiteURL"))
        _put(out, key_param, f.text("websiteKey"))
        _put(out, "userAgent", f.text("userAgent"))
        return out

    return family


def _lemin(f: _Fields) -> dict[str, str]:
    out = {"method": "lemin"}
    _put(out, "pageurl", f.text("websiteURL"))
    _put(out, "captcha_id", f.text("captchaId"))
    _put(out, "div_id", f.text("divId"))
    _put(out, "api_server", f.text("leminApiServerSubdomain"))
    return out


@dataclass(frozen=True)
class TaskType:
    name: str  # canonical spelling
    family: Callable[[_Fields], dict[str, str]]
    proxy: bool  # the type takes proxy fields (the non-Proxyless variants)


def _pair(name: str, family: Callable[[_Fields], dict[str, str]]) -> tuple[TaskType, TaskType]:
    """``<name>Proxyless`` and ``<name>`` (with a proxy)."""
    return TaskType(f"{name}Proxyless", family, proxy=False), TaskType(name, family, proxy=True)


TASK_TYPES: Final[tuple[TaskType, ...]] = (
    TaskType("ImageToTextTask", _image, proxy=False),
    TaskType("GridTask", _grid, proxy=False),
    *_pair("RecaptchaV2Task", _recaptcha_v2),
    *_pair("NoCaptchaTask", _recaptcha_v2),
    *_pair("RecaptchaV2EnterpriseTask", _recaptcha_v2_enterprise),
    *_pair("RecaptchaV3Task", _recaptcha_v3),
    *_pair("RecaptchaV3EnterpriseTask", lambda f: _recaptcha_v3(f, enterprise=True)),
    *_pair("TurnstileTask", _turnstile),
    TaskType("AntiTurnstileTaskProxyless", _turnstile, proxy=False),  # CapSolver
    *_pair("GeeTestTask", _geetest),
    *_pair("FriendlyCaptchaTask", _site("friendly_captcha")),
    *_pair("CaptchaFoxTask", _site("captchafox")),
    *_pair("LeminTask", _lemin),
)
_BY_NAME: Final[Mapping[str, TaskType]] = {t.name.lower(): t for t in TASK_TYPES}
#: the types of the kinds CaptchaAI lacks (``methods.FOREIGN_KINDS``), for a caller that solves them
FOREIGN_TYPES: Final[tuple[TaskType, ...]] = (*_pair("HCaptchaTask", _site("hcaptcha")),)
_FOREIGN_BY_NAME: Final[Mapping[str, TaskType]] = {t.name.lower(): t for t in FOREIGN_TYPES}

#: types other services solve and CaptchaAI does not (ERROR_TASK_NOT_SUPPORTED with this text)
NOT_SOLVED: Final[Mapping[str, str]] = {
    **{n.lower(): methods.UNSUPPORTED["hcaptcha"] for n in ("HCaptchaTask", "HCaptchaTaskProxyless")},
    **{n.lower(): methods.UNSUPPORTED["funcaptcha"] for n in ("FunCaptchaTask", "FunCaptchaTaskProxyless")},
    **{n.lower(): methods.UNSUPPORTED["keycaptcha"] for n in ("KeyCaptchaTask", "KeyCaptchaTaskProxyless")},
    **{n.lower(): methods.UNSUPPORTED["capy"] for n in ("CapyTask", "CapyTaskProxyless")},
    **{n.lower(): methods.UNSUPPORTED["mtcaptcha"] for n in ("MtCaptchaTask", "MtCaptchaTaskProxyless")},
    **{n.lower(): methods.UNSUPPORTED["amazon_waf"] for n in ("AmazonTask", "AmazonTaskProxyless",
                                                             "AntiAwsWafTask", "AntiAwsWafTaskProxyLess")},
}


def task_type(name: str, *, foreign: bool = False) -> TaskType | None:
    found = _BY_NAME.get(name.lower())
    return found if found is not None or not foreign else _FOREIGN_BY_NAME.get(name.lower())


def map_task(task: object, *, foreign: bool = False) -> Mapped | Refused:
    """The queue's method and params for a ``task`` object, or the refusal to answer (`foreign`: the types of
    :data:`FOREIGN_TYPES` are taken too)."""
    if task is None:
        return Refused(JsonError.TASK_ABSENT, JsonError.TASK_ABSENT.description)
    if not isinstance(task, dict):
        return Refused(JsonError.BAD_PARAMETERS, "task must be an object")
    name = task.get("type")
    if not isinstance(name, str) or not name:
        return Refused(JsonError.TASK_NOT_SUPPORTED, "task.type is missing")
    found = task_type(name, foreign=foreign)
    if found is None:
        why = NOT_SOLVED.get(name.lower())
        shown = name if len(name) <= 64 and name.isprintable() else "this type"
        return Refused(JsonError.TASK_NOT_SUPPORTED, f"{shown}: {why or 'not a task type this service solves'}")
    fields = _Fields(task)
    try:
        params = found.family(fields)
        if found.proxy:
            params.update(proxy_params(fields))
    except _Bad as exc:
        return Refused(exc.error, exc.description)
    method = params.pop("method")
    return Mapped(found.name, method, params)


# -- solutions ------------------------------------------------------------------------------------------------------
def solution(kind: Kind, answer: Answer) -> dict[str, object]:
    """The ``solution`` object for a solved task of `kind`, in the field names the JSON API gives its type."""
    token = answer.request
    out: dict[str, object]
    if kind.shape is AnswerShape.TEXT:
        out = {"text": token}
    elif kind.shape is AnswerShape.INDICES:
        out = {"click": _cells(token)}
    elif kind.shape is AnswerShape.GEETEST:
        out = _object(token)
    elif kind.name.startswith("recaptcha"):
        out = {"gRecaptchaResponse": token, "token": token}
    elif kind.name == "cloudflare_challenge":
        out = {"cf_clearance": token, "token": token}
    else:
        out = {"token": token}
    if answer.user_agent:
        out["userAgent"] = answer.user_agent
    return out


def _cells(text: str) -> list[object]:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"answer": text}
    return dict(value) if isinstance(value, dict) else {"answer": text}



# -- the other way: a queued task -> a task object, a solution -> the answer (the createTask client) ---------------
def to_task(method: str, params: Mapping[str, str], dialect: str = "standard") -> dict[str, object] | None:
    """The ``task`` object of a queued task (CaptchaAI's `method` and `params`), or None for a kind no JSON-API type
    takes (BLS) or the `dialect` has no type for. Params without a JSON-API field are left out; a proxy makes the
    type the one with a proxy. ``standard``: Anti-Captcha's and CapMonster Cloud's names; ``capsolver``: CapSolver's
    (:func:`to_capsolver`)."""
    p = methods.canonical(method, params)
    kind = methods.kind_of(method, p) or methods.foreign_kind(method)
    if kind is None:
        return None
    build = _TO_TASK.get(kind.name)
    if build is None:
        return None
    name, fields = build(p)
    if dialect == "capsolver":
        return to_capsolver(kind.name, name, fields, _proxy_fields(p))
    if kind.name in _NO_PROXY:
        return {"type": name, **fields}
    proxy = _proxy_fields(p)
    if proxy or kind.name in _PROXY_REQUIRED:
        return {"type": name, **fields, **proxy}
    return {"type": f"{name}Proxyless", **fields}


#: the kinds CapSolver's docs give a type for (docs/operations.md; json-api.md §2): reCAPTCHA ``ReCaptcha...``,
#: ``...ProxyLess``, Turnstile ``AntiTurnstileTaskProxyLess`` (no proxy type) with ``metadata``, the image
#: ``ImageToTextTask`` (``body`` only); GeeTest and hCaptcha under the standard names with ``ProxyLess``
CAPSOLVER_KINDS: Final = frozenset({"image", "recaptcha_v2", "recaptcha_v2_enterprise", "recaptcha_v3",
                                    "recaptcha_v3_enterprise", "turnstile", "geetest", "geetest_v4", "hcaptcha"})


def to_capsolver(kind: str, name: str, fields: Mapping[str, object],
                 proxy: Mapping[str, object]) -> dict[str, object] | None:
    """A standard task (its type's `name`, `fields`, the flat `proxy` fields) in CapSolver's spelling; None for a kind
    CapSolver's docs give no type for. Turnstile goes without its proxy (CapSolver has only the proxyless type and
    ignores a custom userAgent)."""
    if kind not in CAPSOLVER_KINDS:
        return None
    if kind == "image":
        return {"type": name, "body": fields["body"]}
    if kind == "turnstile":
        meta = {k: v for k, v in (("action", fields.get("action")), ("cdata", fields.get("cData"))) if v}
        site = {k: fields[k] for k in ("websiteURL", "websiteKey") if k in fields}
        return {"type": "AntiTurnstileTaskProxyLess", **site, **({"metadata": meta} if meta else {})}
    name = name.replace("Recaptcha", "ReCaptcha")
    return {"type": name, **fields, **proxy} if proxy else {"type": f"{name}ProxyLess", **fields}


def has_type(dialect: str, kind: str) -> bool:
    """A task of `kind` has a JSON-API type in `dialect` (``config.PROVIDER_DIALECTS``)."""
    return kind in _TO_TASK and (dialect != "capsolver" or kind in CAPSOLVER_KINDS)


def _fields(p: Mapping[str, str], names: Mapping[str, str], *, flags: tuple[str, ...] = (),
            numbers: tuple[str, ...] = ()) -> dict[str, object]:
    """`names` (CaptchaAI param -> JSON field) of the params that are set; `flags` as booleans, `numbers` as
    numbers (when they read as one)."""
    out: dict[str, object] = {}
    for src, dst in names.items():
        value = p.get(src)
        if value is None or value == "":
            continue
        out[dst] = methods.truthy(value) if src in flags else _num(value) if src in numbers else value
    return out


def _num(value: str) -> object:
    try:
        f = float(value)
    except ValueError:
        return value
    return int(f) if f.is_integer() and math.isfinite(f) else f if math.isfinite(f) else value


_SITE = {"pageurl": "websiteURL", "sitekey": "websiteKey", "userAgent": "userAgent"}
_RECAPTCHA = {"pageurl": "websiteURL", "googlekey": "websiteKey", "userAgent": "userAgent", "cookies": "cookies",
              "domain": "apiDomain"}
_Build = Callable[[Mapping[str, str]], tuple[str, dict[str, object]]]


def _to_image(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    body = p.get("body") or p.get("file") or ""
    if body.startswith("data:") and "," in body:
        body = body.split(",", 1)[1]
    names = {"phrase": "phrase", "regsense": "case", "calc": "math", "numeric": "numeric", "min_len": "minLength",
             "max_len": "maxLength", "textinstructions": "comment"}
    return "ImageToTextTask", {"body": body, **_fields(p, names, flags=("phrase", "regsense", "calc"),
                                                   numbers=("numeric", "min_len", "max_len"))}


def _to_grid(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    rows, _, cols = p.get("grid_size", "3x3").partition("x")
    out = {"body": p.get("body") or p.get("file") or "", "rows": _num(rows), "columns": _num(cols or rows)}
    return "GridTask", {**out, **_fields(p, {"instructions": "comment", "img_instructions": "imgInstructions"})}


def _to_recaptcha_v2(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    out = _fields(p, {**_RECAPTCHA, "data-s": "recaptchaDataSValue", "invisible": "isInvisible"},
                  flags=("invisible",))
    return "RecaptchaV2Task", out


def _to_recaptcha_v2_enterprise(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    out = _fields(p, {**_RECAPTCHA, "invisible": "isInvisible", "action": "pageAction"}, flags=("invisible",))
    if p.get("data-s"):
        out["enterprisePayload"] = {"s": p["data-s"]}
    return "RecaptchaV2EnterpriseTask", out


def _to_recaptcha_v3(enterprise: bool) -> _Build:
    def build(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
        out = _fields(p, {**_RECAPTCHA, "action": "pageAction", "min_score": "minScore"}, numbers=("min_score",))
        return ("RecaptchaV3EnterpriseTask" if enterprise else "RecaptchaV3Task"), out
    return build


def _to_turnstile(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    return "TurnstileTask", _fields(p, {**_SITE, "action": "action", "data": "cData", "pagedata": "chlPageData"})


def _to_cloudflare_challenge(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    return "TurnstileTask", {"cloudflareTaskType": "cf_clearance",
                             **_fields(p, {"pageurl": "websiteURL", "userAgent": "userAgent"})}


def _to_geetest(v4: bool) -> _Build:
    def build(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
        names = {"pageurl": "websiteURL", "gt": "gt", "api_server": "geetestApiServerSubdomain",
                 "userAgent": "userAgent"}
        if not v4:
            return "GeeTestTask", _fields(p, {**names, "challenge": "challenge"})
        out = _fields(p, names)
        return "GeeTestTask", {**out, "version": 4, "initParameters": {"captcha_id": p.get("gt", "")}}
    return build


def _to_site(name: str) -> _Build:
    def build(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
        return name, _fields(p, _SITE)
    return build


def _to_lemin(p: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    return "LeminTask", _fields(p, {"pageurl": "websiteURL", "captcha_id": "captchaId", "div_id": "divId",
                                    "api_server": "leminApiServerSubdomain"})


#: types without a proxy (no ``...Proxyless`` suffix), and types that always take one (CaptchaAI requires it)
_NO_PROXY: Final = frozenset({"image", "grid"})
_PROXY_REQUIRED: Final = frozenset({"cloudflare_challenge", "captchafox"})
_TO_TASK: Final[Mapping[str, _Build]] = {
    "image": _to_image,
    "grid": _to_grid,
    "recaptcha_v2": _to_recaptcha_v2,
    "recaptcha_v2_enterprise": _to_recaptcha_v2_enterprise,
    "recaptcha_v3": _to_recaptcha_v3(False),
    "recaptcha_v3_enterprise": _to_recaptcha_v3(True),
    "turnstile": _to_turnstile,
    "cloudflare_challenge": _to_cloudflare_challenge,
    "geetest": _to_geetest(False),
    "geetest_v4": _to_geetest(True),
    "friendly_captcha": _to_site("FriendlyCaptchaTask"),
    "captchafox": _to_site("CaptchaFoxTask"),
    "lemin": _to_lemin,
    "hcaptcha": _to_site("HCaptchaTask"),
}


def _proxy_fields(p: Mapping[str, str]) -> dict[str, object]:
    """The flat proxy fields of CaptchaAI's ``proxy`` (``[login:password@]address:port``) and ``proxytype``."""
    proxy = p.get("proxy")
    if not proxy:
        return {}
    creds, _, hostport = proxy.rpartition("@")
    host, _, port = hostport.rpartition(":")
    out: dict[str, object] = {"proxyType": (p.get("proxytype") or "HTTP").lower(),
                              "proxyAddress": host[1:-1] if host.startswith("[") and host.endswith("]") else host,
                              "proxyPort": int(port) if port.isdigit() else port}
    if creds:
        login, _, password = creds.partition(":")
        out["proxyLogin"], out["proxyPassword"] = login, password
    return out


def answer_of(kind: Kind, sol: object) -> Answer | None:
    """The answer res.php would give for a ``solution`` object of a task of `kind` (the inverse of
    :func:`solution`); None when the object has no answer in the field names the providers use for the kind."""
    if not isinstance(sol, dict):
        return None
    ua = sol.get("userAgent")
    user_agent = ua if isinstance(ua, str) and ua else None
    if kind.shape is AnswerShape.TEXT:
        text = sol.get("text")
        return Answer(str(text), user_agent) if isinstance(text, str | int) and str(text) else None
    if kind.shape is AnswerShape.INDICES:
        click = sol.get("click")
        return Answer(json.dumps(click), user_agent) if isinstance(click, list) else None
    if kind.shape is AnswerShape.GEETEST:
        values = {k: v for k, v in sol.items() if k != "userAgent" and isinstance(v, str | int)}
        needed = ("pass_token", "captcha_output") if kind.name == "geetest_v4" else ("validate",)
        return Answer(json.dumps(values), user_agent) if any(n in values for n in needed) else None
    names = ("cf_clearance", "token") if kind.name == "cloudflare_challenge" else (
        "gRecaptchaResponse", "token") if kind.name.startswith("recaptcha") else ("token", "gRecaptchaResponse")
    token = next((sol[n] for n in names if isinstance(sol.get(n), str) and sol[n]), None)
    return Answer(token, user_agent) if token is not None else None
