"""The CaptchaAI simulator, driven over a real socket with aiohttp (SimulatorServer on port 0).

Timing: real-time tests use a high ``speed`` and assert only lower bounds or generous upper bounds; anything
that needs exact times (queueing, utilisation, retention) runs on a FakeClock.
"""

from __future__ import annotations

import argparse
import asyncio
import base64 as b64
import dataclasses
import io
import json
import logging
import random
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from captcha_worker import methods
from captcha_worker.methods import KINDS, AnswerShape, Kind
from captcha_worker.simulator import (
    MAX_IMAGE_BYTES,
    Fault,
    Faults,
    Latency,
    OverCap,
    Scheduler,
    SimConfig,
    SimTask,
    SimulatorServer,
    add_arguments,
    config_from_args,
    decode_base64_image,
    serve,
)
from tests.sim_helpers import (
    KEY,
    OTHER_KEY,
    PNG,
    PNG_B64,
    PROXY_PASSWORD,
    Api,
    FakeClock,
    Reply,
    Submission,
    kind_id,
    kind_params,
)

FAST = 3000.0  # speed at which every default latency (mean + 4 sd) is below 0.06 s


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def turnstile() -> Submission:
    return kind_params(methods.by_name("turnstile"))


def image_base64() -> Submission:
    return kind_params(next(k for k in KINDS if k.name == "image" and k.method == "base64"))


async def submit_ok(api: Api, sub: Submission, **kw: object) -> str:
    reply = await api.submit(sub, **kw)
    assert reply.status == 200 and reply.json["status"] == 1, reply.text
    return str(reply.request)


# ---------------------------------------------------------------------------------------------------------------
# Every kind of the methods table
# ---------------------------------------------------------------------------------------------------------------


def assert_shape(kind: Kind, sub: Submission, reply: Reply) -> str:
    body = reply.json
    assert reply.status == 200 and body["status"] == 1, reply.text
    answer = body["request"]
    assert isinstance(answer, str) and answer
    match kind.shape:
        case AnswerShape.TEXT:
            assert re.fullmatch(r"[a-z0-9]{1,20}", answer)
        case AnswerShape.TOKEN:
            assert len(answer) >= 100
            assert "result" not in body
        case AnswerShape.TOKEN_WITH_UA:
            assert body["result"] == answer and len(answer) >= 100
            assert body["user_agent"].startswith("Mozilla/5.0")
        case AnswerShape.GEETEST:
            solution = json.loads(answer)
            if "challenge" in sub.fields:
                assert set(solution) == {"challenge", "validate", "seccode"}
                assert solution["challenge"].startswith(sub.fields["challenge"])
            else:
                assert set(solution) == {"captcha_id", "lot_number", "pass_token", "gen_time", "captcha_output"}
                assert solution["captcha_id"] == sub.fields["gt"]
        case AnswerShape.INDICES:
            cells = json.loads(answer)
            assert re.fullmatch(r"\[\d+(,\d+)*\]", answer)
            assert cells == sorted(set(cells)) and 1 <= cells[0] and cells[-1] <= 9
    return answer


@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
async def test_every_kind_is_accepted_and_answered_in_its_shape(session: aiohttp.ClientSession,
                                                                kind: Kind) -> None:
    sub = kind_params(kind)
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        submitted = await api.submit(sub)
        assert submitted.status == 200 and submitted.json["status"] == 1, submitted.text
        task_id = submitted.request
        if kind.method == "userrecaptcha":
            assert isinstance(task_id, int)  # as the real API does
        else:
            assert isinstance(task_id, str) and task_id.isdigit()
        answers = {assert_shape(kind, sub, await api.wait(task_id))}
        assert assert_shape(kind, sub, await api.get(task_id)) in answers  # stable once solved
        for _ in range(3):
            answers.add(assert_shape(kind, sub, await api.wait(await submit_ok(api, sub))))
        assert len(answers) > 1, "answers must be random"
        assert srv.stats().solved == 4


