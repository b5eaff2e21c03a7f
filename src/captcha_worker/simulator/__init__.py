"""A CaptchaAI-compatible simulator: ``/in.php``, ``/res.php`` and ``/solve.php`` of the v1 protocol, for demos,
staging and load tests that must not spend plan threads. Real client libraries (the official ``captchaai``
SDK, 2captcha-python, python-rucaptcha, the npm 2captcha client) run against it unchanged: docs/compatibility.md.

What it models
--------------
* **The protocol** (:mod:`.protocol`, shared with anything else that speaks it): GET, form, multipart and JSON
  requests, ``json=1`` or plain replies, the spellings CaptchaAI accepts. Which task kinds exist, their required
  parameters, the error a missing one produces, the answer shape and the typical latency come from
  :mod:`captcha_worker.methods`; the codes and their ``error_text`` from :mod:`captcha_worker.codes`.
* **Checks** (:mod:`.checks`): images (base64, size limits, file extension, PNG/JPEG/GIF content), proxies, grid
  sizes, image text rules, pingback URLs.
* **One plan.** The simulator models *one* account: ``threads`` plan threads shared by every accepted key
  (several keys behave like sub-keys of that account; ``threadsinfo`` reports the shared figures to each).
  A task is bound to the key that submitted it: another key asking for it gets ``ERROR_WRONG_CAPTCHA_ID``.
* **Threads** (:mod:`.scheduler`, pure). A solve occupies a thread from its acceptance until its answer is ready.
  With ``threads`` solves in flight a new submission is, depending on :class:`OverCap`: queued silently (its
  latency starts when a thread frees up: the official SDK's view), or refused with ``ERROR_ZERO_BALANCE``
  (the docs' view), ``ERROR_NO_SLOT_AVAILABLE`` or HTTP 429.
* **Time.** No timer or task per solve: every task has a ``ready_at`` timestamp, running tasks sit in a heap
  ordered by it, queued ones in a FIFO; the state is advanced lazily on every request and on a periodic tick.
* **Latency** per kind: a normal distribution (mean, stddev) truncated to ``[0.1 * mean, mean + 4 * stddev]``,
  divided by ``speed``. Only solve times are scaled: answers stay readable ``retention_seconds`` (10 min) of
  real time, as long as on the real service, whatever the speed (lower it for long, fast load tests).
* **Faults**, each a probability in 0..1 (see :class:`Faults`), and an IP ban after repeated wrong keys
  (:mod:`.bans`; a request with no key at all is not counted).
* **Pingbacks** (:mod:`.pingback`): ``pingback=URL`` is called with ``?id=<id>&code=<answer>`` when solved.
* **Introspection** under ``/_sim/`` (``GET stats``, ``POST reset``, ``GET``/``POST config``): extra paths
  no CaptchaAI client calls; ``SimConfig.introspection=False`` removes them (for a simulator others reach).

Deliberately not modelled: ``res.php?action=get&ids=`` (several ids), image dimension checks, a balance that
decreases.

Nothing secret is logged: no key, proxy, parameter or answer ever reaches a log line or the stats. Log lines go
through :mod:`captcha_worker.log` (logger ``captcha_worker.simulator``, structured fields): start and stop,
config changes, resets, IP bans, failed pingbacks and malformed HTTP requests.

Sections: :mod:`.config`, :mod:`.protocol`, :mod:`.checks`, :mod:`.answers`, :mod:`.scheduler`, :mod:`.bans`,
:mod:`.stats`, :mod:`.faults`, :mod:`.pingback`, :mod:`.app` (the handlers), :mod:`.server`, :mod:`.cli` (flags).
"""

from __future__ import annotations

from captcha_worker.methods import Answer
from captcha_worker.protocols.v1 import Action, ApiRequest, Endpoint
from captcha_worker.simulator.answers import TextRules, make_answer
from captcha_worker.simulator.app import Simulator
from captcha_worker.simulator.checks import check_submission, decode_base64_image
from captcha_worker.simulator.cli import add_arguments, config_from_args, tls_from_args
from captcha_worker.simulator.config import (
    MAX_IMAGE_BYTES,
    MIN_IMAGE_BYTES,
    Fault,
    Faults,
    Latency,
    OverCap,
    SimConfig,
)
from captcha_worker.simulator.scheduler import Meter, Scheduler, SimTask
from captcha_worker.simulator.server import SimulatorServer, serve
from captcha_worker.simulator.stats import SimStats

__all__ = [
    "MAX_IMAGE_BYTES",
    "MIN_IMAGE_BYTES",
    "Action",
    "Answer",
    "ApiRequest",
    "Endpoint",
    "Fault",
    "Faults",
    "Latency",
    "Meter",
    "OverCap",
    "Scheduler",
    "SimConfig",
    "SimStats",
    "SimTask",
    "Simulator",
    "SimulatorServer",
    "TextRules",
    "add_arguments",
    "check_submission",
    "config_from_args",
    "decode_base64_image",
    "make_answer",
    "serve",
    "tls_from_args",
]
