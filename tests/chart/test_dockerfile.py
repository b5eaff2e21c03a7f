"""The worker image: hadolint, the Dockerfile's shape, and the wheel installed the way the image installs it."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .chartlib import CHART, ROOT, run, tool

DOCKERFILE = ROOT / "Dockerfile"


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _final_stage() -> list[tuple[str, str]]:
    ins = _instructions(DOCKERFILE.read_text())
    last_from = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    return ins[last_from:]


def test_hadolint_clean() -> None:
    proc = run([tool("hadolint"), "--failure-threshold", "info", DOCKERFILE], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\nRUN pip install requests\n")
    proc = run([tool("hadolint"), "--failure-threshold", "info", bad], check=False)
    assert proc.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3013"):
        assert rule in proc.stdout, proc.stdout


def test_dockerfile_shape() -> None:
    ins = _instructions(DOCKERFILE.read_text())
    froms = [arg for op, arg in ins if op == "FROM"]
    assert len(froms) >= 2, "multi-stage build"
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.12\.\d+-slim", DOCKERFILE.read_text()), "pinned slim Python base"
    from_at = [i for i, (op, _) in enumerate(ins) if op == "FROM"]
    build_runs = " ".join(arg for op, arg in ins[from_at[0]:from_at[1]] if op == "RUN")
    assert "pip wheel --no-deps" in build_runs, "the wheel is built in the first stage"
    final = _final_stage()
    final_text = " ".join(f"{op} {arg}" for op, arg in final)
    users = [arg for op, arg in final if op == "USER"]
    assert users and re.fullmatch(r"[1-9]\d{3,}(:\d+)?", users[-1]), "non-root numeric user"
    # an init as PID 1: a SIGTERM before the worker's handler exists must not be dropped (pid_namespaces(7))
    assert ("ENTRYPOINT", '["dumb-init", "--", "captcha-worker"]') in final
    assert ("CMD", '["run"]') in final
    assert ("EXPOSE", "9100") in final
    assert "org.opencontainers.image.title" in final_text
    for forbidden in ("gcc", "build-essential", "apt-get install", "COPY . "):
        assert forbidden not in final_text, f"no build tools or sources in the final image: {forbidden}"
    assert "--no-index" in final_text, "the final stage installs only the wheels built in stage 1"
    # the chart's default metrics port is the one the image exposes
    assert yaml.safe_load((CHART / "values.yaml").read_text())["metrics"]["port"] == 9100


def _docker_context(dest: Path) -> Path:
    """Copy the repository as `docker build` would see it through .dockerignore (allow-list)."""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    assert patterns[0] == "*", ".dockerignore is an allow-list"
    allowed = [p[1:].rstrip("/") for p in patterns if p.startswith("!")]
    excluded = [p for p in patterns[1:] if not p.startswith("!")]
    for name in allowed:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=lambda d, names: [
                n for n in names if any(fnmatch.fnmatch(n, e.split("/")[-1]) for e in excluded)])
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.timeout(600)
@pytest.mark.integration  # builds the wheel and a venv (~10 s)
def test_wheel_installs_into_a_fresh_venv_like_the_image(tmp_path: Path) -> None:
    """Stage 1 and 2 of the Dockerfile, without Docker: wheel, dependency wheels, venv --no-index, --help."""
    (tmp_path / "context").mkdir()
    context = _docker_context(tmp_path / "context")
    wheels = tmp_path / "wheels"
    py = sys.executable
    run([py, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "--wheel-dir", wheels, "."],
        cwd=context)
    built = sorted(wheels.glob("captcha_solver-*.whl"))
    assert len(built) == 1, built
    # dependency wheels (from PyPI or pip's cache, as `docker build` fetches them), and the image's init
    run([py, "-m", "pip", "wheel", "--disable-pip-version-check", "--wheel-dir", wheels, built[0]], timeout=540)
    init = re.search(r"pip wheel --no-deps --wheel-dir /wheels (dumb-init==\S+)", DOCKERFILE.read_text())
    assert init, "stage 1 builds the dumb-init wheel"
    run([py, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "--wheel-dir", wheels, init.group(1)],
        timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([py, "-m", "venv", venv], check=True)
    run([venv / "bin" / "pip", "install", "--disable-pip-version-check", "--no-index", "--find-links", wheels,
         built[0], "dumb-init"])
    assert "dumb-init v" in run([venv / "bin" / "dumb-init", "--version"]).stdout + \
        run([venv / "bin" / "dumb-init", "--version"]).stderr
    run([venv / "bin" / "pip", "uninstall", "--yes", "--disable-pip-version-check", "pip"])
    assert not (venv / "bin" / "pip").exists()
    cli = venv / "bin" / "captcha-worker"
    assert cli.exists(), "the wheel must install the captcha-worker console script"
    proc = run([cli, "--help"], cwd=tmp_path)
    for command in ("run", "simulator", "check", "stats"):
        assert command in proc.stdout, proc.stdout
    # the package came from the wheel, not from the source tree; its Lua scripts came with it (read at import)
    code = ("import captcha_worker, captcha_worker.queue, captcha_worker.spend, captcha_worker.pingback, json; "
            "print(json.dumps(captcha_worker.__file__))")
    where = run([venv / "bin" / "python", "-c", code], cwd=tmp_path).stdout
    assert str(venv) in json.loads(where)
