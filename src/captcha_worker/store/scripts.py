"""The Lua scripts: one ``.lua`` file per transition in ``store/lua/``, shared code in ``store/lua/lib/``, one loader.

A script file starts with a header comment (the transition, its KEYS and ARGV, what it returns) and may hold two
directives, each a line of its own:

``--! include <name>``
    ``lib/<name>.lua`` in its place, after a comment line ``-- lib/<name>.lua`` (where the line is: a library that
    reads ``now`` comes after ``--! include now``). A library is included once per script: the second include of it
    is dropped, so ``lease_item`` and ``shares`` may both include ``budget``.
``--! const <NAME> ...``
    Constants the Python side owns (``budget.UNLIMITED``, ``shares.SORT_MAX``, ...): their values are declared once,
    as locals at the top of the assembled script (the *prelude*: one line each, only those the script's code reads),
    from the mapping the owner passes to :func:`lua`. A constant a file declares and its owner does not pass is an
    error at import time, never a nil inside Redis.

:func:`lua` assembles a script once, when its owner module is imported, and registers it by name
(:data:`REGISTRY`): the Lua lint (``scripts/lint-lua.py``, in ``make lint``) and the parse test against a real
redis-server (``tests/test_store.py``) read every script from there, as Redis receives it.

:class:`SlotScript` runs one by EVALSHA and, on NOSCRIPT, loads it where the call goes (:func:`load_script`: on a
Cluster the node of the call's first key) and sends it again: the one place the script cache is handled (the
queue's pipelined batches reload through :meth:`SlotScript.load` too). :class:`Runner` sends a queue's calls:
pipelined batches, and durable writes confirmed by WAIT on the connection that ran them.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Awaitable, Mapping, Sequence
from importlib import resources
from typing import Any, cast

from redis import exceptions as rexc
from redis.asyncio import RedisCluster
from redis.client import NEVER_DECODE

from captcha_worker.connection import Client, NotReplicated, note_redirect, on_queue_slot, on_slot_connection

Constant = int | str | enum.Enum
#: every assembled script by name (the file's stem): what the lint and the parse test check
REGISTRY: dict[str, str] = {}
#: the libraries each registered script includes, in order
INCLUDES: dict[str, tuple[str, ...]] = {}

_DIRECTIVE = re.compile(r"^--!\s*(\w+)\s*(.*?)\s*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ScriptError(ValueError):
    """A script file that cannot be assembled: unknown include or directive, a constant nobody passed."""


def _source(*parts: str) -> str:
    path = resources.files("captcha_worker.store").joinpath("lua", *parts)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScriptError(f"no Lua file store/lua/{'/'.join(parts)}") from None


def _literal(name: str, value: Constant) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ScriptError(f"constant {name}: {value!r} is neither an int nor a str")
    if isinstance(value, int):
        return str(value)
    if not re.fullmatch(r"[\x20-\x7e]*", value) or "'" in value or "\\" in value:
        raise ScriptError(f"constant {name}: {value!r} needs escaping (printable ASCII without ' or \\ only)")
    return f"'{value}'"


def assemble(name: str, constants: Mapping[str, Constant]) -> tuple[str, tuple[str, ...]]:
    """The text of script `name` (``store/lua/<name>.lua``) with its includes and its constants' prelude, and the
    libraries it includes."""
    included: dict[str, None] = {}
    wanted: list[str] = []

    def expand(text: str, where: str) -> list[str]:
        out: list[str] = []
        for line in text.splitlines():
            m = _DIRECTIVE.match(line)
            if m is None:
                out.append(line)
                continue
            what, arg = m.groups()
            if what == "include":
                if not _NAME.match(arg):
                    raise ScriptError(f"{where}: bad include {arg!r}")
                if arg not in included:
                    included[arg] = None
                    out.append(f"-- lib/{arg}.lua")
                    out += expand(_source("lib", f"{arg}.lua"), f"lib/{arg}.lua")
            elif what == "const":
                for const in arg.split():
                    if not _NAME.match(const):
                        raise ScriptError(f"{where}: bad constant name {const!r}")
                    if const not in constants:
                        raise ScriptError(f"{where}: constant {const} is not passed by the script's owner")
                    if const not in wanted:
                        wanted.append(const)
            else:
                raise ScriptError(f"{where}: unknown directive --! {what}")
        return out

    body = expand(_source(f"{name}.lua"), f"{name}.lua")
    code = "\n".join(line.split("--", 1)[0] for line in body)  # the constants a line of code reads
    prelude = [f"local {c} = {_literal(c, constants[c])}" for c in wanted if re.search(rf"\b{c}\b", code)]
    return "\n".join([*prelude, *body]) + "\n", tuple(included)


def lua(name: str, constants: Mapping[str, Constant] | None = None) -> str:
    """Script `name`, assembled and registered (:data:`REGISTRY`). Call it at import time of the script's owner."""
    text, includes = assemble(name, constants or {})
    if REGISTRY.get(name, text) != text:
        raise ScriptError(f"script {name} assembled twice with different constants")
    REGISTRY[name], INCLUDES[name] = text, includes
    return text


def sha1(text: str) -> str:
    """The script cache's key of a script."""
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


async def load_script(redis: Client, script: Any, key: str) -> None:
    """SCRIPT LOAD where calls naming `key` go. Redis does not replicate the script cache, so a promoted replica
    answers NOSCRIPT; on a Cluster the load must reach that node (the slot's master), which redis-py's default
    (every primary of a slot map a failover may have left stale) does not promise."""
    pin = await on_queue_slot(redis, key)
    await cast(Awaitable[str], redis.execute_command("SCRIPT LOAD", script, **pin) if pin
               else redis.script_load(script))


