"""The captcha-solver dashboard, row by row: what an operator reads, top to bottom.

To add a row, append a ``Row`` to :data:`ROWS`;
to add a series to a panel, a ``Q`` to its queries; then ``make dashboard`` regenerates the JSON and the panel
section of docs/metrics.md, and the tests prove every query against a real Prometheus. Only metrics the worker
exports belong here, and the gateway's for the Tenants row (tests/test_observability.py checks it).
"""

from __future__ import annotations

from dashboards.panels import Graph, Q, Row, Stat, m, quantile, rate

UID = "captcha-solver"
TITLE = "captcha-solver"
DESCRIPTION = ("captcha-solver: solves, latency, queue, CaptchaAI plan threads, API calls, cost and failures. "
               "Every query uses the worker's metrics only (docs/metrics.md).")
MONTH_S = 2592000  # 30 days: the cost figure's month
#: the `provider` label of the plan's own API requests (captcha_worker.metrics.PLAN_PROVIDER)
PLAN_PROVIDER = "captchaai"

PLAN = Row("Plan & budget", (
    Stat("Plan threads / budget",
         "The plan's threads as CaptchaAI reports them (threadsinfo), the budget in effect (the smallest limit a "
         "live worker enforces: captchaai.threads, or the plan's threads when fewer) and the paid threads above it "
         "that stay idle. Plan and budget should be equal, idle 0.",
         (Q("plan", f"max({m('plan_threads')})"), Q("budget", f"max({m('budget_limit')})"),
          Q("paid, idle", f"max({m('plan_threads_idle')})")), w=8),
    Stat("Cost per 1 000 solves",
         "Plan price per month (captchaai.monthlyPrice) divided by the solves a 30-day month has at the solve rate "
         "of the dashboard's time range, times 1 000. The plan is paid whether threads are used or not, so idle "
         "time makes solves dearer. No data: monthlyPrice is 0 or nothing was solved.",
         (Q("per 1 000 solves", f"(max({m('plan_monthly_price')}) > 0) * 1000 / "
                                f"(sum({rate('tasks_total', '$__range', outcome='solved')}) * {MONTH_S} > 0)"),),
         w=8),  # no fixed decimals: a few hundredths of a dollar is the usual figure
    Stat("Balance",
         "Account balance as reported by getbalance (plans are billed per month; the balance is shown for "
         "completeness).",
         (Q("balance", f"min({m('balance')})"),), w=8, decimals=2),
    Graph("Plan-thread utilisation and budget waits",
          "In-flight solves ÷ plan threads (captchaai.threads): at 100 % with a growing queue the plan is too "
          "small. Budget waits: solve slots waiting for a plan thread (slot-seconds per second) while tasks are "
          "pending.",
          (Q("in flight ÷ plan threads", f"sum({m('in_flight')}) / max({m('budget_limit')})"),
           Q("slots waiting for a thread", f"sum({rate('budget_wait_seconds_total')})", right_unit="short")),
          unit="percentunit"),
    Graph("Plan threads: threadsinfo vs budget",
          "What CaptchaAI reports (threadsinfo: plan threads, threads busy on the account) against the budget in "
          "effect (the smallest limit a live worker enforces), the budget units held cluster-wide and by the "
          "scraped workers, their solve slots and in-flight solves.",
          (Q("plan threads (threadsinfo)", f"max({m('plan_threads')})"),
           Q("busy on the account (threadsinfo)", f"max({m('plan_working_threads')})"),
           Q("budget in effect", f"max({m('budget_limit')})"),
           Q("budget units held (cluster)", f"max({m('budget_in_use')})"),
           Q("budget units held (scraped workers)", f"sum({m('budget_held')})"),
           Q("solve slots", f"sum({m('concurrency_limit')})"),
           Q("in flight", f"sum({m('in_flight')})")),
          legend=("lastNotNull", "max")),
    Graph("Budget limits across workers",
          "The budget in effect next to the lowest and highest captchaai.threads of the running workers: during a "
          "helm upgrade of captchaai.threads they differ, and the lower one holds until no worker enforcing it is "
          "left. Workers following the plan: those enforcing the plan's threads because threadsinfo reports fewer "
          "than captchaai.threads.",
          (Q("in effect", f"max({m('budget_limit')})"),
           Q("configured, lowest", f"min({m('budget_configured_limit')})"),
           Q("configured, highest", f"max({m('budget_configured_limit')})"),
           Q("units in use", f"max({m('budget_in_use')})"),
           Q("workers following the plan", f"sum({m('budget_follows_plan')})", right_unit="short")),
          w=24, legend=("lastNotNull", "min", "max")),
))

