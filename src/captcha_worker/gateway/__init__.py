"""A CaptchaAI-compatible gateway: ``/in.php`` and ``/res.php`` (and the JSON API's ``/createTask`` family) in
front of the queue, so any CaptchaAI (or
2captcha-style) client library, in any language, solves through the pool by changing its base URL; one plan is
shared by several tenants, each with its own key and its share of the plan's threads.

``captcha-worker gateway`` runs it (configured by the environment: ``GATEWAY_TENANTS``, ``REDIS_URL`` and the other
Redis settings, ``QUEUE_NAME``; docs/gateway.md). Sections:

* :mod:`.config` — the settings and the tenants (``GATEWAY_TENANTS``, ``GATEWAY_SECRETS_DIR``); errors are one
  line.
* :mod:`.tenants` — who is asking (constant-time key comparison) and each tenant's request rate limit.
* :mod:`.ids` — the number a client sees and the task id behind it (``gw:<tenant>:<number>``).
* :mod:`.app` — the handlers: the protocol module (``protocols.v1``) reads requests and writes replies,
  the codes come from ``codes``, validation from ``task``; tasks are pushed with ``queue``, polls answered with
  ``client.CaptchaQueue.peek``.
* :mod:`.jsonapi` — the JSON API (``createTask``, ``getTaskResult``, ``getBalance``, the reports) on the same
  port: ``protocols.jsonapi*`` read and write it, every concern above is the v1 handlers' code.
* :mod:`.results` — results off the shared reply list (per-tenant metrics, callbacks) and the in-flight scan.
* :mod:`.callbacks` — ``pingback=URL`` calls: allow-listed hosts, checked addresses, HMAC-signed, bounded retries.
* :mod:`.metrics` — the gateway's own Prometheus registry.
* :mod:`.server` — the listeners and loops; ``serve`` for the CLI.
"""

from __future__ import annotations

from captcha_worker.gateway.app import REPLY_TO, Gateway
from captcha_worker.gateway.config import GatewayConfig, PingbackPolicy, RateLimit, Tenant, load_tenants
from captcha_worker.gateway.server import GatewayServer, serve

__all__ = ["REPLY_TO", "Gateway", "GatewayConfig", "GatewayServer", "PingbackPolicy", "RateLimit", "Tenant",
           "load_tenants", "serve"]
