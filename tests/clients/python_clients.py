"""Runs one real Python CaptchaAI client library against the simulator, every call it offers for a CaptchaAI
kind at once, and prints one JSON line per call.

It runs in the clients' own venv (``.tools/clients-venv``, made by ``scripts/install-tools.sh --only clients``:
the libraries pin dependencies the project's venv must not get), so it imports nothing from this repository.
``compat.py`` starts it with a config file (JSON): ``client``, ``url`` (the simulator, https for 2captcha-python),
``key``, ``image`` and ``proxy``, ``pingback`` (a receiver URL).

A line is ``{"call", "kind", "ok": true, "task_id", "answer", "parsed", "user_agent"}`` for a solve (``answer`` as
the client hands it over; ``parsed``: the client decoded the JSON answer, re-encoded here), ``{"call", "ok": true,
"value"}`` for other calls, ``{"call", "kind", "ok": false, "error"}`` when the call raised or reported a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SITEKEY = "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"
PAGE = "https://example.com/login"
GT, CHALLENGE = "f" * 32, "0123456789abcdef0123456789abcdef"


@dataclass
class Call:
    name: str
    kind: str | None  # None: not a solve (balance, thread counts, reports)
    run: Callable[[], Any] | Callable[[], Awaitable[Any]]
    read: Callable[[Any], dict[str, Any]]  # the client's return value -> the fields of the output line
    is_async: bool = False


def _structured(value: Any) -> tuple[str, bool]:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":")), True
    return str(value), False


# ------------------------------------------------------------------------------------------------------------
# captchaai 1.0.1 (the official SDK)
# ------------------------------------------------------------------------------------------------------------


def _sdk_result(result: Any) -> dict[str, Any]:
    answer, parsed = _structured(result.solution)
    return {"task_id": str(result.task_id), "answer": answer, "parsed": parsed, "user_agent": result.user_agent}


def _sdk_solves(image: str, proxy: str) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(call, kind, what to do with a client) for every solve the SDK offers."""
    px = {"proxy": proxy, "proxytype": "HTTP"}
    return [
        ("normal(image)", "image", lambda c: c.normal(image)),
        ("grid(image, instructions, '3x3')", "grid", lambda c: c.grid(image, "cars", "3x3")),
        ("bls(9 images, instructions)", "bls", lambda c: c.bls([image] * 9, "1234")),
        ("recaptcha_v2(sitekey, url)", "recaptcha_v2", lambda c: c.recaptcha_v2(SITEKEY, PAGE)),
        ("recaptcha_v2(invisible=True)", "recaptcha_v2", lambda c: c.recaptcha_v2(SITEKEY, PAGE, invisible=True)),
        ("recaptcha_v2(enterprise=True)", "recaptcha_v2_enterprise",
         lambda c: c.recaptcha_v2(SITEKEY, PAGE, enterprise=True)),
        ("recaptcha_v3(action=...)", "recaptcha_v3", lambda c: c.recaptcha_v3(SITEKEY, PAGE, action="login")),
        ("recaptcha_v3(enterprise=True)", "recaptcha_v3_enterprise",
         lambda c: c.recaptcha_v3(SITEKEY, PAGE, action="login", enterprise=True)),
        ("turnstile(sitekey, url)", "turnstile", lambda c: c.turnstile("0x4AAAAAAAB0000000000000", PAGE)),
        ("cloudflare_challenge(url, proxy=...)", "cloudflare_challenge",
         lambda c: c.cloudflare_challenge(PAGE, **px)),
        ("geetest(gt, challenge, url)", "geetest", lambda c: c.geetest(GT, CHALLENGE, PAGE)),
        ("captchafox(sitekey, url, proxy=...)", "captchafox", lambda c: c.captchafox("sk-fox", PAGE, **px)),
        ("friendly_captcha(sitekey, url)", "friendly_captcha", lambda c: c.friendly_captcha("FCMSITE", PAGE)),
        ("lemin(captcha_id, div_id, url)", "lemin", lambda c: c.lemin("CROPPED_3dfdd5c", "lemin-cropped", PAGE)),
        ("send() + get_result()", "turnstile",
         lambda c: c.get_result("turnstile", c.send("turnstile", sitekey="0x4AAAA", pageurl=PAGE))),
    ]


