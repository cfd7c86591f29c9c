"""`cronoq push`: the push runner, what the container of a push task's attempt runs (DESIGN §12).

It makes the one HTTP request the task's `spec.http` describes and reports the answer through
the pod protocol's report (`cronoq.pod_protocol.report`), so the operator judges a push
attempt like any other, and heartbeats its Lease the same way (it runs inside the SDK's
`attempt()`):

| The request | Outcome | reason | exit |
|---|---|---|---|
| answered with a success code (default any 2xx) | success; the body (≤ 4 KiB) is the output | | 0 |
| answered 5xx or 429 | retryable; `Retry-After` on a 429 or 503 → `retryAfterSeconds` | HTTPStatus | 1 |
| answered anything else (4xx, 3xx: redirects are not followed) | permanent | HTTPStatus | 2 |
| no answer within `timeout` | retryable | Timeout | 1 |
| no answer at all (DNS, refused, reset, TLS) | retryable, with the error | NetworkError | 1 |
| to a link-local or metadata address, and the pool does not allow it | permanent, naming the switch | AddressNotAllowed | 2 |

A metadata service (169.254.169.254, see METADATA_ADDRESSES) hands out the node's cloud credentials, so the runner never
connects to a link-local or metadata address unless the pool's `allowLinkLocal` says so. It checks
the address it will connect to, not the name: names are resolved once, by the resolver below, and
aiohttp connects to exactly the addresses it returned (the URL's host stays the Host header and
the TLS server name), so a name that resolves elsewhere the second time (DNS rebinding) gains
nothing. Through a proxy (the pool's HTTPS_PROXY) the runner connects to the proxy, and checks
that address; the proxy resolves the target.

Every report but the last three carries `responseCode`. The request carries
`Idempotency-Key: <task uid>`, `X-Cronoq-Task: <namespace>/<name>` and
`X-Cronoq-Attempt: <n>`, so the receiver can fence its side effects by (key, attempt). With the
operator's tracing on, `traceparent` carries the attempt's span (TRACEPARENT), unless the task
names that header itself.

The operator hands the request over as JSON in CRONOQ_HTTP (built by `engine/jobs.py`); header
values from Secrets and the CA bundle arrive as their own environment variables, filled by the
kubelet, so no secret is ever part of the Job. This module imports neither the controller nor
the kube layer: it runs in the task's pod.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import os
import socket
import ssl
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from cronoq import __version__
from cronoq.pod_protocol import Env, PushRequest, tracecontext
from cronoq.pod_protocol import report
from cronoq.pod_protocol.inputs import plain
from cronoq.pod_protocol.report import REPORT_LIMIT, Reason, Report
from cronoq.worker.runner import Context, attempt

REQUEST_ENV = Env.HTTP
"""The request as JSON (`pod_protocol.PushRequest`)."""
EXCERPT = 512
"""Characters of a failed answer's body quoted in the message."""

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16"))
"""Cloud metadata services: AWS, GCP, Azure, OpenStack and others on 169.254.169.254; AWS (Nitro)
on IPv6; Alibaba Cloud on 100.100.100.200; Azure's WireServer (which hands out the VM's extension
settings, secrets among them) on 168.63.129.16. The last two are outside the link-local networks,
so only this list catches them."""
LINK_LOCAL_NETWORKS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
SWITCH = "spec.allowLinkLocal"
"""The TaskPool field that lets its push tasks reach these addresses."""


class InvalidRequest(ValueError):
    """CRONOQ_HTTP (or an environment variable it names) cannot describe a request."""


@dataclass(frozen=True)
class Request:
    """The request of one attempt, ready to send."""

    url: str
    method: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    timeout: float
    success_codes: frozenset[int]
    """Empty: any 2xx."""
    ca_bundle: str | None = None
    """PEM certificates replacing the default trust store."""
    allow_link_local: bool = False
    """The pool allows link-local and metadata addresses."""


