"""Every Redis key of a queue and its transitions, in one place (each transition's Lua is ``store/lua/<name>.lua``).

Keys (queue ``q``, default ``captcha``).  All share the hash tag ``{q}`` so scripts and BLMOVE work on Redis
Cluster; several queues are several tags.

What a Redis Cluster requires of queues: every call here names keys of one queue only, so each lands on the master
of that queue's slot (the CRC16 of the queue name, the text between the braces). One queue is one slot and so one
master: it scales by adding queues (``QUEUE_NAME``), not by adding shards, and queues whose names hash to
different slots spread over the masters. A key outside the tag (``COMPAT_QUEUE_LIST`` not named ``{q}:...``, the
seed guide's results hash) is a slot of its own: scripts never mix it with the queue's keys but CLAIM's compat
step, which Cluster refuses (CROSSSLOT, see the table). Durable writes (``REDIS_WAIT_REPLICAS``) send their WAIT
to the queue slot's master on the same connection as the write (``connection.on_slot_connection``). Redis does not
replicate its script cache: a promoted replica answers NOSCRIPT, and the script is loaded on the node of the call's
first key and the call sent again (``store.scripts.SlotScript``).

=========================  ======  ==========================================================================
key                        type    meaning
=========================  ======  ==========================================================================
``{q}:pending``            list    Items waiting, FIFO (pushed right, claimed left; priority pushes left).
                                   An item is a task id, or anything else a producer RPUSHed (the raw JSON of
                                   a seed-guide task, or garbage). KEDA trigger 1 counts it.
``{q}:processing``         list    Claimed items. KEDA trigger 2 counts it, so in-flight work keeps pods.
``{q}:leases``             zset    processing item -> lease expiry (Redis server time, seconds).
``{q}:orphans``            zset    processing item without a lease -> when a reaper first saw it.
``{q}:task:<id>``          hash    ``body`` (task JSON); ``failures`` (API-side failures so far: MAX_ATTEMPTS
                                   counts them); ``deaths`` (workers that died or stalled under it:
                                   MAX_WORKER_DEATHS counts them); ``owner`` (the worker holding it now);
                                   ``captcha_id`` and ``captcha_until`` (CaptchaAI's id of the solve in
                                   progress, recorded as soon as in.php answers, and until when that id can
                                   still be answered: a task requeued meanwhile is resumed under it);
                                   ``last_error``; ``state`` (absent while queued; ``done`` / ``dead`` once
                                   finished). TTL ``TASK_TTL_SECONDS`` from submission. ACK drops the body and
                                   keeps the rest as a tombstone (so a late ``result()`` can tell "result
                                   expired" from "unknown id", a second submit of the id is a no-op, and
                                   ``report_bad`` finds the ``captcha_id`` of a solved task); BURY keeps the
                                   body for ``dead-letters requeue``.
``{q}:result:<id>``        string  Result JSON. Written once (SET NX): the first writer wins. TTL.
``{q}:reply:<producer>``   list    Result JSON pushed for the producer process waiting on it. TTL. The
                                   gateway's replicas share one, ``{q}:reply:gateway``: each result reaches
                                   exactly one of them (metrics, callbacks).
``{q}:callback:<id>``      string  A gateway task's ``pingback`` URL, written before its push (SET NX) and
                                   taken (GETDEL) by the gateway replica that receives the result. TTL
                                   ``TASK_TTL_SECONDS``.
``{q}:dead``               list    Dead letters, newest first: JSON ``{id, reason, code, attempts,
                                   worker_deaths, at, view}``; ``view`` is a redacted, bounded view of the
                                   payload (no secret in clear): a JSON object redacted by meaning, anything
                                   else only as its ``fingerprint`` ``{sha256, bytes, classes}``. Capped (LTRIM).
``{q}:keep-raw``           string  The operator's debugging window (``dead-letters keep-raw``): while it exists
                                   (its TTL is the window), a payload dead-lettered as a fingerprint also
                                   keeps a redacted excerpt. Absent by default.
``{q}:raw:<sha256>``       string  That excerpt, of the payload with this fingerprint; TTL the rest of the
                                   window (``keep-raw --off`` deletes them all).
``{q}:budget``             zset    Plan-thread budget: ``t:<task id>`` -> expiry, one unit per solve that may
                                   be running at CaptchaAI (``budget``: taken by the claim, held past a
                                   worker's death or drain while the API may still be solving).
``{q}:limits``             zset    ``<limit>:<worker>`` -> expiry: the limit each live worker enforces; the
                                   smallest one is the budget (``budget``).
``{q}:tenants``            hash    The share table: tenant -> ``"<threads> <reserved>"`` (``shares``),
                                   published whole by the gateway (SHARES). A tenant's in-flight solves are
                                   its budget units (``t:gw:<tenant>:…``).
``{q}:waiting:<tenant>``   list    A tenant's tasks that CLAIM sorted out of pending (``shares``), FIFO; the
                                   claim serves the tenants from them by share. KEDA counts each.
``{q}:workers``            zset    worker id -> last heartbeat (server time).
``{q}:audit-turn``         string  The worker whose turn it is to run AUDIT (SET NX, TTL ``AUDIT_SECONDS``): one
                                   audit per period across the queue's workers, not one per worker.
``{q}:audit``              hash    The last turn's audit: ``by``, ``at``, per check the violations it
                                   confirmed (seen by the turn before too), ``seen`` (digests of all it saw).
                                   TTL 3 x ``AUDIT_SECONDS``. Every worker exports its counts.
``{q}:reports``            list    ``report_bad`` / ``report_good`` requests (JSON ``{id, captcha_id,
                                   verdict}``) a worker sends to CaptchaAI. Capped.
``{q}:pingback:<handle>``  hash    Pingback mode (``pingback``): ``h`` the token's SHA-256 (never the token),
                                   ``w`` the owning worker, ``c`` the captcha id, the callback's answer
                                   (``a``, ``u``, ``i``) until the solve takes it; TTL the solve's window,
                                   60 s once it ended.
``{q}:pingback-wake:<w>``  list    Handles of worker ``<w>``'s solves whose callback came; TTL 60 s.
``{q}:spend:rec``          hash    The spend cap (``spend``): reservation id -> state, amount, charge, window.
``{q}:spend:exp``          zset    Reservation id -> when it expires (charged as reserved) or is forgotten.
``{q}:spend:win``          hash    ``h:<hour>`` / ``d:<day>`` -> micro-units charged + reserved in the window.
``{q}:spend:total``        hash    The ledger: ``<provider>|<kind>`` -> micro-units charged.
``COMPAT_QUEUE_LIST``      list    Optional (off by default): a list seed-guide producers RPUSH raw tasks to
                                   (``captcha:queue``). CLAIM takes from it when pending is empty. Not under
                                   the hash tag unless named so: fine on standalone/Sentinel, CROSSSLOT on
                                   Cluster (the worker then logs it once and serves the queue without it).
=========================  ======  ==========================================================================

An *item* is a task id when it matches ``task.valid_task_id`` (the Lua ``is_id`` pattern is the same rule);
anything else is a raw payload. Items are read as bytes: any bytes are a valid item, and decoding happens per
item in Python (``Claimed``), so one bad item never holds up the others of its batch.

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
release / limit / state`` outside the scripts).

A reaper runs in every worker; REAP is one script, so two reapers never requeue an item twice (LREM decides).
A task requeued while its solve may still be running at CaptchaAI (its worker died, drained past the grace, or
failed its polls) is resumed by its next owner: it polls the recorded captcha id while that id can still be
answered, and submits again only after. An item requeued by a reaper that its old owner still solves may be
solved twice; ACK's SET NX makes the producer see exactly one result. When a claim finds a result (or a
tombstone) already written, the worker acks it unsolved.
"""

