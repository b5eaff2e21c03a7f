"""Redis topologies the tests start (import as `from topology import ...`): a Redis Cluster of masters and replicas
made by `redis-cli --cluster create`, and a Sentinel deployment (a master, its replicas, sentinels), all of
Debian's `redis-server` / `redis-sentinel` on 127.0.0.1 and free ports. Failure detection is tuned down for tests
(`cluster-node-timeout`, `down-after-milliseconds`, `failover-timeout`), so a failover takes seconds.

Every process is a handle (procs.RedisServer, or SentinelProc here) and is stopped through it, never by name.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import redis as sync_redis
import trustme
from redis.crc import key_slot

from tests.helpers import free_port, wait_port
from tests.procs import RedisServer

T = TypeVar("T")
#: cluster and sentinel nodes: AOF, but fsync once a second (six servers fsyncing every write slow the tests
#: down, and a failover's losses come from replication, not from the disk)
NODE_ARGS = ["--appendfsync", "everysec"]


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run 'make test' (scripts/install-tools.sh installs it)")
    return path


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too (ephemeral ports are often above
    55535: then one below them)."""
    port = free_port()
    if port + 10000 <= 65535 and _free(port + 10000):
        return port
    for candidate in range(20000 + port % 9973, 45000, 101):
        if _free(candidate) and _free(candidate + 10000):
            return candidate
    raise RuntimeError("no free port pair for a cluster node")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _start_on_a_free_pair(node: RedisServer, attempts: int = 4) -> None:
    """Start a cluster node; when another process took its port or bus port meanwhile, on a new pair."""
    for attempt in range(attempts):
        try:
            node.start()
            return
        except RuntimeError:  # nothing listens: it exited on "Address already in use"
            node.stop(signal.SIGKILL)
            if attempt == attempts - 1:
                raise
            node.port = cluster_port()


