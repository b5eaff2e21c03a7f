"""Hostile queue items, deterministic from a seed: bytes that are not UTF-8, JSON nested 100,000 deep, payloads
over the size limit, JSON with leading whitespace, JSON that is not an object, objects that are not tasks,
strings that look like task ids but name no task, and invalid tasks carrying planted secrets (proxy passwords,
cookies) that must never reach a dead letter in clear."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable

PLANTED = "PLANTEDs3cret"  # in every secret below; no dead letter, log line or CLI output may contain it


def _random_bytes(rng: random.Random, limit: int) -> bytes:
    return rng.randbytes(rng.randint(1, 300))


def _not_utf8(rng: random.Random, limit: int) -> bytes:
    head = json.dumps({"id": f"nu{rng.getrandbits(32)}", "method": "turnstile"}).encode()
    return head[:rng.randint(0, len(head))] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"])


def _deep(rng: random.Random, limit: int) -> bytes:
    depth = rng.choice([33, 1000, 100_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return (opener * depth + "1" + closer * depth * rng.randint(0, 1)).encode()[:limit]


def _too_large(rng: random.Random, limit: int) -> bytes:
    pad = "x" * (limit + rng.randint(1, 5000))
    return json.dumps({"id": f"big{rng.getrandbits(32)}", "method": "turnstile",
                       "params": {"sitekey": "s", "pageurl": "u", "pad": pad}}).encode()


def _not_an_object(rng: random.Random, limit: int) -> bytes:
    return json.dumps(rng.choice([[1, 2], "text", 3.5, None, True, [{"id": "x"}]])).encode()


def _spaced_invalid(rng: random.Random, limit: int) -> bytes:
    ws = "".join(rng.choice(" \t\r\n") for _ in range(rng.randint(1, 4)))
    return (ws + json.dumps({"id": f"sp{rng.getrandbits(32)}", "method": "nope", "params": {}})).encode()


def _id_like(rng: random.Random, limit: int) -> bytes:
    return ("".join(rng.choice(string.ascii_letters + string.digits + "._:-") for _ in range(rng.randint(1, 40)))
            ).encode()


def _bad_task(rng: random.Random, limit: int) -> bytes:
    base: dict[str, object] = {"id": f"bt{rng.getrandbits(40)}", "method": "turnstile",
                               "params": {"sitekey": "s", "pageurl": "https://e"}}
    breakage: dict[str, object] = rng.choice([
        {"method": rng.choice(["hcaptcha", "nope", "", 5])}, {"params": ["a"]}, {"params": {"sitekey": {"n": 1}}},
        {"params": {"sitekey": "s"}}, {"deadline": "soon"}, {"reply_to": "a b"}, {"id": "has space"},
        {"id": "x" * 200}, {"params": {"sitekey": "s", "pageurl": "u", "key": "x"}},
    ])
    base.update(breakage)
    return json.dumps(base).encode()


def _secrets(rng: random.Random, limit: int) -> bytes:
    """Invalid tasks (unknown method) holding secrets, as JSON, as truncated JSON and as plain text (a secret in a
    known shape, and a cookie and a bearer token of no shape a pattern could mask: issue 23, item 5)."""
    task = {"id": f"sec{rng.getrandbits(40)}", "method": "no_such_method",
            "params": {"proxy": f"bob:{PLANTED}@10.0.0.1:3128", "cookies": f"session={PLANTED}; a=b",
                       "pageurl": f"https://alice:{PLANTED}@example.com/login"}}
    text = json.dumps(task)
    return rng.choice([text, text[:-3], f"\xff proxy=bob:{PLANTED}@10.0.0.1 cookies={PLANTED}",
                       f"Cookie: sid={PLANTED}; theme=dark\r\nAuthorization: Bearer x{PLANTED}"]).encode(
        "utf-8", "surrogateescape")


GENERATORS: tuple[Callable[[random.Random, int], bytes], ...] = (
    _random_bytes, _not_utf8, _deep, _too_large, _not_an_object, _spaced_invalid, _id_like, _bad_task, _secrets,
    _random_bytes, _not_utf8, _bad_task,  # the cheap ones, more often
)


def payloads(n: int, *, seed: int, max_bytes: int, too_large_max: int = 20) -> list[bytes]:
    """n distinct hostile items; at most `too_large_max` over the size limit (they are big). Distinct, so that
    each must be one dead letter: a repeat of an id-like item would rightly be dropped as a known id instead."""
    rng = random.Random(seed)
    out: dict[bytes, None] = {}
    large = 0
    while len(out) < n:
        gen = rng.choice(GENERATORS)
        if gen is _too_large:
            if large >= too_large_max:
                continue
            large += 1
        out[gen(rng, max_bytes)] = None
    return list(out)
