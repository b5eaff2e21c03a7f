"""The one Redis connection factory, and what a Redis error means.

Everything that talks to Redis (``captcha-worker run``, every CLI command, the producer library, the demo, the
benchmarks) gets its client from :func:`connect`, built from :class:`~captcha_worker.config.RedisConfig`:
ACL user, password, TLS (CA bundle, or no verification), socket and connect timeouts, a client name that shows in
``CLIENT LIST``, and where Redis is (``REDIS_MODE``):

* ``standalone`` — ``REDIS_URL``, one server.
* ``sentinel`` — ``REDIS_SENTINELS`` are asked for the master ``REDIS_SENTINEL_MASTER`` whenever a connection is
  opened (sentinel auth ``REDIS_SENTINEL_USERNAME``/``REDIS_SENTINEL_PASSWORD``, TLS ``REDIS_TLS`` for sentinels
  and data nodes alike). After a failover the old master's connections fail (or answer READONLY, which redis-py
  turns into a connection error), and the next connection goes to the master the sentinels name: re-discovery is
  the ordinary retry of a failed call.
* ``cluster`` — redis-py's async cluster client, seeded by ``REDIS_URL`` and ``REDIS_CLUSTER_NODES`` (more
  ``host:port`` seeds: a client whose only seed is down cannot start): it learns the slot map, follows MOVED,
  and re-reads the map when a node fails. Every call of ``queue`` names keys of one hash tag, so each goes to the
  master of the queue's slot.

Durability (``REDIS_WAIT_REPLICAS`` > 0): replication is asynchronous, so a write a master acknowledged can be lost
when it dies before a replica has it. The queue then sends ``WAIT <replicas> <ms>`` after its pushes and acks, in
the same pipeline and on the same connection (WAIT cannot run inside a script, and counts only this connection's
writes); fewer confirmations than asked raise :class:`NotReplicated`, refusal ``unreplicated``: the write may or
may not survive a failover, and since those writes are idempotent (a known id is not pushed twice, a result is
written once) the caller retries it. On a cluster :func:`on_slot_connection` sends both on one connection to the
master of the queue's slot, and a connection that fails after the write leaves it unconfirmed (raised, to be run
again), never confirmed by a WAIT sent elsewhere.

:func:`refusal` classifies an exception *by type* into the reasons Redis may be unable to serve for a while
(an outage: back off and retry), or None (a bug or a configuration error: do not retry blindly).  redis-py maps
most reply prefixes to classes and strips the prefix from the message (``OOM command not allowed ...`` arrives
as ``OutOfMemoryError("command not allowed ...")``), so a string check on the message misses them; the two
prefixes it does not map (``BUSY``, ``NOREPLICAS``) keep their prefix and are recognised by it.

=============  ===========================================  =================================================
refusal        raised as (redis-py)                         typical cause
=============  ===========================================  =================================================
connection     ConnectionError (not auth), OSError;         server down, restarting, network partition; a
               AttributeError / TypeError from redis-py's   connection dropped under a command in flight
               connection or asyncio's transport code       (the cluster client on a failover, redis-py #4287)
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
nomaster       MasterNotFoundError (sentinel)               no sentinel names a healthy master (failover in
                                                            progress, sentinels down, wrong master name)
moved          MovedError, AskError (durable cluster write) the slot moved (failover): the slot map is reread
unreplicated   NotReplicated (REDIS_WAIT_REPLICAS)          no replica confirmed the write in time
noscript       NoScriptError, after the one reload a call   the node lacks our scripts: a promoted replica, or
               makes itself                                 a restarted node a redirect led to (Cluster);
                                                            the next try loads them again
=============  ===========================================  =================================================

Cluster clients raise a few outages as a bare ``RedisClusterException`` (no node reachable, slots not covered
while a failover settles); they are recognised by their message. A blocking command (BLMOVE, BLPOP) on a master
that becomes a replica is ended by the server with ``UNBLOCKED``: a ``readonly`` refusal.

``auth`` is a configuration error, but one that an operator fixes without restarting the worker (a rotated
password, an ACL rule): workers treat it like an outage (back off, readiness false, one log line), producers get
the typed :class:`RedisUnavailable` with the reason.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, cast

from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster, Sentinel
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.sentinel import MasterNotFoundError

from captcha_worker.config import RedisConfig, RedisMode

#: what :func:`connect` returns: a client of one server (standalone, or the master a Sentinel names), or of a Cluster
Client = Redis | RedisCluster


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
    NOMASTER = "nomaster"
    MOVED = "moved"
    UNREPLICATED = "unreplicated"
    NOSCRIPT = "noscript"


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
    Refusal.NOMASTER: "without a master the sentinels agree on (failover in progress, or check REDIS_SENTINELS "
                      "and REDIS_SENTINEL_MASTER)",
    Refusal.MOVED: "moving the queue's slot to another node (MOVED, failover)",
    Refusal.UNREPLICATED: "not confirming writes to a replica in time (REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT_MS)",
    Refusal.NOSCRIPT: "missing the queue's scripts (after a failover or restart; loading them again)",
}


class NotReplicated(rexc.RedisError):
    """Fewer replicas than ``REDIS_WAIT_REPLICAS`` confirmed a write within ``REDIS_WAIT_TIMEOUT_MS`` (WAIT).
    The master has applied it; whether it survives a failover is unknown. Retrying the (idempotent) write is safe."""

    def __init__(self, confirmed: int, wanted: int, timeout_ms: int) -> None:
        super().__init__(f"{confirmed} of {wanted} replicas confirmed the write within {timeout_ms} ms")
        self.confirmed, self.wanted = confirmed, wanted

# Checked in order: subclasses before their bases (MasterDownError is a ClusterDownError, BusyLoadingError and
# AuthenticationError are ConnectionErrors).
_BY_TYPE: tuple[tuple[type[BaseException], Refusal], ...] = (
    (NotReplicated, Refusal.UNREPLICATED),
    (MasterNotFoundError, Refusal.NOMASTER),
    (rexc.AuthenticationError, Refusal.AUTH),
    (rexc.AuthorizationError, Refusal.AUTH),
    (rexc.NoPermissionError, Refusal.AUTH),
    (rexc.BusyLoadingError, Refusal.LOADING),
    (rexc.OutOfMemoryError, Refusal.OOM),
    (rexc.ReadOnlyError, Refusal.READONLY),
    (rexc.MasterDownError, Refusal.MASTERDOWN),
    (rexc.ClusterDownError, Refusal.CLUSTERDOWN),
    (rexc.TryAgainError, Refusal.TRYAGAIN),
    (rexc.AskError, Refusal.MOVED),  # MovedError is an AskError
    (rexc.NoScriptError, Refusal.NOSCRIPT),
    (rexc.SlotNotCoveredError, Refusal.CLUSTERDOWN),
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
    ("UNBLOCKED ", Refusal.READONLY),  # a blocked BLMOVE/BLPOP ended because the master became a replica
)
#: outages the cluster client raises as a bare RedisClusterException, by the start of the message
_CLUSTER_MESSAGES: tuple[tuple[str, Refusal], ...] = (
    ("Redis Cluster cannot be connected", Refusal.CONNECTION),
    ("All slots are not covered", Refusal.CLUSTERDOWN),
    ("startup_nodes could not agree", Refusal.CLUSTERDOWN),
    ("Too many targets for command ('WAIT'", Refusal.MOVED),  # a durable write retried on a new slot map
)


#: where a connection closed under a command in flight (the cluster client drops a failed node's connections while
#: another coroutine writes on one) raises a transport-internal AttributeError or TypeError instead of a
#: ConnectionError: ``'NoneType' object has no attribute 'writelines'`` (redis-py #4287)
_TRANSPORT_FILES = ("/redis/asyncio/connection.py", "/asyncio/streams.py", "/asyncio/selector_events.py")


def _closed_under_us(exc: BaseException) -> bool:
    """An AttributeError or TypeError raised inside redis-py's connection or asyncio's transport code."""
    if not isinstance(exc, AttributeError | TypeError):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith(_TRANSPORT_FILES)


def refusal(exc: BaseException) -> Refusal | None:
    """The outage `exc` denotes, or None when it is not one (a bug, a wrong key type, a script error)."""
    for cls, why in _BY_TYPE:
        if isinstance(exc, cls):
            return why
    if _closed_under_us(exc):
        return Refusal.CONNECTION
    if isinstance(exc, rexc.ResponseError):
        text = str(exc).split(_PIPELINE_PREFIX, 1)[-1].lstrip("('\"")  # it quotes the original as a tuple
        for prefix, why in _BY_PREFIX:
            if text.startswith(prefix):
                return why
    if type(exc) is rexc.RedisClusterException:
        for prefix, why in _CLUSTER_MESSAGES:
            if str(exc).startswith(prefix):
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
        isinstance(exc, rexc.ResponseError) and "CROSSSLOT" in str(exc)) or (
        isinstance(exc, rexc.RedisClusterException) and "all keys must map to the same key slot" in str(exc))


def connect(rc: RedisConfig, *, client_name: str) -> Client:
    """A Redis client from the config (``REDIS_MODE`` decides which). Does not connect yet; replies are decoded
    as UTF-8 (the queue reads item bytes raw where it must, see ``queue``)."""
    kwargs = _node_kwargs(rc, client_name)
    if rc.mode is RedisMode.SENTINEL:
        return _sentinel_master(rc, kwargs)
    if rc.mode is RedisMode.CLUSTER:
        # the queue needs only its own slot: a shard without a master must not stop clients of the others
        seeds = [ClusterNode(host, port) for host, port in rc.cluster_nodes]
        return RedisCluster.from_url(rc.url, require_full_coverage=False, startup_nodes=seeds, **kwargs)
    return Redis.from_url(rc.url, **kwargs)


def _node_kwargs(rc: RedisConfig, client_name: str) -> dict[str, Any]:
    """Connection settings of a data node (and, but for the credentials, of a sentinel)."""
    kwargs: dict[str, Any] = {
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
    return kwargs | _tls_kwargs(rc)


def _tls_kwargs(rc: RedisConfig) -> dict[str, Any]:
    if not rc.use_tls:
        return {}
    kwargs: dict[str, Any] = {"ssl": True} if rc.mode is RedisMode.SENTINEL else {}  # else: the rediss:// URL
    if rc.tls_ca_file:
        kwargs["ssl_ca_certs"] = rc.tls_ca_file
    if rc.tls_insecure:
        kwargs["ssl_cert_reqs"] = "none"
        kwargs["ssl_check_hostname"] = False
    return kwargs


class SentinelMaster(Redis):
    """The master a set of sentinels names, re-discovered on every new connection. Closing it closes the
    connections to the sentinels too."""

    discovery: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.discovery is not None:
            for s in self.discovery.sentinels:
                await s.aclose()


def _sentinel_master(rc: RedisConfig, kwargs: dict[str, Any]) -> SentinelMaster:
    sentinel_kwargs = {k: v for k, v in kwargs.items() if k not in {"username", "password", "decode_responses"}}
    if rc.sentinel_username:
        sentinel_kwargs["username"] = rc.sentinel_username
    if rc.sentinel_password:
        sentinel_kwargs["password"] = rc.sentinel_password.value
    sentinel = Sentinel(list(rc.sentinels), sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    master = cast(SentinelMaster, sentinel.master_for(rc.sentinel_master, redis_class=SentinelMaster, **kwargs))
    master.discovery = sentinel
    return master


async def on_queue_slot(redis: Client, key: str) -> dict[str, Any]:
    """Keyword arguments that send a command to the master serving `key`'s slot: on a Cluster, so that a WAIT
    shares the connection of the writes before it in a pipeline; nothing elsewhere (a pipeline is one connection).
    Reads the slot map first when it is unknown or was marked stale by a node failure."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()
        return {"target_nodes": redis.get_node_from_key(key)}
    return {}


