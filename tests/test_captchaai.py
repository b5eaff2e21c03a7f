"""API client unit tests (aioresponses): every response shape and error class."""

from __future__ import annotations

import random
import re
import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qs

import aiohttp
import pytest
from aioresponses import aioresponses

from captcha_worker import methods
from captcha_worker.captchaai import (
    Answer,
    CapacityError,
    CaptchaAI,
    ErrorClass,
    FatalApiError,
    MaybeCharged,
    Resume,
    RetryPolicy,
    SolveStats,
    SolveTimeout,
    TaskFailed,
    TransientError,
    classify,
    parse_reply,
)
from captcha_worker.config import Secret
from captcha_worker.polling import LatencyModel, PollSchedule
from captcha_worker.simulator import SimConfig
from tests.helpers import KEY

BASE = "http://api.test"
IN = re.compile(r"^http://api\.test/in\.php.*$")
RES = re.compile(r"^http://api\.test/res\.php.*$")
FAST = RetryPolicy(transient_attempts=3, transient_initial_s=0.001, transient_max_s=0.002,
                   capacity_initial_s=0.001, capacity_max_s=0.002)
TURNSTILE = methods.by_name("turnstile")


@pytest.fixture
async def api() -> AsyncIterator[CaptchaAI]:
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000) as client:
        yield client


@pytest.fixture
def mock() -> aioresponses:
    with aioresponses() as m:
        yield m


@pytest.mark.parametrize(("code", "cls"), [
    ("ERROR_WRONG_USER_KEY", ErrorClass.FATAL), ("ERROR_KEY_DOES_NOT_EXIST", ErrorClass.FATAL),
    ("IP_BANNED", ErrorClass.FATAL), ("ERROR_ZERO_BALANCE", ErrorClass.CAPACITY),
    ("ERROR_NO_SLOT_AVAILABLE", ErrorClass.CAPACITY), ("HTTP_429", ErrorClass.CAPACITY),
    ("ERROR_SERVER_ERROR", ErrorClass.TRANSIENT), ("HTTP_5XX", ErrorClass.TRANSIENT),
    ("NON_JSON", ErrorClass.TRANSIENT), ("TIMEOUT", ErrorClass.TRANSIENT),
    ("ERROR_PROXY_CONNECTION_FAILED", ErrorClass.TRANSIENT), ("ERROR_CAPTCHA_UNSOLVABLE", ErrorClass.TASK),
    ("ERROR_BAD_PARAMETERS", ErrorClass.TASK), ("ERROR_BAD_PROXY", ErrorClass.TASK),
    ("ERROR_TOO_BIG_CAPTCHA_FILESIZE", ErrorClass.TASK), ("ERROR_SOMETHING_NEW", ErrorClass.TASK),
])
def test_error_taxonomy(code: str, cls: ErrorClass) -> None:
    assert classify(code) is cls


@pytest.mark.parametrize(("status", "body", "expected"), [
    (200, b'{"status":1,"request":"123"}', "123"),
    (200, b'{"status":1,"request":73654245978}', "73654245978"),  # userrecaptcha ids are ints
    (200, b"OK|456", "456"),
    (200, b"OK_REPORT_RECORDED", "OK_REPORT_RECORDED"),
    (200, b'{"status":1,"request":"OK","threads":10,"working_threads":3}', "OK"),
])
def test_success_shapes(status: int, body: bytes, expected: str) -> None:
    assert parse_reply(status, body, "in").request == expected


