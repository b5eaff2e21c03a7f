"""What real CaptchaAI clients found in the simulator (issue 13, fixes 2-10), each over a real socket: reply forms,
JSON bodies, key strikes, solve.php, image checks, CaptchaAI's other spellings, extras (soft_id, header_acao,
pingback), TLS and the log lines of a simulator process. The clients themselves run in test_compatibility."""

from __future__ import annotations

import asyncio
import base64 as b64
import json
import os
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import trustme

from captcha_worker import codes, methods
from captcha_worker.codes import Code
from captcha_worker.methods import KINDS, AnswerShape, Kind
from captcha_worker.protocols import v1 as protocol
from captcha_worker.simulator import Faults, Latency, SimConfig, SimulatorServer
from captcha_worker.tls import tls_context
from tests.sim_helpers import KEY, OTHER_KEY, PNG, Api, PingbackReceiver, Submission, kind_id, kind_params, make_png

FAST = 3000.0
ROOT = Path(__file__).resolve().parents[1]
REAL_PNG = make_png()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def solved(api: Api, sub: Submission, **kw: object) -> tuple[str, dict[str, object]]:
    """Submits with json=1 and waits: the task id and the JSON answer."""
    reply = await api.submit(sub, **kw)
    assert reply.json["status"] == 1, reply.text
    answer = await api.wait(reply.request)
    assert answer.json["status"] == 1, answer.text
    return str(reply.request), answer.json


# ---------------------------------------------------------------------------------------------------------------
# Fix 7 (and 2): both reply forms, for every kind
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
async def test_plain_form_carries_what_the_json_form_does(session: aiohttp.ClientSession, kind: Kind) -> None:
    async with SimulatorServer(SimConfig(speed=FAST, seed=4)) as srv:
        api = Api(session, srv.url)
        sub = kind_params(kind)
        submitted = await api.submit(sub, json_mode=False)
        assert submitted.content_type == "text/plain" and re.fullmatch(r"OK\|\d+", submitted.text), submitted.text
        task_id = submitted.text[3:]
        plain = await api.wait(task_id, json_mode=False)
        as_json = (await api.get(task_id)).json
        assert plain.content_type == "text/plain"
        if kind.shape is AnswerShape.TOKEN_WITH_UA:  # the answer first (split("|")[1] is the token), then the UA
            assert plain.text == f"OK|{as_json['request']}|{as_json['user_agent']}"
            assert as_json["result"] == as_json["request"] and "|" not in str(as_json["request"])
        else:
            assert plain.text == f"OK|{as_json['request']}"
            assert "user_agent" not in as_json


async def test_every_reply_of_res_php_has_a_plain_form(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(threads=3, balance=2.5, latency={"turnstile": Latency(100)})) as srv:
        api = Api(session, srv.url)
        task_id = (await api.submit(kind_params(methods.by_name("turnstile")))).request
        forms = {
            "threadsinfo": ("OK|3|1", {"status": 1, "request": "OK", "threads": 3, "working_threads": 1}),
            "getbalance": ("2.5", {"status": 1, "request": "2.5"}),
        }
        for action, (text, body) in forms.items():
            assert (await api.res(action, json_mode=False)).text == text
            assert (await api.res(action)).json == body
        for action in ("reportbad", "reportgood"):  # fix 3: both reports, as CaptchaAI documents them
            assert (await api.res(action, fields={"id": task_id}, json_mode=False)).text == "OK_REPORT_RECORDED"
            assert (await api.res(action, fields={"id": task_id})).json == {"status": 1,
                                                                            "request": "OK_REPORT_RECORDED"}
        assert (srv.stats().reportbad, srv.stats().reportgood) == (2, 2)


# ---------------------------------------------------------------------------------------------------------------
# Fix 4: JSON bodies; only a wrong key strikes
# ---------------------------------------------------------------------------------------------------------------


