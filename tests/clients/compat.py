"""Real client libraries against the simulator, and the page that says what works: docs/compatibility.md.

Two families: CaptchaAI's v1 API (in.php/res.php) and the JSON API of the createTask family (CapMonster Cloud,
CapSolver, 2captcha's API v2), which the simulator and the gateway also speak. Each client runs every call it
offers for a CaptchaAI kind, all at once, against a simulator of its own at ``--speed 20`` (python_clients.py in
the clients' venv ``.tools/clients-venv``, npm_client.js / npm_capmonster.js with node; all installed by
``scripts/install-tools.sh --only clients``). Every answer a client hands over is compared with the
one the simulator served for that task id (and the user agent, for the kinds answered with one); a pingback must
reach a receiver on 127.0.0.1 with the task's id and answer.

A call either works or fails; a failure is expected only where :data:`KNOWN` says why (the client's own bug, or a
spelling of another service's API that CaptchaAI does not have), and it must fail *that* way.

    .venv/bin/python -m tests.clients.compat --write    # regenerate docs/compatibility.md (make compatibility)
    .venv/bin/python -m tests.clients.compat            # print the page; exit 1 when it differs from the doc
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

from captcha_worker.methods import Answer, AnswerShape, by_name
from captcha_worker.protocols.v1 import plain_answer
from captcha_worker.simulator import SimConfig, SimulatorServer
from captcha_worker.simulator.app import TaskView
from captcha_worker.tls import tls_context
from tests.sim_helpers import KEY, PingbackReceiver, make_png

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

DOC = ROOT / "docs" / "compatibility.md"
CLIENTS_PYTHON = ROOT / ".tools" / "clients-venv" / "bin" / "python"
NODE_MODULES = (HERE / "node_modules" / "@2captcha" / "captcha-solver",
                HERE / "node_modules" / "@zennolab_com" / "capmonstercloud-client")
NODE_DRIVERS = {"npm": "npm_client.js", "npm-capmonster": "npm_capmonster.js"}
SPEED = 20.0
THREADS = 200
BALANCE = 10.0
PROXY = "user:proxy-pass@10.0.0.1:3128"
RECORDED = "OK_REPORT_RECORDED"
RUN_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Client:
    key: str  # as python_clients.py names it; "npm" for the node client
    title: str
    pointed: str  # how the test points it at the simulator
    tls: bool = False  # the client only speaks https
    plain: bool = False  # it reads plain-text replies (no json=1), unless the call says extendedResponse
    protocol: str = "v1"  # "json": the JSON API (createTask / getTaskResult)


CLIENTS = (
    Client("captchaai", "captchaai 1.0.1 (the official SDK, PyPI)", "`base_url=` (sync and async clients)"),
    Client("2captcha-python", "2captcha-python 2.1.2 (PyPI, module `twocaptcha`)",
           "`server='127.0.0.1:PORT'`; it always uses https, so the simulator serves TLS (`--tls-cert`) with a "
           "certificate the run generates, trusted through `REQUESTS_CA_BUNDLE` / `SSL_CERT_FILE`", tls=True,
           plain=True),
    Client("python-rucaptcha", "python-rucaptcha 6.8.2 (PyPI)",
           "its CaptchaAI classes have no base-URL setting: `options.url_request` / `url_response` (native "
           "client) and `params.url_request` / `url_response` (the high-level classes) are set after construction"),
    Client("npm", "@2captcha/captcha-solver 1.3.9 (npm)",
           "its endpoints are constants: the `Solver` instance's `in` and `res` getters are overridden"),
    Client("capmonstercloudclient", "capmonstercloudclient 4.3.1 (CapMonster Cloud's official SDK, PyPI; JSON API)",
           "`ClientOptions(api_key=..., service_url=URL)`", protocol="json"),
    Client("capsolver", "capsolver 1.0.7 (CapSolver's official SDK, PyPI; JSON API)",
           "`capsolver.api_base = URL` (or `CAPSOLVER_API_BASE`)", protocol="json"),
    Client("python-rucaptcha-v2", "python-rucaptcha 6.8.2 v2 (its default classes: 2captcha's API v2, JSON API)",
           "no base-URL setting: `params.url_request` / `url_response` are set to `URL/createTask` / "
           "`URL/getTaskResult` after construction", protocol="json"),
    Client("npm-capmonster", "@zennolab_com/capmonstercloud-client 2.6.1 (CapMonster Cloud's official client, npm; "
           "JSON API)", "`new ClientOptions({clientKey, serviceUrl: URL})`", protocol="json"),
)


@dataclass(frozen=True)
class Known:
    """An expected failure: the row's text, the note that explains it, and how to recognise that failure (any
    other outcome is an error)."""

    verdict: str
    note: str
    matches: Callable[[Mapping[str, Any]], bool]


def _error(pattern: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda line: not line["ok"] and re.fullmatch(pattern, str(line.get("error", ""))) is not None


_INT_ID = Known(
    "client bug: rejects the integer task id (see below)",
    "**python-rucaptcha rejects the integer task id.** CaptchaAI answers `method=userrecaptcha` with an "
    "integer id (`{\"status\":1,\"request\":12345}`), and the client requires a JSON string "
    "(`python_rucaptcha/core/captchaai.py`: `isinstance(created.get(\"request\"), str)`): every reCAPTCHA task "
    "is reported as failed, with the id as its error code, although it was accepted and runs on the account.",
    _error(r"[0-9]{5,20}"))
_GEETEST_V4 = Known(
    "not CaptchaAI's API: 2captcha's GeeTest v4 spelling (see below)",
    "**GeeTest v4 in 2captcha's spelling.** The 2captcha clients send `method=geetest_v4` with `captcha_id`; "
    "CaptchaAI documents `method=geetest&version=4&gt=<captcha_id>` and answers an unknown method with "
    "`ERROR_BAD_PARAMETERS`, and so does the simulator (a success here would fail in production). "
    "2captcha-python reaches it with `solve(method='geetest', version=4, gt=<captcha_id>, url=...)` (a row "
    "above).",
    _error(r"(ApiException|APIError): ERROR_BAD_PARAMETERS"))
_CALLBACK = Known(
    "works (pingback delivered); client bug: returns None (see below)",
    "**2captcha-python's `callback=` returns None.** The simulator calls the pingback URL with the task's id "
    "and answer, but with `callback=` the client's `solve()` returns None instead of the captcha id its "
    "README promises (`twocaptcha/solver.py`), so the caller cannot match the pingback to its request.",
    lambda line: line["ok"] and line.get("returned", "absent") is None)

KNOWN: Mapping[tuple[str, str], Known] = {
    **{("python-rucaptcha", f"CaptchaAI(profile='{p}')"): _INT_ID
       for p in ("recaptcha-v2", "recaptcha-v2-invisible", "recaptcha-v2-enterprise", "recaptcha-v3",
                 "recaptcha-v3-enterprise")},
    ("python-rucaptcha", "ReCaptcha(method=RecaptchaV2TaskProxyless)"): _INT_ID,
    ("2captcha-python", "geetest_v4(captcha_id, url)"): _GEETEST_V4,
    ("npm", "geetestV4({captcha_id, pageurl})"): _GEETEST_V4,
    ("2captcha-python", "TwoCaptcha(callback=URL).turnstile()"): _CALLBACK,
}

#: the non-solve calls and what their value must be
VALUES: Mapping[tuple[str, str], Callable[[Any], bool]] = {
    ("captchaai", "threads_info()"): lambda v: v["threads"] == THREADS and v["working_threads"] >= 0,
    ("2captcha-python", "balance()"): lambda v: v == BALANCE,
    ("2captcha-python", "report(id, True)"): lambda v: v == RECORDED,
    ("2captcha-python", "report(id, False)"): lambda v: v == RECORDED,
    ("python-rucaptcha", "CaptchaAI.get_balance()"): lambda v: float(v["balance"]) == BALANCE,
    ("python-rucaptcha", "CaptchaAI.get_threads_info()"): lambda v: v["threads"] == THREADS,
    ("npm", "balance()"): lambda v: v == BALANCE,
    ("npm", "goodReport(id)"): lambda v: v == RECORDED,
    ("npm", "badReport(id)"): lambda v: v == RECORDED,
    ("capmonstercloudclient", "get_balance()"): lambda v: v == {"errorId": 0, "balance": BALANCE},
    ("capsolver", "balance()"): lambda v: v == {"errorId": 0, "balance": BALANCE},
    ("npm-capmonster", "getBalance()"): lambda v: v == {"errorId": 0, "balance": BALANCE},
}


@dataclass(frozen=True)
class Row:
    client: Client
    call: str
    kind: str | None
    result: str
    ok: bool  # works, or fails exactly as KNOWN says


@dataclass
class Run:
    receiver: PingbackReceiver
    lines: list[dict[str, Any]]
    view: Callable[[str], TaskView | None]  # a task id as the client saw it -> what the simulator served for it
    signed: Callable[[Mapping[str, str], Mapping[str, str]], bool] = lambda query, headers: True  # a pingback's


# ------------------------------------------------------------------------------------------------------------
# Judging one line
# ------------------------------------------------------------------------------------------------------------


def _expected(client: Client, call: str, answer: Answer) -> str:
    plain = client.plain and "extendedResponse" not in call
    return plain_answer(answer)[3:] if plain else answer.request


def _same(answer: str, expected: str, parsed: bool) -> bool:
    return json.loads(answer) == json.loads(expected) if parsed else answer == expected


def _judge_solve(client: Client, line: Mapping[str, Any], run: Run) -> str | None:
    """None when the answer is the one the simulator served for that task; else what is wrong."""
    if line.get("task_id") is None:  # solve.php: no task id, the reply is the answer
        return None if re.fullmatch(r"[a-z0-9]{1,20}", str(line.get("answer"))) else "not an image's text"
    view = run.view(str(line["task_id"]))
    if view is None or view.answer is None:
        return f"the simulator has no answer for task {line['task_id']}"
    if view.kind.name != line["kind"]:
        return f"the simulator took it for {view.kind.name}"
    if not _same(str(line["answer"]), _expected(client, line["call"], view.answer), bool(line.get("parsed"))):
        return "the answer differs from the simulator's"
    plain = client.plain and "extendedResponse" not in line["call"]
    if view.kind.shape is AnswerShape.TOKEN_WITH_UA and not plain and line.get("user_agent") != view.answer.user_agent:
        return "the user agent is missing or differs"
    return None


def _judge_pingback(client: Client, line: Mapping[str, Any], run: Run) -> str | None:
    """The pingback calls: the receiver got the task's id and answer."""
    for hit, headers in zip(run.receiver.hits, run.receiver.headers, strict=True):
        view = run.view(hit.get("id", "0"))
        if view is not None and view.answer is not None and hit.get("code") == view.answer.request:
            if line.get("task_id") in (None, hit["id"]):
                return None if run.signed(hit, headers) else "the pingback's signature is wrong"
    return "no pingback with the task's id and answer"


