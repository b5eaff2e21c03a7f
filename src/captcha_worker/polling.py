"""When to poll res.php: each kind's solve time as this process sees it (:class:`LatencyModel`) and the poll
schedules made from it (:class:`PollSchedule`; :class:`FallbackSchedule` in pingback mode). Pure arithmetic, no
I/O: the API client polls by it, the planner and the benchmarks replay it (docs/benchmarks.md, P4 and P5)."""

from __future__ import annotations

import math
import random

from captcha_worker import methods


class LatencyModel:
    """A kind's solve time as this process sees it: a mean and a standard deviation that start from the
    methods table and then follow the solves observed (exponentially weighted; the last ~25 weigh most).

    A solve is observed when a poll finds its answer: it became ready since the previous poll, so the sample is
    the midpoint of that gap. The first poll only tells that it was ready *by then* (a censored sample); taking
    half a standard deviation before it matches the expected ready time of those early answers when the model is
    right, and keeps the estimate from drifting later (which would make first-poll hits more frequent).
    """

    def __init__(self, mean_s: float, stddev_s: float, alpha: float = 0.04) -> None:
        self.mean = mean_s
        self.var = stddev_s**2
        self.alpha = alpha
        self.observed = 0

    @property
    def stddev(self) -> float:
        return max(math.sqrt(self.var), 0.05 * self.mean)

    def observe_found(self, elapsed_s: float, previous_poll_s: float | None) -> None:
        """A poll `elapsed_s` after the submission found the answer; the poll before it (None: there was none)
        was at `previous_poll_s`."""
        gap = self.stddev if previous_poll_s is None else elapsed_s - previous_poll_s
        self.observe(max(elapsed_s - gap / 2, 0.0))

    def observe(self, seconds: float) -> None:
        delta = seconds - self.mean
        self.mean = max(self.mean + self.alpha * delta, 1e-3)
        self.var = (1 - self.alpha) * (self.var + self.alpha * delta * delta)
        self.observed += 1


class PollSchedule:
    """When to call res.php: the first poll one standard deviation before the expected solve time, then every
    half standard deviation (1 to 2.5 s) until the tail (mean + 2.5 sd), then every 5 s; ±5 % jitter.

    Latency before calls: the plan's threads are what users pay for, and a worker holds its thread from the
    moment an answer is ready until it fetches it, so polls are dense where answers arrive (docs/benchmarks.md,
    P4, measures the trade-off against the seed design's fixed 5 s). `scale` divides the bounds (it pairs with
    the simulator's --speed); mean and stddev are in the same scaled seconds.
    """

    MIN_INTERVAL_S = 1.0
    MAX_INTERVAL_S = 2.5
    TAIL_INTERVAL_S = 5.0
    # dense: while tasks wait for a plan thread, a thread whose answer is ready but not yet fetched is work not
    # done (P5), so polls start earlier and come about twice as often
    DENSE_FIRST_SD = 1.5
    DENSE_INTERVAL_SD = 0.2
    DENSE_MIN_INTERVAL_S = 0.5
    DENSE_MAX_INTERVAL_S = 1.0

    def __init__(self, mean_s: float, stddev_s: float, scale: float = 1.0, *, dense: bool = False) -> None:
        if dense:
            low, high, first_sd, per_sd = (self.DENSE_MIN_INTERVAL_S / scale, self.DENSE_MAX_INTERVAL_S / scale,
                                           self.DENSE_FIRST_SD, self.DENSE_INTERVAL_SD)
        else:
            low, high, first_sd, per_sd = self.MIN_INTERVAL_S / scale, self.MAX_INTERVAL_S / scale, 1.0, 0.5
        self.first = max(mean_s - first_sd * stddev_s, low)
        self.interval = min(max(stddev_s * per_sd, low), high)
        self.tail_after = mean_s + 2.5 * stddev_s
        self.tail_interval = self.TAIL_INTERVAL_S / scale

    @classmethod
    def for_kind(cls, kind: methods.Kind, scale: float = 1.0) -> PollSchedule:
        """The schedule from the methods table alone (before anything was observed)."""
        return cls(kind.solve_mean_s / scale, kind.solve_stddev_s / scale, scale)

    def delay(self, poll_number: int, elapsed: float) -> float:
        """Seconds to wait before poll `poll_number` (0-based), `elapsed` seconds after the submission."""
        if poll_number == 0:
            base = max(self.first - elapsed, 0.0)  # a resumed solve may be past its first poll already
        else:
            base = self.interval if elapsed < self.tail_after else self.tail_interval
        return base * (0.95 + 0.1 * random.random())


class FallbackSchedule(PollSchedule):
    """Pingback mode's polls, the fallback for a lost callback: none until the tail of the solve-time distribution
    (mean + 2.5 sd), then every 5 s (scaled); ±5 % jitter."""

    def __init__(self, mean_s: float, stddev_s: float, scale: float = 1.0) -> None:
        super().__init__(mean_s, stddev_s, scale)
        self.first = max(self.tail_after, self.MIN_INTERVAL_S / scale)
        self.interval = self.tail_interval
