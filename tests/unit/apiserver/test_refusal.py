"""The API server's message of a refusal, read once by the seam (apiserver/errors.py) for the
operator's writes, the client, the CLI and the dashboard; each keeps its own words for when there
is none."""
from __future__ import annotations

import json

import pytest

from cronoq.apiserver.errors import Forbidden, server_message
from cronoq.cli.dashboard.cache import api_message as dashboard_message
from cronoq.cli.runner import api_error as cli_message
from cronoq.kube.writes import Rejected

QUOTA = 'exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'


def refused(body: str | bytes | None) -> Forbidden:
    return Forbidden("Forbidden", body=body)


@pytest.mark.parametrize("body, message", [
    (json.dumps({"kind": "Status", "status": "Failure", "message": QUOTA, "code": 403}), QUOTA),
    (json.dumps({"kind": "Status", "message": QUOTA}).encode(), QUOTA),
    (json.dumps({"kind": "Status", "code": 403}), None), (json.dumps({"message": None}), None),
    ("<html>502 Bad Gateway</html>", None), ("", None), (None, None), ('["message"]', None), ('"message"', None),
])
def test_the_message_of_the_status_or_none(body, message) -> None:
    assert server_message(refused(body)) == message


def test_each_reader_falls_back_as_before() -> None:
    def write_message(err: Forbidden) -> str:
        return Rejected.of(err).message

    with_status, without = refused(json.dumps({"message": QUOTA})), refused("<html></html>")
    assert [read(with_status) for read in (write_message, cli_message, dashboard_message)] == \
        [QUOTA, QUOTA, f"{QUOTA} (403 Forbidden)"]
    assert [read(without) for read in (write_message, cli_message, dashboard_message)] == \
        ["Forbidden", "403 Forbidden", "403 Forbidden"]
