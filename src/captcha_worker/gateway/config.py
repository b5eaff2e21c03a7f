"""The gateway's settings: the environment, and the tenants (``GATEWAY_TENANTS``).

``GATEWAY_TENANTS`` is inline JSON (it starts with ``{``) or the path of a JSON file::

    {"tenants": [
      {"name": "team-a", "key": "<32 letters and digits>", "threads": 10, "reserved": 2,
       "rate_limit": {"requests_per_second": 20, "burst": 40},
       "pingback": {"hosts": ["hooks.team-a.example"], "networks": ["10.20.0.0/16"], "secret": "<16+ chars>"},
       "balance": 0}
    ]}

``name`` (a DNS label, 1-32 characters) and ``threads`` (the tenant's share of the plan) are required; ``key`` and
the pingback ``secret`` may instead be files in ``GATEWAY_SECRETS_DIR`` (``<name>.key``, ``<name>.pingback-secret``:
a mounted Secret), so names and shares can live in a ConfigMap. Unknown fields are errors (a typo never passes
silently). Every error is one :class:`ConfigError` line naming the tenant and the field.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from captcha_worker.config import (
    DEFAULT_API_URL,
    ConfigError,
    RedisConfig,
    Secret,
    _Env,
    max_task_bytes,
    queue_name,
    read_key_file,
    redact_url,
    task_ttl,
)
from captcha_worker.task import valid_tenant

KEY_RE = re.compile(r"^[A-Za-z0-9]{32}$")
_HOST_RE = re.compile(r"^(?:\*\.)?[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$")
MAX_TENANTS = 100  # each is a metric label value: the set stays bounded
MIN_SECRET_CHARS = 16
_TENANT_FIELDS = frozenset({"name", "key", "threads", "reserved", "rate_limit", "pingback", "balance"})
_RATE_FIELDS = frozenset({"requests_per_second", "burst"})
_PINGBACK_FIELDS = frozenset({"hosts", "networks", "secret"})
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``requests_per_second`` refill, ``burst`` capacity (per gateway process)."""

    requests_per_second: float
    burst: int


@dataclass(frozen=True)
class PingbackPolicy:
    """Where a tenant's ``pingback=`` URLs may point, and the HMAC secret that signs each call.

    ``hosts``: host names (``*.example.com`` covers its subdomains) or IP literals a URL may name. ``networks``:
    address ranges a call may connect to besides public addresses: loopback, private, link-local and other
    special-purpose addresses are refused unless listed here."""

    hosts: tuple[str, ...]
    networks: tuple[Network, ...]
    secret: Secret

    def host_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        for allowed in self.hosts:
            if allowed.startswith("*."):
                if host.endswith(allowed[1:]) and host != allowed[2:]:
                    return True
            elif host == allowed:
                return True
        return False


@dataclass(frozen=True)
class Tenant:
    name: str
    key: Secret = field(repr=False)
    threads: int
    reserved: int = 0
    rate_limit: RateLimit | None = None
    pingback: PingbackPolicy | None = None
    balance: float = 0.0


