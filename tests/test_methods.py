"""The kinds table: one meaning per name, and the lookups that depend on it."""

from __future__ import annotations

import dataclasses

import pytest

from captcha_worker import methods
from captcha_worker.methods import KINDS, AnswerShape, kind_of, truthy


def test_rows_are_identified_by_name_and_method() -> None:
    rows = [(k.name, k.method) for k in KINDS]
    assert len(rows) == len(set(rows))


def test_the_rows_of_one_type_differ_only_in_how_the_image_is_sent() -> None:
    """`by_name` hands out a type's first row (planner, simulator latency, token lifetimes): that is only right
    while the variants of a type agree on everything but the method, its title and the image parameter."""
    seen: dict[str, methods.Kind] = {}
    for k in KINDS:
        first = seen.setdefault(k.name, k)
        if first is k:
            continue
        assert k.method != first.method
        image = {"body", "file"}
        assert [p for p in k.required if p.name not in image] == [p for p in first.required if p.name not in image]
        same = {f.name for f in dataclasses.fields(methods.Kind)} - {"method", "title", "required"}
        assert {n: getattr(k, n) for n in same} == {n: getattr(first, n) for n in same}, k.name
    assert {n for n in seen if sum(k.name == n for k in KINDS) > 1} == {"image", "grid"}


@pytest.mark.parametrize(("method", "params", "name"), [
    ("post", {}, "image"),
    ("base64", {}, "image"),
    ("post", {"grid_size": "3x3"}, "grid"),
    ("base64", {"recaptcha": "1"}, "grid"),
    ("userrecaptcha", {"version": "v3", "enterprise": "true"}, "recaptcha_v3_enterprise"),
    ("userrecaptcha", {"enterprise": "0"}, "recaptcha_v2"),
])
def test_kind_of_picks_the_row_of_the_method(method: str, params: dict[str, str], name: str) -> None:
    kind = kind_of(method, params)
    assert kind is not None
    assert (kind.name, kind.method) == (name, method)


def test_truthy_reads_captchaai_flags() -> None:
    assert [truthy(v) for v in ("1", " TRUE ", "yes", "on")] == [True] * 4
    assert [truthy(v) for v in (None, "", "0", "false", "no", "2")] == [False] * 6


def test_every_kind_has_an_answer_shape() -> None:
    assert {k.shape for k in KINDS} == set(AnswerShape)