from __future__ import annotations

import enum
import hashlib
import json
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from redis import exceptions as rexc
from redis.asyncio import RedisCluster
from redis.client import NEVER_DECODE

from captcha_worker import budget, shares
from captcha_worker.budget import UNLIMITED, Budget, BudgetState
from captcha_worker.codes import Code
from captcha_worker.config import DEFAULT_DEAD_LETTER_MAX, DEFAULT_MAX_TASK_BYTES
from captcha_worker.connection import Client, NotReplicated, note_redirect, on_slot_connection
from captcha_worker.store.scripts import Constant, SlotScript, lua
from captcha_worker.task import MAX_ID_LENGTH, Fingerprint, PayloadView, Result, valid_task_id

T = TypeVar("T")
#: a value read from Redis as it is stored: decoded when it is valid UTF-8, else the bytes themselves
Text = str | bytes
REPORTS_MAX = 10_000  # report requests kept while no worker sends them
ACK_KEYS, ACK_ARGS = 3, 6  # keys and arguments of each ack in an ACK call (after the shared ones)

# -- Lua: one file per transition of the table above (store/lua/<name>.lua, each with its KEYS and ARGV) ------
#: the constants the queue's scripts declare (``--! const``), by their owners
LUA_CONSTANTS: dict[str, Constant] = {**budget.LUA_CONSTANTS, **shares.LUA_CONSTANTS, "MAX_ID": MAX_ID_LENGTH,
                                      "TOO_LARGE": Code.TASK_TOO_LARGE, "ACK_KEYS": ACK_KEYS, "ACK_ARGS": ACK_ARGS}