async def test_json_bodies_are_read(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST, ban_after=1)) as srv:
        url = f"{srv.url}/in.php"
        body = {"key": KEY, "json": 1, "method": "base64", "body": b64.b64encode(REAL_PNG).decode(),
                "numeric": 1, "min_len": 4, "max_len": 4, "soft_id": 4587, "header_acao": True, "extra": [1, {}]}
        async with session.post(url, json=body) as resp:
            reply = await resp.json()
            assert resp.content_type == "application/json" and reply["status"] == 1, reply
        answer = await Api(session, srv.url).wait(reply["request"], via="json")
        assert re.fullmatch(r"[0-9]{4}", answer.request)  # numbers became their text (numeric=1, 4 digits)
        grid = {"key": KEY, "json": 1, "method": "base64", "recaptcha": 1, "body": body["body"],
                "textinstructions": "Select all cars", "recaptcharows": 4, "recaptchacols": 4}
        async with session.post(url, json=grid) as resp:  # the npm client's grid() request
            task_id = (await resp.json())["request"]
        cells = json.loads((await Api(session, srv.url).wait(task_id)).request)
        assert all(1 <= c <= 16 for c in cells)
        for broken in (b"{not json", b"[1, 2]", b'"text"'):  # no usable body: as if it had no key, no strike
            async with session.post(url, params={"json": "1"}, data=broken,
                                    headers={"Content-Type": "application/json"}) as resp:
                assert (await resp.json())["request"] == "ERROR_WRONG_USER_KEY"
        assert srv.stats().ip_bans == 0


async def test_requests_without_a_key_do_not_ban_the_ip(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(ban_after=2, keys=frozenset({KEY}))) as srv:
        for _ in range(10):
            async with session.get(f"{srv.url}/res.php", params={"action": "getbalance", "json": "1"}) as resp:
                assert (await resp.json())["request"] == "ERROR_WRONG_USER_KEY"
        api = Api(session, srv.url)
        assert (await api.res("getbalance")).json["status"] == 1  # the good key still works
        assert (srv.stats().bad_key, srv.stats().ip_bans) == (10, 0)
        assert (await api.res("getbalance", key=OTHER_KEY)).request == "ERROR_KEY_DOES_NOT_EXIST"
        assert (await api.res("getbalance", key="short")).request == "ERROR_WRONG_USER_KEY"
        assert (await api.res("getbalance")).request == "IP_BANNED"  # two wrong keys do ban it
        assert srv.stats().ip_bans == 1


# ---------------------------------------------------------------------------------------------------------------
# Fix 5: solve.php
# ---------------------------------------------------------------------------------------------------------------


async def test_solve_php_answers_an_image_in_one_request(session: aiohttp.ClientSession) -> None:
    cfg = SimConfig(threads=1, latency={"image": Latency(0.3)})
    async with SimulatorServer(cfg) as srv:
        api = Api(session, srv.url)
        loop = asyncio.get_running_loop()
        started = loop.time()
        first, second = await asyncio.gather(  # one thread: the second waits for the first
            api.call("solve.php", {"method": "post", "numeric": "1"}, files={"file": REAL_PNG}),
            api.call("solve.php", {"method": "base64", "body": b64.b64encode(REAL_PNG).decode()}, via="form",
                     json_mode=False))
        assert loop.time() - started >= 0.6
        assert first.json["status"] == 1 and re.fullmatch(r"[0-9]+", first.json["request"])
        assert re.fullmatch(r"OK\|[a-z0-9]+", second.text)
        assert (await api.call("solve.php", {"method": "turnstile", "sitekey": "x", "pageurl": "https://a"})
                ).request == "ERROR_BAD_PARAMETERS"  # one-request solving is for images only
        assert (await api.call("solve.php", {"method": "post"}, files={"file": b"tiny"})
                ).request == "ERROR_ZERO_CAPTCHA_FILESIZE"
        stats = srv.stats()
        assert (stats.calls["solve.php"], stats.submitted, stats.solved, stats.max_in_flight) == (4, 2, 2, 1)


async def test_solve_php_reports_unsolvable(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST, faults=Faults(unsolvable=1.0))) as srv:
        reply = await Api(session, srv.url).call("solve.php", {"method": "post"}, files={"file": REAL_PNG})
        assert reply.request == "ERROR_CAPTCHA_UNSOLVABLE"


# ---------------------------------------------------------------------------------------------------------------
# Fix 6: image checks
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("filename", "data", "code"), [
    ("captcha.png", REAL_PNG, None),
    ("CAPTCHA.JPEG", b"\xff\xd8\xff\xe0" + bytes(200), None),
    ("c.gif", b"GIF89a" + bytes(200), None),
    ("x.png", make_png(4, 2), Code.ERROR_ZERO_CAPTCHA_FILESIZE),  # a real PNG of ~60 bytes
    ("x.txt", b"hello, this is a text file " * 10, Code.ERROR_WRONG_FILE_EXTENSION),
    ("x.png", b"hello, this is a text file " * 10, Code.ERROR_IMAGE_TYPE_NOT_SUPPORTED),
    ("x.bmp", b"BM" + bytes(300), Code.ERROR_WRONG_FILE_EXTENSION),
    ("noextension", b"BM" + bytes(300), Code.ERROR_IMAGE_TYPE_NOT_SUPPORTED),
])
async def test_uploaded_images_are_checked(session: aiohttp.ClientSession, filename: str, data: bytes,
                                           code: str | None) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        reply = await Api(session, srv.url).call("in.php", {"method": "post"}, files={"file": (filename, data)})
        if code is None:
            assert reply.json["status"] == 1, reply.text
        else:
            assert reply.request == code and reply.json["error_text"] == codes.server_text(code)