@dataclass(frozen=True)
class GatewayConfig:
    redis: RedisConfig
    queue: str
    tenants: tuple[Tenant, ...]
    host: str
    port: int
    metrics_host: str
    metrics_port: int
    tls_cert_file: str | None
    tls_key_file: str | None
    max_body_bytes: int
    max_task_bytes: int
    task_ttl_seconds: int
    task_deadline_seconds: float  # 0: no deadline
    solve_timeout_seconds: float  # solve.php: how long a request waits for its answer (also the task's deadline)
    plan_threads: int | None  # CAPTCHAAI_THREADS, when given: reserved threads must fit in it
    api_key: Secret  # upstream CaptchaAI key: forwards reportbad/reportgood (and getbalance, when asked)
    api_url: str
    upstream_balance: bool
    callback_timeout_seconds: float
    callback_attempts: int
    log_level: str
    tenants_source: str = ""  # GATEWAY_TENANTS as given: re-read with the secrets for a rotated key
    secrets_dir: str | None = None  # GATEWAY_SECRETS_DIR
    key_reload_seconds: float = 10.0  # KEY_RELOAD_SECONDS: how often the key files are re-read
    api_key_file: str | None = None  # CAPTCHAAI_KEY_FILE: the plan's key from a file, re-read while running

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> GatewayConfig:
        env = os.environ if env is None else env
        e = _Env(env)
        plan = e.integer("CAPTCHAAI_THREADS", 0, minimum=1) if e.raw("CAPTCHAAI_THREADS") else None
        source = e.required("GATEWAY_TENANTS", "the tenants, as JSON or the path of a JSON file (docs/gateway.md)")
        tenants = load_tenants(source, e.raw("GATEWAY_SECRETS_DIR"))
        check_reserved(tenants, plan)
        api_key, api_key_file = plan_key(e)
        api_url = e.text("CAPTCHAAI_URL", DEFAULT_API_URL).rstrip("/")
        if not re.match(r"^https?://[^/\s]+", api_url):
            raise ConfigError(f"CAPTCHAAI_URL must be an http(s) URL, got {redact_url(api_url)!r}")
        upstream_balance = e.flag("GATEWAY_UPSTREAM_BALANCE", False)
        if upstream_balance and not api_key:
            raise ConfigError("GATEWAY_UPSTREAM_BALANCE needs CAPTCHAAI_KEY or CAPTCHAAI_KEY_FILE (the plan's key) "
                              "to read the balance")
        cert, key = e.raw("GATEWAY_TLS_CERT_FILE"), e.raw("GATEWAY_TLS_KEY_FILE")
        for name, path in (("GATEWAY_TLS_CERT_FILE", cert), ("GATEWAY_TLS_KEY_FILE", key)):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name} points to a missing file: {path}")
        if key is not None and cert is None:
            raise ConfigError("GATEWAY_TLS_KEY_FILE needs GATEWAY_TLS_CERT_FILE")
        log_level = e.text("LOG_LEVEL", "info").lower()
        if log_level not in {"debug", "info", "warning", "error"}:
            raise ConfigError(f"LOG_LEVEL must be debug, info, warning or error, got {log_level!r}")
        task_bytes = max_task_bytes(e)
        return GatewayConfig(
            redis=RedisConfig.from_env(env), queue=queue_name(env), tenants=tenants,
            host=e.text("GATEWAY_HOST", "0.0.0.0"),  # noqa: S104 - clients come from outside the pod
            port=e.integer("GATEWAY_PORT", 8080, minimum=0, maximum=65535),
            metrics_host=e.text("METRICS_HOST", "0.0.0.0"),  # noqa: S104 - probes and scrapes come from outside
            metrics_port=e.integer("METRICS_PORT", 9100, minimum=0, maximum=65535),
            tls_cert_file=cert, tls_key_file=key,
            max_body_bytes=e.integer("GATEWAY_MAX_BODY_BYTES", task_bytes, minimum=1024),
            max_task_bytes=task_bytes, task_ttl_seconds=task_ttl(e),
            task_deadline_seconds=e.number("GATEWAY_TASK_DEADLINE_SECONDS", 600.0),
            solve_timeout_seconds=e.number("GATEWAY_SOLVE_TIMEOUT_SECONDS", 120.0, minimum=1.0),
            plan_threads=plan, api_key=Secret(api_key), api_url=api_url, upstream_balance=upstream_balance,
            callback_timeout_seconds=e.number("GATEWAY_CALLBACK_TIMEOUT_SECONDS", 5.0, minimum=0.1),
            callback_attempts=e.integer("GATEWAY_CALLBACK_ATTEMPTS", 3, minimum=1, maximum=10),
            log_level=log_level, tenants_source=source, secrets_dir=e.raw("GATEWAY_SECRETS_DIR"),
            key_reload_seconds=e.number("KEY_RELOAD_SECONDS", 10.0, minimum=1.0), api_key_file=api_key_file,
        )

    def secrets(self) -> list[str]:
        """Every secret value, for the log redactor."""
        out = [t.key.value for t in self.tenants] + [self.api_key.value, self.redis.password.value]
        out += [t.pingback.secret.value for t in self.tenants if t.pingback is not None]
        return [s for s in out if s]


