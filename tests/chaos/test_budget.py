"""The plan is never over-committed, and a solve survives its worker (issue 12), with real processes: workers drained
past their grace, a rollout of 10 -> 20 -> 10 threads with old and new workers side by side, a worker stalled past
its lease, and a payload that kills every worker that takes it.

The simulator counts in-flight solves exactly. Where the plan must not be exceeded, it is set to the plan's threads
with ``over_cap=queue``: a submission that finds every thread busy is queued there and counted (``queued``), so
"no submission found the plan full" is exact, while solves already in flight when a limit is lowered just finish.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from captcha_worker.queue import RedisQueue
from captcha_worker.task import Result
from tests.helpers import task_body, wait_until
from tests.procs import RedisServer, SimProc, WorkerProc, simulator, workers

from .conftest import KEYS, SPEED, Row, crashes, replies, worker_env


async def _push(admin: Redis, ids: list[str], reply: str, method_params: dict[str, Any] | None = None) -> None:
    await RedisQueue(admin, "captcha").push([(i, task_body(i, reply, method_params)) for i in ids], ttl=3600)


async def _recorded(admin: Redis, ids: list[str], n: int) -> bool:
    """At least `n` of the tasks carry the captcha id their in.php answered (RECORD)."""
    return sum([bool(await admin.hexists(KEYS.task(i), "captcha_id")) for i in ids]) >= n


async def _answered(admin: Redis, reply: str, n: int) -> bool:
    return bool(await admin.llen(KEYS.reply(reply)) >= n)


async def test_drain_past_the_grace_leaves_solves_running_and_the_next_worker_resumes_them(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    """The first report: budget 5, 20 s solves, SIGTERM with a 5 s grace: the 5 requeued tasks were submitted again
    by another worker while the first 5 still ran at the API (10 in flight, 10 in.php for 5 tasks). Here (time
    scaled by 10) the requeued tasks keep their units and captcha ids, the other worker resumes them.

    Both workers are up and registered before the tasks come, and the one drained is the one whose solves run (its
    pid in the tasks' owner): starting the second worker while the first one's solves ran took longer than a solve
    at load 20, and the first had nothing left to drain (the old order failed so)."""
    n, reply = 10, "drain"
    with simulator(tmp_path, "--threads", "50", "--speed", "10", "--latency", "turnstile=40:0") as sim:  # 4 s
        env = worker_env(rs.url, sim.url, CAPTCHAAI_THREADS="5", WORKER_CONCURRENCY="5", API_TIME_SCALE="10",
                         DRAIN_GRACE_SECONDS="0.5")
        ids = [f"g{i}" for i in range(n)]
        with workers(2, env, tmp_path) as procs:
            await wait_until(lambda: _registered(admin, 2), 60, "both workers registered")
            await _push(admin, ids, reply)
            await wait_until(lambda: _in_flight(sim, 5), 20, "5 solves at the API")
            owners = [await admin.hget(KEYS.task(i), "owner") for i in ids]
            by_pid = {p.proc.pid: sum(1 for o in owners if o and f"-{p.proc.pid}-" in o) for p in procs if p.proc}
            first = max(procs, key=lambda p: by_pid.get(p.proc.pid if p.proc else 0, 0))
            solving = by_pid[first.proc.pid if first.proc else 0]
            second = next(p for p in procs if p is not first)
            first.signal(signal.SIGTERM)
            code = await asyncio.to_thread(first.wait, 30)
            held = await admin.zcard(KEYS.budget)
            await wait_until(lambda: _answered(admin, reply, n), 60, "every task answered")
            per_id = await replies(admin, reply)
            stats = sim.stats()
            resumed = second.metric("captcha_solver_resumed_solves_total", outcome="answered")
    twice = sum(c > 1 for c in per_id.values())
    Row("drain-past-grace", n, len(per_id), await admin.llen(KEYS.dead), n - len(per_id), twice,
        stats["max_in_flight"], 5, {"in_php_submissions": stats["submitted"], "drained_worker_solving": solving,
                                    "units_held_after_exit": held, "resumed_by_the_next_worker": resumed,
                                    "exit_code": code, "drain_grace_s_at_speed_1": 5}).record()
    assert solving >= 1, "the drained worker had solves running"
    assert code == 0 and first.events("drain_grace_exceeded")
    assert held >= solving, "the drained worker's solves still run at the API: their units stay counted"
    assert len(per_id) == n and twice == 0
    assert stats["max_in_flight"] <= 5, "API peak <= budget"
    assert stats["submitted"] == n, "in.php submissions = tasks: the requeued solves were resumed"
    assert resumed == solving


async def test_a_rollout_10_20_10_never_exceeds_the_lower_limit(rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    """helm upgrade --set captchaai.threads=20, then back to 10, during a backlog, old and new workers side by side.
    The first report: 20 in flight while old pods at 10 still ran; 20 in flight after the downgrade until the old
    pods finished draining. Here the limit is in Redis: the smallest a live worker enforces. Up: the simulator's
    plan is uncapped, so its peak is the workers' own. Down: from the moment the new workers registered, the
    simulator's plan is 10 and counts every submission that finds it full (the 20 in flight at the change finish)."""
    n, reply = 900, "rollout"
    started: list[WorkerProc] = []
    with simulator(tmp_path, "--threads", "100", "--speed", SPEED, "--seed", "12") as sim:
        env = worker_env(rs.url, sim.url, WORKER_CONCURRENCY="10", DRAIN_GRACE_SECONDS="10")
        await _push(admin, [f"r{i:04d}" for i in range(n)], reply)
        phases: dict[str, dict[str, Any]] = {}
        try:
            old = _start(started, 2, "ten", {**env, "CAPTCHAAI_THREADS": "10"}, tmp_path)
            await wait_until(lambda: _answered(admin, reply, 50), 60, "the backlog at full speed")
            new = await _roll(Step("up", admin, sim, phases, cap=None), old,
                              _start(started, 2, "twenty", {**env, "CAPTCHAAI_THREADS": "20"}, tmp_path))
            phases["at 20"] = await _observe(sim, 2.0)
            await _roll(Step("down", admin, sim, phases, cap=10), new,
                        _start(started, 2, "ten-again", {**env, "CAPTCHAAI_THREADS": "10"}, tmp_path))
            phases["at 10 again"] = await _observe(sim, 2.0)
            await wait_until(lambda: _answered(admin, reply, n), 180, "every task answered")
            per_id = await replies(admin, reply)
        finally:
            for p in started:
                if p.alive():
                    p.signal(signal.SIGKILL)
                    p.wait(10)
    twice = sum(c > 1 for c in per_id.values())
    Row("rollout-mixed-limits", n, len(per_id), await admin.llen(KEYS.dead), n - len(per_id), twice,
        max(phases["up"]["max_in_flight"], phases["down"]["max_in_flight"]), 10,
        {"phases": phases, "loop_crashes": crashes(started)}).record()
    assert len(per_id) == n and twice == 0 and await admin.llen(KEYS.dead) == 0
    assert phases["up"]["max_in_flight"] <= 10, "old workers at 10 still run: 10 is the limit"
    assert phases["at 20"]["max_in_flight"] > 10, "once the old workers are gone, the raise takes effect"
    assert phases["down"]["queued"] == 0, "no solve started while the new, lower limit was reached"
    assert phases["down"]["max_in_flight"] <= 10, "once the solves in flight at the change finished: the lower limit"
    assert phases["at 10 again"]["max_in_flight"] <= 10


@dataclass
class Step:
    name: str
    admin: Redis
    sim: SimProc
    phases: dict[str, dict[str, Any]]
    cap: int | None  # the simulator's plan from the moment the new workers registered (None: uncapped)


def _start(started: list[WorkerProc], n: int, name: str, env: dict[str, str], tmp_path: Path) -> list[WorkerProc]:
    procs = [WorkerProc(f"{name}{i}", env, tmp_path) for i in range(n)]
    for p in procs:
        p.start()
    started.extend(procs)
    return procs


async def _roll(step: Step, old: list[WorkerProc], new: list[WorkerProc]) -> list[WorkerProc]:
    """One rollout step as a Deployment does it: the new workers start, then the old ones get SIGTERM and drain."""
    sim = step.sim
    old_limits = set(await _limits(step.admin))
    before = int(sim.stats()["in_flight"])  # the new workers were started just now
    await wait_until(lambda: _registered(step.admin, len(old) + len(new)), 30, f"{step.name}: new workers registered")
    in_flight = int(sim.stats()["in_flight"])
    if step.cap is not None:
        sim.configure(threads=step.cap)
    sim.reset()
    t0 = time.monotonic()
    limit = step.cap if step.cap is not None else in_flight
    while int(sim.stats()["in_flight"]) > limit and time.monotonic() - t0 < 30:
        await asyncio.sleep(0.02)
    settled, settling = time.monotonic() - t0, sim.stats()
    sim.reset()  # from here on, every moment counts: the solves in flight at the change have finished
    for p in old:
        p.signal(signal.SIGTERM)
    overlap = await _while_enforced(step.admin, sim, old_limits)
    codes = [await asyncio.to_thread(p.wait, 60) for p in old]
    st = sim.stats()
    step.phases[step.name] = {"in_flight_as_new_workers_start": before, "in_flight_at_change": in_flight,
                              "seconds_until_within_the_new_limit": round(settled, 2),
                              "max_in_flight": int(overlap["max_in_flight"]),
                              "queued": int(settling["queued"]) + int(st["queued"]),
                              "overlap_s": round(time.monotonic() - t0, 2), "old_exit_codes": codes}
    sim.configure(threads=100)
    return new


async def _while_enforced(admin: Redis, sim: SimProc, old_limits: set[str]) -> dict[str, Any]:
    """The simulator's figures as of the last reading taken while an old worker still enforced its limit (its entry
    in {q}:limits live; a drained worker removes it as it leaves), read every 20 ms: the maximum of in-flight
    solves over the overlap of old and new workers."""
    last = sim.stats()
    while old_limits & set(await _limits(admin)):
        st = sim.stats()
        if old_limits & set(await _limits(admin)):
            last = st
        await asyncio.sleep(0.02)
    return last


async def _observe(sim: SimProc, seconds: float) -> dict[str, Any]:
    sim.reset()
    await asyncio.sleep(seconds)
    st = sim.stats()
    return {"max_in_flight": int(st["max_in_flight"]), "queued": int(st["queued"])}


async def test_a_worker_stalled_past_its_lease_loses_its_tasks_to_resumes(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    """SIGSTOP past the lease with solves at the API: the reaper requeues them (a death counted), another worker
    resumes the recorded captcha ids; the stalled worker wakes up and finds its tasks gone or answered."""
    n, reply = 40, "stall"
    with simulator(tmp_path, "--threads", "50", "--speed", SPEED, "--latency", "turnstile=60:0") as sim:  # 3 s
        # API_TIME_SCALE 5 (the simulator runs at 20): a turnstile id stays answerable 18 s, well past the stall,
        # so the other worker resumes (the reaper and its next free slot) long before the stalled one wakes up
        env = worker_env(rs.url, sim.url, CAPTCHAAI_THREADS="10", WORKER_CONCURRENCY="5", API_TIME_SCALE="5")
        await _push(admin, [f"s{i}" for i in range(n)], reply)
        with workers(2, env, tmp_path) as (a, b):
            await wait_until(lambda: _in_flight(sim, 10), 20, "10 solves at the API")
            # and their ids recorded: a stall between in.php's answer and its RECORD is a death in between, which
            # costs a second submission (README); this scenario is about a stall after it
            ids = [f"s{i}" for i in range(n)]
            await wait_until(lambda: _recorded(admin, ids, 10), 20, "10 captcha ids recorded")
            a.signal(signal.SIGSTOP)
            await asyncio.sleep(8)  # > LEASE_SECONDS (3): its tasks are reaped, b resumes them
            a.signal(signal.SIGCONT)
            await wait_until(lambda: _answered(admin, reply, n), 90, "every task answered")
            per_id = await replies(admin, reply)
            stats = sim.stats()
            alive = a.alive() and b.alive()
            resumed = b.metric("captcha_solver_resumed_solves_total", outcome="answered")
    twice = sum(c > 1 for c in per_id.values())
    Row("sigstop-stall", n, len(per_id), await admin.llen(KEYS.dead), n - len(per_id), twice,
        stats["max_in_flight"], 10, {"stalled_s": 8, "in_php_submissions": stats["submitted"],
                                     "resumed_by_the_other_worker": resumed, "workers_alive": alive}).record()
    assert len(per_id) == n and twice == 0 and alive
    assert stats["max_in_flight"] <= 10 and stats["submitted"] == n
    assert resumed >= 1


async def test_a_payload_that_kills_every_worker_ends_in_a_dead_letter(
        rs: RedisServer, admin: Redis, tmp_path: Path) -> None:
    """Whichever worker holds the poison task dies (SIGKILL, as if the payload crashed it): after MAX_WORKER_DEATHS
    deaths the next claim dead-letters it with the count; the other tasks are solved, none dead-lettered."""
    n, reply, deaths_cap = 60, "poison", 3
    with simulator(tmp_path, "--threads", "50", "--speed", SPEED, "--latency", "recaptcha_v2=2000:0") as sim:  # 100 s
        env = worker_env(rs.url, sim.url, MAX_WORKER_DEATHS=str(deaths_cap), WORKER_CONCURRENCY="5")
        poison = json.dumps({"id": "poison", "method": "userrecaptcha", "reply_to": reply, "submitted_at": time.time(),
                             "params": {"googlekey": "6Le" + "A" * 37, "pageurl": "https://example.com"}})
        await RedisQueue(admin, "captcha").push([("poison", poison)], ttl=3600)
        await _push(admin, [f"p{i}" for i in range(n)], reply)
        with workers(2, env, tmp_path) as procs:
            kills = await _kill_whoever_holds(admin, "poison", procs, deaths_cap=deaths_cap,
                                              until=lambda: _dead(admin), timeout=90)
            await wait_until(lambda: _answered(admin, reply, n + 1), 60, "every task answered")
            per_id = await replies(admin, reply)
            stats = sim.stats()
    letters = await RedisQueue(admin, "captcha").dead_letters()
    notes = {Result.from_json(r).id: Result.from_json(r) for r in await admin.lrange(KEYS.reply(reply), 0, -1)}
    Row("poison-kills-workers", n + 1, sum(r.status.value == "solved" for r in notes.values()), len(letters), 0,
        sum(c > 1 for c in per_id.values()), stats["max_in_flight"], 20,
        {"kills": kills, "max_worker_deaths": deaths_cap,
         "dead_letter": {"code": letters[0].code, "worker_deaths": letters[0].worker_deaths} if letters else None}
        ).record()
    assert kills == deaths_cap
    assert [(d.id, d.code, d.worker_deaths) for d in letters] == [("poison", "MAX_WORKER_DEATHS_EXCEEDED", 3)]
    assert notes["poison"].code == "MAX_WORKER_DEATHS_EXCEEDED" and notes["poison"].worker_deaths == 3
    assert all(notes[f"p{i}"].status.value == "solved" for i in range(n)), "the other tasks are not failed"


async def _kill_whoever_holds(admin: Redis, task_id: str, procs: list[WorkerProc], *, deaths_cap: int,
                              until: Callable[[], Awaitable[bool]], timeout: float) -> int:
    """SIGKILL the worker that holds the task, as a payload that crashes its worker would: only while the task
    has fewer than `deaths_cap` deaths (at the cap the worker dead-letters it instead of running it)."""
    kills, deadline = 0, time.monotonic() + timeout
    while not await until() and time.monotonic() < deadline:
        owner, deaths = await admin.hmget(KEYS.task(task_id), ["owner", "deaths"])
        victim = next((p for p in procs if owner and int(deaths or 0) < deaths_cap and p.alive()
                       and p.proc is not None and f"-{p.proc.pid}-" in owner), None)
        if victim is not None:
            victim.signal(signal.SIGKILL)
            await asyncio.to_thread(victim.wait, 10)
            kills += 1
            victim.start()
        await asyncio.sleep(0.05)
    return kills


async def _dead(admin: Redis) -> bool:
    return bool(await admin.llen(KEYS.dead) >= 1)


async def _in_flight(sim: SimProc, n: int) -> bool:
    return int(sim.stats()["in_flight"]) >= n


async def _limits(admin: Redis) -> list[str]:
    return [m for m in await admin.zrangebyscore(KEYS.limits, time.time(), "+inf")]


async def _registered(admin: Redis, n: int) -> bool:
    return len(await _limits(admin)) >= n
