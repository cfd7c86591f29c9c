"""The CLI's listings in pages against the real API server (issue 56, item 4): with
`--chunk-size 5`, twelve Tasks are three list requests, and `list`, `get -o json`, `describe`'s
place in the queue and a bulk verb read them page by page and show or act on every one, once, in
the server's order. (The unit tests, tests/unit/cli/test_client_paging.py, check that each page is
shown or acted on before the next is read; here the real server's `continue` tokens do the
paging.)"""
from __future__ import annotations

import json

from tests.integration.test_cli import Cli
from tests.support.waiting import wait_until

NAMES = [f"t-{i:02d}" for i in range(12)]


def test_twelve_tasks_in_pages_of_five(cq, kubeconfig):
    cq.pool(paused=True)  # they stay Queued, in submission order
    for name in NAMES:
        cq.task(name)
    wait_until(lambda: all(cq.status(n).get("phase") == "Queued" for n in NAMES), timeout=60,
               what="every task Queued in the paused pool")
    cli = Cli(cq.namespace, kubeconfig)

    assert cli.ok("list", "--chunk-size", "5", "-o", "name").stdout.split() == [f"task.cronoq.io/{n}" for n in NAMES]
    table = cli.ok("list", "--chunk-size", "5").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "POOL", "STATUS"]
    assert [row.split()[0] for row in table[1:]] == NAMES  # the header once, then every page's rows
    doc = json.loads(cli.ok("get", "--chunk-size", "5", "-o", "json", "--phase", "Queued").stdout)
    assert doc["kind"] == "List" and [i["metadata"]["name"] for i in doc["items"]] == NAMES

    wait_until(lambda: (cq.custom.get_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools",
                                                               "default").get("status") or {}).get("queued") == 12,
               timeout=60, what="the pool's status counts 12 queued")
    described = cli.ok("describe", "t-07", "--chunk-size", "5").stdout
    assert "8th of 12 in pool default's queue (ahead: t-00, t-01, t-02 and 4 more)" in described, described

    cancelled = cli.ok("cancel", "--phase", "Queued", "--chunk-size", "5")
    assert cancelled.stdout.splitlines() == [f"task.cronoq.io/{n} cancel requested" for n in NAMES]
    assert cancelled.stderr.strip() == "12 tasks cancelled"