def judge(client: Client, line: Mapping[str, Any], run: Run) -> Row:
    call, kind = str(line["call"]), line.get("kind")
    known = KNOWN.get((client.key, call))
    problem: str | None
    if not line["ok"]:
        problem = f"fails: {line.get('error')}"
    elif (client.key, call) in VALUES:
        problem = None if VALUES[client.key, call](line.get("value")) else f"wrong value {line.get('value')!r}"
    elif "pingback" in call or "callback" in call:
        problem = _judge_pingback(client, line, run)
    elif "returned" in line:
        problem = "the call returned nothing"
    else:
        problem = _judge_solve(client, line, run)
    if known is not None:
        ok = known.matches(line) and (problem is None or not line["ok"])
        return Row(client, call, kind, known.verdict if ok else f"UNEXPECTED ({problem or 'it works'})", ok)
    if problem is None:
        return Row(client, call, kind, _works(client, call, kind), True)
    return Row(client, call, kind, f"FAILS: {problem}", False)


def _works(client: Client, call: str, kind: str | None) -> str:
    if kind and client.plain and "extendedResponse" not in call and by_name(kind).shape is AnswerShape.TOKEN_WITH_UA:
        return "works (plain reply: `<token>\\|<user agent>`)"
    return "works"


# ------------------------------------------------------------------------------------------------------------
# Running the clients
# ------------------------------------------------------------------------------------------------------------