def captchaai_calls(cfg: dict[str, Any]) -> list[Call]:
    import captchaai  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    url, key, image = cfg["url"], cfg["key"], cfg["image"]
    holder: dict[str, Any] = {}
    lock = threading.Lock()

    def client() -> Any:  # the constructor calls threadsinfo (its key check): built once, by the first call
        with lock:
            if "sync" not in holder:
                holder["sync"] = captchaai.CaptchaAI(key, base_url=url)
            return holder["sync"]

    sync = _sdk_solves(image, cfg["proxy"])
    calls = [Call(name, kind, (lambda f=f: f(client())), _sdk_result) for name, kind, f in sync]
    calls.append(Call("threads_info()", None, lambda: client().threads_info(), lambda v: {"value": v}))

    async def async_call(method: str, *args: Any) -> Any:
        api = await captchaai.AsyncCaptchaAI.create(key, base_url=url)
        try:
            return await getattr(api, method)(*args)
        finally:
            await api.aclose()

    calls += [
        Call("AsyncCaptchaAI.turnstile()", "turnstile", lambda: async_call("turnstile", "0x4AAAA", PAGE),
             _sdk_result, is_async=True),
        Call("AsyncCaptchaAI.normal(image)", "image", lambda: async_call("normal", image), _sdk_result,
             is_async=True),
    ]
    return calls


# ------------------------------------------------------------------------------------------------------------
# 2captcha-python 2.1.2 (module twocaptcha; always https)
# ------------------------------------------------------------------------------------------------------------


def _two_result(result: Any) -> dict[str, Any]:
    if result is None:
        return {"returned": None}
    return {"task_id": str(result["captchaId"]), "answer": str(result["code"]), "parsed": False,
            "user_agent": result.get("user_agent")}


def _two_solves(cfg: dict[str, Any], solver: Any, extended: Any) -> list[tuple[str, str, Callable[[], Any]]]:
    """(call, kind, the call) for every solve 2captcha-python offers for a CaptchaAI kind."""
    from twocaptcha import TwoCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    image, server = cfg["image"], cfg["url"].removeprefix("https://")
    body = base64.b64encode(Path(image).read_bytes()).decode()
    proxy = {"type": "HTTP", "uri": cfg["proxy"]}
    return [
        ("normal(file)", "image", lambda: solver.normal(image)),
        ("normal(base64)", "image", lambda: solver.normal(body)),
        ("grid(file, rows=3, cols=3, hintText=...)", "grid",
         lambda: solver.grid(image, rows=3, cols=3, hintText="Select all cars")),
        ("recaptcha(sitekey, url)", "recaptcha_v2", lambda: solver.recaptcha(SITEKEY, PAGE)),
        ("recaptcha(invisible=1)", "recaptcha_v2", lambda: solver.recaptcha(SITEKEY, PAGE, invisible=1)),
        ("recaptcha(enterprise=1)", "recaptcha_v2_enterprise", lambda: solver.recaptcha(SITEKEY, PAGE, enterprise=1)),
        ("recaptcha(enterprise=1), extendedResponse", "recaptcha_v2_enterprise",
         lambda: extended.recaptcha(SITEKEY, PAGE, enterprise=1)),
        ("recaptcha(version='v3', action=...)", "recaptcha_v3",
         lambda: solver.recaptcha(SITEKEY, PAGE, version="v3", action="login")),
        ("recaptcha(version='v3', enterprise=1)", "recaptcha_v3_enterprise",
         lambda: solver.recaptcha(SITEKEY, PAGE, version="v3", action="login", enterprise=1)),
        ("geetest(gt, challenge, url)", "geetest", lambda: solver.geetest(GT, CHALLENGE, PAGE)),
        ("geetest_v4(captcha_id, url)", "geetest_v4", lambda: solver.geetest_v4(GT, PAGE)),
        ("solve(method='geetest', version=4, gt=...)", "geetest_v4",
         lambda: solver.solve(method="geetest", version=4, gt=GT, url=PAGE)),
        ("lemin(captcha_id, div_id, url)", "lemin", lambda: solver.lemin("CROPPED_3dfdd5c", "lemin-cropped", PAGE)),
        ("turnstile(sitekey, url)", "turnstile", lambda: solver.turnstile("0x4AAAA", PAGE)),
        ("friendly_captcha(sitekey, url)", "friendly_captcha", lambda: solver.friendly_captcha("FCMSITE", PAGE)),
        ("captchafox(sitekey, pageurl, userAgent, proxy)", "captchafox",
         lambda: solver.captchafox("sk-fox", PAGE, "Mozilla/5.0 Test", proxy)),
        ("TwoCaptcha(callback=URL).turnstile()", "turnstile",
         lambda: TwoCaptcha(cfg["key"], server=server, pollingInterval=1, callback=cfg["pingback"]).turnstile(
             "0x4", PAGE)),
    ]