async def on_slot_connection(redis: RedisCluster, key: str, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send `commands` together on one connection to the master of `key`'s slot and read their replies in order:
    each reply, or the error reply (ResponseError) in its place. Nothing is sent again: redis-py's cluster pipeline
    retries a ConnectionError or TimeoutError by re-sending only the commands that have no reply yet, routed anew,
    so a WAIT would confirm, on another connection or node, writes it never saw. A connection that fails is
    raised as such (the batch's fate is unknown: the caller runs it again, idempotently), the connection dropped
    and the slot map marked to be read again, as the cluster client does."""
    await redis.initialize()
    node = redis.get_node_from_key(key)
    if node is None:
        raise rexc.SlotNotCoveredError(f"no master serves the slot of {key!r}")  # type: ignore[no-untyped-call]
    conn = node.acquire_connection()
    try:
        await conn.send_packed_command(conn.pack_commands(commands), False)
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(await node.parse_response(conn, command[0]))
            except rexc.ResponseError as exc:
                replies.append(exc)
    except BaseException as exc:  # a reply may be left unread: the connection cannot serve another call
        await conn.disconnect()
        if isinstance(exc, rexc.ConnectionError | rexc.TimeoutError | OSError):
            redis.nodes_manager.move_node_to_end_of_cached_nodes(node.name)
            redis._initialize = True  # redis-py's own signal: read the slot map before the next call
        raise
    finally:
        node._free.append(conn)
    return replies


def note_redirect(redis: Client, exc: BaseException) -> None:
    """A pinned (durable) cluster write was redirected: update the client's slot map, as an unpinned call would."""
    if isinstance(redis, RedisCluster) and isinstance(exc, rexc.MovedError):
        redis.nodes_manager.move_slot(exc)
