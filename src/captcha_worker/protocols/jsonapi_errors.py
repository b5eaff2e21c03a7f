"""The JSON API's numbered errors, as the providers document them (docs/compatibility.md, "The JSON API's
errors"), and the one mapping from this package's codes (``codes.Code``, CaptchaAI's v1 codes) to them.

Ids 1-16 and 21-23 are Anti-Captcha's and 2captcha's shared numbering; 5, 31, 110 and 130 are 2captcha's (its
v2 errors page: ERROR_PAGEURL, ERROR_RECAPTCHA_INVALID_SITEKEY, ERROR_BAD_PARAMETERS, ERROR_BAD_PROXY).
CapMonster Cloud and CapSolver answer ``errorId`` 1 for every error and are read by ``errorCode``, which is the
same string here. A code that means different things on different providers is mapped by its meaning, not its
name: CaptchaAI's ERROR_ZERO_BALANCE means "no free thread", so it is ERROR_NO_SLOT_AVAILABLE (2) here, never
ERROR_ZERO_BALANCE (10, "no money" on every JSON-API provider).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from captcha_worker.codes import Code


class JsonError(enum.Enum):
    """One error reply: ``errorId``, ``errorCode``, ``errorDescription``."""

    KEY_DOES_NOT_EXIST = 1, "ERROR_KEY_DOES_NOT_EXIST", "The client key is wrong."
    NO_SLOT_AVAILABLE = 2, "ERROR_NO_SLOT_AVAILABLE", "No free thread for this key now: retry in a few seconds."
    SERVICE_UNAVAILABLE = 2, "ERROR_NO_SLOT_AVAILABLE", "The service cannot take requests now: retry later."
    ZERO_CAPTCHA_FILESIZE = 3, "ERROR_ZERO_CAPTCHA_FILESIZE", "The image is empty or smaller than the minimum size."
    TOO_BIG_CAPTCHA_FILESIZE = 4, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", "The request or its image is too large."
    PAGEURL = 5, "ERROR_PAGEURL", "websiteURL is missing or has a wrong format."
    ZERO_BALANCE = 10, "ERROR_ZERO_BALANCE", "The account has no funds."
    IP_NOT_ALLOWED = 11, "ERROR_IP_NOT_ALLOWED", "Requests from this IP are not allowed."
    CAPTCHA_UNSOLVABLE = 12, "ERROR_CAPTCHA_UNSOLVABLE", "The captcha could not be solved."
    NO_SUCH_METHOD = 14, "ERROR_NO_SUCH_METHOD", "No such API method."
    IMAGE_TYPE_NOT_SUPPORTED = 15, "ERROR_IMAGE_TYPE_NOT_SUPPORTED", "The image type is not supported."
    NO_SUCH_CAPCHA_ID = 16, "ERROR_NO_SUCH_CAPCHA_ID", "No task with this id for this key (or it has expired)."
    IP_BLOCKED = 21, "ERROR_IP_BLOCKED", "This IP is blocked after repeated requests with a wrong key."
    TASK_ABSENT = 22, "ERROR_TASK_ABSENT", "The task object is missing."
    TASK_NOT_SUPPORTED = 23, "ERROR_TASK_NOT_SUPPORTED", "This task type is not supported."
    RECAPTCHA_INVALID_SITEKEY = 31, "ERROR_RECAPTCHA_INVALID_SITEKEY", "websiteKey is missing or wrong."
    BAD_PARAMETERS = 110, "ERROR_BAD_PARAMETERS", "Required parameters are missing or have a wrong format."
    BAD_PROXY = 130, "ERROR_BAD_PROXY", "The proxy fields are missing, malformed or the proxy does not work."
    #: CapMonster Cloud's spelling (errorId 1 there, as all of its errors); the rate limit of getTaskResult & co
    TOO_MUCH_REQUESTS = 1, "ERROR_TOO_MUCH_REQUESTS", "Too many requests: slow down."

    def __init__(self, error_id: int, code: str, description: str) -> None:
        self.error_id = error_id
        self.code = code
        self.description = description

    def body(self, description: str | None = None) -> dict[str, object]:
        return {"errorId": self.error_id, "errorCode": self.code,
                "errorDescription": description or self.description}


_FROM_V1: Final[Mapping[str, JsonError]] = {
    Code.ERROR_WRONG_USER_KEY: JsonError.KEY_DOES_NOT_EXIST,
    Code.ERROR_KEY_DOES_NOT_EXIST: JsonError.KEY_DOES_NOT_EXIST,
    Code.IP_BANNED: JsonError.IP_BLOCKED,
    Code.ERROR_IP_NOT_ALLOWED: JsonError.IP_NOT_ALLOWED,
    Code.ERROR_ZERO_BALANCE: JsonError.NO_SLOT_AVAILABLE,  # CaptchaAI: "no free threads"
    Code.ERROR_NO_SLOT_AVAILABLE: JsonError.NO_SLOT_AVAILABLE,
    Code.ERROR_TOO_MUCH_REQUESTS: JsonError.TOO_MUCH_REQUESTS,
    Code.ERROR_SERVER_ERROR: JsonError.SERVICE_UNAVAILABLE,
    Code.ERROR_INTERNAL_SERVER_ERROR: JsonError.SERVICE_UNAVAILABLE,
    Code.ERROR_CAPTCHA_UNSOLVABLE: JsonError.CAPTCHA_UNSOLVABLE,
    Code.ERROR_BAD_PARAMETERS: JsonError.BAD_PARAMETERS,
    Code.ERROR_PAGEURL: JsonError.PAGEURL,
    Code.ERROR_GOOGLEKEY: JsonError.RECAPTCHA_INVALID_SITEKEY,
    Code.ERROR_WRONG_GOOGLEKEY: JsonError.RECAPTCHA_INVALID_SITEKEY,
    Code.ERROR_BAD_TOKEN_OR_PAGEURL: JsonError.RECAPTCHA_INVALID_SITEKEY,
    Code.ERROR_BAD_PROXY: JsonError.BAD_PROXY,
    Code.ERROR_PROXY_CONNECTION_FAILED: JsonError.BAD_PROXY,
    Code.ERROR_ZERO_CAPTCHA_FILESIZE: JsonError.ZERO_CAPTCHA_FILESIZE,
    Code.ERROR_TOO_BIG_CAPTCHA_FILESIZE: JsonError.TOO_BIG_CAPTCHA_FILESIZE,
    Code.ERROR_IMAGE_DIMENSIONS_TOO_LARGE: JsonError.TOO_BIG_CAPTCHA_FILESIZE,
    Code.ERROR_WRONG_FILE_EXTENSION: JsonError.IMAGE_TYPE_NOT_SUPPORTED,
    Code.ERROR_IMAGE_TYPE_NOT_SUPPORTED: JsonError.IMAGE_TYPE_NOT_SUPPORTED,
    Code.ERROR_UPLOAD: JsonError.IMAGE_TYPE_NOT_SUPPORTED,
    Code.ERROR_WRONG_ID_FORMAT: JsonError.NO_SUCH_CAPCHA_ID,
    Code.ERROR_WRONG_CAPTCHA_ID: JsonError.NO_SUCH_CAPCHA_ID,
}


def from_v1(code: str) -> JsonError:
    """The JSON API's error for a CaptchaAI (v1) code a request or a task ended with: a code without a JSON-API
    meaning (a task failure this package named, a code CaptchaAI added later) is ERROR_CAPTCHA_UNSOLVABLE."""
    return _FROM_V1.get(code, JsonError.CAPTCHA_UNSOLVABLE)


# -- the other way: a provider's error -> this package's code (the createTask client) ---------------------------------
#: a provider's ``errorCode`` -> the code with its meaning in :class:`~captcha_worker.codes.Code` (hence its class:
#: fatal, capacity, transient, task). The JSON API's ERROR_ZERO_BALANCE means "no money": it is a capacity wait here,
#: as 2captcha's in.php one is for a res.php provider (nothing was created, so nothing is charged; the balance
#: alert says why).
_TO_V1: Final[Mapping[str, str]] = {
    "ERROR_KEY_DOES_NOT_EXIST": Code.ERROR_KEY_DOES_NOT_EXIST,
    "ERROR_ACCOUNT_SUSPENDED": Code.ERROR_KEY_DOES_NOT_EXIST,
    "ERROR_IP_NOT_ALLOWED": Code.ERROR_IP_NOT_ALLOWED,
    "ERROR_IP_BLOCKED": Code.IP_BANNED,
    "ERROR_IP_BANNED": Code.IP_BANNED,
    "ERROR_NO_SLOT_AVAILABLE": Code.ERROR_NO_SLOT_AVAILABLE,
    "ERROR_ZERO_BALANCE": Code.ERROR_ZERO_BALANCE,
    "ERROR_TOO_MUCH_REQUESTS": Code.ERROR_TOO_MUCH_REQUESTS,
    "ERROR_RATE_LIMIT": Code.ERROR_TOO_MUCH_REQUESTS,
    "ERROR_SERVICE_UNAVALIABLE": Code.ERROR_SERVER_ERROR,  # CapSolver's spelling
    "ERROR_SERVICE_UNAVAILABLE": Code.ERROR_SERVER_ERROR,
    "ERROR_CAPTCHA_UNSOLVABLE": Code.ERROR_CAPTCHA_UNSOLVABLE,
    "ERROR_TASK_TIMEOUT": Code.ERROR_CAPTCHA_UNSOLVABLE,  # CapSolver: not solved within 120 s
    "ERROR_ZERO_CAPTCHA_FILESIZE": Code.ERROR_ZERO_CAPTCHA_FILESIZE,
    "ERROR_TOO_BIG_CAPTCHA_FILESIZE": Code.ERROR_TOO_BIG_CAPTCHA_FILESIZE,
    "ERROR_IMAGE_TYPE_NOT_SUPPORTED": Code.ERROR_IMAGE_TYPE_NOT_SUPPORTED,
    "ERROR_PAGEURL": Code.ERROR_PAGEURL,
    "ERROR_RECAPTCHA_INVALID_SITEKEY": Code.ERROR_GOOGLEKEY,
    "ERROR_BAD_PARAMETERS": Code.ERROR_BAD_PARAMETERS,
    "ERROR_INVALID_TASK_DATA": Code.ERROR_BAD_PARAMETERS,
    "ERROR_BAD_REQUEST": Code.ERROR_BAD_PARAMETERS,
    "ERROR_TASK_ABSENT": Code.ERROR_BAD_PARAMETERS,
    "ERROR_TASK_NOT_SUPPORTED": Code.ERROR_BAD_PARAMETERS,
    "ERROR_NO_SUCH_METHOD": Code.ERROR_BAD_PARAMETERS,
    "ERROR_BAD_PROXY": Code.ERROR_BAD_PROXY,
    "ERROR_PROXY_CONNECT_REFUSED": Code.ERROR_BAD_PROXY,
    "ERROR_PROXY_CONNECT_TIMEOUT": Code.ERROR_BAD_PROXY,
    "ERROR_PROXY_READ_TIMEOUT": Code.ERROR_BAD_PROXY,
    "ERROR_PROXY_BANNED": Code.ERROR_BAD_PROXY,
    "ERROR_PROXY_TRANSPARENT": Code.ERROR_BAD_PROXY,
    "ERROR_PROXY_NOT_AUTHORISED": Code.ERROR_BAD_PROXY,
    "ERROR_NO_SUCH_CAPCHA_ID": Code.ERROR_WRONG_CAPTCHA_ID,
    "ERROR_TASKID_INVALID": Code.ERROR_WRONG_CAPTCHA_ID,  # CapSolver
    "WRONG_CAPTCHA_ID": Code.ERROR_WRONG_CAPTCHA_ID,  # CapMonster Cloud
}
#: Anti-Captcha's and 2captcha's numbering, for a reply with an ``errorId`` and no ``errorCode`` (1 is every error
#: on CapSolver and CapMonster Cloud: it names none)
_BY_ID: Final[Mapping[int, str]] = {e.error_id: e.code for e in JsonError if e.error_id != 1}
_CODE_SHAPE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def to_v1(error_code: object, error_id: object) -> str | None:
    """This package's code for a provider's error reply (its ``errorCode``, else its ``errorId`` by Anti-Captcha's
    numbering); a code-shaped ``errorCode`` not known here is kept as it is (a task failure). None: the reply names
    no error this package can tell (no code, an ``errorId`` of 1 or one not numbered)."""
    if isinstance(error_code, str) and error_code:
        known = _TO_V1.get(error_code)
        if known is not None:
            return known
        if len(error_code) <= 64 and set(error_code) <= _CODE_SHAPE:
            return error_code
        return None
    if isinstance(error_id, int) and not isinstance(error_id, bool):
        code = _BY_ID.get(error_id)
        return to_v1(code, None) if code is not None else None
    return None
