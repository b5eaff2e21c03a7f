"""A picture of the dashboard without a Grafana: ``python -m dashboards render`` (``make dashboard-png``).

It starts a real demo run (``demo.running_stack``: redis-server, the simulator, worker processes) with a gateway
(``captcha-worker gateway``, two tenants), a real Prometheus (the Debian package) scraping the workers and the
gateway every second with the labels a ServiceMonitor gives, and a producer whose load rises past the plan's
threads and falls again (plus a few tasks no worker can run, for the dead letters; a share of it goes through the
gateway, for the Tenants row). Then every panel of the committed dashboard JSON is drawn where its ``gridPos`` puts
it, each target's PromQL evaluated through ``/api/v1/query_range`` with the variables substituted. ``draw`` is the
part that needs only a Prometheus (tests/test_observability.py draws the lab's dashboard with it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from captcha_worker import demo, prom
from captcha_worker.client import CaptchaQueue
from captcha_worker.queue import as_awaitable

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "charts" / "captcha-solver" / "dashboards" / "captcha-solver.json"
NAMESPACE, JOB, GATEWAY_JOB = "demo", "demo-captcha-solver-worker", "demo-captcha-solver-gateway"
#: the line Prometheus (--log.level=info) prints once its web listener is bound
PROM_LISTENING = re.compile(r'msg="Listening on" address=127\.0\.0\.1:(\d+)')
#: the demo gateway's tenants: name -> (key, threads)
TENANTS = {"team-a": ("DemoTeamA" + "a" * 23, 8), "team-b": ("DemoTeamB" + "b" * 23, 4)}
SCRAPE_S = 1.0
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval at a 1 s scrape: max(4 x scrape, step + scrape)
PALETTE = ("#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A6", "#705DA0", "#508642",
           "#CCA300", "#447EBC", "#C15C17")
BG, PANEL, TEXT, DIM, GRID = "#111217", "#181b1f", "#ccccdc", "#8e8e9e", "#2c3235"
COL_IN, ROW_IN = 0.95, 0.34  # inches per grid column and per grid row unit


@dataclass
class Series:
    legend: str
    times: list[float]
    values: list[float]
    right: bool = False


def substitute(expr: str, namespace: str, job: str, range_s: float, gateway: str = GATEWAY_JOB) -> str:
    return (expr.replace("$namespace", namespace).replace("$job", job).replace("$gateway", gateway)
            .replace("$__rate_interval", RATE_INTERVAL).replace("$__range", f"{max(int(range_s), 1)}s"))


def legend_of(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def panel_series(url: str, panel: dict[str, Any], *, namespace: str, job: str, gateway: str, start: float,
                 end: float) -> list[Series]:
    right = {o["matcher"]["options"] for o in panel["fieldConfig"].get("overrides", [])
             if any(p["id"] == "custom.axisPlacement" and p["value"] == "right" for p in o["properties"])}
    step = max((end - start) / 240, SCRAPE_S)
    out = []
    for t in panel["targets"]:
        expr = substitute(t["expr"], namespace, job, end - start, gateway)
        for r in prom.query_range(url, expr, start=start, end=end, step_s=step):
            points = [(float(ts), float(v)) for ts, v in r["values"] if math.isfinite(float(v))]
            if points:
                name = legend_of(t.get("legendFormat", ""), r["metric"]) or expr
                out.append(Series(name, [p[0] - start for p in points], [p[1] for p in points], name in right))
    return out


# -- drawing ------------------------------------------------------------------------------------------------
TITLE_UNITS, LEGEND_LINE_UNITS = 0.75, 0.42  # grid row units: a panel's title band, one legend line


def _fmt(value: float, unit: str, decimals: int | None = None) -> str:
    if unit == "percentunit":
        return f"{100 * value:.{0 if decimals is None else decimals}f} %"
    suffix = {"s": " s", "reqps": "/s"}.get(unit, "")
    if decimals is not None:
        text = f"{value:,.{decimals}f}"
    elif float(value).is_integer() or abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.3g}"
    return text.replace(",", " ") + suffix


@dataclass(frozen=True)
class Box:
    """A panel's place in figure coordinates, and the height of one grid row unit."""

    x: float
    y: float
    w: float
    h: float
    unit: float

    def band(self, top_units: float, bottom_units: float = 0.0, left: float = 0.004,
             right: float = 0.004) -> tuple[float, float, float, float]:
        """The rectangle left after `top_units` of title, `bottom_units` of legend and the side margins."""
        return (self.x + left, self.y + bottom_units * self.unit,
                self.w - left - right, self.h - (top_units + bottom_units) * self.unit)