def request_from(environ: Mapping[str, str], context: Context) -> Request:
    """The attempt's request: CRONOQ_HTTP, the secret header values it names, the payload as the
    default body (for a task with dependencies `{"payload": ..., "inputs": ...}`, its inputs as
    CRONOQ_INPUTS holds them), and the headers that identify the attempt."""
    try:
        spec = PushRequest.from_json(environ.get(REQUEST_ENV) or "")
    except ValueError as err:
        raise InvalidRequest(f"{REQUEST_ENV} is not a request: {err}") from None
    headers: list[tuple[str, str]] = []
    for header in spec.headers:
        value = header.value
        if header.env is not None:
            secret = environ.get(header.env)
            if secret is None:
                raise InvalidRequest(f"header {header.name}: {header.env} (its secretKeyRef) is not set")
            value = secret
        headers.append((header.name, value.strip()))
    named = {name.lower() for name, _ in headers}

    body: bytes | None = None
    if spec.body is not None:
        body, content_type = spec.body.encode(), "text/plain; charset=utf-8"
    elif context.inputs and spec.method not in ("GET", "HEAD"):  # a task with dependencies
        body = json.dumps({"payload": context.payload, "inputs": plain(context.inputs)},
                          ensure_ascii=False, separators=(",", ":")).encode()
        content_type = "application/json"
    elif context.payload is not None and spec.method not in ("GET", "HEAD"):
        body = json.dumps(context.payload, ensure_ascii=False, separators=(",", ":")).encode()
        content_type = "application/json"
    if body is not None and "content-type" not in named:
        headers.append(("Content-Type", content_type))
    if "user-agent" not in named:
        headers.append(("User-Agent", f"cronoq-push/{__version__}"))
    headers += [("Idempotency-Key", context.id), ("X-Cronoq-Task", f"{context.namespace}/{context.name}"),
                ("X-Cronoq-Attempt", str(context.attempt))]
    parent = tracecontext.parse(environ.get(tracecontext.ENV))
    if parent is not None and tracecontext.HEADER not in named:  # the receiver's spans join the task's trace
        headers.append((tracecontext.HEADER, parent.traceparent))

    ca = None
    if spec.ca_env:
        ca = environ.get(spec.ca_env, "")
        if "-----BEGIN CERTIFICATE-----" not in ca:
            raise InvalidRequest(f"the CA bundle ({spec.ca_env}) holds no PEM certificate")
    return Request(spec.url, spec.method, tuple(headers), body, spec.timeout, frozenset(spec.success_codes), ca,
                   spec.allow_link_local)


def forbidden_kind(address: str) -> str | None:
    """What `address` (an IP address in text) is when a push request may not connect to it by
    default ("a cloud metadata address", "link-local"); None when it may, or when it is no IP
    address. An IPv4 address mapped into IPv6 counts as the IPv4 address it carries."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if any(ip in network for network in LINK_LOCAL_NETWORKS):
        return "link-local"
    return None


class AddressNotAllowed(Exception):
    """The request would connect to a link-local or metadata address its pool does not allow."""

    def __init__(self, host: str, address: str, kind: str, who: str = "push tasks") -> None:
        named = f"{address} is" if host == address else f"{host} resolves to {address},"
        super().__init__(f"{named} {kind}: {who} may not call link-local or cloud metadata addresses "
                         f"unless their TaskPool sets {SWITCH}: true")


class GuardedResolver(AbstractResolver):
    """Resolves each name once and refuses it when any of its addresses is forbidden. aiohttp
    connects to the addresses returned here, so what was checked is what is connected to."""

    def __init__(self, inner: AbstractResolver | None = None, who: str = "push tasks") -> None:
        self._inner = inner if inner is not None else DefaultResolver()
        self._who = who

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            kind = forbidden_kind(result["host"])
            if kind is not None:
                raise AddressNotAllowed(host, result["host"], kind, self._who)
        return results

    async def close(self) -> None:
        await self._inner.close()


def guarded(url: str, resolver: AbstractResolver | None = None, who: str = "push tasks") -> GuardedResolver:
    """The resolver a request to `url` connects through when link-local and metadata addresses are
    not allowed; raises AddressNotAllowed at once for a URL whose host is such an address literally
    (a literal is never resolved, so the resolver would not see it). The operator's notification
    sender uses it too (controller/notify.py): one check for both."""
    host = urlsplit(url).hostname or ""
    kind = forbidden_kind(host)
    if kind is not None:
        raise AddressNotAllowed(host, host, kind, who)
    return GuardedResolver(resolver, who)


def retry_after(value: str | None, *, now: datetime, date: str | None = None) -> float | None:
    """Seconds a `Retry-After` value asks to wait: delay-seconds, or an HTTP date, counted from
    the answer's own `Date` when it has one (so the two clocks' skew does not matter), else from
    `now`. None when absent, unreadable or already past."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(int(value))
    else:
        when, since = _http_date(value), _http_date(date) or now
        if when is None:
            return None
        if when.tzinfo is None or since.tzinfo is None:  # "-0000": unknown zone, which HTTP dates never are
            when, since = when.replace(tzinfo=timezone.utc), since.replace(tzinfo=timezone.utc)
        seconds = float(math.ceil((when - since).total_seconds()))
    return seconds if seconds > 0 else None


