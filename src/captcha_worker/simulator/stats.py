"""The simulator's counters and the snapshot of them that ``GET /_sim/stats`` serves (counts only: no key,
parameter or answer is ever part of them)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from captcha_worker.protocols.v1 import Action, Endpoint
from captcha_worker.simulator.config import Fault


@dataclass
class Counters:
    calls: Counter[Endpoint] = field(default_factory=Counter)
    calls_json: Counter[str] = field(default_factory=Counter)  # JSON-API method -> calls
    actions: Counter[Action] = field(default_factory=Counter)
    faults: Counter[Fault] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # error code -> replies
    submitted: int = 0
    solved: int = 0
    failed: int = 0
    over_cap_rejections: int = 0
    reportbad: int = 0
    reportgood: int = 0
    bad_key: int = 0
    ip_bans: int = 0
    pingbacks_sent: int = 0
    pingbacks_failed: int = 0
    charged_micro: int = 0  # a per-solve profile's charges (micro-units), since the last reset
    charges: int = 0  # solves charged


@dataclass(frozen=True)
class SimStats:
    """A snapshot of the counters (``GET /_sim/stats`` serves :meth:`as_dict`); ``stats["name"]`` works
    too."""

    calls: Mapping[str, int]  # per endpoint
    res_actions: Mapping[str, int]  # per res.php action
    faults: Mapping[str, int]  # injected, per fault
    errors: Mapping[str, int]  # error replies, per code (CAPCHA_NOT_READY included)
    submitted: int  # accepted by in.php (queued ones included)
    solved: int  # finished with an answer
    failed: int  # finished with ERROR_CAPTCHA_UNSOLVABLE
    in_flight: int  # threads in use now
    max_in_flight: int
    threads: int
    queued: int  # tasks that had to wait for a thread (over_cap=queue)
    queue_length: int  # waiting now
    over_cap_rejections: int
    reportbad: int
    reportgood: int
    bad_key: int  # requests rejected for their key
    ip_bans: int  # bans imposed
    pingbacks_sent: int  # pingback GETs answered with a 2xx
    pingbacks_failed: int  # pingback GETs that failed (connection, timeout, non-2xx)
    at_cap_seconds: float  # time during which in_flight >= threads
    busy_thread_seconds: float  # integral of in_flight over time
    window_seconds: float  # observation window: since start or the last reset
    utilisation: float  # busy_thread_seconds / (threads * window_seconds)
    json_calls: Mapping[str, int] = field(default_factory=dict)  # per JSON-API method (createTask, ...)
    profile: str = "captchaai"  # the billing profile
    charged_micro: int = 0  # a per-solve profile's charges since the last reset, micro-units (1450 = 0.00145)
    charges: int = 0  # solves charged since the last reset
    balance_micro: int = 0  # what the account has left (the per-solve charges of its life taken from --balance)

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def __getitem__(self, name: str) -> object:
        return self.as_dict()[name]
