"""The dashboard's vocabulary: rows of stat and graph panels, each a list of PromQL queries.

Every query selects one release with :data:`SELECTOR` (the ``namespace`` and ``job`` variables: the workers) or,
for the gateway's metrics, :data:`GATEWAY_SELECTOR` (``namespace`` and ``gateway``); :func:`m`, :func:`rate` and
:func:`quantile` write it (``gateway=True`` for the gateway's), so no query can forget it. Sizes are Grafana grid
units (24 columns); panels flow left to right inside their row and wrap (``build.layout``), so adding a panel or a
row needs no coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "captcha_solver_"
SELECTOR = 'namespace=~"$namespace", job=~"$job"'
GATEWAY_SELECTOR = 'namespace=~"$namespace", job=~"$gateway"'
GRID_COLUMNS = 24


def m(name: str, gateway: bool = False, **labels: str) -> str:
    """``captcha_solver_<name>{<release selector>, label="value"...}``; a value starting with ``~`` or ``!``
    becomes ``=~`` / ``!~``. `gateway`: a metric of the release's gateway."""
    matchers = [GATEWAY_SELECTOR if gateway else SELECTOR]
    for label, value in labels.items():
        op = {"~": "=~", "!": "!~"}.get(value[:1], "=")
        matchers.append(f'{label}{op}"{value.lstrip("~!") if op != "=" else value}"')
    return f"{PREFIX}{name}{{{', '.join(matchers)}}}"


def rate(name: str, window: str = "$__rate_interval", gateway: bool = False, **labels: str) -> str:
    return f"rate({m(name, gateway, **labels)}[{window}])"


def quantile(q: float, histogram: str, by: str = "", gateway: bool = False, **labels: str) -> str:
    """``histogram_quantile`` over a histogram's buckets summed over the release (and ``by`` labels); `labels`
    select the series as in :func:`m`."""
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) ({rate(f'{histogram}_bucket', gateway=gateway, **labels)}))"


@dataclass(frozen=True)
class Q:
    """One query: its legend (Grafana's ``legendFormat``, ``{{label}}`` is a label's value) and PromQL.
    ``right_unit`` puts the series on a right-hand axis in that unit."""

    legend: str
    expr: str
    right_unit: str | None = None


@dataclass(frozen=True)
class _Panel:
    """What every panel has: a title, a description (Grafana's tooltip), its queries, its size and its unit."""

    title: str
    description: str
    queries: tuple[Q, ...]
    w: int = 12
    h: int = 8
    unit: str = "short"


@dataclass(frozen=True)
class Stat(_Panel):
    """A big number (the last value of each query)."""

    w: int = 4
    h: int = 4
    decimals: int | None = None
    red_from: float | None = None  # value from which the number turns red
    sparkline: bool = False  # a range query with the value's history behind it

    kind = "stat"


@dataclass(frozen=True)
class Graph(_Panel):
    """A time series panel."""

    max: float | None = None
    legend: tuple[str, ...] = ("mean", "max")  # the legend table's columns (Grafana reducers)

    kind = "timeseries"


Panel = Stat | Graph


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]
