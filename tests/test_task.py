"""Task validation: every malformed payload gets a reason, nothing raises."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from captcha_worker import methods
from captcha_worker.log import Redactor
from captcha_worker.task import (
    EXCERPT_BYTES,
    VIEW_MAX,
    ByteClass,
    Fingerprint,
    Invalid,
    Result,
    Status,
    Task,
    Timings,
    fingerprint,
    nesting_depth,
    parse_task,
    payload_view,
    raw_excerpt,
)

MAX = 10_000


def payload(**overrides: object) -> str:
    data: dict[str, object] = {"id": "t1", "method": "turnstile",
                               "params": {"sitekey": "0x4AAA", "pageurl": "https://example.com"}}
    data.update(overrides)
    return json.dumps({k: v for k, v in data.items() if v is not None})


def test_seed_guide_payload_is_a_task() -> None:
    task = parse_task('{"id": "a1b2c3d4", "method": "userrecaptcha", "params": {"googlekey": "6Le", '
                      '"pageurl": "https://x"}, "submitted_at": 1764400000.5, "priority": "high"}', max_bytes=MAX)
    assert isinstance(task, Task)
    assert task.kind.name == "recaptcha_v2" and task.submitted_at == 1764400000.5 and task.reply_to is None


@pytest.mark.parametrize(("raw", "code", "fragment"), [
    ("{not json", "INVALID_JSON", "not valid JSON"),
    ("[1, 2]", "INVALID_JSON", "JSON object"),
    (payload(id=None), "INVALID_TASK", "id must be"),
    (payload(id="has space"), "INVALID_TASK", "id must be"),
    (payload(method="hcaptcha"), "UNSUPPORTED_METHOD", "hCaptcha is not solved by CaptchaAI"),
    (payload(method="funcaptcha"), "UNSUPPORTED_METHOD", "FunCaptcha"),
    (payload(method="nope"), "UNKNOWN_METHOD", "unknown method 'nope'"),
    (payload(params={"sitekey": {"nested": 1}, "pageurl": "u"}), "INVALID_TASK", "flat map"),
    (payload(params=["a"]), "INVALID_TASK", "JSON object"),
    (payload(params={"sitekey": "s"}), "ERROR_PAGEURL", "missing required param 'pageurl'"),
    (payload(method="userrecaptcha", params={"pageurl": "u"}), "ERROR_GOOGLEKEY", "googlekey"),
    (payload(params={"sitekey": "s", "pageurl": "u", "key": "x"}), "INVALID_TASK", "must not set key"),
    (payload(deadline="soon"), "INVALID_TASK", "deadline must be"),
    (payload(reply_to="a b"), "INVALID_TASK", "reply_to"),
])
def test_malformed_payloads_get_a_reason(raw: str, code: str, fragment: str) -> None:
    result = parse_task(raw, max_bytes=MAX)
    assert isinstance(result, Invalid)
    assert result.code == code and fragment in result.reason


def test_size_limit() -> None:
    big = payload(params={"sitekey": "s" * 2000, "pageurl": "u"})
    result = parse_task(big, max_bytes=1000)
    assert isinstance(result, Invalid) and result.code == "TASK_TOO_LARGE" and "over the limit of 1000" in result.reason


def test_invalid_keeps_the_id_and_reply_to_so_the_producer_hears_about_it() -> None:
    result = parse_task(payload(method="nope", reply_to="p-1"), max_bytes=MAX)
    assert isinstance(result, Invalid) and (result.task_id, result.reply_to) == ("t1", "p-1")


@pytest.mark.parametrize(("method", "params", "kind"), [
    ("userrecaptcha", {"googlekey": "k", "pageurl": "u"}, "recaptcha_v2"),
    ("userrecaptcha", {"googlekey": "k", "pageurl": "u", "invisible": "1"}, "recaptcha_v2"),
    ("userrecaptcha", {"googlekey": "k", "pageurl": "u", "enterprise": "1"}, "recaptcha_v2_enterprise"),
    ("userrecaptcha", {"googlekey": "k", "pageurl": "u", "version": "v3", "action": "a"}, "recaptcha_v3"),
    ("geetest", {"gt": "g", "challenge": "c", "pageurl": "u"}, "geetest"),
    ("geetest", {"gt": "g", "pageurl": "u", "version": "4"}, "geetest_v4"),
    ("base64", {"body": "aGk="}, "image"),
    ("base64", {"body": "aGk=", "instructions": "cars", "grid_size": "3x3"}, "grid"),
    ("cloudflare_challenge", {"pageurl": "u", "proxy": "u:p@1.2.3.4:8080", "proxytype": "HTTP"},
     "cloudflare_challenge"),
    ("lemin", {"captcha_id": "c", "div_id": "d", "pageurl": "u"}, "lemin"),
])
def test_kinds_are_recognised(method: str, params: dict[str, str], kind: str) -> None:
    task = parse_task(json.dumps({"id": "x", "method": method, "params": params}), max_bytes=MAX)
    assert isinstance(task, Task) and task.kind.name == kind


def test_every_kind_has_a_missing_param_error() -> None:
    for kind in methods.KINDS:
        assert methods.missing_param(kind, {}) is not None
        assert all(p.missing_error.startswith("ERROR_") for p in kind.required)


def test_numbers_and_booleans_become_strings() -> None:
    task = parse_task(payload(params={"sitekey": "s", "pageurl": "u", "min_score": 0.3, "invisible": True}),
                      max_bytes=MAX)
    assert isinstance(task, Task) and task.params["min_score"] == "0.3" and task.params["invisible"] == "1"


def test_body_round_trip() -> None:
    task = parse_task(payload(deadline=1.5e9, reply_to="p-1"), max_bytes=MAX)
    assert isinstance(task, Task)
    again = parse_task(task.body(), max_bytes=MAX)
    assert again == task


def test_result_round_trip() -> None:
    r = Result("a", Status.SOLVED, kind="turnstile", solution="tok", user_agent="UA", attempts=2, api_calls=5,
               timings=Timings(submitted_at=1.0, claimed_at=2.0, started_at=2.5, solved_at=4.0, finished_at=4.1),
               token_lifetime_s=300.0)
    assert Result.from_json(r.to_json()) == r
    assert r.timings.queued == 1.0 and r.timings.solving == 1.5 and r.timings.total == pytest.approx(3.1)


json_values = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(st.sampled_from(["id", "method", "params", "deadline", "reply_to", "submitted_at", "x"]),
                       json_values))
def test_any_json_object_validates_without_raising(data: dict[str, object]) -> None:
    raw = json.dumps(data)
    assert isinstance(parse_task(raw, max_bytes=MAX), Task | Invalid)


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_validate_without_raising(raw: bytes) -> None:
    assert isinstance(parse_task(raw, max_bytes=MAX), Task | Invalid)


# -- hostile payloads: limits before parsing, a decode that cannot raise ------------------------------------
@pytest.mark.parametrize(("raw", "fragment"), [
    (b"\xff\xfe{}", "not valid UTF-8 (byte 0xff at offset 0)"),
    (b'{"id": "a\xc3"}', "not valid UTF-8"),
    ("[" * 100_000, "nests deeper than 32 levels"),
    ('{"a": ' * 33 + "1" + "}" * 33, "nests deeper than 32 levels"),
    ("", "not valid JSON"),
    ("\x00", "not valid JSON"),
])
def test_hostile_payloads_are_invalid_json_with_a_reason(raw: bytes | str, fragment: str) -> None:
    result = parse_task(raw, max_bytes=1_000_000)
    assert isinstance(result, Invalid) and result.code == "INVALID_JSON" and fragment in result.reason


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    deep_looking = payload(params={"sitekey": "[" * 100, "pageurl": '{"[[[[\\"' * 20})
    assert isinstance(parse_task(deep_looking, max_bytes=MAX), Task)
    assert nesting_depth('["]]]]", [[1]]]') == 3


def test_json_with_leading_whitespace_is_a_task() -> None:
    assert isinstance(parse_task(" \t\n" + payload(), max_bytes=MAX), Task)


def test_user_supplied_names_in_reasons_are_bounded() -> None:
    result = parse_task(payload(method="m" * 10_000), max_bytes=100_000)
    assert isinstance(result, Invalid) and result.code == "UNKNOWN_METHOD" and len(result.reason) < 400


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_give_a_bounded_view_without_raising(raw: bytes) -> None:
    view = payload_view(raw, Redactor(), max_bytes=MAX)
    assert len(view.text) <= VIEW_MAX
    if view.fingerprint is not None:  # not a JSON object: only the fingerprint is kept, never the bytes
        assert view.fingerprint == fingerprint(raw) and view.text == view.fingerprint.text()
        assert Fingerprint.from_json(json.loads(json.dumps(view.fingerprint.to_json()))) == view.fingerprint


def test_views_mask_secret_params_and_credentials() -> None:
    raw = payload(params={"sitekey": "s", "pageurl": "https://bob:pw1234@example.com/x",
                          "proxy": "u:s3cr3tpw@1.2.3.4:80", "cookies": "session=abcdef123", "body": "A" * 5000})
    view = payload_view(raw, Redactor(["sekrit-api-key"]), max_bytes=MAX)
    for secret in ("pw1234", "s3cr3tpw", "abcdef123"):
        assert secret not in view.text
    assert "***@1.2.3.4:80" in view.text and "(5000 characters)" in view.text
    assert view.fingerprint is None and view.excerpt is None, "a JSON object is redacted by meaning"


@pytest.mark.parametrize("raw", [
    b"Cookie: sid=PLANTED-c00kie-v4lue; theme=dark\r\n",  # not JSON: no name to redact by
    b'["a JSON value, not an object", "PLANTED-c00kie-v4lue"]',
    b'"PLANTED-c00kie-v4lue"',
    b"\xff\xfe PLANTED-c00kie-v4lue \x00",  # not UTF-8
    b'{"id": "x", "params": {"token": "PLANTED-c00kie-v4lue"}' + b" " * MAX,  # an object, but over the limit
])
def test_a_payload_that_is_not_a_json_object_keeps_only_its_fingerprint(raw: bytes) -> None:
    view = payload_view(raw, Redactor(), max_bytes=MAX)
    assert view.fingerprint is not None and "PLANTED" not in view.text
    assert view.text == f"({len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}, bytes seen: " \
                        f"{', '.join(view.fingerprint.classes)})"
    assert view.excerpt is not None and "PLANTED-c00kie-v4lue" in view.excerpt, \
        "the excerpt (kept only in a debugging window) has the bytes: a cookie of no known shape stays"


def test_the_fingerprint_names_the_byte_classes_seen() -> None:
    assert fingerprint(b"").classes == ()
    assert fingerprint(b"ab c").classes == (ByteClass.PRINTABLE,)
    assert fingerprint(b"a\tb\n").classes == (ByteClass.PRINTABLE, ByteClass.WHITESPACE)
    assert fingerprint(b"\x00\x7f").classes == (ByteClass.CONTROL,)
    assert fingerprint("h\u00e9".encode()).classes == (ByteClass.PRINTABLE, ByteClass.UTF8)
    assert fingerprint(b"\xe9\r").classes == (ByteClass.WHITESPACE, ByteClass.NOT_UTF8)
    assert fingerprint("h\u00e9") == fingerprint("h\u00e9".encode()), "str and its UTF-8 bytes are one payload"
    assert fingerprint(b"x" * 10).size == 10


def test_an_excerpt_masks_what_has_a_known_shape_and_is_bounded() -> None:
    garbage = b"\xff proxy=u:s3cr3tpw@10.0.0.1 sekrit-api-key " + b"x" * 10_000
    excerpt = raw_excerpt(garbage, Redactor(["sekrit-api-key"]))
    assert "s3cr3tpw" not in excerpt and "sekrit-api-key" not in excerpt and "\\xff" in excerpt
    assert excerpt.endswith(f"... ({len(garbage)} bytes)") and len(excerpt) < EXCERPT_BYTES + 40


def test_a_foreign_kind_is_accepted_only_where_a_provider_takes_it() -> None:
    """hcaptcha (methods.FOREIGN_KINDS): UNSUPPORTED_METHOD as always, unless `foreign` names it (the workers' and
    producers' PROVIDERS kinds); then its own params are required, and funcaptcha stays unsupported."""
    raw = payload(method="hcaptcha")
    plain = parse_task(raw, max_bytes=MAX)
    assert isinstance(plain, Invalid) and plain.code == "UNSUPPORTED_METHOD"
    task = parse_task(raw, max_bytes=MAX, foreign={"hcaptcha"})
    assert not isinstance(task, Invalid) and task.kind.name == "hcaptcha" and not task.kind.captchaai
    missing = parse_task(payload(method="hcaptcha", params={"sitekey": "s"}), max_bytes=MAX, foreign={"hcaptcha"})
    assert isinstance(missing, Invalid) and missing.code == "ERROR_PAGEURL"
    other = parse_task(payload(method="funcaptcha"), max_bytes=MAX, foreign={"hcaptcha"})
    assert isinstance(other, Invalid) and other.code == "UNSUPPORTED_METHOD"
    assert all(k.captchaai for k in methods.KINDS) and not methods.foreign_kind("turnstile")
