"""`cronoq.client` against the real cluster and the session operator (issue 16): submit and
wait, keys, failures as exceptions, cancel by key, retry, wait_all over one watch."""
from __future__ import annotations

import time

import pytest

from cronoq.api import Task, TaskPhase
from cronoq.client import (
    RETRY_OF, Client, InvalidTask, NotRetryable, OutputUnavailable, TaskFailed, TaskNotFound, WaitTimeout,
)
from tests.support.tasks import plays

IMAGE = "example.invalid/task:1"
FAST_RETRY = {"initialBackoff": "100ms", "maxBackoff": "200ms"}


@pytest.fixture
def client(cq, kubeconfig) -> Client:
    cq.pool()
    return Client(namespace=cq.namespace, kubeconfig=kubeconfig)


def play(**kw) -> dict:
    """Pod annotations that make kwok play an outcome, as a `spec=` for submit."""
    return {"podMetadata": {"annotations": plays(**kw)}}


def test_submit_then_wait_returns_the_parsed_output(client):
    task = client.submit("hello", image=IMAGE, payload={"id": 7}, spec=play(message='{"sum": 42, "ok": true}'))
    assert isinstance(task, Task) and task.metadata.name == "hello" and task.spec.payload == {"id": 7}
    result = client.wait(task, timeout=60)
    assert result.output == {"sum": 42, "ok": True}
    assert result.phase is TaskPhase.SUCCEEDED
    assert [a.number for a in result.attempts] == [1]


def test_text_output_stays_text_and_a_task_without_output_says_so(client):
    client.submit("text", image=IMAGE, spec=play(message="plain words"))
    client.submit("silent", image=IMAGE)
    assert client.wait("text", timeout=60).output == "plain words"
    with pytest.raises(OutputUnavailable) as raised:
        client.wait("silent", timeout=60)
    assert raised.value.result.phase is TaskPhase.SUCCEEDED


def test_generated_names_and_labels(client):
    task = client.submit(image=IMAGE, generate_name="gen-", labels={"team": "a"})
    assert task.metadata.name.startswith("gen-") and task.metadata.labels == {"team": "a"}
    assert [t.metadata.name for t in client.list(label_selector="team=a")] == [task.metadata.name]


