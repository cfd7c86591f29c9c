"""The operator's one HTTP stack to the API server: one aiohttp session on the event loop, set up
from a `config.Connection` (host, TLS, client certificate, bearer token and its refresh hook,
proxy). Watches (kube/watch.py), writes (kube/writes.py) and the leader Lease (kube/leases.py) all
go through it, each request with the timeout its caller needs; a non-2xx answer raises the error
`errors.error_of` says it means.

Not the generated kubernetes client: its HTTP machinery is synchronous (a thread per watch and per
Lease call, and a GIL hand-off per answer), validates every argument and builds typed models of
every answer (docs/development/benchmarks.md, "Figures behind the code").

The connection pool has no limit of its own: a watch holds its connection for its whole length,
and the leader's renewal must never wait for a connection the writes hold (the writes bound
their own number, kube/writes.py). Answers are asked for uncompressed (as the kubernetes client
did): on the loopback or a cluster's network, gzip costs the API server and us more CPU than
the bytes it saves.
"""
from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Callable

import aiohttp
import orjson

from cronoq.apiserver.config import USER_AGENT, Connection
from cronoq.apiserver.errors import error_of

JSON = "application/json"
TOKEN_FRESH = 10.0
"""Seconds a bearer token is used before the connection is asked for it again. Asking runs the
credentials' refresh hook (the kubeconfig loader's sets the whole configuration again, proxies
read from the environment included): per request that was 6% of the operator's CPU in a pull
burst (docs/development/benchmarks.md, "Figures behind the code"). A rotated token is read within TOKEN_FRESH,
at once after a 401."""

Answered = Callable[[float, float, str | None], None]
"""Told (sent, received, Date header) of an answer: the clock-skew estimate's samples."""


def timeout(connect: float | None = None, read: float | None = None, total: float | None = None) -> aiohttp.ClientTimeout:
    """A request's timeout: `connect` bounds making the connection, `read` each wait for more of the
    answer (headers or body), `total` the whole request."""
    return aiohttp.ClientTimeout(total=total, sock_connect=connect, sock_read=read)


class ApiSession:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        """Where the API server is and how to authenticate."""
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None
        self._token_read: float | None = None

    def headers(self, content_type: str = JSON) -> dict[str, str]:
        headers = {"Accept": JSON, "Content-Type": content_type, "User-Agent": USER_AGENT,
                   "Accept-Encoding": "identity"}
        token = self.token()
        if token:
            headers["Authorization"] = token
        return headers

    def token(self) -> str | None:
        """The Authorization header's value, asked of the connection again every TOKEN_FRESH seconds."""
        now = time.monotonic()
        if self._token_read is None or now - self._token_read >= TOKEN_FRESH:
            self._token = self.connection.token()
            self._token_read = now
        return self._token

    def session(self) -> aiohttp.ClientSession:
        """The session, made on first use in the running loop."""
        if self._session is None or self._session.closed:
            conn = self.connection
            tls: ssl.SSLContext | bool = False
            if conn.verify:
                tls = ssl.create_default_context(cafile=conn.ca_file, cadata=conn.ca_data)
                if conn.cert_file:
                    tls.load_cert_chain(conn.cert_file, conn.key_file)
                if not conn.check_hostname:
                    tls.check_hostname = False
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=0),
                                                  timeout=timeout())
        return self._session

    @asynccontextmanager
    async def open(self, method: str, path: str, limits: aiohttp.ClientTimeout, *,
                   params: dict[str, str] | None = None, body: dict[str, Any] | list[Any] | None = None,
                   content_type: str = JSON, answered: Answered | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request, its answer open to be read or streamed; a non-2xx answer raises its error."""
        conn = self.connection
        data = None if body is None else orjson.dumps(body)
        sent = time.time()
        async with self.session().request(method, conn.host + path, params=params, data=data,
                                          headers=self.headers(content_type), timeout=limits,
                                          server_hostname=conn.server_name or None,
                                          proxy=conn.proxy or None) as response:
            if answered is not None:
                answered(sent, time.time(), response.headers.get("Date"))
            if not 200 <= response.status <= 299:
                if response.status == 401:  # the token may have rotated: read it again next time
                    self._token_read = None
                raise error_of(response.status, response.reason, await response.read(), response.headers)
            yield response

    async def request(self, method: str, path: str, limits: aiohttp.ClientTimeout,
                      body: dict[str, Any] | list[Any] | None = None,
                      content_type: str = JSON) -> dict[str, Any]:
        """One request, its JSON answer as a dict; a non-2xx answer raises its error."""
        async with self.open(method, path, limits, body=body, content_type=content_type) as response:
            answer = await response.read()
        return orjson.loads(answer) if answer else {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