_PUSH = lua("push", LUA_CONSTANTS)
_CLAIM = lua("claim", LUA_CONSTANTS)
_LEASE = lua("lease", LUA_CONSTANTS)
_RENEW = lua("renew", LUA_CONSTANTS)
_ADOPT = lua("adopt", LUA_CONSTANTS)
_RECORD = lua("record", LUA_CONSTANTS)
_ACK = lua("ack", LUA_CONSTANTS)
_BURY = lua("bury", LUA_CONSTANTS)
_RELEASE = lua("release", LUA_CONSTANTS)
_REAP = lua("reap", LUA_CONSTANTS)
_REQUEUE_DEAD = lua("requeue_dead", LUA_CONSTANTS)
_LOOKUP = lua("lookup", LUA_CONSTANTS)
_STATS = lua("stats", LUA_CONSTANTS)
_HEARTBEAT = lua("heartbeat", LUA_CONSTANTS)
_AUDIT = lua("audit", LUA_CONSTANTS)
_REPORT = lua("report", LUA_CONSTANTS)
_SEED_RESULT = lua("seed_result", LUA_CONSTANTS)
_SHARES = lua("shares", LUA_CONSTANTS)


# -- Python side --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Keys:
    queue: str

    def _k(self, suffix: str) -> str:
        return f"{{{self.queue}}}:{suffix}"

    @property
    def pending(self) -> str:
        return self._k("pending")

    @property
    def processing(self) -> str:
        return self._k("processing")

    @property
    def leases(self) -> str:
        return self._k("leases")

    @property
    def orphans(self) -> str:
        return self._k("orphans")

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def audit_turn(self) -> str:
        return self._k("audit-turn")

    @property
    def audit(self) -> str:
        return self._k("audit")

    @property
    def keep_raw(self) -> str:
        return self._k("keep-raw")

    @property
    def raw_prefix(self) -> str:
        return self._k("raw:")

    def raw(self, sha256: str) -> str:
        return self.raw_prefix + sha256

    @property
    def budget(self) -> str:
        return self._k("budget")

    @property
    def limits(self) -> str:
        return self._k("limits")

    @property
    def workers(self) -> str:
        return self._k("workers")

    @property
    def reports(self) -> str:
        return self._k("reports")

    @property
    def task_prefix(self) -> str:
        return self._k("task:")

    @property
    def result_prefix(self) -> str:
        return self._k("result:")

    def task(self, task_id: str) -> str:
        return self.task_prefix + task_id

    def result(self, task_id: str) -> str:
        return self.result_prefix + task_id

    def reply(self, producer: str) -> str:
        return self._k("reply:") + producer

    def callback(self, task_id: str) -> str:
        return self._k("callback:") + task_id

    @property
    def tenants(self) -> str:
        return self._k("tenants")

    @property
    def waiting_prefix(self) -> str:
        return self._k("waiting:")

    def waiting(self, tenant: str) -> str:
        return self.waiting_prefix + tenant

    def pingback(self, handle: str) -> str:
        """A pingback record (``pingback.Hub``): token hash, owner, and the callback's answer until taken."""
        return self._k(f"pingback:{handle}")

    def pingback_wake(self, worker: str) -> str:
        """Handles of a worker's solves whose callback came (``pingback.Receiver`` pushes, the worker pops)."""
        return self._k(f"pingback-wake:{worker}")

    @property
    def spend_records(self) -> str:
        return self._k("spend:rec")

    @property
    def spend_expiries(self) -> str:
        return self._k("spend:exp")

    @property
    def spend_windows(self) -> str:
        return self._k("spend:win")

    @property
    def spend_totals(self) -> str:
        return self._k("spend:total")

    def own(self, name: str) -> bool:
        """Whether a key name is one of this queue's own keys (under its hash tag)."""
        return name.startswith(self._k(""))


