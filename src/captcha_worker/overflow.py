"""A paid solve at a per-solve provider under the spend cap (issue 27): reserve the price in Redis
(:mod:`captcha_worker.spend`), solve, settle. Only the ``res.php`` protocol (2captcha, rucaptcha) so far: it is the
CaptchaAI v1 client (:class:`captcha_worker.captchaai.CaptchaAI`) pointed at the provider's URL with its key.

Every submission is its own reservation (``<provider>:<task id>:<round>``): an UNSOLVABLE answer that is resubmitted
is a second charge. What a round is settled at:

=============================================  ===========================================================
outcome                                        settled at
=============================================  ===========================================================
an answer                                      the price
ERROR_CAPTCHA_UNSOLVABLE                       0 when the provider refunds it (``refund_unsolvable``), else the price
any other error before in.php gave an id       0 (nothing was submitted, nothing charged)
any other error after in.php gave an id        left to expire: charged at the price (the provider may have)
=============================================  ===========================================================

A reservation the cap refuses raises :class:`OverCap` before anything is sent to the provider. The worker's job
(``job.JobRunner._solve_paid``) routes tasks here (docs/operations.md "Cost and overflow").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from captcha_worker import methods, metrics
from captcha_worker.captchaai import CaptchaAI, OnSubmit, Solution, SolveStats, TaskFailed
from captcha_worker.codes import Code
from captcha_worker.config import ProviderConfig, ProvidersConfig
from captcha_worker.spend import MICRO, Cap, Reservation, Spend

#: rounds tried under new reservation ids when an id is already taken (a retried or resumed task)
_MAX_IDS = 8
#: a reservation outlives its solve's window by this much before it expires into a charge
_EXPIRY_MARGIN_S = 60.0


class OverCap(Exception):
    """The spend cap has no room for this solve (this hour's or this day's window)."""

    def __init__(self, reservation: Reservation) -> None:
        super().__init__(f"spend cap reached ({reservation.outcome})")
        self.reservation = reservation


@dataclass(frozen=True)
class PaidSolution:
    solution: Solution
    provider: str
    cost_micro: int  # what this task was charged in all (every round)


class Overflow:
    """Paid solves at the configured providers; `clients` maps a provider's name to its open client."""

    def __init__(self, spend: Spend, config: ProvidersConfig, clients: Mapping[str, CaptchaAI]) -> None:
        self.spend, self.config, self.clients = spend, config, clients
        self.cap = Cap(hour=config.cap_hour_micro, day=config.cap_day_micro)

    def provider_for(self, kind: str) -> ProviderConfig | None:
        """The provider that takes `kind` (a res.php one: the only protocol solved so far), or None."""
        return next((p for p in self.config.providers if kind in p.kinds and p.protocol == "res.php"
                     and p.name in self.clients), None)

    async def solve(self, task_id: str, provider: ProviderConfig, kind: methods.Kind, method: str,
                    params: Mapping[str, str], *, deadline: float, unsolvable_retries: int = 1) -> PaidSolution:
        """Reserve, solve at `provider`, settle, per round; raises OverCap, or what CaptchaAI.solve raises."""
        api, price = self.clients[provider.name], provider.price_micro(kind.name)
        ttl_s = api.solve_window(kind) + _EXPIRY_MARGIN_S
        label = f"{provider.name}|{kind.name}"
        total, rounds, n = 0, unsolvable_retries + 1, 0
        for round_ in range(rounds):
            rid, n = await self._reserve(provider, task_id, n, price=price, ttl_s=ttl_s, label=label)
            stats = SolveStats()
            submitted: list[str] = []
            note: OnSubmit = _recorder(submitted)
            try:
                solution = await api.solve(kind, method, params, deadline=deadline, unsolvable_retries=0,
                                           stats=stats, on_submit=note)
            except TaskFailed as exc:
                if exc.code == Code.ERROR_CAPTCHA_UNSOLVABLE:
                    total += await self._settle(rid, 0 if provider.refund_unsolvable else price, label)
                    if round_ < rounds - 1:
                        continue
                elif not submitted:
                    await self._settle(rid, 0, label)
                raise
            except Exception:
                if not submitted:
                    await self._settle(rid, 0, label)
                raise  # submitted: the reservation expires into a charge at the price
            total += await self._settle(rid, price, label)
            return PaidSolution(solution, provider.name, total)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _reserve(self, provider: ProviderConfig, task_id: str, n: int, *, price: int, ttl_s: float,
                       label: str) -> tuple[str, int]:
        """A fresh reservation id's reservation (an id already used by an earlier owner is skipped: its solve
        may have been charged); returns (id, the next id number)."""
        for i in range(n, n + _MAX_IDS):
            rid = f"{provider.name}:{task_id}:{i}"
            r = await self.spend.reserve(rid, price, cap=self.cap, ttl_s=ttl_s, label=label)
            if r.outcome == "reserved":
                return rid, i + 1
            if r.outcome in ("over_hour", "over_day"):
                raise OverCap(r)
        raise OverCap(Reservation("over_day", 0, 0))  # pragma: no cover - _MAX_IDS earlier owners of one task

    async def _settle(self, rid: str, cost: int, label: str) -> int:
        settled = await self.spend.settle(rid, cost)
        if settled.outcome in ("settled", "corrected"):
            provider, kind = label.split("|", 1)
            metrics.COST.labels(provider, kind).inc(settled.charged / MICRO)
        return settled.charged


def _recorder(ids: list[str]) -> OnSubmit:
    """An on_submit that records the ids in.php gave (a round with none submitted nothing to be charged for)."""
    def note(captcha_id: str, _window_s: float) -> None:
        ids.append(captcha_id)
    return note
