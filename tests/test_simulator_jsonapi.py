"""The simulator speaks the JSON API too (the same protocol modules as the gateway), over real sockets: a task
created with createTask is accepted as in.php accepts it (same checks, plan threads, faults) and answered with
its type's solution; the numbered errors; callbackUrl POSTs; stats count the calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from captcha_worker.methods import by_name
from captcha_worker.protocols.jsonapi_tasks import solution
from captcha_worker.simulator import Faults, Latency, OverCap, SimConfig, SimulatorServer
from tests.sim_helpers import KEY, OTHER_KEY, PNG_B64, PingbackReceiver

FAST = 3000.0
PAGE = "https://example.com/login"
V2 = {"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"}
GEETEST = {"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "gt": "f" * 32, "challenge": "c" * 32}


class Json:
    def __init__(self, session: aiohttp.ClientSession, server: SimulatorServer) -> None:
        self.session, self.server = session, server

    async def call(self, method: str, body: Any = None, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.session.post(f"{self.server.url}/{method}", data=data) as resp:
            return resp.status, json.loads(await resp.text())

    async def create(self, task: dict[str, Any], key: str = KEY, **extra: Any) -> dict[str, Any]:
        return (await self.call("createTask", {"clientKey": key, "task": task, **extra}))[1]

    async def solve(self, task: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        task_id = (await self.create(task))["taskId"]
        for _ in range(200):
            _, got = await self.call("getTaskResult", {"clientKey": KEY, "taskId": task_id})
            if got.get("status") != "processing":
                return task_id, got
            await asyncio.sleep(0.02)
        raise AssertionError("never ready")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_tasks_are_solved_with_each_types_solution(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST, keys=frozenset({KEY}))) as srv:
        api = Json(session, srv)
        for task, kind in ((V2, "recaptcha_v2"), (GEETEST, "geetest"),
                           ({"type": "ImageToTextTask", "body": PNG_B64}, "image"),
                           ({"type": "TurnstileTaskProxyless", "websiteURL": PAGE, "websiteKey": "0x4A"}, "turnstile")):
            task_id, got = await api.solve(task)
            view = srv.simulator.task_view(task_id)
            assert view is not None and view.kind.name == kind and view.answer is not None
            assert got["errorId"] == 0 and got["status"] == "ready", got
            assert got["solution"] == solution(by_name(kind), view.answer)
            assert got["endTime"] >= got["createTime"] > 0 and got["solveCount"] == 1
        assert (await api.call("getTaskResult", {"clientKey": OTHER_KEY, "taskId": task_id}))[1]["errorId"] == 1
        balance = srv.simulator.config.balance
        assert (await api.call("getBalance", {"clientKey": KEY}))[1] == {"errorId": 0, "balance": balance}
        assert (await api.call("reportIncorrectRecaptcha", {"clientKey": KEY, "taskId": task_id}))[1] == {
            "errorId": 0, "status": "success"}
        stats = srv.stats()
        assert stats.reportbad == 1 and stats.json_calls["createTask"] == 4 and stats.submitted == 4


async def test_errors_are_numbered(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST, keys=frozenset({KEY}))) as srv:
        api = Json(session, srv)
        assert (await api.create(V2, key="short"))["errorCode"] == "ERROR_KEY_DOES_NOT_EXIST"
        assert (await api.create(V2, key=OTHER_KEY))["errorCode"] == "ERROR_KEY_DOES_NOT_EXIST"
        assert (await api.create({**V2, "type": "HCaptchaTaskProxyless"}))["errorId"] == 23
        assert (await api.create({**V2, "websiteURL": None}))["errorCode"] == "ERROR_PAGEURL"
        assert (await api.call("createTask", raw=b"\x00\xff"))[1]["errorId"] == 110
        assert (await api.call("getTaskResult", {"clientKey": KEY, "taskId": 5}))[1]["errorId"] == 16
        assert srv.stats().submitted == 0


async def test_over_the_plan_and_unsolvable(session: aiohttp.ClientSession) -> None:
    cfg = SimConfig(threads=1, over_cap=OverCap.ZERO_BALANCE, latency={"recaptcha_v2": Latency(10)},
                    keys=frozenset({KEY}))
    async with SimulatorServer(cfg) as srv:
        api = Json(session, srv)
        assert (await api.create(V2))["errorId"] == 0
        full = await api.create(V2)  # CaptchaAI's "no free thread" is the JSON API's NO_SLOT, never ZERO_BALANCE
        assert (full["errorId"], full["errorCode"]) == (2, "ERROR_NO_SLOT_AVAILABLE")
    async with SimulatorServer(SimConfig(speed=FAST, faults=Faults(unsolvable=1.0))) as srv:
        _, got = await Json(session, srv).solve(V2)
        assert (got["errorId"], got["errorCode"]) == (12, "ERROR_CAPTCHA_UNSOLVABLE")


async def test_callback_url_is_posted_the_result(session: aiohttp.ClientSession) -> None:
    async with PingbackReceiver() as receiver, SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Json(session, srv)
        task_id = (await api.create(V2, callbackUrl=receiver.url))["taskId"]
        ((_, raw),) = await receiver.wait_posts(1)
        body = json.loads(raw)
        view = srv.simulator.task_view(task_id)
        assert view is not None and view.answer is not None
        assert body["taskId"] == task_id and body["solution"]["gRecaptchaResponse"] == view.answer.request
        assert not receiver.hits


_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=16)
                    | st.sampled_from([KEY, "RecaptchaV2TaskProxyless", "ImageToTextTask", PAGE]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


@settings(max_examples=80, deadline=None)
@given(method=st.sampled_from(["createTask", "getTaskResult", "getBalance", "reportCorrectRecaptcha"]),
       body=st.fixed_dictionaries({"clientKey": st.sampled_from([KEY, "", 5])},
                                  optional={"task": _ANY, "taskId": _ANY, "callbackUrl": _ANY}),
       raw=st.binary(max_size=64))
async def test_any_body_gets_a_json_api_answer(method: str, body: dict[str, Any], raw: bytes) -> None:
    async with aiohttp.ClientSession() as session, SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Json(session, srv)
        for status, reply in (await api.call(method, body), await api.call(method, raw=raw)):
            assert status == 200 and isinstance(reply["errorId"], int), reply
            assert reply["errorId"] == 0 or reply["errorCode"].startswith("ERROR_")


async def test_a_per_solve_profile_takes_hcaptcha_tasks_and_anticaptcha_charges_unsolvable(
        session: aiohttp.ClientSession) -> None:
    """``--profile anticaptcha`` over the JSON API (what a createTask provider is tested against): an HCaptchaTask
    is solved (the captchaai profile refuses it), each answered task is charged its price once, and an UNSOLVABLE
    one is charged too (Anti-Captcha's meaning); ``--profile 2captcha`` never charges UNSOLVABLE."""
    hcaptcha = {"type": "HCaptchaTaskProxyless", "websiteURL": PAGE, "websiteKey": "a5f74b19-9e45-40e0-b45d-47ff"}
    async with SimulatorServer(SimConfig(speed=FAST)) as plain:
        refused = await Json(session, plain).create(hcaptcha)
        assert refused["errorCode"] == "ERROR_TASK_NOT_SUPPORTED"
    for profile, unsolvable_charged in (("anticaptcha", True), ("2captcha", False)):
        cfg = SimConfig(speed=FAST, profile=profile)  # type: ignore[arg-type]
        async with SimulatorServer(cfg) as srv:
            api = Json(session, srv)
            _, got = await api.solve(hcaptcha)
            assert got["status"] == "ready" and got["solution"]["token"], got
            price = srv.stats().charged_micro
            assert price == (2000 if profile == "anticaptcha" else 1450) and srv.stats().charges == 1
            srv.simulator.reconfigure(SimConfig(speed=FAST, profile=profile,  # type: ignore[arg-type]
                                                faults=Faults(unsolvable=1.0)))
            _, failed = await api.solve(hcaptcha)
            assert failed["errorCode"] == "ERROR_CAPTCHA_UNSOLVABLE"
            assert srv.stats().charged_micro == price * (2 if unsolvable_charged else 1), profile
