"""Structured JSON logs: one line per event on stdout, with secrets scrubbed.

``event(logger, "task_solved", id=..., kind=...)`` writes ``{"ts": ..., "level": "info", "event":
"task_solved", "id": ..., "kind": ...}``.  A filter replaces every registered secret (API key, Redis password)
and anything shaped like URL credentials (``user:pass@host``) before the line is written, as a safety net:
the code never passes tokens, params or keys to the logger in the first place.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from collections.abc import Iterable
from typing import Any

_CREDENTIALS = re.compile(r"(?<![\w.-])([\w.%+-]+):([^\s@/:]+)@(?=[\w.-])")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def add(self, secret: str) -> None:
        """Scrub `secret` too from now on (a key reloaded while running)."""
        if len(secret) >= 4 and secret not in self._secrets:
            self._secrets = sorted({*self._secrets, secret}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return _CREDENTIALS.sub(r"\1:***@", text) if "@" in text else text


class JsonFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            data["error_type"] = record.exc_info[0].__name__
        return self._redact(json.dumps(data, default=str, separators=(",", ":")))


_active = [Redactor()]  # the redactor of the configured logs (setup replaces it)


def add_secret(secret: str) -> None:
    """Register one more secret with the configured logs' redactor (a key reloaded while running)."""
    _active[0].add(secret)


def redact(text: str) -> str:
    """Scrub text the way log lines are scrubbed (registered secrets, URL credentials): for text that is stored
    or shown outside the logs (dead-letter views)."""
    return _active[0](text)


def setup(level: str = "info", secrets: Iterable[str] = (), stream: Any = None) -> None:
    redactor = _active[0] = Redactor(secrets)
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(JsonFormatter(redactor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"fields": fields})



class RequestErrorLogger(logging.LoggerAdapter[logging.Logger]):
    """Logger for aiohttp's request handler (the simulator's, the gateway's). aiohttp logs a malformed request with
    an exception whose message quotes the request line (``/in.php?key=...``): only the exception type and where it
    was raised get out, as the event `name`."""

    def __init__(self, logger: logging.Logger, name: str) -> None:
        super().__init__(logger, {})
        self.event_name = name

    def log(self, level: int, msg: object, *args: object, **kwargs: object) -> None:
        exc = kwargs.get("exc_info")
        error = exc if isinstance(exc, BaseException) else None
        where = ""
        if error is not None and error.__traceback__ is not None:
            frame = traceback.extract_tb(error.__traceback__)[-1]
            where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
        event(self.logger, self.event_name, level, error=type(error).__name__ if error else None, at=where or None)