async def test_base64_and_bls_images_are_checked(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)

        async def body(data: bytes, prefix: str = "") -> str:
            fields = {"method": "base64", "body": prefix + b64.b64encode(data).decode()}
            return str((await api.call("in.php", fields, via="form")).request)

        assert (await body(REAL_PNG, "data:image/png;base64,")).isdigit()
        assert await body(make_png(4, 2)) == "ERROR_ZERO_CAPTCHA_FILESIZE"
        assert await body(b"plain text, not an image " * 10) == "ERROR_IMAGE_TYPE_NOT_SUPPORTED"
        assert await body(REAL_PNG, "data:image/bmp;base64,") == "ERROR_IMAGE_TYPE_NOT_SUPPORTED"
        bls = kind_params(methods.by_name("bls"))
        bls.fields["image_base64_3"] = "data:image/png;base64," + b64.b64encode(b"text " * 40).decode()
        assert (await api.submit(bls)).request == "ERROR_IMAGE_TYPE_NOT_SUPPORTED"


async def test_image_size_limits_are_settings(session: aiohttp.ClientSession) -> None:
    """The old docs said 100 B .. 100 kB, the current ones 1 KB .. 1024 KB: both are settings."""
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        small = PNG[:16] + bytes(500)
        assert str((await api.call("in.php", {"method": "post"}, files={"file": small})).request).isdigit()
        patch = await api.sim("config", {"min_image_bytes": 1024, "max_image_bytes": 100 * 1024})
        assert patch.status == 200 and patch.json["min_image_bytes"] == 1024
        assert (await api.call("in.php", {"method": "post"}, files={"file": small})
                ).request == "ERROR_ZERO_CAPTCHA_FILESIZE"
        big = PNG[:16] + bytes(100 * 1024)
        assert (await api.call("in.php", {"method": "post"}, files={"file": big})
                ).request == "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
        bad = await api.sim("config", {"min_image_bytes": 10, "max_image_bytes": 5})
        assert bad.status == 400 and "min_image_bytes" in bad.json["error"]


# ---------------------------------------------------------------------------------------------------------------
# Fix 8: the spellings CaptchaAI accepts, and the documented error for the others
# ---------------------------------------------------------------------------------------------------------------


async def test_grid_spellings_of_captchaai_examples(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST, seed=2)) as srv:
        api = Api(session, srv.url)
        image = b64.b64encode(REAL_PNG).decode()
        # CaptchaAI's grid example: method=post, a base64 body, recaptcha=1, textinstructions (3x3 by default)
        example = Submission({"method": "post", "body": image, "recaptcha": "1", "textinstructions": "cars"}, {},
                             "form")
        # 2captcha-python's grid(): a file upload with recaptcharows/recaptchacols
        upload = Submission({"method": "post", "recaptcha": "1", "recaptcharows": "4", "recaptchacols": "4",
                             "textinstructions": "bikes"}, {"file": REAL_PNG})
        seen: dict[str, set[int]] = {"example": set(), "upload": set()}
        for _ in range(6):
            for name, sub in (("example", example), ("upload", upload)):
                _, answer = await solved(api, sub)
                cells = json.loads(str(answer["request"]))  # indices, never an image's text
                assert cells == sorted(set(cells))
                seen[name].update(cells)
        assert max(seen["example"]) <= 9 < max(seen["upload"]) <= 16
        five = Submission({**upload.fields, "recaptcharows": "5", "recaptchacols": "5"}, upload.files)
        assert (await api.submit(five)).request == "ERROR_BAD_PARAMETERS"
        no_text = Submission({"method": "post", "recaptcha": "1"}, {"file": REAL_PNG})
        assert (await api.submit(no_text)).request == "ERROR_BAD_PARAMETERS"  # instructions are required


