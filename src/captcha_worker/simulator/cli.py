"""The flags of ``captcha-worker simulator`` and the :class:`SimConfig` they describe."""

from __future__ import annotations

import argparse
import ssl
from typing import Final

from captcha_worker import methods
from captcha_worker.simulator.config import (
    Fault,
    Faults,
    Latency,
    OverCap,
    Profile,
    SimConfig,
    check_rate,
    fault_named,
    kind_named,
    number,
    over_cap_named,
    parse_keys,
    parse_price,
    priced_kind_named,
    profile_named,
    whole,
)
from captcha_worker.tls import tls_context

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
    add("--speed", type=float, help=f"divide every solve time by this (default {d.speed:g})")
    add("--fault", action="append", default=[], metavar="NAME=RATE",
        help=f"fault rate 0..1 (repeatable; faults: {', '.join(f.value for f in Fault)})")
    add("--keys", metavar="K1,K2", help="accepted API keys (default: any 32-character key)")
    add("--balance", type=float, help=f"what getbalance reports (default {d.balance:g}); a per-solve profile "
        "charges its solves from it")
    add("--profile", metavar="|".join(p.value for p in Profile),
        help=f"billing: captchaai (plan threads) or a per-solve provider (default {d.profile.value})")
    add("--price", action="append", default=[], metavar="KIND=PER_1000",
        help="a per-solve profile's price per 1,000 solves of a kind (repeatable; default 1.45 for 2captcha, "
             "2.00 for anticaptcha)")
    add("--slow-seconds", type=float, help=f"delay of the slow fault (default {d.slow_seconds:g})")
    add("--ban-after", type=int, help=f"bad-key requests before IP_BANNED, 0 = never (default {d.ban_after})")
    add("--ban-window-seconds", type=float, help=f"window for --ban-after (default {d.ban_window_seconds:g})")
    add("--ban-seconds", type=float, help=f"IP ban duration (default {d.ban_seconds:g})")
    add("--retention-seconds", type=float,
        help=f"how long answers stay readable, in real seconds whatever --speed (default {d.retention_seconds:g})")
    add("--min-image-bytes", type=int,
        help=f"smaller images get ERROR_ZERO_CAPTCHA_FILESIZE (default {d.min_image_bytes})")
    add("--max-image-bytes", type=int,
        help=f"larger images get ERROR_TOO_BIG_CAPTCHA_FILESIZE (default {d.max_image_bytes})")
    add("--no-pingback", action="store_true", help="accept pingback=URL but never call it")
    add("--seed", type=int, help="RNG seed for reproducible runs")
    add("--no-introspection", action="store_true", help="do not serve /_sim/stats, /_sim/reset, /_sim/config")
    add("--tls-cert", metavar="PEM", help="serve https with this certificate (chain) file")
    add("--tls-key", metavar="PEM", help="private key of --tls-cert (default: in the certificate file)")
    add("--log-level", metavar="LEVEL", help="debug, info, warning or error (default: $LOG_LEVEL or info)")


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
            result[kind_named(name)] = Latency.parse(spec)
        except ValueError as exc:
            raise ValueError(f"--latency {name}={spec}: {exc}") from None
    return result


def _parse_fault_args(values: object) -> Faults:
    rates: dict[str, float] = {}
    for name, spec in _assignments(values, "--fault"):
        try:
            rate = float(spec)
            check_rate(fault_named(name).value, rate)
        except ValueError as exc:
            raise ValueError(f"--fault {name}={spec}: {exc}") from None
        rates[name] = rate
    return Faults().with_rates(rates)


def _parse_price_args(values: object) -> dict[str, int]:
    result = {}
    for name, spec in _assignments(values, "--price"):
        try:
            result[priced_kind_named(name)] = parse_price(spec)
        except ValueError as exc:
            raise ValueError(f"--price {name}={spec}: {exc}") from None
    return result


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """The SimConfig the flags of :func:`add_arguments` describe; ValueError with one line on bad input."""
    d = _DEFAULTS

    def pick(name: str, default: float) -> float:
        value = _arg(ns, name)
        return default if value is None else number(value, "--" + name.replace("_", "-"))

    def pick_int(name: str, default: int) -> int:
        value = _arg(ns, name)
        return default if value is None else whole(value, "--" + name.replace("_", "-"))

    over_cap = _arg(ns, "over_cap")
    keys = _arg(ns, "keys")
    seed = _arg(ns, "seed")
    return SimConfig(
        threads=pick_int("threads", d.threads),
        over_cap=d.over_cap if over_cap is None else over_cap_named(str(over_cap)),
        latency=_parse_latency_args(_arg(ns, "latency")),
        speed=pick("speed", d.speed),
        faults=_parse_fault_args(_arg(ns, "fault")),
        keys=None if keys is None else parse_keys(str(keys)),
        balance=pick("balance", d.balance),
        ban_after=pick_int("ban_after", d.ban_after),
        ban_window_seconds=pick("ban_window_seconds", d.ban_window_seconds),
        ban_seconds=pick("ban_seconds", d.ban_seconds),
        slow_seconds=pick("slow_seconds", d.slow_seconds),
        retention_seconds=pick("retention_seconds", d.retention_seconds),
        min_image_bytes=pick_int("min_image_bytes", d.min_image_bytes),
        max_image_bytes=pick_int("max_image_bytes", d.max_image_bytes),
        pingback=not _arg(ns, "no_pingback"),
        seed=None if seed is None else whole(seed, "--seed"),
        introspection=not _arg(ns, "no_introspection"),
        profile=d.profile if _arg(ns, "profile") is None else profile_named(str(_arg(ns, "profile"))),
        prices=_parse_price_args(_arg(ns, "price")),
    )


def tls_from_args(ns: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context of --tls-cert/--tls-key, None for plain HTTP; ValueError with one line on bad input."""
    cert, key = _arg(ns, "tls_cert"), _arg(ns, "tls_key")
    if cert is None:
        if key is not None:
            raise ValueError("--tls-key needs --tls-cert")
        return None
    return tls_context(str(cert), None if key is None else str(key))
