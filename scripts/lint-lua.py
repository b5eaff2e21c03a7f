#!/usr/bin/env python3
"""luacheck on every Redis script as Redis receives it (``make lint``).

Each script is assembled by ``captcha_worker.store.scripts`` (its includes in place, its constants' prelude) and
written to a temporary directory as ``<name>.lua``; luacheck checks them with the repository's ``.luacheckrc`` (Lua
5.1, Redis's globals, no global of a script's own: Redis refuses those at run time). A warning names the assembled
line: a comment ``-- lib/<name>.lua`` marks where each library starts. Also fails when a file under ``store/lua/`` is no
script's (a transition file nobody loads, a library nobody includes).

``luacheck`` comes from the Debian package lua-check (``scripts/install-tools.sh --only luacheck``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# every module that owns scripts registers its own when imported (queue imports budget and shares)
import captcha_worker.pingback
import captcha_worker.queue
import captcha_worker.spend  # noqa: F401
from captcha_worker.store import scripts

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    luacheck = shutil.which("luacheck")
    if luacheck is None:
        print("lint-lua: luacheck not on PATH: scripts/install-tools.sh --only luacheck (apt-get install lua-check)",
              file=sys.stderr)
        return 1
    lua_dir = ROOT / "src" / "captcha_worker" / "store" / "lua"
    files = {p.stem for p in lua_dir.glob("*.lua")}
    libs = {p.stem for p in (lua_dir / "lib").glob("*.lua")}
    used_libs = {lib for includes in scripts.INCLUDES.values() for lib in includes}
    problems = [f"store/lua/{n}.lua: no owner loads it" for n in sorted(files - set(scripts.REGISTRY))]
    problems += [f"store/lua/lib/{n}.lua: no script includes it" for n in sorted(libs - used_libs)]
    for problem in problems:
        print(f"lint-lua: {problem}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="lint-lua-") as tmp:
        for name, text in sorted(scripts.REGISTRY.items()):
            (Path(tmp) / f"{name}.lua").write_text(text)
        checked = subprocess.run([luacheck, "--config", str(ROOT / ".luacheckrc"), "--no-color", "--codes",
                                  "--formatter", "plain", tmp], check=False, capture_output=True, text=True)
    for line in checked.stdout.splitlines():
        print(f"lint-lua: {line.replace(tmp + '/', 'assembled ')}", file=sys.stderr)
    if checked.returncode != 0 and not checked.stdout:
        print(f"lint-lua: luacheck failed: {checked.stderr.strip()}", file=sys.stderr)
    if problems or checked.returncode != 0:
        return 1
    print(f"lint-lua: {len(scripts.REGISTRY)} scripts ({len(files)} files, {len(libs)} libraries): luacheck clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
