"""`captcha-worker plan`: how many plan threads a workload needs, which plan, and the values to deploy it.

The model (a queueing model, stated so its limits are clear):

* Tasks arrive as a Poisson stream of rate λ (``--rate``, or the observed rate with ``--from-prometheus``).
* A task holds one plan thread (one worker slot) for its *service time*: the kind's solve time plus the poll lag,
  the time between the answer being ready and the worker's ``res.php`` poll that fetches it (``service_time``:
  ``polling.PollSchedule``'s first poll and interval applied to a normal solve time). Solve times per kind are
  the means and standard deviations of the methods table (``methods.py``) or, with ``--from-prometheus``, what
  ``captcha_solver_solve_duration_seconds`` measured (the poll lag is then already in it). The mix of kinds
  gives the service time's mean E[S] and its squared coefficient of variation c² = Var[S] / E[S]².
* T threads are T servers of one FIFO queue: an M/G/T queue. The probability that a task waits is Erlang C,
  C(T, a) with the offered load a = λ·E[S]; the wait of a task that waits is taken as exponential with mean
  (1 + c²)/2 · E[S] / (T − a) (the Allen–Cunneen approximation: exact for exponential service, c² = 1). So the
  p-th percentile wait is 0 when C ≤ 1 − p, else (1 + c²)/2 · E[S] / (T − a) · ln(C / (1 − p)).
* Plus a fixed overhead per task (``OVERHEAD_S``, ``--overhead``): the ``in.php`` and final ``res.php`` round
  trips and writing the result.
* Not modelled: retries (unsolvable resubmits, capacity back-off), bursts beyond Poisson, and autoscaling lag. The
  prediction holds with every worker pod up (``keda.scaledObject.minReplicaCount`` = maxReplicaCount, which the
  values snippet sets): KEDA sizes the pods to what is pending and in flight, so a scaled-down deployment
  queues each arrival past its busy slots until the next poll and a pod start, and waits longer than the model says.

``tests/test_planner.py`` runs a recommended configuration against the simulator and compares the measured p95
wait with the prediction; ``bench/p7_planner.py`` does it at length (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement
from typing import Any

from captcha_worker import methods, prom
from captcha_worker.polling import PollSchedule

MONTH_S = 30 * 86400  # the dashboard's cost month
MAX_RELEASES = 6  # the most plans (API keys, releases) a recommendation combines
#: per task, the thread is also held for the in.php and final res.php round trips and for writing the result;
#: measured against the simulator (docs/benchmarks.md, P7) at 0.5–0.7 s, about two round trips to CaptchaAI
OVERHEAD_S = 0.5


@dataclass(frozen=True)
class Plan:
    name: str
    threads: int
    monthly_price: float


#: CaptchaAI's thread plans (override with --plan NAME=THREADS:PRICE)
PLANS: tuple[Plan, ...] = (Plan("STANDARD", 15, 30.0), Plan("ADVANCE", 50, 90.0), Plan("PREMIUM", 100, 170.0))


@dataclass(frozen=True)
class KindLoad:
    """One kind's share of the tasks and its service time (seconds)."""

    kind: str
    share: float
    mean_s: float
    stddev_s: float


@dataclass(frozen=True)
class Workload:
    rate_per_s: float
    kinds: tuple[KindLoad, ...]
    source: str  # where the figures come from, for the report

    @property
    def mean_s(self) -> float:
        return sum(k.share * k.mean_s for k in self.kinds)

    @property
    def scv(self) -> float:
        """Squared coefficient of variation of the service time of the mix."""
        second = sum(k.share * (k.stddev_s**2 + k.mean_s**2) for k in self.kinds)
        return max(second / self.mean_s**2 - 1.0, 0.0)

    @property
    def load(self) -> float:
        """Offered load: threads busy on average."""
        return self.rate_per_s * self.mean_s

    def split(self, fraction: float) -> Workload:
        return Workload(self.rate_per_s * fraction, self.kinds, self.source)


