"""Redis failover on real topologies: a Sentinel deployment (1 master + 2 replicas + 3 sentinels) and a Redis Cluster
(3 masters + 3 replicas). 500 tasks through 3 `captcha-worker run` processes while a producer (the library, on the
same connection factory) keeps submitting; the master (on the cluster: the master of the queue's slot) is killed
mid-run, a replica takes over, the old master is restarted (as Kubernetes would) and rejoins as a replica.

Each run is made with durability off (the default) and on (``REDIS_WAIT_REPLICAS=1``), and with the replicas in
sync when the master dies (on loopback replication takes microseconds) or lagging: stopped while the master takes
a bulk write larger than the sockets between them hold and then 0.5 s of traffic (``topology.stalled``), as a
replica behind a slow network, a fork or a bulk job would be. Each records what the
failover cost: tasks lost (a submit that returned but a queue that no longer knows the id), delivered twice (the
producer was notified twice; ``different`` when the two carried different solutions, i.e. the task was solved
again after its acknowledged result was lost), stuck (known to the queue but never finished), and the solves the
API did again. What is asserted is what must hold whatever the timing: workers and producers ride the failover
out, nothing is stuck, and with durability on nothing acknowledged is lost.

The lease (LEASE_SECONDS) outlasts the failover here, as it must in production (docs/reliability.md): a lease
shorter than the outage expires while its worker cannot renew it, and the task is solved again.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from captcha_worker.client import CaptchaQueue, QueueUnavailable, Solved, TaskSpec, TimedOut, UnknownTask
from captcha_worker.connection import refusal
from captcha_worker.task import Result
from tests.helpers import TURNSTILE
from tests.procs import RedisServer, WorkerProc, simulator, workers
from tests.topology import ClusterTopology, SentinelTopology, cluster, sentinel

from .conftest import SPEED, Row, assert_audit_clean, crashes, worker_env

N = 500
BATCH = 5  # the producer submits BATCH tasks every PACE seconds, through the failover
PACE = 0.1
KILL_AFTER = 150  # results delivered before the master is killed
LEASE_S = 10  # above the topologies' failover time (~2-3 s), so no lease expires while the master is away
#: the rows this module records, built from the parameters (tests/test_docs.py: docs/reliability.md has each)
ROWS = ("sentinel-failover", "sentinel-failover-durable", "sentinel-failover-lagging",
        "sentinel-failover-lagging-durable", "sentinel-failover-lease-3s", "cluster-failover",
        "cluster-failover-durable", "cluster-failover-lagging", "cluster-failover-lagging-durable",
        "cluster-two-queues-full-coverage-yes", "cluster-two-queues-full-coverage-no")


class Deliveries:
    """Every notification the producer's listener hands over, per task id (wraps CaptchaQueue._deliver)."""

    def __init__(self, q: CaptchaQueue) -> None:
        self.seen: dict[str, list[Result]] = collections.defaultdict(list)
        original = q._deliver

        def deliver(result: Result) -> None:
            self.seen[result.id].append(result)
            original(result)

        q._deliver = deliver  # type: ignore[method-assign]

    def twice(self) -> tuple[int, int]:
        """(ids notified more than once, of which with different solutions)."""
        multi = [rs for rs in self.seen.values() if len(rs) > 1]
        return len(multi), sum(len({r.solution for r in rs}) > 1 for rs in multi)


async def _produce(q: CaptchaQueue, ids: list[str], failed: list[str]) -> None:
    for i in range(0, len(ids), BATCH):
        chunk = ids[i:i + BATCH]
        try:
            await q.submit_many([TaskSpec("turnstile", TURNSTILE, id=t) for t in chunk])
        except QueueUnavailable:
            failed.extend(chunk)
        await asyncio.sleep(PACE)


