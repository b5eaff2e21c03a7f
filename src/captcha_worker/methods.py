"""The one table of CaptchaAI task kinds.

A *task* names a CaptchaAI ``method`` (the ``in.php`` parameter: ``userrecaptcha``, ``turnstile``, ...) and the
``in.php`` parameters for it, exactly as the CaptchaAI docs spell them.  Some methods cover several *kinds*
(``userrecaptcha`` is reCAPTCHA v2, v3 or their Enterprise versions depending on ``version``/``enterprise``;
``base64`` and ``post`` are an image or a grid depending on ``grid_size``/``recaptcha``).  Everything that depends
on the kind reads this table:

* task validation (``task``): which params are required, what error a missing one produces;
* the API client's poll schedule (``captchaai``): it starts from the typical solve time and its spread;
* the simulator (``simulator``) and its protocol module: which error ``in.php`` returns, the spellings CaptchaAI
  accepts (:func:`canonical`), answer shape, typical latency;
* metrics (``kind`` is the bounded ``method`` label);
* the worker's budget: how long a solve of the kind may hold a plan thread at CaptchaAI (``solve_timeout_s``);
* the producer (token lifetime for ``token_age``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from captcha_worker.codes import Code


class AnswerShape(enum.Enum):
    """Shape of the ``request`` value res.php returns for a solved task."""

    TEXT = "text"  # image: the recognised text
    TOKEN = "token"  # noqa: S105 - reCAPTCHA / Turnstile / CaptchaFox / Friendly / Lemin: an opaque token string
    TOKEN_WITH_UA = "token_with_ua"  # noqa: S105 - Enterprise, Cloudflare challenge, CaptchaFox: + `user_agent`
    GEETEST = "geetest"  # JSON string with challenge / validate / seccode (v4: captcha_output etc.)
    INDICES = "indices"  # grid / BLS: JSON array of 1-based cell indices, e.g. "[1,4,7]"


@dataclass(frozen=True)
class Answer:
    """A solved task's answer as CaptchaAI gives it: ``request`` (token, text or JSON string, in the kind's
    shape), and the user agent it must be used with for the kinds answered with one (``TOKEN_WITH_UA``)."""

    request: str
    user_agent: str | None = None


@dataclass(frozen=True)
class Param:
    """A required in.php parameter and the error code CaptchaAI returns when it is missing."""

    name: str
    missing_error: str


@dataclass(frozen=True)
class Kind:
    """One captcha type as submitted with one in.php method. ``name`` is the type (the bounded metric label,
    e.g. ``recaptcha_v2``): the image and grid types each have two rows, a base64 ``body`` and a multipart
    ``file``, which differ only in ``method``, ``title`` and the parameter that carries the image (a test pins
    that). ``(name, method)`` identifies a row."""

    name: str  # bounded metric label, e.g. "recaptcha_v2"
    method: str  # in.php `method`
    title: str
    required: tuple[Param, ...]
    shape: AnswerShape  # of its answer
    solve_mean_s: float  # typical solve time: the simulator's default latency, the poll schedule's starting point
    solve_stddev_s: float
    token_lifetime_s: float | None  # how long the answer stays usable; None = does not expire
    #: how long CaptchaAI may take to answer a task of this kind: after that its id is answered no more (the worker
    #: then submits again) and the solve no longer holds a plan thread. Above the slowest solve the simulator draws
    #: (mean + 4 sd).
    solve_timeout_s: float
    http_post: bool = False  # submit with POST (multipart) rather than GET
    #: CaptchaAI solves it; False: a kind only a per-solve provider of ``PROVIDERS`` takes (:data:`FOREIGN_KINDS`)
    captchaai: bool = True


def _p(name: str, error: str = Code.ERROR_BAD_PARAMETERS) -> Param:
    return Param(name, error)


_PAGEURL = _p("pageurl", Code.ERROR_PAGEURL)
_PROXY = (_p("proxy", Code.ERROR_BAD_PROXY), _p("proxytype", Code.ERROR_BAD_PROXY))
_IMAGE_FILE, _IMAGE_BODY = _p("file", Code.ERROR_ZERO_CAPTCHA_FILESIZE), _p("body", Code.ERROR_ZERO_CAPTCHA_FILESIZE)
_GOOGLEKEY = _p("googlekey", Code.ERROR_GOOGLEKEY)

KINDS: tuple[Kind, ...] = (
    Kind("image", "post", "Image (multipart file)", (_IMAGE_FILE,), AnswerShape.TEXT, 5.0, 1.5, None, 30.0,
         http_post=True),
    Kind("image", "base64", "Image (base64 body)", (_IMAGE_BODY,), AnswerShape.TEXT, 5.0, 1.5, None, 30.0,
         http_post=True),
    Kind("grid", "base64", "Grid image (base64 body)", (_IMAGE_BODY, _p("instructions"), _p("grid_size")),
         AnswerShape.INDICES, 8.0, 2.5, None, 45.0, http_post=True),
    Kind("grid", "post", "Grid image (multipart file)", (_IMAGE_FILE, _p("instructions"), _p("grid_size")),
         AnswerShape.INDICES, 8.0, 2.5, None, 45.0, http_post=True),
    Kind("bls", "bls", "BLS", (_p("instructions"), *(_p(f"image_base64_{i}") for i in range(1, 10))),
         AnswerShape.INDICES, 8.0, 2.5, None, 45.0, http_post=True),
    Kind("recaptcha_v2", "userrecaptcha", "reCAPTCHA v2 / invisible", (_GOOGLEKEY, _PAGEURL), AnswerShape.TOKEN,
         60.0, 15.0, 120.0, 180.0),
    Kind("recaptcha_v2_enterprise", "userrecaptcha", "reCAPTCHA v2 Enterprise", (_GOOGLEKEY, _PAGEURL),
         AnswerShape.TOKEN_WITH_UA, 60.0, 15.0, 120.0, 180.0, http_post=True),
    Kind("recaptcha_v3", "userrecaptcha", "reCAPTCHA v3", (_GOOGLEKEY, _PAGEURL, _p("action")), AnswerShape.TOKEN,
         15.0, 5.0, 120.0, 90.0),
    Kind("recaptcha_v3_enterprise", "userrecaptcha", "reCAPTCHA v3 Enterprise", (_GOOGLEKEY, _PAGEURL, _p("action")),
         AnswerShape.TOKEN_WITH_UA, 15.0, 5.0, 120.0, 90.0, http_post=True),
    Kind("turnstile", "turnstile", "Cloudflare Turnstile", (_p("sitekey"), _PAGEURL), AnswerShape.TOKEN,
         12.0, 3.0, 300.0, 90.0),
    Kind("cloudflare_challenge", "cloudflare_challenge", "Cloudflare Challenge (cf_clearance)", (_PAGEURL, *_PROXY),
         AnswerShape.TOKEN_WITH_UA, 90.0, 20.0, 900.0, 240.0, http_post=True),
    Kind("geetest", "geetest", "GeeTest v3", (_p("gt"), _p("challenge"), _PAGEURL), AnswerShape.GEETEST,
         20.0, 6.0, 600.0, 120.0),
    Kind("geetest_v4", "geetest", "GeeTest v4", (_p("gt"), _PAGEURL), AnswerShape.GEETEST, 20.0, 6.0, 600.0, 120.0),
    Kind("captchafox", "captchafox", "CaptchaFox", (_p("sitekey"), _PAGEURL, *_PROXY), AnswerShape.TOKEN_WITH_UA,
         15.0, 5.0, 120.0, 90.0),
    Kind("friendly_captcha", "friendly_captcha", "Friendly Captcha", (_p("sitekey"), _PAGEURL), AnswerShape.TOKEN,
         15.0, 5.0, 120.0, 90.0),
    Kind("lemin", "lemin", "Lemin", (_p("captcha_id"), _p("div_id"), _PAGEURL), AnswerShape.TOKEN,
         15.0, 5.0, 120.0, 90.0),
)

#: kinds CaptchaAI does not solve that an overflow provider (``PROVIDERS``, docs/operations.md "Cost and overflow")
#: may: a task of one is accepted only where a provider takes its kind (``task.make_task``'s ``foreign``), and is
#: solved there; anywhere else it is the UNSUPPORTED_METHOD error of :data:`UNSUPPORTED`. Their params are 2captcha's
#: in.php ones. Not in :data:`KINDS` (CaptchaAI's table: the simulator's captchaai profile, the docs' kind table).
FOREIGN_KINDS: tuple[Kind, ...] = (
    Kind("hcaptcha", "hcaptcha", "hCaptcha", (_p("sitekey"), _PAGEURL), AnswerShape.TOKEN, 20.0, 6.0, 120.0, 180.0,
         captchaai=False),
)

#: every in.php method the queue accepts
METHODS: frozenset[str] = frozenset(k.method for k in KINDS)

#: bounded set of metric label values for `method` (kinds)
KIND_NAMES: tuple[str, ...] = tuple(dict.fromkeys(k.name for k in KINDS))

#: types other services solve but CaptchaAI does not: a task naming them is dead-lettered with this reason
UNSUPPORTED: Mapping[str, str] = {
    "hcaptcha": "hCaptcha is not solved by CaptchaAI",
    "funcaptcha": "FunCaptcha (Arkose Labs) is not solved by CaptchaAI",
    "arkoselabs": "FunCaptcha (Arkose Labs) is not solved by CaptchaAI",
    "keycaptcha": "KeyCaptcha is not solved by CaptchaAI",
    "capy": "Capy is not solved by CaptchaAI",
    "mtcaptcha": "MTCaptcha is not solved by CaptchaAI",
    "amazon_waf": "Amazon WAF is not solved by CaptchaAI",
}

#: the foreign kinds by their in.php method
FOREIGN_BY_METHOD: Mapping[str, Kind] = {k.method: k for k in FOREIGN_KINDS}
#: every kind name a metric label may carry: CaptchaAI's and the foreign ones
LABEL_KIND_NAMES: tuple[str, ...] = (*KIND_NAMES, *(k.name for k in FOREIGN_KINDS))

#: each type's first row (the variants of a type share everything :func:`by_name` callers read)
_BY_NAME: dict[str, Kind] = {}
for _k in KINDS:
    _BY_NAME.setdefault(_k.name, _k)
_BY_ROW: dict[tuple[str, str], Kind] = {(k.name, k.method): k for k in KINDS}


def truthy(value: str | None) -> bool:
    """A CaptchaAI flag parameter (``json=1``, ``enterprise=true``, ...) is set."""
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}


def kind_of(method: str, params: Mapping[str, str]) -> Kind | None:
    """The kind a (method, params) pair denotes, or None for a method CaptchaAI does not have."""
    if method == "userrecaptcha":
        enterprise = truthy(params.get("enterprise"))
        if params.get("version", "").lower() == "v3":
            return _BY_NAME["recaptcha_v3_enterprise" if enterprise else "recaptcha_v3"]
        return _BY_NAME["recaptcha_v2_enterprise" if enterprise else "recaptcha_v2"]
    if method == "geetest":
        return _BY_NAME["geetest_v4"] if params.get("version") == "4" else _BY_NAME["geetest"]
    if method in ("base64", "post"):
        name = "grid" if "grid_size" in params or truthy(params.get("recaptcha")) else "image"
        return _BY_ROW[(name, method)]
    for k in KINDS:
        if k.method == method:
            return k
    return None


#: grid sizes CaptchaAI solves, by ``grid_size`` value
GRID_SIZES: Mapping[str, int] = {"3x3": 9, "4x4": 16}


def canonical(method: str, params: Mapping[str, str]) -> dict[str, str]:
    """``params`` of ``method``, the other spellings CaptchaAI accepts for a kind rewritten to this table's.

    Only spellings CaptchaAI itself uses are read (its grid examples: ``recaptcha=1`` with ``textinstructions``
    and ``recaptcharows``/``recaptchacols``, default 3x3); anything else keeps its name, so a request in another
    service's dialect meets the error CaptchaAI gives it rather than a differently-shaped success.
    """
    out = dict(params)
    if method not in ("base64", "post"):
        return out
    if truthy(out.get("recaptcha")) and "grid_size" not in out:
        rows, cols = out.get("recaptcharows", "3").strip(), out.get("recaptchacols", "3").strip()
        out["grid_size"] = f"{rows}x{cols}"
    if "grid_size" in out and not out.get("instructions") and out.get("textinstructions"):
        out["instructions"] = out["textinstructions"]
    return out


def by_name(name: str) -> Kind:
    return _BY_NAME[name]


def foreign_kind(method: str) -> Kind | None:
    """The foreign kind (:data:`FOREIGN_KINDS`) of an in.php method, or None."""
    return FOREIGN_BY_METHOD.get(method.lower())


def missing_param(kind: Kind, params: Mapping[str, str]) -> Param | None:
    """The first required parameter that is absent or empty (in any spelling :func:`canonical` reads)."""
    present = canonical(kind.method, params)
    for p in kind.required:
        if not present.get(p.name):
            return p
    return None