def twocaptcha_calls(cfg: dict[str, Any]) -> list[Call]:
    from twocaptcha import AsyncTwoCaptcha, TwoCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    server = cfg["url"].removeprefix("https://")
    key, image = cfg["key"], cfg["image"]
    body = base64.b64encode(Path(image).read_bytes()).decode()
    solver = TwoCaptcha(key, server=server, pollingInterval=1)
    extended = TwoCaptcha(key, server=server, pollingInterval=1, extendedResponse=True)
    solves = _two_solves(cfg, solver, extended)
    calls = [Call(name, kind, f, _two_result) for name, kind, f in solves]

    def report(correct: bool) -> Any:
        return solver.report(solver.normal(body)["captchaId"], correct)

    calls += [
        Call("balance()", None, solver.balance, lambda v: {"value": v}),
        Call("report(id, True)", None, lambda: report(True), lambda v: {"value": v}),
        Call("report(id, False)", None, lambda: report(False), lambda v: {"value": v}),
        Call("AsyncTwoCaptcha.turnstile()", "turnstile",
             lambda: AsyncTwoCaptcha(key, server=server, pollingInterval=1).turnstile("0x4AAAA", PAGE),
             _two_result, is_async=True),
        Call("AsyncTwoCaptcha.normal(file)", "image",
             lambda: AsyncTwoCaptcha(key, server=server, pollingInterval=1).normal(image), _two_result,
             is_async=True),
    ]
    return calls


# ------------------------------------------------------------------------------------------------------------
# python-rucaptcha 6.8.2 (its native CaptchaAI client and the high-level classes with service_type=captchaai)
# ------------------------------------------------------------------------------------------------------------


def _ru_result(result: dict[str, Any]) -> dict[str, Any]:
    if result.get("status") != "ready":
        return {"error": str(result.get("errorCode"))}
    solution = result.get("solution") or {}
    answer, parsed = _structured(solution.get("request"))
    task_id = result.get("taskId")
    return {"task_id": None if task_id is None else str(task_id), "answer": answer, "parsed": parsed,
            "user_agent": solution.get("user_agent")}


