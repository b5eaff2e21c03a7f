"""The benchmark peers' own venvs: ``.venv/bench-<name>`` from ``bench/requirements/<name>.txt`` (exact pins).

A peer whose pins fight this project's (arq: redis-py < 6; taskiq-redis: redis-py >= 8; kombu: packaging pinned
exactly) or that would only add weight to it gets a venv of its own instead of changing the project's venv. A venv
is (re)built when it is missing or its requirements file changed (the copy inside the venv is the stamp), so a
second run costs nothing; with pip's cache warm a build takes a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.base import ROOT, log

REQUIREMENTS = ROOT / "bench" / "requirements"
PEERS = ("arq", "dramatiq", "taskiq", "celery")
# what machine_facts reports per venv (distribution names as pip knows them)
REPORTED = {"arq": ("arq", "redis"), "dramatiq": ("dramatiq", "redis"), "taskiq": ("taskiq", "taskiq-redis", "redis"),
            "celery": ("celery", "kombu", "redis")}


def venv_dir(name: str) -> Path:
    return ROOT / ".venv" / f"bench-{name}"


def _stamp(name: str) -> Path:
    return venv_dir(name) / "bench-requirements.txt"


def python(name: str, *, install: bool) -> Path | None:
    """The venv's python, built first when missing or stale and `install` is set; None when not available."""
    reqs = (REQUIREMENTS / f"{name}.txt").read_text()
    py = venv_dir(name) / "bin" / "python"
    stamp = _stamp(name)
    if py.exists() and stamp.exists() and stamp.read_text() == reqs:
        return py
    if not install:
        return None
    log(f"building .venv/bench-{name} from bench/requirements/{name}.txt")
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir(name))], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                    str(REQUIREMENTS / f"{name}.txt")], check=True)
    stamp.write_text(reqs)
    return py


def versions() -> dict[str, str]:
    """Installed versions in each built peer venv, e.g. {"dramatiq": "2.2.1", "redis-py (dramatiq venv)": "7.4.1"}."""
    out: dict[str, str] = {}
    for name in PEERS:
        py = python(name, install=False)
        if py is None:
            continue
        dists = REPORTED[name]
        code = "import importlib.metadata as m, sys; print(' '.join(m.version(d) for d in sys.argv[1:]))"
        proc = subprocess.run([str(py), "-c", code, *dists], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            continue
        for dist, version in zip(dists, proc.stdout.split(), strict=False):
            out[f"redis-py ({name} venv)" if dist == "redis" else dist] = version
    return out


def main() -> int:
    """Build every peer's venv that is missing or stale (``make integration`` does, before the benchmarks' smoke
    run, so that run's time is the benchmarks' own and not pip's)."""
    for name in PEERS:
        python(name, install=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