#: the seed guide's results hash, written only when COMPAT_RESULTS_HASH is on (not under the hash tag)
SEED_RESULTS_HASH = "captcha:results"
#: the list the seed guide's producers RPUSH to (COMPAT_QUEUE_LIST, off unless set)
SEED_QUEUE_LIST = "captcha:queue"


def is_raw_item(item: Text) -> bool:
    """A queue item that is not a task id: a raw payload (a seed producer's JSON, or anything else)."""
    return isinstance(item, bytes) or not valid_task_id(item)


#: the task id a script is given for a raw payload: empty, which ``valid_task_id`` refuses (a task may be named
#: "-"), so its keys ``{q}:task:`` and ``{q}:result:`` never hold a task; the scripts that take a task key read it
#: as "no task"
NO_TASK_ID = ""


def _tid(item: Text) -> str:
    """The task id an item is, or NO_TASK_ID for a raw payload."""
    return NO_TASK_ID if is_raw_item(item) else cast(str, item)


def item_ref(item: Text) -> str:
    """A loggable reference to a queue item: the id, or the size of a raw payload (which may hold params)."""
    return f"<raw item, {len(item)} bytes>" if is_raw_item(item) else cast(str, item)


class ClaimFlag(enum.IntEnum):
    """What CLAIM/LEASE found besides the item (the Lua FLAG_* sentinels)."""

    NONE = 0
    DONE = 1  # a result (or a tombstone) for this id exists: solved by an earlier owner, or a repeated push
    ITEM_TOO_LARGE = 2  # a raw item over the size limit: dead-lettered by the script, never read
    BODY_TOO_LARGE = 3  # the stored body is over the size limit (not shipped)


_FIELDS = 8  # values per claimed item in a CLAIM / LEASE reply (_LEASE_ITEM)


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


@dataclass(frozen=True)
class TenantShare:
    """A row of the share table: a tenant's cap and reservation (``shares``)."""

    name: str
    threads: int
    reserved: int = 0

    def value(self) -> str:
        return shares.share_value(self.threads, self.reserved)


@dataclass(frozen=True)
class TenantLoad:
    in_flight: int  # its budget units: solves that may be running at CaptchaAI
    waiting: int  # its tasks in its waiting list (not the ones still in pending)


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
            return DeadLetter(raw=raw, id=_opt_str(data.get("id")), reason=str(data.get("reason", "")),
                              code=str(data.get("code", "")), attempts=int(data.get("attempts", 0)),
                              at=float(data.get("at", 0)), view=_opt_str(data.get("view")),
                              legacy_body=_opt_str(data.get("body")), legacy_raw=_opt_str(data.get("raw")),
                              worker_deaths=int(data.get("worker_deaths", 0)),
                              fingerprint=Fingerprint.from_json(data.get("fingerprint")))
        except (ValueError, TypeError):
            return DeadLetter(raw=raw, id=None, reason="unreadable dead-letter entry", code="", attempts=0, at=0.0,
                              view=None)


def _glob_escape(text: str) -> str:
    """`text` matched literally in a SCAN pattern (a queue name may hold glob characters)."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _opt_str(value: object) -> str | None:
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


def as_awaitable(value: Awaitable[T] | T) -> Awaitable[T]:
    """redis-py types commands as `Awaitable[T] | T` (sync and async share stubs); ours are async."""
    return cast(Awaitable[T], value)


def as_text(value: bytes) -> Text:
    """A raw reply value as Text: str when it is valid UTF-8 (what redis-py would have decoded), else bytes."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


Call = tuple[SlotScript, list[str], list[Any]]


