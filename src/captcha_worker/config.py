"""Every setting of the worker, read from the environment.

Bad or missing configuration raises :class:`ConfigError` with one readable sentence naming the variable; the CLI
prints it on one line and exits with status 2.  Secrets (the API key, the Redis password) are held in
:class:`Secret` so that ``repr()`` and logs never show them.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from urllib.parse import urlsplit

DEFAULT_API_URL = "https://ocr.captchaai.com"
DEFAULT_QUEUE = "captcha"
DEFAULT_TASK_TTL = 86400
DEFAULT_MAX_TASK_BYTES = 1_048_576
DEFAULT_DEAD_LETTER_MAX = 10000
_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_KEY_FILE_MAX_BYTES = 4096  # a key file is 32 characters and a newline; anything far larger is not one


class ConfigError(ValueError):
    """A setting is missing or invalid. ``str()`` is one line meant for the operator."""


@dataclass(frozen=True)
class Secret:
    """A string that never prints itself."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret('***')" if self.value else "Secret('')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self.value)


class _Env:
    """Typed reads from an environment mapping, each failing with a message that names the variable."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def raw(self, name: str) -> str | None:
        value = self.env.get(name)
        if value is None:
            return None
        value = value.strip()
        return value or None

    def text(self, name: str, default: str) -> str:
        return self.raw(name) or default

    def required(self, name: str, hint: str) -> str:
        value = self.raw(name)
        if value is None:
            raise ConfigError(f"{name} is required: {hint}")
        return value

    def integer(self, name: str, default: int, *, minimum: int = 1, maximum: int | None = None) -> int:
        text = self.raw(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ConfigError(f"{name} must be {bound}, got {value}")
        return value

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        text = self.raw(name)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(value) or value < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {text}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        text = self.raw(name)
        if text is None:
            return default
        lowered = text.lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{name} must be true or false, got {text!r}")


class RedisMode(enum.StrEnum):
    """How Redis is deployed (``REDIS_MODE``)."""

    STANDALONE = "standalone"  # one server (or a managed endpoint that fails over behind one address)
    SENTINEL = "sentinel"  # a master found through Redis Sentinel (bitnami/redis' HA mode)
    CLUSTER = "cluster"  # a Redis Cluster (ElastiCache cluster mode, Memorystore cluster, Azure clustered)


DEFAULT_SENTINEL_PORT = 26379
_HOST_PORT_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.\-]+))(?::(?P<port>\d{1,5}))?$")


def host_ports(name: str, text: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (port optional, IPv6 in brackets) as pairs; a ConfigError names `name`."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        m = _HOST_PORT_RE.match(part)
        port = int(m.group("port") or default_port) if m else 0
        if not m or not 0 < port < 65536:
            raise ConfigError(f"{name} must be host:port[,host:port...], got {part[:80]!r}")
        out.append((m.group("v6") or m.group("host"), port))
    return tuple(out)


@dataclass(frozen=True)
class RedisConfig:
    url: str = "redis://localhost:6379/0"  # standalone: the server; cluster: a seed node; sentinel: unused
    username: str | None = None
    password: Secret = Secret("")
    tls_ca_file: str | None = None
    tls_insecure: bool = False
    socket_timeout_s: float = 10.0  # per command; above every blocking wait the package issues (1 s)
    connect_timeout_s: float = 5.0
    mode: RedisMode = RedisMode.STANDALONE
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str = "mymaster"
    sentinel_username: str | None = None
    sentinel_password: Secret = Secret("")
    cluster_nodes: tuple[tuple[str, int], ...] = ()  # cluster: more seed nodes than REDIS_URL's
    tls: bool = False  # TLS although the URL does not say rediss:// (sentinel mode has no URL)
    wait_replicas: int = 0  # durability: pushes and acks wait for this many replicas (WAIT); 0 = off
    wait_timeout_ms: int = 500

    @property
    def use_tls(self) -> bool:
        return self.tls or self.url.startswith("rediss://")

    @staticmethod
    def from_env(env: Mapping[str, str]) -> RedisConfig:
        e = _Env(env)
        mode_text = e.text("REDIS_MODE", "standalone").lower()
        if mode_text not in set(RedisMode):
            raise ConfigError(f"REDIS_MODE must be standalone, sentinel or cluster, got {mode_text!r}")
        mode = RedisMode(mode_text)
        url = _redis_url(e, mode)
        ca = e.raw("REDIS_TLS_CA_FILE")
        if ca is not None and not os.path.isfile(ca):
            raise ConfigError(f"REDIS_TLS_CA_FILE points to a missing file: {ca}")
        tls = e.flag("REDIS_TLS", url.startswith("rediss://"))
        if mode is not RedisMode.SENTINEL and tls != url.startswith("rediss://"):
            raise ConfigError(f"REDIS_TLS={str(tls).lower()} contradicts REDIS_URL: TLS is chosen by its scheme "
                              "(rediss:// for TLS) outside sentinel mode")
        return RedisConfig(
            url=url,
            username=e.raw("REDIS_USERNAME"),
            password=Secret(e.raw("REDIS_PASSWORD") or ""),
            tls_ca_file=ca,
            tls_insecure=e.flag("REDIS_TLS_INSECURE", False),
            socket_timeout_s=e.number("REDIS_SOCKET_TIMEOUT_SECONDS", 10.0, minimum=2.0),
            connect_timeout_s=e.number("REDIS_CONNECT_TIMEOUT_SECONDS", 5.0, minimum=0.1),
            mode=mode,
            **_sentinel_settings(e, mode),  # type: ignore[arg-type]
            cluster_nodes=_cluster_nodes(e, mode),
            tls=tls,
            wait_replicas=e.integer("REDIS_WAIT_REPLICAS", 0, minimum=0, maximum=100),
            wait_timeout_ms=e.integer("REDIS_WAIT_TIMEOUT_MS", 500, minimum=1, maximum=60_000),
        )

    def display_url(self) -> str:
        """Where Redis is, without any password: safe for logs and errors."""
        if self.mode is RedisMode.SENTINEL:
            hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
            return f"{'rediss' if self.use_tls else 'redis'}+sentinel://{hosts}/{self.sentinel_master}"
        if self.mode is RedisMode.CLUSTER:
            return f"{redact_url(self.url)} (cluster)"
        return redact_url(self.url)


def _redis_url(e: _Env, mode: RedisMode) -> str:
    if mode is RedisMode.SENTINEL:
        if e.raw("REDIS_URL") is not None:
            raise ConfigError("REDIS_URL is not used with REDIS_MODE=sentinel: the sentinels name the master "
                              "(set REDIS_SENTINELS and REDIS_SENTINEL_MASTER, and REDIS_TLS for TLS)")
        return "redis://"
    url = e.text("REDIS_URL", "redis://localhost:6379/0")
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ConfigError(f"REDIS_URL must start with redis://, rediss:// or unix://, got scheme {parts.scheme!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError("REDIS_URL has no host (expected redis://host:6379/0)")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError("REDIS_URL has an invalid port") from None
    if mode is RedisMode.CLUSTER:
        if parts.scheme == "unix":
            raise ConfigError("REDIS_URL must be redis:// or rediss:// with REDIS_MODE=cluster (no unix sockets)")
        if parts.path.strip("/") not in {"", "0"}:
            raise ConfigError(f"REDIS_URL names database {parts.path.strip('/')!r}: a Redis Cluster has only "
                              "database 0")
    return url


def _cluster_nodes(e: _Env, mode: RedisMode) -> tuple[tuple[str, int], ...]:
    text = e.raw("REDIS_CLUSTER_NODES")
    if text is None:
        return ()
    if mode is not RedisMode.CLUSTER:
        raise ConfigError(f"REDIS_CLUSTER_NODES is set but REDIS_MODE is {mode.value}: "
                          "set REDIS_MODE=cluster to use it")
    return host_ports("REDIS_CLUSTER_NODES", text, 6379)


def _sentinel_settings(e: _Env, mode: RedisMode) -> dict[str, object]:
    names = ("REDIS_SENTINELS", "REDIS_SENTINEL_MASTER", "REDIS_SENTINEL_USERNAME", "REDIS_SENTINEL_PASSWORD")
    if mode is not RedisMode.SENTINEL:
        stray = [n for n in names if e.raw(n) is not None]
        if stray:
            raise ConfigError(f"{stray[0]} is set but REDIS_MODE is {mode.value}: set REDIS_MODE=sentinel to use it")
        return {}
    sentinels = host_ports("REDIS_SENTINELS", e.required("REDIS_SENTINELS", "the sentinels as host:port,host:port "
                                                       "with REDIS_MODE=sentinel"), DEFAULT_SENTINEL_PORT)
    master = e.text("REDIS_SENTINEL_MASTER", "mymaster")
    if not re.match(r"^[A-Za-z0-9_.\-]{1,128}$", master):
        raise ConfigError(f"REDIS_SENTINEL_MASTER must be the master's name in the sentinels, got {master[:60]!r}")
    return {"sentinels": sentinels, "sentinel_master": master, "sentinel_username": e.raw("REDIS_SENTINEL_USERNAME"),
            "sentinel_password": Secret(e.raw("REDIS_SENTINEL_PASSWORD") or "")}


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.password is not None else f"{parts.username}@"
    return parts._replace(netloc=user + host).geturl()


@dataclass(frozen=True)
class ProducerConfig:
    """What a producer needs, from the same variables the workers read (so both agree on limits and TTLs)."""

    redis: RedisConfig
    queue: str = DEFAULT_QUEUE
    task_ttl_seconds: int = DEFAULT_TASK_TTL
    max_task_bytes: int = DEFAULT_MAX_TASK_BYTES

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ProducerConfig:
        env = os.environ if env is None else env
        e = _Env(env)
        return ProducerConfig(redis=RedisConfig.from_env(env), queue=queue_name(env),
                              task_ttl_seconds=task_ttl(e), max_task_bytes=max_task_bytes(e))


def task_ttl(e: _Env) -> int:
    return e.integer("TASK_TTL_SECONDS", DEFAULT_TASK_TTL, minimum=60)


def max_task_bytes(e: _Env) -> int:
    return e.integer("MAX_TASK_BYTES", DEFAULT_MAX_TASK_BYTES, minimum=1024)


def queue_name(env: Mapping[str, str]) -> str:
    name = _Env(env).text("QUEUE_NAME", DEFAULT_QUEUE)
    if not _QUEUE_RE.match(name):
        raise ConfigError(f"QUEUE_NAME must be 1-64 letters, digits, '.', '_' or '-', got {name!r}")
    return name


def compat_list(e: _Env, queue: str) -> str | None:
    """COMPAT_QUEUE_LIST: a Redis list name, not one of the queue's own keys."""
    name = e.raw("COMPAT_QUEUE_LIST")
    if name is None:
        return None
    if len(name) > 256 or any(c.isspace() for c in name):
        raise ConfigError(f"COMPAT_QUEUE_LIST must be a Redis key name without spaces, got {name[:60]!r}")
    if name.startswith(f"{{{queue}}}:") and name.split(":", 1)[1] in {"pending", "processing", "dead"}:
        raise ConfigError(f"COMPAT_QUEUE_LIST must not be one of the queue's own lists, got {name!r}")
    return name


