"""What the queue writes to Redis and what its scripts answer, as Python values: the records a worker sends (``Ack``,
``Record``, ``Renewal``, dead-letter entries), the replies it reads back (``Claimed``, ``ClaimReply``, ``Renewed``,
``QueueStats``, ``Lookup``, ``Violation``, ``Report``, ``DeadLetter``) and the parsing of each reply.

Replies are read as bytes where they carry queue items (any bytes are a valid item): ``as_text`` decodes each value
on its own, so one bad item never holds up the others of its batch.
"""

from __future__ import annotations

import enum
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from captcha_worker.store.keys import Text
from captcha_worker.task import Fingerprint, PayloadView, Result

#: no limit of the caller's own (``stats`` from a CLI); a limit registered by a live worker still applies. The
#: scripts' sentinel too (``budget.LUA_CONSTANTS``)
UNLIMITED = -1


@dataclass(frozen=True)
class BudgetState:
    limit: int | None  # the effective limit; None when no live worker registered one (and the caller has none)
    in_use: int

    @classmethod
    def of(cls, limit: int, in_use: int) -> BudgetState:
        return cls(None if limit == UNLIMITED else limit, in_use)


class ClaimFlag(enum.IntEnum):
    """What CLAIM/LEASE found besides the item (the Lua FLAG_* constants, passed from here)."""

    NONE = 0
    DONE = 1  # a result (or a tombstone) for this id exists: solved by an earlier owner, or a repeated push
    ITEM_TOO_LARGE = 2  # a raw item over the size limit: dead-lettered by the script, never read
    BODY_TOO_LARGE = 3  # the stored body is over the size limit (not shipped)


#: values per claimed item in a CLAIM / LEASE reply (lib/lease_item.lua)
CLAIM_FIELDS = 8


class ClaimStop(enum.IntEnum):
    """Why a claim stopped (the CLAIM / LEASE reply's stop reason; the Lua STOP_* constants)."""

    NONE = 0
    FULL = 1  # no budget unit free
    CAPPED = 2  # every waiting task's tenant is at its share (``shares``)


@dataclass(slots=True)  # built per task: no frozen __setattr__ cost
class Claimed:
    item: Text  # exactly what sits in processing (a task id, or a raw payload); for ITEM_TOO_LARGE its SHA-1
    body: Text | None  # task JSON; None for raw items, a missing body, and the flags
    failures: int = 0  # API-side failures so far; for ITEM_TOO_LARGE the item's size in bytes
    deaths: int = 0  # workers that died under the task so far
    flag: ClaimFlag = ClaimFlag.NONE
    unit: str | None = None  # the budget unit the claim took (or found held): None when no API call is to come
    captcha_id: str | None = None  # the solve an earlier owner left running at the API
    captcha_left_s: float | None = None  # how long that id can still be answered (server time; <= 0: no more)

    @property
    def done(self) -> bool:
        return self.flag is ClaimFlag.DONE

    @property
    def attempt(self) -> int:
        """The attempt this claim runs: one more than the API-side failures so far."""
        return self.failures + 1

    @property
    def resumable(self) -> bool:
        return self.captcha_id is not None and (self.captcha_left_s or 0.0) > 0


@dataclass(slots=True)  # built per task: no frozen __setattr__ cost
class ClaimReply:
    """A CLAIM (or LEASE) reply: the items, and the budget as the script saw it."""

    items: list[Claimed]
    budget: BudgetState
    budget_full: bool  # the claim stopped because no unit was free (items are waiting for a plan thread)
    pending: int  # items left waiting (pending and the tenants' waiting lists)
    capped: bool = False  # the claim stopped because every waiting task's tenant is at its share (``shares``)


@dataclass(slots=True)  # built per task: no frozen __setattr__ cost
class Ack:
    item: Text  # as in processing
    result: Result | None  # None: drop the item (its result exists already)
    reply_to: str | None = None
    unit: str | None = None  # the job's budget unit
    hold_s: float = 0.0  # > 0: the solve may run that long at the API (a timeout): the unit stays counted
    worker: str = ""