def test_queued_tasks_in_captchaai_grid_spelling_validate_as_grids() -> None:
    """The worker sends a task's params as they are; the methods table reads the same spellings as the simulator,
    so such a task is a grid (its metric label, its poll schedule) and is not dead-lettered for a missing param."""
    params = {"body": "iVBOR", "recaptcha": "1", "textinstructions": "cars"}
    for method in ("base64", "post"):
        kind = methods.kind_of(method, params)
        assert kind is not None and kind.name == "grid"
        missing = methods.missing_param(kind, {**params, "file": "x"})
        assert missing is None, missing
    assert methods.missing_param(methods.by_name("grid"), {"body": "x", "recaptcha": "1"}) is not None
    assert methods.canonical("turnstile", {"recaptcha": "1"}) == {"recaptcha": "1"}  # only image methods


@pytest.mark.parametrize("fields", [
    {"method": "geetest_v4", "captcha_id": "c" * 32, "pageurl": "https://a.example"},  # 2captcha's v4 spelling
    {"method": "hcaptcha", "sitekey": "x", "pageurl": "https://a.example"},
    {"method": "textcaptcha", "textcaptcha": "2 + 2?"},
])
async def test_other_services_spellings_get_the_documented_error(session: aiohttp.ClientSession,
                                                                 fields: dict[str, str]) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        assert (await api.call("in.php", fields)).request == "ERROR_BAD_PARAMETERS"
        assert (await api.call("in.php", fields, json_mode=False)).text == "ERROR_BAD_PARAMETERS"
        v4 = {"method": "geetest", "version": "4", "gt": "c" * 32, "pageurl": "https://a.example"}
        _, answer = await solved(api, Submission(v4, {}))  # CaptchaAI's own v4 spelling
        assert json.loads(str(answer["request"]))["captcha_id"] == "c" * 32


# ---------------------------------------------------------------------------------------------------------------
# Fix 9: soft_id, header_acao, pingback
# ---------------------------------------------------------------------------------------------------------------


async def test_soft_id_and_header_acao(session: aiohttp.ClientSession) -> None:
    async with SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        sub = kind_params(methods.by_name("turnstile"))
        plain = await api.submit(sub)
        assert "Access-Control-Allow-Origin" not in plain.headers
        sub.fields.update(soft_id="4580", header_acao="1")
        with_acao = await api.submit(sub)
        assert with_acao.json["status"] == 1 and with_acao.headers["Access-Control-Allow-Origin"] == "*"
        for reply in (await api.get(with_acao.request, query={"header_acao": "1"}),
                      await api.res("getbalance", query={"header_acao": "1"}),
                      await api.get("nonsense", query={"header_acao": "1"})):
            assert reply.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize("name", ["turnstile", "recaptcha_v2_enterprise", "geetest"])
async def test_pingback_is_called_when_solved(session: aiohttp.ClientSession, name: str) -> None:
    async with PingbackReceiver() as receiver, SimulatorServer(SimConfig(speed=FAST)) as srv:
        api = Api(session, srv.url)
        sub = kind_params(methods.by_name(name))
        sub.fields["pingback"] = receiver.url + "?tenant=7"
        reply = await api.submit(sub)
        assert reply.json["status"] == 1
        hit, = await receiver.wait(1)  # nobody polls: the tick completes the task and calls back
        answer = (await api.get(reply.request)).json
        expected = {"tenant": "7", "id": str(reply.request), "code": answer["request"]}
        if "user_agent" in answer:
            expected["user_agent"] = str(answer["user_agent"])
        assert hit == expected
        assert srv.stats().pingbacks_sent == 1


async def test_pingback_outcomes(session: aiohttp.ClientSession) -> None:
    async with PingbackReceiver(status=500) as failing, PingbackReceiver() as receiver:
        async with SimulatorServer(SimConfig(speed=FAST, faults=Faults(unsolvable=1.0))) as srv:
            api = Api(session, srv.url)
            sub = kind_params(methods.by_name("turnstile"))
            sub.fields["pingback"] = receiver.url
            task_id = (await api.submit(sub)).request
            hit, = await receiver.wait(1)
            assert hit == {"id": str(task_id), "code": "ERROR_CAPTCHA_UNSOLVABLE"}
            sub.fields["pingback"] = failing.url
            await api.submit(sub)
            await failing.wait(1)
            for _ in range(50):
                if srv.stats().pingbacks_failed:
                    break
                await asyncio.sleep(0.02)
            assert (srv.stats().pingbacks_sent, srv.stats().pingbacks_failed) == (1, 1)
            for bad in ("ftp://127.0.0.1/x", "not a url", "http://", "http://127.0.0.1:99999/"):
                sub.fields["pingback"] = bad
                assert (await api.submit(sub)).request == "ERROR_BAD_PARAMETERS", bad
            await api.sim("config", {"pingback": False, "faults": {"unsolvable": 0}})
            sub.fields["pingback"] = receiver.url
            task_id = (await api.submit(sub)).request
            assert (await api.wait(task_id)).json["status"] == 1
            await asyncio.sleep(0.7)  # longer than a tick
            assert len(receiver.hits) == 1  # accepted, never called


