"""A minimal client of the Prometheus HTTP API (`/api/v1/query`, `/api/v1/query_range`): what `plan
--from-prometheus`, `stats --watch --prometheus` and the dashboard picture read."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class PrometheusError(ValueError):
    """Prometheus refused the query or answered something that is not its API's JSON."""


def _post(base: str, path: str, params: dict[str, str], timeout_s: float) -> Any:
    if urllib.parse.urlsplit(base).scheme not in {"http", "https"}:
        raise PrometheusError(f"Prometheus URL must be http:// or https://, got {base!r}")
    req = urllib.request.Request(f"{base.rstrip('/')}{path}", data=urllib.parse.urlencode(params).encode(),  # noqa: S310 - scheme checked
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - scheme checked above
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 400/422: a bad query; the body says why
        try:
            reason = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            reason = exc.reason
        raise PrometheusError(f"Prometheus rejected the query: {reason}") from None
    except ValueError:
        raise PrometheusError("Prometheus answered something that is not JSON") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise PrometheusError(f"Prometheus answered {body.get('error') if isinstance(body, dict) else body!r}")
    return body["data"]


def query(base: str, expr: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Instant vector: [{"metric": {...}, "value": [t, "v"]}, ...]."""
    result: list[dict[str, Any]] = _post(base, "/api/v1/query", {"query": expr}, timeout_s)["result"]
    return result


def query_range(base: str, expr: str, *, start: float, end: float, step_s: float,
                timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Range matrix: [{"metric": {...}, "values": [[t, "v"], ...]}, ...]."""
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
    result: list[dict[str, Any]] = _post(base, "/api/v1/query_range", params, timeout_s)["result"]
    return result
