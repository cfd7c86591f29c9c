"""Blocking JSON requests and watches to the API server over one pooled urllib3 connection manager:
what the pull worker, the task SDK's heartbeats, the client library, the CLI, the dashboard and the
bench send. Thread-safe (urllib3's pools are).

Plain JSON, not the generated kubernetes client: through it each call validated its arguments,
walked the body to serialise it, re-ran the credentials' refresh hook and built a typed model of an
answer that nobody read, and its watch parsed every event with the standard library's json — most
of a pull worker's CPU per task (docs/development/benchmarks.md, "Figures behind the code"). Bodies
and answers go through orjson. A non-2xx answer raises the error `errors.error_of` says it means,
an ERROR event of a watch too.
"""
from __future__ import annotations

import decimal
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson
import urllib3

from cronoq.apiserver.errors import error_of, event_error

if TYPE_CHECKING:
    from cronoq.apiserver.config import Connection

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
TOKEN_FRESH = 10.0
"""Seconds a bearer token is used before the connection is asked for it again (asking runs the
credentials' refresh hook, which sets their whole configuration again: too dear per request for a
worker); at once after a 401."""

SOCKS = ("socks5", "socks5h", "socks4", "socks4a")

Timeout = float | tuple[float | None, float | None] | None
"""Seconds for the whole request, or (connect, read) (None: no limit), or None (no limit)."""


def dumps(body: Any) -> bytes:
    """A request's body as JSON (times as ISO 8601, decimals as text, keys made text, as the kubernetes
    client wrote them)."""
    return orjson.dumps(body, default=_plain, option=orjson.OPT_NON_STR_KEYS)


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _timeout(seconds: Timeout) -> urllib3.Timeout | None:
    if seconds is None:
        return None
    if isinstance(seconds, tuple):
        return urllib3.Timeout(connect=seconds[0], read=seconds[1])
    return urllib3.Timeout(total=seconds)


class Api:
    """One API server, its connections pooled. `retries` as urllib3 takes them: None for its default
    (a few tries of a connection that failed, and of a GET answered 429 with a Retry-After, as the
    kubernetes client made them), False for none (callers that retry on their own schedule)."""

    def __init__(self, connection: Connection, *, user_agent: str | None = None, retries: Any = None,
                 pool_size: int | None = None, block: bool = False, token_fresh: float = TOKEN_FRESH,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from cronoq.apiserver.config import USER_AGENT

        self.connection = connection
        self.host = connection.host
        self.user_agent = user_agent or USER_AGENT
        self.retries = retries
        self.token_fresh = token_fresh
        self._clock = clock
        self._token: str | None = None
        self._token_read: float | None = None
        args: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED" if connection.verify else "CERT_NONE",
                                "ca_certs": connection.ca_file, "ca_cert_data": connection.ca_data,
                                "cert_file": connection.cert_file, "key_file": connection.key_file, "block": block}
        if not connection.check_hostname:
            args["assert_hostname"] = False
        if connection.server_name:
            args["server_hostname"] = connection.server_name
        if pool_size or connection.pool_size:
            args["maxsize"] = pool_size or connection.pool_size
        self.pool: urllib3.PoolManager
        if connection.proxy and not connection.bypass_proxy:
            if connection.proxy.split("://")[0].lower() in SOCKS:
                from urllib3.contrib.socks import SOCKSProxyManager

                self.pool = SOCKSProxyManager(connection.proxy, headers=connection.proxy_headers, **args)
            else:
                self.pool = urllib3.ProxyManager(connection.proxy, proxy_headers=connection.proxy_headers, **args)
        else:
            self.pool = urllib3.PoolManager(**args)

    def headers(self, content_type: str = JSON, accept: str = JSON) -> dict[str, str]:
        now = self._clock()
        if self._token_read is None or now - self._token_read >= self.token_fresh:
            self._token = self.connection.token()
            self._token_read = now
        headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": self.user_agent}
        if self._token:
            headers["Authorization"] = self._token
        return headers

    def open(self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None, *,
             content_type: str = JSON, accept: str = JSON, timeout: Timeout = None,
             stream: bool = False) -> urllib3.BaseHTTPResponse:
        """One request, its answer read (or, with `stream`, open to be read: release it); a non-2xx
        answer raises its error."""
        url = self.host + path
        query = {k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in (params or {}).items()
                 if v is not None}
        if query:
            url += "?" + urlencode(query)
        data = body if body is None or isinstance(body, bytes) else dumps(body)
        response = self.pool.request(method, url, body=data,
                                     headers=self.headers(content_type, accept), timeout=_timeout(timeout),
                                     preload_content=not stream, **({} if self.retries is None else
                                                                    {"retries": self.retries}))
        if not 200 <= response.status <= 299:
            if response.status == 401:
                self._token_read = None  # the token may have rotated
            try:
                data = response.data if not stream else response.read()
            finally:
                if stream:
                    response.release_conn()
            raise error_of(response.status, response.reason, data, response.headers)
        return response

    def request(self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None, *,
                content_type: str = JSON, timeout: Timeout = None) -> dict[str, Any]:
        """One request, its JSON answer as a dict."""
        data = self.open(method, path, params, body, content_type=content_type, timeout=timeout).data
        answer: dict[str, Any] = orjson.loads(data) if data else {}
        return answer

    @contextmanager
    def streaming(self, path: str, params: Mapping[str, Any] | None = None, *, accept: str = JSON,
                  timeout: Timeout = None) -> Iterator[urllib3.BaseHTTPResponse]:
        """A GET whose answer is read as it arrives; let go of (its connection closed, if the answer was
        not read to its end) when the block ends."""
        response = self.open("GET", path, params, accept=accept, timeout=timeout, stream=True)
        try:
            yield response
        finally:
            if not response.closed:
                response.close()  # left before its end: the connection still carries the stream
            response.release_conn()

    def lines(self, path: str, params: Mapping[str, Any] | None = None, *, accept: str = JSON,
              timeout: Timeout = None, chunk: int = 65536) -> Generator[bytes, None, None]:
        """The lines of a streamed answer (a watch's events, a container's log), without their
        newlines, as they arrive (read `chunk` bytes at most at a time)."""
        with self.streaming(path, params, accept=accept, timeout=timeout) as response:
            pending = b""
            for part in response.stream(chunk):
                pending += part
                *complete, pending = pending.split(b"\n")
                yield from complete
            if pending:
                yield pending

    def watch(self, path: str, params: Mapping[str, Any] | None = None, *,
              timeout: Timeout = None) -> Generator[dict[str, Any], None, None]:
        """The events ({type, object}) of a watch of `path`, parsed, until the server ends it; an ERROR
        event raises its error (`Gone` for a resourceVersion too old)."""
        for line in self.lines(path, {**(params or {}), "watch": "true"}, timeout=timeout):
            if not line.strip():
                continue
            event: dict[str, Any] = orjson.loads(line)
            if event.get("type") == "ERROR":
                raise event_error(event.get("object") or {})
            yield event

    def close(self) -> None:
        self.pool.clear()
