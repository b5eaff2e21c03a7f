"""What the transport faults send instead of an answer: a TCP reset, nginx's 502 page, an HTML page that is
neither JSON nor a protocol answer."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Mapping
from contextlib import suppress
from types import MappingProxyType
from typing import Final

from aiohttp import web

from captcha_worker.simulator.config import Fault

HTML_502: Final = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
HTML_GARBAGE: Final = (
    "<!DOCTYPE html><html><head><title>Just a moment...</title></head>"
    "<body><p>Service temporarily unavailable, please try again.</p></body></html>"
)

#: drawn per request, in this order, before the request has any effect
TRANSPORT_FAULTS: Final = (Fault.RESET, Fault.HTML502, Fault.NONJSON)


def reset_connection(request: web.Request) -> web.Response:
    """Aborts the connection with a TCP RST; the response returned is never sent."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=500)


FAULT_RESPONSES: Final[Mapping[Fault, Callable[[web.Request], web.Response]]] = MappingProxyType({
    Fault.RESET: reset_connection,
    Fault.HTML502: lambda _r: web.Response(status=502, text=HTML_502, content_type="text/html"),
    Fault.NONJSON: lambda _r: web.Response(text=HTML_GARBAGE, content_type="text/html"),
})