@dataclass(slots=True)  # built per task: no frozen __setattr__ cost
class Renewal:
    """A job's heartbeat: its item's lease, and the budget unit renewed with it (None: none)."""

    item: Text
    unit: str | None = None


@dataclass(frozen=True)
class Renewed:
    lost: list[Text]  # items not renewed: their lease is gone, or another worker owns their task
    recounted: list[str]  # units that had expired (a stall) and are counted again: their solves run on


@dataclass(slots=True)  # built per task: no frozen __setattr__ cost
class Record:
    """in.php answered: the task's solve is `captcha_id`, answerable `window_s` more seconds."""

    task_id: str
    worker: str
    unit: str
    captcha_id: str
    window_s: float


class RecordOutcome(enum.IntEnum):
    STRAY = 0  # another worker owns the task now: the solve got a unit of its own (budget.stray_unit)
    RECORDED = 1


class AuditCheck(enum.StrEnum):
    """The checks of AUDIT, each a promise of docs/guarantees.md."""

    UNIT_OF_FINISHED_TASK = "unit_of_finished_task"  # a unit kept after its task's outcome, its solve over
    LEASE_OF_FINISHED_TASK = "lease_of_finished_task"  # a lease kept after its task's outcome
    LEASE_WITHOUT_ITEM = "lease_without_item"  # a lease whose item is not in processing
    ITEM_WITHOUT_LEASE = "item_without_lease"  # a processing item no lease covers (the reaper's orphan)


@dataclass(frozen=True)
class Violation:
    check: AuditCheck
    member: Text  # the unit or the item (a raw item as stored: report it with ``item_ref``)


def violation_digest(v: Violation) -> str:
    """A short digest of a violation: what an audit record keeps of each (a raw item's bytes never)."""
    member = v.member.encode("utf-8", "surrogatepass") if isinstance(v.member, str) else v.member
    return hashlib.sha256(v.check.value.encode() + b"\0" + member).hexdigest()[:16]


@dataclass(frozen=True)
class AuditRecord:
    """The last cluster-wide audit (``{q}:audit``): what it confirmed, by check, and digests of all it saw."""

    counts: dict[AuditCheck, int]
    seen: frozenset[str]
    by: str
    at: float

    @staticmethod
    def parse(fields: dict[Any, Any]) -> AuditRecord | None:
        text = {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else str(v))
                for k, v in fields.items()}
        try:
            return AuditRecord({c: int(text.get(c.value, 0)) for c in AuditCheck}, frozenset(text["seen"].split()),
                               text["by"], float(text["at"]))
        except (KeyError, ValueError):
            return None  # none yet (or not one this version wrote): no counts


def confirmed(first: Sequence[Violation], second: Sequence[Violation]) -> list[Violation]:
    """The violations of `second` already in `first`: what persisted between two audits (a step in progress
    shows in one snapshot only)."""
    seen = set(first)
    return [v for v in second if v in seen]


@dataclass(frozen=True)
class QueueStats:
    pending: int
    processing: int
    dead: int
    budget_in_use: int
    workers_alive: int
    budget_limit: int | None = None  # the effective limit; None when no live worker registered one


class Lookup(enum.Enum):
    """What LOOKUP says of an id that has no result (the Lua markers)."""

    QUEUED = "queued"  # pending or being solved
    FINISHED = "finished"  # finished, but its result expired (RESULT_TTL_SECONDS)
    UNKNOWN = ""  # never submitted to this queue, or so long ago that even its tombstone expired


class Verdict(enum.StrEnum):
    """What a producer reports of an answer (res.php reportbad / reportgood)."""

    BAD = "bad"
    GOOD = "good"


