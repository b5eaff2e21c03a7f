"""A paid solve at a per-solve provider under the spend cap (issue 27): reserve the price in Redis
(:mod:`captcha_worker.spend`), solve, settle. A ``res.php`` provider (2captcha, rucaptcha) is solved with the
CaptchaAI v1 client (:class:`captcha_worker.captchaai.CaptchaAI`) pointed at its URL with its key; a ``createTask``
one (Anti-Captcha, CapSolver, CapMonster Cloud) with the JSON-API client (:class:`captcha_worker.createtask.JsonApi`).
Both are a :class:`PaidApi`: the same reservation, the same settlement, the same errors.

Every submission is its own reservation (``<provider>:<task id>:<round>``): an UNSOLVABLE answer that is resubmitted
is a second charge. What a round is settled at:

=============================================  ===========================================================
outcome                                        settled at
=============================================  ===========================================================
an answer                                      the price
ERROR_CAPTCHA_UNSOLVABLE                       0 when the provider refunds it (``refund_unsolvable``), else the price
a lost submission reply (``MaybeCharged``)     the price: the provider may have created and charged it
any other error before an id (in.php's,        0 (nothing was submitted, nothing charged)
createTask's taskId)
any other error after an id                    left to expire: charged at the price (the provider may have)
=============================================  ===========================================================

``refund_unsolvable`` defaults by protocol (config.py): true for ``res.php`` (2captcha refunds UNSOLVABLE), false
for ``createTask`` (Anti-Captcha charges it; CapSolver and CapMonster Cloud do not say: counted as spent). A
submission whose request went out without a readable reply (a timeout, a reset, HTTP 5xx, a body that is not the
protocol, a success without a usable id) is never resent by the client (``CaptchaAI(paid=True)``, ``JsonApi``):
``MaybeCharged``.

A reservation the cap refuses raises :class:`OverCap` before anything is sent to the provider. A task whose
reservation ids at the provider are all taken (``_MAX_IDS`` earlier submissions of it, each possibly charged: a task
retried or resumed that often) raises :class:`RoundsUsed` (``MAX_ATTEMPTS_EXCEEDED``): the job dead-letters it
with that reason, never "spend cap reached", which it is not. The worker's job
(``job.JobRunner._solve_paid``) routes tasks here (docs/operations.md "Cost and overflow"). A provider whose key is
a file (``key_file``, a mounted Secret) has its key re-read while running (:func:`key_watchers`); the worker's
:class:`ProviderPool` holds the clients, the key watchers and the operator's view (balance, spend windows, cap).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from redis.exceptions import RedisError

from captcha_worker import log, methods, metrics
from captcha_worker.captchaai import (
    ApiError,
    CaptchaAI,
    MaybeCharged,
    OnSubmit,
    RetryPolicy,
    Solution,
    SolveStats,
    TaskFailed,
)
from captcha_worker.codes import Code
from captcha_worker.config import ProviderConfig, ProvidersConfig, Secret, WorkerConfig, read_provider_key_file
from captcha_worker.connection import Client
from captcha_worker.createtask import JsonApi
from captcha_worker.keyfile import KeyFileWatcher, watch_key_file
from captcha_worker.log import event
from captcha_worker.protocols.jsonapi_tasks import has_type
from captcha_worker.spend import MICRO, Cap, Reservation, Spend

#: rounds tried under new reservation ids when an id is already taken (a retried or resumed task)
_MAX_IDS = 8
#: a reservation outlives its solve's window by this much before it expires into a charge
_EXPIRY_MARGIN_S = 60.0
#: how often a worker reads the spend windows into `spend{window}` (one read-only script)
SPEND_POLL_SECONDS = 15.0

_log = logging.getLogger("captcha_worker.overflow")


class OverCap(Exception):
    """The spend cap has no room for this solve (this hour's or this day's window)."""

    def __init__(self, reservation: Reservation) -> None:
        super().__init__(f"spend cap reached ({reservation.outcome})")
        self.reservation = reservation


class RoundsUsed(Exception):
    """Every reservation id of the task at the provider is taken: that many submissions of it were made there
    (each one possibly charged), no further one is. Not the cap: the job dead-letters the task with this code."""

    code = Code.MAX_ATTEMPTS_EXCEEDED

    def __init__(self, provider: str, used: int) -> None:
        super().__init__(f"{provider}: {used} paid submissions of this task reserved already; none more is made")
        self.provider, self.used = provider, used


class PaidApi(Protocol):
    """What a paid solve needs of a provider's client (CaptchaAI's v1 client, the JSON-API client)."""

    poll_scale: float

    def solve_window(self, kind: methods.Kind) -> float: ...

    async def solve(self, kind: methods.Kind, method: str, params: Mapping[str, str], *, deadline: float,
                    unsolvable_retries: int = ..., stats: SolveStats | None = ...,
                    on_submit: OnSubmit | None = ...) -> Solution: ...

    async def getbalance(self) -> float: ...

    def set_key(self, key: Secret) -> None: ...


@dataclass(frozen=True)
class PaidSolution:
    solution: Solution
    provider: str
    cost_micro: int  # what this task was charged in all (every round)


class Overflow:
    """Paid solves at the configured providers; `clients` maps a provider's name to its open client."""

    def __init__(self, spend: Spend, config: ProvidersConfig, clients: Mapping[str, PaidApi]) -> None:
        self.spend, self.config, self.clients = spend, config, clients
        self.cap = Cap(hour=config.cap_hour_micro, day=config.cap_day_micro)

    def provider_for(self, kind: str) -> ProviderConfig | None:
        """The first provider (in the configured order) with an open client that takes `kind`, or None (a
        ``createTask`` provider takes only the kinds its ``dialect`` has a task type for)."""
        return next((p for p in self.config.providers if kind in p.kinds and p.name in self.clients
                     and (p.protocol != "createTask" or has_type(p.dialect, kind))), None)

    async def solve(self, task_id: str, provider: ProviderConfig, kind: methods.Kind, method: str,
                    params: Mapping[str, str], *, deadline: float, unsolvable_retries: int = 1,
                    tenant: str = "", on_submit: OnSubmit | None = None) -> PaidSolution:
        """Reserve, solve at `provider`, settle, per round; raises OverCap, RoundsUsed, or what CaptchaAI.solve raises
        (`on_submit`: told each id the provider gave, as the client's on_submit). The
        ledger's label is ``<provider>|<kind>``, with the task's tenant ``<provider>|<kind>|<tenant>``."""
        api, price = self.clients[provider.name], provider.price_micro(kind.name)
        ttl_s = api.solve_window(kind) + _EXPIRY_MARGIN_S / api.poll_scale  # (API_TIME_SCALE, like the window)
        label = ledger_label(provider.name, kind.name, tenant)
        total, rounds, n = 0, unsolvable_retries + 1, 0
        for round_ in range(rounds):
            rid, n = await self._reserve(provider, task_id, n, price=price, ttl_s=ttl_s, label=label)
            stats = SolveStats()
            submitted: list[str] = []
            note: OnSubmit = _recorder(submitted, on_submit)
            try:
                solution = await api.solve(kind, method, params, deadline=deadline, unsolvable_retries=0,
                                           stats=stats, on_submit=note)
            except TaskFailed as exc:
                if exc.code == Code.ERROR_CAPTCHA_UNSOLVABLE:
                    total += await self._settle(rid, 0 if provider.refund_unsolvable else price, label)
                    if round_ < rounds - 1:
                        continue
                elif not submitted:
                    await self._settle(rid, 0, label)
                raise
            except MaybeCharged:
                await self._settle(rid, price, label)  # the provider may have created it: spent, not refunded
                raise
            except Exception:
                if not submitted:
                    await self._settle(rid, 0, label)
                raise  # submitted: the reservation expires into a charge at the price
            total += await self._settle(rid, price, label)
            return PaidSolution(solution, provider.name, total)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _reserve(self, provider: ProviderConfig, task_id: str, n: int, *, price: int, ttl_s: float,
                       label: str) -> tuple[str, int]:
        """A fresh reservation id's reservation (an id already used by an earlier owner is skipped: its solve
        may have been charged); returns (id, the next id number). RoundsUsed when the ids up to `n` + _MAX_IDS
        are all taken."""
        for i in range(n, n + _MAX_IDS):
            rid = f"{provider.name}:{task_id}:{i}"
            r = await self.spend.reserve(rid, price, cap=self.cap, ttl_s=ttl_s, label=label)
            if r.outcome == "reserved":
                return rid, i + 1
            if r.outcome in ("over_hour", "over_day"):
                raise OverCap(r)
        raise RoundsUsed(provider.name, n + _MAX_IDS)

    async def _settle(self, rid: str, cost: int, label: str) -> int:
        settled = await self.spend.settle(rid, cost)
        if settled.outcome in ("settled", "corrected"):
            provider, kind, tenant = parse_label(label)
            metrics.COST.labels(provider, kind, tenant).inc(settled.charged / MICRO)
        return settled.charged