def missing_tools() -> list[str]:
    missing = []
    if not CLIENTS_PYTHON.exists():
        missing.append(f"{CLIENTS_PYTHON.relative_to(ROOT)}")
    missing += [f"{m.relative_to(ROOT)}" for m in NODE_MODULES if not m.exists()]
    return missing


async def _driver(client: Client, cfg_path: Path, ca: Path) -> list[dict[str, Any]]:
    if client.key in NODE_DRIVERS:
        cmd = ["node", str(HERE / NODE_DRIVERS[client.key]), str(cfg_path)]
    else:
        cmd = [str(CLIENTS_PYTHON), str(HERE / "python_clients.py"), str(cfg_path)]
    env = {**os.environ, "REQUESTS_CA_BUNDLE": str(ca), "SSL_CERT_FILE": str(ca), "NODE_PATH": str(HERE)}
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=HERE, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        raise RuntimeError(f"{client.title}: no result within {RUN_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{client.title} exited {proc.returncode}: {err.decode()[-2000:]}")
    return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]


async def _run_client(client: Client, tmp: Path, ca: trustme.CA, receiver: PingbackReceiver) -> list[Row]:
    tls = None
    if client.tls:
        pem = tmp / "server.pem"
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
        tls = tls_context(str(pem))
    cfg = SimConfig(speed=SPEED, threads=THREADS, balance=BALANCE, keys=frozenset({KEY}))
    async with SimulatorServer(cfg, tls=tls) as server:
        cfg_path = tmp / f"{client.key}.json"
        cfg_path.write_text(json.dumps({"client": client.key, "url": server.url, "key": KEY,
                                        "image": str(tmp / "captcha.png"), "proxy": PROXY,
                                        "pingback": receiver.url}))
        lines = await _driver(client, cfg_path, tmp / "ca.pem")
        run = Run(receiver, lines, lambda tid: _sim_view(server, tid))
        for _ in range(100):  # pingbacks are sent on the simulator's tick
            if server.stats().pingbacks_sent >= sum(1 for ln in lines if "back" in ln["call"]):
                break
            await asyncio.sleep(0.05)
        return [judge(client, line, run) for line in lines]