def _background(fig: Figure, box: Box, title: str) -> None:
    fig.patches.append(Rectangle((box.x, box.y), box.w, box.h, transform=fig.transFigure,
                                                    facecolor=PANEL, edgecolor=GRID, linewidth=0.8, zorder=-1))
    fig.text(box.x + 0.004, box.y + box.h - 0.4 * box.unit, title, color=TEXT, fontsize=10, fontweight="bold",
             va="center")


def _stat(fig: Figure, box: Box, panel: dict[str, Any], series: list[Series]) -> None:
    ax = fig.add_axes(box.band(TITLE_UNITS, 0.2))
    ax.set_axis_off()
    defaults = panel["fieldConfig"]["defaults"]
    steps = defaults.get("thresholds", {}).get("steps", [])
    if not series:
        ax.text(0.5, 0.5, "No data", color=DIM, ha="center", va="center", fontsize=14, transform=ax.transAxes)
        return
    shown = series[:4]
    for i, s in enumerate(shown):
        value = s.values[-1]
        color = next((st["color"] for st in reversed(steps) if st["value"] is None or value >= st["value"]),
                     "green")
        color = {"green": "#73BF69", "red": "#F2495C"}.get(color, color)
        x = (i + 0.5) / len(shown)
        if panel["options"].get("graphMode") == "area" and len(s.values) > 1:
            spark = ax.inset_axes((0.0, 0.0, 1.0, 0.3))
            spark.fill_between(s.times, s.values, color=color, alpha=0.25, linewidth=0)
            spark.plot(s.times, s.values, color=color, linewidth=1)
            spark.set_ylim(bottom=0)
            spark.set_axis_off()
        ax.text(x, 0.68, _fmt(value, defaults.get("unit", "short"), defaults.get("decimals")), color=color,
                ha="center", va="center", fontsize=22 if len(shown) == 1 else 18, fontweight="bold",
                transform=ax.transAxes)
        ax.text(x, 0.42, s.legend, color=DIM, ha="center", va="center", fontsize=9, transform=ax.transAxes)


def _tick_formatter(unit: str) -> FuncFormatter:
    return FuncFormatter(lambda v, _: _fmt(v, unit, 0 if unit == "percentunit" else None))


def _legend_columns(box: Box) -> int:
    return 1 if box.w < 0.26 else (2 if box.w < 0.45 else 3)


def _graph(fig: Figure, box: Box, panel: dict[str, Any], series: list[Series]) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    unit = defaults.get("unit", "short")
    shown = series[:12]
    cols = _legend_columns(box)
    legend_units = min(math.ceil(len(shown) / cols) * LEGEND_LINE_UNITS + 0.15, 0.45 * box.h / box.unit)
    right = any(s.right for s in shown)
    ax = fig.add_axes(box.band(TITLE_UNITS, legend_units + 0.35, left=0.03, right=0.028 if right else 0.006))
    ax.set_facecolor(PANEL)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.tick_params(colors=DIM, labelsize=7, length=0)
    ax.grid(color=GRID, linewidth=0.6)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v / 60:.0f} min" if v else "0")
    if not shown:
        ax.text(0.5, 0.5, "No data", color=DIM, ha="center", va="center", fontsize=12, transform=ax.transAxes)
        return
    twin = ax.twinx() if right else None
    lines = []
    for i, s in enumerate(shown):
        target = twin if (s.right and twin is not None) else ax
        color = PALETTE[i % len(PALETTE)]
        (line,) = target.plot(s.times, s.values, color=color, linewidth=1.2,
                              label=f"{s.legend}   max {_fmt(max(s.values), unit if target is ax else 'short')}")
        target.fill_between(s.times, s.values, color=color, alpha=0.06, linewidth=0)
        lines.append(line)
    for axis, u in ((ax, unit), (twin, "short")):
        if axis is None:
            continue
        axis.set_ylim(bottom=0, top=defaults.get("max") if axis is ax else None)  # after plotting: autoscaled
        axis.yaxis.set_major_formatter(_tick_formatter(u))
        axis.tick_params(colors=DIM, labelsize=7, length=0)
        for spine in axis.spines.values():
            spine.set_visible(False)
    anchor = (box.x + 0.004, box.y + (legend_units + 0.1) * box.unit)
    fig.legend(handles=lines, loc="upper left", bbox_to_anchor=anchor,
               bbox_transform=fig.transFigure, ncol=cols, fontsize=7, frameon=False, labelcolor=TEXT,
               handlelength=1.2, columnspacing=1.5, borderaxespad=0)


