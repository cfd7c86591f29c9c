"""The operator's one HTTP stack to the API server: one aiohttp session on the event loop, set up
from the kubernetes client's configuration (host, TLS, client certificate, bearer token and its
refresh hook, proxy). Watches (kube/watch.py), writes (kube/writes.py) and the leader Lease
(kube/leases.py) all go through it, each request with the timeout its caller needs.

The generated kubernetes client is used for its configuration only: its HTTP machinery is
synchronous (a thread per watch and per Lease call, and a GIL hand-off per answer), validates
every argument and builds typed models of every answer (docs/development/benchmarks.md,
"Figures behind the code").

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
from kubernetes import client
from kubernetes.client.exceptions import ApiException

JSON = "application/json"
TOKEN_FRESH = 10.0
"""Seconds a bearer token is used before the configuration is asked for it again. Asking runs the
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
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        """Its configuration says where the API server is and how to authenticate."""
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None
        self._token_read: float | None = None

    def headers(self, content_type: str = JSON) -> dict[str, str]:
        headers = {"Accept": JSON, "Content-Type": content_type, "User-Agent": self.api.user_agent,
                   "Accept-Encoding": "identity"}
        token = self.token()
        if token:
            headers["Authorization"] = token
        return headers

    def token(self) -> str | None:
        """The Authorization header's value, asked of the configuration again every TOKEN_FRESH seconds."""
        now = time.monotonic()
        if self._token_read is None or now - self._token_read >= TOKEN_FRESH:
            self._token = self.api.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
            self._token_read = now
        return self._token

    def session(self) -> aiohttp.ClientSession:
        """The session, made on first use in the running loop."""
        if self._session is None or self._session.closed:
            conf = self.api.configuration
            tls: ssl.SSLContext | bool = False
            if conf.verify_ssl:
                tls = ssl.create_default_context(cafile=conf.ssl_ca_cert)
                if conf.cert_file:
                    tls.load_cert_chain(conf.cert_file, conf.key_file)
                if conf.assert_hostname is False:
                    tls.check_hostname = False
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=0),
                                                  timeout=timeout())
        return self._session

    @asynccontextmanager
    async def open(self, method: str, path: str, limits: aiohttp.ClientTimeout, *,
                   params: dict[str, str] | None = None, body: dict[str, Any] | list[Any] | None = None,
                   content_type: str = JSON, answered: Answered | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request, its answer open to be read or streamed; a non-2xx answer raises ApiException."""
        conf = self.api.configuration
        data = None if body is None else orjson.dumps(body)
        sent = time.time()
        async with self.session().request(method, conf.host + path, params=params, data=data,
                                          headers=self.headers(content_type), timeout=limits,
                                          server_hostname=conf.tls_server_name or None,
                                          proxy=conf.proxy or None) as response:
            if answered is not None:
                answered(sent, time.time(), response.headers.get("Date"))
            if not 200 <= response.status <= 299:
                if response.status == 401:  # the token may have rotated: read it again next time
                    self._token_read = None
                answer = await response.read()
                err = ApiException(status=response.status, reason=response.reason,
                                   body=answer.decode("utf-8", "replace"))
                err.headers = dict(response.headers)  # Retry-After, for a throttled request (429)
                raise err
            yield response

    async def request(self, method: str, path: str, limits: aiohttp.ClientTimeout,
                      body: dict[str, Any] | list[Any] | None = None,
                      content_type: str = JSON) -> dict[str, Any]:
        """One request, its JSON answer as a dict; a non-2xx answer raises ApiException."""
        async with self.open(method, path, limits, body=body, content_type=content_type) as response:
            answer = await response.read()
        return orjson.loads(answer) if answer else {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