# ---------------------------------------------------------------------------------------------------------------
# TLS, and the simulator as a process (fix 10: its log lines)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A CA and a certificate for 127.0.0.1 signed by it: (ca.pem, server.pem with its key)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    path = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(path / "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(path / "server.pem"))
    yield path / "ca.pem", path / "server.pem"


async def test_tls(certificate: tuple[Path, Path]) -> None:
    ca, server = certificate
    client_ctx = ssl.create_default_context(cafile=str(ca))
    async with SimulatorServer(SimConfig(), tls=tls_context(str(server))) as srv:
        assert srv.url.startswith("https://127.0.0.1:")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as s:
            assert (await Api(s, srv.url).res("getbalance")).json["status"] == 1
        async with aiohttp.ClientSession() as s:  # the system's CAs do not know this one
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await Api(s, srv.url).res("getbalance")
    with pytest.raises(ValueError, match="cannot load the TLS certificate"):
        tls_context(str(ca.parent / "missing.pem"))


def test_simulator_process_logs_structured_lines(certificate: tuple[Path, Path]) -> None:
    ca, server = certificate
    cli = [sys.executable, "-m", "captcha_worker.cli"]
    bad = subprocess.run([*cli, "simulator", "--tls-cert", str(ca.parent / "missing.pem")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "TLS" in bad.stderr
    proc = subprocess.Popen([*cli, "simulator", "--port", "0", "--keys", KEY, "--ban-after", "2",
                             "--tls-cert", str(server)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "LOG_LEVEL": "info"})
    try:
        assert proc.stdout is not None
        url = re.search(r"https://\S+", proc.stdout.readline())
        assert url, "no URL printed"
        asyncio.run(_hit_process(url.group(0), ca))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    # read through the same buffered streams readline() used: communicate() reads the raw pipes and would lose
    # whatever readline() had already buffered past the first line
    out, err = proc.stdout.read(), (proc.stderr.read() if proc.stderr else "")
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    events = {line["event"]: line for line in lines}
    assert events["simulator.started"]["keys"] == 1 and events["simulator.started"]["url"] == url.group(0)
    assert events["simulator.ip_banned"]["ip"] == "127.0.0.1" and events["simulator.ip_banned"]["strikes"] == 2
    assert events["simulator.config_changed"]["changed"] == ["threads"]
    assert "simulator.reset" in events and "simulator.stopped" in events
    assert all(line["logger"].startswith("captcha_worker") and line["level"] for line in lines)
    assert KEY not in out + err and "ZYXW" not in out + err


async def _hit_process(url: str, ca: Path) -> None:
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(ca)))
    async with aiohttp.ClientSession(connector=connector) as s:
        api = Api(s, url)
        assert (await api.res("getbalance")).json["status"] == 1
        await api.sim("config", {"threads": 4})
        await api.sim("reset")
        for _ in range(2):
            await api.res("getbalance", key=OTHER_KEY)
        assert (await api.res("getbalance")).request == "IP_BANNED"


def test_protocol_needs_no_simulator_state() -> None:
    """The gateway imports the protocol module: it must not reach into the simulator's state."""
    source = Path(protocol.__file__).read_text()
    imports = set(re.findall(r"^from (\S+) import|^import (\S+)", source, re.M))
    modules = {a or b for a, b in imports}
    assert not {m for m in modules if m.startswith("captcha_worker.simulator")}, modules
    assert modules <= {"__future__", "enum", "json", "re", "collections.abc", "dataclasses", "typing", "aiohttp",
                       "captcha_worker", "captcha_worker.codes", "captcha_worker.methods"}, modules


def test_every_code_the_simulator_answers_is_marked_simulated() -> None:
    simulator = Path(protocol.__file__).parents[1] / "simulator"
    used = set()
    for path in [*simulator.glob("*.py"), Path(protocol.__file__)]:  # the simulator and the v1 protocol it speaks
        used |= set(re.findall(r"Code\.([A-Z_0-9]+)", path.read_text()))
    used |= {p.missing_error for k in KINDS for p in k.required}
    simulated = {c.value for c in Code if c.row.simulated and c.row.origin is codes.Origin.API}
    assert used == simulated, used ^ simulated

