"""The gateway's JSON API over real sockets against a real redis-server: createTask queues the very task in.php
would (same tenant tag, same params), getTaskResult answers from the result store with each type's solution, the
numbered errors for every bad body, key, type and field, rate limits, Redis outages, signed callbackUrl POSTs,
the protocol label on the metrics. Tasks are claimed and finished with the queue's real scripts, as a worker does
(the real workers, simulator and client libraries run in test_gateway_clients)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from captcha_worker.gateway import GatewayServer
from captcha_worker.gateway import metrics as gm
from tests.helpers import wait_until
from tests.sim_helpers import PNG, PingbackReceiver
from tests.test_gateway import (
    KEY_A,
    KEY_B,
    KEY_C,
    QUEUE,
    RECAPTCHA,
    SECRET,
    LiveGateway,
    config,
    failed,
    solved,
    tenants,
)
from tests.test_gateway import session as session  # noqa: PLC0414 - the same fixtures as the v1 tests
from tests.test_gateway import stack as stack  # noqa: PLC0414

SITEKEY = RECAPTCHA["googlekey"]
PAGE = RECAPTCHA["pageurl"]
V2 = {"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY}


async def call(stack: LiveGateway, method: str, body: Any, *, raw: bytes | None = None,
               http: str = "POST") -> tuple[int, dict[str, Any], dict[str, str]]:
    data = raw if raw is not None else json.dumps(body).encode()
    async with stack.session.request(http, f"{stack.server.url}/{method}", data=data,
                                     headers={"Content-Type": "application/json"}) as resp:
        text = await resp.text()
        assert resp.content_type == "application/json", (resp.status, text[:300])
        return resp.status, json.loads(text), dict(resp.headers)


async def create(stack: LiveGateway, task: dict[str, Any], key: str = KEY_A, **extra: Any) -> dict[str, Any]:
    status, body, _ = await call(stack, "createTask", {"clientKey": key, "task": task, **extra})
    assert status == 200
    return body


async def result(stack: LiveGateway, task_id: Any, key: str = KEY_A) -> dict[str, Any]:
    return (await call(stack, "getTaskResult", {"clientKey": key, "taskId": task_id}))[1]


async def test_create_task_queues_the_task_in_php_would(stack: LiveGateway) -> None:
    body = await create(stack, {**V2, "isInvisible": True}, softId=123, languagePool="en")
    assert body["errorId"] == 0 and body["status"] == "idle" and isinstance(body["taskId"], int), body
    number = await stack.submit(**RECAPTCHA, invisible="1")
    items = await stack.redis.lrange(stack.queue.keys.pending, 0, -1)
    assert items == [f"gw:team-a:{body['taskId']}", f"gw:team-a:{number}"]
    bodies = [json.loads(await stack.redis.hget(stack.queue.keys.task(i), "body")) for i in items]
    for b in bodies:
        b.pop("id"), b.pop("submitted_at"), b.pop("deadline")
    assert bodies[0] == bodies[1]  # same method, params, tenant, reply_to
    assert gm.SUBMITTED.labels(gm.JSON, "team-a")._value.get() >= 1


async def test_get_task_result_from_processing_to_ready(stack: LiveGateway) -> None:
    task_id = (await create(stack, V2))["taskId"]
    assert await result(stack, task_id) == {"errorId": 0, "status": "processing"}
    assert await result(stack, str(task_id)) == {"errorId": 0, "status": "processing"}  # CapSolver sends strings
    await stack.finish(lambda tid: replace(solved(tid, "03A-TOKEN", "UA/9"), kind="recaptcha_v2_enterprise"))
    got = await result(stack, task_id)
    assert got["solution"] == {"gRecaptchaResponse": "03A-TOKEN", "token": "03A-TOKEN", "userAgent": "UA/9"}
    assert (got["errorId"], got["status"], got["cost"], got["ip"], got["solveCount"]) == (0, "ready", "0",
                                                                                          "127.0.0.1", 0)
    assert 0 < got["endTime"] - got["createTime"] <= 5 and abs(got["endTime"] - time.time()) < 10
    # the same number is res.php's id; another tenant reaches nothing under it
    assert (await stack.api.get(task_id)).json["request"] == "03A-TOKEN"
    assert (await result(stack, task_id, key=KEY_B))["errorCode"] == "ERROR_NO_SUCH_CAPCHA_ID"


async def test_failures_and_unknown_ids(stack: LiveGateway) -> None:
    task_id = (await create(stack, V2))["taskId"]
    await stack.finish(failed("DEADLINE_PASSED"))
    assert await result(stack, task_id) == {"errorId": 12, "errorCode": "ERROR_CAPTCHA_UNSOLVABLE",
                                            "errorDescription": "The captcha could not be solved."}
    for bad in (123456789012345, "abc", -1, 0, 1.5, True, None, [1], "9" * 40):
        got = await result(stack, bad)
        assert (got["errorId"], got["errorCode"]) == (16, "ERROR_NO_SUCH_CAPCHA_ID"), bad


async def test_balance_and_reports(stack: LiveGateway) -> None:
    assert (await call(stack, "getBalance", {"clientKey": KEY_A}))[1] == {"errorId": 0, "balance": 12.5}
    assert (await call(stack, "getBalance", {"clientKey": KEY_B}))[1] == {"errorId": 0, "balance": 0.0}
    task_id = (await create(stack, V2))["taskId"]
    await stack.finish(solved)
    for method in ("reportIncorrectRecaptcha", "reportCorrectRecaptcha", "reportIncorrectImageCaptcha",
                   "reportIncorrect", "reportCorrect", "reportIncorrectTokenCaptcha", "reportIncorrectHcaptcha"):
        assert (await call(stack, method, {"clientKey": KEY_A, "taskId": task_id}))[1] == {
            "errorId": 0, "status": "success"}, method
        got = (await call(stack, method, {"clientKey": KEY_A, "taskId": 100000000000001}))[1]
        assert got["errorCode"] == "ERROR_NO_SUCH_CAPCHA_ID"
    assert gm.REPORTS.labels("team-a", "bad")._value.get() >= 5 and gm.REPORTS.labels("team-a", "good")._value.get()


BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    ("empty", b"", 110, "ERROR_BAD_PARAMETERS"),
    ("not json", b"{nope", 110, "ERROR_BAD_PARAMETERS"),
    ("not utf-8", b'{"clientKey":"\xff"}', 110, "ERROR_BAD_PARAMETERS"),
    ("an array", b"[1,2]", 110, "ERROR_BAD_PARAMETERS"),
    ("a string", b'"x"', 110, "ERROR_BAD_PARAMETERS"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, 110, "ERROR_BAD_PARAMETERS"),
    ("deep object", b'{"clientKey":"' + KEY_A.encode() + b'","task":' + b'{"a":' * 5000 + b"1" + b"}" * 5001,
     110, "ERROR_BAD_PARAMETERS"),
    ("no key", json.dumps({"task": V2}).encode(), 1, "ERROR_KEY_DOES_NOT_EXIST"),
    ("key not text", json.dumps({"clientKey": 123, "task": V2}).encode(), 1, "ERROR_KEY_DOES_NOT_EXIST"),
    ("wrong key", json.dumps({"clientKey": "D" * 32, "task": V2}).encode(), 1, "ERROR_KEY_DOES_NOT_EXIST"),
    ("no task", json.dumps({"clientKey": KEY_A}).encode(), 22, "ERROR_TASK_ABSENT"),
    ("task not object", json.dumps({"clientKey": KEY_A, "task": "x"}).encode(), 110, "ERROR_BAD_PARAMETERS"),
    ("no type", json.dumps({"clientKey": KEY_A, "task": {"websiteURL": PAGE}}).encode(), 23,
     "ERROR_TASK_NOT_SUPPORTED"),
    ("unknown type", json.dumps({"clientKey": KEY_A, "task": {**V2, "type": "FooTask"}}).encode(), 23,
     "ERROR_TASK_NOT_SUPPORTED"),
    ("hcaptcha", json.dumps({"clientKey": KEY_A, "task": {**V2, "type": "HCaptchaTaskProxyless"}}).encode(), 23,
     "ERROR_TASK_NOT_SUPPORTED"),
    ("no websiteURL", json.dumps({"clientKey": KEY_A, "task": {**V2, "websiteURL": None}}).encode(), 5,
     "ERROR_PAGEURL"),
    ("no websiteKey", json.dumps({"clientKey": KEY_A, "task": {**V2, "websiteKey": ""}}).encode(), 31,
     "ERROR_RECAPTCHA_INVALID_SITEKEY"),
    ("websiteURL a number", json.dumps({"clientKey": KEY_A, "task": {**V2, "websiteURL": 1}}).encode(), 110,
     "ERROR_BAD_PARAMETERS"),
    ("empty image", json.dumps({"clientKey": KEY_A, "task": {"type": "ImageToTextTask"}}).encode(), 3,
     "ERROR_ZERO_CAPTCHA_FILESIZE"),
    ("callbackUrl not allowed", json.dumps({"clientKey": KEY_A, "task": V2,
                                            "callbackUrl": "http://127.0.0.1:9/x"}).encode(),
     110, "ERROR_BAD_PARAMETERS"),
    ("callbackUrl not text", json.dumps({"clientKey": KEY_A, "task": V2, "callbackUrl": 5}).encode(), 110,
     "ERROR_BAD_PARAMETERS"),
]


@pytest.mark.parametrize(("raw", "error_id", "code"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES])
async def test_bad_bodies_get_the_json_apis_numbered_errors(stack: LiveGateway, raw: bytes, error_id: int,
                                                            code: str) -> None:
    status, body, _ = await call(stack, "createTask", None, raw=raw)
    assert (status, body["errorId"], body["errorCode"]) == (200, error_id, code), body
    assert isinstance(body["errorDescription"], str) and "Traceback" not in body["errorDescription"]
    assert KEY_A not in body["errorDescription"]
    assert await stack.redis.llen(stack.queue.keys.pending) == 0


async def test_a_body_over_the_cap_and_a_get(redis: Redis, redis_server: Any, session: aiohttp.ClientSession) -> None:
    async with GatewayServer(config(redis_server.url, GATEWAY_MAX_BODY_BYTES="65536")) as server:
        s = LiveGateway(server, session, redis)
        big = {"clientKey": KEY_A, "task": {"type": "ImageToTextTask", "body": "A" * 100_000}}
        status, body, _ = await call(s, "createTask", big)
        assert (status, body["errorId"], body["errorCode"]) == (200, 4, "ERROR_TOO_BIG_CAPTCHA_FILESIZE")
        status, body, _ = await call(s, "createTask", None, raw=b"", http="GET")
        assert (status, body["errorCode"]) == (200, "ERROR_NO_SUCH_METHOD")
        image = {"type": "ImageToTextTask", "body": base64.b64encode(PNG).decode()}
        assert (await create(s, image))["errorId"] == 0
        assert gm.REQUESTS.labels(gm.JSON, "create_task", "ERROR_TOO_BIG_CAPTCHA_FILESIZE")._value.get() >= 1


async def test_rate_limit(stack: LiveGateway) -> None:  # team-c: 0.5 requests/s, burst 2
    assert [(await create(stack, V2, key=KEY_C))["errorId"] for _ in range(2)] == [0, 0]
    assert (await create(stack, V2, key=KEY_C))["errorCode"] == "ERROR_NO_SLOT_AVAILABLE"
    status, body, headers = await call(stack, "getTaskResult", {"clientKey": KEY_C, "taskId": 1})
    assert (status, body["errorCode"]) == (429, "ERROR_TOO_MUCH_REQUESTS") and 1 <= int(headers["Retry-After"]) <= 3


async def test_redis_outage_is_retry_later(redis_server: Any, stack: LiveGateway) -> None:
    redis_server.stop()
    try:
        assert (await create(stack, V2))["errorCode"] == "ERROR_NO_SLOT_AVAILABLE"
        assert (await result(stack, 123456789012345))["errorCode"] == "ERROR_NO_SLOT_AVAILABLE"
        assert (await create(stack, V2, key="x"))["errorCode"] == "ERROR_KEY_DOES_NOT_EXIST"  # no Redis needed
    finally:
        redis_server.start()

    async def ready() -> bool:
        return (await stack.probe("/readyz"))[0] == 200

    await wait_until(ready, 10, "the gateway to be ready after Redis is back")
    assert (await create(stack, V2))["errorId"] == 0


async def test_callback_url_gets_the_result_posted_and_signed(redis: Redis, redis_server: Any,
                                                              session: aiohttp.ClientSession) -> None:
    doc = tenants(pingback={"hosts": ["127.0.0.1"], "networks": ["127.0.0.0/8"], "secret": SECRET})
    async with PingbackReceiver() as receiver, GatewayServer(config(redis_server.url, doc)) as server:
        s = LiveGateway(server, session, redis)
        ok = (await create(s, V2, callbackUrl=receiver.url))["taskId"]
        bad = (await create(s, V2, callbackUrl=receiver.url))["taskId"]
        await s.finish(lambda tid: replace(solved(tid, "03A-CB"), kind="recaptcha_v2") if tid.endswith(str(ok))
                       else failed("ERROR_CAPTCHA_UNSOLVABLE")(tid))
        posts = await receiver.wait_posts(2)
        by_id = {json.loads(b)["taskId"]: (h, b) for h, b in posts}
        headers, raw = by_id[ok]
        body = json.loads(raw)
        assert body["status"] == "ready" and body["solution"]["gRecaptchaResponse"] == "03A-CB"
        message = headers["X-Captcha-Timestamp"].encode() + b"\n" + raw
        expected = "v1=" + hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
        assert headers["X-Captcha-Signature"] == expected and headers["Content-Type"] == "application/json"
        assert json.loads(by_id[bad][1]) == {"taskId": bad, "errorId": 12, "errorCode": "ERROR_CAPTCHA_UNSOLVABLE",
                                             "errorDescription": "The captcha could not be solved."}
        assert not receiver.hits  # no v1 pingback GET for these
        assert not await redis.keys(f"{{{QUEUE}}}:callback:*")


_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
                       | st.sampled_from([KEY_A, "RecaptchaV2TaskProxyless", "ImageToTextTask", PAGE]),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=8)
_TASK = st.dictionaries(st.sampled_from(["type", "websiteURL", "websiteKey", "body", "proxyType", "proxyAddress",
                                         "proxyPort", "version", "initParameters", "metadata", "cookies"]),
                        _VALUES, max_size=6)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=st.sampled_from(["createTask", "getTaskResult", "getBalance", "reportIncorrectRecaptcha"]),
       body=st.fixed_dictionaries({"clientKey": st.sampled_from([KEY_A, KEY_B, "", "x"])},
                                  optional={"task": _TASK | _VALUES, "taskId": _VALUES, "callbackUrl": _VALUES}),
       raw=st.binary(max_size=100))
async def test_any_body_gets_a_json_api_answer(stack: LiveGateway, method: str, body: dict[str, Any],
                                                raw: bytes) -> None:
    status, reply, _ = await call(stack, method, body)
    assert status in (200, 429) and isinstance(reply["errorId"], int), reply
    assert reply["errorId"] == 0 or reply["errorCode"].startswith("ERROR_")
    status, reply, _ = await call(stack, method, None, raw=raw)
    assert status == 200 and isinstance(reply["errorId"], int)