# -- the queueing model -------------------------------------------------------------------------------------
def erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with c = servers and offered load a (a < c)."""
    if load <= 0:
        return 0.0
    if load >= servers:
        return 1.0
    b = 1.0  # Erlang B by the stable recursion
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return servers * b / (servers - load * (1 - b))


@dataclass(frozen=True)
class Prediction:
    threads: int
    utilisation: float
    p_wait: float  # probability that a task waits at all
    mean_wait_s: float
    p95_wait_s: float


def predict(w: Workload, threads: int, percentile: float = 0.95) -> Prediction:
    a = w.load
    if threads <= a:
        return Prediction(threads, a / threads, 1.0, math.inf, math.inf)
    c = erlang_c(threads, a)
    waiting_mean = (1 + w.scv) / 2 * w.mean_s / (threads - a)  # mean wait of those who wait
    tail = 1 - percentile
    p95 = waiting_mean * math.log(c / tail) if c > tail else 0.0
    return Prediction(threads, a / threads, c, c * waiting_mean, p95)


def threads_needed(w: Workload, target_s: float) -> int:
    threads = max(1, math.floor(w.load) + 1)
    while predict(w, threads).p95_wait_s > target_s:
        threads += 1
    return threads


# -- plans and releases -------------------------------------------------------------------------------------
def concurrency_for(threads: int) -> int:
    """worker.concurrency: the largest divisor of the threads up to 20 that leaves at least two pods (a lost pod
    takes fewer solves with it, a rollout replaces capacity gradually); one pod for a plan too small for that."""
    divisors = [n for n in range(1, min(threads, 20) + 1) if threads % n == 0]
    spread = [n for n in divisors if threads // n >= 2]
    return max(spread or divisors)


@dataclass(frozen=True)
class Release:
    """One plan (one API key), one chart release with its own queue, and its share of the traffic."""

    plan: Plan
    share: float
    concurrency: int
    prediction: Prediction

    @property
    def max_replicas(self) -> int:
        return self.plan.threads // self.concurrency


@dataclass(frozen=True)
class Recommendation:
    workload: Workload
    target_p95_s: float
    threads_needed: int
    releases: tuple[Release, ...]
    single: Release | None = None  # the cheapest single plan that meets the target, when the best uses several

    @property
    def monthly_price(self) -> float:
        return sum(r.plan.monthly_price for r in self.releases)

    @property
    def threads(self) -> int:
        return sum(r.plan.threads for r in self.releases)

    @property
    def cost_per_1000(self) -> float:
        return self.monthly_price * 1000 / (self.workload.rate_per_s * MONTH_S)


class PlanError(ValueError):
    """No combination of the plan table meets the target."""


def _candidates(plans: Sequence[Plan]) -> Iterator[tuple[Plan, ...]]:
    for n in range(1, MAX_RELEASES + 1):
        yield from combinations_with_replacement(sorted(plans, key=lambda p: -p.threads), n)


def _releases(w: Workload, combo: tuple[Plan, ...], target_s: float,
              concurrency: int | None) -> tuple[Release, ...] | None:
    total = sum(p.threads for p in combo)
    out = []
    for plan in combo:  # traffic split in proportion to threads: every release runs at the same utilisation
        share = plan.threads / total
        conc = min(concurrency, plan.threads) if concurrency else concurrency_for(plan.threads)
        serving = plan.threads // conc * conc  # a concurrency that does not divide the threads leaves some idle
        pred = predict(w.split(share), serving)
        if pred.p95_wait_s > target_s:
            return None
        out.append(Release(plan, share, conc, pred))
    return tuple(out)


def recommend(w: Workload, target_p95_s: float, plans: Sequence[Plan] = PLANS,
              concurrency: int | None = None) -> Recommendation:
    """The cheapest plan — or combination of plans, one release each, when no single plan suffices — whose
    predicted p95 wait meets the target; ties go to fewer releases, then more threads."""
    if not plans:
        raise PlanError("the plan table is empty")
    best: tuple[float, int, int, tuple[Release, ...]] | None = None
    for combo in _candidates(plans):
        price = sum(p.monthly_price for p in combo)
        if best is not None and price > best[0]:
            continue
        releases = _releases(w, combo, target_p95_s, concurrency)
        if releases is not None:
            key = (price, len(combo), -sum(p.threads for p in combo), releases)
            if best is None or key[:3] < best[:3]:
                best = key
    if best is None:
        raise PlanError(f"{MAX_RELEASES} of the largest plan ({max(p.threads for p in plans)} threads) do not "
                        f"meet a p95 wait of {target_p95_s:g} s: add a larger plan with --plan NAME=THREADS:PRICE")
    single = None
    if len(best[3]) > 1:
        fits = [r[0] for p in sorted(plans, key=lambda p: (p.monthly_price, -p.threads))
                if (r := _releases(w, (p,), target_p95_s, concurrency)) is not None]
        single = fits[0] if fits else None
    return Recommendation(w, target_p95_s, threads_needed(w, target_p95_s), best[3], single)


# -- overflow instead of a bigger plan ----------------------------------------------------------------------
@dataclass(frozen=True)
class Peak:
    """When the modelled rate (``--rate``) is the peak: it lasts `hours` a day, the rest of the day runs at
    `base_rate_per_s` (``--base``, ``--peak-hours``; the default is a flat load, the peak all day)."""

    hours: float
    base_rate_per_s: float


@dataclass(frozen=True)
class OverflowOption:
    """A plan (or combination) smaller than the peak's, with what it cannot serve within the target sent to the
    per-solve providers: `serves_per_s` is the most it serves within the p95 target, the excess at the providers'
    price (the work of routing on a deadline, ``deadline``)."""

    plans: tuple[Plan, ...]
    serves_per_s: float
    overflow_per_month: float  # solves
    overflow_monthly: float  # money

    @property
    def plan_monthly(self) -> float:
        return sum(p.monthly_price for p in self.plans)

    @property
    def total_monthly(self) -> float:
        return self.plan_monthly + self.overflow_monthly


@dataclass(frozen=True)
class OverflowComparison:
    price_per_1000: float  # the mix's price at the providers
    peak: Peak
    peak_monthly: float  # the recommendation's plan(s), sized for the peak
    best: OverflowOption | None  # the cheapest smaller plan + overflow; None: no plan is smaller

    @property
    def cheaper(self) -> bool:
        return self.best is not None and self.best.total_monthly < self.peak_monthly

    def break_even_hours(self, w: Workload) -> float | None:
        """The hours of peak a day at which `best` costs what the peak's plan does (None: no such hours)."""
        b = self.best
        if b is None:
            return None
        per_hour = (max(0.0, w.rate_per_s - b.serves_per_s) - max(0.0, self.peak.base_rate_per_s - b.serves_per_s)) \
            * 3600 * MONTH_S / 86400 * self.price_per_1000 / 1000  # the overflow cost of one more hour of peak a day
        flat = b.plan_monthly + b.overflow_monthly - per_hour * self.peak.hours  # what a day without peak costs
        if per_hour <= 0:
            return None
        hours = (self.peak_monthly - flat) / per_hour
        return hours if 0 <= hours <= 24 else None


