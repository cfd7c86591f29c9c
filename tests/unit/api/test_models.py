"""The Task and TaskPool models: defaults from DESIGN, what they refuse, and round trips."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, strategies as st
from pydantic import ValidationError

from cronoq.api import (
    API_VERSION, GROUP, VERSION, TaskSchedule,
    Attempt, AttemptOutcome, Condition, Jitter, RetryOverride, RetryPolicy, Task, TaskPhase, TaskPool, TaskPoolSpec,
    TaskSpec, TaskStatus,
)
from cronoq.api.durations import format as format_duration
from cronoq.api.task import PAYLOAD_LIMIT, TEMPLATE_LIMIT

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MODELS = {"Task": Task, "TaskPool": TaskPool, "TaskSchedule": TaskSchedule}


def task(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "t"},
            "spec": {"image": "busybox", **spec}}


def test_api_version_is_group_slash_version():
    # spelled out in cronoq.pod_protocol (cronoq.api.meta imports it) so that it is a Literal to mypy; it must not drift
    assert API_VERSION == f"{GROUP}/{VERSION}"


# --- defaults -----------------------------------------------------------------------------------

def test_task_defaults() -> None:
    spec = Task.model_validate(task()).spec
    assert spec.pool == "default"
    assert spec.priority == 0
    assert spec.cancel is False
    assert spec.key is None and spec.payload is None and spec.retry is None and spec.timeout is None
    assert spec.depends_on == ()


def test_retry_policy_defaults_are_designs() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.initial_backoff == timedelta(seconds=1)
    assert policy.multiplier == 2.0
    assert policy.max_backoff == timedelta(seconds=60)
    assert policy.jitter is Jitter.FULL
    assert policy.permanent_exit_codes == ()


def test_pool_defaults() -> None:
    spec = TaskPool.model_validate({"metadata": {"name": "default"}}).spec
    assert spec.retry == RetryPolicy()
    assert spec.lease_ttl == timedelta(seconds=30)
    assert spec.key_retention == timedelta(hours=1)
    assert spec.timeout is None
    assert spec.concurrency == 10


def test_status_defaults() -> None:
    status = TaskStatus()
    assert status.phase is None and status.attempt == 0 and status.epoch == 0
    assert status.attempts == () and status.output_available is False


# --- the task's retry fields override the pool's, one by one -------------------------------------------

def test_overlay_replaces_only_what_the_task_sets() -> None:
    pool = RetryPolicy(max_attempts=5, initial_backoff="2s", jitter="none")
    merged = pool.overlay(RetryOverride(max_attempts=2, permanent_exit_codes=[3]))
    assert merged == RetryPolicy(max_attempts=2, initial_backoff="2s", jitter="none", permanent_exit_codes=[3])


def test_overlay_without_override_is_the_pool() -> None:
    pool = RetryPolicy(max_attempts=7)
    assert pool.overlay(None) is pool
    assert pool.overlay(RetryOverride()) == pool


def test_overlay_lifts_the_pools_cap_for_a_larger_initial_backoff() -> None:
    merged = RetryPolicy(max_backoff="1m").overlay(RetryOverride(initial_backoff="5m"))
    assert merged.initial_backoff == merged.max_backoff == timedelta(minutes=5)


def test_overlay_lowers_the_pools_initial_backoff_under_a_smaller_cap() -> None:
    merged = RetryPolicy(initial_backoff="10s").overlay(RetryOverride(max_backoff="2s"))
    assert merged.initial_backoff == merged.max_backoff == timedelta(seconds=2)


@given(pool_initial=st.integers(0, 100), pool_max=st.integers(0, 100),
       task_initial=st.none() | st.integers(0, 100), task_max=st.none() | st.integers(0, 100))
def test_overlay_always_gives_a_valid_policy(pool_initial, pool_max, task_initial, task_max) -> None:
    seconds = lambda n: None if n is None else timedelta(seconds=n)  # noqa: E731
    if pool_max < pool_initial:
        pool_initial, pool_max = pool_max, pool_initial
    if task_initial is not None and task_max is not None and task_max < task_initial:
        task_initial, task_max = task_max, task_initial
    pool = RetryPolicy(initial_backoff=seconds(pool_initial), max_backoff=seconds(pool_max))
    merged = pool.overlay(RetryOverride(initial_backoff=seconds(task_initial), max_backoff=seconds(task_max)))
    assert merged.initial_backoff <= merged.max_backoff
    if task_initial is not None:
        assert merged.initial_backoff == seconds(task_initial)
    if task_max is not None:
        assert merged.max_backoff == seconds(task_max)


# --- what the models refuse (the CRD refuses the same; see tests/integration) ------------------------

@pytest.mark.parametrize("spec, words", [
    ({"priority": 1_000_001}, "priority"),
    ({"priority": -1_000_001}, "priority"),
    ({"image": ""}, "image"),
    ({"image": "has space"}, "image"),
    ({"pool": "Not_A_Name"}, "pool"),
    ({"key": ""}, "key"),
    ({"key": "k" * 257}, "key"),
    ({"retry": {"maxAttempts": 0}}, "maxAttempts"),
    ({"retry": {"maxAttempts": 101}}, "maxAttempts"),
    ({"retry": {"multiplier": 0.5}}, "multiplier"),
    ({"retry": {"jitter": "random"}}, "jitter"),
    ({"retry": {"initialBackoff": "1.5s"}}, "initialBackoff"),
    ({"retry": {"initialBackoff": "25h"}}, "initialBackoff"),
    ({"retry": {"initialBackoff": "2m", "maxBackoff": "1m"}}, "maxBackoff"),
    ({"retry": {"permanentExitCodes": [0]}}, "permanentExitCodes"),
    ({"retry": {"permanentExitCodes": [256]}}, "permanentExitCodes"),
    ({"retry": {"permanentExitCodes": [2, 2]}}, "duplicates"),
    ({"timeout": "0s"}, "timeout"),
    ({"timeout": "169h"}, "timeout"),
    ({"dependsOn": [{"task": f"d{i}"} for i in range(33)]}, "dependsOn"),
    ({"dependsOn": [{"task": "a", "on": "Maybe"}]}, "on"),
    ({"dependsOn": [{"task": "a", True: "Complete"}]}, '"on"'),
    ({"env": [{"name": "CRONOQ_ATTEMPT", "value": "9"}]}, "reserved"),
    ({"env": [{"name": "1X"}]}, "name"),
    ({"payload": {"blob": "x" * PAYLOAD_LIMIT}}, "payload"),
    ({"template": {"spec": {"containers": [{"name": "task", "args": ["x" * TEMPLATE_LIMIT]}]}}}, "spec.template is"),
    ({"podMetadata": {"labels": {"a": "v" * 64}}}, "labels"),
    ({"resources": {"limits": {"memory": "1 Gi"}}}, "memory"),
    ({"resources": {"limits": {"cpu": -1}}}, "cpu"),
    ({"tolerations": [{"operator": "Maybe"}]}, "operator"),
])
def test_task_spec_refuses(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as failure:
        Task.model_validate(task(**spec))
    assert words in str(failure.value)


def test_task_cannot_depend_on_itself() -> None:
    with pytest.raises(ValidationError, match="cannot depend on itself"):
        Task.model_validate(task(dependsOn=[{"task": "t"}]))


def test_task_name_is_a_label_value() -> None:
    obj = task()
    obj["metadata"]["name"] = "n" * 64
    with pytest.raises(ValidationError, match="63"):
        Task.model_validate(obj)


@pytest.mark.parametrize("spec, words", [
    ({"concurrency": -1}, "concurrency"),
    ({"concurrency": 10_001}, "concurrency"),
    ({"leaseTTL": "1s"}, "leaseTTL"),
    ({"leaseTTL": "2h"}, "leaseTTL"),
    ({"keyRetention": "721h"}, "keyRetention"),
    ({"retry": {"maxBackoff": "500ms"}}, "maxBackoff"),
])
def test_pool_spec_refuses(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as failure:
        TaskPoolSpec.model_validate(spec)
    assert words in str(failure.value)


def test_lease_ttl_zero_turns_heartbeats_off() -> None:
    assert TaskPoolSpec.model_validate({"leaseTTL": "0s"}).lease_ttl == timedelta(0)


def test_status_bounds() -> None:
    with pytest.raises(ValidationError):
        TaskStatus(attempts=[Attempt(number=n) for n in range(1, 22)])
    with pytest.raises(ValidationError):
        TaskStatus(output="x" * 4097)
    with pytest.raises(ValidationError):
        TaskStatus(message="x" * 4097)
    with pytest.raises(ValidationError):
        TaskStatus(attempt=-1)


def test_models_are_frozen() -> None:
    spec = Task.model_validate(task()).spec
    with pytest.raises(ValidationError):
        spec.priority = 5  # type: ignore[misc]


def test_snake_case_and_camel_case_both_construct() -> None:
    assert TaskSpec(depends_on=[{"task": "a"}]) == TaskSpec.model_validate({"dependsOn": [{"task": "a"}]})


def test_phases() -> None:
    assert {p for p in TaskPhase if p.terminal} == {
        TaskPhase.SUCCEEDED, TaskPhase.FAILED, TaskPhase.DEAD_LETTERED, TaskPhase.CANCELLED, TaskPhase.SKIPPED}


# --- round trips ---------------------------------------------------------------------------------------

def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """cronoq's own objects in examples/ (a worker Deployment and its RBAC are Kubernetes' own)."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc["kind"] in MODELS:
                found.append((f"{path.relative_to(EXAMPLES)}#{i}", doc))
    return found