def _ru_profiles(cfg: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any], bool]]:
    """profile -> (kind, params, uploads the image as a file)."""
    body = base64.b64encode(Path(cfg["image"]).read_bytes()).decode()
    proxy = {"proxy": cfg["proxy"], "proxytype": "HTTP"}
    rc = {"googlekey": SITEKEY, "pageurl": PAGE}
    return {
        "normal-base64": ("image", {"body": body}, False),
        "normal-file": ("image", {}, True),
        "normal-solve-base64": ("image", {"body": body}, False),
        "normal-solve-file": ("image", {}, True),
        "grid-base64": ("grid", {"body": body, "instructions": "cars", "grid_size": "3x3"}, False),
        "grid-file": ("grid", {"instructions": "cars", "grid_size": "4x4"}, True),
        "recaptcha-v2": ("recaptcha_v2", rc, False),
        "recaptcha-v2-invisible": ("recaptcha_v2", rc, False),
        "recaptcha-v2-enterprise": ("recaptcha_v2_enterprise", rc, False),
        "recaptcha-v3": ("recaptcha_v3", {**rc, "action": "login"}, False),
        "recaptcha-v3-enterprise": ("recaptcha_v3_enterprise", {**rc, "action": "login"}, False),
        "turnstile": ("turnstile", {"sitekey": "0x4AAAA", "pageurl": PAGE}, False),
        "geetest-v3": ("geetest", {"gt": GT, "challenge": CHALLENGE, "pageurl": PAGE}, False),
        "friendly-captcha": ("friendly_captcha", {"sitekey": "FCMSITE", "pageurl": PAGE}, False),
        "lemin": ("lemin", {"captcha_id": "CROPPED_3dfdd5c", "div_id": "lemin-cropped", "pageurl": PAGE}, False),
        "captchafox": ("captchafox", {"sitekey": "sk-fox", "pageurl": PAGE, **proxy}, False),
        "cloudflare-challenge": ("cloudflare_challenge", {"pageurl": PAGE, **proxy}, False),
        "bls": ("bls", {"instructions": "1234", **{f"image_base64_{i}": f"data:image/png;base64,{body}"
                                                   for i in range(1, 10)}}, False),
    }


def rucaptcha_calls(cfg: dict[str, Any]) -> list[Call]:
    from python_rucaptcha.captchaai import CaptchaAI, CaptchaAIFile  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    url, key = cfg["url"], cfg["key"]
    png = Path(cfg["image"]).read_bytes()

    def native(profile: str, params: dict[str, Any], upload: bool) -> Any:
        files = {"file": CaptchaAIFile(png, "captcha.png", "image/png")} if upload else None
        client = CaptchaAI(key, profile=profile, params=params, files=files, sleep_time=1)
        client.options.url_request, client.options.url_response = f"{url}/in.php", f"{url}/res.php"
        return client

    calls = [Call(f"CaptchaAI(profile='{p}')", kind, (lambda p=p, a=a, u=u: native(p, a, u).captcha_handler()),
                  _ru_result) for p, (kind, a, u) in _ru_profiles(cfg).items()]
    profiles = _ru_profiles(cfg)
    calls += [
        Call("CaptchaAI(profile='turnstile').aio_captcha_handler()", "turnstile",
             lambda: native("turnstile", *profiles["turnstile"][1:]).aio_captcha_handler(), _ru_result,
             is_async=True),
        Call("CaptchaAI(profile='normal-file').aio_captcha_handler()", "image",
             lambda: native("normal-file", *profiles["normal-file"][1:]).aio_captcha_handler(), _ru_result,
             is_async=True),
        Call("CaptchaAI.get_balance()", None, lambda: native("turnstile", {}, False).get_balance(),
             lambda v: {"value": v}),
        Call("CaptchaAI.get_threads_info()", None, lambda: native("turnstile", {}, False).get_threads_info(),
             lambda v: {"value": v}),
    ]
    return calls + rucaptcha_classes(cfg)


