"""The scenarios of `make e2e-pods`, run by tests/e2e/pods.sh on the one-node cluster of `cluster.sh up --pods`
with KEDA installed from its own chart: the captcha-solver chart as users get it (its KEDA dependency in charts/,
values-examples/e2e-pods.yaml, the images of images.sh), one release per Helm major version, its pods really running.

  1       idle at 0 pods; 200 tasks -> KEDA 0 -> 1, the HPA 1 -> N (maxReplicaCount); every task solved by the pods;
          never more than the plan's threads in flight at the simulator; lists empty -> 0 pods; every worker that
          stopped exited 0 after finishing its in-flight solves (no SIGKILL; grace > drain >= solve timeout)
  switch  keda.enabled false -> true keeps the running worker count (no drop to 1)
  3       helm test --logs; helm rollback (its pre-rollback hook holds the limit); kubectl delete pod mid-solve;
          the Redis pod restarted, data kept (AOF)
  4       NetworkPolicies on (ingress and egress): what they allow still works (kube-proxy does not enforce them)
  2       helm upgrade --set captchaai.threads up and down while a backlog runs; maxReplicaCount follows and the
          simulator never sees a submission over the plan being rolled out (lowering: the pre-upgrade hook holds the
          lower limit in Redis before any pod changes, and the plan is reduced from then on)

Every measured figure goes to <results>/figures.json and is printed at the end. Needs: KUBECONFIG and PATH from
pods.sh (kubectl, helm3, helm4), and the project's .venv (redis-py; the captcha-worker CLI as the producer).

    .venv/bin/python tests/e2e/pods.py --helms helm3,helm4 --scenarios 1,switch,3,4,2 --results DIR
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis

ROOT = Path(__file__).resolve().parents[2]
# E2E_PODS_CHART: the chart to install: pods.sh passes the `helm package` archive, or another copy of the chart (e.g.
# one with a defect put back, to see a scenario fail); default the chart directory
CHART = Path(os.environ.get("E2E_PODS_CHART") or ROOT / "charts" / "captcha-solver")
VALUES = ROOT / "values-examples" / "e2e-pods.yaml"
CLI = ROOT / ".venv" / "bin" / "captcha-worker"
TASK = {"method": "turnstile", "params": {"sitekey": "0x4AAAAAAAe2e", "pageurl": "https://e2e.example/login"}}
DEFAULT_SCENARIOS = ("1", "switch", "3", "4", "2")


class Failure(Exception):
    """A scenario's assertion failed (the message says what was expected and what was seen)."""


def expect(ok: bool, message: str) -> None:
    if not ok:
        raise Failure(message)


def say(msg: str) -> None:
    print(f"e2e-pods {time.strftime('%H:%M:%S')} {msg}", flush=True)


