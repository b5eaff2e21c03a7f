"""`captcha-worker` commands: run, gateway, simulator, check, limit, submit, wait, report, stats, dead-letters, plan,
demo.

Exit codes (docs/contracts.md): 0 success, 1 a task or check failed (or Redis refused), 2 bad configuration or
arguments (one line on stderr), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager
from decimal import Decimal
from typing import Any, TypeVar

from captcha_worker import __version__, demo, gateway, log, planner, simulator, watch
from captcha_worker.captchaai import ApiError, CaptchaAI, RetryPolicy
from captcha_worker.client import CaptchaQueue, InvalidTask, Solved
from captcha_worker.config import (
    ConfigError,
    ProducerConfig,
    ProvidersConfig,
    RedisConfig,
    Secret,
    WorkerConfig,
    api_key_from_env,
    api_url_from_env,
    providers_from_env,
    queue_name,
    redact_url,
    threads_from_env,
)
from captcha_worker.connection import connect, describe_refusal, refusal, tls_hint
from captcha_worker.gateway.config import tenant_json
from captcha_worker.metrics import ProbeServer
from captcha_worker.output import Progress, outcome_json
from captcha_worker.overflow import parse_label
from captcha_worker.pingback import Receiver
from captcha_worker.queue import AuditCheck, DeadLetter, RedisQueue, confirmed, item_ref
from captcha_worker.service import on_signals
from captcha_worker.spend import Spend, SpendState
from captcha_worker.task import payload_view
from captcha_worker.worker import default_worker_id, open_worker

EXIT_OK, EXIT_FAIL, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130
T = TypeVar("T")
#: while interrupted, how often the command is cancelled again (redis-py can lose a cancel that lands while it
#: connects or reads a reply: `wait` then went on until its own timeout)
RECANCEL_S = 0.1
#: the longest debugging window `dead-letters keep-raw --for` opens (a day: it is for a debugging session)
KEEP_RAW_MAX_S = 86_400


def run_command(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run for a short command: Ctrl-C (SIGINT) cancels it, and cancels it again every RECANCEL_S until it
    stops; then KeyboardInterrupt (main() exits 130, nothing on stderr)."""
    return asyncio.run(_interruptible(main))


async def _interruptible(main: Coroutine[Any, Any, T]) -> T:
    task = asyncio.ensure_future(main)
    interrupted = asyncio.Event()

    def interrupt() -> None:
        interrupted.set()
        task.cancel()

    waiter = asyncio.ensure_future(interrupted.wait())
    try:
        with on_signals(interrupt, (signal.SIGINT,)):
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            while not task.done():  # interrupted
                task.cancel()
                await asyncio.wait({task}, timeout=RECANCEL_S)
    finally:
        waiter.cancel()
    if interrupted.is_set():
        if not task.cancelled():
            task.exception()  # retrieved: an error while stopping is not reported over the interrupt
        raise KeyboardInterrupt
    return task.result()


class UsageError(Exception):
    """Bad arguments or environment for a command: printed on one line, exit code 2."""