OVERFLOW = Row("Overflow & spend", (
    Stat("Spend vs cap",
         "Money charged and reserved at the per-solve overflow providers in this clock hour and this UTC day (the "
         "spend cap's windows in Redis), and the caps (spendCap). At the cap paid solves are refused until the "
         "window closes. No data: no PROVIDERS.",
         (Q("this hour", f"max({m('spend', window='hour')})"), Q("hour cap", f"max({m('spend_cap', window='hour')})"),
          Q("today", f"max({m('spend', window='day')})"), Q("day cap", f"max({m('spend_cap', window='day')})")),
         w=8, decimals=2),
    Stat("Provider balance and days left",
         "Each overflow provider's balance (getbalance) and how many days it lasts at the spend rate of the "
         "dashboard's time range (no figure while nothing is spent there).",
         (Q("{{provider}}", f"max by (provider) ({m('provider_balance')})"),
          Q("{{provider}} days left", f"max by (provider) ({m('provider_balance')}) / on (provider) "
                                      f"(sum by (provider) ({rate('cost_total', '$__range')}) * 86400 > 0)")),
         w=8, decimals=2),
    Graph("Overflow cost per hour by provider and tenant",
          "What the overflow providers charge per hour at the current rate (cost_total: settled reservations; a "
          "refunded UNSOLVABLE adds 0), by provider and by the tasks' gateway tenant (empty: without one).",
          (Q("{{provider}} {{tenant}}", f"sum by (provider, tenant) ({rate('cost_total')}) * 3600"),),
          w=8),  # the providers' currency, whatever it is
    Stat("Breakers open",
         "Workers whose circuit breaker of a provider is open or half-open (CaptchaAI's: outage, error rate, a key "
         "without a plan): while it is, their tasks go to the overflow providers under the cap. 0: closed. No "
         "data: no PROVIDERS (no breaker).",
         (Q("{{provider}}", f"sum by (provider) ({m('breaker_open')})"),), w=24, h=4, decimals=0, red_from=1),
))

QUEUE = Row("Queue & solves", (
    Stat("Tasks pending", "Tasks waiting in {queue}:pending, as last read by the workers' heartbeat.",
         (Q("pending", f"max({m('queue_depth', state='pending')})"),), w=4, h=8, sparkline=True),
    Graph("Queue depth vs replicas",
          "Pending, processing and dead-letter list lengths (from the workers' heartbeat) against the workers "
          "exporting metrics (replicas) and the ready ones. KEDA adds a replica per worker.concurrency pending "
          "tasks, up to floor(threads / concurrency).",
          (Q("{{state}}", f"max by (state) ({m('queue_depth')})"),
           Q("replicas", f"count({m('build_info')})", right_unit="short"),
           Q("ready", f"sum({m('worker_ready')})", right_unit="short")), w=10),
    Graph("Queue wait p50 / p95", "From submission to claim by a worker.",
          (Q("p50", quantile(0.5, "queue_wait_seconds")), Q("p95", quantile(0.95, "queue_wait_seconds"))),
          w=10, unit="s"),
    Graph("Solves/s by method and outcome",
          "Tasks finished per second by kind and outcome (solved, error, expired, dead_lettered, duplicate, "
          "released); only combinations seen in the time range.",
          (Q("{{method}} {{outcome}}",
             f"sum by (method, outcome) ({rate('tasks_total')}) and on (method, outcome) "
             f"(sum by (method, outcome) (increase({m('tasks_total')}[$__range])) > 0)"),),
          unit="reqps"),
    Graph("Success rate",
          "Solved ÷ finished (solved + error + expired + dead-lettered). Released tasks (put back on the queue) "
          "and duplicates are not outcomes for the producer.",
          (Q("success rate", f"sum({rate('tasks_total', outcome='solved')}) / "
                             f"sum({rate('tasks_total', outcome='~solved|error|expired|dead_lettered')})"),),
          w=6, unit="percentunit", max=1, legend=("mean", "min")),
    Graph("Solve latency p50 / p95 / p99", "From the first in.php call to the answer, solved tasks, all kinds.",
          tuple(Q(f"p{round(q * 100)}", quantile(q, "solve_duration_seconds")) for q in (0.5, 0.95, 0.99)),
          w=6, unit="s"),
    Graph("Solve latency p95 by method", "From the first in.php call to the answer, by kind.",
          (Q("{{method}}", quantile(0.95, "solve_duration_seconds", by="method")),), unit="s"),
    Graph("Token age at delivery",
          "Age of the answer when its result was written for the producer (received from res.php → stored). "
          "Tokens expire (reCAPTCHA ~120 s), so this should stay far below that.",
          tuple(Q(f"p{round(q * 100)}", quantile(q, "token_age_seconds")) for q in (0.5, 0.95, 0.99)), unit="s"),
))

