"""Answers in the shape CaptchaAI gives for each kind (``methods.Answer``), random but plausible: text that
follows the image's rules, tokens that look like each service's, GeeTest objects, grid cells."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from captcha_worker import methods
from captcha_worker.methods import Answer, AnswerShape, Kind

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
ANSWER_INPUTS: Final = frozenset({"challenge", "gt", "userAgent", "grid_size", "numeric", "min_len",
                                   "max_len"})


@dataclass(frozen=True)
class TextRules:
    """Image answer constraints: ``numeric`` 0 any, 1 digits, 2 letters, 3 digits or letters, 4 both;
    ``min_len``/``max_len`` 0 = no limit."""

    numeric: int = 0
    min_len: int = 0
    max_len: int = 0

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> TextRules | None:
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
    "recaptcha_v3_enterprise": _recaptcha_token,
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
    if grid in methods.GRID_SIZES:
        return methods.GRID_SIZES[grid]
    return sum(1 for p in kind.required if p.name.startswith("image_base64_")) or 9


def _indices(kind: Kind, rng: random.Random, params: Mapping[str, str]) -> str:
    cells = _cells(kind, params)
    chosen = sorted(rng.sample(range(1, cells + 1), rng.randint(1, max(1, cells // 2))))
    return json.dumps(chosen, separators=(",", ":"))


def make_answer(kind: Kind, rng: random.Random, params: Mapping[str, str], wall: int) -> Answer:
    """A random answer in the shape CaptchaAI gives for ``kind`` (``wall``: unix time of the solve)."""
    match kind.shape:
        case AnswerShape.TEXT:
            return Answer((TextRules.parse(params) or TextRules()).generate(rng))
        case AnswerShape.TOKEN:
            return Answer(_token(kind, rng, params, wall))
        case AnswerShape.TOKEN_WITH_UA:
            return Answer(_token(kind, rng, params, wall), _user_agent(rng, params))
        case AnswerShape.GEETEST:
            return Answer(_geetest(kind, rng, params, wall))
        case AnswerShape.INDICES:
            return Answer(_indices(kind, rng, params))