class SlotScript:
    """A Lua script run by EVALSHA, loaded again where it runs when Redis answers NOSCRIPT (redis-py's own
    ``register_script`` reloads through every primary of the client's slot map, which after a Cluster failover
    may not name the promoted node: the call would fail with NOSCRIPT until the map is read again)."""

    def __init__(self, redis: Client, script: str) -> None:
        self.redis, self.script = redis, script
        self.sha = sha1(script)

    async def load(self, key: str) -> None:
        """Load the script where calls naming `key` go (after a NOSCRIPT of a batch that named it)."""
        await load_script(self.redis, self.script, key)

    async def __call__(self, keys: Sequence[str] = (), args: Sequence[Any] = (), *, raw: bool = False) -> Any:
        """EVALSHA; on NOSCRIPT, load where `keys[0]` goes and once more. `raw`: the reply is left as bytes (it
        carries queue items, which may be any bytes)."""
        options = {NEVER_DECODE: True} if raw else {}
        for attempt in (1, 2):
            try:
                return await cast(Awaitable[Any], self.redis.execute_command("EVALSHA", self.sha, len(keys), *keys,
                                                                             *args, **options))
            except rexc.NoScriptError:
                if attempt == 2 or not keys:
                    raise
            await self.load(keys[0])
        raise AssertionError("unreachable")  # pragma: no cover


Call = tuple[SlotScript, list[str], list[Any]]


class Runner:
    """The script calls of one slot (a queue: every key under its hash tag; `route` is one of them): pipelined
    batches, durable writes confirmed by a WAIT on their own connection, NOSCRIPT reloads where the calls go."""

    def __init__(self, redis: Client, route: str, *, wait_replicas: int = 0, wait_timeout_ms: int = 500) -> None:
        """`wait_replicas` > 0: durable batches wait for that many replicas, or raise NotReplicated after
        `wait_timeout_ms`."""
        self.redis, self.route = redis, route
        self.wait_replicas, self.wait_timeout_ms = wait_replicas, wait_timeout_ms

    async def run_many(self, calls: Sequence[Call], *, durable: bool = False) -> list[Any]:
        """Script calls in one pipelined round trip. EVALSHA directly: redis-py would otherwise send a SCRIPT
        EXISTS round trip before every pipeline. On NOSCRIPT (Redis restarted or flushed its scripts, or a
        promoted replica that never had them) the scripts are loaded where the calls go and the batch sent again:
        then no call of the batch has run, as the first one failed. `durable` (with wait_replicas): WAIT after the
        calls, on their connection; NotReplicated when short. A single call that need not wait goes without a
        pipeline (a gateway's in.php pushes one task per request).

        A durable batch is confirmed only by a WAIT on the connection that ran it: on a Cluster it goes on one
        connection to the slot's master (``connection.on_slot_connection``), never through the cluster pipeline,
        which re-sends a WAIT alone, elsewhere, after a connection error. A batch whose connection fails is
        unconfirmed (the error is raised) and its caller runs it again: every durable write is idempotent (a known
        id is not pushed twice, a result is written once, an ACK of an item gone is a no-op)."""
        wait = self.wait_replicas if durable else 0
        if len(calls) == 1 and not wait:
            script, keys, args = calls[0]
            return [await script(keys=keys, args=args)]  # SlotScript: loaded where it runs on NOSCRIPT
        commands: list[tuple[Any, ...]] = [("EVALSHA", script.sha, len(keys), *keys, *args)
                                           for script, keys, args in calls]
        if wait:
            commands.append(("WAIT", wait, self.wait_timeout_ms))
        for attempt in (1, 2):
            replies = await self.send(commands, pinned=bool(wait))
            failed = next((r for r in replies if isinstance(r, Exception)), None)
            if isinstance(failed, rexc.NoScriptError) and attempt == 1:
                for script in {id(c[0]): c[0] for c in calls}.values():  # loaded where the calls go, then again
                    await script.load(self.route)
                continue
            if isinstance(failed, rexc.MovedError):
                note_redirect(self.redis, failed)
            if failed is not None:
                raise failed
            confirmed = int(replies.pop()) if wait else 0
            if confirmed < wait:
                raise NotReplicated(confirmed, wait, self.wait_timeout_ms)
            return replies
        raise AssertionError("unreachable")  # pragma: no cover

    async def send(self, commands: Sequence[tuple[Any, ...]], *, pinned: bool) -> list[Any]:
        """Commands in one round trip, each reply or its error reply in its place. `pinned` (a WAIT at the end): on
        a Cluster, on one connection to the queue slot's master, without redis-py's piecemeal retry (see
        ``run_many``); elsewhere a pipeline is one connection, and redis-py's retry of it sends the whole batch
        again on a new one. Unpinned on a Cluster: the cluster pipeline (its retries resend script calls only)."""
        if pinned and isinstance(self.redis, RedisCluster):
            return await on_slot_connection(self.redis, self.route, commands)
        async with self.redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute(raise_on_error=False))

    async def eval_raw(self, script: SlotScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call whose reply is left as bytes (it carries queue items, which may be any bytes)."""
        return await script(keys, args, raw=True)

    async def raw(self, *args: Any) -> Any:
        """A command whose reply is left as bytes: it carries queue items, which may be any bytes."""
        return await self.redis.execute_command(*args, **{NEVER_DECODE: True})
