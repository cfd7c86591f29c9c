"""The client's reads of an attempt over real HTTP (a loopback server answering as the API server
does), through cronoq's one blocking client: the attempt's pod by its labels, its log with kubectl's
options as query parameters, a refused log as LogsUnavailable in the server's words, and a task's
Events oldest first as TaskEvents."""
from __future__ import annotations

import http.server
import json
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from cronoq.apiserver.config import Connection
from cronoq.apiserver.sync import Api
from cronoq.client import Client, LogsUnavailable
from tests.unit.builders import make_task

POD = {"metadata": {"name": "hello-a1-xyz", "creationTimestamp": "2026-12-06T10:00:00Z"},
       "spec": {"containers": [{"name": "sidecar"}, {"name": "task"}]}}
OLDER = {"metadata": {"name": "hello-a1-old", "creationTimestamp": "2026-12-06T09:00:00Z"},
         "spec": {"containers": [{"name": "task"}]}}
EVENTS = [
    {"metadata": {"name": "e2", "resourceVersion": "12", "creationTimestamp": "2026-12-06T10:00:05Z"},
     "lastTimestamp": "2026-12-06T10:00:05Z", "type": "Warning", "reason": "AttemptFailed", "message": "exit 1",
     "count": 2, "reportingInstance": "op-0"},
    {"metadata": {"name": "e1", "resourceVersion": "11", "creationTimestamp": "2026-12-06T10:00:01Z"},
     "eventTime": "2026-12-06T10:00:01.250000Z", "type": "Normal", "reason": "AttemptStarted", "message": "a1"},
]


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, list[str]], str]] = []
        self.refuse_logs = False
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        self.server.asked.append((url.path, parse_qs(url.query), self.headers["Accept"]))
        if url.path == "/apis/cronoq.io/v1alpha1/namespaces/ns/tasks/hello":
            task = make_task("hello", "ns").status({"phase": "Running", "attempt": 1,
                                                    "attempts": [{"number": 1, "job": "hello-a1"}]}).raw()
            task["metadata"]["uid"] = "u-1"
            return self._send(200, json.dumps(task).encode())
        if url.path == "/api/v1/namespaces/ns/pods":
            return self._send(200, json.dumps({"items": [POD, OLDER]}).encode())
        if url.path == "/api/v1/namespaces/ns/pods/hello-a1-xyz/log":
            if self.server.refuse_logs:
                status = {"kind": "Status", "code": 400, "message": 'container "task" in pod is waiting to start'}
                return self._send(400, json.dumps(status).encode())
            return self._send(200, b"first\n\nlast without newline", "text/plain")
        if url.path == "/api/v1/namespaces/ns/events":
            return self._send(200, json.dumps({"items": EVENTS}).encode())
        self._send(404, json.dumps({"kind": "Status", "code": 404, "message": "not here"}).encode())


@pytest.fixture
def server():
    srv = Server()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def client(server: Server) -> Client:
    return Client("ns", api=Api(Connection(host=f"http://127.0.0.1:{server.server_address[1]}")))


def query(server: Server, path: str) -> dict[str, Any]:
    return next((q, accept) for p, q, accept in server.asked if p == path)


def test_the_newest_pod_of_the_attempt_and_its_task_containers_log_with_kubectls_options(server) -> None:
    c = client(server)
    task, number, pod = c.attempt_pod("hello")
    assert (task.metadata.name, number, pod["metadata"]["name"]) == ("hello", 1, "hello-a1-xyz")
    labels, _ = query(server, "/api/v1/namespaces/ns/pods")
    assert labels == {"labelSelector": ["cronoq.io/task=hello,cronoq.io/attempt=1,cronoq.io/task-uid=u-1"]}

    assert list(c.logs("hello", tail=5, since=2.5)) == ["first", "", "last without newline"]
    options, accept = query(server, "/api/v1/namespaces/ns/pods/hello-a1-xyz/log")
    assert options == {"container": ["task"], "follow": ["false"], "timestamps": ["false"], "tailLines": ["5"],
                       "sinceSeconds": ["3"]}
    assert accept == "*/*"


def test_a_refused_log_is_unavailable_in_the_servers_words(server) -> None:
    server.refuse_logs = True
    with pytest.raises(LogsUnavailable, match='pod hello-a1-xyz: container "task" in pod is waiting to start'):
        list(client(server).logs("hello"))


def test_a_tasks_events_oldest_first_by_uid(server) -> None:
    c = client(server)
    events = c.events(c.get("hello"))
    assert [(e.reason, e.count, e.reporting_instance) for e in events] == [("AttemptStarted", None, None),
                                                                          ("AttemptFailed", 2, "op-0")]
    assert str(events[0].when) == "2026-12-06 10:00:01.250000+00:00"
    selector, _ = query(server, "/api/v1/namespaces/ns/events")
    assert selector == {"fieldSelector": ["involvedObject.uid=u-1"]}
