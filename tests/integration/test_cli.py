"""The `cronoq` CLI as a user runs it: a subprocess against the real cluster and the session
operator (issue 16). Exit codes: 0 succeeded, 1 did not succeed, 2 usage/bad input, 3 timed out."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.cluster import load_devcluster
from tests.support.waiting import wait_until

IMAGE = "example.invalid/task:1"
FAST = ["--pod-annotation", "kwok.cronoq.io/delay=200ms"]


@dataclass
class Cli:
    namespace: str
    kubeconfig: str

    def __call__(self, verb: str, *args: str, input: str | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "cronoq", verb, "-n", self.namespace, "--kubeconfig", self.kubeconfig, *args]
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "COLUMNS": "200"})

    def ok(self, verb: str, *args: str, **kw) -> subprocess.CompletedProcess:
        result = self(verb, *args, **kw)
        assert result.returncode == 0, f"cronoq {verb} {args} exited {result.returncode}: {result.stderr}"
        return result


@pytest.fixture
def cli(cq, kubeconfig) -> Cli:
    cq.pool()
    return Cli(cq.namespace, kubeconfig)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one error line, got {result.stderr!r}"
    return lines[0]


def task_names(cq) -> list[str]:
    items = cq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks")["items"]
    return sorted(i["metadata"]["name"] for i in items)


def test_submit_then_wait_prints_the_output(cli):
    out = cli.ok("submit", "hello", "--image", IMAGE, "--payload", '{"id": 7}',
                 "--pod-annotation", 'kwok.cronoq.io/message={"greeting": "hi"}', "--", "python", "-m", "job")
    assert out.stdout.strip() == "task.cronoq.io/hello created"
    waited = cli.ok("wait", "hello", "--timeout", "60s")
    assert json.loads(waited.stdout) == {"greeting": "hi"}
    spec = yaml.safe_load(cli.ok("get", "hello", "-o", "yaml").stdout)["spec"]
    assert spec["command"] == ["python", "-m", "job"] and spec["payload"] == {"id": 7}


def test_submit_wait_in_one_step_and_from_a_manifest(cli, tmp_path):
    manifest = tmp_path / "t.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "cronoq.io/v1alpha1", "kind": "Task",
                                        "metadata": {"name": "from-file"},
                                        "spec": {"image": IMAGE, "podMetadata": {"annotations": {
                                            "kwok.cronoq.io/message": "42"}}}}))
    result = cli.ok("submit", "-f", str(manifest), "--wait", "--wait-timeout", "60")
    assert result.stdout.splitlines() == ["task.cronoq.io/from-file created", "42"]
    named = cli.ok("submit", "--image", IMAGE, "--generate-name", "gen-", "-o", "name").stdout.strip()
    assert named.startswith("task.cronoq.io/gen-")
    assert cli("wait", named, "--timeout", "60").returncode == 0, "wait takes what -o name prints"


def test_a_keyed_resubmission_returns_the_original(cli, cq):
    cli.ok("submit", "nightly-1", "--image", IMAGE, "--key", "nightly", *FAST)
    again = cli.ok("submit", "nightly-2", "--image", IMAGE, "--key", "nightly")
    assert again.stdout.startswith("task.cronoq.io/nightly-1 unchanged: it holds key 'nightly'")
    assert task_names(cq) == ["nightly-1"]
    cli.ok("wait", "nightly-1")
    named = cli.ok("submit", "--image", IMAGE, "--key", "nightly", "-o", "name").stdout.strip()
    assert named == "task.cronoq.io/nightly-1"
    assert task_names(cq) == ["nightly-1"]


def test_wait_on_a_dead_lettered_task_exits_1_naming_the_status_and_last_message(cli):
    cli.ok("submit", "doomed", "--image", IMAGE, "--max-attempts", "2",
           "--pod-annotation", "kwok.cronoq.io/outcome=Fail",
           "--pod-annotation", "kwok.cronoq.io/message-a2=disk full", *FAST)
    result = cli("wait", "doomed", "--timeout", "60")
    assert result.returncode == 1
    line = one_line_error(result)
    assert "doomed dead_lettered" in line and "disk full" in line
    as_json = json.loads(cli("wait", "doomed", "-o", "json").stdout)
    assert as_json["doomed"]["status"] == "dead_lettered" and "disk full" in as_json["doomed"]["message"]


def test_wait_for_many_and_time_out_with_exit_3(cli):
    cli.ok("submit", "quick", "--image", IMAGE, *FAST, "--pod-annotation", "kwok.cronoq.io/message=done")
    cli.ok("submit", "stuck", "--image", IMAGE, "--pod-annotation", "kwok.cronoq.io/outcome=Run")
    alone = cli.ok("wait", "quick", "--timeout", "60")
    assert alone.stdout.strip() == "done"
    result = cli("wait", "quick", "stuck", "--timeout", "3s")
    assert result.returncode == 3
    assert "stuck" in one_line_error(result) and "quick" not in result.stderr
    assert result.stdout.strip() == "quick: succeeded done", "what ended in time is still reported"


def test_cancel_by_name_and_by_key(cli, cq):
    cli.ok("submit", "by-name", "--image", IMAGE, "--pod-annotation", "kwok.cronoq.io/outcome=Run")
    cli.ok("submit", "by-key", "--image", IMAGE, "--key", "sync-42", "--pod-annotation", "kwok.cronoq.io/outcome=Run")
    cq.wait_phase("by-key", "Running")
    by_key = cli.ok("cancel", "--key", "sync-42")
    assert by_key.stdout.strip() == "task.cronoq.io/by-key cancel requested"
    assert by_key.stderr.strip() == "1 task cancelled"
    assert cli.ok("cancel", "by-name").stdout.strip() == "task.cronoq.io/by-name cancel requested"
    result = cli("wait", "by-key", "by-name", "--timeout", "60")
    assert result.returncode == 1 and "by-key cancelled" in result.stderr and "by-name cancelled" in result.stderr
    assert cq.status("by-key")["phase"] == "Cancelled"
    assert one_line_error(cli("cancel", "by-name", "--key", "x")).startswith(
        "error: cancel: give task names or filters (--key), not both")


def test_retry_runs_a_new_task_and_describe_prints_its_attempts(cli, cq):
    cli.ok("submit", "etl", "--image", IMAGE, "--max-attempts", "2", *FAST,
           "--pod-annotation", "kwok.cronoq.io/outcome-a1=Fail", "--pod-annotation", "kwok.cronoq.io/outcome-a2=Fail",
           "--pod-annotation", "kwok.cronoq.io/exit-code=4",
           "--pod-annotation", "kwok.cronoq.io/message-a2=timeout talking to db")
    assert cli("wait", "etl").returncode == 1
    retried = cli.ok("retry", "etl", "--max-attempts", "3", "--wait", "--wait-timeout", "90")
    first, *rest = retried.stdout.splitlines()
    assert first.startswith("task.cronoq.io/etl-r-") and first.endswith("created (retry of etl)")
    new = first.split()[0].split("/", 1)[1]
    assert cq.get(new)["metadata"]["labels"]["cronoq.io/retry-of"] == "etl"
    assert cq.status(new)["phase"] == "Succeeded" and cq.status("etl")["phase"] == "DeadLettered"

    described = cli.ok("describe", new).stdout
    assert "Retry of:" in described and "etl" in described
    history = described.split("Attempts:")[1].split("Events:")[0]
    rows = [line.split() for line in history.splitlines() if line.strip()[:1].isdigit()]
    assert [r[:2] for r in rows] == [["1", "First"], ["2", "Retry"], ["3", "Retry"]], described
    assert "Retryable" in rows[0] and "4" in rows[0] and "Success" in rows[2]
    original = cli.ok("describe", "etl").stdout
    assert "Retried as:" in original and new in original and "timeout talking to db" in original


def test_logs_of_an_attempt_and_after_its_job_is_gone(cli, cq):
    cli.ok("submit", "noisy", "--image", IMAGE, "--max-attempts", "2", *FAST,
           "--pod-annotation", "kwok.cronoq.io/outcome-a1=Fail")
    cli.ok("wait", "noisy")
    pods = {p.metadata.labels["cronoq.io/attempt"]: p.metadata.name
            for p in cq.core.list_namespaced_pod(cq.namespace, label_selector="cronoq.io/task=noisy").items}
    expected = list(load_devcluster().POD_LOG_LINES)
    for attempt in ("1", "2"):
        result = cli.ok("logs", "noisy", "--attempt", attempt)
        assert result.stdout.splitlines() == expected, "kwok's ClusterLogs, read through the API server"
        assert f"attempt {attempt}, pod {pods[attempt]}" in result.stderr
    assert f"pod {pods['2']}" in cli.ok("logs", "noisy").stderr, "default: the newest attempt"

    cq.batch.delete_namespaced_job("noisy-a1", cq.namespace, propagation_policy="Foreground")
    first = "cronoq.io/task=noisy,cronoq.io/attempt=1"
    wait_until(lambda: not cq.core.list_namespaced_pod(cq.namespace, label_selector=first).items,
               timeout=30, what="attempt 1's pod gone")
    gone = cli("logs", "noisy", "--attempt", "1")
    assert gone.returncode == 1
    line = one_line_error(gone)
    assert "noisy-a1" in line and "jobRetention" in line
    assert cli("logs", "noisy", "--attempt", "7").returncode == 1


def test_logs_follow_streams_a_running_attempt(cli, cq):
    cli.ok("submit", "live", "--image", IMAGE, "--pod-annotation", "kwok.cronoq.io/outcome=Run")
    cq.wait_phase("live", "Running")
    proc = subprocess.Popen([sys.executable, "-m", "cronoq", "logs", "live", "-f", "-n", cli.namespace,
                             "--kubeconfig", cli.kubeconfig], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().rstrip("\n") for _ in load_devcluster().POD_LOG_LINES]
        assert lines == list(load_devcluster().POD_LOG_LINES)
        assert proc.poll() is None, "still following"
    finally:
        proc.kill()
        proc.wait()


def test_tree_of_a_diamond_with_the_values_passed_and_the_inputs(cli):
    cli.ok("submit", "extract", "--image", IMAGE, *FAST, "--pod-annotation", 'kwok.cronoq.io/message={"rows": 12}')
    cli.ok("submit", "clean", "--image", IMAGE, *FAST, "--depends-on", "extract")
    cli.ok("submit", "enrich", "--image", IMAGE, *FAST, "--depends-on", "extract")
    cli.ok("submit", "load", "--image", IMAGE, *FAST, "--depends-on", "clean", "--depends-on", "enrich:Complete")
    cli.ok("wait", "load", "--timeout", "90")
    lines = cli.ok("tree", "load").stdout.splitlines()
    assert lines[0].split() == ["load", "Succeeded"]
    cells = [line.strip("│├└─ ").split() for line in lines[1:]]
    assert cells == [["clean", "Succeeded"], ["extract", "Succeeded", "→", '{"rows":', "12}"],
                     ["enrich", "Succeeded", "(on", "Complete)"], ["extract", "Succeeded", "→", '{"rows":', "12}"]], lines
    assert lines[2].index("extract") > lines[1].index("clean"), "extract is drawn under clean"
    assert json.loads(cli.ok("inputs", "clean").stdout) == {"extract": {"phase": "Succeeded", "output": {"rows": 12}}}
    assert json.loads(cli.ok("inputs", "load").stdout) == {"clean": {"phase": "Succeeded", "output": None},
                                                           "enrich": {"phase": "Succeeded", "output": None}}


@pytest.mark.parametrize("args, says", [
    (["x", "--image", IMAGE, "--colour", "red"], "unrecognized arguments: --colour red"),
    (["x"], "nothing to run: give an image or a template"),
    (["x", "--image", IMAGE, "--payload", "{not json"], "--payload is not JSON"),
    (["x", "--image", IMAGE, "--pool", "nope"], "TaskPool nope does not exist"),
    (["x", "--image", IMAGE, "--pool", "Bad_Pool"], "pool: String should match pattern"),
    (["x", "--image", IMAGE, "--priority", "ten"], "--priority: invalid int value: 'ten'"),
    (["x", "--image", IMAGE, "--priority", "99999999"], "priority: Input should be less than or equal to"),
    (["x", "--image", IMAGE, "--attempt-timeout", "soon"], "timeout"),
    (["x", "--image", IMAGE, "--env", "NOVALUE"], "--env 'NOVALUE': expected KEY=VALUE"),
    (["x", "--image", IMAGE, "-f", "/dev/null"], "give a manifest (-f) or flags, not both"),
])
def test_bad_input_is_one_line_and_exit_2(cli, cq, args, says):
    result = cli("submit", *args)
    assert result.returncode == 2, result
    assert says in one_line_error(result)
    assert result.stdout == "" and task_names(cq) == []


def test_bad_input_to_other_verbs(cli):
    assert "not a phase" in one_line_error(cli("get", "--phase", "Done"))
    assert "task" in one_line_error(cli("wait", "ghost"))
    assert cli("wait", "ghost").returncode == 2
    assert cli("describe").returncode == 2
    retried = cli("retry", "ghost")
    assert retried.returncode == 2 and "ghost not found" in one_line_error(retried)


def test_get_and_list_formats_and_filters(cli):
    cli.ok("submit", "good", "--image", IMAGE, *FAST, "--key", "k1", "--pod-annotation", "kwok.cronoq.io/message=ok")
    cli.ok("submit", "bad", "--image", IMAGE, *FAST, "--max-attempts", "1",
           "--pod-annotation", "kwok.cronoq.io/outcome=Fail")
    assert cli("wait", "good", "bad").returncode == 1
    table = cli.ok("list").stdout.splitlines()
    assert table[0].split() == ["NAME", "POOL", "STATUS", "ATTEMPT", "AGE", "MESSAGE"]
    assert [r.split()[:4] for r in table[1:]] == [["bad", "default", "DeadLettered", "1"],
                                                 ["good", "default", "Succeeded", "1"]]
    wide = cli.ok("get", "-o", "wide").stdout.splitlines()
    assert "KEY" in wide[0] and "k1" in wide[2]
    assert [r.split()[0] for r in cli.ok("list", "--phase", "dead_lettered").stdout.splitlines()[1:]] == ["bad"]
    doc = json.loads(cli.ok("get", "good", "-o", "json").stdout)
    assert doc["kind"] == "Task" and doc["status"]["output"] == "ok"
    assert json.loads(cli.ok("list", "-o", "json", "--key", "k1").stdout)["items"][0]["metadata"]["name"] == "good"


def test_get_watch_prints_each_change(cli):
    proc = subprocess.Popen([sys.executable, "-m", "cronoq", "get", "-w", "-n", cli.namespace,
                             "--kubeconfig", cli.kubeconfig], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cli.ok("submit", "watched", "--image", IMAGE, *FAST)
        lines = []
        while not any(line.split()[2:3] == ["Succeeded"] for line in lines[1:]):
            lines.append(proc.stdout.readline())
            assert lines[-1], f"get -w ended early: {proc.stderr.read()}"
        assert lines[0].split()[:3] == ["NAME", "POOL", "STATUS"]
        assert all(line.split()[0] == "watched" for line in lines[1:])
    finally:
        proc.kill()
        proc.wait()


def test_installed_as_a_kubectl_plugin(cli, kubectl):
    cli.ok("submit", "plugged", "--image", IMAGE, *FAST)
    bindir = str(Path(sys.executable).parent)
    assert (Path(bindir) / "kubectl-cronoq").exists()
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "KUBECONFIG": cli.kubeconfig}
    result = subprocess.run([kubectl.binary, "cronoq", "wait", "plugged", "-n", cli.namespace, "--timeout", "60"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    bad = subprocess.run([kubectl.binary, "cronoq", "wait"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: kubectl cronoq wait:")