async def _failover_run(scenario: str, redis_env: dict[str, str], tmp_path: Path,
                        kill: Callable[[], Awaitable[dict[str, Any]]], durable: bool, lag: float,
                        lease_s: int = LEASE_S) -> Row:
    assert scenario in ROWS
    durability = {"REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT_MS": "500"} if durable else {}
    with simulator(tmp_path, "--threads", "100", "--speed", SPEED, "--seed", "5", "--latency", "turnstile=12:4") as sim:
        env = {k: v for k, v in worker_env("", sim.url, MAX_ATTEMPTS="20", CAPTCHAAI_THREADS="30",
                                                           LEASE_SECONDS=str(lease_s)).items()
               if k != "REDIS_URL"} | redis_env | durability
        ids = [f"f{i:04d}" for i in range(N)]
        failed: list[str] = []
        with workers(3, env, tmp_path) as procs:
            async with CaptchaQueue.from_env(redis_env | durability, producer_id=f"fo-{scenario}") as q:
                seen = Deliveries(q)
                producer = asyncio.create_task(_produce(q, ids, failed))
                await _until(lambda: len(seen.seen) >= KILL_AFTER, 120, f"{KILL_AFTER} results before the kill")
                before_kill = len(seen.seen)
                notes = await kill()
                await producer
                accepted = [i for i in ids if i not in failed]
                await _settled(q, seen, accepted)
                outcomes = await asyncio.gather(*(q.result(i, timeout=2) for i in accepted))
                dropped = q.duplicates_dropped  # the same result notified again: handed over once (issue 23)
            await asyncio.sleep(1.0)  # let the workers' last acks and heartbeats land before reading metrics
            refusals = _refusals(procs)
            alive = all(p.alive() for p in procs)
            loop_crashes = crashes(procs)
        stats = sim.stats()
    lost = sum(isinstance(o, UnknownTask) for o in outcomes)
    stuck = sum(isinstance(o, TimedOut) for o in outcomes)
    twice, different = seen.twice()
    row = Row(scenario, N, sum(isinstance(o, Solved) for o in outcomes), 0, lost, twice, stats["max_in_flight"], 30,
              {"durability": "WAIT 1 500ms" if durable else "off", "lease_s": lease_s, "replicas_lag_s": lag,
               "stuck": stuck,
               "delivered_twice_different": different, "same_result_notified_again_dropped": dropped,
               "submits_refused": len(failed), "re_solved_at_api": stats["solved"] - (N - len(failed) - lost),
               "results_before_kill": before_kill, "loop_crashes": loop_crashes,
               "redis_refusals": refusals, **notes})
    row.record()
    assert alive and loop_crashes == 0, "workers ride the failover out"
    assert not failed, "producers ride the failover out (pushes retried until a master takes them)"
    assert stuck == 0, "every task the queue knows finishes"
    assert all(isinstance(o, Solved | UnknownTask) for o in outcomes), outcomes
    if durable:
        assert lost == 0, "with durability on, no acknowledged push is lost"
    async with CaptchaQueue.from_env(redis_env) as q:
        await assert_audit_clean(q.queue)
    return row


async def _settled(q: CaptchaQueue, seen: Deliveries, ids: list[str], idle_s: float = 5.0,
                   timeout: float = 120.0) -> None:
    """Until every id was answered, or the queue has been empty (nothing pending, nothing in flight) for
    `idle_s`: what is unanswered then will not be answered (lost, or stuck)."""
    deadline, idle_since, last = time.monotonic() + timeout, None, "nothing"
    while any(i not in seen.seen for i in ids):
        if time.monotonic() > deadline:
            raise AssertionError(f"{sum(i not in seen.seen for i in ids)} tasks unanswered after {timeout}s; "
                                 f"last look at the queue: {last}")
        await asyncio.sleep(0.2)
        try:
            stats = await q.queue.stats()
        except Exception as exc:  # an outage while the topology settles: look again
            if refusal(exc) is None:
                raise
            last = f"{type(exc).__name__}: {exc}"
            continue
        last = repr(stats)
        if stats.pending or stats.processing:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > idle_s:
            return


async def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def _refusals(procs: list[WorkerProc]) -> dict[str, int]:
    """captcha_solver_redis_errors_total by reason, summed over the workers (what the failover looked like)."""
    out: dict[str, int] = {}
    for reason in ("connection", "timeout", "readonly", "nomaster", "moved", "clusterdown", "unreplicated",
                   "masterdown", "tryagain"):
        count = int(sum(p.metric("captcha_solver_redis_errors_total", reason=reason) for p in procs if p.alive()))
        if count:
            out[reason] = count
    return out


def _finished(p: WorkerProc) -> float:
    """Tasks the worker finished (0 while its metrics endpoint is not up yet)."""
    try:
        return p.metric("captcha_solver_tasks_total")
    except OSError:
        return 0.0


def _restart(old: RedisServer) -> float:
    started = time.monotonic()
    old.start()
    return time.monotonic() - started


DURABILITY = pytest.mark.parametrize("durable", [False, True], ids=["durability-off", "durability-on"])
LAG = pytest.mark.parametrize("lag", [0.0, 0.5], ids=["replicas-in-sync", "replicas-lagging"])


def _name(topology: str, durable: bool, lag: float) -> str:
    return f"{topology}-failover{'-lagging' if lag else ''}{'-durable' if durable else ''}"


@DURABILITY
@LAG
async def test_sentinel_failover_mid_run(tmp_path: Path, durable: bool, lag: float) -> None:
    with sentinel(tmp_path / "topology") as topo:
        async def kill() -> dict[str, Any]:
            return await asyncio.to_thread(_sentinel_kill, topo, lag)

        await _failover_run(_name("sentinel", durable, lag), topo.env(), tmp_path, kill, durable, lag)


async def test_sentinel_failover_longer_than_the_lease(tmp_path: Path) -> None:
    """LEASE_SECONDS (3) about the failover time: leases expire while their workers cannot renew them, and those
    tasks are solved again. Measured, to size LEASE_SECONDS against the failover (docs/reliability.md)."""
    with sentinel(tmp_path / "topology") as topo:
        async def kill() -> dict[str, Any]:
            return await asyncio.to_thread(_sentinel_kill, topo, 0.0)

        await _failover_run("sentinel-failover-lease-3s", topo.env(), tmp_path, kill, False, 0.0, lease_s=3)


