"""Redis refusing to serve for a while — out of memory, read-only (a replica), busy with a script — while tasks
flow: workers back off, readiness is false while it lasts, one log line per change of state, the refusals are
counted by reason, nothing crashes, nothing is lost, producers get a typed error."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis as sync_redis
from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, QueueUnavailable
from captcha_worker.queue import RedisQueue, as_awaitable
from tests.helpers import TURNSTILE, refused_port, task_body, wait_until
from tests.procs import RedisServer, WorkerProc, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, replies, worker_env

Outage = Callable[[Redis, RedisServer], Awaitable[Callable[[], Awaitable[None]]]]


async def _oom(admin: Redis, rs: RedisServer) -> Callable[[], Awaitable[None]]:
    await admin.config_set("maxmemory-policy", "noeviction")
    await admin.config_set("maxmemory", "1")

    async def end() -> None:
        await admin.config_set("maxmemory", "0")

    return end


async def _readonly(admin: Redis, rs: RedisServer) -> Callable[[], Awaitable[None]]:
    """A failover seen from a worker: its Redis became a replica (of a master that is not there: a port held
    refusing until the end)."""
    held = ExitStack()
    await admin.execute_command("REPLICAOF", "127.0.0.1", str(held.enter_context(refused_port())))

    async def end() -> None:
        await admin.execute_command("REPLICAOF", "NO", "ONE")
        held.close()

    return end


async def _busy(admin: Redis, rs: RedisServer) -> Callable[[], Awaitable[None]]:
    """Somebody's script that never ends: after busy-reply-threshold every other command gets BUSY."""
    await admin.config_set("busy-reply-threshold", "100")
    hog = sync_redis.Redis(port=rs.port, socket_timeout=60)

    def run() -> None:
        try:
            hog.eval("while true do end", 0)
        except sync_redis.exceptions.ResponseError:
            pass  # SCRIPT KILL ends it
        finally:
            hog.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    async def end() -> None:
        killer = sync_redis.Redis(port=rs.port)
        try:
            killer.script_kill()
        finally:
            killer.close()
        thread.join(10)

    return end


@pytest.mark.parametrize(("name", "outage", "reason", "seconds"), [
    ("redis-oom-15s", _oom, "oom", 15.0),
    ("redis-readonly-5s", _readonly, "readonly", 5.0),
    ("redis-busy-script-5s", _busy, "busy", 5.0),
])
async def test_redis_refusal_is_an_outage_not_a_crash(rs: RedisServer, admin: Redis, tmp_path: Path, name: str,
                                                      outage: Outage, reason: str, seconds: float) -> None:
    n, reply = 150, f"chaos-{reason}"
    with simulator(tmp_path, "--threads", "50", "--speed", SPEED, "--seed", "8") as sim:
        env = worker_env(rs.url, sim.url)
        await RedisQueue(admin, "captcha").push([(f"r{i}", task_body(f"r{i}", reply)) for i in range(n)], ttl=3600)
        with workers(2, env, tmp_path) as procs:
            await wait_until(lambda: _ready(procs), 20, "workers ready")
            await wait_until(lambda: _at_least(admin.llen(KEYS.reply(reply)), 20), 60, "some progress")
            end = await outage(admin, rs)
            try:
                await wait_until(lambda: _unready(procs[0], reason), 10, f"readiness false ({reason})")
                typed = await _producer_error(rs.url)
                await asyncio.sleep(seconds)
            finally:
                await end()
            await wait_until(lambda: _ready(procs), 20, "readiness back")
            await wait_until(lambda: _at_least(admin.llen(KEYS.reply(reply)), n), 90, "every task answered")
            per_id = await replies(admin, reply)
            counted = sum(p.metric("captcha_solver_redis_errors_total", reason=reason) for p in procs)
            lines = [len(p.events("redis_unavailable")) for p in procs]
            alive = all(p.alive() for p in procs)
        stats = sim.stats()
    twice = sum(c > 1 for c in per_id.values())
    Row(name, n, len(per_id), await admin.llen(KEYS.dead), n - len(per_id), twice, stats["max_in_flight"], 20,
        {"refusal": reason, "redis_errors_counted": counted, "redis_unavailable_lines_per_worker": lines,
         "loop_crashes": crashes(procs), "producer_error": typed}).record()
    assert crashes(procs) == 0 and alive, "a refusing Redis is an outage, never a crash loop"
    assert len(per_id) == n and twice == 0
    assert counted > 0, f"captcha_solver_redis_errors_total{{reason={reason!r}}} counts the refusals"
    assert all(1 <= k <= 2 for k in lines), f"one log line per change of state, not per attempt: {lines}"
    for p in procs:
        down = p.events("redis_unavailable")[0]
        assert down["reason"] == reason and p.events("redis_reconnected")
    assert typed.startswith(f"{reason}: Redis at "), typed


async def _producer_error(url: str) -> str:
    """A producer submitting during the outage gets QueueUnavailable with the reason (after a short retry); a
    BUSY server refuses even the PING of `async with`."""
    q = CaptchaQueue.from_url(url, submit_retry_s=0.5)
    try:
        async with q:
            await q.submit("turnstile", TURNSTILE, id="during-outage")
    except QueueUnavailable as exc:
        assert exc.task_ids in ([], ["during-outage"])
        return f"{exc.refusal.value}: {exc}"
    return "no error"


async def _ready(procs: list[WorkerProc]) -> bool:
    return all([(await asyncio.to_thread(p.http, "/readyz"))[0] == 200 for p in procs])


async def _unready(p: WorkerProc, reason: str) -> bool:
    status, text = await asyncio.to_thread(p.http, "/readyz")
    return status == 503 and text.strip() == f"redis unavailable: {reason}"


async def _at_least(aw: Awaitable[int] | int, value: int) -> bool:
    return await as_awaitable(aw) >= value

