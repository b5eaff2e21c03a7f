"""Every `captcha-worker` command as a process: exit codes and output (against the `stack` fixture)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from captcha_worker.cli import run_command
from captcha_worker.config import ConfigError, WorkerConfig
from captcha_worker.queue import Keys
from tests.helpers import KEY, ROOT, cli_env, refused_port, run_cli

TURNSTILE_ARGS = ["turnstile", "-p", "sitekey=0x4AAAAAAA", "-p", "pageurl=https://example.com/login"]
KEYS = Keys("captcha")


def env_of(stack: Any, **extra: str) -> dict[str, str]:
    return {**stack.worker_env, **extra}


@pytest.mark.parametrize("command", [[], ["run"], ["simulator"], ["check"], ["submit"], ["wait"], ["stats"],
                                     ["dead-letters"], ["dead-letters", "list"], ["dead-letters", "requeue"],
                                     ["dead-letters", "purge"], ["demo"], ["report"]])
def test_every_command_has_help(command: list[str]) -> None:
    proc = run_cli(*command, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: captcha-worker")


def test_submit_one_and_wait_prints_a_json_line(stack: Any) -> None:
    proc = run_cli("submit", *TURNSTILE_ARGS, "--wait", "--timeout", "60", env=env_of(stack))
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    result = json.loads(line)
    assert result["status"] == "solved" and result["solution"] and result["attempts"] == 1
    assert {"queued_s", "solving_s", "total_s"} <= result.keys()


def test_submit_many_from_stdin_then_wait_by_id(stack: Any) -> None:
    tasks = "\n".join(json.dumps({"method": "turnstile", "params": {"sitekey": "s", "pageurl": "https://e"}})
                      for _ in range(5))
    proc = run_cli("submit", "--file", "-", env=env_of(stack), input=tasks + "\n")
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert len(ids) == 5
    waited = run_cli("wait", *ids, "--timeout", "60", env=env_of(stack))
    assert waited.returncode == 0
    assert sorted(json.loads(line)["id"] for line in waited.stdout.splitlines()) == sorted(ids)


def test_submit_from_a_file_with_wait(stack: Any, tmp_path: Any) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"method": "userrecaptcha", "params": {
        "googlekey": "6LeAAAA", "pageurl": "https://e", "version": "v3", "action": "login"}}) for _ in range(3)))
    proc = run_cli("submit", "-f", str(path), "--wait", env=env_of(stack))
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3


@pytest.mark.parametrize(("args", "message"), [
    (["submit", "nope", "-p", "a=b"], "invalid task: unknown method 'nope'"),
    (["submit", "turnstile", "-p", "sitekey"], "--param expects NAME=VALUE"),
    (["submit"], "give either METHOD"),
    (["dead-letters", "purge"], "add --yes"),
    (["dead-letters", "requeue"], "requeue needs task ids or --all"),
])
def test_bad_arguments_exit_2_with_one_line(stack: Any, args: list[str], message: str) -> None:
    proc = run_cli(*args, env=env_of(stack))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def test_wait_reports_failures_with_exit_1(stack: Any) -> None:
    proc = run_cli("wait", "never-submitted", "--timeout", "0.3", env=env_of(stack))
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == "unknown"


def test_wait_tells_an_expired_result_from_an_unknown_id(stack: Any) -> None:
    admin = Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        admin.hset(KEYS.task("finished-long-ago"), mapping={"attempts": 1, "state": "done"})  # a tombstone
        admin.expire(KEYS.task("finished-long-ago"), 60)
        proc = run_cli("wait", "finished-long-ago", "--timeout", "5", env=env_of(stack))
    finally:
        admin.close()
    line = json.loads(proc.stdout)
    assert proc.returncode == 1 and line["status"] == "result_expired" and "RESULT_TTL_SECONDS" in line["text"]


def test_stats_json(stack: Any) -> None:
    proc = run_cli("stats", "--json", env=env_of(stack))
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert set(data) == {"queue", "pending", "processing", "dead", "budget_in_use", "budget_limit", "workers_alive"}
    assert data["workers_alive"] == 2 and data["budget_limit"] == 20
    assert data["budget_in_use"] == data["processing"], "a unit per solve: idle workers hold none"
    human = run_cli("stats", env=env_of(stack))
    assert "workers_alive" in human.stdout and human.returncode == 0


def test_report_bad_and_good_reach_the_api(stack: Any) -> None:
    def sim_reports() -> tuple[int, int]:
        with urllib.request.urlopen(f"{stack.sim_url}/_sim/stats", timeout=5) as resp:
            st = json.loads(resp.read())
        return st["reportbad"], st["reportgood"]

    solved = json.loads(run_cli("submit", *TURNSTILE_ARGS, "--wait", "--timeout", "60", env=env_of(stack)).stdout)
    before = sim_reports()
    bad = run_cli("report", "bad", solved["id"], env=env_of(stack))
    good = run_cli("report", "good", solved["id"], env=env_of(stack))
    assert bad.returncode == 0 and json.loads(bad.stdout) == {"id": solved["id"], "verdict": "bad", "queued": True}
    assert good.returncode == 0 and json.loads(good.stdout)["queued"] is True
    deadline = time.monotonic() + 20
    while sim_reports() != (before[0] + 1, before[1] + 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sim_reports() == (before[0] + 1, before[1] + 1), "a worker sends each report to CaptchaAI once"
    unknown = run_cli("report", "bad", "no-such-task", env=env_of(stack))
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["queued"] is False


def test_check_passes_against_a_healthy_setup(stack: Any) -> None:
    proc = run_cli("check", "--json", env=env_of(stack))
    assert proc.returncode == 0, proc.stdout
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert all(c["ok"] for c in checks.values())
    assert checks["plan"]["detail"].startswith("20 threads")
    text = run_cli("check", env=env_of(stack))
    assert text.returncode == 0 and text.stdout.splitlines()[0].startswith("ok")


def test_check_reads_the_key_from_its_file(stack: Any, tmp_path: Path) -> None:
    """The chart mounts the key as a file (CAPTCHAAI_KEY_FILE); `helm test` runs this check with it."""
    env = env_of(stack)
    key_file = tmp_path / "api-key"
    key_file.write_text(env.pop("CAPTCHAAI_KEY") + "\n")
    proc = run_cli("check", env={**env, "CAPTCHAAI_KEY_FILE": str(key_file)})
    assert proc.returncode == 0 and proc.stdout.splitlines()[0].startswith("ok"), proc.stdout


def test_check_fails_on_a_bad_key_and_never_prints_it(stack: Any) -> None:
    bad = "x" * 31
    proc = run_cli("check", env=env_of(stack, CAPTCHAAI_KEY=bad))
    assert proc.returncode == 1
    assert "FAIL  api key" in proc.stdout and "ERROR_WRONG_USER_KEY" in proc.stdout and bad not in proc.stdout


def test_check_fails_on_unreachable_redis(stack: Any) -> None:
    with refused_port() as port:
        proc = run_cli("check", env=env_of(stack, REDIS_URL=f"redis://:pw@127.0.0.1:{port}/0"))
    assert proc.returncode == 1
    assert "FAIL  redis" in proc.stdout and "unreachable" in proc.stdout and ":pw@" not in proc.stdout


def test_check_without_a_key_is_a_config_error(stack: Any) -> None:
    proc = run_cli("check", env={"REDIS_URL": stack.redis_url})
    assert proc.returncode == 2 and "CAPTCHAAI_KEY is required" in proc.stderr


@pytest.mark.parametrize(("name", "value"), [("CAPTCHAAI_THREADS", "0"), ("CAPTCHAAI_THREADS", "ten"),
                                           ("CAPTCHAAI_URL", "ftp://example.com")])
def test_check_reads_the_api_settings_by_the_workers_rules(stack: Any, name: str, value: str) -> None:
    """`check` reads CAPTCHAAI_URL and CAPTCHAAI_THREADS with config.py's parsing: what the worker refuses to
    start with is a configuration error here too, with the worker's message."""
    env = env_of(stack, **{name: value})
    proc = run_cli("check", env=env)
    with pytest.raises(ConfigError) as refused:
        WorkerConfig.from_env(env)
    assert proc.returncode == 2 and f"configuration error: {refused.value}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", ["0", "ten", "-3"])
