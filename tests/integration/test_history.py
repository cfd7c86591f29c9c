"""The archive (DESIGN §23) against the real test cluster and a real Postgres server
(tests/support/postgres.py): every ended attempt is archived exactly once across a failover of the
leader, `cronoq history` lists them, and a finished task's retention waits for the archive."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from tests.support.operator import OperatorProcess
from tests.support.tasks import TERMINAL, Cronoq, plays
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster
IMAGE = "example.invalid/task:1"


def archive_url(postgres, dsn: str) -> str:
    dbname = dict(part.split("=", 1) for part in dsn.split())["dbname"]
    return f"postgresql://cronoq@127.0.0.1:{postgres.port}/{dbname}"


def outcomes(cq: Cronoq, names: list[str]) -> dict[tuple[str, int], str]:
    """(task uid, attempt) → outcome of every attempt the tasks' statuses record as ended."""
    ended = {}
    for name in names:
        task = cq.get(name)
        for attempt in (task.get("status") or {}).get("attempts", []):
            if attempt.get("outcome"):
                ended[(task["metadata"]["uid"], attempt["number"])] = attempt["outcome"]
    return ended


def ended_attempts(cq: Cronoq, names: list[str]) -> set[tuple[str, int]]:
    return set(outcomes(cq, names))


def archived(dsn: str, namespace: str) -> tuple[list[tuple[str, int]], set[str]]:
    """Attempt rows (task uid, attempt) as listed, duplicates included, and the finished tasks' uids."""
    with psycopg.connect(dsn) as conn:
        try:
            rows = conn.execute("SELECT task_uid, attempt FROM cronoq_attempts WHERE namespace = %s",
                                (namespace,)).fetchall()
            tasks = {r[0] for r in conn.execute("SELECT task_uid FROM cronoq_tasks WHERE namespace = %s",
                                                (namespace,)).fetchall()}
        except psycopg.errors.UndefinedTable:
            return [], set()
    return [(r[0], r[1]) for r in rows], tasks


def test_every_ended_attempt_is_archived_once_across_a_failover(api, own_namespace, crds, kubeconfig, tmp_path,
                                                                postgres):
    dsn = postgres.database("history")
    url = archive_url(postgres, dsn)
    lease = (own_namespace, "cronoq-leader")
    flags = (f"--archive={url}",)
    a = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / "a.log", lease=lease, pod_name="replica-a",
                        extra_args=flags)
    b = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / "b.log", lease=lease, pod_name="replica-b",
                        extra_args=flags)
    try:
        a.start()
        a.wait_leading()
        b.start()
        cq = Cronoq(api, own_namespace, a)
        cq.pool(concurrency=4, retry={"initialBackoff": "0s", "maxAttempts": 3})
        names = [f"h{i}" for i in range(12)]
        for i, name in enumerate(names):
            # Two failed attempts then a success, or a failure for good: 3 attempts each; some slow,
            # so that the leader dies with attempts running and rows queued.
            cq.task(name, delay="2s" if i % 3 == 0 else "300ms", outcome_a1="Fail", outcome_a2="Fail",
                    outcome_a3="Fail" if i % 4 == 0 else "Succeed", exit_code=1)
        wait_until(lambda: len(ended_attempts(cq, names)) >= 8, timeout=60, what="attempts ending")
        a.kill(signal.SIGKILL)
        b.wait_leading(timeout=40)
        wait_until(lambda: all(cq.status(n).get("phase") in TERMINAL for n in names), timeout=180,
                   what="all finished")

        ended = ended_attempts(cq, names)
        assert len(ended) == 3 * len(names)
        uids = {cq.get(n)["metadata"]["uid"] for n in names}

        def complete():
            rows, tasks = archived(dsn, own_namespace)
            return (rows, tasks) if set(rows) == ended and tasks == uids else None
        rows, tasks = wait_until(complete, timeout=60, what="the archive to hold every ended attempt and task")
        duplicates = len(rows) - len(set(rows))
        missing = len(ended - set(rows))
        print(f"\nattempts ended {len(ended)}, rows archived {len(rows)}, duplicates {duplicates}, "
              f"missing {missing}, tasks {len(tasks)}")
        assert duplicates == 0 and missing == 0 and len(rows) == len(ended)

        # cronoq history reads the same database.
        listed = subprocess.run([sys.executable, "-m", "cronoq", "history", f"--archive={url}",
                                 f"--namespace={own_namespace}", "--outcome=Retryable", "--limit=1000", "-o", "json"],
                                capture_output=True, text=True, check=True)
        retryable = json.loads(listed.stdout)
        expected = {k for k, outcome in outcomes(cq, names).items() if outcome == "Retryable"}
        assert len(retryable) == len(expected) == 2 * len(names) + 3, "every failed attempt, none twice"
        assert {(r["task_uid"], r["attempt"]) for r in retryable} == expected
        failed = subprocess.run([sys.executable, "-m", "cronoq", "history", f"--archive={url}",
                                 f"--namespace={own_namespace}", "--phase=DeadLettered", "--limit=1000", "-o", "json"],
                                capture_output=True, text=True, check=True)
        assert {r["name"] for r in json.loads(failed.stdout)} == {n for i, n in enumerate(names) if i % 4 == 0}
        table = subprocess.run([sys.executable, "-m", "cronoq", "history", f"--archive={url}",
                                f"--namespace={own_namespace}", "--name=h1"], capture_output=True, text=True, check=True)
        lines = table.stdout.splitlines()
        assert lines[0].split()[:5] == ["NAMESPACE", "NAME", "ATTEMPT", "POOL", "OUTCOME"]
        assert [line.split()[2] for line in lines[1:]] == ["3", "2", "1"], table.stdout
    finally:
        a.stop()
        b.stop()


