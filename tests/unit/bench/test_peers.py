"""The pure parts of the bench's peer comparison (issue 28): the pinned versions and binaries of the
peers' build modules, the objects made for Kueue and Argo, the observer's Workflow and Job-start
milestones, and the four-way figures and goals."""
from __future__ import annotations

from typing import Any

import pytest

from bench import fourway, peers
from bench.observer import Milestones


def test_the_build_modules_pin_the_peers_and_name_their_controllers():
    assert peers.version("kueue", peers.KUEUE_MODULE) == "v0.17.0"
    assert peers.version("argo", peers.ARGO_MODULE).startswith("v3.7.")
    assert peers.peer_component("kueue").binaries() == ["kueue"]
    assert peers.peer_component("argo").binaries() == ["workflow-controller"]
    assert peers.peer_component("argo").module == peers.PEERS / "argo"
    assert peers.peer_component("kueue").cache_dir.name.startswith("kueue-")


def test_pinned_version_reads_a_require_line_or_block_and_names_what_is_missing():
    go_mod = "module x\n\nrequire example.com/a v1.2.3\nrequire (\n\texample.com/b v0.4.0 // indirect\n)\n"
    assert peers.pinned_version(go_mod, "example.com/a") == "v1.2.3"
    assert peers.pinned_version(go_mod, "example.com/b") == "v0.4.0"
    with pytest.raises(ValueError, match="example.com/c"):
        peers.pinned_version(go_mod, "example.com/c")


def _job() -> dict[str, Any]:
    return {"metadata": {"name": "k-00001"}, "spec": {"template": {"spec": {"containers": [{"name": "task"}]}}}}


def test_a_kueue_job_is_suspended_queued_and_asks_for_the_cpu_the_quota_counts():
    original = _job()
    job = peers.kueue_job(original, "q", priority_class="high")
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": "high"}
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "10m"}}
    assert "suspend" not in original["spec"], "the bare Job is left as it was"


def test_kueue_runs_without_webhooks_certificates_or_leader_election_on_ports_of_its_own():
    config = peers.kueue_config(health_port=1, metrics_port=2, webhook_port=3, cert_dir="/c")
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": "/c"}
    assert config["metrics"]["bindAddress"] == "127.0.0.1:2"
    cq = dict(peers.kueue_queues("q", "ns", "500m"))
    quota = cq["/apis/kueue.x-k8s.io/v1beta2/clusterqueues"]["spec"]["resourceGroups"][0]["flavors"][0]
    assert quota["resources"] == [{"name": "cpu", "nominalQuota": "500m"}]
    assert cq["/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues"]["spec"] == {"clusterQueue": "q"}
    assert len(peers.kueue_queues("q", None, "500m")) == 2, "no namespace, no LocalQueue (cronoq-kueue makes its own)"


def test_an_argo_workflow_is_one_container_step_whose_pod_kwok_plays():
    flow = peers.argo_workflow("w-1", "img", {"kwok.cronoq.io/delay": "0s"})
    assert flow["spec"]["entrypoint"] == "main"
    assert flow["spec"]["templates"] == [{"name": "main", "container": {"image": "img", "command": ["/task"]}}]
    assert flow["spec"]["podMetadata"] == {"annotations": {"kwok.cronoq.io/delay": "0s"}}


def test_the_observer_notes_workflow_phases_once_and_counts_terminal_ones():
    seen = Milestones()
    seen.on_workflow({"metadata": {"name": "w"}, "status": {}}, 1.0)
    seen.on_workflow({"metadata": {"name": "w"}, "status": {"phase": "Running"}}, 2.0)
    seen.on_workflow({"metadata": {"name": "w"}, "status": {"phase": "Running"}}, 3.0)
    seen.on_workflow({"metadata": {"name": "w"}, "status": {"phase": "Succeeded"}}, 4.0)
    seen.on_workflow({"metadata": {"name": "w"}, "status": {"phase": "Succeeded"}}, 5.0)
    assert seen.workflows["w"] == {"added": 1.0, "phases": {"Running": 2.0, "Succeeded": 4.0}, "terminal": "Succeeded"}
    assert seen.progress()["workflows_done"] == 1


def test_the_observer_notes_when_a_job_first_has_a_start_time():
    seen = Milestones()
    seen.on_job({"metadata": {"name": "j"}, "spec": {"suspend": True}}, 1.0)
    seen.on_job({"metadata": {"name": "j"}, "status": {"startTime": "t"}}, 2.0)
    seen.on_job({"metadata": {"name": "j"}, "status": {"startTime": "t"}}, 3.0)
    assert seen.jobs["j"]["started"] == 2.0


