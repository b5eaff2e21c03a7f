"""TLS for this package's HTTP servers (the gateway, the simulator): a server context from PEM files."""

from __future__ import annotations

import ssl


def tls_context(cert_file: str, key_file: str | None = None) -> ssl.SSLContext:
    """A server TLS context from PEM files; ValueError with one line when they cannot be loaded."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS certificate {cert_file!r}: {exc.strerror or exc}") from None
    return context
