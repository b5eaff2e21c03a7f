"""The seed guide's design, re-implemented faithfully as the baseline for P3 and P4.

Source: the CaptchaAI blog's "Redis Queue + CaptchaAI: Distributed CAPTCHA Processing" — a synchronous redis-py
producer/worker pair:

* producer ``submit``: ``RPUSH captcha:tasks <json>`` (``LPUSH`` for priority "high") of
  ``{"id", "method", "params", "submitted_at", "priority"}``;
* worker: ``BLPOP captcha:tasks`` one task at a time, ``in.php``, then ``res.php`` every fixed 5 s, then
  ``store_result``: ``HSET captcha:results <id> <json>``, ``PUBLISH captcha:done <id>``,
  ``SETEX captcha:ttl:<id> 3600 1``;
* producer ``wait_result``: ``HGET captcha:results <id>`` every 1 s until a timeout.

Two knobs exist only for the benchmarks and change nothing in the protocol: ``time_scale`` divides the 5 s poll
interval (paired with the simulator's ``--speed``), and ``solver="instant"`` replaces the API calls by an
immediate answer carrying the solve-start time (P3 measures the queue, not the API).  Every result records
``completed_at`` (just before ``HSET``) so that delivery latency can be measured.

    python -m bench.seed_baseline worker --redis-url URL [--api-url URL --key K | --instant [--hold MIN:MAX]]
                                         [--threads N] [--time-scale F]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import redis
import requests

QUEUE_KEY = "captcha:tasks"
RESULTS_KEY = "captcha:results"
NOTIFY_CHANNEL = "captcha:done"
POLL_INTERVAL_S = 5.0  # the seed's fixed res.php interval
RESULT_POLL_S = 1.0  # the seed producer's HGET interval


class SeedQueue:
    """The guide's producer side (and the store_result helper its worker uses)."""

    def __init__(self, redis_url: str = "redis://localhost:6379") -> None:
        self.redis = redis.from_url(redis_url)

    def submit(self, method: str, params: dict[str, Any], priority: str = "normal") -> str:
        task_id = str(uuid.uuid4())[:8]
        task = {"id": task_id, "method": method, "params": params, "submitted_at": time.time(),
                "priority": priority}
        if priority == "high":
            self.redis.lpush(QUEUE_KEY, json.dumps(task))
        else:
            self.redis.rpush(QUEUE_KEY, json.dumps(task))
        return task_id

    def fetch(self, timeout: int = 30) -> dict[str, Any] | None:
        result = self.redis.blpop([QUEUE_KEY], timeout=timeout)
        if result is None:
            return None
        _, raw = result
        task: dict[str, Any] = json.loads(raw)
        return task

    def store_result(self, task_id: str, result: dict[str, Any]) -> None:
        self.redis.hset(RESULTS_KEY, task_id, json.dumps(result))
        self.redis.publish(NOTIFY_CHANNEL, task_id)
        self.redis.setex(f"captcha:ttl:{task_id}", 3600, "1")

    def get_result(self, task_id: str) -> dict[str, Any] | None:
        raw = self.redis.hget(RESULTS_KEY, task_id)
        if raw:
            data: dict[str, Any] = json.loads(cast(str | bytes, raw))
            return data
        return None

    def wait_result(self, task_id: str, timeout: float = 120) -> dict[str, Any] | None:
        start = time.time()
        while time.time() - start < timeout:
            result = self.get_result(task_id)
            if result:
                return result
            time.sleep(RESULT_POLL_S)
        return None


class CaptchaAIClient:
    """The guide's solve(): in.php, then res.php every fixed 5 s (divided by time_scale for --speed runs)."""

    def __init__(self, api_key: str, base_url: str = "https://ocr.captchaai.com", time_scale: float = 1.0,
                 max_polls: int = 60) -> None:
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.interval = POLL_INTERVAL_S / time_scale
        self.max_polls = max_polls
        self.session = requests.Session()

    def solve(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        started = time.time()
        calls = 1
        resp = self.session.post(f"{self.base_url}/in.php",
                                 data={"key": self.api_key, "method": method, "json": 1, **params}, timeout=30)
        data = resp.json()
        if data.get("status") != 1:
            raise RuntimeError(data.get("request", "in.php failed"))
        captcha_id = data["request"]
        for _ in range(self.max_polls):
            time.sleep(self.interval)
            calls += 1
            resp = self.session.get(f"{self.base_url}/res.php",
                                    params={"key": self.api_key, "action": "get", "id": captcha_id, "json": 1},
                                    timeout=30)
            data = resp.json()
            if data.get("status") == 1:
                return {"solution": data["request"], "api_calls": calls, "started_at": started,
                        "solved_at": time.time()}
            if data.get("request") != "CAPCHA_NOT_READY":
                raise RuntimeError(data.get("request", "res.php failed"))
        raise TimeoutError("no answer after max_polls")


def instant_solver(hold: tuple[float, float] | None = None) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """Answers with the solve-start time; `hold` (min, max) s keeps the worker busy that long (uniform)."""

    def solve(method: str, params: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        if hold is not None:
            time.sleep(random.uniform(*hold))
        return {"solution": repr(now), "api_calls": 0, "started_at": now, "solved_at": time.time()}

    return solve


class SeedWorker:
    """BLPOP one task at a time, solve, store. Run several for parallelism (the guide runs N processes)."""

    def __init__(self, queue: SeedQueue, solve: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
        self.queue = queue
        self.solve = solve
        self.running = True

    def run(self) -> None:
        while self.running:
            task = self.queue.fetch(timeout=1)
            if task is None:
                continue
            try:
                result: dict[str, Any] = {"status": "solved", **self.solve(task["method"], task["params"])}
            except Exception as exc:
                result = {"status": "error", "error": str(exc)}
            result["submitted_at"] = task.get("submitted_at")
            result["completed_at"] = time.time()
            self.queue.store_result(task["id"], result)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.seed_baseline")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--redis-url", required=True)
    w.add_argument("--api-url", default="https://ocr.captchaai.com")
    w.add_argument("--key", default="")
    w.add_argument("--instant", action="store_true")
    w.add_argument("--hold", help="MIN:MAX seconds an instant solve keeps its worker busy")
    w.add_argument("--threads", type=int, default=1, help="worker threads (the guide runs N workers)")
    w.add_argument("--time-scale", type=float, default=1.0)
    ns = p.parse_args(argv)
    workers: list[SeedWorker] = []
    for _ in range(ns.threads):
        if ns.instant:
            lo, _, hi = (ns.hold or "").partition(":")
            solve = instant_solver((float(lo), float(hi)) if ns.hold else None)
        else:
            solve = CaptchaAIClient(ns.key, ns.api_url, time_scale=ns.time_scale).solve
        workers.append(SeedWorker(SeedQueue(ns.redis_url), solve))

    def stop(*_: object) -> None:
        for wk in workers:
            wk.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threads = [threading.Thread(target=wk.run, daemon=True) for wk in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