def test_retention_waits_for_the_archive_then_deletes(own, postgres):
    """A finished task whose retention has ended is not deleted while the archive cannot take its rows
    (here: its database does not exist yet); it says so in an Event, and goes once they are in."""
    name = f"late_{os.getpid()}_{int(time.time())}"
    url = f"postgresql://cronoq@127.0.0.1:{postgres.port}/{name}"
    own.operator.extra_args = (f"--archive={url}", "--archive-wait=1h")
    own.operator.start()
    own.operator.wait_leading()
    own.pool(concurrency=2)
    own.task("short", ttlAfterFinished="1s", delay="100ms", outcome_a1="Fail", exit_code=1)
    own.wait_phase("short", "Succeeded", timeout=60)
    uid = own.get("short")["metadata"]["uid"]
    wait_until(lambda: "ArchivePending" in own.reasons("short"), timeout=60, what="the ArchivePending Event")
    assert own.get("short")["metadata"]["uid"] == uid, "not deleted while the archive is down"

    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:  # the database comes
        conn.execute(f'CREATE DATABASE "{name}"')

    def deleted() -> bool:
        try:
            own.get("short")
            return False
        except Exception as err:  # noqa: BLE001 - a 404 is what we wait for
            return getattr(err, "status", None) == 404
    wait_until(deleted, timeout=150, what="the task deleted once the archive took its rows")
    rows, tasks = archived(postgres.dsn(name), own.namespace)
    assert sorted(rows) == [(uid, 1), (uid, 2)] and tasks == {uid}


def test_a_keyed_duplicate_after_its_original_was_deleted_gets_the_archived_outcome(own, postgres, kubeconfig):
    """Within the key's retention, a keyed task whose original Task was deleted runs nothing and
    reports the archived phase and output (issue 53, item 3); without an output in the Task or the
    archive, the client says OutputUnavailable; a key the archive does not hold runs."""
    from cronoq.client import Client, OutputUnavailable, TaskNotFound

    url = archive_url(postgres, postgres.database("keys"))
    own.operator.extra_args = (f"--archive={url}",)
    own.operator.start()
    own.operator.wait_leading()
    own.pool(concurrency=2, leaseTTL="0s")
    client = Client(namespace=own.namespace, kubeconfig=kubeconfig)
    play = {"podMetadata": {"annotations": plays(message='{"rows": 12}')}}
    client.submit("report-1", image=IMAGE, key="report", spec=play)
    client.submit("silent-1", image=IMAGE, key="silent")
    assert client.wait("report-1", timeout=60).output == {"rows": 12}
    with pytest.raises(OutputUnavailable):
        client.wait("silent-1", timeout=60)
    for name in ("report-1", "silent-1"):
        own.custom.delete_namespaced_custom_object("cronoq.io", "v1alpha1", own.namespace, "tasks", name)

    def gone(name: str) -> bool:
        try:
            client.get(name)
            return False
        except TaskNotFound:
            return True
    wait_until(lambda: gone("report-1") and gone("silent-1"), timeout=30, what="the originals deleted")

    again = client.submit("report-2", image=IMAGE, key="report")
    assert again.metadata.name == "report-2", "the cluster holds the key no more: a new Task"
    result = client.wait(again, timeout=60)
    assert result.output == {"rows": 12} and result.task.status.duplicate_of == "report-1"
    assert "archive" in (result.task.status.message or "")
    same_name = client.wait(client.submit("report-1", image=IMAGE, key="report"), timeout=60)
    assert same_name.output == {"rows": 12} and same_name.task.status.duplicate_of == "report-1"
    with pytest.raises(OutputUnavailable) as raised:
        client.wait(client.submit("silent-2", image=IMAGE, key="silent"), timeout=60)
    assert raised.value.result.task.status.duplicate_of == "silent-1"
    assert client.wait(client.submit("fresh", image=IMAGE, key="fresh", spec=play), timeout=60).output == {"rows": 12}
    duplicates = {client.get(n).metadata.uid for n in ("report-2", "report-1", "silent-2")}
    assert not [j.metadata.name for j in own.jobs() if j.metadata.labels["cronoq.io/task-uid"] in duplicates], \
        "no duplicate ran"
    assert len(own.jobs("fresh")) == 1, "a key the archive does not hold runs"

    listed = subprocess.run([sys.executable, "-m", "cronoq", "history", f"--archive={url}",
                             f"--namespace={own.namespace}", "--key=report", "-o", "json"],
                            capture_output=True, text=True, check=True)
    assert [(r["name"], r["attempt"]) for r in json.loads(listed.stdout)] == [("report-1", 1)], \
        "what the key ran: the original's one attempt"