def plan_key(e: _Env) -> tuple[str, str | None]:
    """(key, file): the plan's key, optional here (reports are then counted, not forwarded): CAPTCHAAI_KEY_FILE
    (a mounted Secret, re-read while running: keyfile.KeyFileWatcher) or CAPTCHAAI_KEY, not both."""
    path, inline = e.raw("CAPTCHAAI_KEY_FILE"), e.raw("CAPTCHAAI_KEY")
    if path is not None and inline is not None:
        raise ConfigError("set CAPTCHAAI_KEY or CAPTCHAAI_KEY_FILE, not both")
    if path is not None:
        return read_key_file(path), path
    if inline and not KEY_RE.match(inline):
        raise ConfigError(f"CAPTCHAAI_KEY must be 32 letters and digits (got {len(inline)} characters)")
    return inline or "", None


# -- tenants ---------------------------------------------------------------------------------------------------
def load_tenants(source: str, secrets_dir: str | None = None) -> tuple[Tenant, ...]:
    """The tenants of ``GATEWAY_TENANTS`` (inline JSON or a file path), secrets completed from `secrets_dir`."""
    text = source if source.lstrip().startswith("{") else _read_file(source)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"GATEWAY_TENANTS is not valid JSON ({exc.args[0].split(':')[0]})") from None
    if not isinstance(data, dict) or set(data) != {"tenants"} or not isinstance(data["tenants"], list):
        raise ConfigError('GATEWAY_TENANTS must be {"tenants": [...]} (docs/gateway.md)')
    entries = data["tenants"]
    if not 1 <= len(entries) <= MAX_TENANTS:
        raise ConfigError(f"GATEWAY_TENANTS must list 1 to {MAX_TENANTS} tenants, got {len(entries)}")
    secrets = Path(secrets_dir) if secrets_dir else None
    if secrets is not None and not secrets.is_dir():
        raise ConfigError(f"GATEWAY_SECRETS_DIR is not a directory: {secrets_dir}")
    tenants = tuple(_tenant(entry, i, secrets) for i, entry in enumerate(entries))
    _check_unique(tenants)
    return tenants


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"GATEWAY_TENANTS: cannot read {path} ({type(exc).__name__})") from None


class _Where:
    """Names the tenant an error is about: ``GATEWAY_TENANTS: tenants[1] (team-b): ...``."""

    def __init__(self, index: int, name: object) -> None:
        label = f" ({name})" if isinstance(name, str) and valid_tenant(name) else ""
        self.prefix = f"GATEWAY_TENANTS: tenants[{index}]{label}"

    def __call__(self, message: str) -> ConfigError:
        return ConfigError(f"{self.prefix}: {message}")


def _tenant(entry: object, index: int, secrets: Path | None) -> Tenant:
    if not isinstance(entry, dict):
        raise ConfigError(f"GATEWAY_TENANTS: tenants[{index}] must be an object")
    where = _Where(index, entry.get("name"))
    unknown = sorted(set(entry) - _TENANT_FIELDS)
    if unknown:
        raise where(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_TENANT_FIELDS))})")
    name = entry.get("name")
    if not isinstance(name, str) or not valid_tenant(name):
        raise where("name must be 1-32 lowercase letters, digits and inner hyphens")
    threads = _int(entry.get("threads"), "threads", where, minimum=1)
    reserved = _int(entry.get("reserved", 0), "reserved", where, minimum=0)
    if reserved > threads:
        raise where(f"reserved ({reserved}) must not exceed threads ({threads})")
    key = _secret(entry.get("key"), secrets, f"{name}.key", "key", where)
    if not KEY_RE.match(key):
        raise where(f"key must be 32 letters and digits (got {len(key)} characters)")
    balance = entry.get("balance", 0.0)
    if isinstance(balance, bool) or not isinstance(balance, int | float) or not math.isfinite(balance):
        raise where("balance must be a number")
    return Tenant(name=name, key=Secret(key), threads=threads, reserved=reserved,
                  rate_limit=_rate_limit(entry.get("rate_limit"), where),
                  pingback=_pingback(entry.get("pingback"), name, secrets, where), balance=float(balance))


