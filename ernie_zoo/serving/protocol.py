"""The HTTP/1.1 connection handling under the app: uvicorn's httptools protocol with the edges a public server needs.

    connection accepted ─> over max_connections? ─> 503 too_many_connections, close
          │ header_timeout_s to send the request line and headers (each request), at most MAX_HEADER_BYTES
          │ body_timeout_s from the headers to the body's last byte
          v
    the app answers; the connection stays open for the next request (keep-alive) unless the answer says close

Every answer given here is JSON in the app's shape (`{"error": {"code", "message"}}`): 400 `bad_http_request`
(not parseable HTTP: a negative or non-numeric Content-Length, a bad header), 408 `header_timeout` /
`body_timeout`, 431 `headers_too_large` and 503 `too_many_connections`.

Closing is graceful. uvicorn closes a connection right after an answer that says `Connection: close` (a 413 for a
body too large, the answers above); if the client is still sending, the unread bytes make the kernel send a reset,
and the client sees "connection reset by peer" instead of the answer. Here the server sends the answer, half-closes
(FIN after the answer), then keeps reading and discarding what the client still sends, until the client closes
its side, `drain_timeout_s` passes or DRAIN_MAX_BYTES arrived, and only then closes. A connection that was idle
(its last request fully read) closes at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import ServeConfig

logger = logging.getLogger(__name__)
MAX_HEADER_BYTES = 64 * 1024  # request line + headers of one request
DRAIN_MAX_BYTES = 64 * 1024 * 1024  # most bytes read and discarded while closing gracefully


def error_bytes(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete `Connection: close` HTTP/1.1 answer with the app's JSON error body."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Transport:
    """The connection's transport as uvicorn sees it: `close()` closes gracefully (see the module docstring), and
    uvicorn's flow control cannot pause reading while the connection drains."""

    def __init__(self, transport: asyncio.Transport, protocol: ServeProtocol):
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        self._protocol.close_gracefully()

    def is_closing(self) -> bool:
        return self._protocol.closing or self._transport.is_closing()

    def pause_reading(self) -> None:
        if not self._protocol.closing:
            self._transport.pause_reading()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class ServeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a connection cap, header and body timeouts, a header size cap, JSON
    answers for the errors found below the app, and graceful closing. `ServeProtocol.limits` is set from the
    ServeConfig by `use_config` before the server starts (in each worker process too)."""

    limits: ServeConfig | None = None

    @classmethod
    def use_config(cls, config: ServeConfig) -> None:
        cls.limits = config

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        limits = self.limits
        self.max_connections = limits.max_connections if limits else None
        self.header_timeout_s = limits.header_timeout_s if limits else None
        self.body_timeout_s = limits.body_timeout_s if limits else None
        self.drain_timeout_s = limits.drain_timeout_s if limits else 5.0
        self.closing = False
        self._raw: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None  # the header or body deadline of the current request
        self._in_headers = False  # between a request's first byte and the end of its headers
        self._in_message = False  # between a request's first byte and the end of its body
        self._header_bytes = 0
        self._drained = 0

    # ------------------------------------------------------------------------------------------ connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            logger.warning(
                "connection refused: %d connections open (max_connections)", len(self.connections) - 1
            )
            # The client will send a request: read and discard it while it reads the answer.
            self._in_message = True
            self._answer(
                503,
                "Service Unavailable",
                "too_many_connections",
                f"the server holds {self.max_connections} connections (max_connections); retry shortly",
            )
            return
        self._start_timer(self.header_timeout_s, self._header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            self._drained += len(data)
            if self._drained > DRAIN_MAX_BYTES and self._raw is not None:
                self._raw.close()
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._answer(400, "Bad Request", "bad_http_request", f"the request is not valid HTTP/1.1: {exc}")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_headers:
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._answer(
                    431,
                    "Request Header Fields Too Large",
                    "headers_too_large",
                    f"the request line and headers exceed {MAX_HEADER_BYTES} bytes",
                )

    def send_400_response(self, msg: str) -> None:
        self._answer(400, "Bad Request", "bad_http_request", msg)

    # ------------------------------------------------------------------------------------- parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = self._in_message = True
        self._header_bytes = 0
        if self._timer is None:  # the first request's deadline runs from the connection's start
            self._start_timer(self.header_timeout_s, self._header_timeout)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._cancel_timer()
        super().on_headers_complete()
        self._start_timer(self.body_timeout_s, self._body_timeout)

    def on_message_complete(self) -> None:
        self._in_message = False
        self._cancel_timer()
        super().on_message_complete()

    # -------------------------------------------------------------------------------------------- timeouts
    def _start_timer(self, seconds: float | None, callback: Any) -> None:
        self._cancel_timer()
        if seconds is not None and not self.closing:
            self._timer = self.loop.call_later(seconds, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_timeout(self) -> None:
        self._timer = None
        if not self._in_message:  # connected, sent nothing: nobody waits for an answer
            self.close_gracefully()
            return
        self._answer(
            408,
            "Request Timeout",
            "header_timeout",
            f"the request headers did not arrive within {self.header_timeout_s:g} s (header_timeout_s)",
        )

    def _body_timeout(self) -> None:
        self._timer = None
        self._answer(
            408,
            "Request Timeout",
            "body_timeout",
            f"the request body did not arrive within {self.body_timeout_s:g} s (body_timeout_s)",
        )

    # ------------------------------------------------------------------------------------------- answering
    def _answer(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer the request being read with a JSON error and close the connection gracefully. If the app is
        already answering it, its answer stands and the connection closes after it; if the app has answered
        it (without reading the whole body), the connection just closes."""
        cycle = self.cycle
        if self._in_headers or cycle is None:  # a request the app has not seen
            answer = True
        elif not cycle.response_complete:
            if cycle.response_started:
                cycle.keep_alive = False
                return
            # The app is still reading this request: it now receives a disconnect, and whatever it answers is
            # dropped (uvicorn writes nothing for a disconnected cycle).
            cycle.disconnected = True
            cycle.message_event.set()
            answer = True
        else:
            answer = False
        if answer and self._raw is not None and not self._raw.is_closing():
            logger.info("%s %s: %s", status, code, message)
            self._raw.write(error_bytes(status, reason, code, message))
        self.close_gracefully()

    def close_gracefully(self) -> None:
        """Half-close after what was written; drain what the client still sends (bounded), then close."""
        if self.closing or self._raw is None:
            return
        self.closing = True
        self._cancel_timer()
        raw = self._raw
        if not self._in_message or raw.is_closing():  # idle: nothing more is coming
            raw.close()
            return
        try:
            raw.write_eof()
        except (NotImplementedError, RuntimeError, OSError):
            raw.close()
            return
        raw.resume_reading()
        self.loop.call_later(self.drain_timeout_s, raw.close)


__all__ = ["DRAIN_MAX_BYTES", "MAX_HEADER_BYTES", "ServeProtocol", "error_bytes"]