async def test_token_looks(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        recaptcha = (await api.wait(await submit_ok(api, kind_params(methods.by_name("recaptcha_v2")))))
        assert recaptcha.request.startswith("03A") and len(recaptcha.request) >= 400
        token = (await api.wait(await submit_ok(api, turnstile()))).request
        assert token.startswith("0.") and len(token) >= 300
        sub = kind_params(methods.by_name("recaptcha_v2_enterprise"))
        sub.fields["userAgent"] = "MyBrowser/1.0"
        enterprise = await api.wait(await submit_ok(api, sub))
        assert enterprise.json["user_agent"] == "MyBrowser/1.0"  # the client's UA is echoed


MISSING_CASES = [
    (kind, param) for kind in KINDS for param in kind.required
    # dropping grid_size turns a grid into a plain image: that is another kind, not a missing param
    if methods.kind_of(kind.method, kind_params(kind).without(param.name).fields) is kind
]


def test_missing_cases_cover_the_table() -> None:
    grids = sum(1 for k in KINDS if k.name == "grid")  # each loses one case: grid_size (see above)
    assert len(MISSING_CASES) >= sum(len(k.required) for k in KINDS) - grids
    assert {k.name for k, _ in MISSING_CASES} == set(methods.KIND_NAMES)


async def test_each_missing_param_gives_its_error(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        for kind, param in MISSING_CASES:
            for sub in (kind_params(kind).without(param.name), _blank(kind_params(kind), param.name)):
                reply = await api.submit(sub)
                assert reply.status == 200, reply.text
                assert reply.json == {"status": 0, "request": param.missing_error,
                                      "error_text": reply.json["error_text"]}, (kind_id(kind), param.name)
        assert srv.stats().submitted == 0


def _blank(sub: Submission, name: str) -> Submission:
    if name in sub.files:
        return Submission(dict(sub.fields), {**sub.files, name: b""})
    return Submission({**sub.fields, name: ""}, dict(sub.files), sub.via)


@pytest.mark.parametrize("method", ["", "hcaptcha", "funcaptcha", "nonsense"])
async def test_unknown_method_is_bad_parameters(session: aiohttp.ClientSession, method: str) -> None:
    async with SimulatorServer(SimConfig()) as srv:
        reply = await Api(session, srv.url).call("in.php", {"method": method, "sitekey": "x",
                                                            "pageurl": "https://a"})
        assert reply.request == "ERROR_BAD_PARAMETERS"


# ---------------------------------------------------------------------------------------------------------------
# Input checks: images, grid, BLS, proxy, text rules
# ---------------------------------------------------------------------------------------------------------------


async def test_image_checks(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)

        async def base64_body(body: str) -> str:
            return str((await api.call("in.php", {"method": "base64", "body": body}, via="form")).request)

        assert (await base64_body(PNG_B64)).isdigit()
        assert (await base64_body("data:image/png;base64," + PNG_B64)).isdigit()  # data-URI prefix tolerated
        assert (await base64_body(PNG_B64.rstrip("=") + "\n")).isdigit()  # missing padding tolerated
        assert await base64_body("!!!not base64!!!") == "ERROR_UPLOAD"
        assert await base64_body("") == "ERROR_ZERO_CAPTCHA_FILESIZE"
        big = bytes(MAX_IMAGE_BYTES + 1)
        assert await base64_body(b64.b64encode(big).decode()) == "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
        exactly = PNG[:16] + bytes(MAX_IMAGE_BYTES - 16)
        assert (await base64_body(b64.b64encode(exactly).decode())).isdigit()  # exactly 1024 KB

        post = {"method": "post"}
        assert str((await api.call("in.php", post, files={"file": PNG})).request).isdigit()
        assert (await api.call("in.php", post, files={"file": b""})).request == "ERROR_ZERO_CAPTCHA_FILESIZE"
        assert (await api.call("in.php", post, files={"file": big})).request == "ERROR_TOO_BIG_CAPTCHA_FILESIZE"


def test_decode_base64_is_lenient() -> None:
    raw = bytes(range(200))
    std = b64.b64encode(raw).decode()
    assert decode_base64_image(std) == raw
    assert decode_base64_image("data:image/jpeg;base64," + std) == raw
    assert decode_base64_image(std.replace("+", " ")) == raw  # '+' mangled into spaces by form decoding
    assert decode_base64_image(b64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    assert decode_base64_image(std[:40] + "\n" + std[40:]) == raw
    assert decode_base64_image("@@@@") is None


async def test_grid_and_bls_checks(session: aiohttp.ClientSession) -> None:
    grid = kind_params(methods.by_name("grid"))
    bls = kind_params(methods.by_name("bls"))
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        bad_grid = Submission({**grid.fields, "grid_size": "5x5"}, {})
        assert (await api.submit(bad_grid, via="form")).request == "ERROR_BAD_PARAMETERS"
        big_grid = Submission({**grid.fields, "grid_size": "4x4"}, {})
        seen: set[int] = set()
        for _ in range(8):
            seen.update(json.loads((await api.wait(await submit_ok(api, big_grid, via="form"))).request))
        assert max(seen) <= 16 and min(seen) >= 1
        assert max(seen) > 9  # 4x4 grids use all 16 cells (8 answers: P(all <= 9) is negligible)

        ten = Submission({**bls.fields, "image_base64_10": bls.fields["image_base64_1"]}, {})
        assert (await api.submit(ten, via="form")).request == "ERROR_BAD_PARAMETERS"
        broken = Submission({**bls.fields, "image_base64_5": "data:image/png;base64,%%%%"}, {})
        assert (await api.submit(broken, via="form")).request == "ERROR_UPLOAD"
        assert str((await api.submit(bls, via="multipart")).request).isdigit()


@pytest.mark.parametrize(("proxy", "proxytype", "ok"), [
    ("1.2.3.4:8080", "HTTP", True),
    (f"user:{PROXY_PASSWORD}@proxy.example.com:3128", "HTTPS", True),
    ("user:p:a:ss@10.0.0.1:1080", "socks5", True),
    ("[2001:db8::1]:8080", "SOCKS4", True),
    ("1.2.3.4", "HTTP", False),
    ("user@1.2.3.4:80", "HTTP", False),
    ("1.2.3.4:99999", "HTTP", False),
    ("http://1.2.3.4:80", "HTTP", False),
    ("1.2.3.4:80:user:pass", "HTTP", False),
    ("1.2.3.4:8080", "FTP", False),
])
async def test_proxy_format(session: aiohttp.ClientSession, proxy: str, proxytype: str, ok: bool) -> None:
    sub = turnstile()
    sub.fields.update(proxy=proxy, proxytype=proxytype)
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        reply = await Api(session, srv.url).submit(sub)
        assert (reply.json["status"] == 1) is ok
        if not ok:
            assert reply.request == "ERROR_BAD_PROXY"


@pytest.mark.parametrize(("rules", "pattern"), [
    ({"numeric": "1", "min_len": "6", "max_len": "6"}, r"[0-9]{6}"),
    ({"numeric": "2", "min_len": "3", "max_len": "5"}, r"[a-z]{3,5}"),
    ({"numeric": "3"}, r"[0-9]{4,7}|[a-z]{4,7}"),
    ({"numeric": "4", "max_len": "2"}, r"[0-9][a-z]|[a-z][0-9]"),
    ({"min_len": "12"}, r"[a-z0-9]{12,}"),
])
async def test_image_text_respects_rules(session: aiohttp.ClientSession, rules: dict[str, str],
                                         pattern: str) -> None:
    sub = image_base64()
    sub.fields.update(rules)
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        for _ in range(5):
            answer = (await api.wait(await submit_ok(api, sub))).request
            assert re.fullmatch(pattern, answer), answer


@pytest.mark.parametrize("rules", [{"numeric": "7"}, {"min_len": "6", "max_len": "3"}, {"max_len": "x"},
                                   {"numeric": "4", "max_len": "1"}])
async def test_bad_text_rules_are_bad_parameters(session: aiohttp.ClientSession, rules: dict[str, str]) -> None:
    sub = image_base64()
    sub.fields.update(rules)
    async with SimulatorServer(SimConfig()) as srv:
        assert (await Api(session, srv.url).submit(sub)).request == "ERROR_BAD_PARAMETERS"


# ---------------------------------------------------------------------------------------------------------------
# Keys and bans
# ---------------------------------------------------------------------------------------------------------------


async def test_key_errors(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(keys=frozenset({KEY}), ban_after=0, speed=FAST)) as srv:
        api = Api(session, srv.url)
        for key in ("", "short", KEY + "x", KEY[:-1] + "-"):
            assert (await api.submit(turnstile(), key=key)).request == "ERROR_WRONG_USER_KEY"
            assert (await api.res("threadsinfo", key=key)).request == "ERROR_WRONG_USER_KEY"
        assert (await api.submit(turnstile(), key=OTHER_KEY)).request == "ERROR_KEY_DOES_NOT_EXIST"
        assert (await api.res("getbalance", key=OTHER_KEY)).request == "ERROR_KEY_DOES_NOT_EXIST"
        # the key is checked before the method
        assert (await api.call("in.php", {"method": "nonsense"}, key="bad")).request == "ERROR_WRONG_USER_KEY"
        assert (await api.call("in.php", {"method": "nonsense"})).request == "ERROR_BAD_PARAMETERS"
        assert str(await submit_ok(api, turnstile())).isdigit()
        stats = srv.stats()
        assert stats.bad_key == 11 and stats.ip_bans == 0
        assert stats.errors["ERROR_WRONG_USER_KEY"] == 9


async def test_any_well_formed_key_is_accepted_by_default(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig()) as srv:
        for key in (KEY, OTHER_KEY, "a" * 32):
            assert (await Api(session, srv.url, key).res("getbalance")).json["status"] == 1


async def test_ip_banned_after_repeated_bad_keys(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(ban_after=3, ban_seconds=0.2)) as srv:
        api = Api(session, srv.url)
        for _ in range(2):
            assert (await api.res("getbalance", key="bad")).request == "ERROR_WRONG_USER_KEY"
        assert (await api.res("getbalance")).json["status"] == 1  # 2 strikes: not banned yet
        assert (await api.res("getbalance", key="bad")).request == "ERROR_WRONG_USER_KEY"  # third: banned
        banned = await api.submit(turnstile())
        assert banned.status == 200 and banned.request == "IP_BANNED"
        assert (await api.res("getbalance", json_mode=False)).text == "IP_BANNED"
        assert srv.stats().ip_bans == 1
        await asyncio.sleep(0.25)
        assert (await api.res("getbalance")).json["status"] == 1  # the ban is lifted


async def test_ban_window_forgets_old_strikes() -> None:
    clock = FakeClock()
    async with SimulatorServer(SimConfig(ban_after=2, ban_window_seconds=10), clock=clock) as srv:
        async with aiohttp.ClientSession() as session:
            api = Api(session, srv.url)
            await api.res("getbalance", key="bad")
            clock.advance(11)
            await api.res("getbalance", key="bad")
            assert (await api.res("getbalance")).json["status"] == 1
            await api.res("getbalance", key="bad")
            assert (await api.res("getbalance")).request == "IP_BANNED"


# ---------------------------------------------------------------------------------------------------------------
# Transports and reply formats
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["get", "form", "multipart"])
async def test_transports(session: aiohttp.ClientSession, via: str) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        task_id = await submit_ok(api, turnstile(), via=via)
        answer = await api.wait(task_id, via=via)
        assert answer.request.startswith("0.")


async def test_query_and_body_are_merged(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        url = f"{srv.url}/in.php"
        sub = turnstile()
        async with session.post(url, params={"key": KEY, "json": "1"}, data=sub.fields) as resp:
            assert (await resp.json())["status"] == 1
        form = aiohttp.FormData(sub.fields)
        form.add_field("key", KEY)
        async with session.post(url, params={"json": "1", "method": "bogus"}, data=form) as resp:
            assert (await resp.json())["status"] == 1  # the body's method wins over the query's


async def test_plain_text_and_json_replies(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(latency={"turnstile": Latency(0.15)})) as srv:
        api = Api(session, srv.url)
        plain = await api.submit(turnstile(), json_mode=False)
        assert plain.status == 200 and plain.content_type == "text/plain"
        assert re.fullmatch(r"OK\|\d+", plain.text)
        task_id = plain.text.split("|")[1]
        assert (await api.get(task_id, json_mode=False)).text == "CAPCHA_NOT_READY"
        assert (await api.get(task_id)).json == {"status": 0, "request": "CAPCHA_NOT_READY"}
        answer = await api.wait(task_id, json_mode=False)
        assert answer.text.startswith("OK|0.")
        as_json = await api.get(task_id)
        assert as_json.content_type == "application/json" and as_json.json["request"] == answer.text[3:]
        assert (await api.get("abc", json_mode=False)).text == "ERROR_WRONG_ID_FORMAT"
        error = await api.get("abc")
        assert error.status == 200 and error.json["status"] == 0
        assert error.request == "ERROR_WRONG_ID_FORMAT" and error.json["error_text"]
        assert str((await api.submit(turnstile(), json_mode=False, via="multipart")).text).startswith("OK|")


# ---------------------------------------------------------------------------------------------------------------
# res.php actions
# ---------------------------------------------------------------------------------------------------------------


async def test_res_actions(session: aiohttp.ClientSession) -> None:
    cfg = SimConfig(threads=7, balance=42.5, latency={"turnstile": Latency(100)})
    async with SimulatorServer(cfg) as srv:
        api = Api(session, srv.url)
        first = await submit_ok(api, turnstile())
        await submit_ok(api, turnstile())
        expected = {"status": 1, "request": "OK", "threads": 7, "working_threads": 2}
        assert (await api.res("threadsinfo")).json == expected
        assert (await api.res("threadsinfo", json_mode=False)).text == "OK|7|2"  # the plain form without json=1
        assert (await api.res("getbalance")).json == {"status": 1, "request": "42.5"}
        assert (await api.res("getbalance", json_mode=False)).text == "42.5"
        assert (await api.res("reportbad", fields={"id": first})).request == "OK_REPORT_RECORDED"
        assert (await api.res("reportbad", fields={"id": first}, json_mode=False)).text == "OK_REPORT_RECORDED"
        assert (await api.res("reportbad", fields={"id": "12345"})).request == "ERROR_WRONG_CAPTCHA_ID"
        assert (await api.res("")).request == "ERROR_EMPTY_ACTION"
        assert (await api.call("res.php", {})).request == "ERROR_EMPTY_ACTION"
        assert (await api.res("reportgood", fields={"id": first})).request == "OK_REPORT_RECORDED"
        assert (await api.res("reportgood", json_mode=False)).text == "ERROR_WRONG_ID_FORMAT"
        assert (await api.res("bogus")).request == "ERROR_BAD_PARAMETERS"
        assert (await api.get("")).request == "ERROR_WRONG_ID_FORMAT"
        assert (await api.get("12a")).request == "ERROR_WRONG_ID_FORMAT"
        assert (await api.get("12345")).request == "ERROR_WRONG_CAPTCHA_ID"
        assert (await api.get(first)).request == "CAPCHA_NOT_READY"
        assert (await api.get(first, key=OTHER_KEY)).request == "ERROR_WRONG_CAPTCHA_ID"  # not this key's task
        stats = srv.stats()
        assert (stats.reportbad, stats.reportgood) == (2, 1)
        assert stats.res_actions == {"get": 5, "threadsinfo": 2, "getbalance": 2, "reportbad": 3,
                                     "reportgood": 2, "(empty)": 2, "(unknown)": 1}
        assert stats.calls == {"in.php": 2, "res.php": 17, "solve.php": 0}


@pytest.mark.parametrize("speed", [1.0, 50.0])
async def test_answers_expire_after_retention_whatever_the_speed(session: aiohttp.ClientSession,
                                                                 speed: float) -> None:
    """Fix 1: speed scales solve times, never how long answers stay readable (at speed 50 a task used to be
    forgotten 12 s after its answer, before the official SDK's first poll at 15 s)."""
    clock = FakeClock()
    cfg = SimConfig(latency={"turnstile": Latency(10)}, retention_seconds=600, speed=speed)
    async with SimulatorServer(cfg, clock=clock) as srv:
        api = Api(session, srv.url)
        task_id = await submit_ok(api, turnstile())
        clock.advance(10 / speed)
        assert (await api.get(task_id)).request.startswith("0.")
        clock.advance(599)  # retention: 600 real seconds after the solve
        srv.simulator.housekeep()
        assert (await api.get(task_id)).request.startswith("0.")
        clock.advance(2)
        srv.simulator.housekeep()
        assert (await api.get(task_id)).request == "ERROR_WRONG_CAPTCHA_ID"


# ---------------------------------------------------------------------------------------------------------------
# Plan threads and the over-cap behaviours
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(OverCap))
async def test_over_cap_behaviour(session: aiohttp.ClientSession, mode: OverCap) -> None:
    clock = FakeClock()
    cfg = SimConfig(threads=2, over_cap=mode, latency={"turnstile": Latency(10)})
    async with SimulatorServer(cfg, clock=clock) as srv:
        api = Api(session, srv.url)
        first = await submit_ok(api, turnstile())
        await submit_ok(api, turnstile())
        third = await api.submit(turnstile())
        stats = srv.stats()
        assert stats.in_flight == 2 and stats.max_in_flight == 2
        if mode is OverCap.QUEUE:
            assert third.status == 200 and third.json["status"] == 1
            assert (stats.queued, stats.queue_length, stats.over_cap_rejections, stats.submitted) == (1, 1, 0, 3)
            clock.advance(10)  # the first two finish; the third starts now and needs 10 s
            assert (await api.get(first)).json["status"] == 1
            assert (await api.get(third.request)).request == "CAPCHA_NOT_READY"
            assert srv.stats().in_flight == 1
            clock.advance(10)
            assert (await api.get(third.request)).json["status"] == 1
            return
        expected = {OverCap.ZERO_BALANCE: "ERROR_ZERO_BALANCE", OverCap.NO_SLOT: "ERROR_NO_SLOT_AVAILABLE"}
        if mode is OverCap.HTTP429:
            assert third.status == 429
        else:
            assert third.status == 200 and third.request == expected[mode]
        assert (stats.over_cap_rejections, stats.submitted, stats.queued) == (1, 2, 0)
        clock.advance(10)
        assert str(await submit_ok(api, turnstile())).isdigit()  # a thread is free again


async def test_queue_is_exact_and_utilisation_is_measured(session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    cfg = SimConfig(threads=1, latency={"turnstile": Latency(1.0)})
    async with SimulatorServer(cfg, clock=clock) as srv:
        api = Api(session, srv.url)
        a = await submit_ok(api, turnstile())
        b = await submit_ok(api, turnstile())
        clock.advance(1.5)  # nobody looks at 1.0, when a finishes and b starts
        assert (await api.get(a)).json["status"] == 1
        assert (await api.get(b)).request == "CAPCHA_NOT_READY"
        clock.advance(0.5)  # b started at 1.0, not at 1.5
        assert (await api.get(b)).json["status"] == 1
        clock.advance(1.0)
        stats = srv.stats()
        assert stats.window_seconds == pytest.approx(3.0)
        assert stats.at_cap_seconds == pytest.approx(2.0)
        assert stats.busy_thread_seconds == pytest.approx(2.0)
        assert stats.utilisation == pytest.approx(2.0 / 3.0)
        assert (stats.max_in_flight, stats.queued, stats.solved) == (1, 1, 2)


async def test_threads_can_grow_at_runtime(session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with SimulatorServer(SimConfig(threads=1, latency={"turnstile": Latency(10)}), clock=clock) as srv:
        api = Api(session, srv.url)
        ids = [await submit_ok(api, turnstile()) for _ in range(3)]
        assert srv.stats().queue_length == 2
        assert (await api.sim("config", {"threads": 3})).status == 200
        assert (await api.res("threadsinfo")).json["threads"] == 3
        stats = srv.stats()
        assert (stats.in_flight, stats.queue_length, stats.max_in_flight) == (3, 0, 3)
        clock.advance(10)
        for task_id in ids:
            assert (await api.get(task_id)).json["status"] == 1


async def test_many_concurrent_tasks() -> None:
    n, solve_s, speed = 400, 500.0, 1000  # every solve lasts exactly 0.5 s of real time
    cfg = SimConfig(threads=1000, latency={"turnstile": Latency(solve_s, 0.0)}, speed=speed)
    loop = asyncio.get_running_loop()
    sent: list[float] = []  # when each request's headers were on the wire: its task starts no earlier

    async def on_sent(*_: object) -> None:
        sent.append(loop.time())

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(on_sent)
    async with SimulatorServer(cfg) as srv, aiohttp.ClientSession(  # in this process: its clock is this loop's
            connector=aiohttp.TCPConnector(limit=0), trace_configs=[trace]) as session:
        api = Api(session, srv.url)
        ids = await asyncio.gather(*(submit_ok(api, turnstile()) for _ in range(n)))
        last_reply = loop.time()
        assert len(set(ids)) == n and len(sent) == n
        # a task whose request was sent less than one solve before the last reply was accepted by then and not
        # finished yet: all of those were in flight at once, however slowly a loaded machine sent the 400
        together = sum(1 for t in sent if t > last_reply - solve_s / speed)
        assert srv.stats().max_in_flight >= together, (srv.stats().max_in_flight, together)
        print(f"\n  {together} of {n} sent within one solve of the last reply; max in flight "
              f"{srv.stats().max_in_flight}")
        replies = await asyncio.gather(*(api.wait(i, timeout=10) for i in ids))
        assert all(r.json["status"] == 1 for r in replies)
        stats = srv.stats()
        assert (stats.submitted, stats.solved, stats.in_flight) == (n, n, 0)
        assert stats.queued == 0, "1000 threads: none of the 400 waited for one"


def _task(i: int, duration: float) -> SimTask:
    return SimTask(id=i, kind=methods.by_name("turnstile"), owner=KEY, inputs={}, seed=i, wall=0,
                   unsolvable=False, duration=duration)


RunResult = tuple[float, float, int, int, tuple[float, ...]]


def _run(threads: int, arrivals: list[tuple[float, float]], looks: list[float]) -> RunResult:
    """Feeds (arrival, duration) pairs into a Scheduler in queue mode, also advancing it at the `looks`.
    Returns the meter's figures, how many finished and each task's start time (in arrival order)."""
    sched = Scheduler(threads, 0.0)
    events = sorted([(t, 0, i) for i, (t, _) in enumerate(arrivals)] + [(t, 1, -1) for t in looks])
    tasks: dict[int, SimTask] = {}
    finished = 0
    for t, what, i in events:
        finished += len(sched.advance(t))
        if what == 0:
            task = tasks[i] = _task(i, arrivals[i][1])
            if sched.has_room():
                sched.start(task, t)
            else:
                sched.wait(task)
    end = max(t + d for t, d in arrivals) * (len(arrivals) + 1)
    finished += len(sched.advance(end))
    starts = tuple(round((tasks[i].ready_at or 0) - tasks[i].duration, 6) for i in range(len(arrivals)))
    m = sched.meter
    return round(m.at_cap_s, 6), round(m.busy_s, 6), m.max_in_flight, finished, starts


@settings(max_examples=60, deadline=None)
@given(threads=st.integers(1, 4),
       arrivals=st.lists(st.tuples(st.floats(0, 20), st.floats(0.01, 5)), min_size=1, max_size=30),
       looks=st.lists(st.floats(0, 60), max_size=30))
def test_scheduler_is_exact_whenever_it_is_looked_at(threads: int, arrivals: list[tuple[float, float]],
                                                     looks: list[float]) -> None:
    lazy = _run(threads, arrivals, [])
    assert lazy == _run(threads, arrivals, looks)  # when it is advanced does not change the outcome
    _, busy, max_in_flight, finished, starts = lazy
    assert busy == pytest.approx(sum(d for _, d in arrivals), abs=1e-4)  # every thread-second is counted
    assert max_in_flight <= threads and finished == len(arrivals)
    assert all(start >= round(t, 6) for start, (t, _) in zip(starts, arrivals, strict=True))
    order = sorted(range(len(arrivals)), key=lambda i: (arrivals[i][0], i))
    in_order = [starts[i] for i in order]
    assert in_order == sorted(in_order)  # FIFO: nobody overtakes an earlier submission


# ---------------------------------------------------------------------------------------------------------------
# Latency
# ---------------------------------------------------------------------------------------------------------------


def test_latency_sampling_follows_the_distribution() -> None:
    rng = random.Random(7)
    lat = Latency(10.0, 2.0)
    samples = [lat.sample(rng) for _ in range(5000)]
    mean = sum(samples) / len(samples)
    sd = (sum((s - mean) ** 2 for s in samples) / len(samples)) ** 0.5
    assert mean == pytest.approx(10.0, abs=0.15) and sd == pytest.approx(2.0, abs=0.15)
    assert min(samples) >= 1.0 and max(samples) <= 18.0
    fast = [lat.sample(rng, speed=4) for _ in range(2000)]
    assert sum(fast) / len(fast) == pytest.approx(2.5, abs=0.1)
    wide = [Latency(1.0, 5.0).sample(rng) for _ in range(1000)]
    assert min(wide) == pytest.approx(0.1) and max(wide) <= 21.0  # truncated at a positive minimum
    assert {Latency(3.0).sample(rng) for _ in range(5)} == {3.0}


class _Extreme(random.Random):
    """An RNG whose normal draws are always `z` standard deviations from the mean."""

    def __init__(self, z: float) -> None:
        super().__init__(0)
        self.z = z

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        return mu + self.z * sigma


def test_latency_is_truncated_on_both_sides() -> None:
    lat = Latency(10.0, 2.0)
    assert lat.sample(_Extreme(10)) == 18.0  # mean + 4 sd
    assert lat.sample(_Extreme(-10)) == 1.0  # 0.1 * mean: always positive
    assert lat.sample(_Extreme(10), speed=2) == 9.0
    assert lat.sample(_Extreme(1)) == 12.0


def test_default_latencies_come_from_the_methods_table() -> None:
    cfg = SimConfig(latency={"turnstile": Latency.parse("12:3")})
    for kind in KINDS:
        lat = cfg.latency_for(kind)
        if kind.name != "turnstile":
            assert (lat.mean_s, lat.stddev_s) == (kind.solve_mean_s, kind.solve_stddev_s)
    assert cfg.latency_for(methods.by_name("turnstile")) == Latency(12.0, 3.0)


async def test_latency_is_honoured_over_http(session: aiohttp.ClientSession) -> None:
    kind = methods.by_name("turnstile")
    speed = kind.solve_mean_s / 0.2  # the table's mean becomes 0.2 s
    async with SimulatorServer(SimConfig(speed=speed)) as srv:
        api = Api(session, srv.url)
        loop = asyncio.get_running_loop()
        started = loop.time()
        task_id = await submit_ok(api, turnstile())
        assert (await api.get(task_id)).request == "CAPCHA_NOT_READY"
        await asyncio.sleep(max(0.0, started + (kind.solve_mean_s + 4 * kind.solve_stddev_s) / speed
                                - loop.time()) + 0.05)
        assert (await api.get(task_id)).json["status"] == 1


# ---------------------------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------------------------


async def test_fault_html502(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        assert (await api.sim("config", {"faults": {"html502": 1.0}})).status == 200
        for reply in (await api.submit(turnstile()), await api.res("getbalance")):
            assert reply.status == 502 and "<html>" in reply.text and reply.content_type == "text/html"
        assert (await api.sim("stats")).status == 200  # introspection is never faulted
        stats = srv.stats()
        assert stats.faults["html502"] == 2 and stats.submitted == 0


async def test_fault_nonjson(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(faults=Faults(nonjson=1.0))) as srv:
        api = Api(session, srv.url)
        for reply in (await api.submit(turnstile()), await api.res("threadsinfo")):
            assert reply.status == 200
            with pytest.raises(ValueError):
                json.loads(reply.text)
            assert not reply.text.startswith(("OK|", "ERROR_", "CAPCHA"))


async def test_fault_reset(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(faults=Faults(reset=1.0))) as srv:
        api = Api(session, srv.url)
        with pytest.raises(aiohttp.ClientConnectionError):
            await api.submit(turnstile())
        with pytest.raises(aiohttp.ClientConnectionError):
            await api.res("getbalance", via="form")
        await api.sim("config", {"faults": {"reset": 0}})
        assert (await api.res("getbalance")).json["status"] == 1  # the server is fine afterwards
        assert srv.stats().faults["reset"] >= 2  # aiohttp retries an idempotent GET once on a reset


async def test_fault_slow(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(slow_seconds=0.2)) as srv:
        api = Api(session, srv.url)
        await api.sim("config", {"faults": {"slow": 1.0}})
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await api.res("getbalance")).json["status"] == 1
        assert loop.time() - started >= 0.2
        assert srv.stats().faults.get("slow") == 1
        await api.sim("config", {"faults": {"slow": 0.0}})
        assert (await api.res("getbalance")).json["status"] == 1
        # no delay injected once it is off (counted, not timed: a loaded machine may stall any request 0.2 s)
        assert srv.stats().faults.get("slow") == 1


async def test_fault_unsolvable_frees_the_thread(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(threads=1, over_cap=OverCap.NO_SLOT, speed=FAST)) as srv:
        api = Api(session, srv.url)
        await api.sim("config", {"faults": {"unsolvable": 1.0}})
        task_id = await submit_ok(api, turnstile())
        reply = await api.wait(task_id)
        assert reply.request == "ERROR_CAPTCHA_UNSOLVABLE" and reply.json["error_text"]
        stats = srv.stats()
        assert (stats.failed, stats.solved, stats.in_flight) == (1, 0, 0)
        await api.sim("config", {"faults": {"unsolvable": 0.0}})
        assert (await api.wait(await submit_ok(api, turnstile()))).json["status"] == 1  # the thread was freed


async def test_fault_server_error(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(faults=Faults(server_error=1.0))) as srv:
        api = Api(session, srv.url)
        assert (await api.submit(turnstile())).request == "ERROR_SERVER_ERROR"
        assert (await api.submit(turnstile(), json_mode=False)).text == "ERROR_SERVER_ERROR"
        # input errors still win: the request is validated first
        assert (await api.call("in.php", {"method": "nonsense"})).request == "ERROR_BAD_PARAMETERS"
        assert (await api.res("threadsinfo")).json["status"] == 1  # res.php is not affected
        assert srv.stats().submitted == 0


async def test_fault_lost_takes_effect_and_never_replies(session: aiohttp.ClientSession) -> None:
    """``lost``: the submission is accepted (and charged by a per-solve profile), then the connection is reset
    instead of the reply: what a client sees as a lost in.php reply really created a task."""
    cfg = SimConfig(profile="2captcha", speed=FAST)  # type: ignore[arg-type]
    async with SimulatorServer(cfg) as srv:
        api = Api(session, srv.url)
        await api.sim("config", {"faults": {"lost": 1.0}})
        with pytest.raises(aiohttp.ClientConnectionError):
            await api.submit(turnstile(), via="form")  # a POST: aiohttp resends a GET once after a reset
        await api.sim("config", {"faults": {"lost": 0.0}})
        st = srv.stats()
        assert (st.faults["lost"], st.submitted, st.charges, st.charged_micro) == (1, 1, 1, 1450)


async def test_fault_rates_are_probabilities(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(faults=Faults(html502=0.5), seed=3)) as srv:
        api = Api(session, srv.url)
        statuses = [(await api.res("getbalance")).status for _ in range(60)]
        assert 10 < statuses.count(502) < 50 and statuses.count(200) == 60 - statuses.count(502)


async def test_runtime_config_errors(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig()) as srv:
        api = Api(session, srv.url)
        for body in ({"faults": {"bogus": 1}}, {"faults": {"html502": 2}}, {"threads": 0}, {"threads": "3"},
                     {"over_cap": "drop"}, {"speed": 0}, {"latency": {"nope": "1:1"}}, {"colour": "red"},
                     {"keys": ["short"]}):
            reply = await api.sim("config", body)
            assert reply.status == 400 and reply.json["error"], body
        async with session.post(f"{srv.url}/_sim/config", data="not json") as resp:
            assert resp.status == 400
        ok = await api.sim("config", {"over_cap": "no_slot", "balance": 3, "keys": [OTHER_KEY],
                                      "latency": {"turnstile": [2, 1]}, "speed": 10})
        assert ok.status == 200
        assert ok.json["over_cap"] == "no_slot" and ok.json["keys"] == 1 and ok.json["latency"]["turnstile"] == "2:1"
        assert KEY not in ok.text and OTHER_KEY not in ok.text
        assert (await api.res("getbalance")).request == "ERROR_KEY_DOES_NOT_EXIST"
        assert (await Api(session, srv.url, OTHER_KEY).res("getbalance")).request == "3.0"
        cfg = srv.simulator.config
        assert cfg.over_cap is OverCap.NO_SLOT and cfg.speed == 10 and cfg.threads == SimConfig().threads


# ---------------------------------------------------------------------------------------------------------------
# Introspection
# ---------------------------------------------------------------------------------------------------------------


async def test_introspection_counters_and_reset(session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with SimulatorServer(SimConfig(threads=10, latency={"turnstile": Latency(5)}), clock=clock) as srv:
        api = Api(session, srv.url)
        ids = await asyncio.gather(*(submit_ok(api, turnstile()) for _ in range(5)))
        stats = (await api.sim("stats")).json
        assert (stats["in_flight"], stats["max_in_flight"], stats["submitted"]) == (5, 5, 5)
        assert stats["calls"]["in.php"] == 5 and stats["threads"] == 10
        clock.advance(5)
        for task_id in ids:
            await api.get(task_id)
        stats = (await api.sim("stats")).json
        assert (stats["in_flight"], stats["max_in_flight"], stats["solved"]) == (0, 5, 5)
        assert stats["busy_thread_seconds"] == pytest.approx(25.0) and stats["at_cap_seconds"] == 0
        assert stats == srv.stats().as_dict() and srv.stats()["solved"] == 5
        await api.submit(turnstile(), key="bad")
        assert (await api.sim("reset")).json == {"ok": True}
        clock.advance(1)
        stats = srv.stats()
        assert (stats.submitted, stats.solved, stats.max_in_flight, stats.bad_key) == (0, 0, 0, 0)
        assert stats.calls == {"in.php": 0, "res.php": 0, "solve.php": 0}
        assert stats.window_seconds == pytest.approx(1.0)
        assert srv.simulator.config.threads == 10  # the config survives a reset
        assert (await api.get(ids[0])).json["status"] == 1  # and so do the answers


async def test_introspection_can_be_switched_off(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(introspection=False)) as srv:
        async with session.get(f"{srv.url}/_sim/stats") as resp:
            assert resp.status == 404
        async with session.post(f"{srv.url}/_sim/config", json={"threads": 99}) as resp:
            assert resp.status == 404
        assert srv.stats().threads == SimConfig().threads


class _Fields(logging.Formatter):
    """The event name and its structured fields, unredacted (so the test sees what the code passed)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"logger": record.name, "event": record.getMessage(),
                           **getattr(record, "fields", {})}, default=str)


async def test_nothing_secret_is_logged(session: aiohttp.ClientSession) -> None:
    """Fix 10: config changes, resets and IP bans are logged through captcha_worker.log, as an event name with
    structured fields (never JSON inside the message), and never with a key, proxy credential or answer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Fields())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        cfg = SimConfig(ban_after=2, speed=FAST)
        async with SimulatorServer(cfg) as srv:
            api = Api(session, srv.url)
            sub = kind_params(methods.by_name("cloudflare_challenge"))
            sub.fields["pingback"] = f"http://user:{PROXY_PASSWORD}@127.0.0.1:9/hook?token=s3cret"
            answer = (await api.wait(await submit_ok(api, sub))).request
            await api.sim("config", {"faults": {"slow": 0.0}, "keys": [KEY]})
            await api.sim("reset")
            for _ in range(3):
                await api.submit(sub, key="x" + KEY[1:] + "0")
            stats_text = (await api.sim("stats")).text
            # aiohttp rejects an over-long request line, and its exception quotes the line: it must not reach logs
            too_long = await api.call("in.php", {"method": "turnstile", "pageurl": "x" * 9000}, key=KEY)
            assert too_long.status == 400
            for _ in range(100):  # the pingback to port 9 fails in the background
                if srv.stats().pingbacks_failed:
                    break
                await asyncio.sleep(0.02)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    by_event = {r["event"]: r for r in records if r["logger"].startswith("captcha_worker.simulator")}
    assert by_event["simulator.config_changed"]["changed"] == ["keys"]
    assert by_event["simulator.ip_banned"]["ip"] == "127.0.0.1"
    assert by_event["simulator.http_error"]["error"] == "LineTooLong"
    assert by_event["simulator.pingback_failed"]["host"] == "127.0.0.1"
    assert {"simulator.reset"} <= by_event.keys()
    logged = stream.getvalue()
    for secret in (KEY, PROXY_PASSWORD, answer, KEY[1:], "s3cret"):
        assert secret not in logged and secret not in stats_text  # ...without keys, proxies or answers


# ---------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------


def parse(*argv: str) -> SimConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_config_from_args_defaults_and_values() -> None:
    assert parse() == SimConfig()
    cfg = parse("--threads", "3", "--over-cap", "http429", "--latency", "turnstile=12:3", "--latency",
                "image=2", "--speed", "5", "--fault", "html502=0.1", "--fault", "unsolvable=1",
                "--keys", f"{KEY}, {OTHER_KEY}", "--balance", "7.5", "--slow-seconds", "2",
                "--ban-after", "9", "--ban-seconds", "60", "--seed", "42")
    assert cfg.threads == 3 and cfg.over_cap is OverCap.HTTP429 and cfg.speed == 5
    assert dict(cfg.latency) == {"turnstile": Latency(12, 3), "image": Latency(2, 0)}
    assert cfg.faults == Faults(html502=0.1, unsolvable=1.0)
    assert cfg.keys == frozenset({KEY, OTHER_KEY}) and cfg.balance == 7.5 and cfg.slow_seconds == 2
    assert (cfg.ban_after, cfg.ban_seconds, cfg.seed) == (9, 60, 42)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args([])
    assert (ns.host, ns.port) == ("127.0.0.1", 8080)


@pytest.mark.parametrize(("argv", "needle"), [
    (["--latency", "funcaptcha=1:1"], "funcaptcha"),
    (["--latency", "turnstile=abc"], "turnstile"),
    (["--latency", "turnstile=-1:1"], "turnstile"),
    (["--latency", "turnstile"], "--latency"),
    (["--fault", "meteor=0.5"], "meteor"),
    (["--fault", "html502=1.5"], "html502"),
    (["--fault", "html502=x"], "html502"),
    (["--over-cap", "drop"], "drop"),
    (["--threads", "0"], "threads"),
    (["--speed", "0"], "speed"),
    (["--keys", "tooshort"], "--keys"),
    (["--keys", ","], "--keys"),
    (["--ban-after", "-1"], "ban_after"),
])
def test_config_from_args_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)) as err:
        parse(*argv)
    message = str(err.value)
    assert "\n" not in message and "tooshort" not in message  # one line, and never echoes a key


def test_fault_enum_matches_faults_dataclass() -> None:
    assert {f.value for f in Fault} == {f for f in Faults.__dataclass_fields__}
    assert Faults().with_rates({"reset": 0.5}).rate(Fault.RESET) == 0.5
    with pytest.raises(ValueError, match="bogus"):
        Faults().with_rates({"bogus": 0.5})


async def test_serve_prints_its_url_and_stops_when_cancelled(session: aiohttp.ClientSession,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    task = asyncio.create_task(serve(SimConfig(threads=4), "127.0.0.1", 0))
    out = ""
    for _ in range(200):
        out += capsys.readouterr().out
        if out:
            break
        await asyncio.sleep(0.01)
    lines = out.splitlines()
    assert len(lines) == 1
    match = re.search(r"http://127\.0\.0\.1:(\d+)", lines[0])
    assert match and match.group(1) != "0"
    reply = await Api(session, match.group(0)).res("threadsinfo")
    assert reply.json["threads"] == 4
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(aiohttp.ClientConnectionError):
        await Api(session, match.group(0)).res("threadsinfo")



# -- billing profiles (issue 27) ----------------------------------------------------------------------------
HCAPTCHA_FIELDS = {"method": "hcaptcha", "sitekey": "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2",
                   "pageurl": "https://example.com/signup"}


async def test_captchaai_profile_refuses_a_kind_it_lacks_and_charges_nothing(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        refused = await api.call("in.php", HCAPTCHA_FIELDS)
        assert (refused.json["status"], refused.request) == (0, "ERROR_BAD_PARAMETERS")
        await api.wait(await submit_ok(api, kind_params(methods.by_name("turnstile"))))
        st = srv.stats()
        assert (st.profile, st.charged_micro, st.charges, st.submitted) == ("captchaai", 0, 0, 1)
        assert (await api.res("getbalance")).request == "10.0"


async def test_per_solve_profile_charges_each_answered_solve_from_the_balance(session: aiohttp.ClientSession) -> None:
    """2captcha profile, price 1.45 per 1,000 (hcaptcha 3.00): every accepted solvable submission is charged once,
    an UNSOLVABLE one never, getbalance moves by the charges, and a submission the balance cannot pay is
    ERROR_ZERO_BALANCE (nothing charged, nothing started)."""
    cfg = SimConfig(speed=FAST, profile="2captcha", prices={"hcaptcha": 3000}, balance=0.01)  # type: ignore[arg-type]
    async with SimulatorServer(cfg) as srv:
        api = Api(session, srv.url)
        h = await api.call("in.php", HCAPTCHA_FIELDS)
        assert h.json["status"] == 1, h.text
        assert (await api.wait(h.request)).json["status"] == 1
        await api.wait(await submit_ok(api, kind_params(methods.by_name("turnstile"))))
        st = srv.stats()
        assert (st.charges, st.charged_micro, st.balance_micro) == (2, 3000 + 1450, 10_000 - 4450)
        assert (await api.res("getbalance")).request == str((10_000 - 4450) / 1_000_000)
        srv.simulator.reconfigure(dataclasses.replace(srv.simulator.config, faults=Faults(unsolvable=1.0)))
        u = await api.call("in.php", HCAPTCHA_FIELDS)
        assert (await api.wait(u.request)).json["request"] == "ERROR_CAPTCHA_UNSOLVABLE"
        assert srv.stats().charged_micro == 4450, "UNSOLVABLE is not charged"
        srv.simulator.reconfigure(dataclasses.replace(srv.simulator.config, faults=Faults()))
        # 5550 left: one more hcaptcha (3000), then 2550 cannot pay 3000
        assert (await api.call("in.php", HCAPTCHA_FIELDS)).json["status"] == 1
        broke = await api.call("in.php", HCAPTCHA_FIELDS)
        assert (broke.json["status"], broke.request) == (0, "ERROR_ZERO_BALANCE")
        st = srv.stats()
        assert (st.charges, st.charged_micro, st.balance_micro, st.submitted) == (3, 7450, 2550, 4)


def test_profile_and_price_flags() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(["--profile", "anticaptcha", "--price", "hcaptcha=2.125"]))
    assert (cfg.profile.value, cfg.price_micro(methods.foreign_kind("hcaptcha")),  # type: ignore[arg-type]
            cfg.price_micro(methods.by_name("turnstile"))) == ("anticaptcha", 2125, 2000)
    for bad in (["--profile", "deathbycaptcha"], ["--price", "hcaptcha=1.0005"], ["--price", "nope=1"]):
        with pytest.raises(ValueError):
            config_from_args(parser.parse_args(bad))