def rucaptcha_classes(cfg: dict[str, Any]) -> list[Call]:
    """The high-level classes the README shows for CaptchaAI (service_type=ServiceEnm.CAPTCHAAI)."""
    from python_rucaptcha.captcha_fox import CaptchaFox  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.core.enums import GeetestEnm, ReCaptchaEnm, ServiceEnm  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.friendly_captcha import FriendlyCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.gee_test import GeeTest  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.grid_captcha import GridCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.image_captcha import ImageCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.lemin_captcha import LeminCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.re_captcha import ReCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.turnstile import Turnstile  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    url, image = cfg["url"], cfg["image"]
    common = {"rucaptcha_key": cfg["key"], "service_type": ServiceEnm.CAPTCHAAI, "sleep_time": 1}
    host, port = cfg["proxy"].rsplit("@", 1)[1].split(":")

    def at(obj: Any) -> Any:  # the classes have no base-URL setting
        obj.params.url_request, obj.params.url_response = f"{url}/in.php", f"{url}/res.php"
        return obj

    classes: list[tuple[str, str, Callable[[], Any]]] = [
        ("Turnstile(...)", "turnstile", lambda: at(Turnstile(
            websiteURL=PAGE, websiteKey="0x4AAAA", userAgent="Mozilla/5.0 Test", **common)).captcha_handler()),
        ("ReCaptcha(method=RecaptchaV2TaskProxyless)", "recaptcha_v2", lambda: at(ReCaptcha(
            websiteURL=PAGE, websiteKey=SITEKEY, method=ReCaptchaEnm.RecaptchaV2TaskProxyless,
            **common)).captcha_handler()),
        ("ImageCaptcha().captcha_handler(captcha_file=...)", "image",
         lambda: at(ImageCaptcha(**common)).captcha_handler(captcha_file=image)),
        ("GeeTest(method=GeeTestTaskProxyless)", "geetest", lambda: at(GeeTest(
            websiteURL=PAGE, method=GeetestEnm.GeeTestTaskProxyless, gt=GT, **common)).captcha_handler(
            challenge=CHALLENGE)),
        ("FriendlyCaptcha(...)", "friendly_captcha", lambda: at(FriendlyCaptcha(
            websiteURL=PAGE, websiteKey="FCMSITE", **common)).captcha_handler()),
        ("LeminCaptcha(...)", "lemin", lambda: at(LeminCaptcha(
            websiteURL=PAGE, captchaId="CROPPED_3dfdd5c", div_id="lemin-cropped", **common)).captcha_handler()),
        ("CaptchaFox(...)", "captchafox", lambda: at(CaptchaFox(
            websiteURL=PAGE, websiteKey="sk-fox", userAgent="Mozilla/5.0 Test", proxyType="HTTP",
            proxyAddress=host, proxyPort=port, **common)).captcha_handler()),
        ("GridCaptcha(grid_size='3x3').captcha_handler(captcha_file=...)", "grid", lambda: at(GridCaptcha(
            comment="Select all cars", grid_size="3x3", **common)).captcha_handler(captcha_file=image)),
    ]
    return [Call(name, kind, f, _ru_result) for name, kind, f in classes]



# ------------------------------------------------------------------------------------------------------------
# The JSON API (createTask / getTaskResult): capmonstercloudclient 4.3.1, capsolver 1.0.7, python-rucaptcha's v2
# classes. Their solve calls hand over the `solution` object only: the task id each got from createTask is read
# by a spy on the client's own createTask call (the request and reply pass through unchanged).
# ------------------------------------------------------------------------------------------------------------

_ANSWER_FIELDS = ("gRecaptchaResponse", "cf_clearance", "token", "text")


def _solution_line(solution: Any, task_id: Any) -> dict[str, Any]:
    if not isinstance(solution, dict):
        return {"error": f"no solution object: {solution!r}"}
    field = next((f for f in _ANSWER_FIELDS if f in solution), None)
    answer, parsed = (str(solution[field]), False) if field else _structured(solution)
    return {"task_id": None if task_id is None else str(task_id), "answer": answer, "parsed": parsed,
            "user_agent": solution.get("userAgent")}


