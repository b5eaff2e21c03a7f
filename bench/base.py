"""The benchmarks' two roots, imported by every bench module and importing none: where the repository is
(``ROOT``) and how a benchmark says what it does (``log``, to stderr). bench.common re-exports both."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