@dataclass(frozen=True)
class WorkerConfig:
    redis: RedisConfig
    api_key: Secret
    api_key_file: str | None  # CAPTCHAAI_KEY_FILE: re-read every key_reload_seconds (keyfile.watch_key_file)
    key_reload_seconds: float
    api_url: str
    threads: int  # plan threads: the cluster-wide budget
    concurrency: int  # solve slots in this process
    queue: str
    metrics_host: str
    metrics_port: int
    lease_seconds: float
    max_attempts: int  # failures at the API before a task is dead-lettered
    max_worker_deaths: int  # workers dying under a task before it is dead-lettered (a payload that kills them)
    orphan_grace_seconds: float
    result_ttl_seconds: int
    task_ttl_seconds: int
    solve_timeout_seconds: float
    drain_grace_seconds: float
    unsolvable_retries: int
    max_task_bytes: int
    http_timeout_seconds: float
    http_poll_timeout_seconds: float
    threadsinfo_interval_seconds: float
    poll_dense_when_contended: bool  # dense polls while tasks wait for a plan thread (more calls, less idle)
    compat_results_hash: bool
    compat_queue_list: str | None  # the seed guide's list (captcha:queue) workers also take raw tasks from
    dead_letter_max: int
    monthly_price: float
    time_scale: float  # divides poll and backoff delays (pair with the simulator's --speed)
    log_level: str
    pingback_url: str | None = None  # PINGBACK_URL: the receiver's external base URL (None: polling only)
    pingback_host: str = "0.0.0.0"  # noqa: S104 - CaptchaAI calls in from outside (through the Service/Ingress)
    pingback_port: int = 8090
    providers: ProvidersConfig | None = None  # PROVIDERS: per-solve overflow providers and the spend cap (None: off)
    audit_seconds: float = 30.0  # AUDIT_SECONDS: one audit per period across all the queue's workers

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> WorkerConfig:
        env = os.environ if env is None else env
        e = _Env(env)
        key, key_file = api_key_from_env(env)
        api_url = api_url_from_env(env)
        threads = threads_from_env(env)
        if threads is None:
            raise ConfigError("CAPTCHAAI_THREADS is required: the plan's concurrent threads (e.g. 10)")
        concurrency = e.integer("WORKER_CONCURRENCY", min(threads, 10), minimum=1, maximum=5000)
        lease = e.number("LEASE_SECONDS", 30.0, minimum=3.0)
        log_level = e.text("LOG_LEVEL", "info").lower()
        if log_level not in {"debug", "info", "warning", "error"}:
            raise ConfigError(f"LOG_LEVEL must be debug, info, warning or error, got {log_level!r}")
        return WorkerConfig(
            redis=RedisConfig.from_env(env),
            api_key=Secret(key),
            api_key_file=key_file,
            key_reload_seconds=e.number("KEY_RELOAD_SECONDS", 10.0, minimum=1.0),
            api_url=api_url,
            threads=threads,
            concurrency=concurrency,
            queue=queue_name(env),
            metrics_host=e.text("METRICS_HOST", "0.0.0.0"),  # noqa: S104 - probes and scrapes come from outside
            metrics_port=e.integer("METRICS_PORT", 9100, minimum=0, maximum=65535),
            lease_seconds=lease,
            max_attempts=e.integer("MAX_ATTEMPTS", 3, minimum=1, maximum=100),
            max_worker_deaths=e.integer("MAX_WORKER_DEATHS", 10, minimum=1, maximum=1000),
            orphan_grace_seconds=e.number("ORPHAN_GRACE_SECONDS", lease, minimum=1.0),
            result_ttl_seconds=e.integer("RESULT_TTL_SECONDS", 3600, minimum=10),
            task_ttl_seconds=task_ttl(e),
            solve_timeout_seconds=e.number("SOLVE_TIMEOUT_SECONDS", 180.0, minimum=1.0),
            drain_grace_seconds=e.number("DRAIN_GRACE_SECONDS", 200.0, minimum=0.0),
            unsolvable_retries=e.integer("UNSOLVABLE_RETRIES", 1, minimum=0, maximum=10),
            max_task_bytes=max_task_bytes(e),
            http_timeout_seconds=e.number("HTTP_TIMEOUT_SECONDS", 30.0, minimum=1.0),
            http_poll_timeout_seconds=e.number("HTTP_POLL_TIMEOUT_SECONDS", 5.0, minimum=0.5),
            threadsinfo_interval_seconds=e.number("THREADSINFO_INTERVAL_SECONDS", 300.0, minimum=5.0),
            poll_dense_when_contended=e.flag("POLL_DENSE_WHEN_CONTENDED", False),
            compat_results_hash=e.flag("COMPAT_RESULTS_HASH", False),
            compat_queue_list=compat_list(e, queue_name(env)),
            dead_letter_max=e.integer("DEAD_LETTER_MAX", DEFAULT_DEAD_LETTER_MAX, minimum=1),
            monthly_price=e.number("CAPTCHAAI_MONTHLY_PRICE", 0.0),
            time_scale=e.number("API_TIME_SCALE", 1.0, minimum=0.001),
            log_level=log_level,
            pingback_url=pingback_url(e),
            pingback_host=e.text("PINGBACK_HOST", "0.0.0.0"),  # noqa: S104
            pingback_port=e.integer("PINGBACK_PORT", 8090, minimum=0, maximum=65535),
            providers=providers_from_env(env),
            audit_seconds=e.number("AUDIT_SECONDS", 30.0, minimum=1.0),
        )