def ledger_label(provider: str, kind: str, tenant: str = "") -> str:
    """The spend ledger's label of a solve (names hold no '|': provider names, kind names, tenant names)."""
    return f"{provider}|{kind}|{tenant}" if tenant else f"{provider}|{kind}"


def parse_label(label: str) -> tuple[str, str, str]:
    """(provider, kind, tenant) of a ledger label ("" for a task without a tenant)."""
    parts = label.split("|", 2)
    return parts[0], parts[1] if len(parts) > 1 else "", parts[2] if len(parts) > 2 else ""


def _recorder(ids: list[str], then: OnSubmit | None = None) -> OnSubmit:
    """An on_submit that records the ids in.php gave (a round with none submitted nothing to be charged for), and
    tells `then`."""
    def note(captcha_id: str, window_s: float) -> None:
        ids.append(captcha_id)
        if then is not None:
            then(captcha_id, window_s)
    return note


def key_watchers(config: ProvidersConfig, clients: Mapping[str, PaidApi]) -> list[KeyFileWatcher]:
    """One watcher per provider whose key is a file: `check()` (every KEY_RELOAD_SECONDS, keyfile.watch_key_file)
    hands a rotated key to the provider's client for its next request, one ``api_key_reloaded`` line (holder
    ``provider <name>``, never the key); a malformed file keeps the key in use (``api_key_file_invalid``)."""
    return [KeyFileWatcher(p.key_file, p.key.value, clients[p.name].set_key, holder=f"provider {p.name}",
                           read=partial(read_provider_key_file, at=f"PROVIDERS.providers[{i}] ({p.name})"))
            for i, p in enumerate(config.providers) if p.key_file and p.name in clients]


