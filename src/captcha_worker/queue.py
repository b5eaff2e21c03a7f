"""The queue: what a worker, a producer and the gateway do with one queue in Redis (``RedisQueue``; the worker and its
jobs depend only on the part they call, ``worker_queue.WorkerQueue``), one atomic transition per script
(``store/lua/<name>.lua``, each with its KEYS and ARGV).

The keys are ``store.keys`` (its header is the key table, with what a Redis Cluster requires of a queue); the
records and replies ``store.records``; the script loader and transport ``store.scripts``. Their names are
re-exported here (``from captcha_worker.queue import Keys, Ack, ...`` keeps working).

Transitions of one item (each arrow is one atomic step):

    push           producer        -> pending                     (task hash written with TTL; a known id is
                                                                   left alone: idempotent)
    CLAIM          pending, a tenant's waiting list or the compat list -> processing + lease + budget unit
                                                                  (batch, non-blocking; owner recorded). An id
                                                                   item needs a unit: a free one, or the one its
                                                                   earlier owner left held; with none free the
                                                                   claim stops (the item stays first). A raw
                                                                   item needs none (no API call before ADOPT); one
                                                                   over MAX_TASK_BYTES goes straight to dead,
                                                                   unread by any worker. Which list: SORT+PICK
    BLMOVE+LEASE   pending         -> processing, then lease + unit (blocking path; no unit free: the item goes
                                                                   back to the front; a known tenant's task goes
                                                                   to its waiting list. The gap is covered by the
                                                                   orphan rule below)
    CLAIM_LATE     named ids of pending -> processing + lease, no unit (routing on a deadline: a per-solve
                                   provider solves them; an id no longer pending is skipped)
    ADOPT          raw JSON task in processing -> its id at the front of pending (task hash created), or
                                   dropped when its id is known already (a repeated push)
    RECORD         in.php answered: captcha id on the task hash, its unit held until the id can no longer
                                   be answered
    RENEW          the owning worker's heartbeat: per item, its lease and its unit a lease longer, together,
                                   only while the lease exists and no other worker owns the task (a
                                   finished item's unit is never re-created)
    ACK            processing + lease -> result (NX) + reply push  (task body dropped, tombstone kept; unit
                                                                   released, or held while the API may still
                                                                   be solving)
    BURY           processing + lease -> dead (+ result + reply push when the id is known)
    RELEASE        processing + lease -> pending (front or back; an API-side failure counted or not; the unit
                                   held while the solve may still run, so the next owner resumes it)
                   ACK, BURY and RELEASE are fenced by the task's owner: a worker that lost its task to
                                   another one (it stalled past its lease) leaves the item, its lease and
                                   the task hash alone; its ACK only delivers its result (first writer wins)
    REAP           expired lease, or lease-less item older than the orphan grace -> pending (front; a death
                                   counted). The unit is left to expire or to be resumed.
    REQUEUE_DEAD   dead -> pending (counts reset) while the task body is still stored
    REPORT         a solved task's captcha id -> reports
    LOOKUP         result, or the state of the id: queued / finished (result expired) / unknown
    AUDIT          (reads only) what breaks the invariants of docs/guarantees.md, as Redis shows it: a unit
                                   of a finished task whose solve can no longer run at the API, a lease of
                                   a finished task, a lease without its item, an item without a lease
    SORT+PICK      (in CLAIM and LEASE) known tenants' tasks at the head of pending -> their waiting lists;
                                   the next item comes from the list of the tenant with the lowest share
                                   used that may take a thread (``shares``)
    SHARES         the gateway's share table -> tenants (a tenant dropped: its waiting tasks back to pending);
                                   each tenant's units in flight and waiting tasks

The budget (``budget.py``, ``RedisQueue.budget``): CLAIM and LEASE *acquire* a unit with the claim, the heartbeat
*renews* a job's unit with its lease (in RENEW, one step), ACK / BURY / RELEASE *release* it (or hold it while the API
may still be solving), and the *limit* in effect is the smallest one in ``{q}:limits`` (``Budget.acquire / renew /
release / limit / state`` outside the scripts). A worker's HEARTBEAT registers the limit it enforces in
``{q}:limits`` (``<limit>:<worker>``, replacing any other entry of that worker) and FORGET removes its entries when it
leaves.

A reaper runs in every worker; REAP is one script, so two reapers never requeue an item twice (LREM decides).
A task requeued while its solve may still be running at CaptchaAI (its worker died, drained past the grace, or
failed its polls) is resumed by its next owner: it polls the recorded captcha id while that id can still be
answered, and submits again only after. An item requeued by a reaper that its old owner still solves may be
solved twice; ACK's SET NX makes the producer see exactly one result. When a claim finds a result (or a
tombstone) already written, the worker acks it unsolved.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar, cast

from redis.asyncio import RedisCluster
from redis.client import NEVER_DECODE

from captcha_worker import budget, shares
from captcha_worker.budget import Budget
from captcha_worker.codes import Code
from captcha_worker.config import DEFAULT_DEAD_LETTER_MAX, DEFAULT_MAX_TASK_BYTES
from captcha_worker.connection import Client
from captcha_worker.shares import TenantLoad, TenantShare
from captcha_worker.store.keys import (
    NO_TASK_ID,
    SEED_QUEUE_LIST,
    SEED_RESULTS_HASH,
    Keys,
    Text,
    is_raw_item,
    item_ref,
    task_id_of,
)
from captcha_worker.store.records import (
    CLAIM_FIELDS,
    UNLIMITED,
    Ack,
    AuditCheck,
    AuditRecord,
    BudgetState,
    Claimed,
    ClaimFlag,
    ClaimReply,
    ClaimStop,
    DeadLetter,
    Lookup,
    QueueStats,
    Record,
    RecordOutcome,
    Renewal,
    Renewed,
    Report,
    Verdict,
    Violation,
    as_text,
    claim_reply,
    confirmed,
    dead_entry,
    lookup_marker,
    queue_stats,
    str_or_none,
    violation_digest,
)
from captcha_worker.store.scripts import Call, Constant, Runner, SlotScript, lua
from captcha_worker.task import MAX_ID_LENGTH, Result, valid_task_id

__all__ = [
    "ACK_ARGS",
    "ACK_KEYS",
    "CLAIM_FIELDS",
    "LUA_CONSTANTS",
    "NO_TASK_ID",
    "REPORTS_MAX",
    "SEED_QUEUE_LIST",
    "SEED_RESULTS_HASH",
    "UNLIMITED",
    "Ack",
    "AuditCheck",
    "AuditRecord",
    "BudgetState",
    "ClaimFlag",
    "ClaimReply",
    "ClaimStop",
    "Claimed",
    "DeadLetter",
    "Keys",
    "Lookup",
    "QueueStats",
    "Record",
    "RecordOutcome",
    "RedisQueue",
    "Renewal",
    "Renewed",
    "Report",
    "TenantLoad",
    "TenantShare",
    "Text",
    "Verdict",
    "Violation",
    "as_awaitable",
    "as_text",
    "confirmed",
    "dead_entry",
    "is_raw_item",
    "item_ref",
    "violation_digest",
]

T = TypeVar("T")
REPORTS_MAX = 10_000  # report requests kept while no worker sends them
ACK_KEYS, ACK_ARGS = 3, 6  # keys and arguments of each ack in an ACK call (after the shared ones)

# -- Lua: one file per transition of the table above (store/lua/<name>.lua, each with its KEYS and ARGV) ------
#: the constants the queue's scripts declare (``--! const``), by their owners
LUA_CONSTANTS: dict[str, Constant] = {
    **budget.LUA_CONSTANTS, **shares.LUA_CONSTANTS, "MAX_ID": MAX_ID_LENGTH, "TOO_LARGE": Code.TASK_TOO_LARGE,
    "ACK_KEYS": ACK_KEYS, "ACK_ARGS": ACK_ARGS, **{f"FLAG_{f.name}": f for f in ClaimFlag}}
_PUSH = lua("push", LUA_CONSTANTS)
_CLAIM = lua("claim", LUA_CONSTANTS)
_LEASE = lua("lease", LUA_CONSTANTS)
_CLAIM_LATE = lua("claim_late", LUA_CONSTANTS)
_RENEW = lua("renew", LUA_CONSTANTS)
_UNIT_DROP = lua("unit_drop", LUA_CONSTANTS)
_ADOPT = lua("adopt", LUA_CONSTANTS)
_RECORD = lua("record", LUA_CONSTANTS)
_ACK = lua("ack", LUA_CONSTANTS)
_BURY = lua("bury", LUA_CONSTANTS)
_RELEASE = lua("release", LUA_CONSTANTS)
_REAP = lua("reap", LUA_CONSTANTS)
_REQUEUE_DEAD = lua("requeue_dead", LUA_CONSTANTS)
_LOOKUP = lua("lookup", LUA_CONSTANTS)
_KEEP_EXCERPT = lua("keep_excerpt")
_OPEN_RAW_WINDOW = lua("open_raw_window")
_STATS = lua("stats", LUA_CONSTANTS)
_HEARTBEAT = lua("heartbeat", LUA_CONSTANTS)
_FORGET = lua("forget")
_AUDIT = lua("audit", LUA_CONSTANTS)
_REPORT = lua("report", LUA_CONSTANTS)
_SEED_RESULT = lua("seed_result", LUA_CONSTANTS)
_SHARES = lua("shares", LUA_CONSTANTS)


def _glob_escape(text: str) -> str:
    """`text` matched literally in a SCAN pattern (a queue name may hold glob characters)."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def as_awaitable(value: Awaitable[T] | T) -> Awaitable[T]:
    """redis-py types commands as `Awaitable[T] | T` (sync and async share stubs); ours are async."""
    return cast(Awaitable[T], value)