API = Row("CaptchaAI API", (
    Graph("API calls per solve",
          "CaptchaAI's in.php + res.php?action=get calls (provider captchaai: not the overflow providers') per "
          "solved task, and the average number of res.php polls per finished task. High values: the poll schedule "
          "is too eager or tasks are resubmitted.",
          (Q("API calls per solve",
             f"sum({rate('api_requests_total', provider=PLAN_PROVIDER, api_endpoint='~in|res_get')}) / "
             f"sum({rate('tasks_total', outcome='solved')})"),
           Q("polls per task", f"sum({rate('polls_per_solve_sum')}) / sum({rate('polls_per_solve_count')})")),
          w=6),
    Graph("API errors by code",
          "CaptchaAI replies other than OK and CAPCHA_NOT_READY, per second, by code (codes outside the known set "
          "are OTHER; provider captchaai: the overflow providers' replies are not counted here).",
          (Q("{{code}}", "sum by (code) "
                         f"({rate('api_requests_total', provider=PLAN_PROVIDER, code='!OK|CAPCHA_NOT_READY')})"),),
          w=6, unit="reqps"),
    Graph("Retries by class",
          "capacity: no free plan thread (ERROR_ZERO_BALANCE and the like); transient: 5xx, timeouts, resets; "
          "unsolvable: resubmitted after ERROR_CAPTCHA_UNSOLVABLE; requeue: task put back on the queue.",
          (Q("{{class}}", f"sum by (class) ({rate('retries_total')})"),), w=6, unit="reqps"),
    Graph("API latency p95 by endpoint",
          "HTTP request latency of CaptchaAI calls (provider captchaai: not the overflow providers').",
          (Q("{{api_endpoint}}",
             quantile(0.95, "api_request_duration_seconds", by="api_endpoint", provider=PLAN_PROVIDER)),),
          w=6, unit="s"),
    Graph("Solves resumed and answers reported",
          "Solves left running at CaptchaAI by a worker that died, drained past its grace or failed its polls, "
          "polled by the next worker instead of submitted again (answered; or submitted again: window passed, "
          "unknown id, unsolvable); and the producers' report_bad / report_good sent to CaptchaAI.",
          (Q("resumed: {{outcome}}", f"sum by (outcome) ({rate('resumed_solves_total')})"),
           Q("report {{verdict}}: {{outcome}}", f"sum by (verdict, outcome) ({rate('reports_total')})")),
          w=12, unit="reqps"),
    Graph("Pingbacks",
          "Pingback mode (PINGBACK_URL): callbacks the receivers answered, by outcome (accepted, duplicate; refused: "
          "unknown, forbidden = wrong token or id, invalid; failed = Redis unreachable), and how solves submitted "
          "with a pingback were answered: by the callback, or by a fallback poll (the callback was lost or late).",
          (Q("callback {{outcome}}", f"sum by (outcome) ({rate('pingbacks_total')})"),
           Q("answered by {{via}}", f"sum by (via) ({rate('pingback_solves_total')})")),
          w=12, unit="reqps"),
))