class ProviderPool:
    """The worker's side of PROVIDERS that routing builds on: an open client per provider (the clients
    :class:`Overflow` solves with: :class:`CaptchaAI` for ``res.php``, :class:`JsonApi` for ``createTask``), their
    key files re-read every KEY_RELOAD_SECONDS (:func:`key_watchers`), and the operator's view: each provider's
    balance (``getbalance`` / ``getBalance``, every THREADSINFO_INTERVAL_SECONDS) as ``provider_balance``, the
    spend windows and the cap (``spend`` / ``spend_cap``, every SPEND_POLL_SECONDS)."""

    def __init__(self, cfg: WorkerConfig, redis: Client) -> None:
        assert cfg.providers is not None
        self.cfg, self.config, self.redis = cfg, cfg.providers, redis
        self.spend = Spend(redis, cfg.queue)
        self.clients: dict[str, PaidApi] = {}
        self.overflow = Overflow(self.spend, self.config, self.clients)  # the routing's solves (the same clients)
        self._stack = AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._balance_problem: dict[str, str] = {}  # provider -> the code last logged (a lasting one logged once)

    async def __aenter__(self) -> ProviderPool:
        cfg = self.cfg
        for p in self.config.providers:
            log.add_secret(p.key.value)
            self.clients[p.name] = await self._stack.enter_async_context(self._client(p))
            lacking = [k for k in p.kinds if p.protocol == "createTask" and not has_type(p.dialect, k)]
            if lacking:  # listed, but the provider's spelling has no type for them: never routed there
                event(_log, "provider_kinds_not_routed", logging.WARNING, provider=p.name, dialect=p.dialect,
                      kinds=lacking)
        metrics.SPEND_CAP.labels("hour").set(self.config.cap_hour_micro / MICRO)
        metrics.SPEND_CAP.labels("day").set(self.config.cap_day_micro / MICRO)
        await self.poll_spend()  # read before any balance: a scrape never shows a provider's balance beside spend 0
        self._tasks = [asyncio.create_task(watch_key_file(w, cfg.key_reload_seconds))
                       for w in key_watchers(self.config, self.clients)]
        self._tasks += [asyncio.create_task(self._every(cfg.threadsinfo_interval_seconds, self.poll_balances)),
                        asyncio.create_task(self._every(SPEND_POLL_SECONDS, self.poll_spend, first_after=True))]
        return self

    def _client(self, p: ProviderConfig) -> CaptchaAI | JsonApi:
        """The client of `p`'s protocol (API_TIME_SCALE scales its delays as CaptchaAI's); a res.php one is the
        CaptchaAI client in its paid mode (an in.php that may have been charged is never resent)."""
        cfg = self.cfg
        retry, scale = RetryPolicy.scaled(cfg.time_scale), cfg.time_scale
        if p.protocol == "createTask":
            return JsonApi(p.key, p.url, http_timeout_s=cfg.http_timeout_seconds,
                           poll_timeout_s=cfg.http_poll_timeout_seconds, retry=retry, poll_scale=scale,
                           max_connections=p.concurrency, dialect=p.dialect, provider=p.name)
        return CaptchaAI(p.key, p.url, http_timeout_s=cfg.http_timeout_seconds,
                         poll_timeout_s=cfg.http_poll_timeout_seconds, retry=retry, poll_scale=scale,
                         max_connections=p.concurrency, paid=True, provider=p.name)

    async def __aexit__(self, *exc: object) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with suppress(asyncio.CancelledError):
                await t
        await self._stack.aclose()

    async def poll_balances(self) -> None:
        """Each client's getbalance into provider_balance; a refusal is logged once per provider and code (the
        gauge keeps its last reading: a balance alert must not clear because the provider stopped answering)."""
        for name, api in self.clients.items():
            try:
                metrics.PROVIDER_BALANCE.labels(name).set(await api.getbalance())
            except ApiError as exc:
                if self._balance_problem.get(name) != exc.code:
                    self._balance_problem[name] = exc.code
                    event(_log, "provider_balance_failed", logging.WARNING, provider=name, code=exc.code)
            else:
                self._balance_problem.pop(name, None)

    async def poll_spend(self) -> None:
        """This hour's and this day's window (charged + reserved) into spend{window}; Redis down: the last value."""
        try:
            state = await self.spend.state()
        except (RedisError, OSError) as exc:
            event(_log, "spend_poll_failed", logging.WARNING, error=type(exc).__name__)
            return
        metrics.SPEND.labels("hour").set(state.hour / MICRO)
        metrics.SPEND.labels("day").set(state.day / MICRO)

    @staticmethod
    async def _every(interval_s: float, poll: Callable[[], Awaitable[None]], first_after: bool = False) -> None:
        if first_after:
            await asyncio.sleep(interval_s)
        while True:
            await poll()
            await asyncio.sleep(interval_s)