@pytest.mark.parametrize(("status", "body", "exc", "code"), [
    (200, b'{"status":0,"request":"ERROR_WRONG_USER_KEY","error_text":"bad"}', FatalApiError,
     "ERROR_WRONG_USER_KEY"),
    (200, b"ERROR_KEY_DOES_NOT_EXIST", FatalApiError, "ERROR_KEY_DOES_NOT_EXIST"),
    (200, b"IP_BANNED", FatalApiError, "IP_BANNED"),
    (200, b'{"status":0,"request":"ERROR_ZERO_BALANCE"}', CapacityError, "ERROR_ZERO_BALANCE"),
    (200, b"ERROR_NO_SLOT_AVAILABLE", CapacityError, "ERROR_NO_SLOT_AVAILABLE"),
    (429, b"Too Many Requests", CapacityError, "HTTP_429"),
    (502, b"<html><body>502 Bad Gateway</body></html>", TransientError, "HTTP_5XX"),
    (200, b"<html>maintenance</html>", TransientError, "NON_JSON"),
    (200, b"", TransientError, "NON_JSON"),
    (200, b'{"foo": 1}', TransientError, "NON_JSON"),
    (200, b"ERROR_UPLOAD", TaskFailed, "ERROR_UPLOAD"),  # plain text even with json=1 (SDK get_body_or_raise)
    (200, b'{"status":0,"request":"ERROR_CAPTCHA_UNSOLVABLE"}', TaskFailed, "ERROR_CAPTCHA_UNSOLVABLE"),
    (403, b"forbidden", TransientError, "HTTP_4XX"),
])
def test_error_shapes(status: int, body: bytes, exc: type[Exception], code: str) -> None:
    with pytest.raises(exc) as info:
        parse_reply(status, body, "in")
    assert info.value.code == code  # type: ignore[attr-defined]


@pytest.mark.parametrize("endpoint", ["in", "res_get", "res_threadsinfo", "res_reportbad"])
def test_a_bare_number_is_a_balance_only(endpoint: str) -> None:
    """A plain body that is only a number is what a plain getbalance answers (v1.balance); to any other method it
    is no reply (a proxy's or a broken server's body): never a task id, never an answer."""
    with pytest.raises(TransientError) as info:
        parse_reply(200, b"12345", endpoint)
    assert info.value.code == "NON_JSON"
    assert parse_reply(200, b"12.5", "res_getbalance").request == "12.5"


async def test_a_bare_number_to_res_get_is_retried_not_taken_as_the_answer(api: CaptchaAI,
                                                                            mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 1, "request": "42"})
    mock.post(RES, body="0")
    mock.post(RES, payload={"status": 1, "request": "tok"})
    sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(10))
    assert sol.answer.request == "tok"


def test_not_ready_in_both_formats() -> None:
    assert parse_reply(200, b"CAPCHA_NOT_READY", "res_get").extra.get("not_ready")
    assert parse_reply(200, b'{"status":0,"request":"CAPCHA_NOT_READY"}', "res_get").extra.get("not_ready")


async def test_submit_and_poll_to_an_answer(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 1, "request": "42"})
    mock.post(RES, payload={"status": 0, "request": "CAPCHA_NOT_READY"})
    mock.post(RES, payload={"status": 0, "request": "CAPCHA_NOT_READY"})
    mock.post(RES, payload={"status": 1, "request": "token-xyz"})
    stats = SolveStats()
    sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "https://p"},
                          deadline=_in(10), stats=stats)
    assert sol.answer == Answer("token-xyz")
    assert (sol.api_calls, sol.polls) == (4, 3)
    assert sol.solved_at >= sol.started_at