def _sim_view(server: SimulatorServer, task_id: str) -> TaskView | None:
    return server.simulator.task_view(int(task_id)) if task_id.isdigit() else None


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[tuple[Path, trustme.CA]]:
    """A directory with the clients' image (captcha.png) and a CA (ca.pem) the drivers trust; fails first when
    the client libraries are not installed."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"client libraries not installed ({', '.join(missing)}): run "
                           "scripts/install-tools.sh --only clients")
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        tmp = Path(name)
        (tmp / "captcha.png").write_bytes(make_png())
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
        yield tmp, ca


async def run_all() -> list[Row]:
    with scratch("compat-") as (tmp, ca):
        async with PingbackReceiver() as receiver:
            per_client = await asyncio.gather(*(_run_client(c, tmp, ca, receiver) for c in CLIENTS))
    return [row for rows in per_client for row in rows]


# ------------------------------------------------------------------------------------------------------------
# The page
# ------------------------------------------------------------------------------------------------------------

_HEADER = """# Client library compatibility

Real client libraries against the simulator: CaptchaAI's (in.php/res.php) and the JSON API's (`createTask` /
`getTaskResult`: CapMonster Cloud, CapSolver, 2captcha's API v2), which the simulator and the gateway speak
beside it. Each runs every call it offers for a kind CaptchaAI solves, at `--speed {speed:g}`, and each answer it
hands over is compared with the one the simulator served for that task (and the user agent, for the kinds
answered with one); a JSON-API client hands over the `solution` object, read by its type's field
(`gRecaptchaResponse`, `token`, `text`, `cf_clearance`, GeeTest's whole object). Generated by `make compatibility`
(`tests/clients/compat.py`);
`tests/test_compatibility.py` runs the clients again and fails when this page and the run differ. A row that does
not say "works" names the client's own bug, or the other service's API the call speaks; the simulator answers
those as CaptchaAI does rather than being bent to them.

| client | how the test points it at the simulator |
|---|---|
{clients}

| client | call | kind | result |
|---|---|---|---|
"""

_FOOTER = """
## Notes

* Speed scales solve times only: an answer stays readable for `--retention-seconds` (600) of real time, so a
  client's own first wait (the official SDK waits 15 s before its first reCAPTCHA poll) never outlives it.
* Plain-text replies (`json=0`, 2captcha-python's default) carry the user agent after the answer:
  `OK|<token>|<user agent>`; with `extendedResponse=True` the JSON reply's `user_agent` field is used.
* Grid tasks in CaptchaAI's example spelling (`recaptcha=1`, `textinstructions`, `recaptcharows`/`recaptchacols`,
  3x3 by default) are grids; `method=post` with a base64 `body` is read as `method=base64`.

## The JSON API's errors

The simulator and the gateway answer the JSON API with the numbered errors Anti-Captcha and 2captcha share
(`src/captcha_worker/protocols/jsonapi_errors.py`, one table); CapMonster Cloud and CapSolver send `errorId` 1
for every error and are read by `errorCode`, which is the same string. A code whose meaning differs between
providers is answered by its meaning:

{json_errors}
"""


_JSON_ERRORS: tuple[tuple[str, str, str], ...] = (
    ("no free thread (CaptchaAI's `ERROR_ZERO_BALANCE`, a tenant over its rate limit at `createTask`)",
     '2 `ERROR_NO_SLOT_AVAILABLE`',
     'on every JSON-API provider `ERROR_ZERO_BALANCE` (10) means "no money"; a plan billed per thread '
     'never runs out of money, it runs out of threads'),
    ('Redis unavailable (gateway)',
     '2 `ERROR_NO_SLOT_AVAILABLE` ("retry later")',
     'the clients retry or surface it; no provider documents a "service unavailable" id in this numbering'),
    ('unsolvable, or a task this package gave up on (deadline, attempts)',
     '12 `ERROR_CAPTCHA_UNSOLVABLE`',
     'Anti-Captcha charges it, 2captcha refunds it; here a plan thread is all it cost'),
    ("unknown, expired or another tenant's `taskId`",
     '16 `ERROR_NO_SUCH_CAPCHA_ID`',
     'CapSolver says `ERROR_TASKID_INVALID`'),
    ('missing `websiteURL` / reCAPTCHA `websiteKey`',
     '5 `ERROR_PAGEURL` / 31 `ERROR_RECAPTCHA_INVALID_SITEKEY`',
     "2captcha's ids"),
    ('a field of the wrong JSON type, a body that is not a JSON object, a refused `callbackUrl`',
     '110 `ERROR_BAD_PARAMETERS`',
     "2captcha's id; the description names the field"),
    ('bad proxy fields',
     '130 `ERROR_BAD_PROXY`',
     "2captcha's id (Anti-Captcha's 25-29 are for proxies that fail when used)"),
    ('a type CaptchaAI does not solve (hCaptcha, FunCaptcha, ...) or no type',
     '23 `ERROR_TASK_NOT_SUPPORTED`',
     'no `task` at all: 22 `ERROR_TASK_ABSENT`'),
    ("a body over the gateway's cap",
     '4 `ERROR_TOO_BIG_CAPTCHA_FILESIZE`',
     'HTTP 200, never a 413 page'),
    ('over the rate limit at getTaskResult & co',
     'HTTP 429 + `Retry-After`, `ERROR_TOO_MUCH_REQUESTS`',
     "CapMonster Cloud's code"),
)


def render(rows: list[Row]) -> str:
    clients = "\n".join(f"| {c.title} | {c.pointed} |" for c in CLIENTS)
    table = "\n".join(f"| {r.client.title.split(' (')[0]} | `{r.call}` | {r.kind or '—'} | {r.result} |"
                      for r in rows)
    notes = dict.fromkeys(k.note for k in KNOWN.values())  # once each, in KNOWN's order
    known = "\n## Rows that do not just say \"works\"\n\n" + "\n".join(f"* {n}" for n in notes) + "\n"
    errors = "| situation | answered | why |\n|---|---|---|\n" + "\n".join(
        f"| {a} | {b} | {c} |" for a, b, c in _JSON_ERRORS)
    return _HEADER.format(speed=SPEED, clients=clients) + table + "\n" + known + _FOOTER.format(json_errors=errors)


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the client libraries against the simulator.")
    parser.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    ns = parser.parse_args()
    rows = asyncio.run(run_all())
    page = render(rows)
    bad = [r for r in rows if not r.ok]
    if ns.write:
        if bad:
            print(page)
            print(f"compat: {len(bad)} calls fail unexpectedly; {DOC.relative_to(ROOT)} not written", file=sys.stderr)
            return 1
        DOC.write_text(page)
        print(f"compat: wrote {DOC.relative_to(ROOT)} ({len(rows)} calls)")
        return 0
    print(page)
    return 0 if not bad and DOC.exists() and DOC.read_text() == page else 1


if __name__ == "__main__":
    sys.exit(main())