def serves_within(w: Workload, threads: int, target_s: float) -> float:
    """The largest arrival rate (per s) of `w`'s mix that `threads` serve within the p95 target (bisection)."""
    lo, hi = 0.0, threads / w.mean_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if predict(Workload(mid, w.kinds, w.source), threads).p95_wait_s <= target_s:
            lo = mid
        else:
            hi = mid
    return lo


def mix_price_per_1000(w: Workload, prices: Mapping[str, float]) -> float:
    """The providers' price of 1,000 solves of `w`'s mix (`prices` per kind; "*" for any kind)."""
    missing = [k.kind for k in w.kinds if k.kind not in prices and "*" not in prices]
    if missing:
        raise ValueError(f"--overflow-price has no price for {', '.join(missing)}")
    return sum(k.share * prices.get(k.kind, prices.get("*", 0.0)) for k in w.kinds)


def compare_overflow(rec: Recommendation, prices: Mapping[str, float], peak: Peak,
                     plans: Sequence[Plan] = PLANS, concurrency: int | None = None) -> OverflowComparison:
    """Plan sized for the peak (`rec`) against each cheaper plan (or combination, as ``recommend`` builds them) plus
    overflow for what it cannot serve within the target, at every hour (the peak's `hours` a day at the peak rate,
    the rest at the base); the cheapest of those is `best`."""
    w, price = rec.workload, mix_price_per_1000(rec.workload, prices)
    month_days = MONTH_S / 86400
    serves_of: dict[Plan, float] = {}
    for plan in plans:
        conc = min(concurrency, plan.threads) if concurrency else concurrency_for(plan.threads)
        serves_of[plan] = serves_within(w, plan.threads // conc * conc, rec.target_p95_s)
    options = []
    for combo in _candidates(plans):
        if sum(p.monthly_price for p in combo) >= rec.monthly_price:
            continue
        # one release per plan, the traffic split by threads as ``recommend`` splits it: the rate the combination
        # serves is the one at which its most loaded release reaches the target
        threads = sum(p.threads for p in combo)
        serves = min(serves_of[p] * threads / p.threads for p in combo)
        excess = (max(0.0, w.rate_per_s - serves) * peak.hours
                  + max(0.0, peak.base_rate_per_s - serves) * (24 - peak.hours)) * 3600 * month_days
        options.append(OverflowOption(combo, serves, excess, excess * price / 1000))
    best = min(options, key=lambda o: (o.total_monthly, len(o.plans)), default=None)
    return OverflowComparison(price, peak, rec.monthly_price, best)


def parse_prices(specs: Sequence[str]) -> dict[str, float]:
    """``--overflow-price``: ``PER_1000`` (every kind) or ``KIND=PER_1000`` pairs (repeatable, comma-separated)."""
    prices: dict[str, float] = {}
    for spec in (s.strip() for text in specs for s in text.split(",") if s.strip()):
        kind, _, value = spec.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"--overflow-price {spec!r}: expected PER_1000 or KIND=PER_1000, e.g. turnstile=1.45")
        prices[kind or "*"] = number
    return prices