def contained(small: Any, big: Any) -> bool:
    """Every key and value of `small` appears in `big` (which may hold more: defaults)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and contained(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(map(contained, small, big))
    return small == big


def test_every_kind_of_example_is_there() -> None:
    kinds = {doc["kind"] for _, doc in example_documents()}
    assert kinds == {"Task", "TaskPool", "TaskSchedule"}
    assert len(example_documents()) >= 10


@pytest.mark.parametrize("where, doc", example_documents(), ids=[w for w, _ in example_documents()])
def test_example_round_trips(where: str, doc: dict[str, Any]) -> None:
    """YAML → model → YAML gives back the manifest (plus defaults), and parsing that again
    gives the same model. Durations in examples are written canonically, so they compare equal."""
    model = MODELS[doc["kind"]].model_validate(doc)
    again = model.to_dict()
    assert contained(doc, again), f"{where}: lost or changed in the round trip:\n{yaml.safe_dump(again)}"
    assert MODELS[doc["kind"]].model_validate(again) == model


def test_to_dict_leaves_out_empty_defaults() -> None:
    out = Task.model_validate(task()).to_dict()
    assert out == {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "t"},
                   "spec": {"image": "busybox", "pool": "default", "priority": 0, "cancel": False}}


def test_empty_payload_is_kept() -> None:
    assert Task.model_validate(task(payload={})).to_dict()["spec"]["payload"] == {}


durations_ms = st.integers(min_value=0, max_value=24 * 3_600_000).map(lambda n: timedelta(milliseconds=n))
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                       timezones=st.just(timezone.utc)).map(lambda t: t.replace(microsecond=0))


@st.composite
def retry_overrides(draw: st.DrawFn) -> RetryOverride:
    initial = draw(st.none() | durations_ms)
    most = draw(st.none() | durations_ms)
    if initial is not None and most is not None and most < initial:
        initial, most = most, initial
    return RetryOverride(
        max_attempts=draw(st.none() | st.integers(1, 100)),
        initial_backoff=initial,
        multiplier=draw(st.none() | st.floats(1.0, 10.0)),
        max_backoff=most,
        jitter=draw(st.none() | st.sampled_from(Jitter)),
        permanent_exit_codes=draw(st.none() | st.lists(st.integers(1, 255), unique=True, max_size=5)),
    )


@st.composite
def statuses(draw: st.DrawFn) -> TaskStatus:
    count = draw(st.integers(0, 20))
    attempts = [Attempt(number=n, trigger="First" if n == 1 else "Retry", started_at=draw(moments),
                        outcome=draw(st.none() | st.sampled_from(AttemptOutcome)),
                        exit_code=draw(st.none() | st.integers(0, 255)), lease_id=f"e{draw(st.integers(0, 99))}-a{n}")
                for n in range(1, count + 1)]
    return TaskStatus(
        phase=draw(st.none() | st.sampled_from(TaskPhase)),
        attempt=count,
        attempts=attempts,
        submitted_at=draw(st.none() | moments),
        output=draw(st.none() | st.text(max_size=50)),
        conditions=[Condition(type="Ready", status="True", reason="Succeeded", last_transition_time=draw(moments))],
        epoch=draw(st.integers(0, 2**31 - 1)),
    )


@given(retry=st.none() | retry_overrides(), status=st.none() | statuses(),
       priority=st.integers(-1_000_000, 1_000_000), timeout=st.none() | durations_ms.filter(lambda d: d >= timedelta(seconds=1)),
       payload=st.none() | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4))
def test_task_round_trips(retry, status, priority, timeout, payload) -> None:
    spec = TaskSpec(image="busybox", retry=retry, priority=priority, timeout=timeout, payload=payload)
    original = Task(metadata={"name": "t"}, spec=spec, status=status)
    text = yaml.safe_dump(original.to_dict())
    assert Task.model_validate(yaml.safe_load(text)) == original


@given(st.builds(lambda n, d: RetryPolicy(max_attempts=n, initial_backoff=d, max_backoff=d),
                 st.integers(1, 100), durations_ms))
def test_pool_round_trips(policy: RetryPolicy) -> None:
    pool = TaskPool(metadata={"name": "p"}, spec=TaskPoolSpec(retry=policy))
    assert TaskPool.model_validate(pool.to_dict()) == pool
    assert pool.to_dict()["spec"]["retry"]["initialBackoff"] == format_duration(policy.initial_backoff)
