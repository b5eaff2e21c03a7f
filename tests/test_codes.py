"""The one table of codes (codes.py): its columns drive the client's taxonomy, the metric labels and the simulator,
and the docs that list codes agree with it."""

from __future__ import annotations

import argparse
import re

import pytest

from captcha_worker import captchaai, codes, methods, metrics
from captcha_worker.codes import Code, ErrorClass, Origin
from captcha_worker.simulator import add_arguments
from tests.helpers import ROOT


def test_each_row_is_named_after_its_wire_string() -> None:
    assert all(c.name == c.value for c in Code)
    assert Code.of("IP_BANNED") is Code.IP_BANNED and Code.of("ERROR_SOMETHING_NEW") is None
    assert Code.IP_BANNED == "IP_BANNED" and f"{Code.ERROR_ZERO_BALANCE}" == "ERROR_ZERO_BALANCE"


@pytest.mark.parametrize(("code", "cls"), [
    ("ERROR_IP_NOT_ALLOWED", ErrorClass.FATAL), ("MAX_USER_TURN", ErrorClass.CAPACITY),
    ("ERROR_TOO_MUCH_REQUESTS", ErrorClass.CAPACITY), ("HTTP_4XX", ErrorClass.TRANSIENT),
    ("CONNECTION_ERROR", ErrorClass.TRANSIENT), ("ERROR_INTERNAL_SERVER_ERROR", ErrorClass.TRANSIENT),
    ("ERROR_WRONG_CAPTCHA_ID", ErrorClass.TASK), ("SOLVE_TIMEOUT", ErrorClass.TASK),
    ("INVALID_JSON", ErrorClass.TASK), ("CAPCHA_NOT_READY", ErrorClass.TASK), ("X_UNKNOWN", ErrorClass.TASK),
])
def test_classes(code: str, cls: ErrorClass) -> None:
    assert codes.classify(code) is cls and captchaai.classify(code) is cls
    assert captchaai.api_error(code, "in").error_class is cls


def test_texts() -> None:
    assert captchaai.describe("ERROR_CAPTCHA_UNSOLVABLE") == "CaptchaAI could not solve this captcha"
    assert captchaai.describe("SOLVE_TIMEOUT") == "no answer within the solve time limit"
    assert captchaai.describe("ERROR_ZERO_BALANCE") == "CaptchaAI answered ERROR_ZERO_BALANCE"  # no text: generic
    assert codes.server_text("ERROR_WRONG_USER_KEY").startswith("The API key format is wrong")
    assert codes.server_text("ERROR_NEW") == "Error."
    for c in Code:  # every error the simulator can answer has an error_text of its own
        if c.row.simulated and c.row.origin is Origin.API and c.error_class is not None:
            assert c.row.server_text, c


def test_metric_labels_and_fatal_codes_come_from_the_table() -> None:
    assert metrics.FATAL_CODES == ("ERROR_WRONG_USER_KEY", "ERROR_KEY_DOES_NOT_EXIST", "IP_BANNED",
                                   "ERROR_IP_NOT_ALLOWED")
    assert metrics.code_label("ERROR_ZERO_BALANCE") == "ERROR_ZERO_BALANCE"
    assert metrics.code_label("MAX_USER_TURN") == "OTHER" and metrics.code_label("INVALID_TASK") == "OTHER"
    assert metrics.code_label("ERROR_BRAND_NEW") == "OTHER"
    assert all(c.row.label is False for c in Code if c.row.origin is Origin.RESULT)  # bounded: no task codes


CODE_NAME = re.compile(r"\b(?:ERROR_[A-Z_]+|IP_BANNED|MAX_USER_TURN)\b")
#: the classes whose table rows name every API code of the class (task failures are open-ended: "any other")
CLOSED = (ErrorClass.FATAL, ErrorClass.CAPACITY, ErrorClass.TRANSIENT)


def _api_codes(cls: ErrorClass) -> set[str]:
    return {c.value for c in Code if c.error_class is cls and c.row.origin is Origin.API}


def _architecture_rows() -> dict[ErrorClass, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    labels = {"fatal config": ErrorClass.FATAL, "capacity": ErrorClass.CAPACITY,
              "transient": ErrorClass.TRANSIENT, "task failure": ErrorClass.TASK}
    rows = {}
    for label, cls in labels.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label} |"))
        rows[cls] = set(CODE_NAME.findall(line.split("|")[2]))
    return rows


def _docstring_rows() -> dict[ErrorClass, set[str]]:
    """captchaai's docstring table: a row starts with the class name; its continuation lines are indented."""
    doc = captchaai.__doc__ or ""
    table = doc[doc.index("class  "):doc.index("Which code is in which class")]
    rows: dict[ErrorClass, set[str]] = {}
    current: ErrorClass | None = None
    for line in table.splitlines():
        head = line.split(" ", 1)[0]
        if head in ErrorClass.__members__:
            current = ErrorClass[head]
        if current is not None:
            rows.setdefault(current, set()).update(CODE_NAME.findall(line[:68]))
    return rows


@pytest.mark.parametrize("where", ["docs/architecture.md", "captchaai.py docstring"])
def test_the_taxonomy_tables_agree_with_the_code_table(where: str) -> None:
    rows = _architecture_rows() if where == "docs/architecture.md" else _docstring_rows()
    for cls, names in rows.items():
        wrong = {n for n in names if codes.classify(n) is not cls}
        assert not wrong, f"{where} lists {sorted(wrong)} as {cls.value}"
    for cls in CLOSED:
        missing = _api_codes(cls) - rows[cls]
        assert not missing, f"{where}: the {cls.value} row lacks {sorted(missing)} (codes.py has them)"
    assert len(rows[ErrorClass.TASK]) >= 2


def test_contracts_list_every_simulator_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = (ROOT / "docs" / "contracts.md").read_text()
    section = text[text.index("## Simulator"):text.index("## Redis keys")]
    flags = {opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")}
    missing = {f for f in flags - {"--help"} if f"`{f}" not in section and f" {f}" not in section}
    assert not missing, f"docs/contracts.md#simulator does not describe {sorted(missing)}"


def test_metrics_doc_lists_every_kind_label() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    assert all(f"`{name}`" in text for name in methods.KIND_NAMES), "a kind (method label) missing in metrics.md"
