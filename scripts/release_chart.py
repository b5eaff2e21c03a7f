"""Turn a copy of charts/captcha-solver into the chart `make release` packages (scripts/release.sh runs this).

In the copy's values.yaml the worker image's registry, repository and digest are set to the image the release
pushed (a line edit: the comments, which `helm show values` prints, stay); in its Chart.yaml the Artifact Hub
annotations that only the release knows are written: `artifacthub.io/images` (the image with its digest),
`artifacthub.io/signKey` (the fingerprint of the key `helm package --sign` used) and `artifacthub.io/changes` (the
chart version's section of CHANGELOG.md, one entry per bullet of its Added / Changed / Deprecated / Removed /
Fixed / Security lists: the CHANGELOG stays the one place a change is written down). The result is checked by
parsing both files again.

    python scripts/release_chart.py CHART_COPY --registry HOST:PORT --repository captcha-solver \
        --digest sha256:<64 hex> --fingerprint <40 hex> [--signkey-url URL] [--changelog CHANGELOG.md]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
FINGERPRINT = re.compile(r"[0-9A-F]{40}")
#: where the signing key is published when the release names no other place (a placeholder: say where it is)
DEFAULT_SIGNKEY_URL = "https://example.invalid/captcha-solver/KEYS"


#: Keep a Changelog's section titles -> Artifact Hub's change kinds
KINDS = {"Added": "added", "Changed": "changed", "Deprecated": "deprecated", "Removed": "removed",
         "Fixed": "fixed", "Security": "security"}


class ReleaseError(Exception):
    """A chart copy that cannot be made into the release (the message says why)."""


def set_image_values(values: str, registry: str, repository: str, digest: str) -> str:
    """values.yaml text with the top-level `image:` block's registry, repository and digest replaced."""
    want = {"registry": registry, "repository": repository, "digest": digest}
    lines = values.splitlines(keepends=True)
    try:
        start = lines.index("image:\n")
    except ValueError:
        raise ReleaseError("values.yaml has no top-level 'image:' block") from None
    done: set[str] = set()
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line.startswith(" "):
            break  # the next top-level key
        m = re.match(r"^  (registry|repository|digest):( .*)?\n$", line)
        if m:
            lines[i] = f"  {m.group(1)}: {want[m.group(1)]}\n"
            done.add(m.group(1))
    if done != set(want):
        raise ReleaseError(f"values.yaml image block lacks {sorted(set(want) - done)}")
    return "".join(lines)


def changes(changelog: str, version: str) -> list[dict[str, str]]:
    """artifacthub.io/changes entries of `version`'s CHANGELOG section (each bullet on one line, in order)."""
    m = re.search(rf"(?m)^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|\Z)", changelog, re.S)
    if m is None:
        raise ReleaseError(f"CHANGELOG.md has no section '## [{version}]' for the chart version")
    out: list[dict[str, str]] = []
    for block in re.split(r"(?m)^### ", m.group(1))[1:]:
        title, _, body = block.partition("\n")
        kind = KINDS.get(title.strip())
        if kind is None:
            continue  # e.g. "Upgrade notes"
        for bullet in re.split(r"(?m)^- ", body)[1:]:
            out.append({"kind": kind, "description": " ".join(bullet.split())})
    if not out:
        raise ReleaseError(f"CHANGELOG.md section {version} lists no change under {'/'.join(KINDS)}")
    return out


class _Literal(str):
    """A string dumped in block style (`|`), as Artifact Hub's annotations are written."""


def _literal(dumper: yaml.SafeDumper, data: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")


yaml.SafeDumper.add_representer(_Literal, _literal)


def set_chart_annotations(chart: dict[str, Any], image: str, *, fingerprint: str, signkey_url: str,
                          changelog: str) -> dict[str, Any]:
    """Chart.yaml content with artifacthub.io/images, signKey and changes written (others kept as they are)."""
    annotations = {str(k): str(v) for k, v in (chart.get("annotations") or {}).items()}
    annotations["artifacthub.io/images"] = yaml.safe_dump([{"name": "captcha-solver", "image": image}],
                                                          sort_keys=False)
    annotations["artifacthub.io/signKey"] = yaml.safe_dump({"fingerprint": fingerprint, "url": signkey_url},
                                                           sort_keys=False)
    annotations["artifacthub.io/changes"] = yaml.safe_dump(changes(changelog, str(chart["version"])),
                                                           sort_keys=False, width=10**6)
    out = dict(chart)
    out["annotations"] = {k: _Literal(v) if "\n" in v else v for k, v in annotations.items()}
    return out


def prepare(chart_dir: Path, registry: str, repository: str, digest: str, *, fingerprint: str,
            signkey_url: str, changelog: str) -> str:
    """Edit the chart copy in place; returns the image reference written (registry/repository:appVersion@digest)."""
    if not DIGEST.fullmatch(digest):
        raise ReleaseError(f"not a sha256 digest: {digest!r}")
    if not FINGERPRINT.fullmatch(fingerprint):
        raise ReleaseError(f"not a 40-hex-digit OpenPGP fingerprint: {fingerprint!r}")
    values_path, chart_path = chart_dir / "values.yaml", chart_dir / "Chart.yaml"
    values_path.write_text(set_image_values(values_path.read_text(), registry, repository, digest))
    chart: dict[str, Any] = yaml.safe_load(chart_path.read_text())
    image = f"{registry}/{repository}:{chart['appVersion']}@{digest}"
    chart_path.write_text(yaml.safe_dump(set_chart_annotations(chart, image, fingerprint=fingerprint,
                                                               signkey_url=signkey_url, changelog=changelog),
                                         sort_keys=False, width=120))
    # what helm will read
    got = yaml.safe_load(values_path.read_text())["image"]
    if (got["registry"], got["repository"], got["digest"]) != (registry, repository, digest):
        raise ReleaseError(f"values.yaml image block reads back as {got}")
    images = yaml.safe_load(yaml.safe_load(chart_path.read_text())["annotations"]["artifacthub.io/images"])
    if images != [{"name": "captcha-solver", "image": image}]:
        raise ReleaseError(f"artifacthub.io/images reads back as {images}")
    return image


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("chart_dir", type=Path)
    p.add_argument("--registry", required=True)
    p.add_argument("--repository", required=True)
    p.add_argument("--digest", required=True)
    p.add_argument("--fingerprint", required=True)
    p.add_argument("--signkey-url", default=DEFAULT_SIGNKEY_URL)
    p.add_argument("--changelog", type=Path, default=Path(__file__).resolve().parents[1] / "CHANGELOG.md")
    a = p.parse_args(argv)
    try:
        print(prepare(a.chart_dir, a.registry, a.repository, a.digest, fingerprint=a.fingerprint,
                      signkey_url=a.signkey_url, changelog=a.changelog.read_text()))
    except (ReleaseError, OSError, KeyError, yaml.YAMLError) as e:
        print(f"release_chart: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
