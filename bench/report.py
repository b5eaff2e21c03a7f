"""Rewrite the generated blocks of docs/benchmarks.md from bench/results/*.json: ``python -m bench.report``.

Each block sits between ``<!-- BEGIN GENERATED: name -->`` and ``<!-- END GENERATED: name -->``; everything
outside the markers is prose and is left alone.  ``--check`` exits 1 when the file is not up to date.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import NAMES, RESULTS, ROOT, summary

DOC = ROOT / "docs" / "benchmarks.md"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "–"
    if digits == 0 and abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def med(s: dict[str, Any] | None, digits: int = 0, unit: str = "") -> str:
    """median (min–max) of a summary."""
    if not s or s.get("median") is None:
        return "–"
    if s.get("n", 0) <= 1:
        return f"{num(s['median'], digits)}{unit}"
    return f"{num(s['median'], digits)}{unit} ({num(s['min'], digits)}–{num(s['max'], digits)})"


def ok(flag: bool | None) -> str:
    return "–" if flag is None else ("**met**" if flag else "**missed**")


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# -- blocks -------------------------------------------------------------------------------------------------
def _per_run(res: dict[str, dict[str, Any]], fact: Callable[[dict[str, Any]], str]) -> str:
    """One machine fact; when the runs disagree (the VM changed between them), which run saw which."""
    seen: dict[str, list[str]] = {}
    for name, doc in res.items():
        seen.setdefault(fact(doc["machine"]), []).append(name.split("_")[0].upper())
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{value} ({', '.join(runs)})" for value, runs in seen.items())


def block_machine(res: dict[str, dict[str, Any]]) -> str:
    any_doc = next(iter(res.values()))
    m = any_doc["machine"]
    pk = m["packages"]
    rows = [
        ["CPU", _per_run(res, lambda m: f"{m['cpu_model']}, {m['cpus_usable']} usable cores")],
        ["memory", f"{m['mem_total_gib']} GiB"],
        ["OS", _per_run(res, lambda m: str(m["os"]))],
        ["Python", m["python"]],
        ["redis-server", m["redis_server"]],
        ["packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)],
        ["code", ", ".join(sorted({f"{n.split('_')[0].upper()} {d.get('git_commit_at_start') or m['git_commit']}"
                                   for n, d in res.items()})) + (" (src/ modified)" if m.get("src_dirty") else "")],
    ]
    runs = ", ".join(f"{name.split('_')[0].upper()} {doc['generated_at']} ({doc['duration_s']:.0f} s)"
                     for name, doc in res.items())
    loads = []
    for name, doc in res.items():
        la = doc.get("load_average_1m")
        if la:
            loads.append(f"{name.split('_')[0].upper()} {min(la):.1f}–{max(la):.1f}")
    text = table(["", ""], rows) + f"\n\nRuns: {runs}."
    if loads:
        text += (f"\n\n1-minute load average during the runs (2 cores; other jobs shared the machine): "
                 f"{', '.join(loads)}.")
    return text


def block_summary(res: dict[str, dict[str, Any]]) -> str:
    rows = []
    p1 = res.get("p1_queue_overhead")
    if p1:
        rows += summary_p1(p1)
    p2 = res.get("p2_capacity")
    if p2:
        t = p2["targets"]
        lv = next(x for x in p2["levels"] if x["level"] == t["level"])
        rows.append([f"P2 {t['level']} in flight at ≤ 0.25 core and ≤ 150 MiB",
                     f"{num(lv['cores']['median'], 3)} core, {num(lv['rss_mib']['median'])} MiB, "
                     f"{'held' if lv['sustained'] else 'not held'}",
                     ok(t["p2_ge_1000_in_flight_le_0_25_core_le_150_mib"])])
    p3 = res.get("p3_latency")
    if p3:
        o = p3["ours"]
        rows.append(["P3 p99 ≤ 5 ms both ways",
                     f"pickup {num(o['pickup']['p99_ms']['median'], 1)} ms, delivery "
                     f"{num(o['delivery']['p99_ms']['median'], 1)} ms",
                     ok(p3["targets"]["p3_ours_p99_le_5ms_both_ways"])])
    p4 = res.get("p4_polling")
    if p4:
        mix = p4["monte_carlo"]["mix_equal_thirds"]
        rows.append(["P4 ≤ 0.6× the seed's calls with ≤ 1 s added mean latency (equal mix)",
                     f"{num(mix['calls_ratio'], 2)}×, {num(mix['ours']['added_mean_s'], 2)} s",
                     ok(p4["targets"]["p4_calls_le_0_6x_seed_and_added_le_1s_mix"])])
    p5 = res.get("p5_utilisation")
    if p5:
        t = p5["targets"]
        rows.append(["P5 ≥ 98 % of the time at T in flight",
                     f"{num(100 * p5['at_cap_fraction']['median'], 1)} % (thread utilisation "
                     f"{num(100 * p5['utilisation']['median'], 1)} %)", ok(t["p5_at_cap_ge_98pct"])])
        if "p5_utilisation_ge_95pct" in t:  # issue 12's figure
            rows.append(["P5 ≥ 95 % of paid thread-time busy under backlog (default settings)",
                         f"{num(100 * p5['utilisation']['median'], 1)} %", ok(t["p5_utilisation_ge_95pct"])])
        if "p5_dense_utilisation_ge_95pct" in t:
            dense = p5["modes"]["dense"]
            rows.append(["P5 ≥ 95 % under backlog with POLL_DENSE_WHEN_CONTENDED",
                         f"{num(100 * dense['utilisation']['median'], 1)} % at "
                         f"{num(dense['api_calls_per_solve']['median'], 2)} calls/solve (default: "
                         f"{num(p5['modes']['default']['api_calls_per_solve']['median'], 2)})",
                         ok(t["p5_dense_utilisation_ge_95pct"])])
        rows.append(["P5 0 over-cap requests", f"{num(p5['over_cap_rejections']['max'])}",
                     ok(t["p5_zero_over_cap"])])
    demo = res.get("demo_calls")
    if demo:
        rows.append(["demo (`make demo`, default settings): API calls per solve ≤ 5.2",
                     f"{num(demo['api_calls_per_solve']['median'], 2)} (utilisation "
                     f"{num(demo['utilisation_pct']['median'])} %)",
                     ok(demo["targets"]["demo_calls_per_solve_le_5_2"])])
    p6 = res.get("p6_faults")
    if p6:
        rows.append(["P6 fault storm: p50 ≤ 5 s for 1 s solves, nothing lost",
                     f"p50 {num(p6['storm_p50_s']['median'], 2)} s, p99 {num(p6['storm_p99_s']['median'], 1)} s, "
                     f"lost {sum(r['lost'] for r in p6['runs']['storm'])}",
                     ok(p6["targets"]["p6_storm_p50_le_5s"] and p6["targets"]["p6_nothing_lost"])])
    p8 = res.get("p8_gateway")
    if p8:
        th, lat = p8["throughput"], p8["latency"]
        json_api = (f"; createTask / getTaskResult {num(th['create_task']['rps']['median'])} / "
                    f"{num(th['get_task_result']['rps']['median'])}" if "create_task" in th else "")
        rows.append(["P8 the gateway: requests/s per process (in.php / res.php; the JSON API's createTask / "
                     "getTaskResult), added latency p50 / p99 of a "
                     f"client polling every {p8['params']['poll_every_s']:g} s",
                     f"{num(th['in']['rps']['median'])} / {num(th['res_get']['rps']['median'])}{json_api} req/s; "
                     f"+{num(lat['added_p50_s']['median'], 2)} s / +{num(lat['added_p99_s']['median'], 2)} s",
                     "–"])
    return table(["target", "measured (median)", ""], rows)


def _label(p1: dict[str, Any], name: str | None) -> str:
    return str(p1.get("systems", {}).get(name, {}).get("label", name or ""))


def summary_p1(p1: dict[str, Any]) -> list[list[str]]:
    r = p1["ratios"]
    best, alike = r.get("best_tuned_peer"), r.get("best_peer_keeping_results_acking_after")
    measured = f"{num(r.get('ours_vs_best_tuned_peer'), 2)}× the fastest peer ({_label(p1, best)})"
    if best != alike and alike:
        measured += (f"; {num(r.get('ours_vs_best_peer_keeping_results_acking_after'), 2)}× the fastest that, "
                     f"like ours, stores results and acks after the run ({_label(p1, alike)})")
    return [["P1 tasks/s ≥ 2× the best tuned peer", measured, ok(p1["targets"]["p1_ours_ge_2x_best_tuned_peer"])],
            ["P1 `submit_many` ≥ 10× SAQ's enqueue",
             f"{num(r.get('submit_many_vs_saq_enqueue'), 1)}× (vs 50 concurrent enqueues: "
             f"{num(r.get('submit_many_vs_saq_enqueue_gather50'), 1)}×)",
             ok(p1["targets"]["submit_many_ge_10x_saq_enqueue"])]]


def _short(text: str) -> str:
    """"yes: result key ..." -> "yes"; "after the run (ACK script)" -> "after the run"."""
    return text.split(":", maxsplit=1)[0].split(" (", maxsplit=1)[0]


SUBMIT_LABELS = {
    "ours_submit_many": "ours `submit_many` (500 per script call, pipelined)",
    "ours_submit": "ours `submit`, one by one",
    "saq_enqueue": "SAQ `enqueue`, one by one", "saq_enqueue_gather50": "SAQ `enqueue`, 50 in flight",
    "arq_enqueue_job": "arq `enqueue_job`, one by one", "arq_enqueue_job_gather50": "arq `enqueue_job`, 50 in flight",
    "dramatiq_send": "Dramatiq `send`, one by one",
    "taskiq_list_kiq": "taskiq `kiq`, list broker, one by one",
    "taskiq_list_kiq_gather50": "taskiq `kiq`, list broker, 50 in flight",
    "taskiq_stream_kiq": "taskiq `kiq`, stream broker, one by one",
    "celery_delay": "Celery `delay`, one by one, no result backend",
    "celery_delay_results": "Celery `delay`, one by one, Redis result backend",
}


def p1_tables(p1: dict[str, Any]) -> list[str]:
    th, pt, r, meta = p1["throughput_tasks_per_s"], p1["per_task"], p1["ratios"], p1.get("systems", {})
    rows, does = [], []
    for name, s in th.items():
        m = meta.get(name, {"label": name, "result": "", "ack": "", "traffic": ""})
        scripts = pt[name]["script_calls_per_task"]["median"]
        rows.append([m["label"], med(s), "1.00×" if name == "ours" else f"{num(r.get(f'ours_vs_{name}'), 2)}×",
                     _short(m["result"]), _short(m["ack"]), med(pt[name]["cpu_us_per_task"]),
                     f"{num(pt[name]['commands_per_task']['median'], 1)} ({num(scripts, 2)})",
                     med(pt[name]["redis_cpu_us_per_task"])])
        does.append([m["label"], m["result"], m["ack"], m["traffic"]])
    par = p1["params"]
    return [f"{par['tasks']:,} tasks, one worker process, concurrency {par['concurrency']}, "
            f"{par['repetitions']} repetitions (systems interleaved), same redis-server. Median (min–max).", "",
            table(["system", "tasks/s", "ours ÷ this", "result stored", "acknowledged", "worker CPU µs/task",
                   "Redis commands/task (of them scripts)", "redis-server CPU µs/task"], rows),
            "", "What each does for one task:", "", table(["system", "result", "acknowledged", "Redis traffic"], does)]


def block_p1(p1: dict[str, Any]) -> str:
    pt, par = p1["per_task"], p1["params"]
    out = p1_tables(p1)
    sub = p1["submit_tasks_per_s"]
    srows = []
    sm = sub.get("ours_submit_many", {}).get("median")
    for name, text in SUBMIT_LABELS.items():
        if name in sub:
            ratio = "1.0×" if name == "ours_submit_many" else f"{num(sm / sub[name]['median'], 1)}×" if sm else "–"
            srows.append([text, med(sub[name]), ratio])
    out += ["", "Submit rate (a fresh producer process enqueues the tasks):", "",
            table(["producer", "tasks/s", "`submit_many` ÷ this"], srows)]
    rb, ceil = p1["redis_benchmark_rps"], p1["ceiling_tasks_per_s"]
    ours = pt["ours"]
    rt = ours["round_trips_per_task"]["median"]
    brows = [[k, med(v), num(ceil.get(f"{k}_rps_div_round_trips"))] for k, v in rb.items()]
    out += ["", f"Ceiling: `redis-benchmark -P 1 -c {par['concurrency']}` on the same server; our worker makes "
                f"{num(rt, 3)} client round trips per task (EVALSHA {num(ours['script_calls_per_task']['median'], 3)}"
                f"), so tasks/s ≤ ops/s ÷ {num(rt, 3)}:", "",
            table(["command", "ops/s", "ceiling, tasks/s"], brows)]
    usec = ours["redis_usec_per_task"]["median"]
    if usec:
        out += ["", f"Redis-side, our scripts cost {num(usec, 1)} µs of server time per task "
                    f"(`INFO commandstats`), a single-threaded ceiling of {num(1e6 / usec)} tasks/s. "
                    f"Commands per task, those run inside the Lua scripts included: "
                    + ", ".join(f"{k} {v:g}" for k, v in ours["by_command"].items() if v >= 0.01) + "."]
    return "\n".join(out)


def block_p2(p2: dict[str, Any]) -> str:
    rows = []
    for lv in p2["levels"]:
        rows.append([f"{lv['level']:,}", med(lv["cores"], 3),
                     num(lv.get("idle_cores"), 3) if lv.get("idle_cores") is not None else "–", med(lv["rss_mib"]),
                     f"{num(lv['processing']['min'])} / {num(lv['processing']['median'])}",
                     num(lv["sim_in_flight"]["median"]), num(lv["api_requests_per_s"]),
                     "yes" if lv["sustained"] else "no", med(lv["simulator_cores"], 2)])
    par = p2["params"]
    return "\n".join([
        f"`captcha-worker run`, simulator `--latency {par['latency']} --speed 1`; each level ramps over "
        f"{par['ramp_s']:g} s, settles {par['settle_s']:g} s, then {par['subwindows']} windows of "
        f"{par['subwindow_s']:g} s. Median (min–max) of the windows.", "",
        table(["in flight", "worker CPU, cores", "same worker idle, cores", "worker RSS, MiB", "claimed (min / median)",
               "in flight at the simulator (median)", "API requests/s", "held", "simulator CPU, cores"], rows),
        "", f"Calibration: a bare asyncio process with four timers (0.2, 1, 1, 5 s) and nothing else uses "
            f"{num(p2.get('bare_asyncio_timers_cores'), 3)} cores on this machine.",
        "", "![P2 capacity](img/bench-capacity.png)"])


def block_p3(p3: dict[str, Any]) -> str:
    rows = []
    for system, label in (("ours", "ours (pushed result)"), ("seed", "seed guide (HGET every 1 s)")):
        s = p3[system]
        rows.append([label, med(s["pickup"]["p50_ms"], 2), med(s["pickup"]["p99_ms"], 2),
                     med(s["delivery"]["p50_ms"], 2), med(s["delivery"]["p99_ms"], 1)])
    par = p3["params"]
    out = [f"{par['rate_per_s']:g} tasks/s for {par['duration_s']:g} s, {par['repetitions']} repetitions; "
           f"milliseconds, median (min–max) of the repetitions' percentiles.", "",
           table(["", "pickup p50", "pickup p99", "delivery p50", "delivery p99"], rows)]
    o = p3["ours"]
    if "pickup_to_claimed" in o:
        out += ["", f"Our pickup, split: submit → claimed (push script, BLMOVE wake-up, LEASE script) p50 "
                    f"{med(o['pickup_to_claimed']['p50_ms'], 2)} ms, p99 {med(o['pickup_to_claimed']['p99_ms'], 2)} "
                    f"ms; claimed → solve() p50 {med(o['claimed_to_solve']['p50_ms'], 2)} ms, p99 "
                    f"{med(o['claimed_to_solve']['p99_ms'], 2)} ms."]
    pooled = ", ".join(f"{sys_} {ph} p99 {num(p3[sys_]['pooled'][ph]['p99_ms'], 2)} ms "
                       f"(n={p3[sys_]['pooled'][ph]['samples']})" for sys_ in ("ours", "seed")
                       for ph in ("pickup", "delivery"))
    out += ["", f"All repetitions pooled: {pooled}."]
    return "\n".join(out)


def block_p4(p4: dict[str, Any]) -> str:
    mc = p4["monte_carlo"]
    real = p4.get("real_run") or {"kinds": {}}
    rows = []
    for name, k in mc["kinds"].items():
        o, s = k["ours"], k["seed"]
        rk = real["kinds"].get(name)
        real_txt = "–"
        if rk:
            ro, rs = rk["ours"], rk["seed"]
            real_txt = (f"{num(ro['calls']['median'], 2)} / {num(rs['calls']['median'], 2)}; "
                        f"+{num(ro['added_mean_s']['median'], 2)} / +{num(rs['added_mean_s']['median'], 2)} s")
        sch = k["schedule"]
        rows.append([name, k["latency"], f"{sch['first_poll_s']:g} + {sch['poll_interval_s']:g}·n (learning)",
                     f"{num(o['calls_mean'], 2)} / {num(s['calls_mean'], 2)}", f"{num(k['calls_ratio'], 2)}×",
                     f"{num(o['added_mean_s'], 2)} / {num(o['added_p95_s'], 2)}",
                     f"{num(s['added_mean_s'], 2)} / {num(s['added_p95_s'], 2)}", ok(k["meets_target"]), real_txt])
    mix = mc["mix_equal_thirds"]
    rows.append(["equal mix", "", "", f"{num(mix['ours']['calls_mean'], 2)} / {num(mix['seed']['calls_mean'], 2)}",
                 f"{num(mix['calls_ratio'], 2)}×", f"{num(mix['ours']['added_mean_s'], 2)} / "
                 f"{num(mix['ours']['added_p95_s'], 2)}", f"{num(mix['seed']['added_mean_s'], 2)} / "
                 f"{num(mix['seed']['added_p95_s'], 2)}", ok(mix["meets_target"]), ""])
    out = [f"Monte-Carlo, {mc['samples_per_kind']:,} solves per kind (latency: the simulator's distribution; ours: "
           f"`PollSchedule` + `LatencyModel` from the code, learning from each solve; the schedule column shows "
           f"where it starts, from `methods.py`). Real run: simulator at speed {real.get('speed', '–')}, "
           f"{real.get('tasks_per_kind', '–')} tasks per kind, {real.get('repetitions', '–')} repetitions, medians.",
           "", table(["kind", "latency mean:sd, s", "our schedule, s", "calls/solve ours / seed",
                      "ratio", "ours added mean / p95, s", "seed added mean / p95, s", "target",
                      "real run: calls ours / seed; added ours / seed"], rows)]
    prows = []
    for name, k in mc["kinds"].items():
        for goal, label in (("fewest_calls_with_added_le_1s", "added ≤ 1 s"),
                            ("fewest_calls_with_added_le_seed", "added ≤ seed's"),
                            ("fewest_calls_with_added_le_seed_plus_1s", "added ≤ seed's + 1 s"),
                            ("least_added_with_calls_le_0_6x_seed", "calls ≤ 0.6× seed")):
            g = (k.get("grid_best") or {}).get(goal)
            d = (k.get("optimal_sequence") or {}).get(goal)
            chk = g["checked_with_poll_schedule"] if g else {}
            gtxt = "none on the grid" if g is None else (
                f"{g['first_poll_s']:g} + {g['poll_interval_s']:g}·n: {num(chk['calls_mean'], 2)} calls "
                f"({num(g['calls_ratio'], 2)}×), +{num(chk['added_mean_s'], 2)} s")
            dtxt = "infeasible" if d is None else (
                f"{num(d['calls_mean'], 2)} calls ({num(d['calls_mean'] / k['seed']['calls_mean'], 2)}×), "
                f"+{num(d['added_mean_s'], 2)} s")
            prows.append([name, label, gtxt, dtxt])
    props = mc.get("proposals") or {}
    if props:
        goal_text = {"mix_least_added_with_calls_le_0_6x_seed": "mix ≤ 0.6× the seed's calls, least added latency",
                     "fewest_calls_with_added_le_seed_plus_1s": "at most 1 s slower than the seed, fewest calls",
                     "fewest_calls_with_added_le_seed": "never slower than the seed, fewest calls",
                     "fewest_calls_with_added_le_1s": "added ≤ 1 s, fewest calls"}
        prop_rows = []
        for goal, pr in props.items():
            vals = "; ".join(f"{name} {v['first_poll_s']:g} + {v['poll_interval_s']:g}·n"
                             for name, v in pr["values"].items())
            prop_rows.append([goal_text.get(goal, goal), vals, f"{num(pr['mix']['calls_mean'], 2)} "
                              f"({num(pr['calls_ratio'], 2)}×)", f"{num(pr['mix']['added_mean_s'], 2)} / "
                              f"{num(pr['mix']['added_p95_s'], 2)}"])
        out += ["", "Fixed first + interval·n schedules per kind that the search found for each goal, replayed "
                    "together on the equal mix (with ±5 % jitter):", "",
                table(["goal", "values", "calls/solve (÷ seed)", "added mean / p95, s"], prop_rows)]
    out += ["", "Schedules searched for each goal (grid: first poll and interval in 0.25 s steps, checked again "
                "with ±5 % jitter; DP: the best poll sequence for the distribution, any spacing):", "",
            table(["kind", "goal", "best first + interval·n", "best poll sequence (DP)"], prows)]
    return "\n".join(out)


def _p5_mode_rows(p5: dict[str, Any]) -> list[list[str]]:
    """Calls per solve for each poll mode, and the utilisation of the modes other than the default."""
    modes = p5.get("modes", {})
    rows = []
    for name, m in modes.items():
        env = ", ".join(f"{k}={v}" for k, v in m["env"].items()) or "default settings"
        if name != "default":
            rows.append([f"thread utilisation, {env}", med({k: (100 * v if isinstance(v, float) else v)
                                                            for k, v in m["utilisation"].items()}, 1, " %")])
        rows.append([f"API calls per solve (simulator count), {env}", med(m["api_calls_per_solve"], 2)])
    return rows


def block_p5(p5: dict[str, Any]) -> str:
    par = p5["params"]
    rows = [["time at T in flight (at_cap_seconds ÷ window)", med({k: (100 * v if isinstance(v, float) else v)
                                                                  for k, v in p5["at_cap_fraction"].items()
                                                                  if k != "runs"}, 1, " %")],
            ["thread utilisation (busy thread-seconds ÷ T·window)",
             med({k: (100 * v if isinstance(v, float) else v) for k, v in p5["utilisation"].items() if k != "runs"},
                 1, " %")],
            *_p5_mode_rows(p5),
            ["over-cap requests (ERROR_ZERO_BALANCE)", med(p5["over_cap_rejections"])],
            ["max in flight at the simulator", med(p5["max_in_flight"])],
            ["window (backlog non-empty), s at speed 1", med({k: (v * par["speed"] if isinstance(v, float) else v)
                                                              for k, v in p5["window_s"].items() if k != "runs"})]]
    return "\n".join([
        f"T = {par['threads']}, backlog {par['backlog']:,} {par['kind'].split(' ')[0]} tasks, {par['workers']} worker "
        f"processes × {par['concurrency_per_worker']} slots = {par['slots_total']} > T, simulator and workers at "
        f"speed {par['speed']:g}, over-cap mode {par['over_cap']}; {par['repetitions']} repetitions, median "
        f"(min–max).", "", table(["", ""], rows), "", "![P5 utilisation](img/bench-utilisation.png)"])


def block_p6(p6: dict[str, Any]) -> str:
    par, runs = p6["params"], p6["runs"]
    faults = ", ".join(f"{k} {100 * v:g} %" for k, v in par["faults"].items())

    def row(label: str, key: str, digits: int = 2) -> list[str]:
        return [label] + [med(summary([r[key] for r in runs[name] if r[key] is not None]), digits)
                          for name in ("storm", "no_faults")]

    rows = [row("p50 submit → result, s", "p50_s"), row("p90, s", "p90_s"), row("p99, s", "p99_s"),
            row("max, s", "max_s", 1), row("API calls per solved task", "api_calls_per_task"),
            row("solved", "solved", 0), row("failed", "failed", 0), row("lost (no outcome)", "lost", 0)]
    burst = p6.get("burst_first_report_setup")
    tail = [] if not burst else [
        "", f"First report's setup (fresh workers, {burst['slots']} slots, a {burst['threads']}-thread plan, "
        f"{par['tasks']} tasks at once, the storm from the start; one run): p50 {num(burst['p50_s'], 1)} s, p99 "
        f"{num(burst['p99_s'], 1)} s, lost {burst['lost']}."]
    return "\n".join([
        f"{par['tasks']} turnstile tasks at {par['rate']:g}/s, {par['latency']}; {par['workers']} workers × "
        f"{par['concurrency']} slots, {par['threads']} plan threads, HTTP timeout {par['http_timeout_s']:g} s, slow "
        f"replies held {par['slow_s']:g} s; faults: {faults}; {par['repetitions']} repetitions, median (min–max).",
        "", table(["", "fault storm", "no faults"], rows), *tail])


def block_p7(p7: dict[str, Any]) -> str:
    par = p7["params"]
    rows = []
    for c in p7["cases"]:
        p, band = c["predicted"], c["band_p95_wait_s"]
        rows.append([f"{c['case']['rate']} {c['case']['mix']}", f"{p['threads']} ({p['max_replicas']} × "
                     f"{p['concurrency']})", f"{100 * p['utilisation']:.0f} %",
                     f"{num(p['mean_service_s'], 1)} / {num(c['measured_service_mean_s'], 1)} s",
                     f"{100 * p['p_wait']:.0f} / {100 * c['measured_p_wait']:.0f} %",
                     f"{num(p['mean_wait_s'], 1)} / {num(c['measured_mean_wait_s'], 1)} / "
                     f"{num(c['replayed_mean_wait_s'], 1)} s",
                     f"{num(p['p95_wait_s'], 1)} / {num(c['measured_p95_wait_s'], 1)} / "
                     f"{num(c['replayed_p95_wait_s'], 1)} s",
                     f"{num(band['q5'], 1)}–{num(band['q95'], 1)} s", f"{c['solved']:,}"])
    minutes = (par["duration_s"] - par["warmup_s"]) * par["speed"] / 60
    return "\n".join([
        f"Simulator and workers at speed {par['speed']:g}, {par['duration_s']:g} s per case ({minutes:.0f} minutes of "
        f"traffic after a {par['warmup_s']:g} s warm-up); times in real seconds (measured × speed). Pairs are "
        "predicted / measured; waits are predicted / measured / *replayed* (an ideal FIFO queue of T servers fed "
        "with the run's own arrivals and holding times). *Chance band*: 5–95 % of the p95 over 200 windows of the "
        "same length of the model's own queue (what luck alone does to a run this long).", "",
        table(["workload", "threads (pods × slots)", "utilisation", "holding time", "P(wait)", "mean wait",
               "p95 wait", "chance band of the p95", "tasks"], rows)])


def block_p8(p8: dict[str, Any]) -> str:
    par, th, lat = p8["params"], p8["throughput"], p8["latency"]
    rows = [[f"`{name}`", med(th[key]["rps"]), med(th[key]["gateway_cores"], 2), med(th[key]["cpu_us_per_request"]),
             num(1e6 / th[key]["cpu_us_per_request"]["median"]), med(th[key]["errors"])]
            for key, name in (("in", "in.php"), ("create_task", "createTask"), ("res_get", "res.php?action=get"),
                              ("get_task_result", "getTaskResult")) if key in th]
    lrows = [[label, med(lat[s]["mean_s"], 2, " s"), med(lat[s]["p50_s"], 2, " s"), med(lat[s]["p99_s"], 2, " s"),
              med(lat[s]["samples"])]
             for s, label in (("gateway", f"through the gateway, polling every {par['poll_every_s']:g} s"),
                              ("library", "producer library (`CaptchaQueue.solve`, pushed result)"))]
    added_mean = sorted(g - lib for g, lib in zip(lat["gateway"]["mean_s"]["runs"], lat["library"]["mean_s"]["runs"],
                                                    strict=True))
    added = {"median": added_mean[len(added_mean) // 2], "min": added_mean[0], "max": added_mean[-1],
             "n": len(added_mean)}
    lrows.append(["added by the gateway and its polling", "+" + med(added, 2, " s"),
                  "+" + med(lat["added_p50_s"], 2, " s"), "+" + med(lat["added_p99_s"], 2, " s"), ""])
    return "\n".join([
        f"One gateway process; the load from {par['load_processes']} processes over {par['connections']} keep-alive "
        f"connections for {par['window_s']:g} s per window; {par['repetitions']} repetitions, median (min–max).", "",
        table(["endpoint", "requests/s", "gateway cores busy", "gateway CPU per request, µs",
               "requests/s per core (1 s ÷ CPU per request)", "errors"], rows), "",
        f"{par['clients']} concurrent clients each way for {par['duration_s']:g} s (the first {par['warmup_s']:g} s "
        f"dropped), solves holding a slot {par['solve_hold_s'].replace(':', '–')} s; the gateway used "
        f"{med(lat['gateway_cpu_us_per_request'])} µs of CPU per request at "
        f"{med(lat['gateway']['requests_per_s'])} requests/s.", "",
        table(["submit → answer in the client's hands", "mean", "p50", "p99", "tasks"], lrows)])


BLOCKS: dict[str, tuple[str | None, Callable[..., str]]] = {
    "machine": (None, block_machine),
    "summary": (None, block_summary),
    "p1": ("p1_queue_overhead", block_p1),
    "p2": ("p2_capacity", block_p2),
    "p3": ("p3_latency", block_p3),
    "p4": ("p4_polling", block_p4),
    "p5": ("p5_utilisation", block_p5),
    "p6": ("p6_faults", block_p6),
    "p7": ("p7_planner", block_p7),
    "p8": ("p8_gateway", block_p8),
}


def render(text: str, results: Path) -> str:
    res = {name: doc for name in NAMES.values() if (doc := _load(results, name)) is not None}
    for block, (source, fn) in BLOCKS.items():
        pattern = re.compile(rf"(<!-- BEGIN GENERATED: {block} -->\n).*?(<!-- END GENERATED: {block} -->)", re.S)
        if not pattern.search(text):
            continue
        if source is None:
            body = fn(res) if res else "_no results yet: run `make bench`_"
        else:
            body = fn(res[source]) if source in res else "_no results yet: run `make bench`_"
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--doc", type=Path, default=DOC)
    p.add_argument("--check", action="store_true", help="exit 1 if the document is not up to date")
    ns = p.parse_args(argv)
    text = ns.doc.read_text()
    new = render(text, ns.results)
    if ns.check:
        return 0 if new == text else 1
    if new != text:
        ns.doc.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
