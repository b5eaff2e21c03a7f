"""Four real CaptchaAI client libraries against the simulator, every call each offers for a CaptchaAI kind
(tests/clients/compat.py runs them and judges every answer): each call works, or fails exactly the way
docs/compatibility.md says (the client's own bug, or another service's API), and that page is what this run
produces."""

from __future__ import annotations

import pytest

from captcha_worker import methods
from tests.clients import compat

pytestmark = pytest.mark.integration  # four client libraries, every call each offers (~15 s)


async def test_client_libraries_against_the_simulator() -> None:
    missing = compat.missing_tools()
    if missing:
        pytest.fail(f"client libraries not installed ({', '.join(missing)}): run scripts/install-tools.sh "
                    "--only clients (make test does)")
    rows = await compat.run_all()
    unexpected = [f"{r.client.title}: {r.call}: {r.result}" for r in rows if not r.ok]
    assert not unexpected, "\n".join(unexpected)
    assert {c.title for c in compat.CLIENTS} == {r.client.title for r in rows}
    works = {r.kind for r in rows if r.result.startswith("works")}
    assert works >= set(methods.KIND_NAMES), set(methods.KIND_NAMES) - works  # every kind, by some client
    page = compat.render(rows)
    assert page == compat.DOC.read_text(), "docs/compatibility.md differs from this run: make compatibility"


def test_known_failures_are_recognised_only_as_described() -> None:
    """A known client bug that stops failing (or fails differently) is not silently kept as 'known'."""
    int_id = compat.KNOWN["python-rucaptcha", "CaptchaAI(profile='recaptcha-v2')"]
    assert int_id.matches({"ok": False, "error": "19245785577"})
    assert not int_id.matches({"ok": False, "error": "ERROR_BAD_PARAMETERS"})
    assert not int_id.matches({"ok": True, "answer": "03A..."})
    v4 = compat.KNOWN["npm", "geetestV4({captcha_id, pageurl})"]
    assert v4.matches({"ok": False, "error": "APIError: ERROR_BAD_PARAMETERS"})
    assert not v4.matches({"ok": True, "answer": "{}"})
    callback = compat.KNOWN["2captcha-python", "TwoCaptcha(callback=URL).turnstile()"]
    assert callback.matches({"ok": True, "returned": None}) and not callback.matches({"ok": True, "task_id": "1"})
