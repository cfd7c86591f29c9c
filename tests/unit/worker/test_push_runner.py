"""`cronoq push`, the push runner, as a real process against a real HTTP server on 127.0.0.1 (in a
thread of the test): each answer the issue names, the termination message and exit code it
leaves, and the exact request the receiver saw. No cluster is needed: the runner talks to the
API server only to heartbeat, and these attempts have heartbeats off."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from cronoq import __version__
from cronoq.push import forbidden_kind, judge_answer, retry_after, Request, send

UID = "0f9e8d7c-6b5a-4321-8000-123456789abc"
SERVER_DATE = "Wed, 02 Dec 2026 21:00:00 GMT"
"""The receiver's clock, far from the test machine's: an HTTP-date Retry-After counts from it."""


class Receiver:
    """An HTTP endpoint that plays one answer per path and records every request it gets."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def date_time_string(self, timestamp: float | None = None) -> str:
                return SERVER_DATE

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                receiver.requests.append({"method": self.command, "path": self.path,
                                          "headers": list(self.headers.items()), "body": self.rfile.read(length)})
                status, headers, body = {
                    "/ok": (200, {"Content-Type": "application/json"}, b'{"received":true}'),
                    "/big": (200, {}, b"x" * 10_000),
                    "/missing": (404, {}, b"no such hook"),
                    "/broken": (500, {}, b"database down"),
                    "/conflict": (409, {}, b"version conflict"),
                    "/busy": (429, {"Retry-After": "3"}, b"slow down"),
                    "/busy-no-hint": (429, {}, b""),
                    "/later": (503, {"Retry-After": "Wed, 02 Dec 2026 21:02:00 GMT"}, b""),
                    "/later-in-3s": (503, {"Retry-After": "3"}, b"busy"),
                    "/moved": (301, {"Location": "/elsewhere"}, b""),
                }.get(self.path.split("?")[0], (200, {}, b""))
                if self.path == "/hangup":  # reads the request, closes the connection without a word
                    self.close_connection = True
                    return
                if self.path == "/slow":
                    receiver.release.wait(30)  # answers only once the test is over
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def push(tmp_path: Path, http: dict[str, Any], *, payload: Any = None, extra: dict[str, str] | None = None,
         attempt: int = 2) -> tuple[int, dict[str, Any], str]:
    """Run `cronoq push` as the attempt's container would: (exit code, termination message, stderr)."""
    log = tmp_path / "termination-log"
    env = {"PATH": os.environ["PATH"], **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},  # a worktree's
           "CRONOQ_TASK_ID": UID, "CRONOQ_TASK_NAME": "notify-order",
           "CRONOQ_NAMESPACE": "shop", "CRONOQ_ATTEMPT": str(attempt), "CRONOQ_LEASE_TTL": "0",
           "CRONOQ_PAYLOAD": json.dumps(payload), "CRONOQ_HTTP": json.dumps(http),
           "CRONOQ_TERMINATION_LOG": str(log), **(extra or {})}
    done = subprocess.run([sys.executable, "-m", "cronoq", "push"], env=env, capture_output=True, text=True,
                          timeout=60)
    return done.returncode, json.loads(log.read_text()), done.stderr


def test_200_succeeds_with_the_body_as_output_and_the_receiver_sees_the_attempt(tmp_path, receiver) -> None:
    http = {"url": f"{receiver.url}/ok", "method": "POST", "timeout": 5, "headers": [
        {"name": "Authorization", "env": "CRONOQ_HTTP_HEADER_0"}, {"name": "X-Team", "value": "shop"}]}
    code, message, _ = push(tmp_path, http, payload={"order": 42, "note": "für"},
                            extra={"CRONOQ_HTTP_HEADER_0": "Bearer s3cret\n"})
    assert code == 0
    assert message == {"outcome": "success", "message": "", "responseCode": 200, "output": '{"received":true}'}
    (seen,) = receiver.requests
    assert (seen["method"], seen["path"]) == ("POST", "/ok")
    assert seen["body"] == '{"order":42,"note":"für"}'.encode()
    assert seen["headers"] == [
        ("Host", receiver.url.removeprefix("http://")),
        ("Authorization", "Bearer s3cret"),  # from the Secret, its trailing newline gone
        ("X-Team", "shop"),
        ("Content-Type", "application/json"),
        ("User-Agent", f"cronoq-push/{__version__}"),
        ("Idempotency-Key", UID),
        ("X-Cronoq-Task", "shop/notify-order"),
        ("X-Cronoq-Attempt", "2"),
        ("Accept", "*/*"),
        ("Accept-Encoding", "gzip, deflate"),
        ("Content-Length", str(len(seen["body"]))),
    ]


