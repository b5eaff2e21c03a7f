"""Helpers for talking to the CaptchaAI simulator over a real socket (used by test_simulator and usable by any
test that runs a worker or client against SimulatorServer)."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from captcha_worker import methods
from captcha_worker.methods import Kind

KEY = "0123456789abcdef0123456789ABCDEF"
OTHER_KEY = "ZYXWVUTSRQPONMLKJIHGFEDCBA987654"
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

    @property
    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def request(self) -> Any:
        return self.json["request"]


class Api:
    """A minimal CaptchaAI v1 client. ``via``: "get" (query), "form" (urlencoded POST), "multipart"."""

    def __init__(self, session: aiohttp.ClientSession, url: str, key: str = KEY) -> None:
        self.session = session
        self.url = url
        self.key = key

    async def call(self, endpoint: str, fields: dict[str, str], *, files: dict[str, bytes] | None = None,
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
        else:
            form = aiohttp.FormData()
            for name, value in params.items():
                form.add_field(name, value)
            for name, data in (files or {}).items():
                form.add_field(name, data, filename="captcha.png", content_type="image/png")
            request = self.session.post(url, params=query, data=form)
        async with request as resp:
            return Reply(resp.status, await resp.text(), resp.content_type)

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


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
