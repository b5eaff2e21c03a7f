"""protocols.v1 both ways: every reply the server side writes (the simulator's and the gateway's) reads back in the
client (``captchaai.parse_reply`` and ``protocols.v1_client``) to the value it was written from, in both
formats (``json=1`` and plain text)."""

from __future__ import annotations

import pytest
from aiohttp import web

from captcha_worker import codes
from captcha_worker.captchaai import ApiError, parse_reply
from captcha_worker.codes import Code, Origin
from captcha_worker.methods import Answer
from captcha_worker.protocols import v1, v1_client
from captcha_worker.protocols.v1 import ApiRequest

FORMATS = {"json": ApiRequest({"json": "1"}, {}), "plain": ApiRequest({}, {})}
#: every code a server answers as an error: CaptchaAI's own, and the wire codes of this package's results
SERVER_CODES = sorted({c.value for c in Code if c.row.origin is Origin.API and c.error_class is not None}
                      | {codes.wire_code(c) for c in Code if c.row.origin is Origin.RESULT})
UA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"
#: one answer per shape (methods.AnswerShape): text, token, token + user agent, GeeTest's JSON object, grid cells
ANSWERS = [Answer("w4ter"), Answer("0.AbC-d_e.f" * 40), Answer("0.tok-en", UA),
           Answer('{"captcha_id":"c","lot_number":"l","pass_token":"p","gen_time":"1","captcha_output":"o"}'),
           Answer("[1,4,7]"), Answer("a|b c")]


def _read(response: web.Response, endpoint: str = "test") -> v1_client.Reply:
    assert isinstance(response.body, bytes)
    return parse_reply(response.status, response.body, endpoint)


@pytest.fixture(params=sorted(FORMATS))
def req(request: pytest.FixtureRequest) -> ApiRequest:
    return FORMATS[request.param]


def test_the_server_codes_are_the_errors_a_server_answers() -> None:
    assert "ERROR_CAPTCHA_UNSOLVABLE" in SERVER_CODES and "IP_BANNED" in SERVER_CODES
    assert "MAX_USER_TURN" in SERVER_CODES and "ERROR_BAD_PARAMETERS" in SERVER_CODES
    assert not {"OK", "CAPCHA_NOT_READY", "OK_REPORT_RECORDED", "NON_JSON", "INVALID_TASK"} & set(SERVER_CODES)


@pytest.mark.parametrize("value", ["7345", 73654245978, "1"])
def test_ok_reads_back_as_its_value(req: ApiRequest, value: str | int) -> None:
    reply = _read(v1.ok(req, value))
    assert reply.request == str(value) and not reply.not_ready


@pytest.mark.parametrize("code", SERVER_CODES)
def test_an_error_reads_back_as_its_code_and_class(req: ApiRequest, code: str) -> None:
    with pytest.raises(ApiError) as info:
        _read(v1.error(req, code))
    assert info.value.code == code and info.value.error_class is codes.classify(code)


def test_not_ready_reads_back_as_no_answer_yet(req: ApiRequest) -> None:
    reply = _read(v1.error(req, Code.CAPCHA_NOT_READY))
    assert reply.not_ready and v1_client.answer_of(reply) is None
    assert v1_client.answer_of(reply, with_user_agent=True) is None


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.request[:12])
def test_an_answer_reads_back_as_the_same_answer(req: ApiRequest, answer: Answer) -> None:
    """The kind says whether a plain answer carries a user agent (``captchaai.CaptchaAI.get``'s
    `with_user_agent`); a JSON answer says so itself."""
    reply = _read(v1.answer(req, answer))
    assert v1_client.answer_of(reply, with_user_agent=answer.user_agent is not None) == answer
    if req.as_json:
        assert v1_client.answer_of(reply) == answer


@pytest.mark.parametrize(("total", "working"), [(10, 3), (0, 0), (250, 250)])
def test_threads_read_back_as_the_same_counts(req: ApiRequest, total: int, working: int) -> None:
    assert v1_client.threads_of(_read(v1.threads(req, total, working))) == (total, working)


@pytest.mark.parametrize("value", [0.0, 12.5, 9.8265, 1e-05, 1e16, -3.25])
def test_a_balance_reads_back_as_the_same_float(req: ApiRequest, value: float) -> None:
    assert v1_client.balance_of(_read(v1.balance(req, value), "res_getbalance")) == value


def test_a_report_reads_back_as_recorded(req: ApiRequest) -> None:
    assert _read(v1.report(req)).request == Code.OK_REPORT_RECORDED


@pytest.mark.parametrize("body", [b"nan", b"inf", b"12,5", b"<html>1</html>", b"OK_", b"1e5"])
def test_what_no_server_writes_is_no_balance(body: bytes) -> None:
    decoded = v1_client.read_reply(body)
    assert isinstance(decoded, v1_client.Refusal) or v1_client.balance_of(decoded) is None