def check_api_key(key: str, source: str) -> str:
    """`key` when it is shaped like a CaptchaAI key (32 letters and digits); the error never quotes it."""
    if len(key) != 32 or not key.isalnum():
        raise ConfigError(f"{source} must be 32 letters and digits (got {len(key)} characters)")
    return key


def read_key_file(path: str, *, checked: bool = True) -> str:
    """The API key in the file `path` (a mounted Secret), whitespace stripped and (`checked`) shape-checked."""
    try:
        with open(path, "rb") as f:
            data = f.read(_KEY_FILE_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"CAPTCHAAI_KEY_FILE points to a missing file: {path}") from None
    except OSError as exc:
        raise ConfigError(f"CAPTCHAAI_KEY_FILE cannot be read: {path}: {exc.strerror}") from None
    if len(data) > _KEY_FILE_MAX_BYTES:
        raise ConfigError(f"CAPTCHAAI_KEY_FILE is not a key file (over {_KEY_FILE_MAX_BYTES} bytes): {path}")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"CAPTCHAAI_KEY_FILE is not UTF-8 text: {path}") from None
    return check_api_key(text, "CAPTCHAAI_KEY_FILE") if checked else text


def api_url_from_env(env: Mapping[str, str]) -> str:
    """CAPTCHAAI_URL (default DEFAULT_API_URL, no trailing slash): an http(s) URL or a ConfigError."""
    api_url = _Env(env).text("CAPTCHAAI_URL", DEFAULT_API_URL).rstrip("/")
    parts = urlsplit(api_url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(f"CAPTCHAAI_URL must be an http(s) URL, got {redact_url(api_url)!r}")
    return api_url


def threads_from_env(env: Mapping[str, str]) -> int | None:
    """CAPTCHAAI_THREADS, the plan's concurrent threads: an integer >= 1, None when unset (the worker requires
    it; `captcha-worker check` compares it with the plan when given)."""
    e = _Env(env)
    return None if e.raw("CAPTCHAAI_THREADS") is None else e.integer("CAPTCHAAI_THREADS", 0, minimum=1)


def api_key_from_env(env: Mapping[str, str], *, checked: bool = True) -> tuple[str, str | None]:
    """(key, file): from CAPTCHAAI_KEY_FILE (then re-read while running) or CAPTCHAAI_KEY; exactly one.
    `checked=False` (``captcha-worker check``) leaves the key's shape for the API to judge."""
    e = _Env(env)
    path = e.raw("CAPTCHAAI_KEY_FILE")
    inline = e.raw("CAPTCHAAI_KEY")
    if path is not None:
        if inline is not None:
            raise ConfigError("set CAPTCHAAI_KEY or CAPTCHAAI_KEY_FILE, not both")
        key = read_key_file(path, checked=checked)
        if not key:
            raise ConfigError(f"CAPTCHAAI_KEY_FILE is empty: {path}")
        return key, path
    key = e.required("CAPTCHAAI_KEY", "the CaptchaAI API key (32 characters), or CAPTCHAAI_KEY_FILE: a file with it")
    return (check_api_key(key, "CAPTCHAAI_KEY") if checked else key), None


def pingback_url(e: _Env) -> str | None:
    """PINGBACK_URL: an http(s) base URL without query or fragment ("" or unset: pingback mode off)."""
    url = (e.raw("PINGBACK_URL") or "").strip().rstrip("/")
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname or parts.query or parts.fragment \
            or parts.username is not None or len(url) > 512:
        raise ConfigError(f"PINGBACK_URL must be an http(s) base URL without credentials, query or fragment "
                          f"(the receiver's address as CaptchaAI reaches it), got {redact_url(url)[:100]!r}")
    return url


# ---- PROVIDERS: per-solve overflow providers and the spend cap (issue 27) ----------------------------------------

PROVIDER_PROTOCOLS = ("res.php", "createTask")
_PROVIDER_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,31}$")
_KIND_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")
_PROVIDER_FIELDS = frozenset({"name", "protocol", "url", "key", "key_file", "kinds", "price_per_1000",
                              "concurrency", "refund_unsolvable", "dialect"})