def picture(doc: dict[str, Any], series: dict[str, list[Series]], out: Path, subtitle: str = "") -> None:
    """Draw the dashboard `doc` with each panel's `series` (by title) where its gridPos puts it."""
    panels = doc["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    inches = height * ROW_IN + 0.8
    fig: Figure = plt.figure(figsize=(24 * COL_IN, inches), facecolor=BG)
    top = 1 - 0.8 / inches
    fig.text(0.006, 1 - 0.35 / inches, doc["title"], color=TEXT, fontsize=16, fontweight="bold", va="center")
    fig.text(0.12, 1 - 0.35 / inches, subtitle, color=DIM, fontsize=10, va="center")
    unit = top / height
    for p in panels:
        g = p["gridPos"]
        box = Box(g["x"] / 24 + 0.002, top - (g["y"] + g["h"]) * unit + 0.002, g["w"] / 24 - 0.004,
                  g["h"] * unit - 0.004, unit)
        if p["type"] == "row":
            fig.text(box.x + 0.002, box.y + box.h / 2, p["title"], color=TEXT, fontsize=13, fontweight="bold",
                     va="center")
            continue
        _background(fig, box, p["title"])
        (_stat if p["type"] == "stat" else _graph)(fig, box, p, series.get(p["title"], []))
    fig.savefig(out, dpi=72, facecolor=BG)
    plt.close(fig)


def draw(url: str, out: Path, *, namespace: str, job: str, start: float, end: float, gateway: str = GATEWAY_JOB,
         dashboard: Path = DASHBOARD, subtitle: str = "") -> dict[str, int]:
    """Draw every panel of `dashboard` from Prometheus at `url`; return the number of series per panel title."""
    doc = json.loads(dashboard.read_text())
    series = {p["title"]: panel_series(url, p, namespace=namespace, job=job, gateway=gateway, start=start, end=end)
              for p in doc["panels"] if p["type"] != "row"}
    picture(doc, series, out, subtitle)
    return {title: len(s) for title, s in series.items()}


# -- the demo run -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def prometheus(workdir: Path, ports: list[int], gateway_port: int) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed: scripts/install-tools.sh --only prometheus")
    targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE, "job": JOB, "pod": f"{JOB}-{i}"}}
               for i, port in enumerate(ports)]
    targets.append({"targets": [f"127.0.0.1:{gateway_port}"],
                    "labels": {"namespace": NAMESPACE, "job": GATEWAY_JOB, "pod": f"{GATEWAY_JOB}-0"}})
    (workdir / "targets.json").write_text(json.dumps(targets))
    config = {"global": {"scrape_interval": f"{SCRAPE_S:g}s", "scrape_timeout": "900ms"},
              "scrape_configs": [{"job_name": "demo", "honor_labels": True,
                                  "file_sd_configs": [{"files": [str(workdir / "targets.json")]}]}]}
    (workdir / "prometheus.yml").write_text(json.dumps(config))
    with open(workdir / "prometheus.log", "wb") as log:  # port 0: its `msg="Listening on"` line says which it got
        proc = subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={workdir / 'tsdb'}", "--web.listen-address=127.0.0.1:0",
                                 "--log.level=info"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, url = time.monotonic() + 30, ""
        while True:
            text = (workdir / "prometheus.log").read_text(errors="replace")
            listening = PROM_LISTENING.search(text)
            url = f"http://127.0.0.1:{listening.group(1)}" if listening else ""
            with contextlib.suppress(OSError, prom.PrometheusError):
                if url:
                    prom.query(url, "up")
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {text[-500:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)


#: the producer's load, (seconds, tasks per second): below the plan, past it, then quiet
PROFILE = ((60, 6.0), (60, 16.0), (45, 8.0), (45, 1.0))


async def _through_gateway(session: Any, url: str, tenant: str) -> None:
    fields = {"key": TENANTS[tenant][0], "method": "turnstile", "sitekey": "0x4AAAAAAA", "json": "1",
              "pageurl": "https://example.com/login"}
    async with session.post(f"{url}/in.php", data=fields) as resp:
        await resp.read()


async def _produce(redis_url: str, gateway_url: str) -> None:
    rng = random.Random(17)
    async with CaptchaQueue.from_url(redis_url) as q, aiohttp.ClientSession() as session:
        for phase, (seconds, rate) in enumerate(PROFILE):
            ends = time.monotonic() + seconds
            while time.monotonic() < ends:
                await q.submit_many([demo._pick(rng) for _ in range(max(1, round(rate / 2)))])
                await _through_gateway(session, gateway_url, "team-a" if rng.random() < 0.7 else "team-b")
                if phase == 1 and rng.random() < 0.1:  # raw JSON no worker can run: dead letters
                    await as_awaitable(q.redis.rpush(q.keys.pending, json.dumps({"id": f"bad{rng.random()}",
                                                                                 "method": "hcaptcha"})))
                await asyncio.sleep(0.5)


async def _run(out: Path) -> dict[str, int]:
    ns = argparse.Namespace(threads=20, workers=3, concurrency=8, speed=20.0, unsolvable=0.05)
    os.environ["CAPTCHAAI_MONTHLY_PRICE"] = "30"  # the demo's workers inherit it: the cost panel has a price
    async with demo.running_stack(ns) as (stack, _):
        tenants = {"tenants": [{"name": n, "key": k, "threads": t} for n, (k, t) in TENANTS.items()]}
        gateway = await demo._spawn(stack, "gateway", ["gateway"], {
            "REDIS_URL": stack.redis_url, "GATEWAY_TENANTS": json.dumps(tenants), "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_PORT": "0", "METRICS_HOST": "127.0.0.1", "METRICS_PORT": "0", "LOG_LEVEL": "warning"})
        bound = await demo._listening(stack, "gateway", gateway)  # the ports it got, from its own line
        api_port, gateway_metrics = int(bound["port"]), int(bound["metrics"])
        with tempfile.TemporaryDirectory(prefix="captcha-dashboard-") as d, \
                prometheus(Path(d), stack.metrics_ports, gateway_metrics) as url:
            start = time.time()
            await _produce(stack.redis_url, f"http://127.0.0.1:{api_port}")
            await asyncio.sleep(15)
            end = time.time()
            subtitle = (f"demo run: {ns.workers} workers x {ns.concurrency} slots, a {ns.threads}-thread simulated "
                        f"plan at {ns.speed:g}x speed, load {' -> '.join(f'{r:g}/s' for _, r in PROFILE)}; "
                        f"rendered from Prometheus by dashboards/render.py")
            return await asyncio.to_thread(draw, url, out, namespace=NAMESPACE, job=JOB, start=start, end=end,
                                           subtitle=subtitle)


def main(ns: argparse.Namespace) -> int:
    out = ROOT / "docs" / "img" / "dashboard.png"
    counts = asyncio.run(_run(out))
    empty = [title for title, n in counts.items() if n == 0]
    print(f"dashboards: wrote {out.relative_to(ROOT)} ({len(counts)} panels"
          f"{', no data: ' + ', '.join(empty) if empty else ''})")
    return 1 if empty else 0