def _proxy_parts(proxy: str) -> tuple[str, str, str, int]:
    creds, address = proxy.rsplit("@", 1)
    login, password = creds.split(":", 1)
    host, port = address.rsplit(":", 1)
    return login, password, host, int(port)


def capmonster_calls(cfg: dict[str, Any]) -> list[Call]:
    from capmonstercloudclient import CapMonsterClient, ClientOptions  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from capmonstercloudclient.requests import (  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
        GeetestRequest,
        ImageToTextRequest,
        ProxyInfo,
        RecaptchaV2EnterpriseRequest,
        RecaptchaV2Request,
        RecaptchaV3EnterpriseRequest,
        RecaptchaV3ProxylessRequest,
        TurnstileRequest,
    )

    png = Path(cfg["image"]).read_bytes()
    login, password, host, port = _proxy_parts(cfg["proxy"])
    proxy = ProxyInfo(proxyType="http", proxyAddress=host, proxyPort=port, proxyLogin=login, proxyPassword=password)

    def solve(request: Any) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            client = CapMonsterClient(options=ClientOptions(api_key=cfg["key"], service_url=cfg["url"]))
            created: dict[str, Any] = {}
            create = client._createTask

            async def spy(req: Any) -> Any:
                created.update(await create(req))
                return created

            client._createTask = spy
            return await client.solve_captcha(request), created.get("taskId")
        return run

    async def balance() -> Any:
        return await CapMonsterClient(options=ClientOptions(api_key=cfg["key"], service_url=cfg["url"])).get_balance()

    ua = "Mozilla/5.0 Test"
    solves: list[tuple[str, str, Any]] = [
        ("RecaptchaV2Request(websiteUrl, websiteKey)", "recaptcha_v2",
         RecaptchaV2Request(websiteUrl=PAGE, websiteKey=SITEKEY)),
        ("RecaptchaV2Request(isInvisible=True)", "recaptcha_v2",
         RecaptchaV2Request(websiteUrl=PAGE, websiteKey=SITEKEY, isInvisible=True)),
        ("RecaptchaV2Request(proxy=...)", "recaptcha_v2",
         RecaptchaV2Request(websiteUrl=PAGE, websiteKey=SITEKEY, proxy=proxy)),
        ("RecaptchaV2EnterpriseRequest(enterprisePayload=...)", "recaptcha_v2_enterprise",
         RecaptchaV2EnterpriseRequest(websiteUrl=PAGE, websiteKey=SITEKEY, enterprisePayload="s-value")),
        ("RecaptchaV3ProxylessRequest(minScore, pageAction)", "recaptcha_v3",
         RecaptchaV3ProxylessRequest(websiteUrl=PAGE, websiteKey=SITEKEY, minScore=0.7, pageAction="login")),
        ("RecaptchaV3EnterpriseRequest(pageAction)", "recaptcha_v3_enterprise",
         RecaptchaV3EnterpriseRequest(websiteUrl=PAGE, websiteKey=SITEKEY, pageAction="login")),
        ("ImageToTextRequest(image_bytes)", "image", ImageToTextRequest(image_bytes=png)),
        ("GeetestRequest(gt, challenge)", "geetest", GeetestRequest(websiteUrl=PAGE, gt=GT, challenge=CHALLENGE)),
        ("GeetestRequest(version=4, gt=captcha_id)", "geetest_v4", GeetestRequest(websiteUrl=PAGE, gt=GT, version=4)),
        ("TurnstileRequest(websiteURL, websiteKey)", "turnstile",
         TurnstileRequest(websiteURL=PAGE, websiteKey="0x4AAAAAAAB0000000000000")),
        ("TurnstileRequest(cloudflareTaskType='cf_clearance', proxy=...)", "cloudflare_challenge",
         TurnstileRequest(websiteURL=PAGE, websiteKey="0x4AAAAAAAB0000000000000", cloudflareTaskType="cf_clearance",
                          htmlPageBase64=base64.b64encode(b"<html></html>").decode(), userAgent=ua, proxy=proxy)),
    ]
    calls = [Call(f"solve_captcha({name})", kind, solve(req), lambda v: _solution_line(*v), is_async=True)
             for name, kind, req in solves]
    calls.append(Call("get_balance()", None, balance, lambda v: {"value": v}, is_async=True))
    return calls