def _sentinel_kill(topo: SentinelTopology, lag: float) -> dict[str, Any]:
    killed_at = time.monotonic()
    old = topo.kill_master(replicas_lag_s=lag, filler_key="{captcha}:lag-filler")
    new = topo.wait_failover(old.port)
    failover_s = time.monotonic() - killed_at - lag
    _restart(old)
    topo.wait_rejoined(old)
    return {"failover_s": round(failover_s, 1), "down_after_ms": topo.down_after_ms, "old_master": old.port,
            "new_master": new}


@DURABILITY
@LAG
async def test_cluster_failover_of_the_queue_slot_mid_run(tmp_path: Path, durable: bool, lag: float) -> None:
    with cluster(tmp_path / "topology") as topo:
        async def kill() -> dict[str, Any]:
            return await asyncio.to_thread(_cluster_kill, topo, "{captcha}", lag)

        await _failover_run(_name("cluster", durable, lag), topo.env(), tmp_path, kill, durable, lag)


def _cluster_kill(topo: ClusterTopology, key: str, lag: float) -> dict[str, Any]:
    killed_at = time.monotonic()
    old = topo.kill_master_of(key, replicas_lag_s=lag)
    new = topo.wait_failover(key, old.port)
    failover_s = time.monotonic() - killed_at - lag
    _restart(old)
    topo.wait_healthy()
    return {"failover_s": round(failover_s, 1), "node_timeout_ms": topo.node_timeout_ms, "old_master": old.port,
            "new_master": new}


@pytest.mark.parametrize("full_coverage", [True, False], ids=["full-coverage-yes", "full-coverage-no"])
async def test_cluster_two_queues_on_two_masters(tmp_path: Path, full_coverage: bool) -> None:
    """Two queues (two hash tags) whose slots two different masters serve: a worker per queue, 100 tasks each,
    every one solved on its own queue while the master of the first queue dies half-way. With
    `cluster-require-full-coverage no` the second queue never notices (no refusal); with Redis' default (yes)
    every node answers CLUSTERDOWN until the failover ends, so the second queue pauses too (recorded)."""
    per_queue = 100
    sim_args = ("--threads", "100", "--speed", SPEED, "--seed", "7", "--latency", "turnstile=6:2")
    with cluster(tmp_path / "topology", full_coverage=full_coverage) as topo, simulator(tmp_path, *sim_args) as sim:
        names = topo.keys_on_other_masters("q", 2)
        masters = [topo.slot_master(f"{{{n}}}") for n in names]
        assert masters[0] != masters[1]
        base = {k: v for k, v in worker_env("", sim.url, CAPTCHAAI_THREADS="20", LEASE_SECONDS=str(LEASE_S)).items()
                if k != "REDIS_URL"} | topo.env()
        for d in ("a", "b"):
            (tmp_path / d).mkdir()
        with workers(1, base | {"QUEUE_NAME": names[0]}, tmp_path / "a") as wa, \
                workers(1, base | {"QUEUE_NAME": names[1]}, tmp_path / "b") as wb:
            async with CaptchaQueue.from_env(topo.env(), queue=names[0], producer_id="two-a") as qa, \
                    CaptchaQueue.from_env(topo.env(), queue=names[1], producer_id="two-b") as qb:
                ids = {n: [f"{n}-{i:03d}" for i in range(per_queue)] for n in names}
                queues = ((qa, names[0]), (qb, names[1]))
                for q, n in queues:
                    await q.submit_many([TaskSpec("turnstile", TURNSTILE, id=t) for t in ids[n][:per_queue // 2]])
                await _until(lambda: all(_finished(p) > 0 for p in (*wa, *wb)), 60, "both workers solving")
                old = await asyncio.to_thread(topo.kill_master_of, f"{{{names[0]}}}")
                for q, n in queues:
                    await q.submit_many([TaskSpec("turnstile", TURNSTILE, id=t) for t in ids[n][per_queue // 2:]])
                outcomes = {n: await asyncio.gather(*(q.result(t, timeout=90) for t in ids[n])) for q, n in queues}
                await asyncio.to_thread(topo.wait_failover, f"{{{names[0]}}}", old.port)
            other, hit = _refusals(wb), _refusals(wa)
        for n in names:  # the workers stopped, the cluster still up
            async with CaptchaQueue.from_env(topo.env(), queue=n) as q:
                await assert_audit_clean(q.queue)
    for n in names:
        bad = [o for o in outcomes[n] if not isinstance(o, Solved)]
        assert not bad, f"queue {n}: {bad[:3]}"
        assert all(o.id.startswith(f"{n}-") for o in outcomes[n])
    name = f"cluster-two-queues-full-coverage-{'yes' if full_coverage else 'no'}"
    assert name in ROWS
    Row(name, 2 * per_queue, 2 * per_queue, 0, 0, 0, 0, 20,
        {"queues": names, "masters": masters, "refusals_queue_of_killed_master": hit,
         "refusals_other_queue": other}).record()
    if not full_coverage:
        assert other == {}, f"the other master's queue saw refusals: {other}"
