"""Push tasks (DESIGN §12): the HTTP request each attempt makes, its headers (literal or from a
Secret), the CA bundle that verifies its endpoint, and the status codes that mean success."""
from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, model_validator

from cronoq.api.durations import DurationBounds
from cronoq.api.model import Model, SubdomainName, rule, validations


class HTTPMethod(StrEnum):
    GET = "GET"
    HEAD = "HEAD"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""An HTTP field name: a `token` of RFC 9110 §5.1 (letters, digits and a few marks, no spaces or colons)."""
RESERVED_HEADERS = ("idempotency-key", "x-cronoq-attempt", "x-cronoq-task", "host", "content-length")
"""Header names the push runner sets itself (the fencing token, the attempt) or the HTTP client
owns; compared case-insensitively, as HTTP does."""
KEY_NAME = r"^[-._a-zA-Z0-9]+$"
BODY_LIMIT = 32768
"""Bytes of an explicit request body: it reaches the runner through the environment, like the payload."""
HTTPTimeout = Annotated[timedelta, DurationBounds("1s", "1h")]


class KeyRef(Model):
    """One key of a Secret or ConfigMap in the task's namespace."""

    name: SubdomainName
    """Name of the Secret or ConfigMap."""
    key: str = Field(min_length=1, max_length=253, pattern=KEY_NAME)
    """Key within it."""


class HTTPHeader(Model):
    """One request header: a literal `value`, or a `secretKeyRef` read into the attempt's pod
    from a Secret (through the container's environment, so it never appears in the Job)."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("has(self.value) != has(self.secretKeyRef)",
             "a header gives exactly one of value and secretKeyRef", field_path=".value"),
        rule("!(self.name.lowerAscii() in [" + ", ".join(f"'{h}'" for h in RESERVED_HEADERS) + "])",
             "header names Idempotency-Key, X-Cronoq-Attempt, X-Cronoq-Task, Host and Content-Length "
             "are set by cronoq", field_path=".name"),
    ))

    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME)
    """Header name, e.g. `Authorization` (an RFC 9110 token; Idempotency-Key, X-Cronoq-Attempt,
    X-Cronoq-Task, Host and Content-Length are reserved)."""
    value: str | None = Field(None, max_length=8192, pattern=r"^[^\r\n]*$")
    """Literal header value (no line breaks)."""
    secret_key_ref: KeyRef | None = None
    """Take the value from this key of a Secret in the task's namespace."""

    @model_validator(mode="after")
    def _one_source(self) -> HTTPHeader:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError(f"header {self.name}: give exactly one of value and secretKeyRef")
        if self.name.lower() in RESERVED_HEADERS:
            raise ValueError(f"header {self.name} is set by cronoq")
        return self


class CABundle(Model):
    """Where the CA certificates that verify the endpoint's TLS certificate come from."""

    config_map_key_ref: KeyRef
    """A ConfigMap key in the task's namespace holding PEM certificates (e.g. one written by
    trust-manager). They replace the runner's default trust store for this request."""


StatusCode = Annotated[int, Field(ge=100, le=599)]


class HTTPRequest(Model):
    """A push task: each attempt makes this HTTP request (from cronoq's push runner, in a Job like
    any attempt) and its answer decides the outcome (see docs/how-to/push-tasks.md, its outcomes table)."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("isURL(self.url) && url(self.url).getScheme() in ['http', 'https'] && url(self.url).getHostname() != ''",
             "url must be an absolute http:// or https:// URL with a host", field_path=".url"),
        rule("!has(self.body) || !(self.method in ['GET', 'HEAD'])",
             "body cannot be sent with GET or HEAD", field_path=".body"),
    ))

    url: str = Field(min_length=1, max_length=2048, pattern=r"^[hH][tT][tT][pP][sS]?://\S+$")
    """Absolute http:// or https:// URL to call (at most 2048 characters)."""
    method: HTTPMethod = HTTPMethod.POST
    """GET, HEAD, POST, PUT, PATCH or DELETE. Default POST."""
    headers: tuple[HTTPHeader, ...] = Field((), max_length=32, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    """Request headers (at most 32), each a value or a secretKeyRef. Idempotency-Key,
    X-Cronoq-Task and X-Cronoq-Attempt are always added."""
    body: str | None = Field(None, max_length=BODY_LIMIT)
    """Request body, sent as is (at most 32 KiB; Content-Type text/plain unless a header says
    otherwise). Unset: the task's payload as JSON (application/json), none if it has no payload
    or the method is GET or HEAD; a task with dependencies sends `{"payload": ..., "inputs": ...}`,
    its dependencies' phases and outputs (docs/inputs.md)."""
    timeout: HTTPTimeout = timedelta(seconds=30)
    """How long one request may take, connecting included (1s to 1h). Default 30s. A request
    that runs out of time is retried (reason Timeout)."""
    success_codes: tuple[StatusCode, ...] = Field((), max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"})
    """Status codes that mean success (100 to 599). Empty (the default): any 2xx."""
    ca_bundle: CABundle | None = None
    """CA certificates to verify an https endpoint with, instead of the runner's default trust
    store. TLS certificates are always verified."""

    @model_validator(mode="after")
    def _consistent(self) -> HTTPRequest:
        parts = urlsplit(self.url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url {self.url!r} must be an absolute http:// or https:// URL with a host")
        if self.body is not None and self.method in (HTTPMethod.GET, HTTPMethod.HEAD):
            raise ValueError(f"body cannot be sent with {self.method.value}")
        return self