class RedisQueue:
    """One queue's Redis operations. Stateless apart from the registered scripts; safe to share."""

    def __init__(self, redis: Client, name: str, *, wait_replicas: int = 0, wait_timeout_ms: int = 500) -> None:
        """`wait_replicas` > 0: pushes, acks and burials wait for that many replicas (REDIS_WAIT_REPLICAS), or
        raise NotReplicated after `wait_timeout_ms`."""
        self.redis = redis
        self.keys = Keys(name)
        self.wait_replicas, self.wait_timeout_ms = wait_replicas, wait_timeout_ms
        self.budget = Budget(redis, units=self.keys.budget, limits=self.keys.limits)

        # one script per transition of the header's table, registered by name
        self._push = SlotScript(redis, _PUSH)
        self._claim = SlotScript(redis, _CLAIM)
        self._lease = SlotScript(redis, _LEASE)
        self._renew = SlotScript(redis, _RENEW)
        self._adopt = SlotScript(redis, _ADOPT)
        self._record = SlotScript(redis, _RECORD)
        self._ack = SlotScript(redis, _ACK)
        self._bury = SlotScript(redis, _BURY)
        self._release = SlotScript(redis, _RELEASE)
        self._reap = SlotScript(redis, _REAP)
        self._heartbeat = SlotScript(redis, _HEARTBEAT)
        self._report = SlotScript(redis, _REPORT)
        self._requeue_dead = SlotScript(redis, _REQUEUE_DEAD)
        self._stats = SlotScript(redis, _STATS)
        self._lookup = SlotScript(redis, _LOOKUP)
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
        return sum(int(n) for n in await self._run_many(calls, durable=True)) if calls else 0

    async def lookup(self, ids: Sequence[str]) -> list[Text | Lookup]:
        """Per id: its stored result JSON, or what is known of it (one script call for all)."""
        if not ids:
            return []
        keys = [k for i in ids for k in (self.keys.result(i), self.keys.task(i))]
        values = await self._eval_raw(self._lookup, keys, [])
        return [_lookup_marker(v) for v in values]

    async def report(self, task_id: str, verdict: Verdict) -> str | None:
        """Queue a report of a solved task's answer for a worker to send; its captcha id, or None when the task
        has no answer from the API to report (not solved yet, failed, never submitted, or its record expired)."""
        captcha = await self._report(keys=[self.keys.task(task_id), self.keys.reports],
                                     args=[verdict.value, task_id, REPORTS_MAX])
        return _str_or_none(captcha) or None

    async def take_reports(self, n: int) -> list[Report]:
        """Up to n queued reports, oldest first (removed: the caller sends them)."""
        raws = await self._raw("LPOP", self.keys.reports, n)
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
                          limit: int = UNLIMITED) -> ClaimReply:
        """`claim`, with the budget as the script saw it (`limit`: the caller's own, see ``budget``)."""
        k = self.keys
        keys = [k.pending, k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits, k.tenants,
                *([compat_list] if compat_list else [])]
        reply = await self._eval_raw(self._claim, keys,
                                     [n, *self._claim_args(lease_s, max_bytes, dead_max, worker, limit)])
        return _claim_reply(reply)

    async def claim_blocking(self, *, timeout_s: float, lease_s: float, max_bytes: int = DEFAULT_MAX_TASK_BYTES,
                             dead_max: int = DEFAULT_DEAD_LETTER_MAX, worker: str = "",
                             limit: int = UNLIMITED) -> ClaimReply | None:
        """Wait up to timeout_s for one item (BLMOVE), then lease it (None: nothing came)."""
        k = self.keys
        item = await self._raw("BLMOVE", k.pending, k.processing, "LEFT", "RIGHT", timeout_s)
        if item is None:
            return None
        reply = await self._eval_raw(self._lease, [k.processing, k.leases, k.orphans, k.dead, k.budget, k.limits,
                                                   k.pending, k.tenants],
                                     [item, *self._claim_args(lease_s, max_bytes, dead_max, worker, limit)])
        return _claim_reply(reply)

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
            args += (r.item, _tid(r.item), r.unit or "")
        lost, recounted = await self._eval_raw(self._renew, [self.keys.leases, self.keys.budget], args)
        return Renewed([as_text(v) for v in lost], [cast(str, _str_or_none(u)) for u in recounted])

    def _count_keys(self) -> list[str]:
        k = self.keys
        return [k.pending, k.processing, k.dead, k.budget, k.workers, k.limits, k.tenants]

    async def heartbeat(self, worker_id: str, *, limit: int, previous_limit: int | None = None,
                        limit_alive_s: float = 30.0, alive_s: float = 60) -> QueueStats:
        """Record this worker as alive and the limit it enforces (held `limit_alive_s` without a heartbeat);
        returns the queue's stats (one round trip for all)."""
        member = budget.limit_member(worker_id, limit)
        previous = "" if previous_limit is None else budget.limit_member(worker_id, previous_limit)
        k = self.keys
        counts = await self._heartbeat(keys=self._count_keys(),
                                       args=[alive_s, worker_id, member, previous, limit_alive_s, limit,
                                             k.waiting_prefix])
        return _stats(counts)

    async def forget_worker(self, worker_id: str, *, limit: int | None = None) -> None:
        """A worker leaving: its heartbeat and the limit it enforced go (a higher limit may apply at once)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.workers, worker_id)
            if limit is not None:
                pipe.zrem(self.keys.limits, budget.limit_member(worker_id, limit))
            await pipe.execute()

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

    async def write_batch(self, acks: Sequence[Ack], records: Sequence[Record], *, result_ttl: int,
                          reply_ttl: int) -> tuple[list[bool], list[RecordOutcome]]:
        """RECORDs, then one ACK call for all the acks, in one pipelined round trip."""
        k = self.keys
        calls: list[Call] = [(self._record, [k.task(r.task_id), k.budget],
                              [r.worker, r.unit, r.captcha_id, r.window_s]) for r in records]
        if acks:
            keys: list[str] = [k.processing, k.leases, k.budget]
            args: list[Any] = [result_ttl, reply_ttl]
            for a in acks:
                tid = a.result.id if a.result else _tid(a.item)
                captcha = a.result.captcha_id if a.result and a.result.captcha_id else ""
                keys += (k.task(tid), k.result(tid), self._reply_key(a.reply_to, tid))
                args += (a.item, a.result.to_json() if a.result else "", a.worker, a.unit or "", a.hold_s, captcha)
            calls.append((self._ack, keys, args))
        out = await self._run_many(calls, durable=bool(acks)) if calls else []
        won = [bool(w) for w in out[-1]] if acks else []
        return won, [RecordOutcome(int(r)) for r in out[:len(records)]]

    async def _run_many(self, calls: Sequence[Call], *, durable: bool = False) -> list[Any]:
        """Script calls in one pipelined round trip. EVALSHA directly: redis-py would otherwise send a SCRIPT
        EXISTS round trip before every pipeline. On NOSCRIPT (Redis restarted or flushed its scripts, or a
        promoted replica that never had them) the scripts are loaded where the calls go and the batch sent again:
        then no call of the batch has run, as the first one failed. `durable` (with wait_replicas): WAIT after the
        calls, on their connection; NotReplicated when short. A single call that need not wait goes without a
        pipeline (a gateway's in.php pushes one task per request).

        A durable batch is confirmed only by a WAIT on the connection that ran it: on a Cluster it goes on one
        connection to the slot's master (``connection.on_slot_connection``), never through the cluster pipeline,
        which re-sends a WAIT alone, elsewhere, after a connection error. A batch whose connection fails is
        unconfirmed (the error is raised) and its caller runs it again: every durable write is idempotent (a known
        id is not pushed twice, a result is written once, an ACK of an item gone is a no-op)."""
        wait = self.wait_replicas if durable else 0
        if len(calls) == 1 and not wait:
            script, keys, args = calls[0]
            return [await script(keys=keys, args=args)]  # SlotScript: loaded where it runs on NOSCRIPT
        commands: list[tuple[Any, ...]] = [("EVALSHA", script.sha, len(keys), *keys, *args)
                                           for script, keys, args in calls]
        if wait:
            commands.append(("WAIT", wait, self.wait_timeout_ms))
        for attempt in (1, 2):
            replies = await self._send(commands, pinned=bool(wait))
            failed = next((r for r in replies if isinstance(r, Exception)), None)
            if isinstance(failed, rexc.NoScriptError) and attempt == 1:
                for script in {id(c[0]): c[0] for c in calls}.values():  # loaded where the calls go, then again
                    await script.load(self.keys.pending)
                continue
            if isinstance(failed, rexc.MovedError):
                note_redirect(self.redis, failed)
            if failed is not None:
                raise failed
            confirmed = int(replies.pop()) if wait else 0
            if confirmed < wait:
                raise NotReplicated(confirmed, wait, self.wait_timeout_ms)
            return replies
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, commands: Sequence[tuple[Any, ...]], *, pinned: bool) -> list[Any]:
        """Commands in one round trip, each reply or its error reply in its place. `pinned` (a WAIT at the end): on
        a Cluster, on one connection to the queue slot's master, without redis-py's piecemeal retry (see
        ``_run_many``); elsewhere a pipeline is one connection, and redis-py's retry of it sends the whole batch
        again on a new one. Unpinned on a Cluster: the cluster pipeline (its retries resend script calls only)."""
        if pinned and isinstance(self.redis, RedisCluster):
            return await on_slot_connection(self.redis, self.keys.pending, commands)
        async with self.redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    async def _eval_raw(self, script: SlotScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call whose reply is left as bytes (it carries queue items, which may be any bytes)."""
        return await script(keys, args, raw=True)

    async def _raw(self, *args: Any) -> Any:
        """A command whose reply is left as bytes: it carries queue items, which may be any bytes."""
        return await self.redis.execute_command(*args, **{NEVER_DECODE: True})

    async def bury(self, item: Text, entry: str, *, result: Result | None, reply_to: str | None,
                   dead_max: int, result_ttl: int, reply_ttl: int, raw: bool = False, unit: str | None = None,
                   hold_s: float = 0.0, worker: str = "") -> tuple[bool, bool]:
        """Dead-letter an item (and answer its producer with `result` when the id is known). `raw`: the item is
        a raw payload naming `result.id`; a task of that id that exists already is then not answered.
        Returns (buried, answered)."""
        k = self.keys
        tid = result.id if result else _tid(item)
        (done,) = await self._run_many([(
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
        task_key = k.task(_tid(item))
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
        return _str_or_none(await as_awaitable(self.redis.hget(self.keys.task(task_id), "last_error")))

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
        return _stats(await self._stats(keys=self._count_keys(), args=[worker_alive_s, self.keys.waiting_prefix]))

    async def audit(self, *, cap: int = 100) -> list[Violation]:
        """AUDIT: what Redis shows of a broken invariant (docs/guarantees.md), at most `cap` members per check
        (then one ``(N more)`` entry). A snapshot: confirm with a second one what persists (``confirmed``)."""
        flat = await self._eval_raw(self._audit, [self.keys.processing, self.keys.leases, self.keys.budget],
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
        raws = await self._raw("LRANGE", self.keys.dead, start, start + count - 1)
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
        left_ms = int(await as_awaitable(self.redis.pttl(self.keys.keep_raw)))
        if left_ms <= 0:  # -2: no window; -1 (a window without a TTL) is never written: keep nothing then
            return False
        return bool(await as_awaitable(self.redis.set(self.keys.raw(sha256), excerpt, px=left_ms)))

    async def open_raw_window(self, seconds: int) -> None:
        """Open (or move the end of) the debugging window: `seconds` from now."""
        await as_awaitable(self.redis.set(self.keys.keep_raw, str(int(time.time()) + seconds), ex=seconds))

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
        return _str_or_none(await as_awaitable(self.redis.get(self.keys.raw(sha256))))

    async def purge_dead(self) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.dead)
            pipe.delete(self.keys.dead)
            count, _ = await pipe.execute()
        return int(count)


def _lookup_marker(value: bytes) -> Text | Lookup:
    """A LOOKUP value: a marker, or a result (never equal to a marker: results are JSON objects)."""
    try:
        return Lookup(value.decode())
    except (UnicodeDecodeError, ValueError):
        return as_text(value)


_CLAIM_FLAGS = tuple(ClaimFlag)  # by value (0..3)


def _claimed(f: Sequence[Any]) -> Claimed:
    item, body, failures, deaths, flag, unit, captcha, left = f
    return Claimed(as_text(item), None if body is None else as_text(body), int(failures or 0), int(deaths or 0),
                   _CLAIM_FLAGS[int(flag)], _str_or_none(unit), _str_or_none(captcha),
                   None if left is None else float(left))


def _claim_reply(reply: Sequence[Any]) -> ClaimReply:
    limit, in_use, full, pending, flat = reply
    items = [_claimed(flat[i:i + _FIELDS]) for i in range(0, len(flat), _FIELDS)]
    stop = int(full)
    return ClaimReply(items, BudgetState.of(int(limit), int(in_use)), stop == shares.STOP_FULL, int(pending),
                      capped=stop == shares.STOP_CAPPED)


def _stats(counts: Sequence[Any]) -> QueueStats:
    pending, processing, dead, in_use, alive, limit = (int(c) for c in counts)
    return QueueStats(pending, processing, dead, in_use, alive, BudgetState.of(limit, in_use).limit)
