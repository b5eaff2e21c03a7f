"""The one Redis connection factory, and what a Redis error means.

Everything that talks to Redis (``captcha-worker run``, every CLI command, the producer library, the demo, the
benchmarks) gets its client from :func:`connect`, built from :class:`~captcha_worker.config.RedisConfig`:
URL, ACL user, password, TLS (CA bundle, or no verification), socket and connect timeouts, a client name that
shows in ``CLIENT LIST``.

:func:`refusal` classifies an exception *by type* into the reasons Redis may be unable to serve for a while
(an outage: back off and retry), or None (a bug or a configuration error: do not retry blindly).  redis-py maps
most reply prefixes to classes and strips the prefix from the message (``OOM command not allowed ...`` arrives
as ``OutOfMemoryError("command not allowed ...")``), so a string check on the message misses them; the two
prefixes it does not map (``BUSY``, ``NOREPLICAS``) keep their prefix and are recognised by it.

=============  ===========================================  =================================================
refusal        raised as (redis-py)                         typical cause
=============  ===========================================  =================================================
connection     ConnectionError (not auth), OSError          server down, restarting, network partition
timeout        TimeoutError                                 server stalled (SIGSTOP, long fork), packet loss
loading        BusyLoadingError (``LOADING``)               the server is loading its dataset after a restart
oom            OutOfMemoryError (``OOM``)                   ``maxmemory`` reached with ``noeviction``
readonly       ReadOnlyError (``READONLY``)                 connected to a replica (failover in progress)
masterdown     MasterDownError (``MASTERDOWN``)             replica lost its master
noreplicas     ResponseError ``NOREPLICAS ...``             ``min-replicas-to-write`` not met
busy           ResponseError ``BUSY ...``                   a long-running script or function blocks the server
tryagain       TryAgainError (``TRYAGAIN``)                 Cluster: slot migrating
clusterdown    ClusterDownError (``CLUSTERDOWN``)           Cluster: slots not served
auth           AuthenticationError, NoPermissionError       wrong password or ACL user, ACL rules changed
=============  ===========================================  =================================================

``auth`` is a configuration error, but one that an operator fixes without restarting the worker (a rotated
password, an ACL rule): workers treat it like an outage (back off, readiness false, one log line), producers get
the typed :class:`RedisUnavailable` with the reason.
"""

from __future__ import annotations

import enum

from redis import exceptions as rexc
from redis.asyncio import Redis

from captcha_worker.config import RedisConfig


class Refusal(enum.StrEnum):
    """Why Redis cannot serve right now (a bounded metric label and a log field)."""

    CONNECTION = "connection"
    TIMEOUT = "timeout"
    LOADING = "loading"
    OOM = "oom"
    READONLY = "readonly"
    MASTERDOWN = "masterdown"
    NOREPLICAS = "noreplicas"
    BUSY = "busy"
    TRYAGAIN = "tryagain"
    CLUSTERDOWN = "clusterdown"
    AUTH = "auth"


_TEXT: dict[Refusal, str] = {
    Refusal.CONNECTION: "unreachable",
    Refusal.TIMEOUT: "not answering (timed out)",
    Refusal.LOADING: "loading its dataset",
    Refusal.OOM: "out of memory (maxmemory reached, writes refused)",
    Refusal.READONLY: "read-only (a replica, failover in progress?)",
    Refusal.MASTERDOWN: "without its master (MASTERDOWN)",
    Refusal.NOREPLICAS: "refusing writes: not enough replicas (NOREPLICAS)",
    Refusal.BUSY: "busy running a script (BUSY)",
    Refusal.TRYAGAIN: "migrating a slot (TRYAGAIN)",
    Refusal.CLUSTERDOWN: "a cluster that is down (CLUSTERDOWN)",
    Refusal.AUTH: "refusing our credentials (check REDIS_USERNAME / REDIS_PASSWORD and the ACL)",
}