async def test_enterprise_answer_prefers_result_and_keeps_user_agent(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(RES, payload={"status": 1, "request": "tok", "result": "tok", "user_agent": "Mozilla/5.0 X"})
    assert await api.get("1") == Answer("tok", "Mozilla/5.0 X")


async def test_key_travels_in_the_body_never_in_the_url(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 1, "request": "42"})
    await api.submit("turnstile", {"sitekey": "s", "pageurl": "https://p"})
    ((method, url), calls), = mock.requests.items()
    assert method == "POST" and KEY not in str(url)
    body = calls[0].kwargs["data"]
    assert isinstance(body, bytes) and calls[0].kwargs["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    fields = {k: v[0] for k, v in parse_qs(body.decode()).items()}
    assert fields["key"] == KEY and fields["method"] == "turnstile" and fields["json"] == "1"


async def test_transient_errors_are_retried_then_succeed(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, status=502, body="<html>bad gateway</html>")
    mock.post(IN, body="<html>oops</html>")
    mock.post(IN, payload={"status": 1, "request": "7"})
    stats = SolveStats()
    assert await api.submit("turnstile", {"sitekey": "s", "pageurl": "p"}, stats) == "7"
    assert stats.api_calls == 3


async def test_transient_retries_are_bounded(api: CaptchaAI, mock: aioresponses) -> None:
    for _ in range(3):
        mock.post(IN, payload={"status": 0, "request": "ERROR_SERVER_ERROR"})
    with pytest.raises(TransientError):
        await api.submit("turnstile", {"sitekey": "s", "pageurl": "p"})


async def test_connection_errors_and_timeouts_are_transient(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, exception=aiohttp.ClientConnectionError("reset by peer http://api.test/in.php?key=" + KEY))
    mock.post(IN, exception=TimeoutError())
    mock.post(IN, exception=aiohttp.ServerDisconnectedError())
    with pytest.raises(TransientError) as info:
        await api.submit("turnstile", {"sitekey": "s", "pageurl": "p"})
    assert KEY not in str(info.value) and KEY not in repr(info.value.__cause__)


@pytest.mark.parametrize("reply", [
    {"exception": TimeoutError()},
    {"exception": aiohttp.ServerDisconnectedError()},
    {"status": 502, "body": "<html>bad gateway</html>"},
    {"body": "<html>oops</html>"},
])
async def test_a_paid_in_php_that_may_have_been_charged_is_never_resent(mock: aioresponses,
                                                                       reply: dict[str, object]) -> None:
    """A per-solve provider's client (paid=True, overflow's res.php providers): an in.php whose request went out
    without a readable reply may have created a paid task, so it is MaybeCharged at once, one in.php only (the
    plan's client retries it: a second submission costs nothing there)."""
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000, paid=True) as paid:
        mock.post(IN, **reply)
        mock.post(IN, payload={"status": 1, "request": "7"})
        with pytest.raises(MaybeCharged) as err:
            await paid.submit("turnstile", {"sitekey": "s", "pageurl": "p"})
    assert sum(len(c) for (m, u), c in mock.requests.items() if "in.php" in str(u)) == 1
    assert isinstance(err.value, TransientError) and KEY not in str(err.value)


@pytest.mark.parametrize("reply", [{"payload": {"status": 1, "request": "no id!"}}, {"body": "OK|"},
                                   {"payload": {"status": 1, "request": ""}}])
async def test_a_paid_in_php_success_without_a_usable_id_is_maybe_charged(mock: aioresponses,
                                                                          reply: dict[str, object]) -> None:
    """A paid in.php that answered OK without an id the client can poll: the provider may have created (and
    charged) a task, and with no id no on_submit marks it submitted, so overflow would settle it at 0: it is
    MaybeCharged (settled at the price), as createTask's success without a usable taskId, and never resent."""
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000, paid=True) as paid:
        mock.post(IN, **reply)
        mock.post(IN, payload={"status": 1, "request": "7"})
        with pytest.raises(MaybeCharged):
            await paid.submit("turnstile", {"sitekey": "s", "pageurl": "p"})
    assert sum(len(c) for (m, u), c in mock.requests.items() if "in.php" in str(u)) == 1


async def test_a_paid_in_php_refused_or_never_sent_is_retried(mock: aioresponses) -> None:
    conn_key = aiohttp.client_reqrep.ConnectionKey("api.test", 80, False, True, None, None, None)
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000, paid=True) as paid:
        mock.post(IN, exception=aiohttp.ClientConnectorError(conn_key, OSError(111, "refused")))
        mock.post(IN, payload={"status": 0, "request": "ERROR_SERVER_ERROR"})
        mock.post(IN, payload={"status": 1, "request": "7"})
        stats = SolveStats()
        assert await paid.submit("turnstile", {"sitekey": "s", "pageurl": "p"}, stats) == "7"
    assert stats.api_calls == 3


async def test_capacity_errors_retry_the_same_task_not_fail_it(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 0, "request": "ERROR_ZERO_BALANCE"})
    mock.post(IN, status=429)
    mock.post(IN, body="ERROR_NO_SLOT_AVAILABLE")
    mock.post(IN, payload={"status": 1, "request": "9"})
    mock.post(RES, payload={"status": 1, "request": "tok"})
    sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(10))
    assert sol.answer.request == "tok" and sol.api_calls == 5


async def test_capacity_until_the_deadline_is_a_timeout_not_a_failure(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 0, "request": "ERROR_ZERO_BALANCE"}, repeat=True)
    with pytest.raises(SolveTimeout):
        await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(0.05))


async def test_fatal_errors_surface_immediately(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 0, "request": "ERROR_KEY_DOES_NOT_EXIST"})
    with pytest.raises(FatalApiError) as info:
        await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(10))
    assert KEY not in str(info.value)


