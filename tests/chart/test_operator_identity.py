"""The chart's RBAC is sufficient: the operator, run locally with a real token of the chart's
ServiceAccount (not the admin), completes a task end to end — cluster-wide RBAC, and with
watchNamespaces. That it is not more than needed is tests/chart/test_rbac.py."""
from __future__ import annotations

import json

import pytest

from tests.chart.identity import service_account_kubeconfig
from tests.support.operator import OperatorProcess
from tests.support.schedules import Schedules
from tests.support.waiting import wait_until
from tests.support.tasks import Cronoq

pytestmark = pytest.mark.cluster

RELEASE = "cronoq"


@pytest.mark.parametrize("mode", ["cluster-wide", "watchNamespaces"])
def test_the_operator_runs_a_task_with_the_charts_identity(mode, api, kubectl, install, namespace, make_namespace,
                                                          tmp_path):
    work = make_namespace("work")
    args = [f"--set-json=watchNamespaces={json.dumps([work])}"] if mode == "watchNamespaces" else []
    install(RELEASE, namespace, *args)
    config = service_account_kubeconfig(kubectl, namespace, RELEASE, tmp_path / "sa.kubeconfig")
    # The leader Lease lives in the release namespace, as in the chart's Deployment, and has the
    # one name the chart's RBAC lets the operator write (the chart's pods are kwok's: they hold nothing).
    proc = OperatorProcess(str(config), (work,), tmp_path / "operator.log", lease=(namespace, "cronoq-leader"))
    proc.start()
    try:
        cq = Cronoq(api, work, proc)
        cq.pool(retry={"maxAttempts": 2, "initialBackoff": "0s"})
        cq.task("as-sa", outcome_a1="Fail", message="done", delay="100ms")
        status = cq.wait_phase("as-sa", "Succeeded", timeout=60)
        assert (status["attempt"], status["output"]) == (2, "done")
        wait_until(lambda: "AttemptEnded" in cq.reasons("as-sa"), timeout=10, what="Events allowed too")
        # A schedule fires under the workload policy, which lets only this identity make a Task
        # owned by a TaskSchedule (issue 26, point 5): the fire's Task is the schedule's.
        schedules = Schedules(cq)
        schedule = schedules.create("tick", every="1s", plays={"delay": "100ms"})
        fired = wait_until(lambda: schedules.tasks("tick"), timeout=30, what="a fire of the schedule")
        (ref,) = fired[0]["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("TaskSchedule", schedule["metadata"]["uid"], True)
        # The chart stamps who created the schedule (the cluster serves MutatingAdmissionPolicy), and
        # its fires are submitted in that name, not the operator's (issue 54).
        who = json.loads(kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]["username"]
        assert schedule["metadata"]["annotations"]["cronoq.io/submitter"] == who
        assert fired[0]["metadata"]["annotations"]["cronoq.io/submitter"] == who
        schedules.patch("tick", {"suspend": True})
        assert "Forbidden" not in proc.log_path.read_text()
    finally:
        proc.stop()
