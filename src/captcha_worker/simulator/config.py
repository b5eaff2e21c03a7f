"""The simulator's settings: :class:`SimConfig` (immutable), its faults and latencies, and how a
``POST /_sim/config`` body patches it."""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Final, TypeVar

from captcha_worker import methods
from captcha_worker.methods import Kind

MAX_IMAGE_BYTES: Final = 1024 * 1024  # "1024 KB Max" (the current error page); the older one said 100 kB
MIN_IMAGE_BYTES: Final = 100  # "< 100 bytes" (the older error page and the official SDK); the current one says 1 KB
_KEY_RE: Final = re.compile(r"[A-Za-z0-9]{32}")


class OverCap(enum.StrEnum):
    """What ``in.php`` does when all plan threads are busy."""

    QUEUE = "queue"  # accept; the task waits for a free thread before its latency starts (CaptchaAI SDK)
    ZERO_BALANCE = "zero_balance"  # ERROR_ZERO_BALANCE (CaptchaAI docs)
    NO_SLOT = "no_slot"  # ERROR_NO_SLOT_AVAILABLE (2captcha-style services)
    HTTP429 = "http429"  # HTTP 429 Too Many Requests


class Profile(enum.StrEnum):
    """How the simulated account is billed (issue 27): ``captchaai`` is a thread-billed plan (threads, a balance that
    never moves); the others are pay-per-solve providers: every accepted submission that will be answered is charged
    its kind's price from the balance at once, a submission the balance cannot pay is ERROR_ZERO_BALANCE, and the
    kinds CaptchaAI lacks (``methods.FOREIGN_KINDS``, also as JSON-API types) are solved too. An UNSOLVABLE one is
    refunded by 2captcha (never charged) and charged by Anti-Captcha (docs: "5 workers failed", charged).
    ``--threads`` is then the provider's capacity for this account."""

    CAPTCHAAI = "captchaai"
    TWOCAPTCHA = "2captcha"
    ANTICAPTCHA = "anticaptcha"

    @property
    def per_solve(self) -> bool:
        return self is not Profile.CAPTCHAAI

    @property
    def charges_unsolvable(self) -> bool:
        """An ERROR_CAPTCHA_UNSOLVABLE solve is charged (Anti-Captcha's meaning; 2captcha refunds it)."""
        return self is Profile.ANTICAPTCHA


#: each per-solve profile's price per 1,000 solves of any kind, in micro-units per solve (1450 = 1.45 per 1,000)
DEFAULT_PRICE_MICRO: Final[Mapping[Profile, int]] = MappingProxyType({
    Profile.CAPTCHAAI: 0, Profile.TWOCAPTCHA: 1450, Profile.ANTICAPTCHA: 2000})


class Fault(enum.StrEnum):
    """Injectable faults. Each has a rate (field of the same name in :class:`Faults`)."""

    HTML502 = "html502"  # HTTP 502 with an HTML page (in.php and res.php)
    NONJSON = "nonjson"  # HTTP 200 with an HTML body that is neither JSON nor a protocol answer
    RESET = "reset"  # the connection is reset (TCP RST) without any response
    SLOW = "slow"  # the response is delayed by SimConfig.slow_seconds
    UNSOLVABLE = "unsolvable"  # per accepted task: it ends with ERROR_CAPTCHA_UNSOLVABLE (thread freed)
    SERVER_ERROR = "server_error"  # in.php answers ERROR_SERVER_ERROR (after validating the request)
    LOST = "lost"  # the request takes effect, then the connection is reset instead of the reply (a lost reply)


_TRANSPORT_FAULTS: Final = (Fault.RESET, Fault.HTML502, Fault.NONJSON)


def check_rate(name: str, rate: float) -> None:
    if not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
        raise ValueError(f"fault {name!r}: rate must be a number between 0 and 1, got {rate!r}")