# Checked in order: subclasses before their bases (MasterDownError is a ClusterDownError, BusyLoadingError and
# AuthenticationError are ConnectionErrors).
_BY_TYPE: tuple[tuple[type[BaseException], Refusal], ...] = (
    (rexc.AuthenticationError, Refusal.AUTH),
    (rexc.AuthorizationError, Refusal.AUTH),
    (rexc.NoPermissionError, Refusal.AUTH),
    (rexc.BusyLoadingError, Refusal.LOADING),
    (rexc.OutOfMemoryError, Refusal.OOM),
    (rexc.ReadOnlyError, Refusal.READONLY),
    (rexc.MasterDownError, Refusal.MASTERDOWN),
    (rexc.ClusterDownError, Refusal.CLUSTERDOWN),
    (rexc.TryAgainError, Refusal.TRYAGAIN),
    (rexc.TimeoutError, Refusal.TIMEOUT),
    (rexc.ConnectionError, Refusal.CONNECTION),
    (TimeoutError, Refusal.TIMEOUT),
    (OSError, Refusal.CONNECTION),
)
#: redis-py rewrites the message of an error raised by a pipeline: "Command # 2 (EVALSHA ...) of pipeline caused
#: error: ('BUSY ...',)"
_PIPELINE_PREFIX = "of pipeline caused error: "
#: reply prefixes redis-py leaves in the message (it has no class for them)
_BY_PREFIX: tuple[tuple[str, Refusal], ...] = (
    ("BUSY ", Refusal.BUSY),
    ("NOREPLICAS ", Refusal.NOREPLICAS),
    ("OOM ", Refusal.OOM),  # older redis-py, or a script error that wraps the reply
    ("LOADING ", Refusal.LOADING),
    ("READONLY ", Refusal.READONLY),
    ("MASTERDOWN ", Refusal.MASTERDOWN),
)


def refusal(exc: BaseException) -> Refusal | None:
    """The outage `exc` denotes, or None when it is not one (a bug, a wrong key type, a script error)."""
    for cls, why in _BY_TYPE:
        if isinstance(exc, cls):
            return why
    if isinstance(exc, rexc.ResponseError):
        text = str(exc).split(_PIPELINE_PREFIX, 1)[-1].lstrip("('\"")  # it quotes the original as a tuple
        for prefix, why in _BY_PREFIX:
            if text.startswith(prefix):
                return why
    return None


def describe_refusal(why: Refusal) -> str:
    """A short phrase for messages: ``Redis at <url> is <describe_refusal(why)>``."""
    return _TEXT[why]


class RedisUnavailable(ConnectionError):
    """Redis cannot serve right now. ``str()`` names the (redacted) URL and the reason; never a password."""

    def __init__(self, why: Refusal, display_url: str, doing: str = "") -> None:
        self.refusal = why
        self.display_url = display_url
        super().__init__(f"Redis at {display_url} is {describe_refusal(why)}" + (f" ({doing})" if doing else ""))


def tls_hint(exc: BaseException) -> str | None:
    """A readable cause when a connection failed on TLS (the message names no secret)."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "TLS certificate not trusted: set REDIS_TLS_CA_FILE to the CA that signed it"
    if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
        return "TLS handshake failed: is the server really on TLS (rediss://)?"
    return None


def is_cross_slot(exc: BaseException) -> bool:
    """A script or command touched keys of several Cluster slots (a configuration error, see COMPAT_QUEUE_LIST)."""
    return isinstance(exc, rexc.ClusterCrossSlotError) or (
        isinstance(exc, rexc.ResponseError) and "CROSSSLOT" in str(exc))


def connect(rc: RedisConfig, *, client_name: str) -> Redis:
    """A Redis client from the config. Does not connect yet; replies are decoded as UTF-8 (the queue reads
    item bytes raw where it must, see ``queue``)."""
    kwargs: dict[str, object] = {
        "decode_responses": True,
        "socket_timeout": rc.socket_timeout_s,
        "socket_connect_timeout": rc.connect_timeout_s,
        "health_check_interval": 15,
        "client_name": client_name,
    }
    if rc.username:
        kwargs["username"] = rc.username
    if rc.password:
        kwargs["password"] = rc.password.value
    if rc.url.startswith("rediss://"):
        if rc.tls_ca_file:
            kwargs["ssl_ca_certs"] = rc.tls_ca_file
        if rc.tls_insecure:
            kwargs["ssl_cert_reqs"] = "none"
            kwargs["ssl_check_hostname"] = False
    return Redis.from_url(rc.url, **kwargs)  # type: ignore[arg-type]
