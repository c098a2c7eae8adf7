"""The collector's endpoint in tests: basic-auth headers, web config files, a GET that returns refusals too."""

from __future__ import annotations

import base64
import http.client
import ssl
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

PASSWORD = "s3cret"
REFUSED = (OSError, http.client.HTTPException)
"""What a client sees when the TLS handshake refuses it: an SSL error, a reset, or (TLS 1.3,
where the client finishes first) a connection closed before any answer. URLError is an OSError."""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def get(
    url: str, authorization: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()
