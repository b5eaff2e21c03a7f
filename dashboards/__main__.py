"""``python -m dashboards build [--check]`` | ``render`` — see ``dashboards/__init__.py``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dashboards.build import dashboard_json, with_docs_section

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "charts" / "captcha-solver" / "dashboards" / "captcha-solver.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
PNG = ROOT / "docs" / "img" / "dashboard.png"


def cmd_build(ns: argparse.Namespace) -> int:
    wanted = {DASHBOARD: dashboard_json(), METRICS_DOC: with_docs_section(METRICS_DOC.read_text())}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if ns.check:
        for path in stale:
            print(f"dashboards: {path.relative_to(ROOT)} is not what dashboards/ generates: run 'make dashboard'",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"dashboards: wrote {path.relative_to(ROOT)}")
    if not stale:
        print("dashboards: up to date")
    return 0


def cmd_render(ns: argparse.Namespace) -> int:
    from dashboards.render import main as render  # noqa: PLC0415 - matplotlib: only `render` needs it

    return render(ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help=f"write {DASHBOARD.relative_to(ROOT)} and the panel section of "
                                     f"{METRICS_DOC.relative_to(ROOT)}")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("render", help=f"draw {PNG.relative_to(ROOT)} from a real Prometheus scraping a demo run")
    p.set_defaults(func=cmd_render)
    ns = parser.parse_args(argv)
    return int(ns.func(ns))


if __name__ == "__main__":
    sys.exit(main())
