"""The gateway's Prometheus metrics (docs/metrics.md, "Gateway metrics"), in a registry of their own: a gateway
pod exports these and none of the worker's series (a gateway is not a worker on the dashboard).

Label values are bounded: ``tenant`` is a configured tenant name (never a key; at most ``MAX_TENANTS``), or
``unauthenticated`` for requests no tenant's key matched; ``code`` is folded like the worker's
(``metrics.code_label``); ``api_endpoint`` (not ``endpoint``, a label prometheus-operator gives every target),
``reason``, ``report`` and ``outcome`` come from the fixed sets below.

Per-tenant outcomes, queue waits and solve times are counted by the replica that receives the task's result
from the shared reply list (each result reaches exactly one replica: sum them); ``tenant_in_flight`` is read from
Redis by every replica (the same cluster-wide figure: take the max).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from captcha_worker import __version__
from captcha_worker.metrics import PREFIX, REDIS_REFUSALS, SOLVE_BUCKETS, WAIT_BUCKETS

UNAUTHENTICATED = "unauthenticated"
ENDPOINTS = ("in", "solve", "res_get", "res_threadsinfo", "res_getbalance", "res_report", "res_other")
JSON_ENDPOINTS = ("create_task", "get_task_result", "get_balance", "report", "json_other")
V1, JSON = "v1", "json"  # the `protocol` label: in.php/res.php, the JSON API (createTask & co)
PROTOCOLS = (V1, JSON)
TENANT_OUTCOMES = ("solved", "error", "expired")
CALLBACK_OUTCOMES = ("delivered", "failed", "refused")
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

REGISTRY = CollectorRegistry(auto_describe=True)
_G = f"{PREFIX}gateway_"
_T = f"{PREFIX}tenant_"

REQUESTS = Counter(f"{_G}requests_total", "Requests answered by this gateway, by protocol, endpoint and the code "
                   "answered.", ["protocol", "api_endpoint", "code"], registry=REGISTRY)
REQUEST_DURATION = Histogram(f"{_G}request_duration_seconds", "Time to answer a request, by protocol and endpoint.",
                             ["protocol", "api_endpoint"], buckets=REQUEST_BUCKETS, registry=REGISTRY)
REJECTED = Counter(f"{_G}rejected_total", "Requests refused before any Redis access: a bad key (tenant "
                   "`unauthenticated`) or the tenant's rate limit.", ["tenant", "reason"], registry=REGISTRY)
CALLBACKS = Counter(f"{_G}callbacks_total", "Pingback calls: delivered (2xx), failed (after the retries) or "
                    "refused (the address is not allowed).", ["tenant", "outcome"], registry=REGISTRY)
READY = Gauge(f"{_G}ready", "1 while this gateway can reach Redis (readiness).", registry=REGISTRY)
REDIS_ERRORS = Counter(f"{_G}redis_errors_total", "Redis operations that failed with an outage, by reason.",
                       ["reason"], registry=REGISTRY)
BUILD_INFO = Gauge(f"{_G}build_info", "Build information.", ["version", "python"], registry=REGISTRY)

SUBMITTED = Counter(f"{_T}submitted_total", "Tasks a tenant submitted (accepted and queued), by protocol: in.php "
                    "and solve.php (v1), createTask (json).", ["protocol", "tenant"], registry=REGISTRY)
TASKS = Counter(f"{_T}tasks_total", "A tenant's tasks that ended, by outcome (solved, error, expired).",
                ["tenant", "outcome"], registry=REGISTRY)
IN_FLIGHT = Gauge(f"{_T}in_flight", "A tenant's solves in flight now: its plan-budget units (cluster-wide, read "
                  "from Redis); never above its `threads`.", ["tenant"], registry=REGISTRY)
WAITING = Gauge(f"{_T}waiting", "A tenant's tasks in its waiting list: sorted out of pending by the workers' claim, "
                "waiting for a thread of its share.", ["tenant"], registry=REGISTRY)
THREADS = Gauge(f"{_T}threads", "A tenant's share of the plan (its `threads`).", ["tenant"], registry=REGISTRY)
RESERVED = Gauge(f"{_T}reserved_threads", "Threads held back for a tenant while it has work (its `reserved`).",
                 ["tenant"], registry=REGISTRY)
QUEUE_WAIT = Histogram(f"{_T}queue_wait_seconds", "A tenant's tasks: from submission to claim by a worker.",
                       ["tenant"], buckets=WAIT_BUCKETS, registry=REGISTRY)
SOLVE_DURATION = Histogram(f"{_T}solve_duration_seconds", "A tenant's solved tasks: first in.php call to answer.",
                           ["tenant"], buckets=SOLVE_BUCKETS, registry=REGISTRY)
REPORTS = Counter(f"{_T}reports_total", "reportbad / reportgood a tenant sent for its solved tasks.",
                  ["tenant", "report"], registry=REGISTRY)
THREAD_SECONDS = Counter(f"{_T}thread_seconds_total", "Seconds a tenant's tasks held a worker slot (claim to "
                         "result): its use of the plan, what its cost share is computed from.", ["tenant"],
                         registry=REGISTRY)


def init(tenants: Iterable[tuple[str, int, int]]) -> None:
    """Create every series at zero (dashboards show 0, not 'no data'); tenants as (name, threads, reserved)."""
    BUILD_INFO.labels(__version__, platform.python_version()).set(1)
    for reason in REDIS_REFUSALS:
        REDIS_ERRORS.labels(reason)
    REJECTED.labels(UNAUTHENTICATED, "bad_key")
    for name, threads, reserved in tenants:
        THREADS.labels(name).set(threads)
        RESERVED.labels(name).set(reserved)
        IN_FLIGHT.labels(name).set(0)
        WAITING.labels(name).set(0)
        for protocol in PROTOCOLS:
            SUBMITTED.labels(protocol, name)
        THREAD_SECONDS.labels(name)
        REJECTED.labels(name, "rate_limited")
        for report in ("bad", "good"):
            REPORTS.labels(name, report)
        for outcome in TENANT_OUTCOMES:
            TASKS.labels(name, outcome)
        for outcome in CALLBACK_OUTCOMES:
            CALLBACKS.labels(name, outcome)
