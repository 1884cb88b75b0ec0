"""What the server does before a request reaches a route: a client is hostile until checked (docs/serve.md,
"Security").

- `Guard`, a plain ASGI middleware (Starlette's BaseHTTPMiddleware costs ~1 ms a request): the API key is checked
  from the headers before one byte of the body is read, on every path (/openapi.json too); a body is refused
  above MAX_BODY_BYTES (by its Content-Length at once, else as it arrives) and when it has not all arrived within
  BODY_SECONDS; the routes get it whole.
- `uvicorn_config`: connections that send no complete request headers within HEADER_SECONDS are closed (uvicorn
  itself waits for ever), idle keep-alive ones after KEEP_ALIVE_SECONDS, and at most `connection_cap()` are open
  at once (the others get a 503 at once), so that half-open connections cannot use up the process's files.
"""

import hmac
import json

import anyio

MAX_BODY_BYTES = 8 << 20  # a request body (a 128k-token prompt is ~0.5 MB of text)
BODY_SECONDS = 30.0  # to send a whole body once its headers are in
HEADER_SECONDS = 10.0  # to send a request's headers, from the connection (or the last answer) on
KEEP_ALIVE_SECONDS = 5  # an idle connection between two requests
SPARE_FILES = 64  # descriptors kept for the model, traces and logs beyond the connections


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


class Guard:
    def __init__(self, app, api_key: str | None = None, max_body: int = MAX_BODY_BYTES, body_seconds=None):
        self.app, self.max_body = app, max_body
        self.body_seconds = BODY_SECONDS if body_seconds is None else body_seconds
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.expected is not None and not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            message = "a valid API key is required (Authorization: Bearer KEY)"
            return await _refuse(send, 401, message, "authentication_error")
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return await _refuse(send, 413, self._too_big(length.decode("latin-1")[:20]))
        body = bytearray()
        try:
            with anyio.fail_after(self.body_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    body += message.get("body", b"")
                    if len(body) > self.max_body:
                        return await _refuse(send, 413, self._too_big("more"))
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            return await _refuse(send, 408, f"the request's body did not arrive within {self.body_seconds:g} s")
        return await self.app(scope, _replaying(bytes(body), receive), send)

    def _too_big(self, size: str) -> str:
        return f"the request's body is too large ({size} bytes): at most {self.max_body:,} bytes"


def _replaying(body: bytes, receive):
    """The body read here, then the client's own messages (a disconnect, which the routes listen for)."""
    given = False

    async def replay():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send, status: int, message: str, kind: str = "invalid_request_error") -> None:
    body = json.dumps(error_body(message, None, kind)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def connection_cap() -> int:
    """Connections open at once: what the process's open-file limit leaves (1,024 files: 960), at most 4,096."""
    try:
        import resource

        files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        files = 1024
    if files == -1 or files > 4096 + SPARE_FILES:  # RLIM_INFINITY
        return 4096
    return max(16, files - SPARE_FILES)


def uvicorn_config(app, host: str, port: int):
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedProtocol(H11Protocol):
        """uvicorn's h11 protocol, which closes a connection whose request headers are late."""

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_header_timer()
            if len(self.connections) > self.config.limit_concurrency:  # over the cap: not even a 503
                transport.close()

        def on_response_complete(self):
            super().on_response_complete()
            self._arm_header_timer()

        def connection_lost(self, exc):
            self._header_timer.cancel()
            super().connection_lost(exc)

        def _arm_header_timer(self):
            if getattr(self, "_header_timer", None) is not None:
                self._header_timer.cancel()
            waiting_since = self.scope  # the last request's scope: a new request replaces it
            self._header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_late, waiting_since)

        def _headers_late(self, waiting_since):
            if self.scope is waiting_since and not self.transport.is_closing():
                self.transport.close()

    return uvicorn.Config(app, host=host, port=port, log_level="warning", http=TimedProtocol,
                          limit_concurrency=connection_cap(), timeout_keep_alive=KEEP_ALIVE_SECONDS,
                          h11_max_incomplete_event_size=64 << 10)  # fmt: skip