class RedisQueue:
    """One queue's Redis operations. Stateless apart from the registered scripts; safe to share."""

    def __init__(self, redis: Client, name: str, *, wait_replicas: int = 0, wait_timeout_ms: int = 500) -> None:
        """`wait_replicas` > 0: pushes, acks and burials wait for that many replicas (REDIS_WAIT_REPLICAS), or
        raise NotReplicated after `wait_timeout_ms`."""
        self.redis = redis
        self.keys = Keys(name)
        self.wait_replicas, self.wait_timeout_ms = wait_replicas, wait_timeout_ms
        self._runner = Runner(redis, self.keys.pending, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
        self.budget = Budget(redis, units=self.keys.budget, limits=self.keys.limits)

        # one script per transition of the header's table, registered by name
        self._push = SlotScript(redis, _PUSH)
        self._claim = SlotScript(redis, _CLAIM)
        self._lease = SlotScript(redis, _LEASE)
        self._claim_late = SlotScript(redis, _CLAIM_LATE)
        self._renew = SlotScript(redis, _RENEW)
        self._unit_drop = SlotScript(redis, _UNIT_DROP)
        self._adopt = SlotScript(redis, _ADOPT)
        self._record = SlotScript(redis, _RECORD)
        self._ack = SlotScript(redis, _ACK)
        self._bury = SlotScript(redis, _BURY)
        self._release = SlotScript(redis, _RELEASE)
        self._reap = SlotScript(redis, _REAP)
        self._heartbeat = SlotScript(redis, _HEARTBEAT)
        self._forget = SlotScript(redis, _FORGET)
        self._report = SlotScript(redis, _REPORT)
        self._requeue_dead = SlotScript(redis, _REQUEUE_DEAD)
        self._stats = SlotScript(redis, _STATS)
        self._lookup = SlotScript(redis, _LOOKUP)
        self._keep_excerpt = SlotScript(redis, _KEEP_EXCERPT)
        self._open_raw_window = SlotScript(redis, _OPEN_RAW_WINDOW)
        self._seed_result = SlotScript(redis, _SEED_RESULT)
        self._shares = SlotScript(redis, _SHARES)
        self._audit = SlotScript(redis, _AUDIT)

    # producer ---------------------------------------------------------------------------------------------
    async def push(self, tasks: Sequence[tuple[str, str]], *, ttl: int, front: bool = False,
                   batch: int = 500) -> int:
        """Store (id, body) pairs and enqueue their ids: one PUSH call per `batch` tasks, all pipelined.
        Ids already known (queued, or finished within the task TTL) are left alone. Returns how many were new."""
        calls: list[Call] = []
        for i in range(0, len(tasks), batch):
            chunk = tasks[i:i + batch]
            keys, args = [self.keys.pending], [ttl, "1" if front else "0"]
            for tid, body in chunk:
                keys += [self.keys.task(tid), self.keys.result(tid)]
                args += [tid, body]
            calls.append((self._push, keys, args))
        return sum(int(n) for n in await self._runner.run_many(calls, durable=True)) if calls else 0

    async def lookup(self, ids: Sequence[str]) -> list[Text | Lookup]:
        """Per id: its stored result JSON, or what is known of it (one script call for all)."""
        if not ids:
            return []
        keys = [k for i in ids for k in (self.keys.result(i), self.keys.task(i))]
        values = await self._runner.eval_raw(self._lookup, keys, [])
        return [lookup_marker(v) for v in values]

    async def report(self, task_id: str, verdict: Verdict) -> str | None:
        """Queue a report of a solved task's answer for a worker to send; its captcha id, or None when the task
        has no answer from the API to report (not solved yet, failed, never submitted, or its record expired)."""
        captcha = await self._report(keys=[self.keys.task(task_id), self.keys.reports],
                                     args=[verdict.value, task_id, REPORTS_MAX])
        return str_or_none(captcha) or None

    async def take_reports(self, n: int) -> list[Report]:
        """Up to n queued reports, oldest first (removed: the caller sends them)."""
        raws = await self._runner.raw("LPOP", self.keys.reports, n)
        return [r for r in (Report.parse(as_text(x)) for x in raws or []) if r is not None]

    # claim ------------------------------------------------------------------------------------------------
    def _claim_args(self, lease_s: float, max_bytes: int, dead_max: int, worker: str, limit: int) -> list[Any]:
        k = self.keys
        return [lease_s, k.task_prefix, k.result_prefix, max_bytes, dead_max, worker, limit, k.waiting_prefix]

    async def claim(self, n: int, *, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                    dead_max: int = DEFAULT_DEAD_LETTER_MAX, compat_list: str | None = None, worker: str = "",
                    limit: int = UNLIMITED) -> list[Claimed]:
        """Claim up to n items from pending (then from `compat_list`), leased, each task with its budget unit.
        Raw items over `max_bytes` are dead-lettered by the script and come back flagged ITEM_TOO_LARGE."""
        reply = await self.claim_reply(n, lease_s=lease_s, max_bytes=max_bytes, dead_max=dead_max,
                                       compat_list=compat_list, worker=worker, limit=limit)
        return reply.items

    async def claim_reply(self, n: int, *, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                          dead_max: int = DEFAULT_DEAD_LETTER_MAX, compat_list: str | None = None, worker: str = "",
                          limit: int = UNLIMITED, no_unit: bool = False) -> ClaimReply:
        """`claim`, with the budget as the script saw it (`limit`: the caller's own, see ``budget``). `no_unit`:
        items from pending only, none taking a budget unit (an overflow provider solves them, ``job``)."""
        k = self.keys
        keys = [k.pending, k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits, k.tenants,
                *([compat_list] if compat_list and not no_unit else [])]
        reply = await self._runner.eval_raw(self._claim, keys, [n, *self._claim_args(lease_s, max_bytes, dead_max,
                                                                                     worker, limit),
                                                                *(["1"] if no_unit else [])])
        return claim_reply(reply)

    async def peek_pending(self, n: int) -> list[tuple[str, str | None]]:
        """The first `n` task ids of pending with their stored bodies (None: expired, or a raw item, skipped), in
        queue order: what routing on a deadline predicts from (``deadline.late``). Read only, two round trips; a
        view that is stale by the time it is acted on is harmless (CLAIM_LATE claims only items still pending)."""
        items = await self._runner.raw("LRANGE", self.keys.pending, 0, n - 1)
        ids = [i for i in (as_text(x) for x in items or []) if isinstance(i, str) and valid_task_id(i)]
        if not ids:
            return []
        bodies = await self._runner.send([("HGET", self.keys.task(i), "body") for i in ids], pinned=False)
        return [(i, b.decode("utf-8", "replace") if isinstance(b, bytes) else b if isinstance(b, str) else None)
                for i, b in zip(ids, bodies, strict=True)]

    async def claim_late(self, items: Sequence[str], *, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                         dead_max: int = DEFAULT_DEAD_LETTER_MAX, worker: str = "",
                         limit: int = UNLIMITED) -> ClaimReply:
        """CLAIM_LATE: the named task ids still in pending, leased without budget units (a per-solve provider
        solves them: they would miss their deadline waiting for a plan thread)."""
        k = self.keys
        keys = [k.pending, k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits]
        args = self._claim_args(lease_s, max_bytes, dead_max, worker, limit)[:-1]  # no waiting prefix
        return claim_reply(await self._runner.eval_raw(self._claim_late, keys, [*args, *items]))

    async def claim_blocking(self, *, timeout_s: float, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                             dead_max: int = DEFAULT_DEAD_LETTER_MAX, worker: str = "",
                             limit: int = UNLIMITED) -> ClaimReply | None:
        """Wait up to timeout_s for one item (BLMOVE), then lease it (None: nothing came)."""
        k = self.keys
        item = await self._runner.raw("BLMOVE", k.pending, k.processing, "LEFT", "RIGHT", timeout_s)
        if item is None:
            return None
        reply = await self._runner.eval_raw(self._lease, [k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits,
                                                   k.pending, k.tenants],
                                     [item, *self._claim_args(lease_s, max_bytes, dead_max, worker, limit)])
        return claim_reply(reply)

    async def adopt(self, raw: Text, task_id: str, body: str, *, ttl: int) -> bool | None:
        """Turn a raw item in processing into a task hash and its id at the front of pending. True when adopted;
        None when a reaper took the item back; False when the id is known already (a repeated push: dropped)."""
        k = self.keys
        done = int(await self._adopt(keys=[k.processing, k.leases, k.task(task_id), k.orphans, k.result(task_id),
                                           k.pending], args=[raw, body, ttl, task_id]))
        return None if done == -1 else done == 1

    # lease upkeep -----------------------------------------------------------------------------------------
    async def renew(self, items: Sequence[Text | Renewal], *, lease_s: float, worker: str = "") -> Renewed:
        """RENEW: extend the leases of `worker`'s items and, with each, its budget unit (an item alone: no unit).
        Returns the items not renewed (lease gone, or the task owned by another worker) and the units that had
        expired and are counted again."""
        if not items:
            return Renewed([], [])
        args: list[Any] = [lease_s, worker, self.keys.task_prefix]
        for one in items:
            r = one if isinstance(one, Renewal) else Renewal(one)
            args += (r.item, task_id_of(r.item), r.unit or "")
        lost, recounted = await self._runner.eval_raw(self._renew, [self.keys.leases, self.keys.budget], args)
        return Renewed([as_text(v) for v in lost], [cast(str, str_or_none(u)) for u in recounted])

    async def drop_unit(self, task_id: str, unit: str, *, worker: str) -> bool:
        """UNIT_DROP: `worker`'s job of `task_id` gives its plan-thread unit back (a per-solve provider solves it);
        no renewal of this claim counts it again, even one sent before. False when another worker owns the task
        (this one stalled past its lease): that worker's unit is left alone."""
        given = await self._unit_drop(keys=[self.keys.budget, self.keys.task(task_id)], args=[unit, worker])
        return bool(given)

    def _count_keys(self) -> list[str]:
        k = self.keys
        return [k.pending, k.processing, k.dead, k.budget, k.workers, k.limits, k.tenants]

    async def heartbeat(self, worker_id: str, *, limit: int, limit_alive_s: float = 30.0,
                        alive_s: float = 60) -> QueueStats:
        """HEARTBEAT: this worker alive and the limit it enforces (held `limit_alive_s` without a heartbeat), in
        place of any other limit it registered; returns the queue's stats (one round trip for all). The caller
        sends one at a time: two on their way at once may land in either order, the later one's limit staying."""
        member = budget.limit_member(worker_id, limit)
        counts = await self._heartbeat(keys=self._count_keys(),
                                       args=[alive_s, worker_id, member, limit_alive_s, limit,
                                             self.keys.waiting_prefix])
        return queue_stats(counts)

    async def forget_worker(self, worker_id: str) -> None:
        """FORGET: a worker leaving: its heartbeat and every limit entry of its own go (a higher limit may apply
        at once)."""
        await self._forget(keys=[self.keys.workers, self.keys.limits], args=[worker_id])

    # outcomes ---------------------------------------------------------------------------------------------
    def _reply_key(self, reply_to: str | None, task_id: str) -> str:
        """The producer's reply list; without one, the result key itself: the scripts' NO_REPLY sentinel (a reply
        key equal to the result key means nobody listens on a list, the result is only stored)."""
        return self.keys.reply(reply_to) if reply_to else self.keys.result(task_id)

    async def ack(self, item: Text, result: Result | None, *, reply_to: str | None = None, result_ttl: int = 0,
                  reply_ttl: int = 0, unit: str | None = None, worker: str = "") -> bool:
        """Finish an item with a result (None: drop it, a result exists). True if this result won."""
        (won,), _ = await self.write_batch([Ack(item, result, reply_to, unit=unit, worker=worker)], [],
                                           result_ttl=result_ttl, reply_ttl=reply_ttl)
        return won

    async def ack_many(self, acks: Sequence[Ack], *, result_ttl: int, reply_ttl: int) -> list[bool]:
        """ACK several items in one round trip (one ACK script call)."""
        won, _ = await self.write_batch(acks, [], result_ttl=result_ttl, reply_ttl=reply_ttl)
        return won

    async def record(self, rec: Record) -> RecordOutcome:
        _, (outcome,) = await self.write_batch([], [rec], result_ttl=0, reply_ttl=0)
        return outcome

    def _write_calls(self, acks: Sequence[Ack], records: Sequence[Record], result_ttl: int,
                     reply_ttl: int) -> list[Call]:
        k = self.keys
        calls: list[Call] = [(self._record, [k.task(r.task_id), k.budget],
                              [r.worker, r.unit, r.captcha_id, r.window_s]) for r in records]
        if acks:
            keys: list[str] = [k.processing, k.leases, k.budget]
            args: list[Any] = [result_ttl, reply_ttl]
            for a in acks:
                tid = a.result.id if a.result else task_id_of(a.item)
                captcha = a.result.captcha_id if a.result and a.result.captcha_id else ""
                keys += (k.task(tid), k.result(tid), self._reply_key(a.reply_to, tid))
                args += (a.item, a.result.to_json() if a.result else "", a.worker, a.unit or "", a.hold_s, captcha)
            calls.append((self._ack, keys, args))
        return calls

    @staticmethod
    def _written(out: Sequence[Any], n_acks: int, n_records: int) -> tuple[list[bool], list[RecordOutcome]]:
        won = [bool(w) for w in out[-1]] if n_acks else []
        return won, [RecordOutcome(int(r)) for r in out[:n_records]]

    async def write_batch(self, acks: Sequence[Ack], records: Sequence[Record], *, result_ttl: int,
                          reply_ttl: int) -> tuple[list[bool], list[RecordOutcome]]:
        """RECORDs, then one ACK call for all the acks, in one pipelined round trip."""
        calls = self._write_calls(acks, records, result_ttl, reply_ttl)
        out = await self._runner.run_many(calls, durable=bool(acks)) if calls else []
        return self._written(out, len(acks), len(records))

    async def write_batch_and_claim(
            self, acks: Sequence[Ack], records: Sequence[Record], *, result_ttl: int, reply_ttl: int, claim_n: int,
            lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES, dead_max: int = DEFAULT_DEAD_LETTER_MAX,
            worker: str = "", limit: int = UNLIMITED,
    ) -> tuple[tuple[list[bool], list[RecordOutcome]] | Exception, ClaimReply | None]:
        """`write_batch`, then a CLAIM of up to `claim_n` items, in one round trip: Redis runs them in order on the
        pipeline's one connection, so the units the ACKs release are there for the claim to take (P1: one round
        trip per batch instead of two). Not for durable writes (their WAIT confirms the writes on their own) nor a
        Cluster client (the caller checks: ``folds_claims``). Each script is the same atomic step as alone.

        Returns (the writes' outcome, or the error their scripts answered: the caller sends them again with
        `write_batch`, every write being idempotent; the claim's reply, or None when it failed: the claimer
        claims by itself then). A failed round trip is raised, the claim's reply lost with it as a lone claim's
        would be (its items, if it ran, go back when their leases expire)."""
        calls = self._write_calls(acks, records, result_ttl, reply_ttl)
        k = self.keys
        claim_keys = [k.pending, k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits, k.tenants]
        claim_args = [claim_n, *self._claim_args(lease_s, max_bytes, dead_max, worker, limit)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for script, keys, args in calls:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            pipe.execute_command("EVALSHA", self._claim.sha, len(claim_keys), *claim_keys, *claim_args,
                                 **{NEVER_DECODE: True})  # items may be any bytes
            replies = list(await pipe.execute(raise_on_error=False))
        claimed, written = replies.pop(), replies
        failed = next((r for r in written if isinstance(r, Exception)), None)
        reply = None if isinstance(claimed, Exception) else claim_reply(claimed)
        return (failed if failed is not None else self._written(written, len(acks), len(records))), reply

    @property
    def folds_claims(self) -> bool:
        """Whether `write_batch_and_claim` may be used: no durable writes, no Cluster client."""
        return not self.wait_replicas and not isinstance(self.redis, RedisCluster)

    async def bury(self, item: Text, entry: str, *, result: Result | None, reply_to: str | None,
                   dead_max: int, result_ttl: int, reply_ttl: int, raw: bool = False, unit: str | None = None,
                   hold_s: float = 0.0, worker: str = "") -> tuple[bool, bool]:
        """Dead-letter an item (and answer its producer with `result` when the id is known). `raw`: the item is
        a raw payload naming `result.id`; a task of that id that exists already is then not answered.
        Returns (buried, answered)."""
        k = self.keys
        tid = result.id if result else task_id_of(item)
        (done,) = await self._runner.run_many([(
            self._bury,
            [k.processing, k.leases, k.dead, k.task(tid), k.result(tid), self._reply_key(reply_to, tid), k.budget],
            [item, entry, dead_max, result.to_json() if result else "", result_ttl, reply_ttl, "1" if raw else "0",
             worker, unit or "", hold_s],
        )], durable=True)
        buried, answered = done
        return bool(buried), bool(answered)

    async def release(self, item: Text, *, failure: bool, front: bool, last_error: str = "", worker: str = "",
                      unit: str | None = None, hold_s: float = 0.0, captcha_id: str | None = None) -> bool:
        """Put a claimed item back on pending (`failure`: count an API-side failure). With `hold_s` > 0 its solve
        `captcha_id` may still be running at the API: the id is recorded and the unit held, to be resumed."""
        k = self.keys
        task_key = k.task(task_id_of(item))
        done = await self._release(keys=[k.processing, k.leases, k.pending, task_key, k.budget],
                                   args=[item, "1" if failure else "0", "1" if front else "0", last_error, worker,
                                         unit or "", hold_s, captcha_id or ""])
        return bool(done)

    async def reap(self, *, orphan_grace_s: float, limit: int = 1000) -> tuple[int, int]:
        """Requeue expired leases and stale orphans. Returns (expired, orphaned) counts."""
        k = self.keys
        expired, orphaned = await self._reap(keys=[k.processing, k.leases, k.pending, k.orphans],
                                             args=[orphan_grace_s, limit, k.task_prefix])
        return int(expired), int(orphaned)

    async def last_error(self, task_id: str) -> str | None:
        return str_or_none(await as_awaitable(self.redis.hget(self.keys.task(task_id), "last_error")))

    async def write_seed_result(self, task_id: str, entry: str, *, ttl: int) -> None:
        """Compatibility with the seed guide's consumers, which poll HGET captcha:results <id> (bounded: TTL)."""
        await self._seed_result(keys=[SEED_RESULTS_HASH], args=[task_id, entry, ttl])

    # inspection and operations ----------------------------------------------------------------------------
    async def publish_shares(self, table: Sequence[TenantShare]) -> dict[str, TenantLoad]:
        """SHARES: make `table` the share table the claim enforces (``shares``); returns each tenant's units in
        flight and its waiting tasks."""
        k = self.keys
        flat = await self._shares(keys=[k.tenants, k.pending, k.budget],
                                  args=[k.waiting_prefix, *(v for t in table for v in (t.name, t.value()))])
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in flat[0::3]]
        return {name: TenantLoad(int(n), int(w)) for name, n, w in zip(names, flat[1::3], flat[2::3], strict=True)}

    async def stats(self, *, worker_alive_s: float = 60) -> QueueStats:
        return queue_stats(await self._stats(keys=self._count_keys(), args=[worker_alive_s, self.keys.waiting_prefix]))

    async def audit(self, *, cap: int = 100) -> list[Violation]:
        """AUDIT: what Redis shows of a broken invariant (docs/guarantees.md), at most `cap` members per check
        (then one ``(N more)`` entry). A snapshot: confirm with a second one what persists (``confirmed``)."""
        flat = await self._runner.eval_raw(self._audit, [self.keys.processing, self.keys.leases, self.keys.budget],
                                    [self.keys.task_prefix, cap])
        pairs = zip(flat[0::2], flat[1::2], strict=True)
        return [Violation(AuditCheck(bytes(c).decode()), as_text(m)) for c, m in pairs]

    async def audit_turn(self, worker: str, *, period_s: float) -> tuple[bool, AuditRecord | None]:
        """Whether it is `worker`'s turn to audit (nobody's turn for `period_s` before it: it takes it, SET NX),
        and the last turn's record. One round trip of two O(1) commands."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(k.audit_turn, worker, nx=True, px=max(1, int(period_s * 1000)))
            pipe.hgetall(k.audit)
            took, fields = await pipe.execute()
        return bool(took), AuditRecord.parse(fields or {})

    async def publish_audit(self, seen: Sequence[Violation], previous: AuditRecord | None, *, worker: str,
                            ttl_s: float) -> list[Violation]:
        """A turn's audit: what it saw that the turn before saw too is confirmed (a step in progress shows in
        one snapshot only); the record keeps those counts and a digest of everything seen. Returns the
        confirmed violations."""
        before = previous.seen if previous else frozenset()
        confirmed_now = [v for v in seen if violation_digest(v) in before]
        fields: dict[str, Any] = {c.value: sum(1 for v in confirmed_now if v.check is c) for c in AuditCheck}
        fields |= {"by": worker, "at": repr(time.time()), "seen": " ".join(violation_digest(v) for v in seen)}
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(self.keys.audit, mapping=fields)
            pipe.pexpire(self.keys.audit, max(1, int(ttl_s * 1000)))
            await pipe.execute()
        return confirmed_now

    async def dead_letters(self, start: int = 0, count: int = 100) -> list[DeadLetter]:
        raws = await self._runner.raw("LRANGE", self.keys.dead, start, start + count - 1)
        return [DeadLetter.parse(as_text(r)) for r in raws]

    async def requeue_dead(self, letter: DeadLetter, *, ttl: int) -> bool | None:
        """Put a dead letter's task back on pending (attempts reset). True when requeued, False when the entry
        is gone (requeued or purged meanwhile), None when there is nothing to requeue: the task's body has
        expired (TASK_TTL_SECONDS), or the payload was never a storable task (a raw payload is kept only as a
        redacted view)."""
        k = self.keys
        if letter.id and valid_task_id(letter.id) and letter.legacy_raw is None:
            item, tid = letter.id, letter.id
            mode, body = ("body", letter.legacy_body) if letter.legacy_body is not None else ("stored", "")
        elif letter.legacy_raw is not None:
            item, tid, mode, body = letter.legacy_raw, NO_TASK_ID, "raw", ""
        else:
            return None
        done = int(await self._requeue_dead(keys=[k.dead, k.pending, k.task(tid), k.result(tid)],
                                            args=[letter.raw, item, mode, ttl, body]))
        return None if done < 0 else bool(done)

    # the debugging window: excerpts of fingerprinted payloads, kept only while the operator asks
    async def keep_excerpt(self, sha256: str, excerpt: str) -> bool:
        """While a debugging window is open (``{q}:keep-raw``), keep the redacted excerpt of the payload with this
        fingerprint for the rest of the window; else nothing. True when kept."""
        return bool(int(await self._keep_excerpt(keys=[self.keys.keep_raw, self.keys.raw(sha256)], args=[excerpt])))

    async def open_raw_window(self, seconds: int) -> None:
        """Open (or move the end of) the debugging window: `seconds` from now (OPEN_RAW_WINDOW, server time)."""
        await self._open_raw_window(keys=[self.keys.keep_raw], args=[seconds])

    async def close_raw_window(self) -> int:
        """Close the window and delete every excerpt it kept; returns how many were deleted."""
        await as_awaitable(self.redis.delete(self.keys.keep_raw))
        names = [n async for n in self.redis.scan_iter(match=_glob_escape(self.keys.raw_prefix) + "*", count=1000)]
        for i in range(0, len(names), 500):  # one slot (the hash tag): a multi-key DEL is fine on a Cluster
            await as_awaitable(self.redis.delete(*names[i:i + 500]))
        return len(names)

    async def raw_window(self) -> float | None:
        """Seconds left in the debugging window; None when it is closed."""
        left_ms = int(await as_awaitable(self.redis.pttl(self.keys.keep_raw)))
        return left_ms / 1000 if left_ms > 0 else None

    async def excerpt(self, sha256: str) -> str | None:
        """The excerpt a debugging window kept of the payload with this fingerprint, while it lasts."""
        return str_or_none(await as_awaitable(self.redis.get(self.keys.raw(sha256))))

    async def purge_dead(self) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.dead)
            pipe.delete(self.keys.dead)
            count, _ = await pipe.execute()
        return int(count)
