"""What ``in.php`` checks before it accepts a task, and the error each failed check answers: required
parameters (their codes come from ``methods``), images (encoding, size, file extension, type), proxies, grid sizes,
the text rules of image captchas and pingback URLs."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from captcha_worker import methods
from captcha_worker.codes import Code
from captcha_worker.methods import AnswerShape, Kind
from captcha_worker.protocols.v1 import ApiRequest
from captcha_worker.simulator.answers import TextRules

_PROXY_RE: Final = re.compile(
    r"(?:[^:@/\s]+:[^@/\s]+@)?"  # optional user:pass@
    r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?)"  # host, IPv4, or [IPv6]
    r":(?P<port>[0-9]{1,5})"
)
_PROXY_TYPES: Final = frozenset({"HTTP", "HTTPS", "SOCKS4", "SOCKS5"})
_BLS_PREFIX: Final = "image_base64_"
_DATA_URI_RE: Final = re.compile(r"^\s*data:(?P<mime>[^;,]*)[^,]*,")
_EXTENSIONS: Final = frozenset({"jpg", "jpeg", "png", "gif"})  # "Allowed: jpg,jpeg,png,gif" [DOC]
_IMAGE_MIMES: Final = frozenset({"image/jpeg", "image/jpg", "image/png", "image/gif"})
_MAGIC: Final = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")


@dataclass(frozen=True)
class ImageLimits:
    min_bytes: int
    max_bytes: int


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


def image_fields(kind: Kind) -> tuple[str, ...]:
    return tuple(p.name for p in kind.required if p.name in ("file", "body") or p.name.startswith(_BLS_PREFIX))


def _image(name: str, req: ApiRequest) -> tuple[bytes | None, str | None]:
    """The decoded bytes of one image field (None: undecodable) and the error its name or label gives."""
    upload = req.files.get(name)
    if upload is not None:
        if name != "file":
            return decode_base64_image(upload.data.decode("latin-1")), None
        _, dot, extension = upload.filename.rpartition(".")  # no extension at all: judged by its content
        bad_extension = bool(dot) and extension.lower() not in _EXTENSIONS
        return upload.data, (Code.ERROR_WRONG_FILE_EXTENSION if bad_extension else None)
    text = req.text(name)
    if name == "file":
        return text.encode("latin-1", "replace"), None
    mime = _DATA_URI_RE.match(text)
    bad_mime = mime is not None and mime["mime"].strip().lower() not in _IMAGE_MIMES
    return decode_base64_image(text), (Code.ERROR_IMAGE_TYPE_NOT_SUPPORTED if bad_mime else None)


def _check_one_image(data: bytes | None, label_error: str | None, limits: ImageLimits) -> str | None:
    if label_error == Code.ERROR_WRONG_FILE_EXTENSION:
        return label_error
    if data is None:
        return Code.ERROR_UPLOAD
    if len(data) < max(limits.min_bytes, 1):
        return Code.ERROR_ZERO_CAPTCHA_FILESIZE
    if len(data) > limits.max_bytes:
        return Code.ERROR_TOO_BIG_CAPTCHA_FILESIZE
    if label_error is not None or not data.startswith(_MAGIC):
        return Code.ERROR_IMAGE_TYPE_NOT_SUPPORTED
    return None


def _check_images(kind: Kind, req: ApiRequest, limits: ImageLimits) -> str | None:
    names = image_fields(kind)
    if any(n.startswith(_BLS_PREFIX) for n in names):
        extra = {n for n in (*req.fields, *req.files) if n.startswith(_BLS_PREFIX)} - set(names)
        if extra:
            return Code.ERROR_BAD_PARAMETERS  # BLS takes exactly image_base64_1..9
    for name in names:
        code = _check_one_image(*_image(name, req), limits)
        if code is not None:
            return code
    return None


def _check_proxy(_kind: Kind, req: ApiRequest, _limits: ImageLimits) -> str | None:
    proxy = req.text("proxy")
    if proxy:
        match = _PROXY_RE.fullmatch(proxy.strip())
        if match is None or not 1 <= int(match["port"]) <= 65535:
            return Code.ERROR_BAD_PROXY
    proxytype = req.text("proxytype")
    if proxytype and proxytype.strip().upper() not in _PROXY_TYPES:
        return Code.ERROR_BAD_PROXY
    return None


def _check_grid(_kind: Kind, req: ApiRequest, _limits: ImageLimits) -> str | None:
    if "grid_size" in req.fields and req.text("grid_size").strip().lower() not in methods.GRID_SIZES:
        return Code.ERROR_BAD_PARAMETERS
    return None


def _check_text_rules(kind: Kind, req: ApiRequest, _limits: ImageLimits) -> str | None:
    if kind.shape is AnswerShape.TEXT and TextRules.parse(req.fields) is None:
        return Code.ERROR_BAD_PARAMETERS
    return None


def pingback_url(req: ApiRequest) -> str | None:
    """The ``pingback`` URL of a submission; "" when it has none, None when it is not an http(s) URL."""
    url = req.text("pingback").strip()
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") and parts.hostname and port_ok else None


def _check_pingback(_kind: Kind, req: ApiRequest, _limits: ImageLimits) -> str | None:
    return Code.ERROR_BAD_PARAMETERS if pingback_url(req) is None else None


_CHECKS: Final[tuple[Callable[[Kind, ApiRequest, ImageLimits], str | None], ...]] = (
    _check_proxy, _check_images, _check_grid, _check_text_rules, _check_pingback)


def check_submission(kind: Kind, req: ApiRequest, limits: ImageLimits) -> str | None:
    """The error code in.php answers for this submission, or None when it is acceptable."""
    missing = methods.missing_param(kind, req.presence())
    if missing is not None:
        return missing.missing_error
    for check in _CHECKS:
        code = check(kind, req, limits)
        if code is not None:
            return code
    return None
