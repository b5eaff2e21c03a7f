"""The store's Lua loader (``captcha_worker.store.scripts``): every script as Redis receives it parses on a real
redis-server, the loader's directives do what its docstring says, and a flushed script cache is reloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

import captcha_worker.pingback
import captcha_worker.queue
import captcha_worker.spend
from captcha_worker.store import scripts
from captcha_worker.store.scripts import REGISTRY, ScriptError, SlotScript, assemble, sha1

LUA_DIR = Path(scripts.__file__).with_name("lua")


def test_every_script_file_is_registered_by_its_owner() -> None:
    """Importing the owners (queue, which imports budget and shares; spend; pingback) registers every file."""
    assert set(REGISTRY) == {p.stem for p in LUA_DIR.glob("*.lua")}
    included = {lib for libs in scripts.INCLUDES.values() for lib in libs}
    assert included == {p.stem for p in (LUA_DIR / "lib").glob("*.lua")}


async def test_every_script_parses_on_a_real_redis_server(redis: Redis) -> None:
    """SCRIPT LOAD compiles the script (a syntax error is refused here, not at the first EVALSHA in production),
    and the cache key is the one SlotScript sends."""
    for name, text in sorted(REGISTRY.items()):
        assert await redis.script_load(text) == sha1(text), name


def test_a_library_is_included_once_and_only_the_constants_read_are_declared() -> None:
    claim, includes = assemble("claim", captcha_worker.queue.LUA_CONSTANTS)
    assert includes == ("now", "lease_item", "budget", "budget_settle", "batched", "is_id", "shares")
    assert claim.count("local function budget_open(") == 1 and claim.count("local function is_id(") == 1
    assert claim.count("-- lib/budget.lua") == 1
    prelude = claim.split("\n-- CLAIM", 1)[0].splitlines()
    assert "local MAX_ID = 128" in prelude and "local TOO_LARGE = 'TASK_TOO_LARGE'" in prelude
    assert all(line.startswith("local ") for line in prelude)
    # record reads STRAY_MARK only: no other constant is declared (an unused local would fail the Lua lint)
    record, _ = assemble("record", captcha_worker.queue.LUA_CONSTANTS)
    assert record.startswith("local STRAY_MARK = '~'\n--")


def test_a_constant_its_owner_does_not_pass_is_an_error_at_assembly() -> None:
    with pytest.raises(ScriptError, match="constant MAX_ID is not passed"):
        assemble("audit", {"UNIT_PREFIX": "t:", "STRAY_MARK": "~"})


@pytest.mark.parametrize(("text", "error"), [
    ("--! include no_such_library\nreturn 1\n", "no Lua file store/lua/lib/no_such_library.lua"),
    ("--! include ../push\nreturn 1\n", "bad include"),
    ("--! import now\nreturn 1\n", "unknown directive --! import"),
    ("--! const X\nreturn X\n", "constant X is not passed"),
])
def test_a_bad_directive_is_an_error(monkeypatch: pytest.MonkeyPatch, text: str, error: str) -> None:
    real = scripts._source
    monkeypatch.setattr(scripts, "_source", lambda *parts: text if parts == ("t.lua",) else real(*parts))
    with pytest.raises(ScriptError, match=error):
        assemble("t", {})


@pytest.mark.parametrize(("value", "ok"), [(5, "5"), ("t:", "'t:'"), ("it's", None), ("a\\b", None), (True, None)])
def test_constant_literals(value: object, ok: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scripts, "_source", lambda *parts: "--! const X\nreturn X\n")
    if ok is None:
        with pytest.raises(ScriptError):
            assemble("t", {"X": value})  # type: ignore[dict-item]
    else:
        assert assemble("t", {"X": value})[0] == f"local X = {ok}\nreturn X\n"  # type: ignore[dict-item]


async def test_a_flushed_script_cache_is_reloaded_where_the_call_goes(redis: Redis) -> None:
    lookup = SlotScript(redis, REGISTRY["lookup"])
    keys = ["{q}:result:a", "{q}:task:a"]
    await redis.set(keys[0], "answer")
    assert await lookup(keys) == ["answer"]
    await redis.script_flush()
    assert await redis.script_exists(lookup.sha) == [False]
    assert await lookup(keys, raw=True) == [b"answer"]
    assert await redis.script_exists(lookup.sha) == [True]
