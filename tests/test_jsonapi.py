"""The JSON API's protocol module, no sockets: task types -> the queue's method and params (the same task in.php
would queue), proxy fields, wrong field types, unsupported types, solution shapes, the numbered errors table."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from captcha_worker import methods
from captcha_worker.codes import Code
from captcha_worker.methods import Answer
from captcha_worker.protocols import jsonapi_tasks
from captcha_worker.protocols.jsonapi_errors import JsonError, from_v1
from captcha_worker.protocols.jsonapi_tasks import Mapped, Refused, map_task, solution
from captcha_worker.task import make_task
from tests.helpers import ROOT

SITEKEY = "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"
PAGE = "https://example.com/login"
PROXY = {"proxyType": "http", "proxyAddress": "10.0.0.1", "proxyPort": 3128, "proxyLogin": "u",
         "proxyPassword": "p"}

# (task, the kind in.php would take it for, params that must be there)
CASES: list[tuple[dict[str, Any], str, dict[str, str]]] = [
    ({"type": "ImageToTextTask", "body": "aGVsbG8=", "numeric": 1, "case": True, "minLength": 3, "maxLength": 8},
     "image", {"body": "aGVsbG8=", "numeric": "1", "regsense": "1", "min_len": "3", "max_len": "8"}),
    ({"type": "ImageToTextTask", "body": "data:image/png;base64,aGVsbG8="}, "image", {"body": "aGVsbG8="}),
    ({"type": "GridTask", "body": "aGVsbG8=", "comment": "cars", "rows": 4, "columns": 4}, "grid",
     {"grid_size": "4x4", "instructions": "cars"}),
    ({"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, "isInvisible": True},
     "recaptcha_v2", {"googlekey": SITEKEY, "pageurl": PAGE, "invisible": "1"}),
    ({"type": "ReCaptchaV2TaskProxyLess", "websiteURL": PAGE, "websiteKey": SITEKEY}, "recaptcha_v2",
     {"googlekey": SITEKEY}),  # CapSolver's spelling
    ({"type": "NoCaptchaTaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY}, "recaptcha_v2", {}),
    ({"type": "RecaptchaV2Task", "websiteURL": PAGE, "websiteKey": SITEKEY, **PROXY}, "recaptcha_v2",
     {"proxy": "u:p@10.0.0.1:3128", "proxytype": "HTTP"}),
    ({"type": "RecaptchaV2EnterpriseTaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY,
      "enterprisePayload": {"s": "SVAL"}}, "recaptcha_v2_enterprise", {"enterprise": "1", "data-s": "SVAL"}),
    ({"type": "RecaptchaV3TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, "minScore": 0.7,
      "pageAction": "login"}, "recaptcha_v3", {"version": "v3", "action": "login", "min_score": "0.7"}),
    ({"type": "RecaptchaV3TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY}, "recaptcha_v3",
     {"action": "verify"}),  # CapMonster's default pageAction
    ({"type": "RecaptchaV3TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, "isEnterprise": True},
     "recaptcha_v3_enterprise", {"enterprise": "1"}),
    ({"type": "RecaptchaV3EnterpriseTask", "websiteURL": PAGE, "websiteKey": SITEKEY}, "recaptcha_v3_enterprise",
     {}),
    ({"type": "TurnstileTaskProxyless", "websiteURL": PAGE, "websiteKey": "0x4AAA", "action": "a", "cData": "c"},
     "turnstile", {"sitekey": "0x4AAA", "action": "a", "data": "c"}),
    ({"type": "AntiTurnstileTaskProxyLess", "websiteURL": PAGE, "websiteKey": "0x4AAA",
      "metadata": {"action": "m", "cdata": "d"}}, "turnstile", {"action": "m", "data": "d"}),
    ({"type": "TurnstileTask", "websiteURL": PAGE, "websiteKey": "0x4AAA", "cloudflareTaskType": "cf_clearance",
      **PROXY}, "cloudflare_challenge", {"proxy": "u:p@10.0.0.1:3128"}),
    ({"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "gt": "f" * 32, "challenge": "c" * 32}, "geetest",
     {"gt": "f" * 32, "challenge": "c" * 32}),
    ({"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "version": 4, "initParameters": {"captcha_id": "cid"}},
     "geetest_v4", {"gt": "cid", "version": "4"}),
    ({"type": "GeeTestTask", "websiteURL": PAGE, "version": 4, "gt": "cid", **PROXY}, "geetest_v4", {"gt": "cid"}),
    ({"type": "FriendlyCaptchaTaskProxyless", "websiteURL": PAGE, "websiteKey": "FC"}, "friendly_captcha",
     {"sitekey": "FC"}),
    ({"type": "CaptchaFoxTask", "websiteURL": PAGE, "websiteKey": "sk", **PROXY}, "captchafox", {"sitekey": "sk"}),
    ({"type": "LeminTaskProxyless", "websiteURL": PAGE, "captchaId": "CROPPED_1", "divId": "d"}, "lemin",
     {"captcha_id": "CROPPED_1", "div_id": "d"}),
]


@pytest.mark.parametrize(("task", "kind", "params"), CASES, ids=[f"{c[0]['type']}-{i}" for i, c in enumerate(CASES)])
def test_a_task_type_becomes_the_task_in_php_would_queue(task: dict[str, Any], kind: str,
                                                        params: dict[str, str]) -> None:
    mapped = map_task(task)
    assert isinstance(mapped, Mapped), mapped
    assert {k: mapped.params.get(k) for k in params} == params
    found = methods.kind_of(mapped.method, mapped.params)
    assert found is not None and found.name == kind
    made = make_task({"id": "t", "method": mapped.method, "params": mapped.params})
    assert not hasattr(made, "code"), made  # the workers' validation takes it as it is


def test_every_kind_but_bls_has_a_task_type() -> None:
    assert {c[1] for c in CASES} == set(methods.KIND_NAMES) - {"bls"}


def test_proxyless_types_ignore_proxy_fields_and_proxy_fields_are_checked() -> None:
    plain = map_task({"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, **PROXY})
    assert isinstance(plain, Mapped) and "proxy" not in plain.params
    base = {"type": "RecaptchaV2Task", "websiteURL": PAGE, "websiteKey": SITEKEY}
    for bad in ({"proxyType": "ftp", "proxyAddress": "1.2.3.4", "proxyPort": 1},
                {"proxyType": "http", "proxyAddress": "", "proxyPort": 1},
                {"proxyType": "http", "proxyAddress": "1.2.3.4", "proxyPort": 70000},
                {"proxyType": "http", "proxyAddress": "1.2.3.4", "proxyPort": "x"},
                {"proxyType": "http", "proxyAddress": "a@b", "proxyPort": 1},
                {"proxyType": "http", "proxyAddress": "1.2.3.4", "proxyPort": 1, "proxyLogin": "a:b"},
                {"proxyAddress": "1.2.3.4"}):
        refused = map_task({**base, **bad})
        assert isinstance(refused, Refused) and refused.error is JsonError.BAD_PROXY, bad
    v6 = map_task({**base, "proxyType": "socks5", "proxyAddress": "2001:db8::1", "proxyPort": "1080"})
    assert isinstance(v6, Mapped) and v6.params == {**v6.params, "proxy": "[2001:db8::1]:1080",
                                                   "proxytype": "SOCKS5"}


@pytest.mark.parametrize("task", [
    {"type": "RecaptchaV2TaskProxyless", "websiteURL": 5, "websiteKey": SITEKEY},
    {"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": ["x"]},
    {"type": "RecaptchaV2TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, "isInvisible": "maybe"},
    {"type": "RecaptchaV3TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, "minScore": "high"},
    {"type": "RecaptchaV3TaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY, "minScore": True},
    {"type": "ImageToTextTask", "body": {"a": 1}},
    {"type": "ImageToTextTask", "body": "x", "numeric": float("nan")},
    {"type": "GeeTestTaskProxyless", "websiteURL": PAGE, "version": 4, "initParameters": "[1]"},
    {"type": "RecaptchaV2EnterpriseTaskProxyless", "websiteURL": PAGE, "websiteKey": SITEKEY,
     "enterprisePayload": {"s": 1}},
    {"type": "AntiTurnstileTaskProxyLess", "websiteURL": PAGE, "websiteKey": "k", "metadata": {"action": 1}},
    {"type": "RecaptchaV2Task", "websiteURL": PAGE, "websiteKey": SITEKEY, "cookies": [1, 2]},
])
def test_a_field_of_the_wrong_type_is_bad_parameters_naming_it(task: dict[str, Any]) -> None:
    refused = map_task(task)
    assert isinstance(refused, Refused) and refused.error is JsonError.BAD_PARAMETERS, refused
    assert refused.description.startswith("task.")


def test_absent_untyped_unknown_and_unsolved_types() -> None:
    assert map_task(None) == Refused(JsonError.TASK_ABSENT, JsonError.TASK_ABSENT.description)
    assert isinstance(r := map_task([1]), Refused) and r.error is JsonError.BAD_PARAMETERS
    for task in ({}, {"type": 5}, {"type": ""}, {"type": "NoSuchTask"}, {"type": "x" * 10_000}):
        assert isinstance(r := map_task(task), Refused) and r.error is JsonError.TASK_NOT_SUPPORTED, task
        assert len(r.description) < 200
    hc = map_task({"type": "HCaptchaTaskProxyless", "websiteURL": PAGE, "websiteKey": "k"})
    assert isinstance(hc, Refused) and hc.error is JsonError.TASK_NOT_SUPPORTED and "not solved" in hc.description


def test_solutions_use_each_types_field_names() -> None:
    by = methods.by_name
    assert solution(by("image"), Answer("abc")) == {"text": "abc"}
    assert solution(by("grid"), Answer("[1,4,7]")) == {"click": [1, 4, 7]}
    assert solution(by("recaptcha_v2"), Answer("03A")) == {"gRecaptchaResponse": "03A", "token": "03A"}
    assert solution(by("recaptcha_v2_enterprise"), Answer("03A", "UA")) == {
        "gRecaptchaResponse": "03A", "token": "03A", "userAgent": "UA"}
    assert solution(by("turnstile"), Answer("0.x")) == {"token": "0.x"}
    assert solution(by("cloudflare_challenge"), Answer("cf", "UA"))["cf_clearance"] == "cf"
    gt = {"challenge": "c", "validate": "v", "seccode": "s"}
    assert solution(by("geetest"), Answer(json.dumps(gt))) == gt
    assert solution(by("geetest"), Answer("not json")) == {"answer": "not json"}


def test_the_error_table_numbers_each_code_once() -> None:
    ids: dict[str, int] = {}
    for err in JsonError:
        assert ids.setdefault(err.code, err.error_id) == err.error_id, err
        assert err.body() == {"errorId": err.error_id, "errorCode": err.code, "errorDescription": err.description}
    assert (JsonError.KEY_DOES_NOT_EXIST.error_id, JsonError.NO_SLOT_AVAILABLE.error_id,
            JsonError.ZERO_BALANCE.error_id, JsonError.CAPTCHA_UNSOLVABLE.error_id,
            JsonError.NO_SUCH_CAPCHA_ID.error_id, JsonError.TASK_ABSENT.error_id,
            JsonError.TASK_NOT_SUPPORTED.error_id) == (1, 2, 10, 12, 16, 22, 23)


def test_captchaai_codes_map_by_meaning() -> None:
    assert from_v1(Code.ERROR_ZERO_BALANCE) is JsonError.NO_SLOT_AVAILABLE  # CaptchaAI: no free thread, not money
    assert from_v1(Code.ERROR_WRONG_USER_KEY) is JsonError.KEY_DOES_NOT_EXIST
    assert from_v1(Code.ERROR_PAGEURL) is JsonError.PAGEURL
    assert from_v1(Code.ERROR_GOOGLEKEY) is JsonError.RECAPTCHA_INVALID_SITEKEY
    assert from_v1(Code.ERROR_WRONG_CAPTCHA_ID) is JsonError.NO_SUCH_CAPCHA_ID
    assert from_v1("ERROR_SOMETHING_NEW") is JsonError.CAPTCHA_UNSOLVABLE
    assert all(from_v1(c) is not JsonError.ZERO_BALANCE for c in Code)  # nothing here means "no money"


def test_type_names_match_without_case() -> None:
    assert jsonapi_tasks.task_type("recaptchav2taskproxyless") is jsonapi_tasks.task_type("RecaptchaV2TaskProxyless")


def test_the_gateway_doc_lists_every_task_type() -> None:
    doc = (ROOT / "docs" / "gateway.md").read_text()
    table = doc.split("| kind | task types | solution |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([A-Za-z0-9]+Task(?:Proxyless)?)`", table))
    assert listed == {t.name for t in jsonapi_tasks.TASK_TYPES}


@pytest.mark.parametrize(("task", "kind", "params"), CASES, ids=[f"{c[0]['type']}-{i}" for i, c in enumerate(CASES)])
def test_a_queued_task_becomes_a_task_object_that_maps_back_to_it(task: dict[str, Any], kind: str,
                                                                   params: dict[str, str]) -> None:
    """The createTask client's direction: to_task(method, params) is a type the providers take, and map_task of it
    is the very task again (every field that has a JSON-API name survives both ways)."""
    mapped = map_task(task)
    assert isinstance(mapped, Mapped)
    sent = jsonapi_tasks.to_task(mapped.method, mapped.params)
    assert sent is not None
    again = map_task(sent)
    assert isinstance(again, Mapped), (sent, again)
    assert (again.method, again.params) == (mapped.method, mapped.params), sent
    assert "proxy" not in mapped.params or not str(sent["type"]).endswith("Proxyless")


def test_to_task_for_kinds_without_a_type_and_foreign_kinds() -> None:
    assert jsonapi_tasks.to_task("bls", {"instructions": "x"}) is None
    assert jsonapi_tasks.to_task("nosuch", {}) is None
    hc = jsonapi_tasks.to_task("hcaptcha", {"sitekey": "k", "pageurl": PAGE, "proxy": "10.0.0.1:80",
                                            "proxytype": "SOCKS5"})
    assert hc == {"type": "HCaptchaTask", "websiteURL": PAGE, "websiteKey": "k", "proxyType": "socks5",
                  "proxyAddress": "10.0.0.1", "proxyPort": 80}
    back = map_task(hc, foreign=True)
    assert isinstance(back, Mapped) and back.method == "hcaptcha" and back.params["proxy"] == "10.0.0.1:80"
    assert isinstance(map_task(hc), Refused), "the gateway still refuses it: CaptchaAI does not solve hCaptcha"


@pytest.mark.parametrize("kind", [*methods.KIND_NAMES, "hcaptcha"])
def test_answer_of_reads_back_every_solution(kind: str) -> None:
    k = methods.foreign_kind(kind) or methods.by_name(kind)
    answer = {"image": Answer("abc"), "grid": Answer("[1, 4, 7]"), "bls": Answer("[2, 3]"),
              "geetest": Answer(json.dumps({"challenge": "c", "validate": "v", "seccode": "s"})),
              "geetest_v4": Answer(json.dumps({"lot_number": "l", "pass_token": "p", "gen_time": "1"}))
              }.get(kind, Answer("0.token", "UA" if k.shape is methods.AnswerShape.TOKEN_WITH_UA else None))
    assert jsonapi_tasks.answer_of(k, solution(k, answer)) == answer
    assert jsonapi_tasks.answer_of(k, {"nothing": "here"}) is None
    assert jsonapi_tasks.answer_of(k, "not an object") is None


#: CapSolver's type names as json-api.md §2 lists them (docs.capsolver.com)
CAPSOLVER_TYPES = {"ImageToTextTask", "ReCaptchaV2Task", "ReCaptchaV2TaskProxyLess", "ReCaptchaV2EnterpriseTask",
                   "ReCaptchaV2EnterpriseTaskProxyLess", "ReCaptchaV3Task", "ReCaptchaV3TaskProxyLess",
                   "ReCaptchaV3EnterpriseTask", "ReCaptchaV3EnterpriseTaskProxyLess", "AntiTurnstileTaskProxyLess",
                   "GeeTestTask", "GeeTestTaskProxyLess", "HCaptchaTask", "HCaptchaTaskProxyLess"}
#: what CapSolver's types carry no field for (the image's options, Turnstile's proxy, user agent and page data)
CAPSOLVER_DROPS = {"image": {"phrase", "regsense", "calc", "numeric", "min_len", "max_len", "textinstructions"},
                   "turnstile": {"proxy", "proxytype", "userAgent", "pagedata"}}


@pytest.mark.parametrize(("task", "kind", "params"), CASES, ids=[f"{c[0]['type']}-{i}" for i, c in enumerate(CASES)])
def test_capsolvers_spelling_maps_back_to_the_task(task: dict[str, Any], kind: str, params: dict[str, str]) -> None:
    """dialect "capsolver": a type of CapSolver's docs, and map_task of it is the task again, less the fields
    CapSolver's type has none for; a kind its docs name no type for has none (None)."""
    mapped = map_task(task)
    assert isinstance(mapped, Mapped)
    kind_name = (methods.kind_of(mapped.method, mapped.params) or methods.by_name(kind)).name
    sent = jsonapi_tasks.to_task(mapped.method, mapped.params, "capsolver")
    assert (sent is not None) is jsonapi_tasks.has_type("capsolver", kind_name) \
        is (kind_name in jsonapi_tasks.CAPSOLVER_KINDS)
    if sent is None:
        return
    assert sent["type"] in CAPSOLVER_TYPES, sent
    again = map_task(sent)
    assert isinstance(again, Mapped), (sent, again)
    drops = CAPSOLVER_DROPS.get(kind_name, set())
    assert again.method == mapped.method
    assert again.params == {k: v for k, v in mapped.params.items() if k not in drops}, sent


def test_capsolver_turnstile_metadata_and_hcaptcha_proxy() -> None:
    ts = jsonapi_tasks.to_task("turnstile", {"sitekey": "0x4", "pageurl": PAGE, "action": "login", "data": "cd",
                                             "proxy": "10.0.0.1:80"}, "capsolver")
    assert ts == {"type": "AntiTurnstileTaskProxyLess", "websiteURL": PAGE, "websiteKey": "0x4",
                  "metadata": {"action": "login", "cdata": "cd"}}
    hc = jsonapi_tasks.to_task("hcaptcha", {"sitekey": "k", "pageurl": PAGE}, "capsolver")
    assert hc == {"type": "HCaptchaTaskProxyLess", "websiteURL": PAGE, "websiteKey": "k"}
    assert jsonapi_tasks.to_task("grid", {"body": "aGVsbG8=", "grid_size": "3x3"}, "capsolver") is None
    assert not jsonapi_tasks.has_type("capsolver", "grid") and jsonapi_tasks.has_type("standard", "grid")