_MAX_PROVIDERS = 32
#: a createTask provider's spelling of the task types: Anti-Captcha's and CapMonster Cloud's, or CapSolver's
PROVIDER_DIALECTS = ("standard", "capsolver")
_MAX_PRICE_PER_1000 = Decimal(1_000_000)
_MICRO = 1_000_000


@dataclass(frozen=True)
class ProviderConfig:
    """A pay-per-solve provider. Prices are micro-units (millionths of the currency) per solve."""

    name: str
    protocol: str  # "res.php" (2captcha, rucaptcha: in.php/res.php) or "createTask" (the JSON API)
    url: str
    key: Secret
    key_file: str | None
    kinds: tuple[str, ...]
    prices: tuple[tuple[str, int], ...]  # (kind, micro per solve) for every kind
    concurrency: int = 10
    #: UNSOLVABLE is refunded by the provider (settled at 0); PROVIDERS' default: true for res.php (2captcha refunds
    #: it), false for createTask (Anti-Captcha charges it; CapSolver and CapMonster Cloud do not say)
    refund_unsolvable: bool = True
    #: a createTask provider's spelling of the task types: "standard" (Anti-Captcha, CapMonster Cloud) or
    #: "capsolver" (``protocols.jsonapi_tasks.to_capsolver``)
    dialect: str = "standard"

    def price_micro(self, kind: str) -> int:
        """The price of one solve of `kind` in micro-units (KeyError: not one of its kinds)."""
        return dict(self.prices)[kind]