@dataclass(frozen=True)
class Faults:
    """Fault rates, each 0..1. Transport faults (reset, html502, nonjson, slow) are drawn per in.php/res.php
    request and happen before the request has any effect; ``lost`` is drawn per request too, after it took effect
    (a created task stays created, and charged); ``unsolvable`` is drawn per accepted task."""

    html502: float = 0.0
    nonjson: float = 0.0
    reset: float = 0.0
    slow: float = 0.0
    unsolvable: float = 0.0
    server_error: float = 0.0
    lost: float = 0.0

    def __post_init__(self) -> None:
        for fault in Fault:
            check_rate(fault.value, self.rate(fault))

    def rate(self, fault: Fault) -> float:
        value: float = getattr(self, fault.value)
        return value

    def with_rates(self, rates: Mapping[str, float]) -> Faults:
        """A copy with some rates changed; unknown names raise ValueError."""
        for name in rates:
            fault_named(name)
        return dataclasses.replace(self, **{name: float(rate) for name, rate in rates.items()})


E = TypeVar("E", bound=enum.Enum)


def _member(kind: type[E], what: str, name: str) -> E:
    """`kind`'s member whose value is `name`; ValueError naming the known ones otherwise."""
    try:
        return kind(name)
    except ValueError:
        known = ", ".join(str(m.value) for m in kind)
        raise ValueError(f"unknown {what} {name!r} (known: {known})") from None


def fault_named(name: str) -> Fault:
    return _member(Fault, "fault", name)


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


def kind_named(name: str) -> str:
    """A kind the simulator knows: CaptchaAI's, and the foreign ones a per-solve profile solves."""
    if name not in methods.LABEL_KIND_NAMES:
        raise ValueError(f"unknown kind {name!r} (known: {', '.join(methods.LABEL_KIND_NAMES)})")
    return name


def priced_kind_named(name: str) -> str:
    """A kind a price may be given for: CaptchaAI's and the foreign ones."""
    if name not in methods.LABEL_KIND_NAMES:
        raise ValueError(f"unknown kind {name!r} (known: {', '.join(methods.LABEL_KIND_NAMES)})")
    return name


def parse_price(text: str) -> int:
    """A price per 1,000 solves (``"1.45"``) as micro-units per solve: at most 3 decimals, >= 0."""
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"price {text!r}: expected a price per 1,000 solves like 1.45") from None
    micro = d * 1000
    if not d.is_finite() or d < 0 or micro != micro.to_integral_value():
        raise ValueError(f"price {text!r}: a number >= 0 with at most 3 decimals")
    return int(micro)


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
    speed: float = 1.0  # solve times are divided by it (nothing else: answers stay readable retention_seconds)
    faults: Faults = field(default_factory=Faults)
    keys: frozenset[str] | None = None  # accepted keys; None = any well-formed (32 alphanumeric) key
    balance: float = 10.0  # what getbalance says
    ban_after: int = 5  # bad-key requests from one IP within ban_window_seconds before IP_BANNED; 0 = never
    ban_window_seconds: float = 60.0
    ban_seconds: float = 300.0
    slow_seconds: float = 5.0  # delay of the `slow` fault
    retention_seconds: float = 600.0  # how long a solved task's answer stays readable (real seconds)
    min_image_bytes: int = MIN_IMAGE_BYTES  # smaller images: ERROR_ZERO_CAPTCHA_FILESIZE
    max_image_bytes: int = MAX_IMAGE_BYTES  # larger images: ERROR_TOO_BIG_CAPTCHA_FILESIZE
    pingback: bool = True  # GET the pingback URL of a task when it is solved
    seed: int | None = None  # RNG seed (answers, latencies, faults, ids); None = unpredictable
    introspection: bool = True  # serve /_sim/*
    profile: Profile = Profile.CAPTCHAAI  # how the account is billed (Profile)
    prices: Mapping[str, int] = field(default_factory=dict)  # kind name -> micro per solve (per-solve profiles)

    def __post_init__(self) -> None:
        object.__setattr__(self, "profile", Profile(self.profile))
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        for name, micro in self.prices.items():
            priced_kind_named(name)
            _require(isinstance(micro, int) and micro >= 0, f"price of {name} must be whole micro-units >= 0")
        object.__setattr__(self, "latency", MappingProxyType(dict(self.latency)))
        object.__setattr__(self, "over_cap", OverCap(self.over_cap))
        if not (isinstance(self.threads, int) and self.threads >= 1):
            raise ValueError(f"threads must be a whole number >= 1, got {self.threads!r}")
        for name in self.latency:
            kind_named(name)
        _require(self.speed > 0, f"speed must be > 0, got {self.speed!r}")
        _require(self.balance >= 0, f"balance must be >= 0, got {self.balance!r}")
        _require(self.ban_after >= 0, f"ban_after must be >= 0, got {self.ban_after!r}")
        for name in ("ban_window_seconds", "ban_seconds", "slow_seconds"):
            value = getattr(self, name)
            _require(value >= 0, f"{name} must be >= 0, got {value!r}")
        _require(self.retention_seconds > 0, f"retention_seconds must be > 0, got {self.retention_seconds!r}")
        for name in ("min_image_bytes", "max_image_bytes"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 0, f"{name} must be a whole number >= 0, got {value!r}")
        _require(self.min_image_bytes <= self.max_image_bytes,
                 f"min_image_bytes ({self.min_image_bytes}) must not exceed max_image_bytes ({self.max_image_bytes})")
        if self.keys is not None:
            object.__setattr__(self, "keys", frozenset(self.keys))
            for i, key in enumerate(sorted(self.keys), 1):
                _check_key_format(key, f"keys entry {i}")

    def price_micro(self, kind: Kind) -> int:
        """What one solve of `kind` costs on this account (0 on the thread-billed captchaai profile)."""
        if not self.profile.per_solve:
            return 0
        return self.prices.get(kind.name, DEFAULT_PRICE_MICRO[self.profile])

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
            "min_image_bytes": self.min_image_bytes,
            "max_image_bytes": self.max_image_bytes,
            "pingback": self.pingback,
            "profile": self.profile.value,
            "prices": dict(self.prices),
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


