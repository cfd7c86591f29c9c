"""Faults: the watches' resourceVersion is compacted away (410 Gone). etcd is compacted to its
current revision while attempts run, and the API server restarted, so every watch resumes from
a version no longer there: the operator lists afresh, and no outcome is missed or doubled."""
from __future__ import annotations

import base64
import json
import urllib.request

from tests.support.faults import assert_nothing_lost, assert_one_at_a_time
from tests.support.podwatch import PodWatch
from tests.support.waiting import wait_until

RELISTED = "is gone; listing again"


def _etcd(devcluster, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{devcluster.ETCD_CLIENT}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def compact_etcd(devcluster) -> int:
    """Compact etcd's history up to its current revision (through its HTTP gateway); return it."""
    key = base64.b64encode(b"/registry/namespaces/default").decode()
    revision = int(_etcd(devcluster, "/v3/kv/range", {"key": key})["header"]["revision"])
    _etcd(devcluster, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def test_watches_relist_after_410_gone_and_miss_or_double_no_outcome(own, api, devcluster):
    # Without leader election: on a busy machine the restart can outlast the renew deadline, and
    # a replica that exits and starts afresh lists anyway; it is the watches' resumption on test.
    own.operator.extra_args = ("--no-leader-election",)
    own.operator.start()
    own.pool(concurrency=4, leaseTTL="0s", retry={"initialBackoff": "0s"})
    names = [f"g{i}" for i in range(10)]
    with PodWatch(api, own.namespace) as pods:
        for i, name in enumerate(names):  # some fail once: retries span the gap too
            own.task(name, delay="3s", message="ok", **({"outcome_a1": "Fail"} if i % 3 == 0 else {}))
        wait_until(lambda: sum(own.status(n).get("phase") == "Running" for n in names) >= 3, timeout=60,
                   what="attempts running")
        compact_etcd(devcluster)
        devcluster.restart("kube-apiserver")
        statuses = assert_nothing_lost(own, names)
        own.task("after", delay="100ms", message="ok")  # the watches are back
        assert_nothing_lost(own, ["after"])
    assert_one_at_a_time(pods, names)

    log = own.operator.log_path.read_text()
    assert log.count(RELISTED) >= 1, own.operator.tail()
    recorded = sum(len(s["attempts"]) for s in statuses.values()) + 1
    counted = wait_until(lambda: (lambda n: n if n >= recorded else None)(sum(
        own.operator.metric("cronoq_attempts_total", pool="default", outcome=o)
        for o in ("success", "retryable", "permanent", "cancelled"))), timeout=10, what="every attempt counted")
    assert counted == recorded, "every attempt's end counted once"
    for name in names:
        ended = [e for e in own.events(name) if e.reason == "AttemptEnded"]
        assert len(ended) <= len(statuses[name]["attempts"]), (name, [e.message for e in ended])  # never doubled
