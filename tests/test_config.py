"""Configuration: bad or missing settings stop the process at start with one readable line and exit 2."""

from __future__ import annotations

import io
import json
import logging

import fakeredis
import pytest

from captcha_worker import log
from captcha_worker.config import ConfigError, ProducerConfig, Secret, WorkerConfig, redact_url
from captcha_worker.worker import Worker, redis_queue
from tests.helpers import KEY, run_cli

GOOD = {"CAPTCHAAI_KEY": KEY, "CAPTCHAAI_THREADS": "10", "REDIS_URL": "rediss://user:pw@redis.example:6380/2"}


def test_defaults_and_parsing() -> None:
    cfg = WorkerConfig.from_env({**GOOD, "WORKER_CONCURRENCY": "4", "COMPAT_RESULTS_HASH": "yes"})
    assert (cfg.threads, cfg.concurrency, cfg.queue, cfg.metrics_port) == (10, 4, "captcha", 9100)
    assert cfg.compat_results_hash is True and cfg.api_url == "https://ocr.captchaai.com"
    assert KEY not in repr(cfg) and "pw" not in cfg.redis.display_url()
    assert (cfg.compat_queue_list, cfg.redis.socket_timeout_s, cfg.http_poll_timeout_seconds) == (None, 10.0, 5.0)
    assert WorkerConfig.from_env({**GOOD, "COMPAT_QUEUE_LIST": "captcha:queue"}).compat_queue_list == "captcha:queue"


def test_producer_config_reads_the_workers_variables() -> None:
    pc = ProducerConfig.from_env({"REDIS_URL": "redis://h:1/0", "REDIS_USERNAME": "u", "QUEUE_NAME": "q2",
                                  "TASK_TTL_SECONDS": "120", "MAX_TASK_BYTES": "2048",
                                  "REDIS_CONNECT_TIMEOUT_SECONDS": "1.5"})
    assert (pc.queue, pc.task_ttl_seconds, pc.max_task_bytes) == ("q2", 120, 2048)
    assert (pc.redis.username, pc.redis.connect_timeout_s) == ("u", 1.5)