def _http_date(text: str | None) -> datetime | None:
    try:
        return parsedate_to_datetime(text) if text else None
    except (TypeError, ValueError, IndexError):
        return None


def judge_answer(request: Request, status: int, headers: Mapping[str, str], body: bytes, *,
                 now: datetime) -> Report:
    """What one answer means for the attempt."""
    success = status in request.success_codes if request.success_codes else 200 <= status < 300
    text = body.decode("utf-8", errors="replace")
    if success:
        return Report(report.SUCCESS, output=text or None, response_code=status)
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    message = f"{request.method} {request.url}: HTTP {status} {phrase}".rstrip()
    if 300 <= status < 400 and headers.get("Location"):
        message += f" (to {headers['Location']}; redirects are not followed)"
    if text.strip():
        message += f": {text.strip()[:EXCERPT]}"
    if status == 429 or 500 <= status < 600:
        hint = retry_after(headers.get("Retry-After"), now=now, date=headers.get("Date")) \
            if status in (429, 503) else None
        return Report(report.RETRYABLE, message, retry_after=hint, reason=Reason.HTTP_STATUS, response_code=status)
    return Report(report.PERMANENT, message, reason=Reason.HTTP_STATUS, response_code=status)


async def send(request: Request, *, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
               resolver: AbstractResolver | None = None) -> Report:
    """Make the request once and judge the answer, or its absence. `resolver` resolves names
    (default: the system's); unless the pool allows it, forbidden addresses are refused."""
    tls: ssl.SSLContext | bool = True
    if request.ca_bundle is not None:
        try:
            tls = ssl.create_default_context(cadata=request.ca_bundle)
        except ssl.SSLError as err:
            return Report(report.PERMANENT, f"the CA bundle cannot be loaded: {err}")
    where = f"{request.method} {request.url}"
    if not request.allow_link_local:
        try:
            resolver = guarded(request.url, resolver)
        except AddressNotAllowed as err:
            return Report(report.PERMANENT, f"{where}: {err}", reason=Reason.ADDRESS_NOT_ALLOWED)
    connector = aiohttp.TCPConnector(resolver=resolver) if resolver is not None else None
    try:
        # trust_env: HTTPS_PROXY, NO_PROXY from the pool's env (engine/jobs.py drops the task's),
        # as a corporate network may need.
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=request.timeout), connector=connector,
                                         trust_env=True) as session:
            async with session.request(request.method, request.url, headers=list(request.headers),
                                       data=request.body, ssl=tls, allow_redirects=False) as answer:
                # No more of the body than a report can carry as the output.
                body = await _read_up_to(answer, REPORT_LIMIT)
                return judge_answer(request, answer.status, answer.headers, body, now=clock())
    except AddressNotAllowed as err:
        return Report(report.PERMANENT, f"{where}: {err}", reason=Reason.ADDRESS_NOT_ALLOWED)
    except TimeoutError:  # aiohttp's timeouts are TimeoutErrors (ServerTimeoutError too)
        return Report(report.RETRYABLE, f"{where}: no answer within {request.timeout:g}s", reason=Reason.TIMEOUT)
    except aiohttp.ClientError as err:  # DNS, refused, reset, TLS handshake and certificate
        return Report(report.RETRYABLE, f"{where}: {type(err).__name__}: {err}", reason=Reason.NETWORK_ERROR)
    except ValueError as err:  # a header value aiohttp refuses to send (a line break from a Secret)
        return Report(report.PERMANENT, f"{where}: the request cannot be sent: {err}")


async def _read_up_to(answer: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most `limit` bytes of the body: the output has no room for more, and an endless body
    must not keep the attempt running."""
    chunks, size = [], 0
    while size < limit:
        chunk = await answer.content.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None) -> int:
    """Run this attempt's request; the exit code is the SDK's (0 success, 1 retryable, 2 permanent)."""
    if argv:
        print(f"cronoq push: takes no arguments (the request is in {REQUEST_ENV})", file=sys.stderr)
        return report.EXIT_PERMANENT
    environ = os.environ if environ is None else environ

    def judge(_handler: Any, context: Context) -> Report:
        try:
            request = request_from(environ, context)
        except InvalidRequest as err:
            return Report(report.PERMANENT, str(err))
        return asyncio.run(send(request))

    return attempt(lambda _context: None, environ, judge=judge)
