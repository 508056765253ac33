"""Plain HTTP GETs answered in the websocket handshake hook: the browser client, ``/healthz``,
``/metrics``. Every other path that is not ``/ws`` gets 404."""

from __future__ import annotations

import email.utils
import http
import json
import mimetypes
from pathlib import Path

from websockets.datastructures import Headers
from websockets.http11 import Response

STATIC_DIR = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".html": "text/html; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": "application/json"}
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
                                "style-src 'self' 'unsafe-inline'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-cache"),
)


def response(status: int, body: bytes | str, content_type: str = "text/plain; charset=utf-8",
             extra_headers: tuple = ()) -> Response:
    """An HTTP response that closes the connection (the handshake hook serves one request)."""
    body = body.encode() if isinstance(body, str) else body
    status = http.HTTPStatus(status)
    headers = Headers([
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Connection", "close"),
        ("Content-Length", str(len(body))),
        ("Content-Type", content_type),
        *extra_headers,
    ])
    return Response(status.value, status.phrase, headers, body)


def static_file(path: str) -> Response:
    """``/`` → ``index.html``; ``/static/<name>`` → a file of :data:`STATIC_DIR` (no traversal)."""
    if path in ("/", "/index.html"):
        name = "index.html"
    elif path.startswith("/static/"):
        name = path.removeprefix("/static/")
    else:
        return response(404, f"not found: {path}\n")
    target = (STATIC_DIR / name).resolve()
    if STATIC_DIR not in target.parents or not target.is_file():
        return response(404, f"not found: {path}\n")
    content_type = CONTENT_TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    return response(200, target.read_bytes(), content_type, SECURITY_HEADERS)


def health(body: dict) -> Response:
    return response(200, json.dumps(body), "application/json")


def metrics(text: bytes) -> Response:
    return response(200, text, "text/plain; version=0.0.4; charset=utf-8")
