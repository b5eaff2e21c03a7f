"""What the gateway does when tasks end, and what it reads of the tasks in flight.

Every task the gateway queues names ``reply_to = "gateway"``, so its result is pushed onto ``{q}:reply:gateway``
once, by the worker whose result won. All replicas block on that list; each result reaches exactly one of them,
which counts the tenant's outcome, queue wait, solve time and thread-seconds, and calls the task's pingback URL
(taken from ``{q}:callback:<id>`` with GETDEL, so only that replica has it). A result that finds no replica
running within the reply list's TTL (5 min) is still answered to polling clients from the result store; only its
metrics and its callback are lost (docs/gateway.md).

The scan loop publishes, every :data:`SCAN_EVERY_S`, the tenants' shares for the workers' claims to enforce
(``RedisQueue.publish_shares``, ``shares``: also after Redis lost its data) and reads back each tenant's solves in
flight and its waiting tasks: ``threadsinfo``'s working threads and the ``tenant_in_flight`` / ``tenant_waiting``
gauges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import suppress

from captcha_worker import codes, log
from captcha_worker.connection import refusal
from captcha_worker.gateway import ids, jsonapi
from captcha_worker.gateway import metrics as gm
from captcha_worker.gateway.app import REPLY_TO, Gateway
from captcha_worker.gateway.callbacks import JSON, Call, Callbacks, parse_stored
from captcha_worker.gateway.config import Tenant
from captcha_worker.guard import NO_SPREAD, Backoff
from captcha_worker.queue import TenantShare, as_awaitable
from captcha_worker.task import Result, Status

_log = logging.getLogger("captcha_worker.gateway")
BATCH = 100
SCAN_EVERY_S = 2.0
WAIT_S = 0.25  # a BLPOP's timeout: how long a stopping replica may take to notice


class ResultReader:
    def __init__(self, gateway: Gateway, callbacks: Callbacks) -> None:
        self.gateway = gateway
        self.callbacks = callbacks
        self.redis = gateway.queue.redis
        self.key = gateway.queue.keys.reply(REPLY_TO)

    async def run(self, closing: asyncio.Event) -> None:
        backoff = Backoff(0.05, 2.0, spread=NO_SPREAD)
        while not closing.is_set():
            try:
                first = await as_awaitable(self.redis.blpop([self.key], timeout=WAIT_S))
                more = await as_awaitable(self.redis.lpop(self.key, BATCH - 1)) if first else None
                values = [first[1], *(more if isinstance(more, list) else [])] if first else []
                if values:
                    await self.handle(values)
                self.gateway.health.ok("read_results")
                backoff.reset()
            except Exception as exc:  # an outage, or a value that is not text: back off, never die
                why = refusal(exc)
                if why is not None:
                    self.gateway.health.failed(why, "read_results")
                else:
                    log.event(_log, "result_unreadable", logging.WARNING, error=type(exc).__name__)
                await backoff.sleep()

    async def handle(self, values: Sequence[str]) -> None:
        ended: list[tuple[Tenant, Result]] = []
        for value in values:
            try:
                result = Result.from_json(value)
            except (ValueError, KeyError, TypeError):
                continue
            tenant = self.gateway.tenants.by_name.get(ids.tenant_of(result.id) or "")
            if tenant is not None:
                count(tenant.name, result)
                ended.append((tenant, result))
            waiting = self.gateway.waiters.get(result.id)
            if waiting is not None:
                waiting.set()
        await self._callbacks([(t, r) for t, r in ended if t.pingback is not None])

    async def _callbacks(self, ended: Sequence[tuple[Tenant, Result]]) -> None:
        if not ended:
            return
        keys = self.gateway.queue.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, result in ended:
                pipe.getdel(keys.callback(result.id))
            urls = await pipe.execute()
        for (tenant, result), value in zip(ended, urls, strict=True):
            if not value:
                continue
            protocol, url = parse_stored(str(value))
            if protocol == JSON:
                self.callbacks.send(Call(tenant, url, {}, jsonapi.callback_body(result)))
            else:
                self.callbacks.send(Call(tenant, url, query(result)))


def count(tenant: str, result: Result) -> None:
    gm.TASKS.labels(tenant, result.status.value).inc()
    t = result.timings
    if t.queued is not None:
        gm.QUEUE_WAIT.labels(tenant).observe(t.queued)
    if result.status is Status.SOLVED and t.solving is not None:
        gm.SOLVE_DURATION.labels(tenant).observe(t.solving)
    if t.claimed_at is not None and t.finished_at is not None:
        gm.THREAD_SECONDS.labels(tenant).inc(max(0.0, t.finished_at - t.claimed_at))


def query(result: Result) -> dict[str, str]:
    """The pingback's parameters: the number the client knows, the answer (or the code a client would read)."""
    out = {"id": ids.number_of(result.id)}
    if result.status is Status.SOLVED:
        out["code"] = result.solution or ""
        if result.user_agent:
            out["user_agent"] = result.user_agent
    else:
        out["code"] = codes.wire_code(result.code or "")
    return out


async def share_loop(gateway: Gateway, closing: asyncio.Event, every_s: float = SCAN_EVERY_S) -> None:
    """Every `every_s`: publish the tenants' shares (SHARES) and read back each tenant's load (module docstring)."""
    table = [TenantShare(t.name, t.threads, t.reserved) for t in gateway.tenants.all]
    while not closing.is_set():
        try:
            loads = await gateway.queue.publish_shares(table)
            gateway.health.ok("share_loop")
        except Exception as exc:
            why = refusal(exc)
            if why is None:
                raise
            gateway.health.failed(why, "share_loop")
        else:
            gateway.in_flight = {name: load.in_flight for name, load in loads.items()}
            for name, load in loads.items():
                gm.IN_FLIGHT.labels(name).set(load.in_flight)
                gm.WAITING.labels(name).set(load.waiting)
        with suppress(TimeoutError):
            await asyncio.wait_for(closing.wait(), every_s)
