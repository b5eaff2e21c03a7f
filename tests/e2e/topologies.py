"""`make e2e`'s real Redis topologies (tests/topology.py): a Sentinel deployment (1 master + 2 replicas + 3
sentinels, data and sentinel passwords) and a Redis Cluster (3 masters + 3 replicas, no auth), on 127.0.0.1,
where the KEDA operator (a host process) reaches them.

    python tests/e2e/topologies.py serve DIR OUT.json
    python tests/e2e/topologies.py master OUT.json sentinel|cluster KEY      -> "<port> <pid>" of the master now

`serve` starts both under DIR, writes what run.sh needs to OUT.json (ports, passwords, pids by port), and serves
until SIGTERM, then stops every server it started (run.sh registers this process group in the cluster's pid dir).
`master` names the master that serves KEY now (sentinel: the one the sentinels' majority names; cluster: the one
of KEY's slot), for run.sh to kill it.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis as sync_redis
from redis.crc import key_slot

from tests.topology import ClusterTopology, SentinelTopology

PASSWORD = "e2e-topology-pw"
SENTINEL_PASSWORD = "e2e-sentinel-pw"


def describe(sentinel: SentinelTopology, cluster: ClusterTopology) -> dict[str, Any]:
    master = sentinel.server(sentinel.master_port())
    return {
        "password": PASSWORD, "sentinel_password": SENTINEL_PASSWORD,
        "sentinel": {"master": sentinel.name, "sentinels": [w.port for w in sentinel.watchers],
                     "data_ports": [s.port for s in sentinel.servers], "master_port": master.port},
        "cluster": {"nodes": [n.port for n in cluster.nodes], "pids": {str(n.port): n.proc.pid for n in cluster.nodes
                                                                      if n.proc is not None}},
        "sentinel_pids": {str(s.port): s.proc.pid for s in sentinel.servers if s.proc is not None},
    }


def master_now(info: dict[str, Any], kind: str, key: str) -> tuple[int, int]:
    """(port, pid) of the master serving `key` as the live topology says (connection errors: the next node)."""
    if kind == "sentinel":
        ports = []
        for port in info["sentinel"]["sentinels"]:
            try:
                c = sync_redis.Redis(port=port, password=info["sentinel_password"], socket_timeout=2)
                ports.append(int(c.sentinel_get_master_addr_by_name(info["sentinel"]["master"])[1]))
            except sync_redis.RedisError:
                continue
        port = max(set(ports), key=ports.count)
        return port, info["sentinel_pids"][str(port)]
    slot = key_slot(key.encode())
    for node in info["cluster"]["nodes"]:
        try:
            for start, end, master, *_ in sync_redis.Redis(port=node, socket_timeout=2).execute_command(
                    "CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(master[1]), info["cluster"]["pids"][str(master[1])]
        except sync_redis.RedisError:
            continue
    raise SystemExit(f"no live node serves slot {slot}")


def main(base: Path, out: Path) -> int:
    sentinel = SentinelTopology(base / "sentinel", password=PASSWORD, sentinel_password=SENTINEL_PASSWORD)
    cluster = ClusterTopology(base / "cluster", node_timeout_ms=1000)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        sentinel.start()
        cluster.start()
        out.write_text(json.dumps(describe(sentinel, cluster)))
        while not stop:
            signal.pause()
    finally:
        cluster.stop()
        sentinel.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        sys.exit(main(Path(sys.argv[2]), Path(sys.argv[3])))
    deadline = time.monotonic() + 10
    while True:  # a node that just died may still be named for a moment; a failover in progress names none
        try:
            print(*master_now(json.loads(Path(sys.argv[2]).read_text()), sys.argv[3], sys.argv[4]))
            break
        except (ValueError, SystemExit):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
