"""Result callbacks: CaptchaAI's ``pingback=URL``, called by the gateway when the task ends.

A URL is accepted at ``in.php`` only when the tenant has a pingback policy and the URL's host is on its
``hosts`` list (http or https, at most :data:`MAX_URL_CHARS`). When the result arrives, the host is resolved and
**every address is checked**: public addresses pass, loopback, private, link-local (cloud metadata), multicast
and other special-purpose ranges only when the tenant lists them in ``networks``. The call then goes to the
checked address itself (the URL's host stays the ``Host`` header and the TLS server name), so a DNS answer that
changes between the check and the connection cannot redirect it; connections are not reused, redirects are not
followed.

The call is ``GET URL?id=<number>&code=<answer or error code>`` (plus ``&user_agent=`` for the kinds answered with
one; the URL's own query is kept), as CaptchaAI's pingback, with two headers::

    X-Captcha-Timestamp: <unix seconds>
    X-Captcha-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>\\n<id>\\n<code>\\n<user_agent or empty>")>

A JSON-API task's ``callbackUrl`` (``createTask``) is called as Anti-Captcha and CapMonster Cloud call theirs:
``POST URL`` with the getTaskResult body of the task (plus its ``taskId``) as ``application/json``, signed over
the body: ``X-Captcha-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>\n<body>")>``. The callback key holds
the URL with the protocol in front (:func:`stored`), so the replica that takes it knows which call to make.

A non-2xx answer, a timeout or a connection error is retried (``GATEWAY_CALLBACK_ATTEMPTS`` tries in all, 1 s then
doubling, jittered); at most :data:`CONCURRENCY` calls run at once and :data:`MAX_PENDING` wait, beyond which a
call is dropped and counted as failed. Only the tenant, the host and the outcome are logged, never the query.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from yarl import URL

from captcha_worker import log
from captcha_worker.calls import BackgroundCalls
from captcha_worker.gateway import metrics
from captcha_worker.gateway.config import PingbackPolicy, Tenant

_log = logging.getLogger("captcha_worker.gateway")
MAX_URL_CHARS = 2048
CONCURRENCY = 32
MAX_PENDING = 10_000
SIGNATURE_HEADER = "X-Captcha-Signature"
TIMESTAMP_HEADER = "X-Captcha-Timestamp"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
V1, JSON = "v1", "json"  # the callback's protocol: a pingback GET, a callbackUrl POST
_JSON_PREFIX = "json "  # before the URL in the callback key (a URL has no space)


def stored(protocol: str, url: str) -> str:
    """What the callback key holds for a URL called in `protocol`'s form."""
    return _JSON_PREFIX + url if protocol == JSON else url


def parse_stored(value: str) -> tuple[str, str]:
    """(protocol, URL) of a callback key's value."""
    return (JSON, value[len(_JSON_PREFIX):]) if value.startswith(_JSON_PREFIX) else (V1, value)


class Refused(Exception):
    """The URL may not be called (a host or an address the tenant's policy does not allow)."""


def check_url(policy: PingbackPolicy | None, url: str) -> str | None:
    """Why `url` cannot be a pingback of a tenant with `policy` (None: it can)."""
    if policy is None:
        return "this tenant has no pingback policy"
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    try:
        parsed = URL(url)
    except ValueError:
        return "not a URL"
    if parsed.scheme not in ("http", "https") or not parsed.host or parsed.user or parsed.password:
        return "not an http(s) URL with a host (and without credentials)"
    if not policy.host_allowed(parsed.host):
        return "its host is not on the tenant's pingback hosts"
    return None


def signature(secret: str, timestamp: str, query: Mapping[str, str]) -> str:
    message = "\n".join((timestamp, query["id"], query["code"], query.get("user_agent", "")))
    return "v1=" + hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def body_signature(secret: str, timestamp: str, body: bytes) -> str:
    """A callbackUrl POST's signature: over the timestamp and the exact body bytes."""
    return "v1=" + hmac.new(secret.encode(), timestamp.encode() + b"\n" + body, hashlib.sha256).hexdigest()


