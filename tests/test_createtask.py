"""The JSON-API (createTask) provider client, no sockets (aioresponses): the task each kind sends, answers read
back, every hostile reply a typed error (never a traceback, never the key), and which createTask failures may
have created a paid task (MaybeCharged: never retried) and which certainly did not (retried, or refused)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aioresponses import CallbackResult, aioresponses

from captcha_worker import methods
from captcha_worker.captchaai import (
    CapacityError,
    FatalApiError,
    MaybeCharged,
    RetryPolicy,
    SolveStats,
    SolveTimeout,
    TaskFailed,
    TransientError,
)
from captcha_worker.codes import Code
from captcha_worker.config import Secret
from captcha_worker.createtask import MAX_POLLS, JsonApi, parse_json_reply
from captcha_worker.protocols.jsonapi_errors import to_v1

BASE = "http://provider.test"
KEY = "ac0123456789abcdef0123456789abcd"
CREATE = f"{BASE}/createTask"
RESULT = f"{BASE}/getTaskResult"
BALANCE = f"{BASE}/getBalance"
FAST = RetryPolicy(transient_attempts=3, transient_initial_s=0.001, transient_max_s=0.002,
                   capacity_initial_s=0.001, capacity_max_s=0.002)
TURNSTILE = methods.by_name("turnstile")
HCAPTCHA = methods.foreign_kind("hcaptcha")
PARAMS = {"sitekey": "0x4AAAAAAA", "pageurl": "https://example.com/login"}
READY = {"errorId": 0, "status": "ready", "solution": {"token": "0.tok"}, "cost": "0.002"}


@pytest.fixture
async def api() -> AsyncIterator[JsonApi]:
    async with JsonApi(Secret(KEY), BASE, provider="jsonapi", retry=FAST, poll_scale=1000, http_timeout_s=5) as client:
        yield client


@pytest.fixture
def mock() -> aioresponses:
    with aioresponses() as m:
        yield m


def sent(mock: aioresponses, url: str) -> list[dict[str, Any]]:
    calls = [c for (method, u), cs in mock.requests.items() if str(u) == url for c in cs]
    return [json.loads(c.kwargs["data"]) for c in calls]


async def solve(api: JsonApi, kind: methods.Kind = TURNSTILE, method: str = "turnstile",
                params: dict[str, str] | None = None, **kw: Any) -> Any:
    return await api.solve(kind, method, params or PARAMS, deadline=time.time() + 30, **kw)


async def test_a_solve_sends_the_kinds_task_and_reads_the_answer(api: JsonApi, mock: aioresponses) -> None:
    mock.post(CREATE, payload={"errorId": 0, "taskId": 7})
    mock.post(RESULT, payload={"errorId": 0, "status": "processing"})
    mock.post(RESULT, payload=READY)
    ids: list[str] = []
    stats = SolveStats()
    got = await solve(api, stats=stats, on_submit=lambda i, _w: ids.append(i))
    assert (got.answer.request, got.captcha_id, got.polls, ids) == ("0.tok", "7", 2, ["7"])
    (create,) = sent(mock, CREATE)
    assert create == {"clientKey": KEY, "task": {"type": "TurnstileTaskProxyless", "websiteURL": PARAMS["pageurl"],
                                                 "websiteKey": PARAMS["sitekey"]}}
    assert [b["taskId"] for b in sent(mock, RESULT)] == [7, 7]


async def test_capsolvers_uuid_and_synchronous_answers(api: JsonApi, mock: aioresponses) -> None:
    uuid = "2f9e3a5c-1b7d-4e8f-9a0b-c1d2e3f4a5b6"
    mock.post(CREATE, payload={"errorId": 0, "errorCode": "", "taskId": uuid, "status": "idle"})
    mock.post(RESULT, payload={"errorId": 0, "status": "ready", "solution": {"token": "t", "userAgent": "UA"}})
    got = await solve(api)
    assert (got.answer.request, got.answer.user_agent, got.captcha_id) == ("t", "UA", uuid)
    assert sent(mock, RESULT)[0]["taskId"] == uuid
    mock.post(CREATE, payload={"errorId": 0, "taskId": uuid, "status": "ready", "solution": {"text": "abc"}})
    image = await api.solve(methods.by_name("image"), "base64", {"body": "aGVsbG8="}, deadline=time.time() + 30)
    assert image.answer.request == "abc" and image.polls == 0


async def test_hcaptcha_goes_as_its_type_and_bls_has_none(api: JsonApi, mock: aioresponses) -> None:
    assert HCAPTCHA is not None
    mock.post(CREATE, payload={"errorId": 0, "taskId": 9})
    mock.post(RESULT, payload={"errorId": 0, "status": "ready", "solution": {"gRecaptchaResponse": "P0_x"}})
    got = await solve(api, HCAPTCHA, "hcaptcha")
    assert got.answer.request == "P0_x" and sent(mock, CREATE)[0]["task"]["type"] == "HCaptchaTaskProxyless"
    with pytest.raises(TaskFailed) as err:
        await solve(api, methods.by_name("bls"), "bls", {"instructions": "x"})
    assert err.value.code == Code.ERROR_BAD_PARAMETERS and "no JSON-API task type" in str(err.value)


@pytest.mark.parametrize(("status", "body", "raised", "code"), [
    (200, b"<html>502 Bad Gateway</html>", TransientError, Code.NON_JSON),
    (200, b"[1, 2]", TransientError, Code.NON_JSON),
    (200, b'{"taskId": 5}', TransientError, Code.NON_JSON),  # no errorId
    (200, b'{"errorId": 1}', TransientError, Code.NON_JSON),  # CapSolver / CapMonster: 1 is every error
    (200, b'{"errorId": 77}', TransientError, Code.NON_JSON),  # a number nobody documents
    (200, b'{"errorId": 12}', TaskFailed, Code.ERROR_CAPTCHA_UNSOLVABLE),  # Anti-Captcha's numbering, no code
    (200, b'{"errorId": 1, "errorCode": "ERROR_KEY_DOES_NOT_EXIST", "errorDescription": "ac0123"}', FatalApiError,
     Code.ERROR_KEY_DOES_NOT_EXIST),
    (200, b'{"errorId": 2, "errorCode": "ERROR_NO_SLOT_AVAILABLE"}', CapacityError, Code.ERROR_NO_SLOT_AVAILABLE),
    (200, b'{"errorId": 10, "errorCode": "ERROR_ZERO_BALANCE"}', CapacityError, Code.ERROR_ZERO_BALANCE),
    (400, b'{"errorId": 1, "errorCode": "ERROR_INVALID_TASK_DATA"}', TaskFailed, Code.ERROR_BAD_PARAMETERS),
    (200, b'{"errorId": 1, "errorCode": "ERROR_SOMETHING_NEW"}', TaskFailed, "ERROR_SOMETHING_NEW"),
    (200, b'{"errorId": 1, "errorCode": "not a code <script>"}', TransientError, Code.NON_JSON),
    (401, b"Unauthorized", FatalApiError, Code.ERROR_KEY_DOES_NOT_EXIST),
    (429, b"slow down", CapacityError, Code.HTTP_429),
    (503, b"<html>busy</html>", TransientError, Code.HTTP_5XX),
    (404, b"nope", TransientError, Code.HTTP_4XX),
    (200, b"\xff\xfe\x00", TransientError, Code.NON_JSON),
    (200, b"[" * 100_000, TransientError, Code.NON_JSON),
])
def test_every_reply_is_a_typed_error_or_an_object(status: int, body: bytes, raised: type[Exception],
                                                   code: str) -> None:
    with pytest.raises(raised) as err:
        parse_json_reply(status, body, "get_task_result")
    assert type(err.value) is raised and err.value.code == code  # type: ignore[attr-defined]
    assert KEY[:6] not in str(err.value) and "<" not in str(err.value)


def test_the_providers_codes_map_by_meaning() -> None:
    assert to_v1("ERROR_CAPTCHA_UNSOLVABLE", 12) == Code.ERROR_CAPTCHA_UNSOLVABLE
    assert to_v1("ERROR_ZERO_BALANCE", 10) == Code.ERROR_ZERO_BALANCE
    assert to_v1("ERROR_TASKID_INVALID", 1) == Code.ERROR_WRONG_CAPTCHA_ID  # CapSolver
    assert to_v1("ERROR_SERVICE_UNAVALIABLE", 1) == Code.ERROR_SERVER_ERROR  # CapSolver's spelling
    assert to_v1("", 16) == Code.ERROR_WRONG_CAPTCHA_ID
    assert to_v1(None, 1) is None and to_v1(None, True) is None and to_v1(5, "x") is None


async def test_a_processing_reply_and_capmonsters_not_ready_are_not_errors(api: JsonApi, mock: aioresponses) -> None:
    mock.post(CREATE, payload={"errorId": 0, "taskId": 3})
    mock.post(RESULT, payload={"errorId": 1, "errorCode": "CAPTCHA_NOT_READY", "errorDescription": None})
    mock.post(RESULT, payload={"errorId": 0, "status": "processing", "errorDescription": None})
    mock.post(RESULT, payload=READY)
    assert (await solve(api)).polls == 3


async def test_failed_polls_are_retried_then_a_transient_error(api: JsonApi, mock: aioresponses) -> None:
    mock.post(CREATE, payload={"errorId": 0, "taskId": 3})
    mock.post(RESULT, status=502, body="<html>")
    mock.post(RESULT, exception=TimeoutError())
    mock.post(RESULT, payload=READY)
    assert (await solve(api)).answer.request == "0.tok"
    mock.post(CREATE, payload={"errorId": 0, "taskId": 4})
    for _ in range(FAST.transient_attempts):
        mock.post(RESULT, body="not json")
    with pytest.raises(TransientError) as err:
        await solve(api)
    assert err.value.code == Code.NON_JSON and not isinstance(err.value, MaybeCharged)


async def test_a_ready_task_without_its_solution_is_a_typed_error(api: JsonApi, mock: aioresponses) -> None:
    mock.post(CREATE, payload={"errorId": 0, "taskId": 3})
    for _ in range(FAST.transient_attempts):
        mock.post(RESULT, payload={"errorId": 0, "status": "ready", "solution": {"text": "for an image"}})
    with pytest.raises(TransientError) as err:
        await solve(api)
    assert err.value.code == Code.NON_JSON and "without a turnstile solution" in str(err.value)


async def test_unsolvable_is_a_task_failure_resubmitted_when_asked(api: JsonApi, mock: aioresponses) -> None:
    for i in (1, 2):
        mock.post(CREATE, payload={"errorId": 0, "taskId": i})
        mock.post(RESULT, payload={"errorId": 12, "errorCode": "ERROR_CAPTCHA_UNSOLVABLE"})
    ids: list[str] = []
    with pytest.raises(TaskFailed) as err:
        await solve(api, unsolvable_retries=1, on_submit=lambda i, _w: ids.append(i))
    assert err.value.code == Code.ERROR_CAPTCHA_UNSOLVABLE and ids == ["1", "2"]


@pytest.mark.parametrize("reply", [
    {"exception": TimeoutError()},
    {"exception": aiohttp.ServerDisconnectedError()},
    {"status": 502, "body": "<html>Bad Gateway</html>"},
    {"body": "<html>maintenance</html>"},
    {"payload": {"taskId": 5}},  # no errorId
    {"payload": {"errorId": 0}},  # a success without a taskId
    {"payload": {"errorId": 0, "taskId": -4}},
    {"payload": {"errorId": 0, "taskId": "no spaces allowed"}},
])
async def test_a_createtask_that_may_have_been_created_is_never_sent_again(api: JsonApi, mock: aioresponses,
                                                                           reply: dict[str, Any]) -> None:
    """The request went out and no usable reply came back: the provider may have created (and charged) the task.
    MaybeCharged at once, one createTask only: a retry could be a second charge."""
    mock.post(CREATE, **reply)
    mock.post(CREATE, payload={"errorId": 0, "taskId": 8})  # what a retry would get
    with pytest.raises(MaybeCharged) as err:
        await solve(api)
    assert len(sent(mock, CREATE)) == 1
    assert isinstance(err.value, TransientError) and KEY not in str(err.value)


async def test_a_createtask_that_never_reached_the_provider_or_was_refused_is_retried(
        api: JsonApi, mock: aioresponses) -> None:
    """Never connected, or the provider answered an error of its own (nothing created): retried, not MaybeCharged;
    capacity refusals back off until the deadline."""
    conn_key = aiohttp.client_reqrep.ConnectionKey("provider.test", 80, False, True, None, None, None)
    mock.post(CREATE, exception=aiohttp.ClientConnectorError(conn_key, OSError(111, "refused")))
    mock.post(CREATE, payload={"errorId": 1, "errorCode": "ERROR_SERVICE_UNAVALIABLE"})
    mock.post(CREATE, payload={"errorId": 2, "errorCode": "ERROR_NO_SLOT_AVAILABLE"})
    mock.post(CREATE, payload={"errorId": 0, "taskId": 11})
    mock.post(RESULT, payload=READY)
    got = await solve(api)
    assert got.captcha_id == "11" and len(sent(mock, CREATE)) == 4
    mock.post(CREATE, payload={"errorId": 2, "errorCode": "ERROR_NO_SLOT_AVAILABLE"}, repeat=True)
    with pytest.raises(SolveTimeout):
        await api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 0.05)


async def test_polls_are_at_least_2s_apart_and_at_most_120(mock: aioresponses) -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    async with JsonApi(Secret(KEY), BASE, provider="jsonapi", retry=FAST, poll_scale=1.0) as api:
        mock.post(CREATE, payload={"errorId": 0, "taskId": 3})
        mock.post(RESULT, payload={"errorId": 0, "status": "processing"}, repeat=True)
        with pytest.raises(SolveTimeout, match="120 polls"):
            await api.solve(TURNSTILE, "turnstile", PARAMS, deadline=time.time() + 3600, sleep=sleep)
    assert len(slept) == MAX_POLLS and min(slept) >= 2.0


async def test_balance_and_its_hostile_replies(api: JsonApi, mock: aioresponses) -> None:
    mock.post(BALANCE, payload={"errorId": 0, "balance": 12.5, "captchaCredits": 3})
    assert await api.getbalance() == 12.5
    mock.post(BALANCE, payload={"errorId": 0, "balance": "7.25"})
    assert await api.getbalance() == 7.25
    for payload in ({"errorId": 0}, {"errorId": 0, "balance": "lots"}, {"errorId": 0, "balance": [1]}):
        mock.post(BALANCE, payload=payload)
        with pytest.raises(TransientError) as err:
            await api.getbalance()
        assert err.value.code == Code.NON_JSON
    mock.post(BALANCE, payload={"errorId": 1, "errorCode": "ERROR_KEY_DOES_NOT_EXIST"})
    with pytest.raises(FatalApiError):
        await api.getbalance()
    assert all(b == {"clientKey": KEY} for b in sent(mock, BALANCE))


async def test_a_rotated_key_is_sent_from_the_next_request(api: JsonApi, mock: aioresponses) -> None:
    mock.post(BALANCE, payload={"errorId": 0, "balance": 1}, repeat=True)
    await api.getbalance()
    api.set_key(Secret("NEW" + KEY[3:]))
    await api.getbalance()
    assert [b["clientKey"] for b in sent(mock, BALANCE)] == [KEY, "NEW" + KEY[3:]]


async def test_the_key_goes_in_the_body_only(api: JsonApi, mock: aioresponses) -> None:
    seen: list[str] = []

    def record(url: Any, **kwargs: Any) -> CallbackResult:
        seen.append(str(url))
        return CallbackResult(payload={"errorId": 0, "balance": 1})

    mock.post(re.compile(r".*"), callback=record)
    await api.getbalance()
    assert seen == [BALANCE] and KEY not in seen[0]


async def test_capsolvers_dialect_sends_its_own_type_names(mock: aioresponses) -> None:
    async with JsonApi(Secret(KEY), BASE, provider="capsolver", retry=FAST, poll_scale=1000, http_timeout_s=5,
                       dialect="capsolver") as cs:
        mock.post(CREATE, payload={"errorId": 0, "taskId": "u-1", "status": "idle"})
        mock.post(RESULT, payload=READY)
        assert (await solve(cs)).answer.request == "0.tok"
        mock.post(CREATE, payload={"errorId": 0, "taskId": "u-2", "status": "idle"})
        mock.post(RESULT, payload={"errorId": 0, "status": "ready", "solution": {"gRecaptchaResponse": "03A"}})
        v2 = methods.by_name("recaptcha_v2")
        got = await cs.solve(v2, "userrecaptcha", {"googlekey": "6Lc", "pageurl": PARAMS["pageurl"]},
                             deadline=time.time() + 30)
        assert got.answer.request == "03A"
        assert [b["task"]["type"] for b in sent(mock, CREATE)] == ["AntiTurnstileTaskProxyLess",
                                                                   "ReCaptchaV2TaskProxyLess"]
        with pytest.raises(TaskFailed, match="capsolver names") as err:
            await cs.solve(methods.by_name("grid"), "base64", {"body": "aGVsbG8=", "grid_size": "3x3"},
                           deadline=time.time() + 30)
        assert err.value.code == Code.ERROR_BAD_PARAMETERS and len(sent(mock, CREATE)) == 2, "nothing sent"
