"""Faults of the watches. The resourceVersion compacted away (410 Gone): etcd is compacted to its
current revision while attempts run, and the API server restarted, so every watch resumes from
a version no longer there: the operator lists afresh, and no outcome is missed or doubled.
Watches that stay open and deliver nothing (every connection the operator has open stalled by a
proxy that lets new ones through): each is given up within its length and a margin, and watched
again from its last version; nothing is lost."""
from __future__ import annotations

import base64
import json
import re
import time
import urllib.request
from datetime import datetime

from cronoq.kube.watch import STALL_MARGIN
from tests.support.blackhole import Blackhole
from tests.support.faults import assert_nothing_lost, assert_one_at_a_time, running_burst
from tests.support.podwatch import PodWatch
from tests.support.toxiproxy import server_of, through
from tests.support.waiting import wait_until

RELISTED = "is gone; listing again"
WATCHED = ("TaskPool", "Task", "TaskSchedule", "Job", "Pod", "Lease", "WorkerLease")


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
        own.operator.metric("cronoq_attempts_total", namespace=own.namespace, pool="default", outcome=o)
        for o in ("success", "retryable", "permanent", "cancelled"))), timeout=10, what="every attempt counted")
    assert counted == recorded, "every attempt's end counted once"
    for name in names:
        ended = [e for e in own.events(name) if e.reason == "AttemptEnded"]
        assert len(ended) <= len(statuses[name]["attempts"]), (name, [e.message for e in ended])  # never doubled


def test_stalled_watches_are_given_up_within_their_length_and_watched_again(own, api, kubeconfig, tmp_path):
    """The operator's every connection goes through a proxy that, mid-run, stalls all those open
    (tests/support/blackhole.py): no byte more either way, no close, no reset, while new
    connections pass. Each watch, silent past its length (10 s here) plus STALL_MARGIN, is given
    up and resumed; writes stuck on stalled connections time out and are retried. Every task
    succeeds once. Before watches had a stall bound, they waited out a 330 s read timeout."""
    seconds = 10
    # Without leader election: the leader's own connection stalls too, and a deposed replica exits
    # and lists afresh, which would hide what is on test (the leader cut off is test_network's).
    own.operator.extra_args = ("--no-leader-election", f"--watch-seconds={seconds}")
    with Blackhole(upstream=server_of(kubeconfig)) as hole, PodWatch(api, own.namespace) as pods:
        own.operator.kubeconfig = through(kubeconfig, hole, tmp_path / "blackholed.kubeconfig")
        own.operator.start()
        names = running_burst(own)
        stalled_at = time.time()
        assert hole.stall() >= len(WATCHED)
        assert_nothing_lost(own, names, timeout=120)
        started = time.monotonic()
        own.task("after", delay="100ms", message="ok")  # the watches are back
        assert_nothing_lost(own, ["after"], timeout=60)
        after = time.monotonic() - started
    assert_one_at_a_time(pods, names)

    detected = {}
    for line in own.operator.log_path.read_text(errors="replace").splitlines():
        found = re.match(r"(\S+ \S+) WARNING \S+: (\w+) watch stalled", line)
        if found and found.group(2) not in detected:
            detected[found.group(2)] = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert set(detected) == set(WATCHED), f"every watch stalled and was given up: {detected}\n{own.operator.tail()}"
    late = {kind: round(t - stalled_at, 1) for kind, t in detected.items()}
    print(f"\nstall → given up, per watch (bound {seconds + STALL_MARGIN} s): {late}; a task after: {after:.1f} s")
    assert all(0 < s <= seconds + STALL_MARGIN + 3 for s in late.values()), late