def run(*cmd: str | Path, check: bool = True, timeout: float = 600, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, input=stdin,
                          env=env, check=False)
    if check and proc.returncode != 0:
        raise Failure(f"{' '.join(map(str, cmd[:6]))} ... failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                      f"\n{proc.stderr[-3000:]}")
    return proc


def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("kubectl", *args, check=check, timeout=120)


def kjson(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def wait_until(timeout: float, what: str, probe: Callable[[], bool], interval: float = 0.5) -> float:
    start = time.monotonic()
    while True:
        with contextlib.suppress(Failure, subprocess.SubprocessError, OSError, ValueError, KeyError):
            if probe():
                return round(time.monotonic() - start, 1)
        if time.monotonic() - start > timeout:
            raise Failure(f"timed out after {timeout:.0f}s waiting for: {what}")
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------------- watches
class Watch(threading.Thread):
    """`kubectl get -w --output-watch-events -o json` in the background: (seconds, event type, object) in order."""

    def __init__(self, ns: str, kind: str, selector: str, on_object: Callable[[dict[str, Any]], None] | None = None):
        super().__init__(daemon=True)
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._on_object = on_object
        self._t0 = time.monotonic()
        self._proc = subprocess.Popen(["kubectl", "-n", ns, "get", kind, "-l", selector, "-w",
                                       "--output-watch-events", "-o", "json"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.start()

    def run(self) -> None:
        decoder, buf = json.JSONDecoder(), ""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            buf += line
            while buf.strip():
                try:
                    obj, end = decoder.raw_decode(buf.lstrip())
                except json.JSONDecodeError:
                    break
                buf = buf.lstrip()[end:]
                self.events.append((time.monotonic() - self._t0, obj.get("type", ""), obj.get("object", {})))
                if self._on_object:
                    self._on_object(obj.get("object", {}))

    def stop(self) -> None:
        self._proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        self.join(timeout=5)

    def replicas(self) -> list[tuple[float, int]]:
        """The Deployment's spec.replicas over time (changes only)."""
        out: list[tuple[float, int]] = []
        for t, _, obj in self.events:
            r = int(obj.get("spec", {}).get("replicas", 1))
            if not out or out[-1][1] != r:
                out.append((round(t, 1), r))
        return out

    def terminations(self) -> dict[str, dict[str, Any]]:
        """Per pod, the last terminated state of its containers: {pod: {container: {exitCode, reason, ...}}}."""
        out: dict[str, dict[str, Any]] = {}
        for _, _, obj in self.events:
            for cs in obj.get("status", {}).get("containerStatuses", []):
                term = cs.get("state", {}).get("terminated") or cs.get("lastState", {}).get("terminated")
                if term:
                    out.setdefault(obj["metadata"]["name"], {})[cs["name"]] = term
        return out


class LogFollower:
    """`kubectl logs -f` of every worker pod the pod watch sees running, into <dir>/<pod>.log."""

    def __init__(self, ns: str, directory: Path) -> None:
        self.ns, self.dir, self._seen, self._procs = ns, directory, set[str](), list[subprocess.Popen[bytes]]()
        directory.mkdir(parents=True, exist_ok=True)

    def __call__(self, pod: dict[str, Any]) -> None:
        name = pod.get("metadata", {}).get("name", "")
        running = any(cs.get("state", {}).get("running") for cs in pod.get("status", {}).get("containerStatuses", []))
        if name and running and name not in self._seen:
            self._seen.add(name)
            with (self.dir / f"{name}.log").open("wb") as out:
                self._procs.append(subprocess.Popen(["kubectl", "-n", self.ns, "logs", "-f", name, "-c", "worker"],
                                                    stdout=out, stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        time.sleep(1)  # the last lines of pods that just exited
        for p in self._procs:
            p.terminate()

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.dir.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if rec.get("event") == name:
                        out.append({"pod": path.stem, **rec})
        return out


# ---------------------------------------------------------------------------------------------------- a release
@dataclass
class Release:
    helm: str
    ns: str
    image_tag: str
    results: Path
    name: str = "cs"
    sets: tuple[str, ...] = ()
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def fullname(self) -> str:
        return f"{self.name}-captcha-solver"

    @property
    def worker(self) -> str:
        return f"{self.fullname}-worker"

    def helm_cmd(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return run(self.helm, *args, "-n", self.ns, check=check, timeout=timeout)

    def install(self) -> None:
        kubectl("create", "namespace", self.ns)
        # the chart's pods meet the restricted Pod Security profile: enforce it
        kubectl("label", "namespace", self.ns, "pod-security.kubernetes.io/enforce=restricted")
        if "redis.persistence.enabled=false" not in self.sets:
            self._persistent_volume()
        t = time.monotonic()
        sets = [a for v in (f"image.tag={self.image_tag}", *self.sets) for a in ("--set", v)]
        out = self.helm_cmd("install", self.name, str(CHART), "-f", str(VALUES), *sets,
                            "--wait", "--timeout", "5m").stdout
        (self.results / f"{self.helm}-{self.ns}-install.out").write_text(out)
        if "simulator.enabled=false" not in self.sets:  # `--wait` does not cover the Service's endpoints
            wait_until(60, "the simulator answering through its Service", lambda: bool(self.sim("stats")))
        self.figures["install_s"] = round(time.monotonic() - t, 1)
        say(f"{self.helm}: installed {self.name} in {self.ns} in {self.figures['install_s']}s "
            f"({' '.join(self.sets) or 'Redis with persistence on a hostPath PV, simulator, KEDA on'})")

    def _persistent_volume(self) -> None:
        path = Path(os.environ["E2E_PV_DIR"]) / self.ns
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o1777)  # hostPath volumes get no fsGroup: Redis runs as uid 10001
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{self.ns}-redis"},
              "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                       "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path), "type": "Directory"},
                       "claimRef": {"namespace": self.ns, "name": f"data-{self.fullname}-redis-0"}}}
        run("kubectl", "apply", "-f", "-", stdin=json.dumps(pv))

    def upgrade(self, *sets: str, timeout: float = 300) -> str:
        """helm upgrade --reset-then-reuse-values, once: a server-side apply conflict on .spec.replicas (Helm 4
        naming a field the HPA owns) fails the run -- the chart leaves the field out then (_keda.tpl)."""
        args = ["upgrade", self.name, str(CHART), "--reset-then-reuse-values", "--wait",
                "--timeout", f"{int(timeout)}s"]
        for s in sets:
            args += ["--set", s]
        proc = self.helm_cmd(*args, check=False, timeout=timeout + 60)
        if proc.returncode != 0 and "conflict" in proc.stderr and ".spec.replicas" in proc.stderr:
            self.figures["ssa_replicas_conflicts"] = self.figures.get("ssa_replicas_conflicts", 0) + 1
        expect(proc.returncode == 0, f"helm upgrade {' '.join(sets)} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def uninstall(self) -> None:
        self.helm_cmd("uninstall", self.name, "--wait", "--timeout", "3m")
        left = kubectl("-n", self.ns, "get", "scaledobjects,hpa,deploy,statefulsets", "-o", "name").stdout.split()
        expect(not left, f"helm uninstall left {left}")
        kubectl("delete", "namespace", self.ns, "--wait=true", "--timeout=180s")
        kubectl("delete", "pv", f"{self.ns}-redis", "--ignore-not-found")

    # -- the cluster's view
    def service_ip(self, name: str) -> str:
        return str(kubectl("-n", self.ns, "get", "svc", name, "-o", "jsonpath={.spec.clusterIP}").stdout)

    def spec_replicas(self) -> int:
        return int(kjson("-n", self.ns, "get", "deploy", self.worker)["spec"].get("replicas", 1))

    def worker_pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = kjson("-n", self.ns, "get", "pods", "-l",
                                            "app.kubernetes.io/component=worker")["items"]
        return items

    def max_replica_count(self) -> int:
        return int(kjson("-n", self.ns, "get", "scaledobject", self.worker)["spec"]["maxReplicaCount"])

    def hpa_max(self) -> int:
        return int(kjson("-n", self.ns, "get", "hpa", f"keda-hpa-{self.worker}")["spec"]["maxReplicas"])

    # -- Redis and the simulator, reached from the host through their Services (kube-proxy)
    @property
    def redis_password(self) -> str:
        data = kjson("-n", self.ns, "get", "secret", f"{self.fullname}-redis")["data"]["redis-password"]
        return base64.b64decode(data).decode()

    def redis(self) -> redis.Redis:
        return redis.Redis(host=self.service_ip(f"{self.fullname}-redis"), port=6379, password=self.redis_password,
                           socket_timeout=5, decode_responses=True)

    def queue_lengths(self) -> dict[str, int]:
        r = self.redis()
        return {k: int(cast(int, r.llen("{captcha}:" + k))) for k in ("pending", "processing", "dead")}

    def sim(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"http://{self.service_ip(f'{self.fullname}-simulator')}:8080/_sim/{path}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method="POST" if path in ("reset", "config") else "GET",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.loads(resp.read() or b"{}")
            return out

    # -- producer: the project's CLI on the host
    def cli_env(self) -> dict[str, str]:
        return dict(os.environ, REDIS_PASSWORD=self.redis_password,
                    REDIS_URL=f"redis://{self.service_ip(f'{self.fullname}-redis')}:6379/0", QUEUE_NAME="captcha")

    def submit(self, n: int) -> list[str]:
        tasks = "\n".join(json.dumps(TASK) for _ in range(n)) + "\n"
        out = run(CLI, "submit", "-f", "-", stdin=tasks, env=self.cli_env()).stdout
        ids = out.split()
        expect(len(ids) == n, f"submitted {n} tasks, got {len(ids)} ids")
        return ids

    def outcomes(self, ids: list[str], timeout: float) -> dict[str, list[str]]:
        """Wait for the results of ids; {status: [ids]} ("missing": no result at all)."""
        proc = run(CLI, "wait", "--timeout", str(timeout), *ids, check=False, timeout=timeout + 60,
                   env=self.cli_env())
        seen: dict[str, list[str]] = {}
        for line in proc.stdout.splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                seen.setdefault(rec["status"], []).append(rec["id"])
        got = {i for v in seen.values() for i in v}
        missing = [i for i in ids if i not in got]
        if missing:
            seen["missing"] = missing
        return seen


@contextlib.contextmanager
def watching(rel: Release, tag: str) -> Iterator[tuple[Watch, Watch, LogFollower]]:
    logs = LogFollower(rel.ns, rel.results / f"{rel.helm}-{tag}-logs")
    pods = Watch(rel.ns, "pods", "app.kubernetes.io/component=worker", on_object=logs)
    deploy = Watch(rel.ns, "deploy", "app.kubernetes.io/component=worker")
    try:
        yield deploy, pods, logs
    finally:
        logs.stop()
        pods.stop()
        deploy.stop()


def check_clean_exits(pods: Watch, logs: LogFollower, figures: dict[str, Any]) -> None:
    """Every worker container that stopped exited 0 (137 = SIGKILL, e.g. at the end of the grace period), and no
    drain ran out of time (a worker that had to cancel solves logs drain_grace_exceeded). One exception: SIGTERM
    before the worker installed its handler ends it at once (143, dumb-init passes the status on); it had claimed
    nothing yet (no worker_started in its log)."""
    exits = {pod: c["worker"] for pod, c in pods.terminations().items() if "worker" in c}
    started = {e["pod"] for e in logs.events("worker_started")}
    early = {pod for pod, t in exits.items() if t.get("exitCode") == 143 and pod not in started}
    bad = {pod: f"{t.get('exitCode')} {t.get('reason', '')}" for pod, t in exits.items()
           if t.get("exitCode") != 0 and pod not in early}
    draining = logs.events("draining")
    exceeded = logs.events("drain_grace_exceeded")
    if bad:  # keep what the watch saw of them: the pods are gone by now
        seen = [obj for _, _, obj in pods.events if obj.get("metadata", {}).get("name") in bad]
        (logs.dir / "bad-exits.json").write_text(json.dumps(seen, indent=1))
    figures.update(workers_stopped=len(exits), workers_exit_nonzero=len(bad), workers_stopped_while_starting=len(early),
                   drains_with_solves_in_flight=len(draining),
                   solves_in_flight_at_sigterm=sum(int(e.get("jobs", 0)) for e in draining),
                   drains_out_of_time=len(exceeded))
    expect(not bad, f"worker containers did not exit 0: {bad}")
    expect(not exceeded, f"a drain ran out of its grace and requeued solves: {exceeded}")


def check_grace(rel: Release, figures: dict[str, Any]) -> None:
    """grace > drain >= solve timeout on the live objects (the chart validates it; this reads what runs)."""
    pod = kjson("-n", rel.ns, "get", "deploy", rel.worker)["spec"]["template"]["spec"]
    cfg = kjson("-n", rel.ns, "get", "configmap", rel.worker)["data"]
    grace, drain, solve = (int(pod["terminationGracePeriodSeconds"]), int(cfg["DRAIN_GRACE_SECONDS"]),
                           int(cfg["SOLVE_TIMEOUT_SECONDS"]))
    figures.update(grace_s=grace, drain_s=drain, solve_timeout_s=solve)
    expect(grace > drain >= solve,
           f"want terminationGracePeriodSeconds {grace} > drain {drain} >= solve timeout {solve}")


# ---------------------------------------------------------------------------------------------------- scenarios
def scenario_1(rel: Release, f: dict[str, Any]) -> dict[str, Any]:
    """0 -> 1 -> N -> 0 on 200 tasks, all solved, the plan never exceeded, clean exits."""
    f.update({"tasks": 200})
    wait_until(120, "worker at 0 replicas and no worker pods while idle",
               lambda: rel.spec_replicas() == 0 and not rel.worker_pods())
    n = rel.max_replica_count()
    threads = int(rel.sim("stats")["threads"])
    f.update(max_replica_count=n, plan_threads=threads)
    rel.sim("reset")
    with watching(rel, "s1") as (deploy, pods, logs):
        t0 = time.monotonic()
        ids = rel.submit(200)

        def since() -> float:
            return round(time.monotonic() - t0, 1)

        wait_until(60, "KEDA scales 0 -> 1", lambda: rel.spec_replicas() >= 1)
        f["first_pod_s"] = since()
        wait_until(180, f"the HPA scales to N = {n}", lambda: rel.spec_replicas() == n)
        f["n_pods_s"] = since()
        wait_until(180, f"{n} worker pods Ready", lambda: sum(
            1 for p in rel.worker_pods() for c in p["status"].get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True") == n, interval=1)
        f["n_ready_s"] = since()
        outcome = rel.outcomes(ids, timeout=900)
        f["all_done_s"] = round(time.monotonic() - t0, 1)
        f["solved"] = len(outcome.get("solved", []))
        f["lost"] = len(ids) - f["solved"]
        f["outcomes"] = {k: len(v) for k, v in outcome.items()}
        t_empty = time.monotonic()
        f["back_to_zero_s"] = wait_until(180, "KEDA scales back to 0 and every worker pod is gone",
                                         lambda: rel.spec_replicas() == 0 and not rel.worker_pods(), interval=1)
        f["back_to_zero_after_done_s"] = round(time.monotonic() - t_empty, 1)
    timeline = deploy.replicas()
    f["replicas_timeline"] = timeline
    f["pods_max"] = max(r for _, r in timeline)
    stats = rel.sim("stats")
    f.update(sim_solved=stats["solved"], sim_max_in_flight=stats["max_in_flight"], sim_queued=stats["queued"],
             sim_over_cap_rejections=stats["over_cap_rejections"], sim_utilisation=round(stats["utilisation"], 3))
    f["queue_after"] = rel.queue_lengths()
    check_clean_exits(pods, logs, f)
    check_grace(rel, f)
    nonzero = [r for _, r in timeline if r > 0]
    expect(bool(nonzero) and nonzero[0] == 1, f"KEDA's first step from 0 should be 1: {timeline}")
    expect(f["pods_max"] == n, f"the HPA reached {f['pods_max']} pods, want N = maxReplicaCount = {n}: {timeline}")
    expect(f["lost"] == 0, f"{f['lost']} of 200 tasks not solved: {f['outcomes']}")
    expect(stats["max_in_flight"] <= threads and stats["queued"] == 0 and stats["over_cap_rejections"] == 0,
           f"the simulator saw more solves than the plan's {threads} threads: max in flight {stats['max_in_flight']}, "
           f"{stats['queued']} queued, {stats['over_cap_rejections']} rejected")
    expect(f["queue_after"] == {"pending": 0, "processing": 0, "dead": 0}, f"lists not empty: {f['queue_after']}")
    say(f"{rel.helm}: 1: 0 -> 1 after {f['first_pod_s']}s -> {n} pods after {f['n_pods_s']}s ({n} Ready after "
        f"{f['n_ready_s']}s); 200/200 solved in "
        f"{f['all_done_s']}s; max {stats['max_in_flight']} in flight / {threads} threads, 0 queued; back to 0 "
        f"{f['back_to_zero_after_done_s']}s after the last result; {f['workers_stopped']} workers stopped, all exit 0 "
        f"({f['solves_in_flight_at_sigterm']} solves in flight at SIGTERM, all finished)")
    return f


def scenario_switch(main: Release, f: dict[str, Any]) -> dict[str, Any]:
    """keda.enabled false -> true (bootstrap step 2) keeps the worker count: a release of its own, installed like
    step 1 (fixed replicas), then switched."""
    rel = Release(helm=main.helm, ns=f"{main.ns}-switch", image_tag=main.image_tag, results=main.results,
                  sets=("keda.enabled=false", "worker.replicas=3", "redis.persistence.enabled=false"))
    rel.install()
    f.update({"fixed_replicas": 3})
    wait_until(120, "3 fixed worker pods Ready", lambda: len([
        p for p in rel.worker_pods() if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in p["status"].get("conditions", []))]) == 3, interval=1)
    ids = rel.submit(60)  # a backlog: with KEDA on the HPA wants 5, never fewer than 3
    with watching(rel, "switch") as (deploy, pods, logs):
        time.sleep(1)
        t = time.monotonic()
        rel.upgrade("keda.enabled=true")
        f["upgrade_s"] = round(time.monotonic() - t, 1)
        time.sleep(15)  # KEDA and the HPA take over
    timeline = deploy.replicas()
    f["replicas_timeline"] = timeline
    f["min_replicas_during_switch"] = min(r for _, r in timeline)
    outcome = rel.outcomes(ids, timeout=600)
    f["solved"] = len(outcome.get("solved", []))
    check_clean_exits(pods, logs, f)
    expect(f["min_replicas_during_switch"] >= 3,
           f"keda.enabled=false -> true dropped the workers to {f['min_replicas_during_switch']}: {timeline}")
    expect(f["solved"] == 60, f"{60 - f['solved']} of 60 tasks not solved across the switch: {outcome.keys()}")
    say(f"{rel.helm}: switch: keda.enabled false -> true with 3 pods: replicas {timeline} (never below 3); "
        f"60/60 solved")
    rel.uninstall()
    return f


def scenario_3(rel: Release, f: dict[str, Any]) -> dict[str, Any]:
    # a. helm test --logs: the test pod stays after success so its output can be read
    out = rel.helm_cmd("test", rel.name, "--logs", "--timeout", "3m").stdout
    (rel.results / f"{rel.helm}-test.out").write_text(out)
    expect("Phase:          Succeeded" in out or "Phase: Succeeded" in out, f"helm test did not succeed:\n{out}")
    expect("POD LOGS" in out, f"helm test --logs printed no pod logs:\n{out[-2000:]}")
    f["helm_test"] = "Succeeded, logs shown"
    # b. rollback
    history = json.loads(rel.helm_cmd("history", rel.name, "-o", "json").stdout)
    before = history[-1]["revision"]
    template = kjson("-n", rel.ns, "get", "deploy", rel.worker)["spec"]["template"]["metadata"]["annotations"]
    rel.upgrade("worker.logLevel=debug")
    changed = kjson("-n", rel.ns, "get", "deploy", rel.worker)["spec"]["template"]["metadata"]["annotations"]
    expect(changed["checksum/config"] != template["checksum/config"], "the logLevel upgrade did not change the pods")
    r, holder = rel.redis(), f":rollout-{rel.name}"

    def holds() -> list[str]:
        return [m for m in cast(list[str], r.zrange("{captcha}:limits", 0, -1)) if m.endswith(holder)]

    r.zrem("{captcha}:limits", *holds() or ["-"])
    rel.helm_cmd("rollback", rel.name, str(before), "--wait", "--timeout", "3m")
    held = holds()
    expect(bool(held), "helm rollback ran no pre-rollback limit hook: no rollout hold in {captcha}:limits")
    after = kjson("-n", rel.ns, "get", "deploy", rel.worker)["spec"]["template"]["metadata"]["annotations"]
    history = json.loads(rel.helm_cmd("history", rel.name, "-o", "json").stdout)
    expect(after == template, f"rollback to {before} did not restore the pod template: {after} != {template}")
    expect(history[-1]["description"] == f"Rollback to {before}", f"history: {history[-1]}")
    expect(kjson("-n", rel.ns, "get", "scaledobject", rel.worker)["status"]["conditions"][0]["status"] == "True",
           "ScaledObject not Ready after the rollback")
    f["rollback"] = f"to revision {before}: template restored, ScaledObject Ready, hook held {held[0]}"
    say(f"{rel.helm}: 3: helm test --logs ok; rollback to {before} restored the pod template; its hook held "
        f"{held[0]} in Redis")
    f["delete_pod"] = delete_pod_mid_solve(rel)
    f["delete_while_starting"] = delete_while_starting(rel)
    f["redis_restart"] = restart_redis(rel)
    return f


def delete_while_starting(rel: Release) -> dict[str, Any]:
    """A worker pod deleted the moment its container starts (before Python can have installed its SIGTERM handler)
    ends at once. Without an init as PID 1 the kernel dropped that SIGTERM: the worker ran on, claiming tasks, until
    the kubelet's SIGKILL at the end of the grace period."""
    pod = kjson("-n", rel.ns, "get", "deploy", rel.worker)["spec"]["template"]
    pod["metadata"] = {"name": "worker-startup-stop", "namespace": rel.ns,
                       "labels": {"app.kubernetes.io/component": "startup-stop"}}
    pod["spec"]["restartPolicy"] = "Never"
    run("kubectl", "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Pod", **pod}))
    wait_until(60, "the pod's container running", lambda: bool(kjson("-n", rel.ns, "get", "pod", "worker-startup-stop")[
        "status"].get("containerStatuses", [{}])[0].get("state", {}).get("running")), interval=0.1)
    t = time.monotonic()
    kubectl("-n", rel.ns, "delete", "pod", "worker-startup-stop", "--wait=false")
    term: dict[str, Any] = {}

    def terminated() -> bool:
        obj = kjson("-n", rel.ns, "get", "pod", "worker-startup-stop")
        term.update(obj["status"]["containerStatuses"][0]["state"].get("terminated") or {})
        return bool(term)

    with contextlib.suppress(Failure):
        wait_until(90, "the container terminated", terminated, interval=0.2)
    f = {"stopped_s": round(time.monotonic() - t, 1), "exit_code": term.get("exitCode"),
         "grace_s": pod["spec"]["terminationGracePeriodSeconds"]}
    wait_until(90, "the pod gone", lambda: kubectl("-n", rel.ns, "get", "pod", "worker-startup-stop",
                                                  check=False).returncode != 0)
    expect(f["exit_code"] in (0, 143) and f["stopped_s"] < 20,
           f"a worker stopped while starting took {f['stopped_s']}s and exited {f['exit_code']} (SIGKILL: 137)")
    say(f"{rel.helm}: 3: a worker deleted as its container started exited {f['exit_code']} after {f['stopped_s']}s "
        f"(grace {f['grace_s']}s)")
    return f


def in_flight(pod: dict[str, Any]) -> int:
    """captcha_solver_in_flight of a worker pod, from its /metrics (pod IPs are reachable from the node)."""
    url = f"http://{pod['status']['podIP']}:9100/metrics"
    with urllib.request.urlopen(url, timeout=3) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("captcha_solver_in_flight "):
                return int(float(line.split()[1]))
    return 0


def delete_pod_mid_solve(rel: Release) -> dict[str, Any]:
    f: dict[str, Any] = {}
    with watching(rel, "delete") as (_, pods, logs):
        ids = rel.submit(40)
        busy: list[str] = []

        def a_busy_pod() -> bool:
            busy[:] = [p["metadata"]["name"] for p in rel.worker_pods()
                       if p["status"].get("podIP") and in_flight(p) >= 1]
            return bool(busy)

        wait_until(90, "a worker pod with solves in flight", a_busy_pod)
        victim = busy[0]
        t = time.monotonic()
        kubectl("-n", rel.ns, "delete", "pod", victim, "--wait=true", "--timeout=120s")
        f["deleted_pod_gone_s"] = round(time.monotonic() - t, 1)
        outcome = rel.outcomes(ids, timeout=600)
    f["solved"] = len(outcome.get("solved", []))
    exit_state = pods.terminations().get(victim, {}).get("worker", {})
    f["victim_exit"] = exit_state.get("exitCode")
    drained = [e for e in logs.events("draining") if e["pod"] == victim]
    f["victim_solves_in_flight_at_sigterm"] = sum(int(e.get("jobs", 0)) for e in drained)
    check_clean_exits(pods, logs, f)
    expect(f["victim_solves_in_flight_at_sigterm"] >= 1, f"{victim} logged no drain with solves in flight")
    expect(f["victim_exit"] == 0, f"the deleted pod exited {exit_state}")
    expect(f["solved"] == 40, f"{40 - f['solved']} of 40 tasks lost to the pod deletion: {outcome.keys()}")
    say(f"{rel.helm}: 3: deleted {victim} with {f['victim_solves_in_flight_at_sigterm']} solves in flight: it "
        f"finished them and exited 0 in {f['deleted_pod_gone_s']}s; 40/40 solved")
    return f


def restart_redis(rel: Release) -> dict[str, Any]:
    f: dict[str, Any] = {}
    pod = f"{rel.fullname}-redis-0"
    ids = rel.submit(30)
    rel.redis().set("e2e:marker", "kept-across-restart")
    uid = kjson("-n", rel.ns, "get", "pod", pod)["metadata"]["uid"]
    f["pending_before"] = rel.queue_lengths()["pending"]
    t = time.monotonic()
    kubectl("-n", rel.ns, "delete", "pod", pod, "--wait=true", "--timeout=120s")
    f["redis_ready_again_s"] = wait_until(180, "the Redis pod back and Ready", lambda: (
        (p := kjson("-n", rel.ns, "get", "pod", pod))["metadata"]["uid"] != uid
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))))
    f["redis_down_s"] = round(time.monotonic() - t, 1)
    f["marker_after_restart"] = rel.redis().get("e2e:marker")
    outcome = rel.outcomes(ids, timeout=600)
    f["solved"] = len(outcome.get("solved", []))
    f["queue_after"] = rel.queue_lengths()
    expect(f["marker_after_restart"] == "kept-across-restart", "Redis lost its data across the restart (AOF on a PV)")
    expect(f["solved"] == 30, f"{30 - f['solved']} of 30 tasks lost across the Redis restart: {outcome}")
    expect(f["queue_after"]["dead"] == 0, f"dead letters after the restart: {f['queue_after']}")
    say(f"{rel.helm}: 3: Redis pod restarted ({f['pending_before']} tasks pending): back in {f['redis_down_s']}s "
        f"with its data; 30/30 solved")
    return f


def scenario_4(rel: Release, f: dict[str, Any]) -> dict[str, Any]:
    rel.upgrade("networkPolicy.enabled=true", "networkPolicy.egress.enabled=true")
    names = sorted(i["metadata"]["name"] for i in kjson("-n", rel.ns, "get", "networkpolicies")["items"])
    f["network_policies"] = names
    want = sorted(f"{rel.fullname}-{c}" for c in ("worker", "check", "limit", "redis", "simulator", "egress"))
    expect(names == want, f"want the NetworkPolicies {want} (the limit hook's included): {names}")
    with watching(rel, "netpol") as (deploy, pods, logs):
        ids = rel.submit(20)
        outcome = rel.outcomes(ids, timeout=600)
        wait_until(180, "back to 0", lambda: rel.spec_replicas() == 0 and not rel.worker_pods(), interval=1)
    f["solved"] = len(outcome.get("solved", []))
    f["replicas_timeline"] = deploy.replicas()
    check_clean_exits(pods, logs, f)
    out = rel.helm_cmd("test", rel.name, "--logs", "--timeout", "3m").stdout
    expect("Succeeded" in out, f"helm test with the policies on:\n{out}")
    expect(f["solved"] == 20, f"{20 - f['solved']} of 20 tasks not solved with the policies on")
    expect(max(r for _, r in f["replicas_timeline"]) >= 1, "KEDA did not scale up with the policies on")
    say(f"{rel.helm}: 4: {len(names)} NetworkPolicies (not enforced here): 20/20 solved, KEDA 0 -> "
        f"{max(r for _, r in f['replicas_timeline'])} -> 0, helm test ok")
    rel.upgrade("networkPolicy.enabled=false")
    return f


def scenario_2(rel: Release, f: dict[str, Any]) -> dict[str, Any]:
    """Plan changes while a backlog runs. The simulator is set to the plan being rolled out: before the upgrade
    that raises captchaai.threads (the threads are bought first), and for the one that lowers it as soon as its
    pre-upgrade hook (worker.limitHook) holds the lower limit in Redis, before any pod changes; from then on no
    worker may submit a solve that finds the plan full (the simulator counts those: queued), during the rollout
    included. Solves already in flight when the plan shrinks just finish. The limit is in Redis, the smallest a
    live one: the hook's hold, then the new pods' own."""
    base = int(rel.sim("stats")["threads"])
    ids = rel.submit(300)
    wait_until(120, "the backlog at full speed", lambda: rel.spec_replicas() == rel.max_replica_count(), interval=1)
    for step, threads in (("up", base + 6), ("down", base - 4)):
        t = time.monotonic()
        if step == "up":
            at_change = _plan_changed(rel, threads)
            rel.upgrade(f"captchaai.threads={threads}", timeout=600)
        else:
            at_change = _lowered(rel, threads, f.setdefault(step, {}))
        wait_until(300, "the rollout done", lambda: kjson("-n", rel.ns, "get", "deploy", rel.worker)["status"].get(
            "updatedReplicas", 0) == kjson("-n", rel.ns, "get", "deploy", rel.worker)["status"].get("replicas", -1),
            interval=2)
        time.sleep(5)
        stats = rel.sim("stats")
        f[step] = {**f.get(step, {}), "plan_threads": threads, "max_replica_count": rel.max_replica_count(),
                   "hpa_max": rel.hpa_max(),
                   "rollout_s": round(time.monotonic() - t, 1), "in_flight_at_change": at_change,
                   "sim_max_in_flight": stats["max_in_flight"], "sim_queued": stats["queued"],
                   "sim_over_cap_rejections": stats["over_cap_rejections"],
                   "sim_at_cap_s": round(stats["at_cap_seconds"], 1)}
        say(f"{rel.helm}: 2 {step}: threads -> {threads}: maxReplicaCount {f[step]['max_replica_count']}, "
            f"{at_change} in flight at the change, max {stats['max_in_flight']}, {stats['queued']} submissions "
            f"found the plan full")
    outcome = rel.outcomes(ids, timeout=900)
    f["solved"] = len(outcome.get("solved", []))
    rel.sim("config", {"threads": base})
    rel.upgrade(f"captchaai.threads={base}")
    for step, threads in (("up", base + 6), ("down", base - 4)):
        expect(f[step]["max_replica_count"] == threads // 2 and f[step]["hpa_max"] == threads // 2,
               f"{step}: maxReplicaCount/HPA max {f[step]['max_replica_count']}/{f[step]['hpa_max']} != {threads // 2}")
    expect(f["solved"] == 300, f"{300 - f['solved']} of 300 tasks lost across the plan changes")
    for step in ("up", "down"):
        over = f[step]["sim_queued"] + f[step]["sim_over_cap_rejections"]
        expect(over == 0, f"{step}: the plan of {f[step]['plan_threads']} threads was exceeded during the rollout: "
                          f"{over} submissions found it full ({f[step]['in_flight_at_change']} in flight at the "
                          f"change, max {f[step]['sim_max_in_flight']})")
    return f


def _plan_changed(rel: Release, threads: int) -> int:
    """The simulated plan set to `threads`, its counters reset; returns the solves in flight then."""
    rel.sim("config", {"threads": threads})
    rel.sim("reset")
    return int(rel.sim("stats")["in_flight"])


def _lowered(rel: Release, threads: int, f: dict[str, Any]) -> int:
    """`helm upgrade --set captchaai.threads=<lower>` in the background; its pre-upgrade hook (worker.limitHook)
    holds the lower limit in Redis before any pod changes, and the plan is reduced from that moment (an operator
    reduces it at CaptchaAI after running the upgrade). Returns the solves in flight when the plan shrank."""
    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            rel.upgrade(f"captchaai.threads={threads}", timeout=600)
        except BaseException as exc:  # re-raised in the scenario's thread below
            errors.append(exc)

    old_pods = {p["metadata"]["name"] for p in rel.worker_pods()}
    t, r = time.monotonic(), rel.redis()
    thread = threading.Thread(target=upgrade, daemon=True)
    thread.start()
    wait_until(180, f"the pre-upgrade hook's limit of {threads} in Redis",
               lambda: r.zscore("{captcha}:limits", f"{threads}:rollout-{rel.name}") is not None, interval=0.2)
    f["limit_held_after_s"] = round(time.monotonic() - t, 1)
    f["new_pods_at_hold"] = len({p["metadata"]["name"] for p in rel.worker_pods()} - old_pods)
    at_change = _plan_changed(rel, threads)
    thread.join(660)
    if errors:
        raise errors[0]
    return at_change


SCENARIOS: dict[str, Callable[[Release, dict[str, Any]], dict[str, Any]]] = {
    "1": scenario_1, "switch": scenario_switch, "3": scenario_3, "4": scenario_4, "2": scenario_2}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--helms", default="helm3,helm4")
    p.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    p.add_argument("--scenarios-for", action="append", default=[], metavar="HELM=LIST",
                   help="another scenario list for one Helm (e.g. helm3=1,switch,3,4: CI runs scenario 2 once)")
    p.add_argument("--image-tag", required=True, help="tag of localhost/captcha-solver built by images.sh")
    p.add_argument("--results", type=Path, required=True)
    ns = p.parse_args(argv)
    ns.results.mkdir(parents=True, exist_ok=True)
    per_helm = dict(item.split("=", 1) for item in ns.scenarios_for)
    figures: dict[str, Any] = {}
    failed: list[str] = []
    for helm in ns.helms.split(","):
        rel = Release(helm=helm, ns=f"e2e-pods-{helm}", image_tag=ns.image_tag, results=ns.results)
        figures[helm] = rel.figures
        try:
            rel.install()
            for name in per_helm.get(helm, ns.scenarios).split(","):
                t = time.monotonic()
                say(f"{helm}: == scenario {name}")
                rel.figures[name] = {}  # filled as it goes: a failing scenario keeps what it measured
                SCENARIOS[name](rel, rel.figures[name])
                rel.figures[name]["duration_s"] = round(time.monotonic() - t, 1)
            rel.uninstall()
        except Exception as exc:  # a Failure, or a bug or tool error: reported the same way, then teardown
            if not isinstance(exc, Failure):
                traceback.print_exc()
            failed.append(f"{helm}: {exc}")
            say(f"{helm}: FAILED: {exc}")
            break
        finally:
            (ns.results / "figures.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    say(f"figures in {ns.results / 'figures.json'}")
    for f in failed:
        print(f"e2e-pods FAIL: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