def test_the_attempt_spans_traceparent_goes_with_the_request_unless_the_task_names_its_own(tmp_path, receiver) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    code, _, _ = push(tmp_path, {"url": f"{receiver.url}/ok", "timeout": 5}, extra={"TRACEPARENT": parent})
    own = {"url": f"{receiver.url}/ok", "timeout": 5, "headers": [{"name": "traceparent", "value": "mine"}]}
    code_own, _, _ = push(tmp_path, own, extra={"TRACEPARENT": parent})
    code_bad, _, _ = push(tmp_path, {"url": f"{receiver.url}/ok", "timeout": 5}, extra={"TRACEPARENT": "garbage"})
    assert (code, code_own, code_bad) == (0, 0, 0)
    sent = [[v for k, v in seen["headers"] if k.lower() == "traceparent"] for seen in receiver.requests]
    assert sent == [[parent], ["mine"], []]


def test_404_is_permanent(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/missing", "timeout": 5}, payload={"order": 1})
    assert code == 2
    assert message == {"outcome": "permanent", "reason": "HTTPStatus", "responseCode": 404,
                       "message": f"POST {receiver.url}/missing: HTTP 404 Not Found: no such hook"}


def test_500_is_retryable(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/broken", "timeout": 5})
    assert code == 1
    assert message == {"outcome": "retryable", "reason": "HTTPStatus", "responseCode": 500,
                       "message": f"POST {receiver.url}/broken: HTTP 500 Internal Server Error: database down"}
    assert receiver.requests[0]["body"] == b""  # no payload, no body


def test_an_answer_slower_than_the_timeout_is_retryable_timeout(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/slow", "timeout": 1})
    assert code == 1
    assert message == {"outcome": "retryable", "reason": "Timeout",
                       "message": f"POST {receiver.url}/slow: no answer within 1s"}
    assert len(receiver.requests) == 1  # the request did arrive; its answer did not


def test_a_refused_connection_is_retryable_with_the_error(tmp_path) -> None:
    with socket.socket() as bound:  # bound, never listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/hook"
        code, message, _ = push(tmp_path, {"url": url, "timeout": 5})
    assert code == 1
    assert (message["outcome"], message["reason"]) == ("retryable", "NetworkError")
    assert "responseCode" not in message
    assert message["message"].startswith(f"POST {url}: ClientConnectorError: Cannot connect to host 127.0.0.1:")


def test_a_name_that_does_not_resolve_is_retryable_with_the_error(tmp_path) -> None:
    url = "http://no-such-host.invalid/hook"  # .invalid never resolves (RFC 6761)
    code, message, _ = push(tmp_path, {"url": url, "timeout": 5})
    assert code == 1 and message["reason"] == "NetworkError" and "responseCode" not in message
    assert message["message"].startswith(f"POST {url}: ClientConnectorDNSError: Cannot connect to host no-such-host.invalid")


def test_a_connection_closed_without_an_answer_is_retryable(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/hangup", "timeout": 5})
    assert code == 1 and message["reason"] == "NetworkError" and "responseCode" not in message
    assert "ServerDisconnectedError" in message["message"] and len(receiver.requests) == 1


def test_429_with_retry_after_seconds_retries_no_sooner(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/busy", "timeout": 5})
    assert code == 1
    assert message == {"outcome": "retryable", "reason": "HTTPStatus", "responseCode": 429, "retryAfterSeconds": 3,
                       "message": f"POST {receiver.url}/busy: HTTP 429 Too Many Requests: slow down"}


def test_503_with_an_http_date_retry_after_counts_from_the_answers_date(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/later", "timeout": 5})
    assert code == 1
    assert message == {"outcome": "retryable", "reason": "HTTPStatus", "responseCode": 503, "retryAfterSeconds": 120,
                       "message": f"POST {receiver.url}/later: HTTP 503 Service Unavailable"}


def test_429_without_retry_after_is_retryable_after_the_backoff(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/busy-no-hint", "timeout": 5})
    assert code == 1 and message["responseCode"] == 429 and "retryAfterSeconds" not in message


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: no trust store knows it."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_receiver(certificate) -> Iterator[Receiver]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with Receiver(tls=context) as r:
        yield r


def test_an_unknown_certificate_is_a_network_error_and_never_reaches_the_receiver(tmp_path, tls_receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{tls_receiver.url}/ok", "timeout": 5}, payload={"secret": 1})
    assert code == 1 and (message["outcome"], message["reason"]) == ("retryable", "NetworkError")
    assert "CERTIFICATE_VERIFY_FAILED" in message["message"] and not tls_receiver.requests


def test_the_ca_bundle_verifies_the_endpoint(tmp_path, tls_receiver, certificate) -> None:
    http = {"url": f"{tls_receiver.url}/ok", "timeout": 5, "caEnv": "CRONOQ_HTTP_CA"}
    code, message, _ = push(tmp_path, http, extra={"CRONOQ_HTTP_CA": certificate[0].read_text()})
    assert code == 0 and message["output"] == '{"received":true}' and len(tls_receiver.requests) == 1


def test_a_ca_bundle_without_a_certificate_is_permanent(tmp_path, tls_receiver) -> None:
    http = {"url": f"{tls_receiver.url}/ok", "timeout": 5, "caEnv": "CRONOQ_HTTP_CA"}
    code, message, _ = push(tmp_path, http, extra={"CRONOQ_HTTP_CA": "not a certificate"})
    assert code == 2 and "holds no PEM certificate" in message["message"] and not tls_receiver.requests


def test_tls_to_a_plain_http_server_is_a_network_error(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": receiver.url.replace("http:", "https:") + "/ok", "timeout": 5})
    assert code == 1 and message["reason"] == "NetworkError" and "responseCode" not in message


def test_a_redirect_is_not_followed_and_is_permanent(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/moved", "timeout": 5})
    assert code == 2 and message["responseCode"] == 301
    assert "redirects are not followed" in message["message"] and len(receiver.requests) == 1


def test_a_long_body_is_cut_to_fit_the_termination_message(tmp_path, receiver) -> None:
    code, message, _ = push(tmp_path, {"url": f"{receiver.url}/big", "timeout": 5})
    assert code == 0 and message["responseCode"] == 200
    assert message["output"].startswith("xxx") and message["output"].endswith("…[truncated]")
    assert len((tmp_path / "termination-log").read_bytes()) <= 4096


def test_an_explicit_body_success_codes_and_method(tmp_path, receiver) -> None:
    http = {"url": f"{receiver.url}/ok?x=1", "method": "PUT", "body": "hello", "successCodes": [201], "timeout": 5}
    code, message, _ = push(tmp_path, http, payload={"ignored": True})
    assert code == 2 and message["responseCode"] == 200  # 200 is not the listed 201
    (seen,) = receiver.requests
    assert (seen["method"], seen["path"], seen["body"]) == ("PUT", "/ok?x=1", b"hello")
    assert ("Content-Type", "text/plain; charset=utf-8") in seen["headers"]


def test_get_sends_no_payload_body(tmp_path, receiver) -> None:
    code, _, _ = push(tmp_path, {"url": f"{receiver.url}/ok", "method": "GET", "timeout": 5}, payload={"a": 1})
    assert code == 0 and receiver.requests[0]["body"] == b""
    assert not any(name == "Content-Type" for name, _ in receiver.requests[0]["headers"])


def test_a_missing_secret_value_or_bad_request_is_permanent(tmp_path, receiver) -> None:
    http = {"url": f"{receiver.url}/ok", "headers": [{"name": "Authorization", "env": "CRONOQ_HTTP_HEADER_0"}]}
    code, message, _ = push(tmp_path, http)
    assert code == 2 and "CRONOQ_HTTP_HEADER_0" in message["message"] and not receiver.requests
    for bad in ({"no": "url"}, ["a list"], {"url": "http://h/", "headers": [{"value": "no name"}]}):
        code, message, _ = push(tmp_path, bad)
        assert code == 2 and "CRONOQ_HTTP is not a request" in message["message"]


# --- link-local and metadata addresses (issue 26, point 6) ---------------------------------------------


@pytest.mark.parametrize("url, named", [
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
    ("http://[fd00:ec2::254]/latest/api/token", "fd00:ec2::254 is a cloud metadata address"),
    ("http://169.254.10.20:8080/", "169.254.10.20 is link-local"),
    ("https://[fe80::1]/hook", "fe80::1 is link-local"),
    ("http://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254 is a cloud metadata address"),
    ("http://100.100.100.200/latest/meta-data/", "100.100.100.200 is a cloud metadata address"),  # Alibaba Cloud
    ("http://168.63.129.16/machine?comp=goalstate", "168.63.129.16 is a cloud metadata address"),  # Azure WireServer
])
def test_a_link_local_or_metadata_address_is_refused_permanently_naming_the_switch(tmp_path, url, named) -> None:
    code, message, _ = push(tmp_path, {"url": url, "timeout": 5})
    assert code == 2
    assert message == {"outcome": "permanent", "reason": "AddressNotAllowed", "message": (
        f"POST {url}: {named}: push tasks may not call link-local or cloud metadata addresses unless their "
        "TaskPool sets spec.allowLinkLocal: true")}


def test_with_the_pools_switch_a_link_local_address_is_attempted(tmp_path) -> None:
    # Whatever the network makes of 169.254.0.1 (no answer, or a sandbox's egress filter answering
    # 403), the request went out: the guard did not stop it.
    code, message, _ = push(tmp_path, {"url": "http://169.254.0.1:9/", "timeout": 1, "allowLinkLocal": True})
    assert message["reason"] in ("Timeout", "NetworkError", "HTTPStatus"), message
    assert "allowLinkLocal" not in message["message"]


@pytest.mark.parametrize("address, kind", [
    ("169.254.169.254", "a cloud metadata address"), ("fd00:ec2::254", "a cloud metadata address"),
    ("169.254.0.0", "link-local"), ("169.254.255.255", "link-local"), ("fe80::1", "link-local"),
    ("febf:ffff::1", "link-local"), ("fe80::1%eth0", "link-local"), ("::ffff:169.254.1.1", "link-local"),
    ("100.100.100.200", "a cloud metadata address"), ("168.63.129.16", "a cloud metadata address"),
    ("::ffff:168.63.129.16", "a cloud metadata address"), ("100.100.100.201", None), ("168.63.129.17", None),
    ("169.253.255.255", None), ("169.255.0.0", None), ("fec0::1", None), ("fd00:ec2::253", None),
    ("127.0.0.1", None), ("10.0.0.1", None), ("2001:db8::1", None), ("hooks.example.com", None), ("", None),
])
def test_forbidden_addresses(address: str, kind: str | None) -> None:
    assert forbidden_kind(address) == kind


class FakeDNS(AbstractResolver):
    """Answers each lookup with the next address of `answers`: a name that rebinds."""

    def __init__(self, *answers: str) -> None:
        self.answers, self.lookups = list(answers), 0

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        address = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        return [{"hostname": host, "host": address, "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass


def test_a_name_resolving_to_a_metadata_address_is_refused_before_any_connection(receiver) -> None:
    url = f"http://metadata.hooks.test:{receiver.server.server_port}/ok"
    verdict = asyncio.run(send(Request(url, "GET", (), None, 5, frozenset()), resolver=FakeDNS("169.254.169.254")))
    assert (verdict.outcome, verdict.reason) == ("permanent", "AddressNotAllowed")
    assert verdict.message.startswith(f"GET {url}: metadata.hooks.test resolves to 169.254.169.254, a cloud metadata "
                                      "address: push tasks may not call")
    assert "spec.allowLinkLocal: true" in verdict.message and receiver.requests == []


@pytest.mark.parametrize("address", ["100.100.100.200", "168.63.129.16"])
def test_a_name_resolving_to_a_metadata_address_outside_link_local_is_refused_unless_the_pool_allows_it(
        receiver, address) -> None:
    url = f"http://hooks.test:{receiver.server.server_port}/ok"
    verdict = asyncio.run(send(Request(url, "GET", (), None, 1, frozenset()), resolver=FakeDNS(address)))
    assert (verdict.outcome, verdict.reason) == ("permanent", "AddressNotAllowed")
    assert f"hooks.test resolves to {address}, a cloud metadata address" in verdict.message
    allowed = asyncio.run(send(Request(url, "GET", (), None, 1, frozenset(), allow_link_local=True),
                               resolver=FakeDNS(address)))
    assert allowed.reason != "AddressNotAllowed" and receiver.requests == []


def test_the_name_is_resolved_once_and_the_checked_address_is_the_one_connected_to(receiver) -> None:
    """DNS rebinding: a name that answers 127.0.0.1 to the check and the metadata address to a
    second lookup gains nothing, as there is no second lookup; the Host header keeps the name."""
    dns = FakeDNS("127.0.0.1", "169.254.169.254")
    url = f"http://rebind.hooks.test:{receiver.server.server_port}/ok"
    verdict = asyncio.run(send(Request(url, "GET", (), None, 5, frozenset()), resolver=dns))
    assert (verdict.outcome, verdict.response_code, dns.lookups) == ("success", 200, 1)
    (seen,) = receiver.requests
    assert ("Host", f"rebind.hooks.test:{receiver.server.server_port}") in seen["headers"]


def test_with_the_switch_a_name_resolving_to_a_link_local_address_is_not_refused(receiver) -> None:
    url = f"http://hooks.test:{receiver.server.server_port}/ok"
    request = Request(url, "GET", (), None, 1, frozenset(), allow_link_local=True)
    verdict = asyncio.run(send(request, resolver=FakeDNS("169.254.0.1")))
    assert verdict.reason in ("Timeout", "NetworkError", "HTTPStatus") and "allowLinkLocal" not in verdict.message


# --- the pure parts ---------------------------------------------------------------------------------------

NOW = datetime(2026, 12, 2, 21, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("value, date, want", [
    ("3", None, 3.0), (" 120 ", None, 120.0), ("0", None, None), ("-5", None, None), ("soon", None, None),
    ("Wed, 02 Dec 2026 21:00:30 GMT", None, 30.0),
    ("Wed, 02 Dec 2026 21:00:30 GMT", "Wed, 02 Dec 2026 21:00:20 GMT", 10.0),
    ("Wed, 02 Dec 2026 20:59:00 GMT", None, None), (None, None, None), ("", None, None),
    ("Wed, 02 Dec 2026 21:00:30 GMT", "not a date", 30.0),
])
def test_retry_after_reads_seconds_and_http_dates(value, date, want) -> None:
    assert retry_after(value, now=NOW, date=date) == want


REQUEST = Request("http://h/x", "POST", (), None, 5.0, frozenset())


@pytest.mark.parametrize("status, outcome", [
    (200, "success"), (204, "success"), (299, "success"), (500, "retryable"), (502, "retryable"),
    (599, "retryable"), (429, "retryable"), (400, "permanent"), (408, "permanent"), (404, "permanent"),
    (302, "permanent"), (101, "permanent"),
])
def test_status_classes(status: int, outcome: str) -> None:
    verdict = judge_answer(REQUEST, status, {}, b"", now=NOW)
    assert (verdict.outcome, verdict.response_code) == (outcome, status)


def test_retry_after_counts_only_on_429_and_503() -> None:
    assert judge_answer(REQUEST, 500, {"Retry-After": "9"}, b"", now=NOW).retry_after is None
    assert judge_answer(REQUEST, 503, {"Retry-After": "9"}, b"", now=NOW).retry_after == 9


def test_the_runner_imports_neither_the_operator_nor_its_api_layer() -> None:
    """It runs in the task's pod: the controller, kube and engine layers are not its business."""
    probe = ("import sys, cronoq.push; print(sorted(m for m in sys.modules if m.split('.')[:2] in ("
             "['cronoq', 'controller'], ['cronoq', 'kube'], ['cronoq', 'engine'], ['cronoq', 'api'])))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