@pytest.mark.parametrize(("env", "message"), [
    ({"CAPTCHAAI_KEY": ""}, "CAPTCHAAI_KEY is required"),
    ({"CAPTCHAAI_KEY": "short"}, "CAPTCHAAI_KEY must be 32 letters and digits (got 5 characters)"),
    ({"CAPTCHAAI_THREADS": ""}, "CAPTCHAAI_THREADS is required"),
    ({"CAPTCHAAI_THREADS": "ten"}, "CAPTCHAAI_THREADS must be an integer, got 'ten'"),
    ({"CAPTCHAAI_THREADS": "0"}, "CAPTCHAAI_THREADS must be >= 1, got 0"),
    ({"WORKER_CONCURRENCY": "-1"}, "WORKER_CONCURRENCY must be between 1 and 5000"),
    ({"REDIS_URL": "http://x"}, "REDIS_URL must start with redis://"),
    ({"CAPTCHAAI_URL": "ftp://x"}, "CAPTCHAAI_URL must be an http(s) URL"),
    ({"QUEUE_NAME": "a b"}, "QUEUE_NAME must be 1-64"),
    ({"LEASE_SECONDS": "1"}, "LEASE_SECONDS must be >= 3.0"),
    ({"COMPAT_RESULTS_HASH": "maybe"}, "COMPAT_RESULTS_HASH must be true or false"),
    ({"LOG_LEVEL": "loud"}, "LOG_LEVEL must be debug"),
    ({"SOLVE_TIMEOUT_SECONDS": "nan"}, "SOLVE_TIMEOUT_SECONDS must be >= 1.0"),
    ({"COMPAT_QUEUE_LIST": "{captcha}:pending"}, "COMPAT_QUEUE_LIST must not be one of the queue's own lists"),
    ({"COMPAT_QUEUE_LIST": "a b"}, "COMPAT_QUEUE_LIST must be a Redis key name without spaces"),
    ({"REDIS_SOCKET_TIMEOUT_SECONDS": "1"}, "REDIS_SOCKET_TIMEOUT_SECONDS must be >= 2.0"),
    ({"HTTP_POLL_TIMEOUT_SECONDS": "0"}, "HTTP_POLL_TIMEOUT_SECONDS must be >= 0.5"),
])
def test_bad_config_is_one_clear_sentence(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        WorkerConfig.from_env({**GOOD, **env})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_worker_exits_2_with_one_line_on_bad_config() -> None:
    proc = run_cli("run", env={"CAPTCHAAI_KEY": KEY, "CAPTCHAAI_THREADS": "many"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["captcha-worker run: configuration error: CAPTCHAAI_THREADS must be an integer, got 'many'"]


def test_bad_config_never_echoes_the_key() -> None:
    proc = run_cli("run", env={"CAPTCHAAI_KEY": KEY + "x", "CAPTCHAAI_THREADS": "5"})
    assert proc.returncode == 2 and KEY not in proc.stderr


def test_redact_url_and_secret() -> None:
    assert redact_url("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"
    assert "abc" not in repr(Secret("abc")) and not Secret("")


def test_json_logs_scrub_secrets_and_proxy_credentials() -> None:
    stream = io.StringIO()
    log.setup("info", secrets=[KEY], stream=stream)
    logger = logging.getLogger("t")
    log.event(logger, "something", detail=f"key={KEY} proxy=alice:s3cret@10.0.0.1:8080")
    line = json.loads(stream.getvalue())
    assert line["event"] == "something" and line["level"] == "info"
    assert KEY not in stream.getvalue() and "s3cret" not in stream.getvalue()
    assert "alice:***@10.0.0.1" in line["detail"]


# -- REDIS_MODE ------------------------------------------------------------------------------------------------
BASE = {"CAPTCHAAI_KEY": KEY, "CAPTCHAAI_THREADS": "10"}


def test_sentinel_mode_reads_the_sentinels_and_hides_their_password() -> None:
    rc = WorkerConfig.from_env({**BASE, "REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s1:26380, s2,[fd00::1]:5000",
                                "REDIS_SENTINEL_MASTER": "prod", "REDIS_SENTINEL_PASSWORD": "sentinel-pw",
                                "REDIS_TLS": "true", "REDIS_WAIT_REPLICAS": "1"}).redis
    assert rc.sentinels == (("s1", 26380), ("s2", 26379), ("fd00::1", 5000))
    assert (rc.sentinel_master, rc.use_tls, rc.wait_replicas, rc.wait_timeout_ms) == ("prod", True, 1, 500)
    assert rc.display_url() == "rediss+sentinel://s1:26380,s2:26379,[fd00::1]:5000/prod"
    assert "sentinel-pw" not in repr(rc)


def test_cluster_mode_takes_a_seed_url_and_more_seeds() -> None:
    rc = ProducerConfig.from_env({"REDIS_MODE": "cluster", "REDIS_URL": "rediss://u:pw@c1:7000",
                                  "REDIS_CLUSTER_NODES": "c2:7001,c3"}).redis
    assert rc.cluster_nodes == (("c2", 7001), ("c3", 6379))
    assert "pw" not in rc.display_url() and rc.display_url().endswith("@c1:7000 (cluster)")


@pytest.mark.parametrize(("env", "message"), [
    ({"REDIS_MODE": "replicated"}, "REDIS_MODE must be standalone, sentinel or cluster, got 'replicated'"),
    ({"REDIS_MODE": "sentinel"}, "REDIS_SENTINELS is required"),
    ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s1:26379", "REDIS_URL": "redis://h"},
     "REDIS_URL is not used with REDIS_MODE=sentinel"),
    ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s1:99999"}, "REDIS_SENTINELS must be host:port"),
    ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s1", "REDIS_SENTINEL_MASTER": "a b"},
     "REDIS_SENTINEL_MASTER must be the master's name"),
    ({"REDIS_SENTINELS": "s1:26379"}, "REDIS_SENTINELS is set but REDIS_MODE is standalone"),
    ({"REDIS_MODE": "cluster", "REDIS_URL": "redis://h:6379/3"}, "a Redis Cluster has only database 0"),
    ({"REDIS_MODE": "cluster", "REDIS_URL": "unix:///tmp/r.sock"}, "no unix sockets"),
    ({"REDIS_CLUSTER_NODES": "c2:7000"}, "REDIS_CLUSTER_NODES is set but REDIS_MODE is standalone"),
    ({"REDIS_URL": "redis://h", "REDIS_TLS": "true"}, "REDIS_TLS=true contradicts REDIS_URL"),
    ({"REDIS_WAIT_REPLICAS": "-1"}, "REDIS_WAIT_REPLICAS must be between 0 and 100, got -1"),
])
def test_bad_redis_mode_settings_are_one_sentence(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        WorkerConfig.from_env({**BASE, **env})
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_dense_polls_are_opt_in() -> None:
    """POLL_DENSE_WHEN_CONTENDED: off unless asked for; a worker whose claims see a backlog hurries only then."""
    for env, dense in (({}, False), ({"POLL_DENSE_WHEN_CONTENDED": "true"}, True)):
        cfg = WorkerConfig.from_env({**GOOD, **env})
        assert cfg.poll_dense_when_contended is dense
        worker = Worker(cfg, redis_queue(cfg, fakeredis.FakeAsyncRedis()), api=None)  # type: ignore[arg-type]
        assert worker.hurry() is False, "no backlog seen yet"
        worker._contended = True  # what _observe_claim sets when a claim finds tasks waiting for a thread
        assert worker.hurry() is dense
