"""Who is asking: a request's ``key`` against the tenants' keys, and each tenant's request budget.

The key is compared with *every* tenant's key by :func:`hmac.compare_digest` and no loop exits early, so the time
an answer takes says nothing about how much of a key was right, nor which tenant came close. A key that is not
32 letters and digits is ``ERROR_WRONG_USER_KEY`` (as CaptchaAI answers it), a well-formed key no tenant has is
``ERROR_KEY_DOES_NOT_EXIST``; neither touches Redis. Keys never reach a log line or a metric label: a tenant is
known by its configured name.

The rate limit is a token bucket per tenant and per gateway process (``rate_limit`` in the tenant's config): with
N replicas behind a Service a tenant gets up to N times the rate. It bounds what one client can make a replica do;
the tenant's share of the plan (``threads``) is what bounds its solves.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Iterable, Mapping

from captcha_worker.codes import Code
from captcha_worker.gateway.config import KEY_RE, RateLimit, Tenant


class TokenBucket:
    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = limit.requests_per_second
        self.capacity = float(limit.burst)
        self._tokens = self.capacity
        self._clock = clock
        self._at = clock()

    def take(self) -> bool:
        """Spend one token; False when the bucket is empty (the request is refused)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def retry_after(self) -> float:
        """Seconds until the next token."""
        return max(0.0, (1.0 - self._tokens) / self.rate)


class Tenants:
    def __init__(self, tenants: Iterable[Tenant], clock: Callable[[], float] = time.monotonic) -> None:
        self.all = tuple(tenants)
        self.by_name = {t.name: t for t in self.all}
        self._keys = [(t.key.value.encode(), t) for t in self.all]
        self._buckets = {t.name: TokenBucket(t.rate_limit, clock) for t in self.all if t.rate_limit is not None}

    def rekey(self, keys: Mapping[str, str]) -> list[str]:
        """Take the keys of `keys` (tenant name -> key) for the tenants it names; the names whose key changed."""
        changed = [t.name for t in self.all if t.name in keys and keys[t.name].encode() != self._key_of(t)]
        if changed:
            self._keys = [(keys.get(t.name, "").encode() or self._key_of(t), t) for t in self.all]
        return changed

    def _key_of(self, tenant: Tenant) -> bytes:
        return next(k for k, t in self._keys if t is tenant)

    def identify(self, key: str) -> Tenant | Code:
        """The tenant whose key this is, or the code to answer."""
        if not KEY_RE.match(key):
            return Code.ERROR_WRONG_USER_KEY
        given = key.encode()
        found: Tenant | None = None
        for expected, tenant in self._keys:  # every key is compared: no early exit
            if hmac.compare_digest(given, expected):
                found = tenant
        return found if found is not None else Code.ERROR_KEY_DOES_NOT_EXIST

    def admit(self, tenant: Tenant) -> float | None:
        """None when the request may go on; else the seconds after which the tenant may try again."""
        bucket = self._buckets.get(tenant.name)
        if bucket is None or bucket.take():
            return None
        return bucket.retry_after()