ERRORS = Row("Errors", (
    Stat("Fatal API errors",
         "Fatal API errors (wrong key, no plan, IP banned) in the dashboard's time range. Any: workers stopped "
         "claiming until the key works again.",
         (Q("fatal errors", f"sum(increase({m('fatal_errors_total')}[$__range]))"),),
         w=3, h=8, decimals=0, red_from=1),
    Stat("Dead letters",
         "Entries in the dead-letter list {queue}:dead (capped at queue.deadLetterMax). Inspect with "
         "`captcha-worker dead-letters list`.",
         (Q("dead letters", f"max({m('queue_depth', state='dead')})"),), w=3, h=8, red_from=1),
    Graph("Fatal API errors by code",
          "Fatal API errors per second by code: the worker stops claiming, readiness goes false, and it probes "
          "every 30 s until the key works.",
          (Q("{{code}}", f"sum by (code) ({rate('fatal_errors_total')})"),), w=9, unit="reqps"),
    Graph("Dead-lettered tasks",
          "Length of the dead-letter list and items dead-lettered per second, in all and by code (INVALID_JSON, "
          "TASK_TOO_LARGE, UNKNOWN_METHOD, MAX_ATTEMPTS_EXCEEDED, ...).",
          (Q("in the dead-letter list", f"max({m('queue_depth', state='dead')})"),
           Q("dead-lettered/s", f"sum({rate('tasks_total', outcome='dead_lettered')})", right_unit="reqps"),
           Q("{{code}}/s", f"sum by (code) ({rate('dead_letters_total')})", right_unit="reqps")),
          w=9),
    Graph("Leases reaped, leases lost, Redis errors",
          "Claimed tasks requeued by a reaper (their worker died or stalled: expired lease, or an orphaned claim), "
          "leases a worker found gone when renewing them, and Redis operations that failed and were retried.",
          (Q("reaped ({{reason}})", f"sum by (reason) ({rate('leases_reaped_total')})"),
           Q("leases lost", f"sum({rate('leases_lost_total')})"),
           Q("Redis errors", f"sum({rate('redis_errors_total')})")), w=18, unit="reqps"),
    Stat("Audit violations",
         "Broken invariants of docs/guarantees.md that two cluster-wide audits in a row saw in Redis (one worker "
         "audits per AUDIT_SECONDS; every worker reports its counts), by check (a budget unit or "
         "lease of a finished task, a lease without its item, an item without a lease). Any: run "
         "`captcha-worker audit` and see docs/operations.md#troubleshooting.",
         (Q("{{check}}", f"max by (check) ({m('audit_violations')})"),), w=6, h=8, decimals=0, red_from=1),
))