async def test_unsolvable_is_resubmitted_then_reported(api: CaptchaAI, mock: aioresponses) -> None:
    for _ in range(2):
        mock.post(IN, payload={"status": 1, "request": "1"})
        mock.post(RES, payload={"status": 0, "request": "ERROR_CAPTCHA_UNSOLVABLE"})
    stats = SolveStats()
    with pytest.raises(TaskFailed) as info:
        await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(10),
                        unsolvable_retries=1, stats=stats)
    assert info.value.code == "ERROR_CAPTCHA_UNSOLVABLE" and stats.api_calls == 4


async def test_poll_gives_up_at_the_deadline(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 1, "request": "1"})
    mock.post(RES, payload={"status": 0, "request": "CAPCHA_NOT_READY"}, repeat=True)
    with pytest.raises(SolveTimeout):
        await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(0.2))


async def test_image_post_is_uploaded_as_a_multipart_file(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(IN, payload={"status": 1, "request": "5"})
    await api.submit("post", {"file": "data:image/png;base64,aGVsbG8="})
    (_, calls), = mock.requests.items()
    fields = {f[0]["name"]: f for f in calls[0].kwargs["data"]._fields}
    assert fields["file"][0]["filename"] == "captcha.png" and fields["file"][2] == b"hello"


async def test_threadsinfo_balance_reportbad(api: CaptchaAI, mock: aioresponses) -> None:
    mock.post(RES, payload={"status": 1, "request": "OK", "threads": 10, "working_threads": 3})
    mock.post(RES, payload={"threads": 5, "working_threads": 0})  # no status field: accepted too
    mock.post(RES, payload={"status": 1, "request": "12.5"})
    mock.post(RES, body="OK_REPORT_RECORDED")
    assert (await api.threadsinfo()).threads == 10
    assert (await api.threadsinfo()).working_threads == 0
    assert await api.getbalance() == 12.5
    await api.reportbad("77")
    ((_, _), calls), = mock.requests.items()  # every call went to res.php, in this order
    sent = [{k: v[0] for k, v in parse_qs(c.kwargs["data"].decode()).items()} for c in calls]
    assert [s["action"] for s in sent] == ["threadsinfo", "threadsinfo", "getbalance", "reportbad"]
    assert sent[-1]["id"] == "77" and sent[-1]["key"] == KEY


def test_poll_schedule_starts_from_the_methods_table() -> None:
    turnstile = PollSchedule.for_kind(methods.by_name("turnstile"))  # 12 s ± 3 s
    assert (turnstile.first, turnstile.interval, turnstile.tail_after) == (9.0, 1.5, 19.5)
    recaptcha = PollSchedule.for_kind(methods.by_name("recaptcha_v2"))  # 60 s ± 15 s: interval capped at 2.5 s
    assert (recaptcha.first, recaptcha.interval) == (45.0, 2.5)
    assert 5.0 * 0.95 <= recaptcha.delay(5, elapsed=100.0) <= 5.0 * 1.05, "every 5 s in the tail"
    assert 45 * 0.95 <= recaptcha.delay(0, elapsed=0.0) <= 45 * 1.05, "jitter is symmetric, ±5 %"
    image = PollSchedule.for_kind(methods.by_name("image"))  # 5 s ± 1.5 s: interval at least 1 s
    assert (image.first, image.interval) == (3.5, 1.0)
    fast = PollSchedule.for_kind(methods.by_name("recaptcha_v2"), scale=10)
    assert (fast.first, fast.interval, fast.tail_interval) == (4.5, 0.25, 0.5)


def test_latency_model_follows_what_it_observes() -> None:
    model = LatencyModel(12.0, 3.0)
    for _ in range(200):
        model.observe(20.0 + random.uniform(-1, 1))
    assert 19.5 < model.mean < 20.5 and model.stddev < 1.5
    assert PollSchedule(model.mean, model.stddev).first > 17, "polls move to where answers really arrive"
    model.observe_found(elapsed_s=21.0, previous_poll_s=19.0)  # ready between 19 and 21 s
    assert model.observed == 201


def test_an_answer_found_by_a_poll_counts_as_ready_midway_since_the_poll_before() -> None:
    """The poll that finds an answer only bounds when it became ready: after the previous poll. The model learns
    the midpoint, not the finding poll's time (which would drift the schedule later by half a poll gap)."""
    found, exact = LatencyModel(10.0, 2.0), LatencyModel(10.0, 2.0)
    found.observe_found(elapsed_s=16.0, previous_poll_s=12.0)
    exact.observe(14.0)
    assert (found.mean, found.var) == (exact.mean, exact.var)
    first, exact_first = LatencyModel(10.0, 2.0), LatencyModel(10.0, 2.0)
    first.observe_found(elapsed_s=16.0, previous_poll_s=None)  # no poll before it: half a stddev earlier
    exact_first.observe(15.0)
    assert first.mean == exact_first.mean


async def test_solves_teach_the_schedule(mock: aioresponses) -> None:
    """Answers found at once (here: no real waiting) pull the image estimate (5 s) down, solve after solve."""
    kind = methods.by_name("image")

    async def no_wait(_: float) -> None:
        return None

    async with CaptchaAI(Secret(KEY), BASE, retry=FAST) as api:
        estimates = [api.latency_model(kind).mean]
        for _ in range(5):
            mock.post(IN, payload={"status": 1, "request": "1"})
            mock.post(RES, payload={"status": 1, "request": "abc"})
            await api.solve(kind, "base64", {"body": "aGk="}, deadline=_in(10), sleep=no_wait)
            estimates.append(api.latency_model(kind).mean)
    assert api.latency_model(kind).observed == 5
    assert estimates == sorted(estimates, reverse=True) and estimates[-1] < estimates[0] - 0.5


def _in(seconds: float) -> float:
    return time.time() + seconds


async def test_a_failed_poll_is_followed_soon_by_the_next_and_teaches_the_schedule_nothing(
        mock: aioresponses) -> None:
    """Polls are not retried with backoff: after a failure the next scheduled poll comes sooner; a solve whose
    last gap held a failure is not observed (a slow failed poll would teach a solve time it never took)."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    policy = RetryPolicy(transient_attempts=4, transient_initial_s=0.25, transient_max_s=4.0)
    async with CaptchaAI(Secret(KEY), BASE, retry=policy) as api:
        model = api.latency_model(TURNSTILE)
        mock.post(IN, payload={"status": 1, "request": "42"})
        mock.post(RES, status=502, body="<html>bad gateway</html>")
        mock.post(RES, exception=TimeoutError())
        mock.post(RES, payload={"status": 1, "request": "tok"})
        stats = SolveStats()
        sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(60),
                              stats=stats, sleep=record)
    assert sol.answer.request == "tok" and (stats.polls, stats.api_calls) == (3, 4)
    assert waits[0] == pytest.approx(model.mean - model.stddev, rel=0.06), "the first poll on schedule"
    assert all(0.25 <= w <= 0.5 for w in waits[1:]), f"then soon, not after a backoff: {waits}"
    assert model.observed == 0, "a blurred solve is not a sample"


async def test_failed_polls_in_a_row_end_the_solve_as_transient(mock: aioresponses) -> None:
    async def no_wait(_: float) -> None:
        return None

    async with CaptchaAI(Secret(KEY), BASE, retry=FAST) as api:
        mock.post(IN, payload={"status": 1, "request": "42"})
        for _ in range(FAST.transient_attempts):
            mock.post(RES, status=502, body="<html>bad gateway</html>")
        with pytest.raises(TransientError):
            await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(60),
                            sleep=no_wait)


def test_polls_have_their_own_shorter_timeout() -> None:
    api = CaptchaAI(Secret(KEY), BASE, http_timeout_s=30, poll_timeout_s=5)
    assert (api._timeout.total, api._poll_timeout.total) == (30, 5)
    assert CaptchaAI(Secret(KEY), BASE, http_timeout_s=2, poll_timeout_s=5)._poll_timeout.total == 2


# -- resumable solves (issue 12) -----------------------------------------------------------------------------
async def _no_wait(_: float) -> None:
    return None


async def test_a_resumed_solve_polls_the_recorded_id_and_submits_nothing(mock: aioresponses) -> None:
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000) as api:
        mock.post(RES, payload={"status": 0, "request": "CAPCHA_NOT_READY"})
        mock.post(RES, payload={"status": 1, "request": "tok"})
        stats, told = SolveStats(), []
        sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(60),
                              stats=stats, sleep=_no_wait, resume=Resume("777", _in(30)),
                              on_submit=lambda cid, window: told.append(cid))
    assert sol.answer.request == "tok" and sol.captcha_id == "777" and stats.resumed
    assert told == [] and stats.api_calls == 2, "polls only: in.php is not called"
    posted = [str(url) for (_, url) in mock.requests]
    assert not any("in.php" in u for u in posted)
    assert stats.running_s(time.time()) == 0, "answered: no solve left running"


@pytest.mark.parametrize("reply", [{"status": 0, "request": "ERROR_WRONG_CAPTCHA_ID"},
                                   {"status": 0, "request": "ERROR_CAPTCHA_UNSOLVABLE"}])
async def test_a_resumed_solve_the_api_cannot_answer_is_submitted_again(mock: aioresponses,
                                                                        reply: dict[str, object]) -> None:
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000) as api:
        mock.post(RES, payload=reply)
        mock.post(IN, payload={"status": 1, "request": "888"})
        mock.post(RES, payload={"status": 1, "request": "tok"})
        told: list[tuple[str, float]] = []
        sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(60),
                              sleep=_no_wait, resume=Resume("777", _in(30)), unsolvable_retries=1,
                              on_submit=lambda cid, window: told.append((cid, window)))
    assert sol.captcha_id == "888" and told == [("888", TURNSTILE.solve_timeout_s / 1000)]


async def test_a_resume_past_its_window_submits_at_once(mock: aioresponses) -> None:
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000) as api:
        mock.post(IN, payload={"status": 1, "request": "888"})
        mock.post(RES, payload={"status": 1, "request": "tok"})
        stats = SolveStats()
        sol = await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(60),
                              stats=stats, sleep=_no_wait, resume=Resume("777", time.time() - 1))
    assert sol.captcha_id == "888" and stats.api_calls == 2 and not stats.resumed


async def test_a_solve_that_ends_unanswered_is_left_running_for_its_window(mock: aioresponses) -> None:
    """Failed polls end the attempt, but the API may still be solving: the stats say until when (the worker holds
    the budget unit that long and records the id for the next owner)."""
    async with CaptchaAI(Secret(KEY), BASE, retry=FAST, poll_scale=1000) as api:
        mock.post(IN, payload={"status": 1, "request": "42"})
        for _ in range(FAST.transient_attempts):
            mock.post(RES, status=502, body="<html>bad gateway</html>")
        stats = SolveStats()
        with pytest.raises(TransientError):
            await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(60),
                            stats=stats, sleep=_no_wait)
    assert stats.captcha_id == "42" and 0 < stats.running_s(time.time()) <= TURNSTILE.solve_timeout_s / 1000


def test_polls_are_dense_while_tasks_wait_for_a_thread() -> None:
    normal, dense = PollSchedule(12, 3), PollSchedule(12, 3, dense=True)
    assert (normal.first, normal.interval) == (9, 1.5)
    assert dense.first == 7.5 and dense.interval == pytest.approx(0.6)
    assert PollSchedule(5, 1.5, dense=True).interval == PollSchedule.DENSE_MIN_INTERVAL_S
    assert dense.delay(0, elapsed=10) == 0, "a resumed solve past its first poll looks at once"


async def test_the_poll_schedule_follows_hurry_at_each_poll(mock: aioresponses) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    async with CaptchaAI(Secret(KEY), BASE, retry=FAST) as api:
        mock.post(IN, payload={"status": 1, "request": "42"})
        for _ in range(3):
            mock.post(RES, payload={"status": 0, "request": "CAPCHA_NOT_READY"})
        mock.post(RES, payload={"status": 1, "request": "tok"})
        flags = iter([False, False, True, True])
        await api.solve(TURNSTILE, "turnstile", {"sitekey": "s", "pageurl": "p"}, deadline=_in(600),
                        sleep=record, hurry=lambda: next(flags))
    assert waits[1] == pytest.approx(1.5, rel=0.06) and waits[2] == pytest.approx(0.6, rel=0.06), waits


def test_every_kind_can_be_answered_longer_than_the_simulator_takes() -> None:
    for kind in methods.KINDS:
        assert kind.solve_timeout_s > SimConfig().latency_for(kind).high_s, kind.name