# -- helpers ------------------------------------------------------------------------------------------------
def _die(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return EXIT_CONFIG


def _stop_on_signals(stop: asyncio.Event, hard: asyncio.Event) -> AbstractContextManager[None]:
    """First SIGTERM/SIGINT: graceful stop. Second: cut the drain short."""

    def handler() -> None:
        (hard if stop.is_set() else stop).set()

    return on_signals(handler)


def producer_config(ns: argparse.Namespace) -> ProducerConfig:
    """The Redis settings `run` reads (REDIS_URL, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA_FILE,
    REDIS_TLS_INSECURE, timeouts, QUEUE_NAME, ...), with --redis-url and --queue on top."""
    env = dict(os.environ)
    if ns.redis_url:
        env["REDIS_URL"] = ns.redis_url
    if ns.queue:
        env["QUEUE_NAME"] = ns.queue
    try:
        return ProducerConfig.from_env(env)
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from None


@asynccontextmanager
async def _producer(ns: argparse.Namespace) -> AsyncIterator[CaptchaQueue]:
    pc = producer_config(ns)
    q = CaptchaQueue.from_config(pc.redis, queue=pc.queue, task_ttl=pc.task_ttl_seconds,
                                 max_task_bytes=pc.max_task_bytes)
    async with q:
        yield q


# -- run ----------------------------------------------------------------------------------------------------
def cmd_run(ns: argparse.Namespace) -> int:
    try:
        cfg = WorkerConfig.from_env()
    except ConfigError as exc:
        return _die("captcha-worker run", f"configuration error: {exc}")
    provider_keys = [p.key.value for p in cfg.providers.providers] if cfg.providers else []
    log.setup(cfg.log_level, secrets=[cfg.api_key.value, cfg.redis.password.value,
                                      cfg.redis.sentinel_password.value, *provider_keys])
    return asyncio.run(_run_worker(cfg))


async def _run_worker(cfg: WorkerConfig) -> int:
    stop, hard = asyncio.Event(), asyncio.Event()
    with _stop_on_signals(stop, hard):
        return await _serve_worker(cfg, stop, hard)


async def _serve_worker(cfg: WorkerConfig, stop: asyncio.Event, hard: asyncio.Event) -> int:
    worker_id = default_worker_id()
    redis = connect(cfg.redis, client_name=f"captcha-worker-{worker_id}")  # the worker's and the receiver's
    async with AsyncExitStack() as stack:
        stack.push_async_callback(redis.aclose)  # closed last, after everything that uses it
        worker = await stack.enter_async_context(open_worker(cfg, worker_id=worker_id, redis=redis))
        try:
            probes = await stack.enter_async_context(ProbeServer(cfg.metrics_host, cfg.metrics_port,
                                                                 worker.readiness))
        except OSError as exc:
            return _die("captcha-worker run", f"cannot listen on {cfg.metrics_host}:{cfg.metrics_port}: "
                                              f"{exc.strerror}")
        # the port bound (METRICS_PORT=0: the one the OS chose), as the gateway and the simulator print theirs
        print(f"captcha-worker run: metrics listening on http://{cfg.metrics_host}:{probes.port}", flush=True)
        if cfg.pingback_url:  # every worker receives callbacks for any worker's solves (the pingback Service)
            try:
                receiver = await stack.enter_async_context(Receiver(redis, cfg.queue, cfg.pingback_host,
                                                                    cfg.pingback_port))
            except OSError as exc:
                return _die("captcha-worker run", f"cannot listen on {cfg.pingback_host}:{cfg.pingback_port} "
                                                  f"(PINGBACK_PORT): {exc.strerror}")
            # PINGBACK_PORT=0: the port the OS chose, for whatever routes the callbacks to this receiver
            print(f"captcha-worker run: pingback listening on http://{cfg.pingback_host}:{receiver.port}", flush=True)
        await worker.run(stop, hard)
    return EXIT_OK


# -- gateway ------------------------------------------------------------------------------------------------
def cmd_gateway(ns: argparse.Namespace) -> int:
    env = dict(os.environ)
    if ns.host:
        env["GATEWAY_HOST"] = ns.host
    if ns.port is not None:
        env["GATEWAY_PORT"] = str(ns.port)
    try:
        cfg = gateway.GatewayConfig.from_env(env)
    except ConfigError as exc:
        return _die("captcha-worker gateway", f"configuration error: {exc}")
    if ns.check:
        print(json.dumps({"queue": cfg.queue, "tenants": tenant_json(cfg.tenants)}))
        return EXIT_OK
    log.setup(cfg.log_level, secrets=cfg.secrets())
    try:
        asyncio.run(gateway.serve(cfg))
    except OSError as exc:
        return _die("captcha-worker gateway", f"cannot listen on {cfg.host}:{cfg.port} or {cfg.metrics_host}:"
                                              f"{cfg.metrics_port}: {exc.strerror}")
    except (ValueError, ConfigError) as exc:  # the TLS certificate
        return _die("captcha-worker gateway", f"configuration error: {exc}")
    return EXIT_OK


# -- simulator ----------------------------------------------------------------------------------------------
def cmd_simulator(ns: argparse.Namespace) -> int:
    try:
        config = simulator.config_from_args(ns)
        tls = simulator.tls_from_args(ns)
    except ValueError as exc:
        return _die("captcha-worker simulator", str(exc))
    log.setup(ns.log_level or os.environ.get("LOG_LEVEL", "info"), secrets=sorted(config.keys or ()))
    try:
        asyncio.run(simulator.serve(config, ns.host, ns.port, tls=tls))
    except OSError as exc:
        return _die("captcha-worker simulator", f"cannot listen on {ns.host}:{ns.port}: {exc.strerror}")
    except KeyboardInterrupt:
        pass
    return EXIT_OK


# -- check --------------------------------------------------------------------------------------------------
def cmd_check(ns: argparse.Namespace) -> int:
    env = os.environ
    try:
        rc = RedisConfig.from_env(env)
        queue = queue_name(env)
        key, _ = api_key_from_env(env, checked=False)
        api_url = api_url_from_env(env)
        threads = threads_from_env(env)
    except ConfigError as exc:
        return _die("captcha-worker check", f"configuration error: {exc}")
    checks = run_command(_checks(rc, queue, key, api_url, threads))
    failed = [c for c in checks if not c[1]]
    if ns.json:
        print(json.dumps({"ok": not failed, "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}))
    else:
        for name, ok, detail in checks:
            print(f"{'ok  ' if ok else 'FAIL'}  {name:<12} {detail}")
    return EXIT_FAIL if failed else EXIT_OK


async def _checks(rc: RedisConfig, queue: str, key: str, api_url: str,
                  threads: int | None) -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    redis = connect(rc, client_name="captcha-worker-check")
    try:
        stats = await asyncio.wait_for(RedisQueue(redis, queue).stats(), 10)
        out.append(("redis", True, f"{rc.display_url()} queue {queue!r}: {stats.pending} pending, "
                                   f"{stats.processing} processing, {stats.dead} dead"))
    except Exception as exc:
        why = refusal(exc)
        detail = describe_refusal(why) if why else f"failing ({type(exc).__name__})"
        hint = tls_hint(exc)
        out.append(("redis", False, f"{rc.display_url()} is {detail}" + (f" ({hint})" if hint else "")))
    finally:
        await redis.aclose()
    async with CaptchaAI(Secret(key), api_url, http_timeout_s=10, retry=RetryPolicy(transient_attempts=2,
                                                                                      transient_initial_s=0.5)) as api:
        try:
            info = await api.threadsinfo()
            out.append(("api key", True, f"accepted by {redact_url(api_url)}"))
            fine = threads is None or threads <= info.threads
            note = "" if threads is None else f" (CAPTCHAAI_THREADS={threads}" + (
                ")" if fine else ": more than the plan has)")
            out.append(("plan", fine, f"{info.threads} threads, {info.working_threads} working{note}"))
            out.append(("balance", True, f"{await api.getbalance():g}"))
        except ApiError as exc:
            out.append(("api key", False, f"{redact_url(api_url)} answered {exc.code}"))
    return out


# -- limit --------------------------------------------------------------------------------------------------
_HOLDER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _env_threads() -> int | None:
    """CAPTCHAAI_THREADS by the worker's rules (``config.threads_from_env``), None when unset; what the worker
    refuses is a configuration error here too, with the worker's message."""
    try:
        return threads_from_env(os.environ)
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from None


def _limit_args(ns: argparse.Namespace) -> tuple[int, float, str]:
    """--threads (default $CAPTCHAAI_THREADS), --hold, --holder, checked."""
    threads = ns.threads if ns.threads is not None else _env_threads()
    if threads is None or threads < 1:
        raise UsageError("--threads (or CAPTCHAAI_THREADS) must be an integer >= 1")
    if not 0 < ns.hold <= 86_400:
        raise UsageError("--hold must be > 0 and <= 86400 seconds")
    if not 0 < len(ns.holder) <= 100 or not set(ns.holder) <= _HOLDER_CHARS:
        raise UsageError("--holder must be 1-100 letters, digits, '.', '_' or '-'")
    return threads, ns.hold, ns.holder


def cmd_limit(ns: argparse.Namespace) -> int:
    threads, hold_s, holder = _limit_args(ns)
    try:
        rc, queue = RedisConfig.from_env(os.environ), queue_name(os.environ)
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from None
    return run_command(_hold_limit(rc, queue, threads, hold_s, holder, as_json=ns.json))


async def _hold_limit(rc: RedisConfig, queue: str, threads: int, hold_s: float, holder: str, *,
                      as_json: bool) -> int:
    redis = connect(rc, client_name="captcha-worker-limit")
    try:
        state = await asyncio.wait_for(RedisQueue(redis, queue).budget.hold_limit(holder, threads, hold_s=hold_s),
                                       10)
    except Exception as exc:
        why = refusal(exc)
        detail = describe_refusal(why) if why else f"failing ({type(exc).__name__})"
        print(f"captcha-worker limit: {rc.display_url()} is {detail}; no limit registered", file=sys.stderr)
        return EXIT_FAIL
    finally:
        await redis.aclose()
    data = {"queue": queue, "holder": holder, "limit": threads, "hold_s": hold_s, "budget_limit": state.limit,
            "budget_in_use": state.in_use}
    print(json.dumps(data) if as_json else
          f"queue {queue!r}: limit {threads} held {hold_s:g}s by {holder}; effective limit {state.limit}, "
          f"{state.in_use} units in use")
    return EXIT_OK


# -- producer commands --------------------------------------------------------------------------------------
def _parse_params(pairs: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--param expects NAME=VALUE, got {pair!r}")
        params[name] = value
    return params


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        tasks = []
        for n, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise UsageError(f"{path}:{n}: not valid JSON") from None
            if not isinstance(item, dict) or "method" not in item:
                raise UsageError(f"{path}:{n}: expected an object with 'method' and 'params'")
            tasks.append(item)
        return tasks
    finally:
        if stream is not sys.stdin:
            stream.close()


def cmd_submit(ns: argparse.Namespace) -> int:
    if bool(ns.method) == bool(ns.file):
        raise UsageError("give either METHOD (with --param NAME=VALUE ...) or --file FILE.jsonl (- for stdin)")
    if ns.file:
        tasks = _read_jsonl(ns.file)
    else:
        tasks = [{"method": ns.method, "params": _parse_params(ns.param), "deadline": ns.deadline,
                  "priority": ns.priority, "id": ns.id}]
    return run_command(_submit(ns, tasks))


async def _submit(ns: argparse.Namespace, tasks: list[dict[str, Any]]) -> int:
    async with _producer(ns) as q:
        try:
            ids = await q.submit_many(tasks)
        except InvalidTask as exc:
            raise UsageError(f"invalid task: {exc}") from None
        except (ValueError, TypeError) as exc:
            raise UsageError(f"invalid task: {exc}") from None
        if not ns.wait:
            for task_id in ids:
                print(task_id)
            return EXIT_OK
        progress = Progress(len(ids))
        ok = True
        async for outcome in q.as_completed(ids, ns.timeout):
            data = outcome_json(outcome)
            print(json.dumps(data), flush=True)
            progress.add(data["status"])
            ok = ok and isinstance(outcome, Solved)
        progress.close()
        return EXIT_OK if ok else EXIT_FAIL


def cmd_wait(ns: argparse.Namespace) -> int:
    return run_command(_wait(ns))


async def _wait(ns: argparse.Namespace) -> int:
    async with _producer(ns) as q:
        ok = True
        async for outcome in q.as_completed(ns.ids, ns.timeout):
            print(json.dumps(outcome_json(outcome)), flush=True)
            ok = ok and isinstance(outcome, Solved)
        return EXIT_OK if ok else EXIT_FAIL


def cmd_report(ns: argparse.Namespace) -> int:
    return run_command(_report(ns))


async def _report(ns: argparse.Namespace) -> int:
    async with _producer(ns) as q:
        queued = await (q.report_good(ns.id) if ns.verdict == "good" else q.report_bad(ns.id))
    data: dict[str, Any] = {"id": ns.id, "verdict": ns.verdict, "queued": queued}
    if not queued:
        data["text"] = "no answer from CaptchaAI to report: not solved (yet), failed, or its record expired"
    print(json.dumps(data))
    return EXIT_OK if queued else EXIT_FAIL


def cmd_stats(ns: argparse.Namespace) -> int:
    if ns.watch:
        return _watch(ns)
    return run_command(_stats(ns))


def _watch(ns: argparse.Namespace) -> int:
    if ns.interval <= 0 or (ns.count is not None and ns.count < 1):
        raise UsageError("--interval must be > 0 and --count >= 1")
    budget = ns.budget if ns.budget is not None else _env_threads()
    prom = watch.Prometheus(ns.prometheus, ns.matchers) if ns.prometheus else None
    return run_command(watch.run(lambda: _producer(ns), interval_s=ns.interval, budget=budget, prometheus=prom,
                                 count=ns.count))


async def _stats(ns: argparse.Namespace) -> int:
    try:  # the cap to show the windows against: PROVIDERS as the workers have it (their ConfigMap)
        cap = providers_from_env(os.environ)
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from None
    async with _producer(ns) as q:
        s = await q.stats()
        spend = await Spend(q.redis, q.keys.queue).state()
    data: dict[str, Any] = {
        "queue": q.keys.queue, "pending": s.pending, "processing": s.processing, "dead": s.dead,
        "budget_in_use": s.budget_in_use, "budget_limit": s.budget_limit, "workers_alive": s.workers_alive}
    if cap is not None or spend.totals or spend.hour or spend.day:
        data["spend"] = spend_view(spend, cap)
    if ns.json:
        print(json.dumps(data))
        return EXIT_OK
    for name, value in data.items():
        if name != "spend":
            print(f"{name:<14} {value}")
    if "spend" in data:
        print(*spend_lines(data["spend"]), sep="\n")
    return EXIT_OK


def spend_view(state: SpendState, cap: ProvidersConfig | None) -> dict[str, Any]:
    """The spend windows against the cap and the ledger by provider and by tenant, in money (exact decimals from
    the micro-units: the ledger's own figures, never a float sum)."""
    by_provider: dict[str, int] = {}
    by_tenant: dict[str, int] = {}
    for label, micro in state.totals.items():
        provider, _kind, tenant = parse_label(label)
        by_provider[provider] = by_provider.get(provider, 0) + micro
        by_tenant[tenant or "-"] = by_tenant.get(tenant or "-", 0) + micro
    return {"hour": money(state.hour), "day": money(state.day), "reserved": money(state.reserved),
            "cap_hour": None if cap is None else money(cap.cap_hour_micro),
            "cap_day": None if cap is None else money(cap.cap_day_micro),
            "by_provider": {k: money(v) for k, v in sorted(by_provider.items())},
            "by_tenant": {k: money(v) for k, v in sorted(by_tenant.items())}}


def money(micro: int) -> str:
    """Micro-units as a decimal string with 6 places (1450 -> "0.001450")."""
    sign, micro = ("-", -micro) if micro < 0 else ("", micro)
    return f"{sign}{micro // 1_000_000}.{micro % 1_000_000:06d}"


def spend_lines(view: dict[str, Any]) -> list[str]:
    def against(window: str) -> str:
        cap = view[f"cap_{window}"]
        if cap is None:
            return f"{view[window]} (no PROVIDERS here: cap unknown)"
        share = Decimal(view[window]) / Decimal(cap) * 100 if Decimal(cap) else Decimal(0)
        return f"{view[window]} of {cap} ({share:.1f} %)"

    lines = [f"{'spend_hour':<14} {against('hour')}", f"{'spend_day':<14} {against('day')}",
             f"{'spend_reserved':<14} {view['reserved']}"]
    lines += [f"{'spend_total':<14} provider {name}: {value}" for name, value in view["by_provider"].items()]
    lines += [f"{'spend_total':<14} tenant {name}: {value}" for name, value in view["by_tenant"].items()]
    return lines


def cmd_audit(ns: argparse.Namespace) -> int:
    if ns.confirm_seconds < 0:
        raise UsageError("--confirm-seconds must be >= 0")
    return run_command(_audit(ns))


async def _audit(ns: argparse.Namespace) -> int:
    """Every broken invariant Redis shows (docs/guarantees.md), named by member; with --confirm-seconds, only
    what a second audit that much later still shows (a step in progress shows in one snapshot only)."""
    async with _producer(ns) as q:
        found = await q.queue.audit()
        if found and ns.confirm_seconds > 0:
            await asyncio.sleep(ns.confirm_seconds)
            found = confirmed(found, await q.queue.audit())
    rows = [{"check": v.check.value, "member": item_ref(v.member)} for v in found]
    counts = {c.value: sum(1 for v in found if v.check is c) for c in AuditCheck}
    if ns.json:
        print(json.dumps({"queue": q.keys.queue, "violations": rows, "counts": counts}))
    elif rows:
        for r in rows:
            print(f"{r['check']:<24} {r['member']}")
    else:
        print(f"queue {q.keys.queue}: no violations ({', '.join(counts)} checked)")
    return EXIT_FAIL if rows else EXIT_OK


def cmd_dead_letters(ns: argparse.Namespace) -> int:
    return run_command(_dead_letters(ns))


async def _dead_letters(ns: argparse.Namespace) -> int:
    async with _producer(ns) as q:
        if ns.action == "purge":
            if not ns.yes:
                raise UsageError("purge deletes every dead letter: add --yes")
            purged = await q.purge_dead()
            print(json.dumps({"purged": purged}) if ns.json else f"purged {purged} dead letters")
            return EXIT_OK
        if ns.action == "keep-raw":
            return await _keep_raw(q.queue, ns)
        letters = await q.dead_letters(0, ns.limit if ns.action == "list" else 1_000_000)
        if ns.action == "list":
            for d in letters:
                excerpt = await q.queue.excerpt(d.fingerprint.sha256) if d.fingerprint else None
                _print_dead_letter(d, as_json=ns.json, max_bytes=q.max_task_bytes, excerpt=excerpt)
            return EXIT_OK
        return await _requeue(q, ns, letters)


def _print_dead_letter(d: DeadLetter, *, as_json: bool, max_bytes: int, excerpt: str | None) -> None:
    """One dead letter; the payload only as its redacted view or its fingerprint (entries of older versions are
    shown so here), and the excerpt a debugging window kept, while it lasts."""
    view, fp, legacy = d.view, d.fingerprint, d.legacy_body or d.legacy_raw
    if view is None and legacy:
        old = payload_view(legacy, log.redact, max_bytes=max_bytes)
        view, fp = old.text, old.fingerprint
    if as_json:
        data: dict[str, Any] = {"id": d.id, "code": d.code, "reason": d.reason, "attempts": d.attempts, "at": d.at,
                                "payload": view, "fingerprint": fp.to_json() if fp else None}
        if excerpt is not None:
            data["excerpt"] = excerpt
        print(json.dumps(data))
    else:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(d.at))}  {d.id or '-':<34} {d.code:<22} {d.reason}")


async def _keep_raw(q: RedisQueue, ns: argparse.Namespace) -> int:
    """The debugging window: open it for --for seconds, close it (--off: its excerpts deleted), or say how it
    stands."""
    deleted = None
    if ns.off:
        deleted = await q.close_raw_window()
    elif ns.seconds is not None:
        if not 1 <= ns.seconds <= KEEP_RAW_MAX_S:
            raise UsageError(f"--for must be 1-{KEEP_RAW_MAX_S} seconds")
        await q.open_raw_window(ns.seconds)
    left = await q.raw_window()
    if ns.json:
        print(json.dumps({"open": left is not None, "seconds_left": left, "excerpts_deleted": deleted}))
    elif left is not None:
        print(f"queue {q.keys.queue}: excerpts of payloads dead-lettered as fingerprints are kept for "
              f"{left:.0f} s more (each until the window ends)")
    else:
        print(f"queue {q.keys.queue}: no debugging window; dead letters keep fingerprints only"
              + (f" ({deleted} excerpts deleted)" if deleted is not None else ""))
    return EXIT_OK


async def _requeue(q: CaptchaQueue, ns: argparse.Namespace, letters: list[DeadLetter]) -> int:
    wanted = set(ns.ids)
    if not wanted and not ns.all:
        raise UsageError("requeue needs task ids or --all")
    chosen = [d for d in letters if ns.all or d.id in wanted]
    done, gone = 0, []
    for d in chosen:
        ok = await q.requeue_dead(d)
        if ok is None:
            gone.append(d.id or "-")
        done += bool(ok)
    if ns.json:
        print(json.dumps({"requeued": done, "not_requeueable": gone}))
    else:
        print(f"requeued {done} dead letters")
        if gone:
            print(f"not requeueable (task body expired, or the payload was never a task): {', '.join(gone)}")
    return EXIT_OK if done == len(chosen) and (ns.all or done == len(wanted)) else EXIT_FAIL


def cmd_plan(ns: argparse.Namespace) -> int:
    try:
        target = planner.parse_duration(ns.p95_wait)
        plans = planner.parse_plans(ns.plan) if ns.plan else planner.PLANS
        if ns.from_prometheus:
            workload = planner.from_prometheus(ns.from_prometheus, ns.matchers, ns.window)
        elif ns.rate and ns.mix:
            overhead = planner.parse_duration(ns.overhead) if ns.overhead else planner.OVERHEAD_S
            workload = planner.from_methods(planner.parse_rate(ns.rate), planner.parse_mix(ns.mix), overhead)
        else:
            raise UsageError("give --rate RATE --mix KIND=SHARE,... or --from-prometheus URL")
        rec = planner.recommend(workload, target, plans, ns.concurrency)
        overflow = _plan_overflow(ns, rec, plans)
    except OSError as exc:
        print(f"captcha-worker plan: Prometheus at {redact_url(ns.from_prometheus)} unreachable "
              f"({type(exc).__name__})", file=sys.stderr)
        return EXIT_FAIL
    except planner.PlanError as exc:
        print(f"captcha-worker plan: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(planner.as_dict(rec, overflow)) if ns.json else planner.report(rec, overflow))
    return EXIT_OK


def _plan_overflow(ns: argparse.Namespace, rec: planner.Recommendation,
                   plans: Sequence[planner.Plan]) -> planner.OverflowComparison | None:
    """`--overflow-price` (with `--peak-hours`, `--base`): the peak's plan against a smaller one + overflow."""
    if not ns.overflow_price:
        if ns.base or ns.peak_hours is not None:
            raise UsageError("--base and --peak-hours go with --overflow-price")
        return None
    hours = 24.0 if ns.peak_hours is None else ns.peak_hours
    if not 0 < hours <= 24:
        raise UsageError(f"--peak-hours must be more than 0 and at most 24, got {hours:g}")
    base = planner.parse_rate(ns.base) if ns.base else rec.workload.rate_per_s
    if base > rec.workload.rate_per_s:
        raise UsageError("--base is the load outside the peak: at most the peak's --rate")
    return planner.compare_overflow(rec, planner.parse_prices(ns.overflow_price), planner.Peak(hours, base), plans,
                                    ns.concurrency)


def cmd_demo(ns: argparse.Namespace) -> int:
    return demo.main(ns)


# -- parser -------------------------------------------------------------------------------------------------
def _add_producer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis-url", help="Redis URL (default: $REDIS_URL or redis://localhost:6379/0); the other "
                                       "Redis settings as for `run`: $REDIS_USERNAME, $REDIS_PASSWORD, "
                                       "$REDIS_TLS_CA_FILE, $REDIS_TLS_INSECURE")
    p.add_argument("--queue", help="queue name (default: $QUEUE_NAME or 'captcha')")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="captcha-worker", description=(
        "Queue-driven CaptchaAI solving: worker, producer commands, simulator and demo."))
    parser.add_argument("--version", action="version", version=f"captcha-worker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_service_commands(sub)
    _add_producer_commands(sub)
    _add_dead_letter_commands(sub)
    _add_demo_command(sub)
    _add_plan_command(sub)
    return parser


Subparsers = Any  # argparse's _SubParsersAction is private: no public name to type it with


def _add_service_commands(sub: Subparsers) -> None:
    p = sub.add_parser("run", help="run a worker (configured by environment variables, see docs/operations.md)",
                       description="Run a worker. Configuration comes from the environment: CAPTCHAAI_KEY, "
                                   "CAPTCHAAI_THREADS, REDIS_URL, WORKER_CONCURRENCY, ... (docs/contracts.md).")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("gateway", help="run the CaptchaAI-compatible gateway (in.php / res.php for tenants)",
                       description="Serve CaptchaAI's in.php and res.php in front of the queue, for the tenants of "
                                   "GATEWAY_TENANTS (JSON or a file path). Other settings from the environment: "
                                   "REDIS_URL and the Redis settings, QUEUE_NAME, GATEWAY_PORT, METRICS_PORT, ... "
                                   "(docs/gateway.md).")
    p.add_argument("--host", help="address to listen on (default $GATEWAY_HOST or 0.0.0.0)")
    p.add_argument("--port", type=int, help="port to listen on (default $GATEWAY_PORT or 8080)")
    p.add_argument("--check", action="store_true",
                   help="only read the configuration: print the queue and the tenants' names and shares, exit")
    p.set_defaults(func=cmd_gateway)

    p = sub.add_parser("simulator", help="run the CaptchaAI-compatible simulator",
                       description="A CaptchaAI v1 compatible server for demos, staging and load tests.")
    simulator.add_arguments(p)
    p.set_defaults(func=cmd_simulator)

    p = sub.add_parser("check", help="check Redis, the API key, plan threads and balance (exit 1 on failure)",
                       description="Reads the worker's environment (REDIS_URL, CAPTCHAAI_KEY, CAPTCHAAI_URL, "
                                   "CAPTCHAAI_THREADS, QUEUE_NAME). Exit 0 when every check passes, 1 otherwise.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("limit", help="enforce a thread limit for a while (lowering: at once), e.g. before a rollout",
                       description="Registers --threads as a limit of the queue's budget for --hold seconds (Redis "
                                   "server time), next to the limits the live workers enforce; the smallest one "
                                   "applies, so a lower limit takes effect at once (no solve starts while the units "
                                   "in use reach it) and a higher one changes nothing. The chart's pre-upgrade "
                                   "hook runs it. Reads the Redis settings and QUEUE_NAME as `run` does. Exit 0 "
                                   "registered, 1 Redis refused, 2 bad arguments.")
    p.add_argument("--threads", type=int, help="the limit (default $CAPTCHAAI_THREADS)")
    p.add_argument("--hold", type=float, required=True, metavar="SECONDS",
                   help="how long it holds: long enough for the rollout (new pods register their own limit)")
    p.add_argument("--holder", default="rollout", help="who holds it (default 'rollout'); a hold of the same "
                                                       "holder is replaced")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_limit)


def _add_producer_commands(sub: Subparsers) -> None:
    p = sub.add_parser("submit", help="submit tasks (flags, or JSON lines from a file or stdin)",
                       description="Submit one task (METHOD --param NAME=VALUE ...) or many (--file tasks.jsonl, "
                                   "one {\"method\": ..., \"params\": {...}} per line; - for stdin). Prints task "
                                   "ids, or with --wait the results as JSON lines.")
    p.add_argument("method", nargs="?", help="CaptchaAI method: userrecaptcha, turnstile, geetest, base64, ...")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE", help="a task parameter")
    p.add_argument("-f", "--file", help="JSON-lines file of tasks ('-' = stdin)")
    p.add_argument("--deadline", type=float, help="seconds from now after which the task is answered 'expired'")
    p.add_argument("--priority", action="store_true", help="put the task at the head of the queue")
    p.add_argument("--id", help="your own task id: submitting a known id again is a no-op (safe retries)")
    p.add_argument("--wait", action="store_true", help="wait and print results as JSON lines")
    p.add_argument("--timeout", type=float, default=300.0, help="with --wait: seconds to wait (default 300)")
    _add_producer_args(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("wait", help="wait for results of task ids, print them as JSON lines",
                       description="Exit 0 when every task was solved, 1 otherwise.")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (default 300)")
    _add_producer_args(p)
    p.set_defaults(func=cmd_wait)

    p = sub.add_parser("report", help="tell CaptchaAI whether a solved task's answer worked (reportbad/reportgood)",
                       description="Queue a report of a solved task's answer for a worker to send to CaptchaAI "
                                   "(a bad answer is refunded). Exit 0 when queued, 1 when the task has no answer "
                                   "to report.")
    p.add_argument("verdict", choices=["bad", "good"])
    p.add_argument("id", metavar="ID", help="the task id")
    _add_producer_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("stats", help="pending, processing, dead, budget in use, workers alive, spend vs the cap "
                                     "by provider and tenant (--watch: live)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--watch", action="store_true", help="a table that refreshes (Ctrl-C to stop)")
    p.add_argument("--interval", type=float, default=2.0, help="with --watch: seconds between refreshes (default 2)")
    p.add_argument("--count", type=int, help="with --watch: stop after this many refreshes")
    p.add_argument("--budget", type=int, help="with --watch: the thread budget (default $CAPTCHAAI_THREADS)")
    p.add_argument("--prometheus", metavar="URL", help="with --watch: also solves/s, outcomes, API errors by code")
    p.add_argument("--matchers", default="", help='with --prometheus: the release\'s label matchers, e.g. '
                                                  '\'namespace="captcha", job="solver-captcha-solver-worker"\'')
    _add_producer_args(p)
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("audit", help="check a live queue against docs/guarantees.md, naming every violation "
                                     "(exit 1 on any)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--confirm-seconds", type=float, default=1.0,
                   help="report only what a second audit this much later still shows (default 1; 0: one snapshot)")
    _add_producer_args(p)
    p.set_defaults(func=cmd_audit)


def _add_dead_letter_commands(sub: Subparsers) -> None:
    p = sub.add_parser("dead-letters", help="list, requeue or purge dead-lettered tasks")
    dl = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = dl.add_parser("list", help="newest first")
    q.add_argument("--limit", type=int, default=50)
    q.add_argument("--json", action="store_true", help="JSON lines")
    _add_producer_args(q)
    q = dl.add_parser("requeue", help="put dead letters back on the queue (attempts reset)")
    q.add_argument("ids", nargs="*", metavar="ID")
    q.add_argument("--all", action="store_true")
    q.add_argument("--json", action="store_true")
    _add_producer_args(q)
    q = dl.add_parser("keep-raw", help="a debugging window: while it is open, a payload dead-lettered as a "
                                       "fingerprint keeps a redacted excerpt too, until the window ends")
    how = q.add_mutually_exclusive_group()
    how.add_argument("--for", dest="seconds", type=int, metavar="SECONDS",
                     help=f"open (or move) the window to end SECONDS from now (at most {KEEP_RAW_MAX_S})")
    how.add_argument("--off", action="store_true", help="close it and delete the excerpts it kept")
    q.add_argument("--json", action="store_true")
    _add_producer_args(q)
    q = dl.add_parser("purge", help="delete every dead letter")
    q.add_argument("--yes", action="store_true", help="really delete")
    q.add_argument("--json", action="store_true")
    _add_producer_args(q)
    p.set_defaults(func=cmd_dead_letters)


def _add_demo_command(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="run everything locally: redis, simulator, workers, producer; print a summary",
                       description="Starts redis-server (or an embedded Redis when none is installed), the "
                                   "simulator and worker processes, submits tasks with a progress bar and prints "
                                   "a summary table.")
    p.add_argument("--tasks", type=int, default=200, help="tasks to submit (default 200)")
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    p.add_argument("--threads", type=int, default=20, help="plan threads of the simulated plan (default 20)")
    p.add_argument("--concurrency", type=int, default=8, help="solve slots per worker (default 8)")
    p.add_argument("--speed", type=float, default=20.0, help="simulated solve times divided by this (default 20)")
    p.add_argument("--unsolvable", type=float, default=0.02, help="simulated UNSOLVABLE rate (default 0.02)")
    p.add_argument("--pingback", action="store_true",
                   help="pingback mode: the simulator calls worker 0's receiver back, which wakes every worker's "
                        "solves through Redis; polls only as the fallback")
    p.set_defaults(func=cmd_demo)


def _add_plan_command(sub: Subparsers) -> None:
    p = sub.add_parser("plan", help="size a deployment: threads, plan, concurrency and values.yaml for a workload",
                       description="Erlang C (M/G/c) on the per-kind solve times: the threads a workload needs "
                                   "for a p95 queue wait, the cheapest plan, worker.concurrency, maxReplicaCount, "
                                   "utilisation, cost per 1 000 solves and a values.yaml (docs/operations.md).")
    p.add_argument("--rate", help="arrival rate, e.g. 20000/h, 5/s, 300/min")
    p.add_argument("--mix", help="kinds and their shares, e.g. turnstile=0.7,recaptcha_v2=0.3")
    p.add_argument("--from-prometheus", metavar="URL", help="read the rate, mix and solve times from Prometheus")
    p.add_argument("--matchers", default="", help='with --from-prometheus: label matchers of the release, e.g. '
                                                  '\'namespace="captcha", job="solver-captcha-solver-worker"\'')
    p.add_argument("--window", default="1h", help="with --from-prometheus: the range to average over (default 1h)")
    p.add_argument("--p95-wait", default="30s", help="target 95th percentile queue wait (default 30s)")
    p.add_argument("--overhead", help="with --rate: per-task thread time beyond solve and poll lag "
                                                      "(API round trips, writing the result; default 0.5s)")
    p.add_argument("--plan", action="append", default=[], metavar="NAME=THREADS:PRICE",
                   help="replace the plan table (repeatable; default STANDARD=15:30, ADVANCE=50:90, PREMIUM=100:170)")
    p.add_argument("--concurrency", type=int, help="worker.concurrency (default: derived from the threads)")
    p.add_argument("--overflow-price", action="append", default=[], metavar="[KIND=]PER_1000",
                   help="the providers' price of 1,000 solves (one for every kind, or per kind; repeatable): also "
                        "compare the plan for the peak with a smaller plan + overflow for what it cannot serve")
    p.add_argument("--peak-hours", type=float, help="with --overflow-price: hours a day at --rate (default 24)")
    p.add_argument("--base", help="with --overflow-price: the rate the rest of the day (default --rate)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_plan)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = ns.func
    try:
        return func(ns)
    except UsageError as exc:
        return _die(f"captcha-worker {ns.command}", str(exc))
    except ConnectionError as exc:  # QueueUnavailable: message is already redacted
        print(f"captcha-worker {ns.command}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
