"""Convert CustomResourceDefinition YAML into the JSON schemas kubeconform reads offline.

kubeconform's openapi2jsonschema approach: one file per served version, named ``{kind}_{version}.json`` in lower
case, holding ``spec.versions[].schema.openAPIV3Schema`` with

* ``additionalProperties: false`` on every nested object that lists ``properties`` (kubectl's strictness; the root is
  left open as in openapi2jsonschema's default, the metadata fields are validated by the API server anyway),
* ``x-kubernetes-int-or-string`` fields accepting a string or an integer,
* ``apiVersion`` and ``kind`` pinned with enums, so a schema cannot validate a different kind.

Usage: python tests/chart/convert_crds.py [CRD_DIR] [OUT_DIR]
(defaults: ../shared/schemas/crds and tests/chart/schemas/crds, relative to the repository root)
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SRC = ROOT.parent / "shared" / "schemas" / "crds"
DEFAULT_OUT = ROOT / "tests" / "chart" / "schemas" / "crds"
# The kinds the chart renders (the other CRDs in the source dir are not needed to validate it).
KINDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}


def _strict(node: Any, *, root: bool = False) -> Any:
    if isinstance(node, dict):
        if node.get("x-kubernetes-int-or-string"):
            rest = {k: v for k, v in node.items() if k not in {"type", "anyOf", "x-kubernetes-int-or-string"}}
            return {**rest, "oneOf": [{"type": "string"}, {"type": "integer"}]}
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out and not root:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def convert(crd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return {file name: JSON schema} for every served version of one CRD."""
    group = crd["spec"]["group"]
    kind = crd["spec"]["names"]["kind"]
    out: dict[str, dict[str, Any]] = {}
    for version in crd["spec"]["versions"]:
        if not version.get("served", True):
            continue
        schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
        schema = _strict(schema, root=True)
        props = schema.setdefault("properties", {})
        props["apiVersion"] = {**props.get("apiVersion", {}), "type": "string", "enum": [f"{group}/{version['name']}"]}
        props["kind"] = {**props.get("kind", {}), "type": "string", "enum": [kind]}
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
        schema.setdefault("required", [])
        for key in ("apiVersion", "kind"):
            if key not in schema["required"]:
                schema["required"].append(key)
        out[f"{kind.lower()}_{version['name']}.json"] = schema
    return out


def convert_dir(src: Path) -> dict[str, str]:
    """Return {file name: JSON text} for every CRD file in ``src``."""
    files: dict[str, str] = {}
    for path in sorted(src.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            if doc["spec"]["names"]["kind"] not in KINDS:
                continue
            for name, schema in convert(doc).items():
                files[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return files


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_SRC
    out = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUT
    if not src.is_dir():
        print(f"convert_crds: no CRD directory at {src}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    files = convert_dir(src)
    for name, text in files.items():
        (out / name).write_text(text)
    print(f"convert_crds: wrote {len(files)} schemas to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
