"""The queue as a worker and its jobs use it: ``WorkerQueue``, the interface ``worker.Worker`` and ``job.Host``
depend on (SAQ's ``Queue`` is the model). ``queue.RedisQueue`` implements it; ``worker.redis_queue`` (which
``worker.open_worker`` calls) builds one, and nothing else on the worker side names the concrete type.

It lists exactly the operations ``worker.py`` and ``job.py`` call, no more (tests/test_docs.py checks both ways:
a call outside it, or a member nobody calls, fails). The producer's, the gateway's and the operator's operations
(push, lookup, stats, dead letters, the debugging window, shares) are ``RedisQueue``'s alone. What each step does
in Redis is the transition table in ``queue.py``'s header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from captcha_worker.config import DEFAULT_DEAD_LETTER_MAX, DEFAULT_MAX_TASK_BYTES
from captcha_worker.store.keys import Text
from captcha_worker.store.records import (
    UNLIMITED,
    Ack,
    AuditRecord,
    ClaimReply,
    QueueStats,
    Record,
    RecordOutcome,
    Renewal,
    Renewed,
    Report,
    Violation,
)
from captcha_worker.task import Result

__all__ = ["WorkerQueue"]


class WorkerQueue(Protocol):
    """One queue's operations as the worker runtime (claimer, heartbeat, reaper, audit, reports) and the path of
    one job (outcomes, RECORD/ACK batches) call them."""

    # claiming (the claimer) -----------------------------------------------------------------------------------
    @property
    def folds_claims(self) -> bool:
        """Whether `write_batch_and_claim` may be used (no durable writes, no Cluster client)."""
        ...

    async def claim_reply(self, n: int, *, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                          dead_max: int = DEFAULT_DEAD_LETTER_MAX, compat_list: str | None = None, worker: str = "",
                          limit: int = UNLIMITED, no_unit: bool = False) -> ClaimReply:
        """CLAIM: up to `n` items, leased, each task with its budget unit (`no_unit`: none, an overflow claim)."""
        ...

    async def claim_blocking(self, *, timeout_s: float, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                             dead_max: int = DEFAULT_DEAD_LETTER_MAX, worker: str = "",
                             limit: int = UNLIMITED) -> ClaimReply | None:
        """BLMOVE + LEASE: wait up to `timeout_s` for one item (None: nothing came)."""
        ...

    async def peek_pending(self, n: int) -> list[tuple[str, str | None]]:
        """The first `n` task ids of pending with their bodies (read only: what routing on a deadline reads)."""
        ...

    async def claim_late(self, items: Sequence[str], *, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                         dead_max: int = DEFAULT_DEAD_LETTER_MAX, worker: str = "",
                         limit: int = UNLIMITED) -> ClaimReply:
        """CLAIM_LATE: the named ids still pending, leased without budget units (a per-solve provider's)."""
        ...

    # this worker in the queue (the heartbeat) -------------------------------------------------------------------
    async def heartbeat(self, worker_id: str, *, limit: int, limit_alive_s: float = 30.0,
                        alive_s: float = 60) -> QueueStats:
        """HEARTBEAT: this worker alive with the limit it enforces (in place of any other of its own); the
        queue's stats."""
        ...

    async def renew(self, items: Sequence[Text | Renewal], *, lease_s: float, worker: str = "") -> Renewed:
        """RENEW: the leases of `worker`'s items, each with its budget unit."""
        ...

    async def forget_worker(self, worker_id: str) -> None:
        """FORGET: a worker leaving: its heartbeat and every limit entry of its own go."""
        ...

    async def drop_unit(self, task_id: str, unit: str, *, worker: str) -> bool:
        """UNIT_DROP: a job gives its plan-thread unit back (a per-solve provider solves it)."""
        ...

    # one job's steps and outcomes ---------------------------------------------------------------------------------
    async def adopt(self, raw: Text, task_id: str, body: str, *, ttl: int) -> bool | None:
        """ADOPT: a raw item becomes a task hash, its id at the front of pending."""
        ...

    async def last_error(self, task_id: str) -> str | None:
        """The task's last API-side failure, as RELEASE recorded it."""
        ...

    async def write_batch(self, acks: Sequence[Ack], records: Sequence[Record], *, result_ttl: int,
                          reply_ttl: int) -> tuple[list[bool], list[RecordOutcome]]:
        """RECORDs, then one ACK call for all the acks, in one round trip."""
        ...

    async def write_batch_and_claim(
            self, acks: Sequence[Ack], records: Sequence[Record], *, result_ttl: int, reply_ttl: int, claim_n: int,
            lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES, dead_max: int = DEFAULT_DEAD_LETTER_MAX,
            worker: str = "", limit: int = UNLIMITED,
    ) -> tuple[tuple[list[bool], list[RecordOutcome]] | Exception, ClaimReply | None]:
        """`write_batch`, then a CLAIM of up to `claim_n` items, in one round trip (only while `folds_claims`)."""
        ...

    async def ack(self, item: Text, result: Result | None, *, reply_to: str | None = None, result_ttl: int = 0,
                  reply_ttl: int = 0, unit: str | None = None, worker: str = "") -> bool:
        """ACK one item (None: drop it, a result exists)."""
        ...

    async def bury(self, item: Text, entry: str, *, result: Result | None, reply_to: str | None,
                   dead_max: int, result_ttl: int, reply_ttl: int, raw: bool = False, unit: str | None = None,
                   hold_s: float = 0.0, worker: str = "") -> tuple[bool, bool]:
        """BURY: dead-letter an item (and answer its producer when the id is known)."""
        ...

    async def release(self, item: Text, *, failure: bool, front: bool, last_error: str = "", worker: str = "",
                      unit: str | None = None, hold_s: float = 0.0, captcha_id: str | None = None) -> bool:
        """RELEASE: a claimed item back on pending, its solve's unit held while it may still run."""
        ...

    async def keep_excerpt(self, sha256: str, excerpt: str) -> bool:
        """KEEP_EXCERPT: a dead payload's redacted excerpt, while the debugging window is open."""
        ...

    async def write_seed_result(self, task_id: str, entry: str, *, ttl: int) -> None:
        """SEED_RESULT: the result in the seed guide's `captcha:results` hash (COMPAT_RESULTS_HASH)."""
        ...

    # upkeep (the reaper, the audit, reports) ---------------------------------------------------------------------
    async def reap(self, *, orphan_grace_s: float, limit: int = 1000) -> tuple[int, int]:
        """REAP: expired leases and stale orphans back to pending; (expired, orphaned)."""
        ...

    async def audit_turn(self, worker: str, *, period_s: float) -> tuple[bool, AuditRecord | None]:
        """Whether it is `worker`'s turn to audit, and the last turn's record."""
        ...

    async def audit(self, *, cap: int = 100) -> list[Violation]:
        """AUDIT: one snapshot of what breaks an invariant."""
        ...

    async def publish_audit(self, seen: Sequence[Violation], previous: AuditRecord | None, *, worker: str,
                            ttl_s: float) -> list[Violation]:
        """A turn's audit, confirmed against the turn before; the confirmed violations."""
        ...

    async def take_reports(self, n: int) -> list[Report]:
        """Up to `n` queued report_bad / report_good requests, removed (the caller sends them)."""
        ...