def number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return value


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def _patch_faults(cfg: SimConfig, value: object) -> Faults:
    if not isinstance(value, dict):
        raise ValueError('faults must be an object like {"html502": 0.5}')
    return cfg.faults.with_rates({str(k): number(v, f"fault {k!r}") for k, v in value.items()})


def _patch_latency(cfg: SimConfig, value: object) -> Mapping[str, Latency]:
    if not isinstance(value, dict):
        raise ValueError('latency must be an object like {"turnstile": "12:3"}')
    merged = dict(cfg.latency)
    for name, spec in value.items():
        if isinstance(spec, list) and len(spec) == 2:
            merged[kind_named(str(name))] = Latency(number(spec[0], "mean"), number(spec[1], "stddev"))
        else:
            merged[kind_named(str(name))] = Latency.parse(str(spec))
    return merged


def _patch_keys(_cfg: SimConfig, value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_keys(value)
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValueError("keys must be null (any key), a list of keys or a comma-separated string")
    return frozenset(value)


def _float_field(name: str) -> Callable[[SimConfig, object], float]:
    return lambda _cfg, value: number(value, name)


_PATCHERS: Final[Mapping[str, Callable[[SimConfig, object], object]]] = MappingProxyType({
    "threads": lambda _c, v: whole(v, "threads"),
    "over_cap": lambda _c, v: over_cap_named(str(v)),
    "speed": _float_field("speed"),
    "faults": _patch_faults,
    "latency": _patch_latency,
    "keys": _patch_keys,
    "balance": _float_field("balance"),
    "ban_after": lambda _c, v: whole(v, "ban_after"),
    "ban_window_seconds": _float_field("ban_window_seconds"),
    "ban_seconds": _float_field("ban_seconds"),
    "slow_seconds": _float_field("slow_seconds"),
    "retention_seconds": _float_field("retention_seconds"),
    "min_image_bytes": lambda _c, v: whole(v, "min_image_bytes"),
    "max_image_bytes": lambda _c, v: whole(v, "max_image_bytes"),
    "pingback": lambda _c, v: _flag(v, "pingback"),
    "profile": lambda _c, v: profile_named(str(v)),
})


def profile_named(name: str) -> Profile:
    return _member(Profile, "profile", name)


def over_cap_named(name: str) -> OverCap:
    try:
        return OverCap(name)
    except ValueError:
        known = ", ".join(o.value for o in OverCap)
        raise ValueError(f"unknown over-cap behaviour {name!r} (known: {known})") from None


def parse_keys(text: str) -> frozenset[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise ValueError("--keys: give at least one key")
    for i, key in enumerate(keys, 1):
        _check_key_format(key, f"--keys entry {i}")
    return frozenset(keys)
