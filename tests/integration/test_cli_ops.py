"""The CLI as the person on call runs it (issue 27): a subprocess against the real cluster and
the session operator. Flags never taken from a prefix, `get -w` filtered and formatted, one
meaning per timeout, `-A`, `--context`, bulk retry/cancel/delete with `--dry-run`, pools paused,
drained and resumed, schedules suspended, resumed and triggered."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.test_cli import FAST, IMAGE, Cli, one_line_error, task_names
from tests.support.schedules import Schedules
from tests.support.tasks import GROUP, VERSION
from tests.support.waiting import wait_until

RUN = ["--pod-annotation", "kwok.cronoq.io/outcome=Run"]
FAIL = ["--max-attempts", "1", "--pod-annotation", "kwok.cronoq.io/outcome=Fail", *FAST]


class OpsCli(Cli):
    """`cronoq VERB [SUBVERB] -n NS --kubeconfig K ARGS`: `pool` and `schedule` take their own
    verb first, and the namespace after it."""

    def __call__(self, verb: str, *args: str, input: str | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        words, rest = ([verb, args[0]], args[1:]) if verb in ("pool", "schedule") else ([verb], args)
        argv = [sys.executable, "-m", "cronoq", *words, "-n", self.namespace, "--kubeconfig", self.kubeconfig, *rest]
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "COLUMNS": "200"})


@pytest.fixture
def cli(cq, kubeconfig) -> OpsCli:
    cq.pool()
    return OpsCli(cq.namespace, kubeconfig)


@pytest.fixture
def second_namespace(cq, api):
    """Another namespace the session operator watches (`t-*`), with a default pool."""
    core = client.CoreV1Api(api)
    name = f"{cq.namespace[:55]}-b"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name,
                                                                          labels={"cronoq.io/test": "true"})))
    cq.custom.create_namespaced_custom_object(GROUP, VERSION, name, "taskpools", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskPool", "metadata": {"name": "default"}, "spec": {}})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def test_a_prefix_is_never_taken_for_a_flag(cli, cq):
    result = cli("submit", "--name", "report", "--image", IMAGE)
    assert result.returncode == 2
    assert "--name is not short for --namespace" in one_line_error(result)
    result = cli("submit", "t", "--image", IMAGE, "--max", "3")
    assert result.returncode == 2 and "--max is not short for --max-attempts" in result.stderr
    assert cli("wait", "t", "--time", "3s").returncode == 2
    assert task_names(cq) == []


def test_get_watch_honours_the_selector_and_prints_names_only(cli, cq):
    cli.ok("submit", "other", "--image", IMAGE, *FAST)
    proc = subprocess.Popen([sys.executable, "-m", "cronoq", "get", "-w", "-l", "app=x", "-o", "name",
                             "-n", cli.namespace, "--kubeconfig", cli.kubeconfig],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cli.ok("submit", "picked", "--image", IMAGE, "--label", "app=x", *FAST)
        cq.wait_phase("picked", "Succeeded")
        cli.ok("submit", "picked-too", "--image", IMAGE, "--label", "app=x", *FAST)
        cli.ok("submit", "other-too", "--image", IMAGE, *FAST)
        lines: list[str] = []
        while "task.cronoq.io/picked-too" not in lines:  # listed or watched, whenever the watch began
            lines.append(proc.stdout.readline().rstrip("\n"))
            assert lines[-1], f"get -w ended early: {proc.stderr.read()}"
    finally:
        proc.kill()
        proc.wait()
    assert set(lines) == {"task.cronoq.io/picked", "task.cronoq.io/picked-too"}, lines


def test_submit_attempt_timeout_kills_the_attempt_and_wait_timeout_only_stops_waiting(cli, cq):
    killed = cli("submit", "capped", "--image", IMAGE, *RUN, "--max-attempts", "1", "--attempt-timeout", "2s",
                 "--wait", "--wait-timeout", "90")
    assert killed.returncode == 1, killed.stderr
    assert cq.get("capped")["spec"]["timeout"] == "2s" and "Timeout" in killed.stderr
    waited = cli("submit", "patient", "--image", IMAGE, *RUN, "--wait", "--wait-timeout", "2s")
    assert waited.returncode == 3 and "timed out after 2s" in waited.stderr
    assert "timeout" not in cq.get("patient")["spec"]
    cq.wait_phase("patient", "Running")  # the task goes on
    ambiguous = cli("submit", "x", "--image", IMAGE, "--wait", "--timeout", "30s")
    assert ambiguous.returncode == 2 and "--timeout is ambiguous" in one_line_error(ambiguous)


def test_all_namespaces_listing_and_bulk_delete_with_dry_run(cli, cq, second_namespace):
    run = f"run={uuid.uuid4().hex[:8]}"
    other = OpsCli(second_namespace, cli.kubeconfig)
    cli.ok("submit", "here", "--image", IMAGE, "--label", run, *FAST)
    other.ok("submit", "there", "--image", IMAGE, "--label", run, *FAST)
    cli.ok("wait", "here", "--timeout", "60")
    other.ok("wait", "there", "--timeout", "60")

    table = cli.ok("get", "-A", "-l", run).stdout.splitlines()
    assert table[0].split()[:3] == ["NAMESPACE", "NAME", "POOL"]
    assert sorted(r.split()[:2] for r in table[1:]) == sorted([[cq.namespace, "here"], [second_namespace, "there"]])
    bare = cli.ok("list", "-A", "-l", run, "--no-headers").stdout.splitlines()
    assert sorted(r.split()[1] for r in bare) == ["here", "there"]
    template = 'jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}={.status.phase}{"\\n"}{end}'
    assert sorted(cli.ok("get", "-A", "-l", run, "-o", template).stdout.splitlines()) == sorted([
        f"{cq.namespace}/here=Succeeded", f"{second_namespace}/there=Succeeded"])
    assert cli.ok("get", "here", "-o", "jsonpath={.spec.image}").stdout == IMAGE
    columns = cli.ok("get", "-A", "-l", run, "-o", "custom-columns=NS:.metadata.namespace,TASK:.metadata.name,"
                     "KEY:.spec.key").stdout.splitlines()
    assert columns[0].split() == ["NS", "TASK", "KEY"]
    assert sorted(r.split() for r in columns[1:]) == sorted([[cq.namespace, "here", "<none>"],
                                                             [second_namespace, "there", "<none>"]])
    pools = cli.ok("pool", "list", "-A").stdout.splitlines()
    assert pools[0].split()[:3] == ["NAMESPACE", "NAME", "CONCURRENCY"]
    assert {(r.split()[0], r.split()[1]) for r in pools[1:] if r.split()[0] in (cq.namespace, second_namespace)} == {
        (cq.namespace, "default"), (second_namespace, "default")}

    assert cli.ok("delete", "--older-than", "1h", "-A", "-l", run, "--dry-run").stderr.strip() == (
        "0 tasks would be deleted (dry run)")
    dry = cli.ok("delete", "-A", "-l", run, "--phase", "Succeeded", "--dry-run")
    assert sorted(dry.stdout.splitlines()) == sorted([
        f"{cq.namespace}/task.cronoq.io/here would be deleted (Succeeded)",
        f"{second_namespace}/task.cronoq.io/there would be deleted (Succeeded)"])
    assert dry.stderr.strip() == "2 tasks would be deleted (dry run)"
    assert task_names(cq) == ["here"], "a dry run deletes nothing"
    done = cli.ok("delete", "-A", "-l", run)
    assert done.stderr.strip() == "2 tasks deleted"
    wait_until(lambda: task_names(cq) == [], timeout=30, what="here deleted")
    refused = cli("delete")
    assert refused.returncode == 2 and "give task names, filters" in one_line_error(refused)


def test_bulk_retry_of_dead_letters_with_a_dry_run_first(cli, cq):
    for name in ("d1", "d2", "d3"):
        cli.ok("submit", name, "--image", IMAGE, "--label", "batch=b1", *FAIL)
    cli.ok("submit", "fine", "--image", IMAGE, "--label", "batch=b1", *FAST)
    assert cli("wait", "d1", "d2", "d3", "fine", "--timeout", "60").returncode == 1

    dry = cli.ok("retry", "--phase", "dead_lettered", "-l", "batch=b1", "--dry-run")
    assert dry.stdout.splitlines() == [f"task.cronoq.io/{n} would be retried (DeadLettered)" for n in ("d1", "d2", "d3")]
    assert dry.stderr.strip() == "3 tasks would be retried (dry run)"
    assert task_names(cq) == ["d1", "d2", "d3", "fine"]

    done = cli.ok("retry", "-l", "batch=b1")  # "fine" succeeded: not retryable, left out
    created = [line.split()[0].split("/", 1)[1] for line in done.stdout.splitlines()]
    assert sorted(n.split("-r-")[0] for n in created) == ["d1", "d2", "d3"] and done.stderr.strip() == "3 tasks retried"
    assert all(cq.get(n)["metadata"]["labels"]["cronoq.io/retry-of"] == n.split("-r-")[0] for n in created)
    again = cli.ok("retry", "--phase", "DeadLettered", "--pool", "default", "-l", "batch=b1", "--dry-run")
    skipped = [line for line in again.stdout.splitlines() if "skipped: retried already" in line]
    assert sorted(line.split()[0] for line in skipped) == [f"task.cronoq.io/{n}" for n in ("d1", "d2", "d3")]


def test_bulk_cancel_by_pool_and_label(cli, cq):
    cq.pool("slow", concurrency=1, leaseTTL="0s")  # kwok pods send no heartbeat: s1 runs until cancelled, however slow the machine
    for name in ("s1", "s2", "s3"):
        cli.ok("submit", name, "--image", IMAGE, "--pool", "slow", "--label", "job=sync", *RUN)
    cli.ok("submit", "keep", "--image", IMAGE, "--pool", "slow", *RUN)
    cq.wait_phase("s1", "Running")
    cq.wait_phase("s3", "Queued")
    wait_until(lambda: "pool slow is full: 1 running of 1" in cli.ok("describe", "s2").stdout, timeout=30,
               what="describe says why s2 waits")
    cq.wait_phase("keep", "Queued")
    assert "2nd of 3 in pool slow's queue (ahead: s2); pool slow is full" in cli.ok("describe", "s3").stdout
    dry = cli.ok("cancel", "--pool", "slow", "-l", "job=sync", "--dry-run")
    assert dry.stdout.splitlines() == ["task.cronoq.io/s1 would be cancelled (Running)",
                                       "task.cronoq.io/s2 would be cancelled (Queued)",
                                       "task.cronoq.io/s3 would be cancelled (Queued)"]
    assert not any(cq.get(n)["spec"].get("cancel") for n in ("s1", "s2", "s3"))
    done = cli.ok("cancel", "--pool", "slow", "-l", "job=sync")
    assert done.stderr.strip() == "3 tasks cancelled"
    for name in ("s1", "s2", "s3"):
        cq.wait_phase(name, "Cancelled")
    assert not cq.get("keep")["spec"].get("cancel")


def test_pool_pause_drain_status_and_resume(cli, cq):
    cq.pool("work", concurrency=2)
    cli.ok("submit", "busy", "--image", IMAGE, "--pool", "work", "--pod-annotation", "kwok.cronoq.io/delay=4s")
    cq.wait_phase("busy", "Running")
    paused = cli.ok("pool", "pause", "work").stdout.strip()
    assert paused == "taskpool.cronoq.io/work paused: no new attempt starts; running ones go on (concurrency 2 kept)"
    cli.ok("submit", "later", "--image", IMAGE, "--pool", "work", *FAST)

    drained = cli("pool", "drain", "work", "--timeout", "60")
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.startswith("taskpool.cronoq.io/work drained")
    assert cq.status("busy")["phase"] == "Succeeded", "drain returns once the running attempt has ended"
    wait_until(lambda: "Paused" in cli.ok("pool", "status", "work").stdout, timeout=30, what="pool status Paused")
    status = cli.ok("pool", "status", "work").stdout
    assert "Concurrency:  2" in status and "Paused:       true" in status and "(concurrency 2 kept)" in status
    assert cq.status("later").get("phase") == "Queued" and cq.status("later").get("attempt", 0) == 0, \
        "a paused pool starts nothing, a slot free or not"
    described = cli.ok("describe", "later").stdout
    assert "Waiting:" in described and "pool work is paused (concurrency 2 kept)" in described
    before = Cli(cli.namespace, cli.kubeconfig).ok("pool", "list")  # `pool -n NS --kubeconfig K list`
    row = next(r.split() for r in before.stdout.splitlines() if r.startswith("work "))
    assert row[:3] == ["work", "2", "true"]

    assert cli.ok("pool", "resume", "work").stdout.strip() == "taskpool.cronoq.io/work resumed (concurrency 2)"
    assert cli("wait", "later", "--timeout", "60").returncode == 0
    assert yaml.safe_load(cli.ok("pool", "list", "-o", "yaml").stdout)["items"][1]["spec"]["paused"] is False

    cli.ok("submit", "forever", "--image", IMAGE, "--pool", "work", *RUN)
    cq.wait_phase("forever", "Running")
    stuck = cli("pool", "drain", "work", "--timeout", "2s")
    assert stuck.returncode == 3 and "still running: forever" in stuck.stderr
    ghost = cli("pool", "pause", "ghost")
    assert ghost.returncode == 2 and f"taskpool {cq.namespace}/ghost not found" in one_line_error(ghost)


def test_schedule_list_suspend_resume_trigger(cli, cq):
    sc = Schedules(cq)
    sc.create("nightly", every="1h", plays={"delay": "100ms"})
    wait_until(lambda: sc.status("nightly").get("nextFireTime"), timeout=30, what="next fire written")
    row = cli.ok("schedule", "list").stdout.splitlines()
    assert row[0].split()[:3] == ["NAME", "SCHEDULE", "SUSPEND"]
    assert row[1].split()[:4] == ["nightly", "every", "1h", "false"]

    assert cli.ok("schedule", "suspend", "nightly").stdout.strip() == "taskschedule.cronoq.io/nightly suspended"
    assert sc.get("nightly")["spec"]["suspend"] is True
    wait_until(lambda: not sc.status("nightly").get("nextFireTime"), timeout=30, what="no next fire while suspended")
    assert cli.ok("schedule", "list", "--no-headers").stdout.split()[:4] == ["nightly", "every", "1h", "true"]
    assert cli.ok("schedule", "resume", "nightly").stdout.strip() == "taskschedule.cronoq.io/nightly resumed"
    wait_until(lambda: sc.status("nightly").get("nextFireTime"), timeout=30, what="next fire after resume")

    fired = cli.ok("schedule", "trigger", "nightly").stdout.strip()
    assert fired.startswith("task.cronoq.io/nightly-manual-") and fired.endswith(" created")
    cq.wait_phase(fired.split()[0].split("/", 1)[1], "Succeeded")
    ghost = cli("schedule", "suspend", "ghost")
    assert ghost.returncode == 2 and f"taskschedule {cq.namespace}/ghost not found" in one_line_error(ghost)


def test_context_picks_the_kubeconfig_context_and_its_namespace(cli, cq, tmp_path):
    cli.ok("submit", "ctx", "--image", IMAGE, *FAST)
    config = yaml.safe_load(open(cli.kubeconfig))
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    config["contexts"].append({"name": "on-call", "context": {**current["context"], "namespace": cq.namespace}})
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "COLUMNS": "200"}
    argv = [sys.executable, "-m", "cronoq", "get", "--kubeconfig", str(path), "-o", "name"]
    picked = subprocess.run([*argv, "--context", "on-call"], capture_output=True, text=True, env=env, timeout=60)
    assert picked.returncode == 0 and picked.stdout.strip() == "task.cronoq.io/ctx", picked.stderr
    missing = subprocess.run([*argv, "--context", "nope"], capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 1 and "nope" in missing.stderr


def test_completion_of_task_pool_and_schedule_names_through_kubectl(cli, cq, kubectl):
    cq.pool("batch")
    cli.ok("submit", "etl-1", "--image", IMAGE, *FAST)
    cli.ok("submit", "etl-2", "--image", IMAGE, *FAST)
    cli.ok("submit", "report", "--image", IMAGE, *FAST)
    Schedules(cq).create("nightly", every="1h", plays={"delay": "100ms"})
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "KUBECONFIG": cli.kubeconfig}

    def complete(*words: str) -> list[str]:
        result = subprocess.run([kubectl.binary, "__complete", "cronoq", *words], capture_output=True, text=True,
                                env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    assert complete("describe", "-n", cq.namespace, "etl") == ["etl-1", "etl-2", ":4"]
    assert complete("pool", "pause", "-n", cq.namespace, "") == ["batch", "default", ":4"]
    assert complete("get", "-n", cq.namespace, "--pool", "b") == ["batch", ":4"]
    assert complete("schedule", "suspend", "-n", cq.namespace, "") == ["nightly", ":4"]
    assert complete("sub") == ["submit", ":4"]


def test_logs_tail_since_and_timestamps(cli, cq):
    from tests.support.cluster import load_devcluster

    expected = list(load_devcluster().POD_LOG_LINES)
    cli.ok("submit", "chatty", "--image", IMAGE, *FAST)
    cli.ok("wait", "chatty", "--timeout", "60")
    assert cli.ok("logs", "chatty", "--tail", "1").stdout.splitlines() == expected[-1:]
    stamped = cli.ok("logs", "chatty", "--timestamps").stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == expected
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ", line) for line in stamped), stamped
    assert cli.ok("logs", "chatty", "--since", "87600h").stdout.splitlines() == expected
    bad = cli("logs", "chatty", "--since", "soon")
    assert bad.returncode == 2 and "--since" in one_line_error(bad)