# -- workloads ----------------------------------------------------------------------------------------------
def _phi(z: float) -> float:
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def _cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def service_time(kind: methods.Kind) -> tuple[float, float]:
    """Mean and standard deviation of how long a task of `kind` holds its thread: the solve time T ~ N(μ, σ) of
    the methods table until the poll that fetches the answer. The schedule (``polling.PollSchedule``) polls first
    at a = μ − σ, then every δ: an answer ready before a is fetched at a, a later one half an interval after it is
    ready on average (uniform over δ). So S = max(T, a) + U·δ for T > a, U uniform on [0, 1]. (The tail polls
    every 5 s after μ + 2.5σ, for 0.6 % of the answers, are left out.)"""
    mu, sd = kind.solve_mean_s, kind.solve_stddev_s
    schedule = PollSchedule.for_kind(kind)
    a, d = schedule.first, schedule.interval
    if sd == 0:
        return max(mu, a) + (d / 2 if mu > a else 0.0), (d / math.sqrt(12) if mu > a else 0.0)
    z = (a - mu) / sd
    early, late = _cdf(z), 1 - _cdf(z)
    m1 = a * early + mu * late + sd * _phi(z)  # E[max(T, a)]
    m2 = a * a * early + (mu * mu + sd * sd) * late + sd * (mu + a) * _phi(z)  # E[max(T, a)²]
    late_t = mu * late + sd * _phi(z)  # E[T; T > a]
    mean = m1 + late * d / 2
    second = m2 + d * late_t + late * d * d / 3  # E[S²] with U independent of T
    return mean, math.sqrt(max(second - mean * mean, 0.0))


def from_methods(rate_per_s: float, mix: Mapping[str, float], overhead_s: float = OVERHEAD_S) -> Workload:
    """A workload whose service times are the methods table's solve times until the poll that fetches them, plus
    `overhead_s` per task."""
    total = sum(mix.values())
    kinds = []
    for name, weight in mix.items():
        mean, sd = service_time(methods.by_name(name))
        kinds.append(KindLoad(name, weight / total, mean + overhead_s, sd))
    return Workload(rate_per_s, tuple(kinds), f"solve times from methods.py + poll lag + {overhead_s:g} s overhead")


