"""The one seam's error mapping (cronoq.apiserver, issue 52): what the API server refused, as
cronoq's own error types, through both transports (the blocking client of the worker, the client
library and the CLI; the operator's aiohttp session), against a real loopback HTTP server that
answers as the API server does — a Status body, its causes, a Retry-After header."""
from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cronoq.apiserver import errors
from cronoq.apiserver.aio import ApiSession, timeout
from cronoq.apiserver.config import Connection
from cronoq.apiserver.errors import ApiError, Conflict, Forbidden, Gone, NotFound, Refused, Throttled
from cronoq.apiserver.sync import Api

QUOTA = "exceeded quota: q, requested: count/jobs.batch=1, used: count/jobs.batch=2, limited: count/jobs.batch=2"
INVALID = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
           "message": 'TaskPool.cronoq.io "p" is invalid: spec.concurrency: Invalid value: 0: should be >= 1',
           "details": {"name": "p", "group": "cronoq.io", "kind": "TaskPool",
                       "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: 0: should be >= 1",
                                   "field": "spec.concurrency"}]}}


def status(code: int, reason: str, message: str | None = None, **more: Any) -> dict[str, Any]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, **more}
    if message is not None:
        body["message"] = message
    return body


ANSWERS: dict[str, tuple[int, dict[str, str], Any]] = {
    "/throttled": (429, {"Retry-After": "7"}, status(429, "TooManyRequests", "Too many requests, please try again later.")),
    "/throttled-no-hint": (429, {}, status(429, "TooManyRequests")),
    "/missing": (404, {}, status(404, "NotFound", 'tasks.cronoq.io "x" not found')),
    "/changed": (409, {}, status(409, "Conflict", "the object has been modified; please apply your changes")),
    "/invalid": (422, {}, INVALID),
    "/quota": (403, {}, status(403, "Forbidden", QUOTA)),
    "/expired": (410, {}, status(410, "Expired", "continue token expired", metadata={"continue": "fresh-token"})),
    "/unavailable": (503, {"Retry-After": "2"}, "<html>503 Service Unavailable</html>"),
    "/ok": (200, {}, {"kind": "Task", "metadata": {"name": "x"}}),
}


class Loopback(http.server.ThreadingHTTPServer):
    """An API server that answers each path as ANSWERS says, and a watch with one event then an
    ERROR event (410, the version is gone)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?")[0]
        if path == "/watch":
            lines = [{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
                     {"type": "ERROR", "object": status(410, "Expired", "too old resource version: 5 (9)")}]
            data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
            return
        code, headers, body = ANSWERS[path]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/html" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET


@pytest.fixture(scope="module")
def server() -> Iterator[Loopback]:
    srv = Loopback()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def sync_call(server: Loopback, method: str, path: str) -> dict[str, Any]:
    return Api(Connection(host=server.host), retries=False).request(method, path, body={"spec": {}}, timeout=5)


def async_call(server: Loopback, method: str, path: str) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        session = ApiSession(Connection(host=server.host))
        try:
            return await session.request(method, path, timeout(total=5), body={"spec": {}})
        finally:
            await session.close()
    return asyncio.run(call())


TRANSPORTS = pytest.mark.parametrize("call", [sync_call, async_call], ids=["sync", "aio"])


@TRANSPORTS
def test_429_with_retry_after_is_throttled_for_that_long(server, call) -> None:
    with pytest.raises(Throttled) as raised:
        call(server, "POST", "/throttled")
    assert (raised.value.status, raised.value.retry_after) == (429, 7.0)
    assert raised.value.message == "Too many requests, please try again later."
    with pytest.raises(Throttled) as unhinted:
        call(server, "GET", "/throttled-no-hint")
    assert unhinted.value.retry_after is None


@TRANSPORTS
def test_404_is_not_found_and_409_a_conflict(server, call) -> None:
    with pytest.raises(NotFound) as missing:
        call(server, "GET", "/missing")
    assert missing.value.message == 'tasks.cronoq.io "x" not found'
    with pytest.raises(Conflict) as changed:
        call(server, "PUT", "/changed")
    assert changed.value.message.startswith("the object has been modified")


@TRANSPORTS
def test_422_with_causes_is_refused_naming_the_field(server, call) -> None:
    with pytest.raises(Refused) as refused:
        call(server, "POST", "/invalid")
    assert refused.value.field == "spec.concurrency"
    assert refused.value.message == INVALID["message"]
    assert refused.value.retry_after is None  # a refusal is not retried sooner or later


@TRANSPORTS
def test_403_is_forbidden_with_the_servers_words(server, call) -> None:
    with pytest.raises(Forbidden) as forbidden:
        call(server, "POST", "/quota")
    assert forbidden.value.message == QUOTA
    assert str(forbidden.value) == f"403 Forbidden: {QUOTA}"


@TRANSPORTS
def test_410_is_gone_with_the_token_to_go_on_from(server, call) -> None:
    with pytest.raises(Gone) as gone:
        call(server, "GET", "/expired")
    assert gone.value.fresh_continue == "fresh-token"


@TRANSPORTS
def test_any_other_status_is_an_api_error_with_its_reason_when_the_body_is_no_status(server, call) -> None:
    with pytest.raises(ApiError) as unavailable:
        call(server, "GET", "/unavailable")
    err = unavailable.value
    assert type(err) is ApiError
    assert (err.status, err.message, err.retry_after) == (503, "Service Unavailable", 2.0)
    assert errors.server_message(err) is None


@TRANSPORTS
def test_a_2xx_answer_is_its_json(server, call) -> None:
    assert call(server, "GET", "/ok") == {"kind": "Task", "metadata": {"name": "x"}}


def test_an_error_event_of_a_watch_raises_its_error_after_the_events_before_it(server) -> None:
    seen = []
    with pytest.raises(Gone) as gone:
        for event in Api(Connection(host=server.host), retries=False).watch("/watch", {"resourceVersion": "4"}):
            seen.append(event["object"]["metadata"]["name"])
    assert seen == ["a"]
    assert gone.value.message == "too old resource version: 5 (9)"


@pytest.mark.parametrize("header, seconds", [("3", 3.0), ("0.5", 0.5), ("-1", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", None),
                                             ("inf", None)])
def test_retry_after_reads_seconds_only(header, seconds) -> None:
    assert errors.error_of(429, "Too Many Requests", "", {"retry-after": header}).retry_after == seconds


def test_retry_after_is_only_for_throttling_and_server_errors() -> None:
    assert errors.error_of(404, "Not Found", "", {"Retry-After": "3"}).retry_after is None
    assert errors.error_of(500, "Internal Server Error", "", {"Retry-After": "3"}).retry_after == 3.0