def address_allowed(address: Address, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> bool:
    """Public addresses, and the special-purpose ones inside a listed network."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in net for net in networks if net.version == address.version):
        return True
    return address.is_global and not address.is_multicast


async def resolve(host: str, port: int, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
                  ) -> Address:
    """The first address of `host` the policy allows; Refused when it has addresses and none is allowed."""
    try:
        return _check(ipaddress.ip_address(host), networks)
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConnectionError(f"cannot resolve the host ({type(exc).__name__})") from None
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    for address in addresses:
        if address_allowed(address, networks):
            return address
    raise Refused("the host resolves only to addresses the tenant's pingback networks do not allow")


def _check(address: Address, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> Address:
    if not address_allowed(address, networks):
        raise Refused("the address is not public and not in the tenant's pingback networks")
    return address


@dataclass(frozen=True)
class Call:
    tenant: Tenant
    url: str
    query: Mapping[str, str]  # id, code, user_agent (optional); a JSON callback's are unused
    body: bytes | None = None  # a JSON-API callbackUrl: POSTed as application/json


class Callbacks(BackgroundCalls):
    """Delivers calls in the background: :meth:`send` never waits."""

    def __init__(self, *, timeout_s: float, attempts: int, first_delay_s: float = 1.0) -> None:
        super().__init__(timeout_s=timeout_s, concurrency=CONCURRENCY, user_agent="captcha-solver-gateway",
                         force_close=True)
        self.attempts, self.first_delay_s = attempts, first_delay_s

    def send(self, call: Call) -> None:
        why = f"{MAX_PENDING} calls already waiting" if self.running >= MAX_PENDING else ""
        if why or not self.spawn(self._deliver(call)):
            metrics.CALLBACKS.labels(call.tenant.name, "failed").inc()
            log.event(_log, "callback_dropped", logging.WARNING, tenant=call.tenant.name, why=why or "not running")

    async def _deliver(self, call: Call) -> None:
        host = URL(call.url).host or ""
        outcome, detail = "failed", ""
        async with self._slots:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.first_delay_s * 2 ** (attempt - 1) * (0.5 + random.random()))
                try:
                    status = await self._once(call)
                except Refused as exc:
                    outcome, detail = "refused", str(exc)
                    break
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    detail = type(exc).__name__
                    continue
                if 200 <= status < 300:
                    outcome, detail = "delivered", ""
                    break
                detail = f"HTTP {status}"
        metrics.CALLBACKS.labels(call.tenant.name, outcome).inc()
        level = logging.DEBUG if outcome == "delivered" else logging.WARNING
        log.event(_log, f"callback_{outcome}", level, tenant=call.tenant.name, host=host, detail=detail or None)

    async def _once(self, call: Call) -> int:
        assert self._session is not None and call.tenant.pingback is not None
        policy = call.tenant.pingback
        url = URL(call.url)
        if url.host is None or not policy.host_allowed(url.host):  # checked at in.php; the policy may have changed
            raise Refused("its host is not on the tenant's pingback hosts")
        address = await resolve(url.host, url.port or 80, policy.networks)
        stamp = str(int(time.time()))
        headers = {"Host": url.raw_authority.rsplit("@", 1)[-1], TIMESTAMP_HEADER: stamp}
        server_name = url.host if url.scheme == "https" else None
        if call.body is not None:
            headers[SIGNATURE_HEADER] = body_signature(policy.secret.value, stamp, call.body)
            headers["Content-Type"] = "application/json"
            async with self._session.post(url.with_host(str(address)), data=call.body, headers=headers,
                                          allow_redirects=False, server_hostname=server_name) as resp:
                return resp.status
        headers[SIGNATURE_HEADER] = signature(policy.secret.value, stamp, call.query)
        target = url.with_host(str(address)).update_query(dict(call.query))
        async with self._session.get(target, headers=headers, allow_redirects=False,
                                     server_hostname=server_name) as resp:
            return resp.status