def _int(value: object, name: str, where: _Where, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise where(f"{name} must be an integer >= {minimum}, got {json.dumps(value)}")
    return value


def _secret(inline: object, secrets: Path | None, filename: str, name: str, where: _Where) -> str:
    """An inline secret, or the file `filename` of GATEWAY_SECRETS_DIR (a mounted Secret)."""
    if inline is not None:
        if not isinstance(inline, str):
            raise where(f"{name} must be a string")
        return inline.strip()
    path = secrets / filename if secrets is not None else None
    if path is None or not path.is_file():
        hint = f"{secrets}/{filename}" if secrets is not None else f"GATEWAY_SECRETS_DIR/{filename}"
        raise where(f"{name} is missing: give it in the tenant, or as the file {hint}")
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise where(f"cannot read {path} ({type(exc).__name__})") from None


def _rate_limit(value: object, where: _Where) -> RateLimit | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= _RATE_FIELDS or "requests_per_second" not in value:
        raise where('rate_limit must be {"requests_per_second": N, "burst": M} (burst optional)')
    rate = value["requests_per_second"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise where(f"rate_limit.requests_per_second must be a number > 0, got {json.dumps(rate)}")
    burst = _int(value.get("burst", max(1, math.ceil(rate))), "rate_limit.burst", where, minimum=1)
    return RateLimit(float(rate), burst)


def _pingback(value: object, name: str, secrets: Path | None, where: _Where) -> PingbackPolicy | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= _PINGBACK_FIELDS:
        raise where(f"pingback must be an object with {', '.join(sorted(_PINGBACK_FIELDS))}")
    hosts = value.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise where("pingback.hosts must be a non-empty list of host names")
    for host in hosts:
        if not _valid_host(host):
            raise where(f"pingback.hosts: {host[:80]!r} is not a host name, *.domain or IP address")
    networks = value.get("networks", [])
    if not isinstance(networks, list) or not all(isinstance(n, str) for n in networks):
        raise where("pingback.networks must be a list of address ranges (CIDR)")
    try:
        parsed = tuple(ipaddress.ip_network(n, strict=False) for n in networks)
    except ValueError as exc:
        raise where(f"pingback.networks: {exc}") from None
    secret = _secret(value.get("secret"), secrets, f"{name}.pingback-secret", "pingback.secret", where)
    if len(secret) < MIN_SECRET_CHARS:
        raise where(f"pingback.secret must be at least {MIN_SECRET_CHARS} characters")
    return PingbackPolicy(tuple(h.lower().rstrip(".") for h in hosts), parsed, Secret(secret))


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return len(host) <= 253 and bool(_HOST_RE.match(host.lower().rstrip(".")))


def _check_unique(tenants: tuple[Tenant, ...]) -> None:
    names: set[str] = set()
    keys: dict[str, str] = {}
    for t in tenants:
        if t.name in names:
            raise ConfigError(f"GATEWAY_TENANTS: tenant {t.name!r} is listed twice")
        names.add(t.name)
        if t.key.value in keys:
            raise ConfigError(f"GATEWAY_TENANTS: tenants {keys[t.key.value]!r} and {t.name!r} have the same key")
        keys[t.key.value] = t.name


def check_reserved(tenants: tuple[Tenant, ...], plan_threads: int | None) -> None:
    """Reserved threads are held back for their tenant: together they must fit in the plan."""
    reserved = sum(t.reserved for t in tenants)
    if plan_threads is not None and reserved > plan_threads:
        raise ConfigError(f"GATEWAY_TENANTS: reserved threads add up to {reserved}, more than the plan's "
                          f"{plan_threads} (CAPTCHAAI_THREADS)")


def tenant_json(tenants: tuple[Tenant, ...]) -> list[dict[str, Any]]:
    """Names and shares (no secret): what `captcha-worker gateway --check` prints."""
    return [{"name": t.name, "threads": t.threads, "reserved": t.reserved,
             "rate_limit": None if t.rate_limit is None else vars(t.rate_limit),
             "pingback_hosts": list(t.pingback.hosts) if t.pingback else []} for t in tenants]
