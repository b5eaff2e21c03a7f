"""The connection factory and the classification of Redis errors (by exception type, as redis-py raises them)."""

from __future__ import annotations

from typing import Any

import pytest
from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import Connection

from captcha_worker import metrics
from captcha_worker.config import RedisConfig, RedisMode, Secret
from captcha_worker.connection import RedisUnavailable, Refusal, SentinelMaster, connect, is_cross_slot, refusal


@pytest.mark.parametrize(("exc", "why"), [
    (rexc.ConnectionError("Error 111 connecting"), Refusal.CONNECTION),
    (ConnectionRefusedError(111, "refused"), Refusal.CONNECTION),
    (rexc.TimeoutError("Timeout reading"), Refusal.TIMEOUT),
    (TimeoutError(), Refusal.TIMEOUT),
    (rexc.BusyLoadingError("Redis is loading the dataset in memory"), Refusal.LOADING),
    # redis-py 7.4 strips the reply's prefix: "OOM command not allowed ..." arrives without "OOM"
    (rexc.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), Refusal.OOM),
    (rexc.ReadOnlyError("You can't write against a read only replica."), Refusal.READONLY),
    (rexc.MasterDownError("Link with MASTER is down"), Refusal.MASTERDOWN),
    (rexc.ClusterDownError("The cluster is down"), Refusal.CLUSTERDOWN),
    (rexc.TryAgainError("Multiple keys request during rehashing of slot"), Refusal.TRYAGAIN),
    (rexc.ResponseError("NOREPLICAS Not enough good replicas to write."), Refusal.NOREPLICAS),
    (rexc.ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
     Refusal.BUSY),
    (rexc.ResponseError("Command # 1 (EVALSHA abc 5 {q}:processing) of pipeline caused error: "
                        "('BUSY Redis is busy running a script.',)"), Refusal.BUSY),
    (rexc.AuthenticationError("invalid username-password pair"), Refusal.AUTH),
    (rexc.NoPermissionError("this user has no permissions to run the 'evalsha' command"), Refusal.AUTH),
])
def test_refusals_are_classified_by_type(exc: Exception, why: Refusal) -> None:
    assert refusal(exc) is why


@pytest.mark.parametrize("exc", [
    rexc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    rexc.ResponseError("ERR Error running script: attempt to compare nil with number"),
    ValueError("x"), KeyError("y"),
])
def test_everything_else_is_not_an_outage(exc: Exception) -> None:
    assert refusal(exc) is None


def test_cross_slot_is_recognised() -> None:
    assert is_cross_slot(rexc.ClusterCrossSlotError("Keys in request don't hash to the same slot"))
    assert is_cross_slot(rexc.ResponseError("CROSSSLOT Keys in request don't hash to the same slot"))
    assert not is_cross_slot(rexc.ResponseError("WRONGTYPE"))


def test_the_typed_error_names_the_redacted_url_and_the_reason() -> None:
    err = RedisUnavailable(Refusal.OOM, "redis://u:***@h:6379/0", "submit")
    assert str(err) == "Redis at redis://u:***@h:6379/0 is out of memory (maxmemory reached, writes refused) (submit)"
    assert isinstance(err, ConnectionError) and err.refusal is Refusal.OOM


async def test_oom_from_a_real_server_is_an_outage(redis: Redis, redis_server: object) -> None:
    await redis.config_set("maxmemory-policy", "noeviction")
    await redis.config_set("maxmemory", "1")
    try:
        with pytest.raises(rexc.RedisError) as info:
            await redis.eval("return redis.call('RPUSH', KEYS[1], 'x')", 1, "l")
        assert refusal(info.value) is Refusal.OOM
        async with redis.pipeline(transaction=False) as pipe:
            pipe.rpush("l", "x")
            with pytest.raises(rexc.RedisError) as info:
                await pipe.execute()
        assert refusal(info.value) is Refusal.OOM
    finally:
        await redis.config_set("maxmemory", "0")


async def test_a_connection_closed_under_a_command_in_flight_is_an_outage(redis_server: Any) -> None:
    """The cluster client drops a failed node's connections while another coroutine is writing on one of them
    (seen in the Cluster failover chaos run): redis-py then raises AttributeError from its own send path, not a
    ConnectionError (redis-py #4287). The interleaving, on a real connection: another coroutine disconnects it
    while this one awaits its health check."""
    conn = Connection(host="127.0.0.1", port=redis_server.port)
    await conn.connect()

    async def closed_meanwhile() -> None:
        await conn.disconnect()

    conn.check_health = closed_meanwhile  # type: ignore[method-assign]
    with pytest.raises(AttributeError) as info:
        await conn.send_packed_command(b"PING\r\n")
    assert refusal(info.value) is Refusal.CONNECTION
    assert refusal(AttributeError("'NoneType' object has no attribute 'writelines'")) is None, "a bug of ours is not"


async def test_the_factory_applies_every_setting(redis_server: object) -> None:
    rc = RedisConfig(url="rediss://h.example:6380/2", username="alice", password=Secret("pw"),
                     tls_ca_file="/etc/ca.pem", tls_insecure=False, socket_timeout_s=7.0, connect_timeout_s=3.0)
    client = connect(rc, client_name="captcha-test")
    assert isinstance(client, Redis)
    kw = client.connection_pool.connection_kwargs
    assert (kw["username"], kw["password"], kw["ssl_ca_certs"]) == ("alice", "pw", "/etc/ca.pem")
    assert (kw["socket_timeout"], kw["socket_connect_timeout"], kw["client_name"]) == (7.0, 3.0, "captcha-test")
    assert (kw["host"], kw["port"], kw["db"]) == ("h.example", 6380, 2)
    insecure = connect(RedisConfig(url="rediss://h:6380/0", tls_insecure=True), client_name="x")
    assert isinstance(insecure, Redis)
    assert insecure.connection_pool.connection_kwargs["ssl_cert_reqs"] == "none"
    await client.aclose()
    await insecure.aclose()


def test_the_metric_label_list_is_the_refusal_enum() -> None:
    assert metrics.REDIS_REFUSALS == tuple(r.value for r in Refusal)


async def test_the_factory_builds_a_client_per_mode() -> None:
    sentinel = connect(RedisConfig(mode=RedisMode.SENTINEL, sentinels=(("s1", 26379), ("s2", 26380)),
                                   sentinel_master="prod", password=Secret("data-pw"),
                                   sentinel_password=Secret("sentinel-pw"), tls=True), client_name="t")
    assert isinstance(sentinel, SentinelMaster) and sentinel.discovery is not None
    watcher = sentinel.discovery.sentinels[1].connection_pool.connection_kwargs
    assert (watcher["port"], watcher["password"]) == (26380, "sentinel-pw")  # the sentinels' own password
    assert watcher.get("username") is None
    assert sentinel.connection_pool.connection_kwargs["password"] == "data-pw"  # the data nodes'
    assert sentinel.connection_pool.service_name == "prod"  # type: ignore[attr-defined]
    await sentinel.aclose()
    cluster = connect(RedisConfig(url="redis://c1:7000", mode=RedisMode.CLUSTER, cluster_nodes=(("c2", 7001),)),
                      client_name="t")
    assert isinstance(cluster, RedisCluster)
    assert sorted(n.name for n in cluster.startup_nodes) == ["c1:7000", "c2:7001"]
    await cluster.aclose()
