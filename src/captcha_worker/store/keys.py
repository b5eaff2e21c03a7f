"""Every Redis key of a queue, in one place: ``Keys`` names them all (a key named anywhere else is a bug).

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
``{q}:limits``             zset    ``<limit>:<worker>`` / ``<limit>:hold:<holder>`` -> expiry: the limit each
                                   live worker enforces, and each hold; the smallest one is the budget
                                   (``budget``).
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from captcha_worker.task import valid_task_id

#: a value read from Redis as it is stored: decoded when it is valid UTF-8, else the bytes themselves
Text = str | bytes


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


def task_id_of(item: Text) -> str:
    """The task id an item is, or NO_TASK_ID for a raw payload."""
    return NO_TASK_ID if is_raw_item(item) else cast(str, item)


def item_ref(item: Text) -> str:
    """A loggable reference to a queue item: the id, or the size of a raw payload (which may hold params)."""
    return f"<raw item, {len(item)} bytes>" if is_raw_item(item) else cast(str, item)