def poll(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.1) -> T:
    """Call `probe` until it returns something other than None (connection errors count as None)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
            if value is not None:
                return value
        except (sync_redis.exceptions.ConnectionError, sync_redis.exceptions.TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def replication(server: RedisServer) -> dict[str, Any]:
    """INFO replication of `server`: its role, its replicas (``slave<n>``), its link to its master."""
    client = server.client(socket_timeout=2)
    try:
        return cast(dict[str, Any], client.info("replication"))
    finally:
        client.close()


def replicas_online(master: RedisServer, by_port: Callable[[int], RedisServer]) -> int:
    """How many replicas of `master` finished their sync, as both ends see it. The master calls a replica online
    once the snapshot is sent, before the replica has loaded it; until it has (its own link up, no sync in
    progress) it answers no REPLCONF GETACK, so a WAIT right after may not count it (test_races' warm-up push
    on a cluster fresh from `--cluster create` failed so once at load ~7: 0 of 1 replicas within 300 ms)."""
    info = replication(master)
    online = [int(v["port"]) for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
              and v.get("state") == "online"]
    return sum(1 for port in online if _synced_replica(replication(by_port(port))))


def _synced_replica(info: dict[str, Any]) -> bool:
    return (info.get("role") == "slave" and info.get("master_link_status") == "up"
            and not int(info.get("master_sync_in_progress", 0)))


def replica_servers(master: RedisServer, by_port: Callable[[int], RedisServer]) -> list[RedisServer]:
    info = replication(master)
    return [by_port(int(v["port"])) for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]


#: bytes written to a master while its replicas are stalled: more than the loopback sockets between them hold
#: (a few MB each way), so the rest waits in the master's own output buffer and dies with it
FILLER_BYTES = 24 * 1024 * 1024


@contextmanager
def stalled(master: RedisServer, replicas: list[RedisServer], seconds: float, filler_key: str) -> Iterator[None]:
    """Replicas that lag behind `master` when the body runs: they are stopped (SIGSTOP), `master` takes one large
    write (`filler_key`, as a bulk job would) and then `seconds` of the test's traffic, then the body runs (it
    kills the master) and the replicas resume. What the master took after the filler never reached them: on
    loopback a replica is otherwise never more than microseconds behind. Nothing when `seconds` is 0."""
    if seconds <= 0:
        yield
        return
    procs = [s.proc for s in replicas if s.proc is not None]
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    try:
        client = master.client(socket_timeout=10)
        try:
            client.set(filler_key, b"x" * FILLER_BYTES)
        finally:
            client.close()
        time.sleep(seconds)
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)


# -- Redis Cluster ------------------------------------------------------------------------------------------
@dataclass
class ClusterTopology:
    """`masters` masters with `replicas` replicas each, made by `redis-cli --cluster create`."""

    base: Path
    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    #: cluster-require-full-coverage: yes (Redis' default) stops every slot while one has no master (CLUSTERDOWN)
    full_coverage: bool = True
    nodes: list[RedisServer] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i in range(self.masters * (1 + self.replicas)):
            d = self.base / f"node{i}"
            d.mkdir(parents=True)
            self.nodes.append(RedisServer(cluster_port(), str(d), extra=[
                *NODE_ARGS, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms), "--cluster-replica-validity-factor", "0",
                "--cluster-require-full-coverage", "yes" if self.full_coverage else "no"]))

    @property
    def url(self) -> str:
        """A seed node (REDIS_URL with REDIS_MODE=cluster): the client learns the rest from it."""
        return self.nodes[0].url

    def env(self) -> dict[str, str]:
        """One seed in REDIS_URL, the others in REDIS_CLUSTER_NODES (a client must start with the first one down)."""
        return {"REDIS_MODE": "cluster", "REDIS_URL": self.url,
                "REDIS_CLUSTER_NODES": ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[1:])}

    def start(self) -> None:
        for n in self.nodes:
            _start_on_a_free_pair(n)
        subprocess.run([binary("redis-cli"), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        self.wait_healthy()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop(signal.SIGKILL)

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.alive()]

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def _ask(self, fn: Callable[[sync_redis.Redis], T]) -> T:
        """`fn` on the first live node that answers."""
        last: Exception | None = None
        for n in self.live():
            client = n.client(socket_timeout=2)
            try:
                return fn(client)
            except sync_redis.exceptions.RedisError as exc:
                last = exc
            finally:
                client.close()
        raise sync_redis.exceptions.ConnectionError(f"no cluster node answers: {last}")

    def slot_master(self, key: str) -> int:
        """The port of the master serving `key`'s slot, as the live nodes see it."""
        slot = key_slot(key.encode())
        for start, end, master, *_ in self._ask(lambda c: c.execute_command("CLUSTER", "SLOTS")):
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise AssertionError(f"slot {slot} is not served")

    def masters_now(self) -> list[int]:
        return sorted({int(m[1]) for _, _, m, *_ in self._ask(lambda c: c.execute_command("CLUSTER", "SLOTS"))})

    def wait_healthy(self, timeout: float = 60) -> None:
        """Every live node: cluster_state ok, every slot served by a master that is up."""
        def ok() -> bool | None:
            for n in self.live():
                client = n.client(socket_timeout=2)
                try:
                    info = client.execute_command("CLUSTER", "INFO")
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    if "cluster_state:ok" not in text or "cluster_slots_ok:16384" not in text:
                        return None
                finally:
                    client.close()
            masters = self.masters_now()
            return all(self.node(p).alive() and replicas_online(self.node(p), self.node) >= self.replicas
                       for p in masters) or None
        poll("the cluster to be healthy (slots served, replicas in sync)", ok, timeout)

    def kill_master_of(self, key: str, replicas_lag_s: float = 0.0) -> RedisServer:
        """SIGKILL the master of `key`'s slot. `replicas_lag_s`: its replicas lag behind it that long when it dies
        (see `stalled`; resumed right after the kill)."""
        victim = self.node(self.slot_master(key))
        with stalled(victim, replica_servers(victim, self.node), replicas_lag_s, f"{key}:lag-filler"):
            victim.stop(signal.SIGKILL)
        return victim

    def wait_failover(self, key: str, old_port: int, timeout: float = 60) -> int:
        """Wait until a replica took over `key`'s slot; returns the new master's port."""
        def promoted() -> int | None:
            port = self.slot_master(key)
            if port == old_port:
                return None
            return port if replication(self.node(port))["role"] == "master" else None
        return poll(f"a replica to take over the slot of {key!r}", promoted, timeout)

    def keys_on_other_masters(self, prefix: str, count: int) -> list[str]:
        """`count` hash tags `{prefix<n>}` whose slots are served by `count` different masters."""
        found: dict[int, str] = {}
        n = 0
        while len(found) < count:
            name = f"{prefix}{n}"
            found.setdefault(self.slot_master(f"{{{name}}}"), name)
            n += 1
        return list(found.values())[:count]