TENANTS = Row("Tenants", (
    Graph("Share utilisation by tenant",
          "Each tenant's solves in flight ÷ its share of the plan (its `threads` in the gateway's tenants). At "
          "100 % the tenant is at its cap: its further tasks wait in its own list. Empty without a gateway.",
          (Q("{{tenant}}", f"max by (tenant) ({m('tenant_in_flight', True)}) / "
                           f"max by (tenant) ({m('tenant_threads', True)})"),),
          w=8, unit="percentunit"),
    Graph("In flight and share by tenant",
          "A tenant's solves in flight now, its share (threads), the threads reserved for it while it has work, and "
          "its tasks waiting in its own list for a thread of its share.",
          (Q("{{tenant}} in flight", f"max by (tenant) ({m('tenant_in_flight', True)})"),
           Q("{{tenant}} waiting", f"max by (tenant) ({m('tenant_waiting', True)})"),
           Q("{{tenant}} share", f"max by (tenant) ({m('tenant_threads', True)})"),
           Q("{{tenant}} reserved", f"max by (tenant) ({m('tenant_reserved_threads', True)})")), w=8),
    Graph("Submitted and finished by tenant",
          "Tasks per second each tenant submitted through the gateway, and its tasks that ended, by outcome (only "
          "the combinations seen in the time range).",
          (Q("{{tenant}} submitted", f"sum by (tenant) ({rate('tenant_submitted_total', gateway=True)})"),
           Q("{{tenant}} {{outcome}}",
             f"sum by (tenant, outcome) ({rate('tenant_tasks_total', gateway=True)}) and on (tenant, outcome) "
             f"(sum by (tenant, outcome) (increase({m('tenant_tasks_total', True)}[$__range])) > 0)")),
          w=8, unit="reqps"),
    Graph("Queue wait p95 by tenant", "From submission to claim by a worker, each tenant's tasks.",
          (Q("{{tenant}}", quantile(0.95, "tenant_queue_wait_seconds", by="tenant", gateway=True)),), w=8, unit="s"),
    Graph("Solve time p95 by tenant", "From the first in.php call to the answer, each tenant's solved tasks.",
          (Q("{{tenant}}", quantile(0.95, "tenant_solve_duration_seconds", by="tenant", gateway=True)),),
          w=8, unit="s"),
    Stat("Cost by tenant",
         "The plan's monthly price (captchaai.monthlyPrice) shared by the tenants in proportion to the thread-seconds "
         "their tasks held in the dashboard's time range (claim to result): what each tenant's use costs per month at "
         "this rate. Work submitted without the gateway is not part of it. No data: monthlyPrice is 0 or no tenant "
         "task ended.",
         (Q("{{tenant}}", f"sum by (tenant) ({rate('tenant_thread_seconds_total', '$__range', gateway=True)}) "
                          f"* on () group_left () (max({m('plan_monthly_price')}) > 0) / on () group_left () "
                          f"(sum({rate('tenant_thread_seconds_total', '$__range', gateway=True)}) > 0)"),),
         w=8, h=8, decimals=2),
    Graph("Gateway requests, refusals and callbacks",
          "Requests the gateway answered per second by endpoint and code (only those seen in the time range), "
          "requests refused before any Redis access (a bad key: tenant `unauthenticated`; a tenant's rate limit) "
          "and pingback calls by outcome (delivered, failed after the retries, refused: the address is not "
          "allowed).",
          (Q("{{api_endpoint}} {{code}}",
             f"sum by (api_endpoint, code) ({rate('gateway_requests_total', gateway=True)}) and on (api_endpoint, "
             f"code) (sum by (api_endpoint, code) (increase({m('gateway_requests_total', True)}[$__range])) > 0)"),
           Q("refused: {{tenant}} {{reason}}",
             f"sum by (tenant, reason) ({rate('gateway_rejected_total', gateway=True)})", right_unit="reqps"),
           Q("callbacks {{outcome}}", f"sum by (outcome) ({rate('gateway_callbacks_total', gateway=True)})",
             right_unit="reqps")),
          w=16, unit="reqps"),
    Graph("Gateway replicas, latency and reports",
          "Gateway replicas that reach Redis (readiness) and Redis operations they found failing, the 99th "
          "percentile time to answer a request by endpoint, and reportbad / reportgood by tenant.",
          (Q("ready replicas", f"sum({m('gateway_ready', True)})", right_unit="short"),
           Q("Redis errors/s", f"sum({rate('gateway_redis_errors_total', gateway=True)})", right_unit="short"),
           Q("p99 {{api_endpoint}}", quantile(0.99, "gateway_request_duration_seconds", by="api_endpoint",
                                               gateway=True)),
           Q("report{{report}} {{tenant}}/s", f"sum by (tenant, report) ({rate('tenant_reports_total', gateway=True)})",
             right_unit="short")),
          w=8, unit="s"),
))

WORKERS = Row("Workers", (
    Stat("Workers ready",
         "Workers whose readiness is true (claiming tasks) and workers exporting metrics (replicas). Fewer ready "
         "than running: a fatal API error, Redis unreachable, or a drain.",
         (Q("ready", f"sum({m('worker_ready')})"), Q("running", f"count({m('build_info')})")), w=5, h=8),
    Stat("Worker versions", "Workers by version (during a rollout two versions run side by side).",
         (Q("{{version}}", f"count by (version) ({m('build_info')})"),), w=4, h=8),
    Graph("Workers: scraped, heartbeating, ready",
          "Workers Prometheus scrapes, workers that sent a heartbeat to Redis recently (all releases sharing the "
          "queue), and ready workers.",
          (Q("scraped", f"count({m('build_info')})"), Q("heartbeating", f"max({m('workers_alive')})"),
           Q("ready", f"sum({m('worker_ready')})")), w=15, legend=("lastNotNull", "min", "max")),
))

ROWS: tuple[Row, ...] = (PLAN, OVERFLOW, QUEUE, API, ERRORS, TENANTS, WORKERS)