@dataclass(frozen=True)
class Report:
    task_id: str
    captcha_id: str
    verdict: Verdict

    @staticmethod
    def parse(raw: Text) -> Report | None:
        try:
            data = json.loads(raw)
            return Report(str(data["id"]), str(data["captcha_id"]), Verdict(data["verdict"]))
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class DeadLetter:
    raw: Text  # the stored entry, needed to requeue/remove it exactly
    id: str | None
    reason: str
    code: str
    attempts: int
    at: float
    view: str | None  # a redacted, bounded view of the payload (a fingerprint's summary for one not an object)
    legacy_body: str | None = None  # entries written before views existed held the body in clear...
    legacy_raw: str | None = None  # ... or the raw payload
    worker_deaths: int = 0
    fingerprint: Fingerprint | None = None  # a payload that is not a JSON object: all that is kept of it

    @staticmethod
    def parse(raw: Text) -> DeadLetter:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise TypeError
            return DeadLetter(raw=raw, id=opt_str(data.get("id")), reason=str(data.get("reason", "")),
                              code=str(data.get("code", "")), attempts=int(data.get("attempts", 0)),
                              at=float(data.get("at", 0)), view=opt_str(data.get("view")),
                              legacy_body=opt_str(data.get("body")), legacy_raw=opt_str(data.get("raw")),
                              worker_deaths=int(data.get("worker_deaths", 0)),
                              fingerprint=Fingerprint.from_json(data.get("fingerprint")))
        except (ValueError, TypeError):
            return DeadLetter(raw=raw, id=None, reason="unreadable dead-letter entry", code="", attempts=0, at=0.0,
                              view=None)


def opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def dead_entry(*, reason: str, code: str, task_id: str | None, view: str | PayloadView | None, attempts: int,
               worker_deaths: int = 0) -> str:
    """A dead-letter entry. `view` must already be redacted (task.payload_view); of a PayloadView the entry keeps
    the text and the fingerprint, never the excerpt (``RedisQueue.keep_excerpt``)."""
    data: dict[str, Any] = {"id": task_id, "reason": reason, "code": code, "attempts": attempts,
                            "worker_deaths": worker_deaths, "at": time.time()}
    if isinstance(view, PayloadView):
        data["view"] = view.text
        if view.fingerprint is not None:
            data["fingerprint"] = view.fingerprint.to_json()
    elif view is not None:
        data["view"] = view
    return json.dumps(data, separators=(",", ":"))


def as_text(value: bytes) -> Text:
    """A raw reply value as Text: str when it is valid UTF-8 (what redis-py would have decoded), else bytes."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def lookup_marker(value: bytes) -> Text | Lookup:
    """A LOOKUP value: a marker, or a result (never equal to a marker: results are JSON objects)."""
    try:
        return Lookup(value.decode())
    except (UnicodeDecodeError, ValueError):
        return as_text(value)


_CLAIM_FLAGS = tuple(ClaimFlag)  # by value (0..3)


def claimed(f: Sequence[Any]) -> Claimed:
    item, body, failures, deaths, flag, unit, captcha, left = f
    return Claimed(as_text(item), None if body is None else as_text(body), int(failures or 0), int(deaths or 0),
                   _CLAIM_FLAGS[int(flag)], str_or_none(unit), str_or_none(captcha),
                   None if left is None else float(left))


def claim_reply(reply: Sequence[Any]) -> ClaimReply:
    limit, in_use, full, pending, flat = reply
    items = [claimed(flat[i:i + CLAIM_FIELDS]) for i in range(0, len(flat), CLAIM_FIELDS)]
    stop = int(full)
    return ClaimReply(items, BudgetState.of(int(limit), int(in_use)), stop == ClaimStop.FULL, int(pending),
                      capped=stop == ClaimStop.CAPPED)


def queue_stats(counts: Sequence[Any]) -> QueueStats:
    pending, processing, dead, in_use, alive, limit = (int(c) for c in counts)
    return QueueStats(pending, processing, dead, in_use, alive, BudgetState.of(limit, in_use).limit)