def capsolver_calls(cfg: dict[str, Any]) -> list[Call]:
    import capsolver  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from capsolver.capsolver import Capsolver  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    capsolver.api_key, capsolver.api_base = cfg["key"], cfg["url"]
    body = base64.b64encode(Path(cfg["image"]).read_bytes()).decode()
    created = threading.local()  # each call runs in a thread of its own
    post = Capsolver.postTask

    def spy(params: dict[str, Any]) -> Any:
        created.reply = post(params)
        return created.reply

    Capsolver.postTask = staticmethod(spy)

    def solve(task: dict[str, Any]) -> Callable[[], Any]:
        def run() -> Any:
            created.reply = None
            solution = capsolver.solve(task)
            reply = created.reply
            return solution, reply.get("taskId") if isinstance(reply, dict) else None
        return run

    login, password, host, port = _proxy_parts(cfg["proxy"])
    proxy = {"proxyType": "http", "proxyAddress": host, "proxyPort": port, "proxyLogin": login,
             "proxyPassword": password}
    tasks: list[tuple[str, str, dict[str, Any]]] = [
        ("ReCaptchaV2TaskProxyLess", "recaptcha_v2", {"websiteURL": PAGE, "websiteKey": SITEKEY}),
        ("ReCaptchaV2Task + proxy fields", "recaptcha_v2", {"websiteURL": PAGE, "websiteKey": SITEKEY, **proxy}),
        ("ReCaptchaV2EnterpriseTaskProxyLess", "recaptcha_v2_enterprise", {"websiteURL": PAGE, "websiteKey": SITEKEY}),
        ("ReCaptchaV3TaskProxyLess", "recaptcha_v3", {"websiteURL": PAGE, "websiteKey": SITEKEY,
                                                      "pageAction": "login"}),
        ("ReCaptchaV3EnterpriseTaskProxyLess", "recaptcha_v3_enterprise",
         {"websiteURL": PAGE, "websiteKey": SITEKEY, "pageAction": "login"}),
        ("AntiTurnstileTaskProxyLess", "turnstile", {"websiteURL": PAGE, "websiteKey": "0x4AAAA",
                                                     "metadata": {"action": "login"}}),
        ("ImageToTextTask", "image", {"body": body}),
        ("GeeTestTaskProxyLess", "geetest", {"websiteURL": PAGE, "gt": GT, "challenge": CHALLENGE}),
    ]
    calls = [Call(f"solve({{type: {name}}})", kind, solve({"type": name.split(" ")[0], **task}),
                  lambda v: _solution_line(*v)) for name, kind, task in tasks]
    calls.append(Call("balance()", None, capsolver.balance, lambda v: {"value": v}))
    return calls