# -- Sentinel -----------------------------------------------------------------------------------------------
@dataclass
class SentinelProc:
    """One `redis-sentinel` with its own config file (sentinels rewrite it)."""

    port: int
    dir: Path
    conf: str
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        path = self.dir / "sentinel.conf"
        path.write_text(self.conf)
        self.proc = subprocess.Popen([binary("redis-sentinel"), str(path)], cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)
        self.proc = None

    def client(self) -> sync_redis.Redis:
        return sync_redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, **self.client_kwargs)


@dataclass
class Tls:
    """A private CA and a certificate for 127.0.0.1 (trustme), written to `dir`."""

    dir: Path

    def __post_init__(self) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        cert.private_key_pem.write_to_path(str(self.dir / "server.key"))
        cert.cert_chain_pems[0].write_to_path(str(self.dir / "server.crt"))
        ca.cert_pem.write_to_path(str(self.ca))

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def server_args(self) -> list[str]:
        return ["--tls-cert-file", str(self.dir / "server.crt"), "--tls-key-file", str(self.dir / "server.key"),
                "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no", "--tls-replication", "yes"]

    def client_kwargs(self) -> dict[str, Any]:
        return {"ssl": True, "ssl_ca_certs": str(self.ca)}


@dataclass
class SentinelTopology:
    """A master, `replicas` replicas and `sentinels` sentinels (quorum: a majority) watching it as `name`.

    `password` protects the data nodes (requirepass/masterauth, the sentinels' auth-pass), `sentinel_password`
    the sentinels themselves; `tls` puts every port on TLS only."""

    base: Path
    replicas: int = 2
    sentinels: int = 3
    name: str = "mymaster"
    down_after_ms: int = 1000
    failover_timeout_ms: int = 4000
    password: str | None = None
    sentinel_password: str | None = None
    tls: Tls | None = None
    servers: list[RedisServer] = field(default_factory=list)
    watchers: list[SentinelProc] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = [free_port() for _ in range(1 + self.replicas)]
        for i, port in enumerate(ports):
            d = self.base / f"redis{i}"
            d.mkdir(parents=True)
            extra = [*NODE_ARGS, *self._listen(port)]
            if self.password:
                extra += ["--requirepass", self.password, "--masterauth", self.password]
            if i > 0:
                extra += ["--replicaof", "127.0.0.1", str(ports[0])]
            self.servers.append(RedisServer(port, str(d), extra=extra, client_kwargs=self._data_kwargs()))
        for i in range(self.sentinels):
            d = self.base / f"sentinel{i}"
            d.mkdir(parents=True)
            port = free_port()
            self.watchers.append(SentinelProc(port, d, self._sentinel_conf(port, d, ports[0]),
                                              client_kwargs=self._sentinel_kwargs()))

    def _listen(self, port: int) -> list[str]:
        return ["--port", "0", "--tls-port", str(port), *self.tls.server_args()] if self.tls else []

    def _data_kwargs(self) -> dict[str, Any]:
        return {**({"password": self.password} if self.password else {}),
                **(self.tls.client_kwargs() if self.tls else {})}

    def _sentinel_kwargs(self) -> dict[str, Any]:
        return {**({"password": self.sentinel_password} if self.sentinel_password else {}),
                **(self.tls.client_kwargs() if self.tls else {})}

    def _sentinel_conf(self, port: int, d: Path, master_port: int) -> str:
        quorum = self.sentinels // 2 + 1
        lines = [f"port {port}", "bind 127.0.0.1", f"dir {d}",
                 f"sentinel monitor {self.name} 127.0.0.1 {master_port} {quorum}",
                 f"sentinel down-after-milliseconds {self.name} {self.down_after_ms}",
                 f"sentinel failover-timeout {self.name} {self.failover_timeout_ms}",
                 f"sentinel parallel-syncs {self.name} 1"]
        if self.password:
            lines.append(f"sentinel auth-pass {self.name} {self.password}")
        if self.sentinel_password:
            lines += [f"requirepass {self.sentinel_password}", f"sentinel sentinel-pass {self.sentinel_password}"]
        if self.tls:
            t = self.tls
            lines = ["port 0", f"tls-port {port}", f"tls-cert-file {t.dir / 'server.crt'}",
                     f"tls-key-file {t.dir / 'server.key'}", f"tls-ca-cert-file {t.ca}", "tls-auth-clients no",
                     "tls-replication yes", *lines[1:]]
        return "\n".join(lines) + "\n"

    def env(self) -> dict[str, str]:
        env = {"REDIS_MODE": "sentinel", "REDIS_SENTINEL_MASTER": self.name,
               "REDIS_SENTINELS": ",".join(f"127.0.0.1:{s.port}" for s in self.watchers)}
        if self.password:
            env["REDIS_PASSWORD"] = self.password
        if self.sentinel_password:
            env["REDIS_SENTINEL_PASSWORD"] = self.sentinel_password
        if self.tls:
            env |= {"REDIS_TLS": "true", "REDIS_TLS_CA_FILE": str(self.tls.ca)}
        return env

    def start(self) -> None:
        for s in self.servers:
            s.start()
        poll("the replicas to sync", lambda: self._replicas_synced(self.servers[0]), 30)
        for w in self.watchers:
            w.start()
        poll("the sentinels to see the master, its replicas and each other", self._sentinels_ready, 60)

    def stop(self) -> None:
        for w in self.watchers:
            w.stop()
        for s in self.servers:
            s.stop(signal.SIGKILL)

    def _replicas_synced(self, master: RedisServer) -> bool | None:
        return True if replicas_online(master, self.server) >= self.replicas else None

    def _sentinels_ready(self) -> bool | None:
        for w in self.watchers:
            client = w.client()
            try:
                state = client.sentinel_master(self.name)
            finally:
                client.close()
            if (int(state["num-slaves"]) < self.replicas or int(state["num-other-sentinels"]) < self.sentinels - 1
                    or state["is_sdown"] or state["is_odown"]):
                return None
        return True

    def master_port(self) -> int:
        """The master's port as the sentinels' majority names it."""
        votes: dict[int, int] = {}
        for w in self.watchers:
            client = w.client()
            try:
                addr = client.sentinel_get_master_addr_by_name(self.name)
                if addr:
                    votes[int(addr[1])] = votes.get(int(addr[1]), 0) + 1
            except sync_redis.exceptions.RedisError:
                continue
            finally:
                client.close()
        return max(votes, key=lambda p: votes[p])

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def kill_master(self, replicas_lag_s: float = 0.0, filler_key: str = "lag-filler") -> RedisServer:
        """SIGKILL the master (`replicas_lag_s`: as ClusterTopology.kill_master_of)."""
        victim = self.server(self.master_port())
        with stalled(victim, replica_servers(victim, self.server), replicas_lag_s, filler_key):
            victim.stop(signal.SIGKILL)
        return victim

    def wait_failover(self, old_port: int, timeout: float = 60) -> int:
        """Wait until every sentinel names a new master that says it is one; returns its port."""
        def promoted() -> int | None:
            ports = set()
            for w in self.watchers:
                client = w.client()
                try:
                    ports.add(int(client.sentinel_get_master_addr_by_name(self.name)[1]))
                finally:
                    client.close()
            if len(ports) != 1 or old_port in ports:
                return None
            port = ports.pop()
            return port if replication(self.server(port))["role"] == "master" else None
        return poll("the sentinels to promote a replica", promoted, timeout)

    def wait_rejoined(self, server: RedisServer, timeout: float = 60) -> None:
        """A restarted old master, turned into a replica of the new one by the sentinels, is in sync."""
        def synced() -> bool | None:
            return True if _synced_replica(replication(server)) else None
        poll("the old master to rejoin as a replica", synced, timeout)


@contextmanager
def cluster(base: Path, **kwargs: Any) -> Iterator[ClusterTopology]:
    topo = ClusterTopology(base, **kwargs)
    try:
        topo.start()
        yield topo
    finally:
        topo.stop()


@contextmanager
def sentinel(base: Path, **kwargs: Any) -> Iterator[SentinelTopology]:
    topo = SentinelTopology(base, **kwargs)
    try:
        topo.start()
        yield topo
    finally:
        topo.stop()