def _by_method(result: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for r in result:
        value = float(r["value"][1])
        if r["metric"].get("method") in methods.KIND_NAMES and math.isfinite(value):
            out[r["metric"]["method"]] = value
    return out


def _bucket_stddev(result: list[dict[str, Any]], method: str, mean: float) -> float:
    """Standard deviation from a histogram's cumulative buckets (each count at its bucket's midpoint)."""
    edges = sorted((float(r["metric"]["le"]), float(r["value"][1])) for r in result
                   if r["metric"].get("method") == method and r["metric"]["le"] != "+Inf")
    var, lower, below, total = 0.0, 0.0, 0.0, 0.0
    for upper, cumulative in edges:
        count = max(cumulative - below, 0.0)
        var += count * ((lower + upper) / 2 - mean) ** 2
        total += count
        lower, below = upper, cumulative
    return math.sqrt(var / total) if total > 0 else 0.0


def _selector(*matchers: str) -> str:
    return "{" + ", ".join(m for m in matchers if m) + "}"


def from_prometheus(url: str, matchers: str, window: str) -> Workload:
    """The observed workload: finished tasks per second by kind and their solve times (first in.php call to the
    answer, so the poll lag is in them) over `window`. `matchers` select the release, e.g.
    ``namespace="captcha", job="solver-captcha-solver-worker"`` (empty: every release Prometheus scrapes)."""
    hist = "captcha_solver_solve_duration_seconds"
    finished = _selector(matchers, 'outcome=~"solved|error|expired"')
    done = _by_method(prom.query(url, f"sum by (method) (rate(captcha_solver_tasks_total{finished}[{window}]))"))
    sums = _by_method(prom.query(url, f"sum by (method) (rate({hist}_sum{_selector(matchers)}[{window}]))"))
    counts = _by_method(prom.query(url, f"sum by (method) (rate({hist}_count{_selector(matchers)}[{window}]))"))
    buckets = prom.query(url, f"sum by (method, le) (rate({hist}_bucket{_selector(matchers)}[{window}]))")
    rate = sum(done.values())
    if rate <= 0:
        raise ValueError(f"no finished tasks in the last {window} at {url} (matchers: {matchers or 'none'})")
    kinds = [KindLoad(name, r / rate, sums[name] / counts[name], 0.0) for name, r in done.items()
             if r > 0 and counts.get(name, 0) > 0]
    if not kinds:
        raise ValueError(f"no solve times in the last {window} at {url}")
    share = sum(k.share for k in kinds)
    kinds = [KindLoad(k.kind, k.share / share, k.mean_s, _bucket_stddev(buckets, k.kind, k.mean_s)) for k in kinds]
    return Workload(rate, tuple(kinds), f"observed by Prometheus over {window}")


# -- parsing ------------------------------------------------------------------------------------------------
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_rate(text: str) -> float:
    """``20000/h``, ``5.5/s``, ``300/min``, ``480000/d`` -> tasks per second."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*/\s*([a-z]+)\s*", text.lower())
    if not m or m.group(2) not in _UNITS or float(m.group(1)) <= 0:
        raise ValueError(f"--rate {text!r}: expected a positive number per s, min, h or d, e.g. 20000/h")
    return float(m.group(1)) / _UNITS[m.group(2)]


def parse_duration(text: str) -> float:
    """``30s``, ``2m``, ``45`` (seconds) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|sec|m|min|h)?\s*", text.lower())
    if not m:
        raise ValueError(f"{text!r}: expected a duration like 30s or 2m")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_mix(text: str) -> dict[str, float]:
    """``turnstile=0.7,recaptcha_v2=0.3`` -> shares by kind (weights need not add up to 1)."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if name not in methods.KIND_NAMES:
            raise ValueError(f"--mix: unknown kind {name!r} (known: {', '.join(methods.KIND_NAMES)})")
        try:
            weight = float(value) if sep else -1.0
        except ValueError:
            weight = -1.0
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"--mix {part!r}: expected KIND=SHARE with a positive share")
        mix[name] = mix.get(name, 0.0) + weight
    if not mix:
        raise ValueError("--mix needs at least one KIND=SHARE")
    return mix


def parse_plans(specs: Sequence[str]) -> tuple[Plan, ...]:
    """``NAME=THREADS:PRICE`` (repeatable or comma-separated) -> the plan table that replaces :data:`PLANS`."""
    plans = []
    for spec in (s.strip() for text in specs for s in text.split(",") if s.strip()):
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)=([0-9]+):([0-9]*\.?[0-9]+)", spec)
        if not m or int(m.group(2)) < 1:
            raise ValueError(f"--plan {spec!r}: expected NAME=THREADS:MONTHLY_PRICE, e.g. PREMIUM=100:170")
        plans.append(Plan(m.group(1), int(m.group(2)), float(m.group(3))))
    return tuple(plans)


# -- output -------------------------------------------------------------------------------------------------
def _mix_text(w: Workload) -> str:
    return ", ".join(f"{k.kind} {100 * k.share:.0f} %" for k in w.kinds)


def _seconds(value: float) -> str:
    return "∞" if not math.isfinite(value) else f"{value:.1f} s"


def values_snippet(rec: Recommendation, release: Release, index: int) -> str:
    """A values.yaml for one release of the recommendation."""
    share = f"{100 * release.share:.0f} % of " if len(rec.releases) > 1 else ""
    lines = [f"# captcha-worker plan: {release.plan.name} for {share}"
             f"{rec.workload.rate_per_s * 3600:.0f} tasks/h ({_mix_text(rec.workload)}), "
             f"predicted p95 wait {_seconds(release.prediction.p95_wait_s)}",
             "captchaai:", f"  threads: {release.plan.threads}", f"  monthlyPrice: {release.plan.monthly_price:g}",
             "worker:", f"  concurrency: {release.concurrency}"]
    if len(rec.releases) > 1:
        lines += ["queue:", f"  name: captcha-{index + 1}  # one queue per plan (API key): split the traffic"]
    lines += ["keda:", "  scaledObject:",
              f"    # every pod up (= maxReplicaCount floor({release.plan.threads} / {release.concurrency})): the "
              "prediction assumes all threads serve;",
              "    # 0 scales to zero when idle, at the price of longer waits while KEDA adds pods",
              f"    minReplicaCount: {release.max_replicas}"]
    return "\n".join(lines) + "\n"


def _release_text(r: Release) -> str:
    p = r.prediction
    share = f", {100 * r.share:.0f} % of the traffic" if r.share < 1 else ""
    idle = (f" ({r.plan.threads - p.threads} threads never used: {r.concurrency} does not divide {r.plan.threads})"
            if p.threads < r.plan.threads else "")
    return (f"{r.plan.name} {r.plan.threads} threads{share}: worker.concurrency {r.concurrency}{idle}, "
            f"maxReplicaCount {r.max_replicas}, utilisation {100 * p.utilisation:.0f} %, "
            f"P(wait) {100 * p.p_wait:.0f} %, mean wait {_seconds(p.mean_wait_s)}, p95 wait {_seconds(p.p95_wait_s)}")


def report(rec: Recommendation, overflow: OverflowComparison | None = None) -> str:
    w = rec.workload
    lines = [
        f"workload      {w.rate_per_s * 3600:.0f} tasks/h ({w.rate_per_s:.2f}/s): {_mix_text(w)}",
        f"service time  mean {w.mean_s:.1f} s, c² {w.scv:.2f} ({w.source})",
        f"load          {w.load:.1f} threads busy on average (λ·E[S])",
        f"target        p95 queue wait ≤ {rec.target_p95_s:g} s (model: M/G/c, Erlang C with the Allen–Cunneen "
        "correction)",
        f"needed        {rec.threads_needed} threads "
        f"(p95 wait {_seconds(predict(w, rec.threads_needed).p95_wait_s)} at {rec.threads_needed})",
        f"plan          {' + '.join(r.plan.name for r in rec.releases)}: {rec.threads} threads, "
        f"{rec.monthly_price:g}/month, {rec.cost_per_1000:.4f} per 1 000 solves",
    ]
    for i, r in enumerate(rec.releases):
        lines.append(f"release {i + 1}     {_release_text(r)}")
    if len(rec.releases) > 1:
        lines.append("              several plans = several API keys, one release and queue each; producers split "
                     "the traffic in these shares")
        lines.append(f"one release   {_release_text(rec.single)}, {rec.single.plan.monthly_price:g}/month"
                     if rec.single else "one release   no single plan in the table meets the target")
    if overflow is not None:
        lines += _overflow_lines(rec, overflow)
    lines.append("")
    lines.append("\n---\n".join(values_snippet(rec, r, i) for i, r in enumerate(rec.releases)).rstrip())
    return "\n".join(lines)


def _overflow_lines(rec: Recommendation, c: OverflowComparison) -> list[str]:
    w, pk = rec.workload, c.peak
    load = (f"{w.rate_per_s * 3600:.0f} tasks/h all day" if pk.hours >= 24 else
            f"{w.rate_per_s * 3600:.0f} tasks/h for {pk.hours:g} h a day, {pk.base_rate_per_s * 3600:.0f} tasks/h "
            "the rest")
    lines = [f"overflow      at {c.price_per_1000:.4f} per 1 000 solves (the mix at the providers), {load}",
             f"  peak plan   {' + '.join(r.plan.name for r in rec.releases)}: {c.peak_monthly:g}/month"]
    b = c.best
    if b is None:
        return [*lines, "  smaller     no plan in the table is cheaper than the peak's"]
    lines.append(f"  smaller     {' + '.join(p.name for p in b.plans)} {sum(p.threads for p in b.plans)} threads "
                 f"({b.plan_monthly:g}/month, serves "
                 f"{b.serves_per_s * 3600:.0f} tasks/h within the target) + overflow {b.overflow_per_month:,.0f} "
                 f"solves/month ({b.overflow_monthly:.2f}/month) = {b.total_monthly:.2f}/month")
    verdict = (f"  cheaper     the smaller plan + overflow, by {c.peak_monthly - b.total_monthly:.2f}/month"
               if c.cheaper else
               f"  cheaper     the peak plan, by {b.total_monthly - c.peak_monthly:.2f}/month")
    even = c.break_even_hours(w)
    if even is not None:
        verdict += f" (break-even at {even:.1f} h of peak a day)"
    return [*lines, verdict]


def as_dict(rec: Recommendation, overflow: OverflowComparison | None = None) -> dict[str, Any]:
    w = rec.workload
    out = {
        "workload": {"rate_per_hour": w.rate_per_s * 3600, "source": w.source, "mean_service_s": w.mean_s,
                     "scv": w.scv, "load_threads": w.load,
                     "mix": {k.kind: {"share": k.share, "mean_s": k.mean_s, "stddev_s": k.stddev_s}
                             for k in w.kinds}},
        "target_p95_wait_s": rec.target_p95_s, "threads_needed": rec.threads_needed, "threads": rec.threads,
        "monthly_price": rec.monthly_price, "cost_per_1000_solves": rec.cost_per_1000,
        "releases": [{"plan": r.plan.name, "threads": r.plan.threads, "monthly_price": r.plan.monthly_price,
                      "traffic_share": r.share, "concurrency": r.concurrency, "max_replicas": r.max_replicas,
                      "utilisation": r.prediction.utilisation, "p_wait": r.prediction.p_wait,
                      "mean_wait_s": r.prediction.mean_wait_s, "p95_wait_s": r.prediction.p95_wait_s,
                      "values_yaml": values_snippet(rec, r, i)} for i, r in enumerate(rec.releases)],
    }
    if overflow is not None:
        out["overflow"] = _overflow_dict(w, overflow)
    return out


def _overflow_dict(w: Workload, c: OverflowComparison) -> dict[str, Any]:
    b = c.best
    return {"price_per_1000": c.price_per_1000, "peak_hours_per_day": c.peak.hours,
            "base_rate_per_hour": c.peak.base_rate_per_s * 3600, "peak_plan_monthly": c.peak_monthly,
            "smaller": None if b is None else {
                "plans": [p.name for p in b.plans], "threads": sum(p.threads for p in b.plans),
                "plan_monthly": b.plan_monthly, "serves_per_hour": b.serves_per_s * 3600,
                "overflow_solves_per_month": b.overflow_per_month, "overflow_monthly": b.overflow_monthly,
                "total_monthly": b.total_monthly},
            "cheaper": "overflow" if c.cheaper else "peak_plan", "break_even_peak_hours": c.break_even_hours(w)}