def rucaptcha_v2_calls(cfg: dict[str, Any]) -> list[Call]:
    """python-rucaptcha's classes with their default service (2captcha's API v2: createTask/getTaskResult)."""
    from python_rucaptcha.core.enums import GeetestEnm, ReCaptchaEnm  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.gee_test import GeeTest  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.image_captcha import ImageCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.re_captcha import ReCaptcha  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise
    from python_rucaptcha.turnstile import Turnstile  # noqa: PLC0415 - a client library under test: installed by `make compatibility`, absent otherwise

    url, image = cfg["url"], cfg["image"]
    common = {"rucaptcha_key": cfg["key"], "sleep_time": 1}

    def at(obj: Any) -> Any:  # no base-URL setting: the v2 endpoints are set after construction
        obj.params.url_request, obj.params.url_response = f"{url}/createTask", f"{url}/getTaskResult"
        return obj

    def read(result: dict[str, Any]) -> dict[str, Any]:
        if result.get("status") != "ready":
            return {"error": f"{result.get('errorCode')}: {result.get('errorDescription')}"}
        return _solution_line(result.get("solution"), result.get("taskId"))

    classes: list[tuple[str, str, Callable[[], Any], bool]] = [
        ("ReCaptcha(method=RecaptchaV2TaskProxyless)", "recaptcha_v2", lambda: at(ReCaptcha(
            websiteURL=PAGE, websiteKey=SITEKEY, method=ReCaptchaEnm.RecaptchaV2TaskProxyless, **common)
            ).captcha_handler(), False),
        ("ReCaptcha(method=RecaptchaV2EnterpriseTaskProxyless)", "recaptcha_v2_enterprise", lambda: at(ReCaptcha(
            websiteURL=PAGE, websiteKey=SITEKEY, method=ReCaptchaEnm.RecaptchaV2EnterpriseTaskProxyless, **common)
            ).captcha_handler(), False),
        ("ReCaptcha(method=RecaptchaV3TaskProxyless, minScore, pageAction)", "recaptcha_v3", lambda: at(ReCaptcha(
            websiteURL=PAGE, websiteKey=SITEKEY, method=ReCaptchaEnm.RecaptchaV3TaskProxyless, minScore=0.7,
            pageAction="login", **common)).captcha_handler(), False),
        ("Turnstile(...)", "turnstile", lambda: at(Turnstile(
            websiteURL=PAGE, websiteKey="0x4AAAA", userAgent="Mozilla/5.0 Test", **common)).captcha_handler(),
         False),
        ("ImageCaptcha().captcha_handler(captcha_file=...)", "image",
         lambda: at(ImageCaptcha(**common)).captcha_handler(captcha_file=image), False),
        ("GeeTest(method=GeeTestTaskProxyless)", "geetest", lambda: at(GeeTest(
            websiteURL=PAGE, method=GeetestEnm.GeeTestTaskProxyless, gt=GT, **common)).captcha_handler(
            challenge=CHALLENGE), False),
        ("Turnstile(...).aio_captcha_handler()", "turnstile", lambda: at(Turnstile(
            websiteURL=PAGE, websiteKey="0x4AAAA", userAgent="Mozilla/5.0 Test", **common)).aio_captcha_handler(),
         True),
    ]
    return [Call(name, kind, f, read, is_async=is_async) for name, kind, f, is_async in classes]

# ------------------------------------------------------------------------------------------------------------

CLIENTS = {"captchaai": captchaai_calls, "2captcha-python": twocaptcha_calls, "python-rucaptcha": rucaptcha_calls,
           "capmonstercloudclient": capmonster_calls, "capsolver": capsolver_calls,
           "python-rucaptcha-v2": rucaptcha_v2_calls}


async def _one(call: Call, pool: ThreadPoolExecutor) -> dict[str, Any]:
    line: dict[str, Any] = {"call": call.name, "kind": call.kind}
    try:
        if call.is_async:
            value = await call.run()
        else:
            value = await asyncio.get_running_loop().run_in_executor(pool, call.run)
        fields = call.read(value)
    except Exception as exc:  # every failure is a result of the call
        fields = {"error": f"{type(exc).__name__}: {exc}"}
    line.update(fields)
    line["ok"] = "error" not in fields
    return line


async def _run_all(calls: list[Call]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(await asyncio.gather(*(_one(c, pool) for c in calls)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="JSON file: client, url, key, image, proxy, pingback")
    cfg = json.loads(Path(parser.parse_args().config).read_text())
    logging.disable(logging.CRITICAL)  # python-rucaptcha logs whole request payloads at WARNING
    for line in asyncio.run(_run_all(CLIENTS[cfg["client"]](cfg))):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
