"""Helpers for talking to the CaptchaAI simulator over a real socket (used by test_simulator and usable by any
test that runs a worker or client against SimulatorServer)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

from captcha_worker import methods
from captcha_worker.methods import Kind
from tests.helpers import KEY as KEY  # noqa: PLC0414 - the simulator tests take it from here, with the rest
from tests.helpers import OTHER_KEY as OTHER_KEY  # noqa: PLC0414


def make_png(width: int = 120, height: int = 40, seed: int = 1) -> bytes:
    """A real greyscale PNG of random pixels (over 1 KB at the default size, dimensions a client can read)."""
    rng = random.Random(seed)
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(width)) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PROXY_PASSWORD = "s3cretProxyPw"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + bytes(range(256)) * 4
PNG_B64 = base64.b64encode(PNG).decode()

#: extra params that select a kind sharing its method with others (checked against methods.kind_of below)
DISCRIMINATORS: dict[str, dict[str, str]] = {
    "recaptcha_v3": {"version": "v3"},
    "recaptcha_v3_enterprise": {"version": "v3", "enterprise": "1"},
    "recaptcha_v2_enterprise": {"enterprise": "1"},
    "geetest_v4": {"version": "4"},
}
VALUES: dict[str, str] = {
    "pageurl": "https://example.com/login",
    "proxy": f"user:{PROXY_PASSWORD}@10.0.0.1:3128",
    "proxytype": "HTTP",
    "grid_size": "3x3",
    "instructions": "1",
    "challenge": "0123456789abcdef0123456789abcdef",
    "body": PNG_B64,
}


def kind_id(kind: Kind) -> str:
    return f"{kind.name}-{kind.method}"


@dataclass
class Submission:
    fields: dict[str, str]
    files: dict[str, bytes]
    via: str = "get"  # how the methods table says to send it: "get", or "form" for http_post kinds

    def without(self, name: str) -> Submission:
        return Submission({k: v for k, v in self.fields.items() if k != name},
                          {k: v for k, v in self.files.items() if k != name}, self.via)


def kind_params(kind: Kind) -> Submission:
    """A valid in.php submission for ``kind``, built from its required params in the methods table."""
    fields = {"method": kind.method, **DISCRIMINATORS.get(kind.name, {})}
    files: dict[str, bytes] = {}
    for p in kind.required:
        if p.name == "file":
            files["file"] = PNG
        elif p.name.startswith("image_base64_"):
            fields[p.name] = "data:image/png;base64," + PNG_B64
        else:
            fields[p.name] = VALUES.get(p.name, f"test-{p.name}")
    assert methods.kind_of(kind.method, fields) is kind, f"test params do not select {kind_id(kind)}"
    return Submission(fields, files, "form" if kind.http_post else "get")


@dataclass
class Reply:
    status: int
    text: str
    content_type: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def request(self) -> Any:
        return self.json["request"]


class Api:
    """A minimal CaptchaAI v1 client. ``via``: "get" (query), "form" (urlencoded POST), "multipart", "json"
    (a JSON object body, as the npm 2captcha client sends)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, key: str = KEY) -> None:
        self.session = session
        self.url = url
        self.key = key

    async def call(self, endpoint: str, fields: dict[str, Any], *,
                   files: Mapping[str, bytes | tuple[str, bytes]] | None = None,
                   via: str = "get", key: str | None = None, json_mode: bool = True,
                   query: dict[str, str] | None = None) -> Reply:
        params = {"key": self.key if key is None else key, **fields}
        if json_mode:
            params["json"] = "1"
        url = f"{self.url}/{endpoint}"
        if files:
            via = "multipart"
        if via == "get":
            request = self.session.get(url, params={**(query or {}), **params})
        elif via == "form":
            request = self.session.post(url, params=query, data=params)
        elif via == "json":
            request = self.session.post(url, params=query, json=params)
        else:
            form = aiohttp.FormData()
            for name, value in params.items():
                form.add_field(name, value)
            for name, data in (files or {}).items():
                filename, payload = data if isinstance(data, tuple) else ("captcha.png", data)
                form.add_field(name, payload, filename=filename, content_type="application/octet-stream")
            request = self.session.post(url, params=query, data=form)
        async with request as resp:
            return Reply(resp.status, await resp.text(), resp.content_type, dict(resp.headers))

    async def submit(self, sub: Submission, **kw: Any) -> Reply:
        kw.setdefault("via", sub.via)
        return await self.call("in.php", sub.fields, files=sub.files, **kw)

    async def res(self, action: str, **kw: Any) -> Reply:
        fields = {"action": action, **{k: str(v) for k, v in kw.pop("fields", {}).items()}}
        return await self.call("res.php", fields, **kw)

    async def get(self, task_id: object, **kw: Any) -> Reply:
        return await self.res("get", fields={"id": task_id}, **kw)

    async def wait(self, task_id: object, timeout: float = 5.0, **kw: Any) -> Reply:
        """Polls until the answer (or an error other than CAPCHA_NOT_READY) comes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            reply = await self.get(task_id, **kw)
            if "CAPCHA_NOT_READY" not in reply.text:
                return reply
            if loop.time() > deadline:
                raise AssertionError(f"task {task_id} not ready after {timeout} s")
            await asyncio.sleep(0.02)

    async def sim(self, path: str, body: dict[str, Any] | None = None) -> Reply:
        url = f"{self.url}/_sim/{path}"
        request = self.session.get(url) if body is None and path == "stats" else self.session.post(url, json=body)
        async with request as resp:
            return Reply(resp.status, await resp.text(), resp.content_type)


@dataclass
class PingbackReceiver:
    """An HTTP server on 127.0.0.1 that records the query of every GET it receives, and its headers in
    ``headers`` (same order; ``status`` is what it answers); every POST (a JSON-API callbackUrl) as its headers
    and body in ``posts``."""

    status: int = 200
    hits: list[Mapping[str, str]] = field(default_factory=list)
    headers: list[Mapping[str, str]] = field(default_factory=list)
    posts: list[tuple[Mapping[str, str], bytes]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> PingbackReceiver:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._hit)
        app.router.add_post("/{tail:.*}", self._post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _hit(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        self.hits.append(dict(request.query))
        return web.Response(status=self.status, text="ok")

    async def _post(self, request: web.Request) -> web.Response:
        self.posts.append((dict(request.headers), await request.read()))
        return web.Response(status=self.status, text="ok")

    async def wait_posts(self, n: int = 1, timeout: float = 5.0) -> list[tuple[Mapping[str, str], bytes]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.posts) < n:
            if loop.time() > deadline:
                raise AssertionError(f"{len(self.posts)} callback POSTs after {timeout} s, expected {n}")
            await asyncio.sleep(0.02)
        return self.posts

    async def wait(self, n: int = 1, timeout: float = 5.0) -> list[Mapping[str, str]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.hits) < n:
            if loop.time() > deadline:
                raise AssertionError(f"{len(self.hits)} pingbacks after {timeout} s, expected {n}")
            await asyncio.sleep(0.02)
        return self.hits


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