def test_a_keyed_resubmission_returns_the_original_and_creates_nothing(client, cq):
    first = client.submit("report-1", image=IMAGE, key="report", spec=play(delay="2s", message='"v1"'))
    again = client.submit("report-2", image=IMAGE, key="report")
    assert again.metadata.name == "report-1" and again.metadata.uid == first.metadata.uid
    assert client.wait(again, timeout=60).output == "v1"
    # Finished, within the pool's keyRetention: still the original, with its stored output.
    late = client.submit(image=IMAGE, key="report")
    assert late.metadata.name == "report-1"
    assert [t.metadata.name for t in client.list(key="report")] == ["report-1"]
    assert len(cq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks")["items"]) == 1


def test_keys_are_free_text_even_with_selector_syntax_in_them(client):
    key = r"user=7,region=eu\b"
    first = client.submit("odd-1", image=IMAGE, key=key)
    assert client.submit("odd-2", image=IMAGE, key=key).metadata.name == "odd-1"
    assert client.submit("odd-3", image=IMAGE, key="user=7").metadata.name == "odd-3", "a prefix is another key"
    assert [t.metadata.name for t in client.list(key=key)] == [first.metadata.name]


def test_a_key_in_another_pool_is_another_key(client, cq):
    cq.pool("other")
    a = client.submit("in-default", image=IMAGE, key="k")
    b = client.submit("in-other", image=IMAGE, key="k", pool="other")
    assert (a.metadata.name, b.metadata.name) == ("in-default", "in-other")


def test_wait_on_a_dead_lettered_task_raises_task_failed_with_the_last_message(client):
    client.submit("flaky", image=IMAGE, retry={"maxAttempts": 2, **FAST_RETRY},
                  spec=play(outcome="Fail", exit_code=3, message_a1="first try", message_a2="second try"))
    with pytest.raises(TaskFailed) as raised:
        client.wait("flaky", timeout=60)
    failed = raised.value
    assert failed.status == "dead_lettered" and failed.task.phase is TaskPhase.DEAD_LETTERED
    assert "second try" in failed.message and "first try" not in failed.message
    assert "dead_lettered" in str(failed)


def test_a_permanent_failure_is_status_failed(client):
    client.submit("bad", image=IMAGE, retry={"permanentExitCodes": [2]}, spec=play(outcome="Fail", exit_code=2))
    with pytest.raises(TaskFailed) as raised:
        client.wait("bad", timeout=60)
    assert raised.value.status == "failed"


def test_wait_gives_up_with_its_own_timeout_error(client):
    client.submit("forever", image=IMAGE, spec=play(outcome="Run"))
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as raised:
        client.wait("forever", timeout=2)
    assert raised.value.pending == ["forever"] and isinstance(raised.value, TimeoutError)
    assert 2 <= time.monotonic() - started < 10


def test_cancel_by_key_cancels_every_unfinished_holder(client, cq):
    client.submit("job-1", image=IMAGE, key="nightly", spec=play(outcome="Run"))
    cq.wait_phase("job-1", "Running")
    # A second holder made without the client's check (as kubectl apply would): it follows the original.
    cq.task("job-2", key="nightly")
    cq.wait_phase("job-2", "Blocked")
    assert sorted(client.cancel(key="nightly")) == ["job-1", "job-2"]
    finished = client.wait_all(["job-1", "job-2"], timeout=60)
    for task in finished.values():
        with pytest.raises(TaskFailed) as raised:
            client.result(task)
        assert raised.value.status == "cancelled"
    assert client.cancel(key="nightly") == [], "finished tasks are left as they are"


def test_cancel_needs_a_name_or_a_key(client):
    with pytest.raises(InvalidTask):
        client.cancel()
    with pytest.raises(TaskNotFound):
        client.cancel("nope")


def test_retry_of_a_dead_lettered_task_runs_a_new_one_linked_to_it(client, cq):
    original = client.submit("etl", image=IMAGE, key="etl-2026", retry={"maxAttempts": 2, **FAST_RETRY},
                             spec=play(outcome_a1="Fail", outcome_a2="Fail", message='"loaded"'))
    with pytest.raises(TaskFailed):
        client.wait(original, timeout=60)
    client.submit("fine", image=IMAGE)
    with pytest.raises(OutputUnavailable):
        client.wait("fine", timeout=60)
    with pytest.raises(NotRetryable):
        client.retry("fine")
    again = client.retry("etl", max_attempts=3)
    assert again.metadata.name != "etl" and again.metadata.labels[RETRY_OF] == "etl"
    assert again.spec.key is None, "the key stays with the original, or the retry would run nothing"
    assert client.wait(again, timeout=60).output == "loaded"  # attempts 1, 2 fail; 3 succeeds
    assert [a.number for a in client.get(again.metadata.name).status.attempts] == [1, 2, 3]
    assert client.get("etl").phase is TaskPhase.DEAD_LETTERED, "the original keeps its history"
    assert [t.metadata.name for t in client.retries_of("etl")] == [again.metadata.name]
    assert cq.jobs(again.metadata.name), "the retry ran Jobs of its own"


def test_wait_all_waits_for_many_over_one_watch(client):
    for i in range(4):
        client.submit(f"many-{i}", image=IMAGE, spec=play(delay=f"{i}s", message=str(i)))
    client.submit("many-fails", image=IMAGE, retry={"maxAttempts": 1}, spec=play(outcome="Fail"))
    seen: list[str] = []
    finished = client.wait_all([f"many-{i}" for i in range(4)] + ["many-fails"], timeout=90,
                               on_change=lambda t: seen.append(t.metadata.name))
    assert list(finished) == ["many-0", "many-1", "many-2", "many-3", "many-fails"]
    assert [client.result(finished[f"many-{i}"]).output for i in range(4)] == [0, 1, 2, 3]
    assert finished["many-fails"].phase is TaskPhase.DEAD_LETTERED
    assert set(seen) == set(finished)


def test_list_filters_by_phase_pool_and_key(client, cq):
    cq.pool("batch")
    client.submit("a", image=IMAGE, key="x")
    client.submit("b", image=IMAGE, pool="batch", retry={"maxAttempts": 1}, spec=play(outcome="Fail"))
    client.wait_all(["a", "b"], timeout=60)
    assert [t.metadata.name for t in client.list(phase="Succeeded")] == ["a"]
    assert [t.metadata.name for t in client.list(phase=["DeadLettered", "Failed"])] == ["b"]
    assert [t.metadata.name for t in client.list(pool="batch")] == ["b"]
    assert [t.metadata.name for t in client.list(key="x")] == ["a"]


def test_bad_submissions_are_refused_before_anything_is_created(client, cq):
    with pytest.raises(InvalidTask, match="nothing to run"):
        client.submit("no-image")
    with pytest.raises(InvalidTask, match="priority"):
        client.submit("too-high", image=IMAGE, priority=10**9)
    with pytest.raises(TaskNotFound):
        client.wait("never-submitted", timeout=5)
    assert cq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks")["items"] == []


def test_the_client_records_who_submits_a_task(cq, kubectl, tmp_path):
    """Issue 54: where no admission policy stamps cronoq.io/submitter (before Kubernetes 1.36, or
    without the chart), the client does, with the username the API server gives it (its
    SelfSubjectReview): here a ServiceAccount's bound token."""
    from tests.chart.identity import service_account_kubeconfig

    cq.pool()
    kubectl("create", "serviceaccount", "ci", namespace=cq.namespace)
    kubectl("create", "role", "ci-tasks", "--verb=get,list,create", "--resource=tasks.cronoq.io,taskpools.cronoq.io",
            namespace=cq.namespace)
    kubectl("create", "rolebinding", "ci-tasks", "--role=ci-tasks", f"--serviceaccount={cq.namespace}:ci",
            namespace=cq.namespace)
    ci = Client(namespace=cq.namespace, kubeconfig=str(service_account_kubeconfig(
        kubectl, cq.namespace, "ci", tmp_path / "ci.kubeconfig")))
    task = ci.submit("mine", image=IMAGE, annotations={"team": "a"})
    assert task.metadata.annotations == {"team": "a", "cronoq.io/submitter": f"system:serviceaccount:{cq.namespace}:ci"}
    told = ci.submit("told", image=IMAGE, annotations={"cronoq.io/submitter": "as-given"})
    assert told.metadata.annotations["cronoq.io/submitter"] == "as-given", "what the caller gives is kept (the policy judges it)"
