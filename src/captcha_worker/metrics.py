"""Prometheus metrics (the contract in docs/metrics.md) and the small HTTP server for probes and scrapes.

Label values are bounded: ``method`` is a kind from ``methods.KIND_NAMES``, result codes are folded into
``KNOWN_CODES`` (the label column of the ``codes`` table; anything else becomes ``OTHER``), and nothing carries a
task id, URL, key or token.
The Prometheus registry is the only global state of the package.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Final

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from captcha_worker import __version__, codes, methods
from captcha_worker.service import Site

PREFIX = "captcha_solver_"

# No `*_created` series (each counter's and histogram's creation time): they double the series count and no panel
# or alert reads them (a process-wide switch of prometheus_client).
disable_created_metrics()  # type: ignore[no-untyped-call]

SOLVE_BUCKETS = (1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300)
WAIT_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
AGE_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
POLL_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40)

OUTCOMES = ("solved", "error", "expired", "dead_lettered", "duplicate", "released")
RETRY_CLASSES = ("capacity", "transient", "unsolvable", "requeue")
RESUME_OUTCOMES = ("answered", "window_passed", "unknown_id", "unsolvable")
REPORT_OUTCOMES = ("sent", "rejected", "failed")
PINGBACK_OUTCOMES = ("accepted", "duplicate", "unknown", "forbidden", "invalid", "failed")
PINGBACK_VIA = ("pingback", "poll")
#: the fatal API codes (the FATAL class of the codes table), pre-created so an alert's increase() sees the first one
FATAL_CODES = tuple(c.value for c in codes.FATAL)

#: result codes kept as label values (the codes table's `label` column); everything else is reported as OTHER
KNOWN_CODES = codes.LABELS


#: codes the worker itself dead-letters with, rows of the codes table (CaptchaAI's missing-param codes, the other
#: dead-letter codes, are in KNOWN_CODES)
DEAD_LETTER_CODES = tuple(c.value for c in (
    codes.Code.INVALID_JSON, codes.Code.INVALID_TASK, codes.Code.TASK_TOO_LARGE, codes.Code.UNKNOWN_METHOD,
    codes.Code.UNSUPPORTED_METHOD, codes.Code.TASK_EXPIRED, codes.Code.MAX_ATTEMPTS_EXCEEDED,
    codes.Code.MAX_WORKER_DEATHS_EXCEEDED, codes.Code.WORKER_ERROR))
#: why Redis could not serve (connection.Refusal values; kept here so metrics imports nothing of connection)
REDIS_REFUSALS = ("connection", "timeout", "loading", "oom", "readonly", "masterdown", "noreplicas", "busy",
                  "tryagain", "clusterdown", "auth", "nomaster", "moved", "unreplicated", "noscript")


def code_label(code: str) -> str:
    return code if code in KNOWN_CODES else "OTHER"


def dead_letter_label(code: str) -> str:
    return code if code in DEAD_LETTER_CODES else code_label(code)


def kind_label(kind: str | None) -> str:
    return kind if kind in methods.LABEL_KIND_NAMES else "unknown"


TASKS = Counter(f"{PREFIX}tasks_total", "Tasks finished by this worker, by kind and outcome.",
                ["method", "outcome"])
COST = Counter(f"{PREFIX}cost_total", "Money charged by per-solve providers (the spend cap's settlements), in the "
               "currency of their prices.", ["provider", "kind", "tenant"])
PROVIDER_BALANCE = Gauge(f"{PREFIX}provider_balance", "A per-solve provider's account balance (res.php getbalance), "
                         "polled every THREADSINFO_INTERVAL_SECONDS.", ["provider"])
SPEND = Gauge(f"{PREFIX}spend", "Money charged and reserved at the per-solve providers in this clock hour / UTC day "
              "(the spend cap's windows in Redis: cluster-wide).", ["window"])
SPEND_CAP = Gauge(f"{PREFIX}spend_cap", "The spend cap per window (PROVIDERS cap.hour / cap.day).", ["window"])
# Set by the routing (worker's provider breakers, issue 27): named here so that the dashboard and alerts have one owner.
BREAKER_OPEN = Gauge(f"{PREFIX}breaker_open", "1 while the provider's circuit breaker is open (its tasks go to "
                     "overflow providers), 0 while closed.", ["provider"])
SOLVE_DURATION = Histogram(f"{PREFIX}solve_duration_seconds",
                           "From the first in.php call to the answer, for solved tasks.", ["method"],
                           buckets=SOLVE_BUCKETS)
QUEUE_WAIT = Histogram(f"{PREFIX}queue_wait_seconds", "From submission to claim by a worker.",
                       buckets=WAIT_BUCKETS)
IN_FLIGHT = Gauge(f"{PREFIX}in_flight", "Tasks this worker is solving now (holding a budget unit).")
CONCURRENCY = Gauge(f"{PREFIX}concurrency_limit", "Solve slots of this worker (WORKER_CONCURRENCY).")
BUDGET_LIMIT = Gauge(f"{PREFIX}budget_limit",
                     "The cluster-wide thread budget in effect: the smallest limit a live worker enforces, as last "
                     "read.")
BUDGET_CONFIGURED = Gauge(f"{PREFIX}budget_configured_limit", "This worker's configured limit (CAPTCHAAI_THREADS).")
BUDGET_FOLLOWS_PLAN = Gauge(f"{PREFIX}budget_follows_plan",
                            "1 while this worker enforces the plan's threads (threadsinfo) because they are fewer "
                            "than CAPTCHAAI_THREADS, else 0.")
BUDGET_IN_USE = Gauge(f"{PREFIX}budget_in_use",
                      "Budget units in use cluster-wide: solves that may be running at CaptchaAI, as last read.")
BUDGET_HELD = Gauge(f"{PREFIX}budget_held", "Budget units held by this worker's jobs.")
BUDGET_WAIT = Counter(f"{PREFIX}budget_wait_seconds_total",
                      "Slot-seconds spent waiting for a budget unit (the plan's threads are all in use).")
PLAN_THREADS = Gauge(f"{PREFIX}plan_threads", "The plan's threads as reported by res.php?action=threadsinfo.")
PLAN_WORKING_THREADS = Gauge(f"{PREFIX}plan_working_threads",
                             "Threads busy on the account as reported by threadsinfo.")
PLAN_THREADS_IDLE = Gauge(f"{PREFIX}plan_threads_idle",
                          "Plan threads (threadsinfo) above the budget in effect: paid for and never used.")
PLAN_MONTHLY_PRICE = Gauge(f"{PREFIX}plan_monthly_price", "Plan price per month (CAPTCHAAI_MONTHLY_PRICE).")
BALANCE = Gauge(f"{PREFIX}balance", "Account balance as reported by res.php?action=getbalance.")
# `api_endpoint`, not `endpoint`: prometheus-operator gives every ServiceMonitor target an `endpoint` label (the
# port name), which would rename ours to `exported_endpoint`. Same for namespace, pod, service, job, instance.
#: the `provider` label of the plan's own requests (an overflow provider's is its configured name, never captchaai)
PLAN_PROVIDER: Final = "captchaai"
API_REQUESTS = Counter(f"{PREFIX}api_requests_total",
                       "API requests by provider (captchaai: the plan; else an overflow provider's name), endpoint "
                       "and result.", ["provider", "api_endpoint", "code"])
API_LATENCY = Histogram(f"{PREFIX}api_request_duration_seconds",
                        "API HTTP request latency by provider (captchaai: the plan; else an overflow provider's "
                        "name) and endpoint.", ["provider", "api_endpoint"],
                        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
POLLS = Histogram(f"{PREFIX}polls_per_solve", "res.php?action=get calls per solved or failed task.",
                  ["method"], buckets=POLL_BUCKETS)
RESUMES = Counter(f"{PREFIX}resumed_solves_total",
                  "Solves an earlier owner of the task left running at CaptchaAI (it died, drained past its "
                  "grace, or failed its polls), polled by the next owner instead of submitted again, by outcome: "
                  "answered, window_passed, unknown_id, unsolvable (the last three submit again).", ["outcome"])
REPORTS = Counter(f"{PREFIX}reports_total",
                  "Answers reported to CaptchaAI (report_bad / report_good), by verdict and outcome: sent, rejected "
                  "(CaptchaAI refused it), failed (not sent after retries).", ["verdict", "outcome"])
RETRIES = Counter(f"{PREFIX}retries_total",
                  "Retries by class: capacity (no free thread), transient (5xx, timeouts), unsolvable "
                  "(resubmitted), requeue (task put back on the queue).", ["class"])
QUEUE_DEPTH = Gauge(f"{PREFIX}queue_depth", "Items in the queue's lists, as last read by this worker.",
                    ["state"])
WORKERS_ALIVE = Gauge(f"{PREFIX}workers_alive", "Workers that sent a heartbeat recently (cluster-wide).")
LEASES_REAPED = Counter(f"{PREFIX}leases_reaped_total",
                        "Items this worker's reaper put back on pending: expired lease or orphaned claim.",
                        ["reason"])
LEASES_LOST = Counter(f"{PREFIX}leases_lost_total", "Leases this worker found gone when renewing them.")
AUDIT_VIOLATIONS = Gauge(f"{PREFIX}audit_violations",
                         "Broken invariants (docs/guarantees.md) the last two cluster-wide audits both saw in "
                         "Redis, by check (what `captcha-worker audit` reports): one worker audits per AUDIT_SECONDS, "
                         "every worker exports its counts. 0 in a healthy queue.",
                         ["check"])
TOKEN_AGE = Histogram(f"{PREFIX}token_age_seconds",
                      "Age of the answer when its result was written (received from res.php -> stored).",
                      buckets=AGE_BUCKETS)
FATAL_ERRORS = Counter(f"{PREFIX}fatal_errors_total",
                       "Fatal API errors (bad key, IP banned, no plan): the worker stops claiming.", ["code"])
FATAL_STATE = Gauge(f"{PREFIX}fatal_error",
                    "1 while this worker has stopped claiming because of this fatal API error, else 0.", ["code"])
READY = Gauge(f"{PREFIX}worker_ready", "1 when this worker is claiming tasks (readiness).")
REDIS_ERRORS = Counter(f"{PREFIX}redis_errors_total",
                       "Redis operations that failed with an outage and were retried, by reason (connection, "
                       "timeout, loading, oom, readonly, ...).", ["reason"])
DEAD_LETTERS = Counter(f"{PREFIX}dead_letters_total", "Items this worker dead-lettered, by code.", ["code"])
PINGBACKS = Counter(f"{PREFIX}pingbacks_total",
                    "Pingback callbacks this worker's receiver answered (PINGBACK_URL), by outcome: accepted, "
                    "duplicate, unknown (404), forbidden (403: wrong token or id), invalid (400), failed (503: Redis).",
                    ["outcome"])
PINGBACK_SOLVES = Counter(f"{PREFIX}pingback_solves_total",
                          "Solves of this worker submitted with a pingback, by how the answer came: pingback, or "
                          "poll (the fallback: the callback was lost, late, or an error code to confirm).", ["via"])
BUILD_INFO = Gauge(f"{PREFIX}build_info", "Build information.", ["version", "python"])


def init(*, concurrency: int, budget_limit: int, monthly_price: float) -> None:
    """Set the static gauges and create every labelled series at zero so dashboards show 0, not 'no data'."""
    BUILD_INFO.labels(__version__, platform.python_version()).set(1)
    CONCURRENCY.set(concurrency)
    BUDGET_LIMIT.set(budget_limit)
    BUDGET_CONFIGURED.set(budget_limit)
    BUDGET_FOLLOWS_PLAN.set(0)
    PLAN_MONTHLY_PRICE.set(monthly_price)
    for kind in (*methods.KIND_NAMES, "unknown"):  # unknown: tasks settled before their kind was known
        for outcome in OUTCOMES:
            TASKS.labels(kind, outcome)
    for cls in RETRY_CLASSES:
        RETRIES.labels(cls)
    for outcome in RESUME_OUTCOMES:
        RESUMES.labels(outcome)
    for verdict in ("bad", "good"):
        for outcome in REPORT_OUTCOMES:
            REPORTS.labels(verdict, outcome)
    for state in ("pending", "processing", "dead"):
        QUEUE_DEPTH.labels(state)
    for reason in ("expired", "orphaned"):
        LEASES_REAPED.labels(reason)
    for code in FATAL_CODES:
        FATAL_ERRORS.labels(code)
        FATAL_STATE.labels(code).set(0)
    for code in DEAD_LETTER_CODES:
        DEAD_LETTERS.labels(code)
    for reason in REDIS_REFUSALS:
        REDIS_ERRORS.labels(reason)
    for outcome in PINGBACK_OUTCOMES:
        PINGBACKS.labels(outcome)
    for via in PINGBACK_VIA:
        PINGBACK_SOLVES.labels(via)


class ProbeServer:
    """`/metrics`, `/healthz` and `/readyz` on one port. Readiness comes from a callable; `/metrics` serves
    `registry` (the worker's: the default one; the gateway has its own)."""

    def __init__(self, host: str, port: int, ready: Callable[[], tuple[bool, str]], *,
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.host, self.port, self._ready = host, port, ready
        self._registry = registry
        self._site: Site | None = None

    async def __aenter__(self) -> ProbeServer:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._site = Site(app, self.host, self.port, access_log=None)
        await self._site.start()
        self.port = self._site.port  # the port the OS chose, when 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._site is not None:
            await self._site.stop()

    async def _metrics(self, _: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(self._registry))
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return resp

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        ok, why = self._ready()
        return web.Response(text=f"{why}\n", status=200 if ok else 503)
