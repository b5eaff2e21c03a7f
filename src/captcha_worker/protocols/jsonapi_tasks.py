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
solve (hCaptcha, FunCaptcha, ...) are ERROR_TASK_NOT_SUPPORTED saying so.
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


def task_type(name: str) -> TaskType | None:
    return _BY_NAME.get(name.lower())


def map_task(task: object) -> Mapped | Refused:
    """The queue's method and params for a ``task`` object, or the refusal to answer."""
    if task is None:
        return Refused(JsonError.TASK_ABSENT, JsonError.TASK_ABSENT.description)
    if not isinstance(task, dict):
        return Refused(JsonError.BAD_PARAMETERS, "task must be an object")
    name = task.get("type")
    if not isinstance(name, str) or not name:
        return Refused(JsonError.TASK_NOT_SUPPORTED, "task.type is missing")
    found = task_type(name)
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