@dataclass(frozen=True)
class ProvidersConfig:
    """``PROVIDERS``: the overflow providers and the spend cap (micro-units per hour and per day)."""

    providers: tuple[ProviderConfig, ...]
    cap_hour_micro: int
    cap_day_micro: int
    #: routing on a deadline (``deadline``): a task that would miss its deadline waiting for a plan thread goes
    #: to a provider (``"on_deadline"``, default true)
    on_deadline: bool = True

    def for_kind(self, kind: str) -> ProviderConfig | None:
        """The first provider (in the configured order) that lists `kind`."""
        return next((p for p in self.providers if kind in p.kinds), None)


def _json_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON allows")


def providers_from_env(env: Mapping[str, str]) -> ProvidersConfig | None:
    """``PROVIDERS`` (JSON, see docs/operations.md "Cost and overflow"); None when unset or empty: overflow off.
    Every error is one line naming the field; no error quotes a key."""
    text = _Env(env).raw("PROVIDERS")
    if text is None:
        return None
    try:
        doc = json.loads(text, parse_float=Decimal, parse_constant=_json_constant)
    except (ValueError, RecursionError) as exc:
        reason = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "bad value"
        raise ConfigError(f"PROVIDERS is not valid JSON ({reason})") from None
    if not isinstance(doc, dict):
        raise ConfigError("PROVIDERS must be a JSON object with \"providers\" and \"cap\"")
    _no_stray(doc, {"providers", "cap", "on_deadline"}, "PROVIDERS")
    on_deadline = doc.get("on_deadline", True)
    if not isinstance(on_deadline, bool):
        raise ConfigError("PROVIDERS.on_deadline must be true or false")
    items = doc.get("providers")
    if not isinstance(items, list) or not items or len(items) > _MAX_PROVIDERS:
        raise ConfigError(f"PROVIDERS.providers must be a list of 1-{_MAX_PROVIDERS} providers")
    providers = tuple(_provider(item, i) for i, item in enumerate(items))
    names = [p.name for p in providers]
    if len(set(names)) != len(names):
        raise ConfigError("PROVIDERS.providers: every name must be different")
    cap = doc.get("cap")
    if not isinstance(cap, dict):
        raise ConfigError("PROVIDERS.cap is required: {\"hour\": <money>, \"day\": <money>} (the spend cap)")
    _no_stray(cap, {"hour", "day"}, "PROVIDERS.cap")
    return ProvidersConfig(providers, _money(cap.get("hour"), "PROVIDERS.cap.hour", _MICRO),
                           _money(cap.get("day"), "PROVIDERS.cap.day", _MICRO), on_deadline=on_deadline)