def _run(n: int, throughput: float, apiserver: float, writes: float, controller: float, done: int | None = None,
         **extra: Any) -> dict[str, Any]:
    return {"n": n, "throughput": throughput, "succeeded": n if done is None else done, "timed_out": False,
            "latency": {"to_running": {"p50": 0.5}, "to_succeeded": {"p50": 1.0, "p99": 2.0}},
            "cluster_cpu_seconds": {"kube-apiserver": apiserver, "etcd": 10.0},
            "api": {"writes_per_task": writes, "requests_per_task": writes + 1},
            "operator": {"cpu_seconds": controller, "rss_peak": 2**20}, **extra}


def test_figures_are_per_item_and_a_run_with_failures_is_marked_incomplete():
    f = fourway.figures("kueue", _run(100, 5.0, apiserver=20.0, writes=4.0, controller=3.0))
    assert (f.apiserver_ms, f.etcd_ms, f.controller_ms, f.writes) == (200.0, 100.0, 30.0, 4.0)
    assert f.complete and f.name == "Kueue"
    assert not fourway.figures("argo", _run(100, 5.0, 20.0, 4.0, 3.0, done=99)).complete
    baseline = {"n": 100, "throughput": 9.0, "completed": 100, "timed_out": False, "latency": {},
                "cluster_cpu_seconds": {"kube-apiserver": 10.0}}
    assert fourway.figures("baseline", baseline).controller_ms is None


def test_the_goals_compare_cronoq_with_each_peer_and_the_faster_ones_throughput():
    results = {"throughput": [{"n": 100, "baseline": None,
                               "cronoq": _run(100, 8.0, apiserver=20.0, writes=4.0, controller=5.0),
                               "kueue": _run(100, 9.0, apiserver=25.0, writes=6.0, controller=4.0),
                               "argo": _run(100, 3.0, apiserver=40.0, writes=9.0, controller=9.0)}]}
    verdicts = {v.target: v for v in fourway.goals(results)}
    assert verdicts["N=100: API-server CPU per item below Kueue's and Argo's"].met is True
    assert verdicts["N=100: writes per item below Kueue's and Argo's"].met is True
    assert verdicts["N=100: controller CPU per item below Kueue's and Argo's"].met is False
    fastest = verdicts["N=100: throughput ≥ the faster peer's"]
    assert fastest.met is False and fastest.measured == "8.0/s vs Kueue 9.0/s"


def test_goals_are_not_judged_when_a_cronoq_task_needed_a_second_attempt():
    retried = {**_run(100, 8.0, 20.0, 4.0, 5.0), "succeeded_first_attempt": 99}
    results = {"throughput": [{"n": 100, "cronoq": retried, "kueue": _run(100, 3.0, 40.0, 9.0, 9.0)}]}
    (verdict,) = fourway.goals(results)
    assert verdict.met is None and verdict.measured.startswith("cronoq did not finish")
    assert fourway.figures("cronoq", {**retried, "succeeded_first_attempt": 100}).complete


def test_goals_are_not_judged_on_a_run_that_did_not_finish():
    results = {"throughput": [{"n": 100, "cronoq": _run(100, 8.0, 20.0, 4.0, 5.0),
                               "argo": _run(100, 3.0, 40.0, 9.0, 9.0, done=50)}]}
    (verdict,) = fourway.goals(results)
    assert verdict.met is None and "Argo Workflows" in verdict.measured


def test_the_range_check_skips_the_peers_paced_runs_and_the_table_lists_them():
    from bench.ranges import figures
    kueue_paced = {**_run(30, 2.5, 20.0, 4.0, 3.0), "system": "kueue", "label": "paced", "paced_rate": 2.5}
    cronoq_paced = {**_run(30, 2.5, 20.0, 4.0, 3.0), "label": "paced", "paced_rate": 2.5,
                    "latency": {"to_job": {"p50": 0.01, "p99": 0.1}, "to_succeeded": {}}}
    results = {"throughput": [], "paced": [cronoq_paced, kueue_paced]}
    assert list(figures(results)) == [("paced.dispatch_p50_s", "N=30 at 2.5/s", 0.01),
                                      ("paced.dispatch_p99_s", "N=30 at 2.5/s", 0.1)]
    assert [(f.system, f.label, f.rate) for f in fourway.table(results)] == [("cronoq", "paced", 2.5),
                                                                             ("kueue", "paced", 2.5)]


def test_cronoq_through_kueue_counts_both_controllers_cpu_per_item():
    from bench import fourway

    run = {"n": 10, "succeeded": 10, "succeeded_first_attempt": 10, "throughput": 5.0, "kueue_cpu_seconds": 0.5,
           "operator": {"cpu_seconds": 1.0, "rss_peak": 1}, "api": {"writes_per_task": 3.0}}
    both = fourway.figures("cronoq_kueue", run)
    assert both.controller_ms == 150.0 and both.complete and both.name == "cronoq through Kueue"
    assert fourway.figures("cronoq", {**run, "kueue_cpu_seconds": 0}).controller_ms == 100.0
    assert [f.system for f in fourway.table({"throughput": [{"cronoq_kueue": run, "kueue": run}]})] == \
        ["kueue", "cronoq_kueue"]
