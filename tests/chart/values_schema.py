"""Generate charts/captcha-solver/values.schema.json from values.yaml plus the constraints below.

Types come from the defaults in values.yaml; every object the chart defines gets ``additionalProperties: false`` so
an unknown key (a typo) fails the install. Objects that are passed to Kubernetes unchanged (resources, probes,
affinity, ...) are free-form; label/annotation maps must hold strings. ``keda`` is the one open object at the chart
level: its other keys are the kedacore/keda subchart's values.

    python tests/chart/values_schema.py          # rewrite the schema
    python tests/chart/values_schema.py --check  # exit 1 when the committed schema is stale (a test runs this)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "captcha-solver"

PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
FREE_OBJECT = {"type": "object"}
OBJECT_LIST = {"type": "array", "items": {"type": "object"}}
#: an Ingress's hosts: each a host and its paths (path, pathType)
INGRESS_HOSTS: dict[str, Any] = {"type": "array", "items": {"type": "object", "properties": {
    "host": {"type": "string", "minLength": 1},
    "paths": {"type": "array", "items": {"type": "object", "properties": {
        "path": {"type": "string", "minLength": 1},
        "pathType": {"type": "string", "enum": ["Prefix", "Exact", "ImplementationSpecific"]}},
        "required": ["path", "pathType"], "additionalProperties": False}}},
    "required": ["host", "paths"], "additionalProperties": False}}
DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"}
PROM_DURATION = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}  # a Prometheus rule's `for`
PROM_RANGE = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h|d|w|y))+$"}  # a range vector's window, e.g. 6h
SEVERITY = {"type": "string", "minLength": 1}
HOST_PORT = {"type": "string", "pattern": r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)(:[0-9]{1,5})?$"}  # REDIS_SENTINELS
INT_OR_PERCENT = {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^[0-9]+%$"}]}

# Exact schemas for paths whose default does not say enough.
OVERRIDES: dict[str, dict[str, Any]] = {
    "commonLabels": STRING_MAP,
    "clusterDomain": {"type": "string", "minLength": 1},
    "imagePullSecrets": {
        "type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                  "additionalProperties": False},
    },
    "captchaai.threads": {"type": "integer", "minimum": 1},
    "captchaai.monthlyPrice": {"type": "number", "minimum": 0},
    "captchaai.url": {"type": "string", "pattern": r"^(https?://[^\s]+)?$"},
    "captchaai.apiKey": {"type": "string", "pattern": r"^([0-9A-Za-z]{32})?$"},
    "captchaai.existingSecretKey": {"type": "string", "minLength": 1},
    "queue.name": {"type": "string", "pattern": r"^[A-Za-z0-9_.\-]{1,64}$"},
    "queue.leaseSeconds": {"type": "integer", "minimum": 3},
    "queue.maxAttempts": {"type": "integer", "minimum": 1},
    "queue.resultTtlSeconds": {"type": "integer", "minimum": 1},
    "queue.taskTtlSeconds": {"type": "integer", "minimum": 1},
    "queue.deadLetterMax": {"type": "integer", "minimum": 1},
    "queue.maxTaskBytes": {"type": "integer", "minimum": 1},
    "compat.queueList": {"type": "string", "maxLength": 256, "pattern": r"^\S*$"},
    "image.repository": {"type": "string", "minLength": 1},
    "image.tag": {"type": "string"},
    "image.digest": {"type": "string", "pattern": r"^(sha256:[a-f0-9]{64})?$"},
    "image.pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
    "serviceAccount.annotations": STRING_MAP,
    "worker.concurrency": {"type": "integer", "minimum": 1},
    "worker.replicas": {"type": "integer", "minimum": 0},
    "worker.solveTimeoutSeconds": {"type": "integer", "minimum": 1},
    "worker.drainGraceSeconds": {"type": "integer", "minimum": 0},
    "worker.terminationGracePeriodSeconds": {"type": ["integer", "null"], "minimum": 1},
    "worker.limitHook.holdSeconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 86400},  # `limit --hold`
    "worker.limitHook.resources": FREE_OBJECT,
    "worker.terminationGraceMarginSeconds": {"type": "integer", "minimum": 1},
    "worker.unsolvableRetries": {"type": "integer", "minimum": 0},
    "worker.httpTimeoutSeconds": {"type": "integer", "minimum": 1},
    "worker.threadsinfoIntervalSeconds": {"type": "integer", "minimum": 1},
    "worker.logLevel": {"type": "string", "enum": ["debug", "info", "warning", "error", "critical"]},
    "worker.extraEnv": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}, "value": {"type": "string"},
                           "valueFrom": {"type": "object"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "worker.envFrom": OBJECT_LIST,
    "worker.extraVolumes": OBJECT_LIST,
    "worker.extraVolumeMounts": OBJECT_LIST,
    "worker.lifecycle": FREE_OBJECT,
    "worker.resources": FREE_OBJECT,
    "worker.livenessProbe": FREE_OBJECT,
    "worker.readinessProbe": FREE_OBJECT,
    "worker.podSecurityContext": FREE_OBJECT,
    "worker.containerSecurityContext": FREE_OBJECT,
    "worker.updateStrategy": FREE_OBJECT,
    "worker.revisionHistoryLimit": {"type": "integer", "minimum": 0},
    "worker.annotations": STRING_MAP,
    "worker.podAnnotations": STRING_MAP,
    "worker.podLabels": STRING_MAP,
    "worker.nodeSelector": STRING_MAP,
    "worker.tolerations": OBJECT_LIST,
    "worker.affinity": FREE_OBJECT,
    "worker.topologySpreadConstraints": OBJECT_LIST,
    "metrics.port": PORT,
    "metrics.service.type": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "metrics.service.annotations": STRING_MAP,
    "metrics.serviceMonitor.labels": STRING_MAP,
    "metrics.serviceMonitor.interval": DURATION,
    "metrics.serviceMonitor.scrapeTimeout": DURATION,
    "metrics.serviceMonitor.relabelings": OBJECT_LIST,
    "metrics.serviceMonitor.metricRelabelings": OBJECT_LIST,
    "keda.scaledObject.minReplicaCount": {"type": "integer", "minimum": 0},
    "keda.scaledObject.maxReplicaCount": {"type": ["integer", "null"], "minimum": 1},
    "keda.scaledObject.pollingInterval": {"type": "integer", "minimum": 1},
    "keda.scaledObject.cooldownPeriod": {"type": "integer", "minimum": 0},
    "keda.scaledObject.initialCooldownPeriod": {"type": "integer", "minimum": 0},
    "keda.scaledObject.activationListLength": {"type": "integer", "minimum": 0},
    "keda.scaledObject.fallback.failureThreshold": {"type": "integer", "minimum": 1},
    "keda.scaledObject.fallback.replicas": {"type": "integer", "minimum": 1},
    "keda.scaledObject.fallback.behavior": {
        "type": "string",
        "enum": ["", "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"],
    },
    "keda.scaledObject.behavior": FREE_OBJECT,
    "keda.scaledObject.annotations": STRING_MAP,
    "redis.image.repository": {"type": "string", "minLength": 1},
    "redis.image.tag": {"type": "string", "minLength": 1},
    "redis.image.digest": {"type": "string", "pattern": r"^(sha256:[a-f0-9]{64})?$"},
    "redis.image.pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
    "redis.port": PORT,
    "redis.auth.password": {"type": "string", "pattern": r"^[^\s\"'\\]*$"},
    "redis.auth.existingSecretPasswordKey": {"type": "string", "minLength": 1},
    "redis.maxmemory": {"type": "string", "pattern": r"^([0-9]+(b|kb|k|mb|m|gb|g)?)?$"},
    "redis.persistence.accessModes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "redis.persistence.size": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"},
    "redis.persistence.appendfsync": {"type": "string", "enum": ["always", "everysec", "no"]},
    "redis.startupTimeoutSeconds": {"type": "integer", "minimum": 5},
    "redis.resources": FREE_OBJECT,
    "redis.podSecurityContext": FREE_OBJECT,
    "redis.containerSecurityContext": FREE_OBJECT,
    "redis.podAnnotations": STRING_MAP,
    "redis.nodeSelector": STRING_MAP,
    "redis.tolerations": OBJECT_LIST,
    "redis.affinity": FREE_OBJECT,
    "externalRedis.mode": {"type": "string", "enum": ["standalone", "sentinel", "cluster"]},
    "externalRedis.port": PORT,
    "externalRedis.db": {"type": "integer", "minimum": 0},
    "externalRedis.sentinel.hosts": {"type": "array", "items": HOST_PORT},
    "externalRedis.sentinel.masterName": {"type": "string", "pattern": r"^[A-Za-z0-9_.\-]{1,128}$"},
    "externalRedis.cluster.nodes": {"type": "array", "items": HOST_PORT},
    "externalRedis.waitReplicas": {"type": "integer", "minimum": 0, "maximum": 100},
    "externalRedis.waitTimeoutMs": {"type": "integer", "minimum": 1, "maximum": 60000},
    "externalRedis.existingSecretPasswordKey": {"type": "string", "minLength": 1},
    "externalRedis.tls.caSecretKey": {"type": "string", "minLength": 1},
    "simulator.extraArgs": {"type": "array", "items": {"type": "string"}},
    "simulator.port": PORT,
    "simulator.replicas": {"type": "integer", "minimum": 0, "maximum": 1},
    "simulator.threads": {"type": ["integer", "null"], "minimum": 1},
    "simulator.resources": FREE_OBJECT,
    "simulator.podAnnotations": STRING_MAP,
    "simulator.nodeSelector": STRING_MAP,
    "simulator.tolerations": OBJECT_LIST,
    "simulator.affinity": FREE_OBJECT,
    "podDisruptionBudget.maxUnavailable": INT_OR_PERCENT,
    "podDisruptionBudget.minAvailable": {"oneOf": [*INT_OR_PERCENT["oneOf"], {"type": "null"}]},
    "networkPolicy.kedaNamespace": {"type": "string", "minLength": 1},
    "networkPolicy.kedaPodLabels": STRING_MAP,
    "networkPolicy.metricsFrom": OBJECT_LIST,
    "networkPolicy.redisFrom": OBJECT_LIST,
    "networkPolicy.egress.dnsTo": OBJECT_LIST,
    "networkPolicy.egress.apiTo": OBJECT_LIST,
    "networkPolicy.egress.redisTo": OBJECT_LIST,
    "networkPolicy.egress.extraRules": OBJECT_LIST,
    "testPod.resources": FREE_OBJECT,
    "dashboard.labelKey": {"type": "string", "minLength": 1},
    "dashboard.folderAnnotation": {"type": "string", "minLength": 1},
    "dashboard.labels": STRING_MAP,
    "dashboard.annotations": STRING_MAP,
    "prometheusRule.additionalLabels": STRING_MAP,
    "prometheusRule.annotations": STRING_MAP,
    "prometheusRule.rules": OBJECT_LIST,
    "prometheusRule.runbookUrl": {"type": "string"},
    "prometheusRule.selector": {"type": "string"},
    "prometheusRule.gatewaySelector": {"type": "string"},
    "prometheusRule.alerts.planSaturated.for": PROM_DURATION,
    "prometheusRule.alerts.planSaturated.severity": SEVERITY,
    "prometheusRule.alerts.apiKeyRejected.for": PROM_DURATION,
    "prometheusRule.alerts.apiKeyRejected.severity": SEVERITY,
    "prometheusRule.alerts.noPlanCapacity.for": PROM_DURATION,
    "prometheusRule.alerts.noPlanCapacity.severity": SEVERITY,
    "prometheusRule.alerts.budgetFollowsPlan.for": PROM_DURATION,
    "prometheusRule.alerts.budgetFollowsPlan.severity": SEVERITY,
    "prometheusRule.alerts.planThreadsMismatch.for": PROM_DURATION,
    "prometheusRule.alerts.planThreadsMismatch.severity": SEVERITY,
    "prometheusRule.alerts.deadLettersGrowing.for": PROM_DURATION,
    "prometheusRule.alerts.deadLettersGrowing.severity": SEVERITY,
    "prometheusRule.alerts.noWorkerReady.for": PROM_DURATION,
    "prometheusRule.alerts.noWorkerReady.severity": SEVERITY,
    "prometheusRule.alerts.leasesReaped.for": PROM_DURATION,
    "prometheusRule.alerts.leasesReaped.severity": SEVERITY,
    "prometheusRule.alerts.tenantPinned.for": PROM_DURATION,
    "prometheusRule.alerts.tenantPinned.severity": SEVERITY,
    "prometheusRule.alerts.tenantPinned.utilisation": {"type": "number", "exclusiveMinimum": 0},
    "prometheusRule.alerts.providerBalanceLow.for": PROM_DURATION,
    "prometheusRule.alerts.providerBalanceLow.severity": SEVERITY,
    "prometheusRule.alerts.providerBalanceLow.days": {"type": "number", "exclusiveMinimum": 0},
    "prometheusRule.alerts.providerBalanceLow.rateWindow": PROM_RANGE,
    "prometheusRule.alerts.spendCapReached.for": PROM_DURATION,
    "prometheusRule.alerts.spendCapReached.severity": SEVERITY,
    "prometheusRule.alerts.spendCapReached.ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "prometheusRule.alerts.breakerOpen.for": PROM_DURATION,
    "prometheusRule.alerts.breakerOpen.severity": SEVERITY,
    "gateway.replicas": {"type": "integer", "minimum": 2},
    "gateway.port": PORT,
    "gateway.tenants": {
        "type": "array",
        "maxItems": 100,
        "items": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$"},
                "threads": {"type": "integer", "minimum": 1},
                "reserved": {"type": "integer", "minimum": 0},
                "rateLimit": {"type": "object", "properties": {
                    "requestsPerSecond": {"type": "number", "exclusiveMinimum": 0},
                    "burst": {"type": "integer", "minimum": 1}},
                    "required": ["requestsPerSecond"], "additionalProperties": False},
                "pingbackHosts": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "pingbackNetworks": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "balance": {"type": "number"},
            },
            "required": ["name", "threads"],
            "additionalProperties": False,
        },
    },
    "providers": {
        "type": "array",
        "maxItems": 32,
        "items": {
            "type": "object",
            "properties": {
                # a DNS label: it names the pod's volume of the provider's Secret (PROVIDERS takes '_' too)
                "name": {"type": "string", "pattern": r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$",
                         "not": {"const": "captchaai"}},
                "protocol": {"type": "string", "enum": ["res.php", "createTask"]},
                "url": {"type": "string", "maxLength": 512, "pattern": r"^https?://[^\s/?#@]+(/[^\s?#]*)?$"},
                "kinds": {"type": "array", "minItems": 1, "uniqueItems": True,
                          "items": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_]{0,39}$"}},
                "pricePer1000": {"type": "object", "minProperties": 1,
                                 "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1000000}},
                "concurrency": {"type": "integer", "minimum": 1, "maximum": 1000},
                "refundUnsolvable": {"type": "boolean"},
                "dialect": {"type": "string", "enum": ["standard", "capsolver"]},
                "existingSecret": {"type": "string", "minLength": 1},
                "existingSecretKey": {"type": "string", "pattern": r"^[-._a-zA-Z0-9]+$"},
            },
            "required": ["name", "protocol", "url", "kinds", "pricePer1000", "existingSecret"],
            "additionalProperties": False,
        },
    },
    "spendCap.hour": {"type": ["number", "null"], "minimum": 0},
    "spendCap.day": {"type": ["number", "null"], "minimum": 0},
    "gateway.existingSecret": {"type": "string"},
    "gateway.taskDeadlineSeconds": {"type": "integer", "minimum": 0},
    "gateway.solveTimeoutSeconds": {"type": "integer", "minimum": 1},
    "gateway.maxBodyBytes": {"type": "integer", "minimum": 0},
    "gateway.callbacks.timeoutSeconds": {"type": "number", "exclusiveMinimum": 0},
    "gateway.callbacks.attempts": {"type": "integer", "minimum": 1, "maximum": 10},
    "gateway.logLevel": {"type": "string", "enum": ["debug", "info", "warning", "error"]},
    "gateway.service.type": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "gateway.service.port": PORT,
    "gateway.service.annotations": STRING_MAP,
    "gateway.ingress.annotations": STRING_MAP,
    "gateway.ingress.hosts": INGRESS_HOSTS,
    "gateway.ingress.tls": OBJECT_LIST,
    "gateway.autoscaling.minReplicas": {"type": "integer", "minimum": 2},
    "gateway.autoscaling.maxReplicas": {"type": "integer", "minimum": 2},
    "gateway.autoscaling.targetCPUUtilizationPercentage": {"type": "integer", "minimum": 1, "maximum": 100},
    "gateway.podDisruptionBudget.maxUnavailable": INT_OR_PERCENT,
    "gateway.networkPolicy.from": OBJECT_LIST,
    "gateway.networkPolicy.extraEgress": OBJECT_LIST,
    "gateway.resources": FREE_OBJECT,
    "gateway.podSecurityContext": FREE_OBJECT,
    "gateway.containerSecurityContext": FREE_OBJECT,
    "gateway.podAnnotations": STRING_MAP,
    "gateway.nodeSelector": STRING_MAP,
    "gateway.tolerations": OBJECT_LIST,
    "gateway.affinity": FREE_OBJECT,
    "pingback.url": {"type": "string", "maxLength": 512, "pattern": r"^(https?://[^/?#@\s]+(/[^?#\s]*)?)?$"},
    "pingback.port": PORT,
    "pingback.service.type": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "pingback.service.port": PORT,
    "pingback.service.annotations": STRING_MAP,
    "pingback.ingress.annotations": STRING_MAP,
    "pingback.ingress.hosts": INGRESS_HOSTS,
    "pingback.ingress.tls": OBJECT_LIST,
    "pingback.from": OBJECT_LIST,
    "prometheusRule.alerts.planSaturated.utilisation": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "prometheusRule.alerts.noPlanCapacity.ratio": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    "prometheusRule.alerts.deadLettersGrowing.threshold": {"type": "number", "minimum": 0},
    "prometheusRule.alerts.leasesReaped.threshold": {"type": "number", "minimum": 0},
}

# Objects that stay open to extra keys (with the reason).
OPEN_OBJECTS = {
    "keda": "other keys are values of the kedacore/keda subchart (keda.install)",
}


def _schema_for(path: str, value: Any) -> dict[str, Any]:
    if path in OVERRIDES:
        copied: dict[str, Any] = json.loads(json.dumps(OVERRIDES[path]))
        return copied
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, dict):
        props = {k: _schema_for(f"{path}.{k}" if path else k, v) for k, v in value.items()}
        out: dict[str, Any] = {"type": "object", "properties": props}
        if path in OPEN_OBJECTS:
            out["description"] = f"Open object: {OPEN_OBJECTS[path]}."
        else:
            out["additionalProperties"] = False
        return out
    raise SystemExit(f"values_schema: no schema for {path!r} (default {value!r}): add it to OVERRIDES")


def build() -> dict[str, Any]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    unused = [p for p in OVERRIDES if not _has_path(values, p)]
    if unused:
        raise SystemExit(f"values_schema: OVERRIDES for keys not in values.yaml: {unused}")
    root = _schema_for("", values)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "captcha-solver chart values",
        **root,
    }


def _has_path(values: dict[str, Any], path: str) -> bool:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    target = CHART / "values.schema.json"
    text = render()
    if "--check" in argv:
        if not target.exists() or target.read_text() != text:
            print("values.schema.json is stale: run python tests/chart/values_schema.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    print(f"values_schema: wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