def _no_stray(obj: dict[str, object], allowed: set[str] | frozenset[str], where: str) -> None:
    stray = sorted(str(k) for k in obj if k not in allowed)
    if stray:
        raise ConfigError(f"{where} has an unknown field {stray[0][:40]!r} (known: {', '.join(sorted(allowed))})")


def _money(value: object, where: str, per_unit: int, *, maximum: Decimal | None = None) -> int:
    """`value` (a JSON number of money) times `per_unit`, as a whole number of micro-units."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise ConfigError(f"{where} must be a number, got {type(value).__name__ if value is not None else 'nothing'}")
    d = Decimal(value)
    if not d.is_finite() or d < 0 or (maximum is not None and d > maximum):
        bound = ">= 0" if maximum is None else f"between 0 and {maximum}"
        raise ConfigError(f"{where} must be {bound}, got {str(d)[:40]}")
    micro = d * per_unit
    if micro != micro.to_integral_value():
        raise ConfigError(f"{where} is finer than whole millionths per solve, got {str(d)[:40]}")
    return int(micro)


def _provider(item: object, i: int) -> ProviderConfig:
    at = f"PROVIDERS.providers[{i}]"
    if not isinstance(item, dict):
        raise ConfigError(f"{at} must be an object")
    _no_stray(item, _PROVIDER_FIELDS, at)
    name = item.get("name")
    if not isinstance(name, str) or not _PROVIDER_NAME_RE.match(name) or name == "captchaai":
        raise ConfigError(f"{at}.name must be 1-32 lowercase letters, digits, '_' or '-' (not captchaai)")
    at = f"PROVIDERS.providers[{i}] ({name})"
    protocol = item.get("protocol")
    if protocol not in PROVIDER_PROTOCOLS:
        raise ConfigError(f"{at}.protocol must be \"res.php\" or \"createTask\"")
    url = item.get("url")
    parts = urlsplit(url) if isinstance(url, str) and len(url) <= 512 else None
    if parts is None or parts.scheme not in {"http", "https"} or not parts.hostname or parts.query \
            or parts.fragment or parts.username is not None:
        raise ConfigError(f"{at}.url must be an http(s) base URL without credentials, query or fragment")
    key, key_file = _provider_key(item, at)
    kinds = item.get("kinds")
    if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) and _KIND_NAME_RE.match(k)
                                                          for k in kinds) or len(set(kinds)) != len(kinds):
        raise ConfigError(f"{at}.kinds must be a list of different kind names (e.g. [\"turnstile\"])")
    prices = item.get("price_per_1000")
    if not isinstance(prices, dict) or set(prices) != set(kinds):
        raise ConfigError(f"{at}.price_per_1000 must give a price for exactly its kinds ({', '.join(kinds)})")
    price_micro = tuple((k, _money(prices[k], f"{at}.price_per_1000.{k}", _MICRO // 1000,
                                   maximum=_MAX_PRICE_PER_1000)) for k in kinds)
    concurrency = item.get("concurrency", 10)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 1000:
        raise ConfigError(f"{at}.concurrency must be an integer between 1 and 1000")
    refund = item.get("refund_unsolvable", protocol == "res.php")  # 2captcha refunds; Anti-Captcha charges
    if not isinstance(refund, bool):
        raise ConfigError(f"{at}.refund_unsolvable must be true or false")
    return ProviderConfig(name, str(protocol), str(url).rstrip("/"), Secret(key), key_file, tuple(kinds),
                          price_micro, concurrency, refund, _dialect(item, str(protocol), at))


def _dialect(item: dict[str, object], protocol: str, at: str) -> str:
    """A createTask provider's ``dialect``: its spelling of the task types (default "standard"). The kinds a
    dialect has no type for are not routed to it (``overflow.Overflow.provider_for``)."""
    dialect = item.get("dialect", "standard")
    if dialect not in PROVIDER_DIALECTS:
        raise ConfigError(f"{at}.dialect must be one of {', '.join(PROVIDER_DIALECTS)}")
    if dialect != "standard" and protocol != "createTask":
        raise ConfigError(f"{at}.dialect is for a createTask provider")
    return str(dialect)


def _provider_key(item: dict[str, object], at: str) -> tuple[str, str | None]:
    key, path = item.get("key"), item.get("key_file")
    if (key is None) == (path is None):
        raise ConfigError(f"{at} needs exactly one of key and key_file")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{at}.key_file must be a file path")
        return read_provider_key_file(path, at), path
    if not _provider_key_shaped(key):
        raise ConfigError(f"{at}.key must hold the provider's API key (1-256 printable characters, no spaces)")
    assert isinstance(key, str)
    return key, None


def _provider_key_shaped(key: object) -> bool:
    return isinstance(key, str) and 0 < len(key) <= 256 and not any(c.isspace() or not c.isprintable() for c in key)


def read_provider_key_file(path: str, at: str) -> str:
    """A provider's key from its file (a mounted Secret; re-read while running by keyfile.KeyFileWatcher); errors
    name `at` (``PROVIDERS.providers[i] (name)``) and the path, never the content."""
    try:
        with open(path, "rb") as f:
            data = f.read(_KEY_FILE_MAX_BYTES + 1)
        key = data.decode("utf-8").strip() if len(data) <= _KEY_FILE_MAX_BYTES else None
    except FileNotFoundError:
        raise ConfigError(f"{at}.key_file points to a missing file: {path[:200]}") from None
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"{at}.key_file cannot be read as UTF-8 text: {path[:200]}") from None
    if not _provider_key_shaped(key):
        raise ConfigError(f"{at}.key_file must hold the provider's API key (1-256 printable characters, no spaces)")
    assert isinstance(key, str)
    return key