@pytest.mark.parametrize("command", [["limit", "--hold", "10"], ["stats", "--watch", "--count", "1"]])
def test_the_commands_defaulting_to_captchaai_threads_read_it_by_the_workers_rules(command: list[str],
                                                                                   value: str) -> None:
    """`limit` (--threads) and `stats --watch` (--budget) default to CAPTCHAAI_THREADS: a value the worker refuses
    to start with is a configuration error there too, in one line with the worker's message (before, `limit` had
    its own message and `stats --watch` dropped the value silently)."""
    env = {"REDIS_URL": "redis://127.0.0.1:1/0", "CAPTCHAAI_KEY": KEY, "CAPTCHAAI_THREADS": value}
    with pytest.raises(ConfigError) as refused:
        WorkerConfig.from_env(env)
    proc = run_cli(*command, env=env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"configuration error: {refused.value}" in proc.stderr, proc.stderr


def test_producer_commands_on_unreachable_redis_exit_1(stack: Any) -> None:
    with refused_port() as port:
        proc = run_cli("stats", "--redis-url", f"redis://127.0.0.1:{port}/0")
    assert proc.returncode == 1 and "unreachable" in proc.stderr


def test_dead_letters_list_requeue_purge(stack: Any) -> None:
    admin = Redis.from_url(stack.redis_url, decode_responses=True)
    body = json.dumps({"id": "dl-1", "method": "turnstile", "params": {"sitekey": "s", "pageurl": "https://e",
                                                                      "proxy": "bob:Pl4ntedPw@10.0.0.1:3128"}})
    # an entry as the previous version wrote it: the body in clear
    admin.lpush(KEYS.dead, json.dumps({"id": "dl-1", "reason": "gave up after 3 attempts (last: HTTP_5XX)",
                                       "code": "MAX_ATTEMPTS_EXCEEDED", "attempts": 3, "at": 1.0, "body": body}))
    admin.rpush(KEYS.pending, '{"id": "dl-2", "method": "hcaptcha", "params": {"sitekey": "s", "pageurl": "u"}}')
    try:
        for _ in range(100):
            listing = run_cli("dead-letters", "list", "--json", env=env_of(stack))
            rows = [json.loads(line) for line in listing.stdout.splitlines()]
            if {r["id"] for r in rows} >= {"dl-1", "dl-2"}:
                break
        codes = {r["id"]: r["code"] for r in rows}
        assert (codes["dl-1"], codes["dl-2"]) == ("MAX_ATTEMPTS_EXCEEDED", "UNSUPPORTED_METHOD")
        assert "Pl4ntedPw" not in listing.stdout and "***@10.0.0.1:3128" in listing.stdout
        human = run_cli("dead-letters", "list", env=env_of(stack))
        assert "hCaptcha is not solved by CaptchaAI" in human.stdout
        requeued = run_cli("dead-letters", "requeue", "dl-1", "--json", env=env_of(stack))
        assert requeued.returncode == 0 and json.loads(requeued.stdout) == {"requeued": 1, "not_requeueable": []}
        again = run_cli("dead-letters", "requeue", "dl-2", env=env_of(stack))
        assert again.returncode == 1 and "not requeueable" in again.stdout and "dl-2" in again.stdout
        waited = run_cli("wait", "dl-1", "--timeout", "60", env=env_of(stack))
        assert waited.returncode == 0 and json.loads(waited.stdout)["status"] == "solved"
        purged = run_cli("dead-letters", "purge", "--yes", "--json", env=env_of(stack))
        assert purged.returncode == 0 and json.loads(purged.stdout)["purged"] >= 1
        assert admin.llen(KEYS.dead) == 0
    finally:
        admin.close()


def test_simulator_rejects_bad_flags_in_one_line() -> None:
    proc = run_cli("simulator", "--fault", "bogus=0.1")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "bogus" in proc.stderr


def test_demo_end_to_end_small() -> None:
    proc = run_cli("demo", "--tasks", "30", "--workers", "2", "--threads", "8", "--concurrency", "5",
                   timeout=180)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "captcha-solver demo" in out and "| tasks" in out and "30 (" in out
    assert "of 8 plan threads" in out and "over-cap rejections | 0" in out.replace("  ", " ").replace("  ", " ")
    assert KEY not in out


def test_ctrl_c_exits_130_with_nothing_on_stderr(stack: Any) -> None:
    """docs/contracts.md: 130 when interrupted. `wait` on an id nobody solves, then SIGINT."""
    proc = subprocess.Popen([sys.executable, "-m", "captcha_worker.cli", "wait", "no-such-task", "--timeout", "60"],
                            env=cli_env(**env_of(stack)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    admin = stack.redis.client(decode_responses=True)
    try:
        # interrupted once it waits: its producer connection is open (an interrupt while Python still imports the
        # package, which takes seconds on a loaded machine, is Python's own: a traceback and -SIGINT)
        give_up = time.monotonic() + 60
        while not any(c["name"].startswith("captcha-producer-") for c in admin.client_list()):
            assert proc.poll() is None and time.monotonic() < give_up, "the wait never connected"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        admin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err


def test_limit_holds_the_lower_limit_and_a_raise_changes_nothing(redis_server: Any) -> None:
    """`captcha-worker limit` against the real redis-server: the smallest live limit applies; a hold of the same
    holder is replaced; the line printed names no secret (the Redis password travels in the env only)."""
    admin, limits = redis_server.client(decode_responses=True), Keys("captcha").limits
    admin.flushdb()
    admin.zadd(limits, {"16:old-pod": time.time() + 60})  # a live worker at 16 (its entry as the heartbeat writes)
    env = {"REDIS_URL": redis_server.url, "CAPTCHAAI_KEY": KEY}
    try:
        low = run_cli("limit", "--threads", "6", "--hold", "30", "--holder", "rollout-rel", "--json", env=env)
        raise_ = run_cli("limit", "--threads", "20", "--hold", "30", "--holder", "rollout-other", env=env)
        again = run_cli("limit", "--threads", "8", "--hold", "30", "--holder", "rollout-rel", "--json", env=env)
        members = admin.zrange(limits, 0, -1)
    finally:
        admin.flushdb()
        admin.close()
    assert low.returncode == 0 and json.loads(low.stdout) == {
        "queue": "captcha", "holder": "rollout-rel", "limit": 6, "hold_s": 30.0, "budget_limit": 6,
        "budget_in_use": 0}, low.stdout + low.stderr
    assert raise_.returncode == 0 and raise_.stdout.strip() == (
        "queue 'captcha': limit 20 held 30s by rollout-other; effective limit 6, 0 units in use")
    assert json.loads(again.stdout)["budget_limit"] == 8, "the holder's 6 was replaced by its 8"
    assert sorted(members) == ["16:old-pod", "20:hold:rollout-other", "8:hold:rollout-rel"]
    assert all(KEY not in p.stdout + p.stderr for p in (low, raise_, again))


@pytest.mark.parametrize("args", [["--hold", "10", "--threads", "0"], ["--hold", "0", "--threads", "3"],
                                  ["--hold", "10", "--threads", "3", "--holder", "a b"], ["--hold", "10"]])
def test_limit_rejects_bad_arguments_in_one_line(args: list[str]) -> None:
    proc = run_cli("limit", *args, env={"REDIS_URL": "redis://127.0.0.1:1/0"})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("captcha-worker limit: ")


def test_limit_without_redis_exits_1_in_one_line_without_the_password() -> None:
    with refused_port() as port:
        proc = run_cli("limit", "--threads", "3", "--hold", "10",
                       env={"REDIS_URL": f"redis://127.0.0.1:{port}/0", "REDIS_PASSWORD": "s3cret-pass"})
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "no limit registered" in proc.stderr and "s3cret-pass" not in proc.stderr + proc.stdout


def test_ctrl_c_stops_a_command_that_loses_the_first_cancel() -> None:
    """redis-py can swallow a CancelledError that lands while it connects or reads a reply: `wait` then went on
    until its own timeout. run_command cancels again until the command stops, then raises KeyboardInterrupt."""
    reached: list[str] = []

    async def stubborn() -> int:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            reached.append("lost the cancel")  # as redis-py may: carry on
        await asyncio.sleep(5)
        reached.append("ran on after Ctrl-C")
        return 0

    with pytest.raises(KeyboardInterrupt):
        run_command(stubborn())
    assert reached == ["lost the cancel"]
