"""What `helm template` renders, checked object by object (no cluster needed): the operator's
Deployment and security defaults, RBAC that grants exactly what the operator uses, the metrics
objects, the dashboard and the default pool."""
from __future__ import annotations

import json
import re
from dataclasses import fields

import pytest
import yaml

from tests.chart.chart import CHART, DATA, find, only, run_helm

NS = "cronoq-system"
FULLNAME = "cronoq"  # release "cronoq" + chart "cronoq"
DESIGN_METRICS = ("cronoq_tasks_total", "cronoq_attempts_total", "cronoq_stale_completions_total",
                  "cronoq_lease_expirations_total", "cronoq_queue_depth", "cronoq_running_attempts",
                  "cronoq_task_duration_seconds", "cronoq_dispatch_latency_seconds", "cronoq_leader")

# The operator's contract with the API server, (apiGroup, resource, verb): the whole of it, and
# only the calls operator/cronoq/kube/ makes (issue 26: no Lease writes, no events.k8s.io,
# status written by PUT; jobs are patched only to bring their TTL to a changed jobRetention).
NAMESPACED_PERMISSIONS = {
    *{("cronoq.io", r, v) for r in ("tasks", "taskpools", "taskschedules") for v in ("get", "list", "watch")},
    *{("cronoq.io", "tasks", v) for v in ("create", "patch", "delete")},  # fires, Replace's cancel, TTL
    *{("cronoq.io", f"{r}/status", "update") for r in ("tasks", "taskpools", "taskschedules")},
    ("cronoq.io", "tasks/finalizers", "update"),
    *{("batch", "jobs", v) for v in ("get", "list", "watch", "create", "patch", "delete")},
    *{("", "pods", v) for v in ("get", "list", "watch")},
    ("", "events", "create"),
    *{("coordination.k8s.io", "leases", v) for v in ("list", "watch")},
    ("kueue.x-k8s.io", "workloads", "list"),  # why Kueue holds or stopped an attempt's Job (admission.kueue)
    ("kueue.x-k8s.io", "localqueues", "get"),  # the pool's Ready condition names a missing LocalQueue
}
# The leader Lease: create (RBAC cannot name what is created), the rest by name only.
LEASE_PERMISSIONS = {("coordination.k8s.io", "leases", "create"),
                     *{("coordination.k8s.io", "leases", v, "cronoq-leader") for v in ("get", "update")}}
TASK_LEASE_PERMISSIONS = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update", "patch")}
# A pull worker (issues 31, 37, 49): reads its pool's Tasks and the TaskPool, writes Leases (the worker
# policy and the lease guard narrow them to its own); no Job, pod, Secret, Task or status write. It
# serves the pools of its own grant, from a role of its own (none without pools).
WORKER_PERMISSIONS = {*{("cronoq.io", "tasks", v) for v in ("get", "list", "watch")}, ("cronoq.io", "taskpools", "get"),
                      *{("coordination.k8s.io", "leases", v) for v in ("get", "create", "update", "patch", "delete")}}


def permissions(role: dict) -> set[tuple[str, ...]]:
    """(group, resource, verb), with the object's name last when the rule names objects."""
    granted: set[tuple[str, ...]] = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, rule
        names = [(n,) for n in rule.get("resourceNames", [])] or [()]
        granted |= {(g, r, v, *n) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
                    for n in names}
    return granted


def operator_container(objects: list[dict]) -> dict:
    (container,) = only(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    return container


def restricted_violations(pod_spec: dict) -> list[str]:
    """The Pod Security "restricted" rules (v1.30+) a pod spec breaks; the live test proves the
    API server agrees."""
    problems = []
    pod_sc = pod_spec.get("securityContext", {})
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            problems.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c['name']}: allowPrivilegeEscalation not false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            problems.append(f"{c['name']}: capabilities not dropping ALL")
        if set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{c['name']}: adds capabilities")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            problems.append(f"{c['name']}: runAsNonRoot not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            problems.append(f"{c['name']}: runAsUser 0")
        profile = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if profile not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{c['name']}: seccompProfile {profile}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            problems.append(f"{c['name']}: hostPort")
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    for volume in pod_spec.get("volumes", []):
        if set(volume) - {"name"} - allowed_volumes:
            problems.append(f"volume {volume['name']}: {set(volume) - {'name'}}")
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(host):
            problems.append(host)
    return problems


# ---- the operator's Deployment -------------------------------------------------------------

def test_default_deployment_runs_two_replicas_with_leader_election_and_probes(render):
    objects = render()
    deployment = only(objects, "Deployment", FULLNAME)
    assert deployment["spec"]["replicas"] == 2
    container = operator_container(objects)
    args = container["args"]
    assert "--leader-election" in args and f"--lease-namespace={NS}" in args
    assert not any(a.startswith("--namespace") for a in args), "the default watches every namespace"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--metrics-port={ports['metrics']}" in args and f"--probe-port={ports['probes']}" in args
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == only(objects, "ServiceAccount")["metadata"]["name"]
    # A rolling update never leaves the operator without a standby.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_the_operator_reads_the_default_args_as_its_own_defaults_but_for_the_names_the_chart_makes(render):
    """The chart's default values that become flags default to the operator's settings (a value
    that drifted from its flag's default shows here), read by `cronoq operator`'s own parser."""
    from cronoq.cli import parser
    from cronoq.controller.settings import Options, from_flags

    given = from_flags(parser().parse_args(["operator", *operator_container(render())["args"]]))
    differs = {f.name: getattr(given, f.name) for f in fields(Options) if getattr(given, f.name) != getattr(Options(), f.name)}
    assert set(differs) == {"lease_namespace", "lease_guard"}, differs  # the release namespace; its own guard


def test_operator_pod_passes_pod_security_restricted_with_a_read_only_root(render):
    objects = render()
    spec = only(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert restricted_violations(spec) == []
    container = operator_container(objects)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsUser"] == spec["securityContext"]["runAsUser"] == 65532
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == tmp["name"]]
    assert "emptyDir" in volume


def test_restricted_check_catches_a_privileged_operator(render):
    # The check above must be able to fail (values merge over the defaults, so each is set).
    objects = render(set_json={"securityContext": {"privileged": True, "runAsUser": 0, "allowPrivilegeEscalation": True}})
    spec = only(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert {"operator: privileged", "operator: runAsUser 0", "operator: allowPrivilegeEscalation not false"} <= set(restricted_violations(spec))


@pytest.mark.parametrize("sets, image", [
    ({}, "ghcr.io/cronoq/operator:{app}"),
    ({"image.tag": "1.2.3"}, "ghcr.io/cronoq/operator:1.2.3"),
    ({"image.repository": "registry.example/cronoq", "image.digest": "sha256:" + "a" * 64}, "registry.example/cronoq@sha256:" + "a" * 64),
], ids=["app-version", "tag", "digest"])
def test_image_reference_is_configurable_and_is_the_sidecar_image_too(render, sets, image):
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    container = operator_container(render(sets=sets))
    assert container["image"] == image.format(app=app)
    # The heartbeat sidecar runs `cronoq heartbeat` from the operator's own image, tag or digest.
    assert [a for a in container["args"] if a.startswith("--sidecar-image")] == [f"--sidecar-image={image.format(app=app)}"]


def test_pull_policy_and_pull_secrets(render):
    objects = render(sets={"image.pullPolicy": "Always"}, set_json={"imagePullSecrets": ["regcred"]})
    assert operator_container(objects)["imagePullPolicy"] == "Always"
    assert only(objects, "Deployment")["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_watch_namespaces_become_namespace_flags(render):
    args = operator_container(render(set_json={"watchNamespaces": ["a", "b"]}))["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=a", "--namespace=b"]


def test_leader_election_off_needs_a_single_replica(template, render):
    result = template(sets={"operator.leaderElection.enabled": "false"})
    assert result.returncode != 0 and "needs replicaCount 1" in result.stderr
    objects = render(sets={"operator.leaderElection.enabled": "false", "replicaCount": "1"})
    args = operator_container(objects)["args"]
    assert "--no-leader-election" in args and "--leader-election" not in args
    assert not find(objects, "PodDisruptionBudget"), "a PDB over one replica would block every drain"


def test_the_archive_url_comes_from_a_secret_or_a_value_and_a_sqlite_file_from_a_volume(template, render):
    container = operator_container(render())
    assert not any(a.startswith("--archive") for a in container["args"]), "off by default"
    assert "CRONOQ_ARCHIVE" not in {e["name"] for e in container["env"]}

    objects = render(sets={"archive.enabled": "true", "archive.existingSecret": "db", "archive.retention": "48h"})
    container = operator_container(objects)
    assert {"--archive-retention=48h", "--archive-wait=10m"} <= set(container["args"])
    assert not any(a.startswith("--archive-retention-success") for a in container["args"]), "as retention"
    (env,) = [e for e in container["env"] if e["name"] == "CRONOQ_ARCHIVE"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "url"}
    container = operator_container(render(sets={"archive.enabled": "true", "archive.existingSecret": "db",
                                                "archive.retentionSuccess": "72h"}))
    assert {"--archive-retention=720h", "--archive-retention-success=72h"} <= set(container["args"])
    assert template(sets={"archive.retentionSuccess": "3 days"}).returncode != 0, "the schema refuses it"

    result = template(sets={"archive.enabled": "true"})
    assert result.returncode != 0 and "needs archive.url or archive.existingSecret" in result.stderr
    result = template(sets={"archive.enabled": "true", "archive.url": "sqlite:////var/lib/cronoq/archive.db"})
    assert result.returncode != 0 and "a SQLite archive needs replicaCount 1" in result.stderr

    objects = render(sets={"archive.enabled": "true", "archive.url": "sqlite:////var/lib/cronoq/archive.db",
                           "replicaCount": "1", "archive.volume.persistentVolumeClaim.claimName": "cronoq-archive"})
    container = operator_container(objects)
    (env,) = [e for e in container["env"] if e["name"] == "CRONOQ_ARCHIVE"]
    assert env["value"] == "sqlite:////var/lib/cronoq/archive.db"
    assert {"name": "archive", "mountPath": "/var/lib/cronoq"} in container["volumeMounts"]
    volumes = only(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "archive", "persistentVolumeClaim": {"claimName": "cronoq-archive"}} in volumes


def test_pod_disruption_budget_covers_the_operator_pods(render):
    objects = render()
    pdb = only(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert not find(render(sets={"podDisruptionBudget.enabled": "false"}), "PodDisruptionBudget")


# ---- RBAC -------------------------------------------------------------------------------

def test_cluster_wide_rbac_is_exactly_what_the_operator_uses(render):
    objects = render()
    role = only(objects, "ClusterRole", f"{NS}-{FULLNAME}")
    assert permissions(role) == NAMESPACED_PERMISSIONS
    binding = only(objects, "ClusterRoleBinding", f"{NS}-{FULLNAME}")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NS}]
    # The one Role: the leader Lease, in the release namespace.
    assert [r["metadata"]["name"] for r in find(objects, "Role")] == [f"{FULLNAME}-leader-election"]
    assert permissions(only(objects, "Role", f"{FULLNAME}-leader-election", NS)) == LEASE_PERMISSIONS
    assert [b["metadata"]["name"] for b in find(objects, "RoleBinding")] == [f"{FULLNAME}-leader-election"]


def test_no_role_grants_secrets_exec_escalation_or_wildcards(render):
    workers = {"workers": {"grants": [{"serviceAccount": "mail-worker", "pools": ["mail"]}], "namespaces": ["a"]}}
    for values in ({}, {"watchNamespaces": ["a", "b"]}, workers, {**workers, "watchNamespaces": ["a", "b"]}):
        for role in find(render(set_json=values), "ClusterRole") + find(render(set_json=values), "Role"):
            for group, resource, verb, *_ in permissions(role):
                assert "*" not in (group, resource, verb), role["metadata"]["name"]
                assert resource not in ("secrets", "pods/exec", "pods/attach", "pods/log", "serviceaccounts/token"), (resource, verb)
                assert verb not in ("escalate", "bind", "impersonate"), (resource, verb)
                assert group != "rbac.authorization.k8s.io", (group, resource, verb)


def test_watch_namespaces_get_roles_and_nothing_cluster_wide(render):
    objects = render(set_json={"watchNamespaces": ["a", "b"]})
    assert not [r for r in find(objects, "ClusterRole") if r["metadata"]["name"] == f"{NS}-{FULLNAME}"]
    assert not [b for b in find(objects, "ClusterRoleBinding") if b["metadata"]["name"] == f"{NS}-{FULLNAME}"]
    for namespace in ("a", "b"):
        role = only(objects, "Role", FULLNAME, namespace)
        assert permissions(role) == NAMESPACED_PERMISSIONS
        binding = only(objects, "RoleBinding", FULLNAME, namespace)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": FULLNAME}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NS}]
    # The leader Lease lives in the release namespace, which is not watched: a Role for it alone.
    leader = only(objects, "Role", f"{FULLNAME}-leader-election", NS)
    assert permissions(leader) == LEASE_PERMISSIONS


def test_watching_the_release_namespace_still_writes_only_the_leader_lease(render):
    objects = render(set_json={"watchNamespaces": [NS, "b"]})
    assert permissions(only(objects, "Role", f"{FULLNAME}-leader-election", NS)) == LEASE_PERMISSIONS
    assert sorted(r["metadata"]["namespace"] for r in find(objects, "Role", FULLNAME)) == sorted([NS, "b"])
    assert permissions(only(objects, "Role", FULLNAME, NS)) == NAMESPACED_PERMISSIONS


def test_cluster_wide_leader_lease_is_a_role_in_the_lease_namespace(render):
    objects = render(sets={"operator.leaderElection.leaseName": "elect", "operator.leaderElection.leaseNamespace": "le"})
    assert permissions(only(objects, "ClusterRole", f"{NS}-{FULLNAME}")) == NAMESPACED_PERMISSIONS
    assert permissions(only(objects, "Role", f"{FULLNAME}-leader-election", "le")) == {
        ("coordination.k8s.io", "leases", "create"),
        *{("coordination.k8s.io", "leases", v, "elect") for v in ("get", "update")}}
    assert "--lease-name=elect" in operator_container(objects)["args"]
    assert not find(render(sets={"operator.leaderElection.enabled": "false", "replicaCount": "1"}), "Role",
                    f"{FULLNAME}-leader-election")


def test_rbac_create_false_renders_no_rbac(render):
    objects = render(sets={"rbac.create": "false"})
    assert not [o for o in objects if o["apiVersion"].startswith("rbac.authorization.k8s.io")]


def test_cluster_scoped_names_carry_the_release_namespace(render):
    # Two releases of the same name in different namespaces must not fight over a ClusterRole.
    names = {o["metadata"]["name"] for o in render(namespace="one") + render(namespace="two")
             if o["kind"] in ("ClusterRole", "ClusterRoleBinding")}
    assert names == {"one-cronoq", "two-cronoq", "one-cronoq-task-lease", "two-cronoq-task-lease",
                     "one-cronoq-lease-guard-reader", "two-cronoq-lease-guard-reader",
                     "cronoq-view", "cronoq-edit", "cronoq-admin"}  # users' roles: one set per cluster


def test_the_operator_reads_its_own_lease_guard_by_name_and_nothing_else_cluster_wide(render):
    """Issue 37: the operator serves Workers pools only while it sees the lease guard in force."""
    objects = render(namespace="one")
    reader = only(objects, "ClusterRole", "one-cronoq-lease-guard-reader")
    assert permissions(reader) == {("admissionregistration.k8s.io", r, "get", "one-cronoq-lease-guard")
                                   for r in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")}
    assert only(objects, "ValidatingAdmissionPolicy", "one-cronoq-lease-guard")
    (operator,) = [o for o in objects if o["kind"] == "Deployment"]
    assert "--lease-guard=one-cronoq-lease-guard" in operator["spec"]["template"]["spec"]["containers"][0]["args"]
    unguarded = render(namespace="one", sets={"workers.leaseGuard.enabled": "false"})
    assert not find(unguarded, "ClusterRole", "one-cronoq-lease-guard-reader")
    assert not find(unguarded, "ValidatingAdmissionPolicy", "one-cronoq-lease-guard")


def test_task_lease_role_cluster_wide_is_a_cluster_role_bound_only_where_asked(render):
    objects = render()
    role = only(objects, "ClusterRole", f"{NS}-{FULLNAME}-task-lease")
    assert permissions(role) == TASK_LEASE_PERMISSIONS
    assert not find(objects, "RoleBinding", f"{FULLNAME}-task-lease"), "bound nowhere unless asked: a ClusterRoleBinding would reach every namespace"
    assert not find(objects, "ClusterRoleBinding", f"{NS}-{FULLNAME}-task-lease")
    objects = render(set_json={"taskPods": {"leaseRole": {"namespaces": ["jobs"], "serviceAccounts": ["default", "worker"]}}})
    binding = only(objects, "RoleBinding", f"{FULLNAME}-task-lease", "jobs")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{NS}-{FULLNAME}-task-lease"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": n, "namespace": "jobs"}
                                   for n in ("default", "worker", "cronoq-task")]


def test_task_lease_role_with_watch_namespaces_is_a_role_in_each(render):
    objects = render(set_json={"watchNamespaces": ["a", "b"]})
    assert not find(objects, "ClusterRole", f"{NS}-{FULLNAME}-task-lease")
    for namespace in ("a", "b"):
        assert permissions(only(objects, "Role", f"{FULLNAME}-task-lease", namespace)) == TASK_LEASE_PERMISSIONS
        binding = only(objects, "RoleBinding", f"{FULLNAME}-task-lease", namespace)
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "cronoq-task", "namespace": namespace}]
    objects = render(set_json={"watchNamespaces": ["a"], "taskPods": {"leaseRole": {"enabled": False}}})
    # Only the admission policy remains: it narrows whatever lease access task pods are given.
    assert {o["kind"] for o in objects if o["metadata"]["name"].endswith("task-lease")} == {
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


# ---- metrics ---------------------------------------------------------------------------

def test_metrics_service_and_service_monitor_find_the_operator(render):
    objects = render(sets={"metrics.serviceMonitor.enabled": "true"})
    service = only(objects, "Service")
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = only(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True  # per-pool series keep their pool's namespace (issue 26, point 7)
    assert not find(render(), "ServiceMonitor") and not find(render(), "PrometheusRule")


def test_service_monitor_without_the_service_is_refused(template):
    result = template(sets={"metrics.serviceMonitor.enabled": "true", "metrics.service.enabled": "false"})
    assert result.returncode != 0 and "needs metrics.service.enabled" in result.stderr


def alerts(objects: list[dict]) -> dict[str, dict]:
    (group,) = only(objects, "PrometheusRule")["spec"]["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


def test_prometheus_rule_alerts_on_dead_letters_leadership_stale_completions_and_lease_expirations(render):
    rules = alerts(render(sets={"metrics.prometheusRule.enabled": "true"}))
    selector = f'job="{FULLNAME}-metrics",namespace="{NS}"'
    # Per pool and namespace; the series' own namespace label is the pool's, so only the job picks them.
    assert rules["CronoqDeadLettersRising"]["expr"] == (
        f'sum by (namespace, pool) (increase(cronoq_tasks_total{{status="dead_lettered",job="{FULLNAME}-metrics"}}[15m]))'
        ' > 0')
    assert rules["CronoqNoLeader"]["expr"] == f"(max(cronoq_leader{{{selector}}}) == 0) or absent(cronoq_leader{{{selector}}})"
    assert rules["CronoqStaleCompletionsRising"]["expr"] == f"sum(increase(cronoq_stale_completions_total{{{selector}}}[15m])) > 0"
    assert rules["CronoqLeaseExpirationsRising"]["expr"] == f"sum(increase(cronoq_lease_expirations_total{{{selector}}}[15m])) > 0"
    assert rules["CronoqNoLeader"]["labels"]["severity"] == "critical"
    for rule in rules.values():
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"[0-9]+[smh]", rule["for"])
    # Alert templates reach Prometheus unexpanded.
    assert "{{ $labels.namespace }}/{{ $labels.pool }}" in rules["CronoqDeadLettersRising"]["annotations"]["summary"]


def test_prometheus_rule_alerts_can_be_tuned_and_turned_off(render):
    rules = alerts(render(
        sets={"metrics.prometheusRule.enabled": "true", "metrics.prometheusRule.selector": 'cluster="prod"',
              "metrics.prometheusRule.alerts.staleCompletions.enabled": "false",
              "metrics.prometheusRule.alerts.deadLetters.threshold": "5",
              "metrics.prometheusRule.alerts.deadLetters.window": "1h"},
        set_json={"metrics.prometheusRule.alertLabels": {"team": "platform"}}))
    assert set(rules) == {"CronoqDeadLettersRising", "CronoqNoLeader", "CronoqLeaseExpirationsRising"}
    assert rules["CronoqDeadLettersRising"]["expr"] == (
        'sum by (namespace, pool) (increase(cronoq_tasks_total{status="dead_lettered",cluster="prod"}[1h])) > 5')
    assert all(rule["labels"]["team"] == "platform" for rule in rules.values())


def test_dashboard_config_map_has_a_panel_for_every_metric(render):
    objects = render(sets={"metrics.dashboard.enabled": "true"})
    config_map = only(objects, "ConfigMap", f"{FULLNAME}-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["cronoq.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "cronoq.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    missing = [m for m in DESIGN_METRICS if not any(re.search(rf"\b{m}(_bucket)?\b", e) for e in exprs)]
    assert not missing, f"no panel shows {missing}"
    per_pool = [e for e in exprs if re.search(r"cronoq_(queue_depth|running_attempts|tasks_total|attempts_total)", e)]
    assert per_pool and all('namespace=~"$task_namespace"' in e for e in per_pool), per_pool
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert not find(render(), "ConfigMap")


# ---- the default pool ------------------------------------------------------------------

def test_default_pool_is_created_only_when_asked_in_the_release_namespace(render):
    assert not find(render(), "TaskPool")
    pool = only(render(sets={"defaultPool.create": "true", "defaultPool.concurrency": "7"}), "TaskPool")
    assert pool["metadata"] == pool["metadata"] | {"name": "default", "namespace": NS}
    assert pool["spec"]["concurrency"] == 7
    assert pool["spec"]["retry"]["maxAttempts"] == 3 and pool["spec"]["leaseTTL"] == "30s"
    assert "timeout" not in pool["spec"] and "template" not in pool["spec"]


def test_default_pool_carries_retention_by_outcome_only_when_given(render):
    pool = only(render(sets={"defaultPool.create": "true"}), "TaskPool")
    assert pool["spec"]["ttlAfterFinished"] == "24h" and "ttlAfterFailure" not in pool["spec"]
    given = only(render(sets={"defaultPool.create": "true", "defaultPool.ttlAfterSuccess": "1h",
                              "defaultPool.ttlAfterFailure": "168h",
                              "defaultPool.jobRetentionAfterFailure": "168h"}), "TaskPool")["spec"]
    assert (given["ttlAfterSuccess"], given["ttlAfterFailure"], given["jobRetentionAfterFailure"]) == ("1h", "168h", "168h")
    assert "jobRetentionAfterSuccess" not in given


def test_default_pool_follows_watch_namespaces(render):
    objects = render(sets={"defaultPool.create": "true"}, set_json={"watchNamespaces": ["a", "b"]})
    assert sorted(p["metadata"]["namespace"] for p in find(objects, "TaskPool")) == ["a", "b"]


def test_every_feature_at_once(render):
    objects = render(values=[DATA / "all-features.yaml"])
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "ServiceAccount", "Role", "RoleBinding", "Service",
            "ServiceMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget", "TaskPool"} <= kinds
    for o in objects:
        assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "cronoq", o["metadata"]["name"]


# ---- users' roles and the workload policy (issue 26) ------------------------------------

def test_user_roles_aggregate_into_view_edit_admin_with_pool_writes_in_admin_only(render):
    objects = render()
    roles = {level: only(objects, "ClusterRole", f"cronoq-{level}") for level in ("view", "edit", "admin")}
    for level, role in roles.items():
        assert role["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{level}"] == "true"
    read = {("cronoq.io", r, v) for r in ("tasks", "taskschedules", "taskpools", "tasks/status",
                                          "taskschedules/status", "taskpools/status") for v in ("get", "list", "watch")}
    write = {"create", "update", "patch", "delete", "deletecollection"}
    enqueue = {("cronoq.io", r, v) for r in ("tasks", "taskschedules") for v in write}
    assert permissions(roles["view"]) == read
    assert permissions(roles["edit"]) == read | enqueue
    assert permissions(roles["admin"]) == read | enqueue | {("cronoq.io", "taskpools", v) for v in write | {"serve"}}
    assert not find(render(sets={"userRoles.create": "false"}), "ClusterRole", "cronoq-edit")
    unaggregated = only(render(sets={"userRoles.aggregate": "false"}), "ClusterRole", "cronoq-edit")
    assert not [k for k in unaggregated["metadata"]["labels"] if k.startswith("rbac.authorization.k8s.io/")]


def test_workload_policy_exempts_the_operator_and_can_be_switched_off(render):
    policy = only(render(), "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-workloads")
    assert policy["spec"]["failurePolicy"] == "Fail"
    (exempt,) = policy["spec"]["matchConditions"]
    assert exempt["expression"] == f"request.userInfo.username != 'system:serviceaccount:{NS}:{FULLNAME}'"
    binding = only(render(), "ValidatingAdmissionPolicyBinding", f"{NS}-{FULLNAME}-workloads")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert not find(render(sets={"workloadPolicy.enabled": "false"}), "ValidatingAdmissionPolicy",
                    f"{NS}-{FULLNAME}-workloads")
    owners = only(render(), "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-workloads-schedule-owners")
    assert owners["spec"]["matchConditions"] == policy["spec"]["matchConditions"]
    assert owners["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert only(render(), "ValidatingAdmissionPolicyBinding", f"{NS}-{FULLNAME}-workloads-schedule-owners")
    assert not find(render(sets={"workloadPolicy.enabled": "false"}), "ValidatingAdmissionPolicy",
                    f"{NS}-{FULLNAME}-workloads-schedule-owners")


def test_submitter_policy_guards_tasks_and_schedules_and_stamps_where_asked(render):
    """Issue 54: the guard always (with the switch), the stamp where admissionregistration.k8s.io/v1
    MutatingAdmissionPolicy is served (auto), or as told; both exempt the operator."""
    guard = only(render(), "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-submitter")
    (resources,) = guard["spec"]["matchConstraints"]["resourceRules"]
    assert resources["resources"] == ["tasks", "taskschedules"] and resources["operations"] == ["CREATE", "UPDATE"]
    (exempt,) = guard["spec"]["matchConditions"]
    assert exempt["expression"] == f"request.userInfo.username != 'system:serviceaccount:{NS}:{FULLNAME}'"
    assert len(guard["spec"]["validations"]) == 2
    required = only(render(sets={"submitterPolicy.required": "true"}), "ValidatingAdmissionPolicy",
                    f"{NS}-{FULLNAME}-submitter")
    assert len(required["spec"]["validations"]) == 3
    stamp = only(render(sets={"submitterPolicy.stamp": "true"}), "MutatingAdmissionPolicy", f"{NS}-{FULLNAME}-submitter-stamp")
    assert stamp["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert stamp["spec"]["matchConditions"][0] == exempt
    assert only(render(sets={"submitterPolicy.stamp": "true"}), "MutatingAdmissionPolicyBinding",
                f"{NS}-{FULLNAME}-submitter-stamp")["spec"] == {"policyName": stamp["metadata"]["name"]}
    assert not find(render(sets={"submitterPolicy.stamp": "false"}), "MutatingAdmissionPolicy")
    assert not find(render(sets={"submitterPolicy.enabled": "false"}), "ValidatingAdmissionPolicy",
                    f"{NS}-{FULLNAME}-submitter")


def test_task_lease_policy_judges_requests_by_the_task_service_accounts_not_by_label(render):
    objects = render(set_json={"taskPods": {"leaseRole": {"serviceAccounts": ["cronoq-task"], "namespaces": ["jobs"]}}})
    policy = only(objects, "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-task-lease")
    assert "objectSelector" not in policy["spec"]["matchConstraints"]
    requester = policy["spec"]["matchConditions"][0]["expression"]
    assert "split(':')[3] in [\"cronoq-task\"]" in requester and "split(':')[2] in [\"jobs\"]" in requester
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_task_pods_get_a_service_account_of_their_own_which_the_default_pool_runs_as(render):
    objects = render(set_json={"watchNamespaces": ["a"], "defaultPool": {"create": True}})
    account = only(objects, "ServiceAccount", "cronoq-task", "a")
    assert account["metadata"]["labels"]["app.kubernetes.io/component"] == "task-pods"
    assert only(objects, "TaskPool", "default", "a")["spec"]["template"] == {"serviceAccountName": "cronoq-task"}
    # A pool that names its own keeps it; without the chart's account, nothing is set.
    mine = render(set_json={"watchNamespaces": ["a"], "defaultPool": {"create": True,
                                                                       "template": {"serviceAccountName": "mine"}}})
    assert only(mine, "TaskPool", "default", "a")["spec"]["template"] == {"serviceAccountName": "mine"}
    off = render(set_json={"watchNamespaces": ["a"], "defaultPool": {"create": True},
                           "taskPods": {"serviceAccount": {"create": False}}})
    assert not find(off, "ServiceAccount", "cronoq-task") and "template" not in only(off, "TaskPool")["spec"]
    assert not find(off, "RoleBinding", f"{FULLNAME}-task-lease")  # and no other subject by default
    # Cluster-wide without leaseRole.namespaces the chart knows no task namespace: no account.
    assert not find(render(), "ServiceAccount", "cronoq-task")


def test_by_default_only_the_task_service_account_holds_the_lease_role_and_the_operator_uses_it(render):
    """Issue 26, point 2: not every pod running as a namespace's `default` may write Leases; the
    operator runs attempt pods that name no ServiceAccount as the chart's, where it exists."""
    objects = render(set_json={"watchNamespaces": ["a", "b"]})
    for namespace in ("a", "b"):
        binding = only(objects, "RoleBinding", f"{FULLNAME}-task-lease", namespace)
        assert [(s["kind"], s["name"], s["namespace"]) for s in binding["subjects"]] == \
            [("ServiceAccount", "cronoq-task", namespace)]
    args = operator_container(objects)["args"]
    assert [a for a in args if a.startswith("--task-service-account")] == [
        "--task-service-account=cronoq-task", "--task-service-account-namespace=a",
        "--task-service-account-namespace=b"]
    # Cluster-wide, where the chart created it (leaseRole.namespaces), and nowhere without any.
    wide = operator_container(render(set_json={"taskPods": {"leaseRole": {"namespaces": ["jobs"]}}}))["args"]
    assert [a for a in wide if a.startswith("--task-service-account")] == [
        "--task-service-account=cronoq-task", "--task-service-account-namespace=jobs"]
    for values in ({}, {"watchNamespaces": ["a"], "taskPods": {"serviceAccount": {"create": False}}},
                   {"watchNamespaces": ["a"], "taskPods": {"leaseRole": {"enabled": False}}},
                   {"watchNamespaces": ["a"], "rbac": {"create": False}}):
        assert not any(a.startswith("--task-service-account") for a in operator_container(render(set_json=values))["args"])
    # An upgrade that keeps `default` for the attempts still running as it.
    kept = render(set_json={"watchNamespaces": ["a"], "taskPods": {"leaseRole": {"serviceAccounts": ["default"]}}})
    assert [s["name"] for s in only(kept, "RoleBinding", f"{FULLNAME}-task-lease", "a")["subjects"]] == \
        ["default", "cronoq-task"]


# ---- pull workers (issue 31) ---------------------------------------------------------------

def test_worker_role_reads_the_pool_and_writes_leases_where_asked(render):
    assert not [o for o in render() if o["metadata"]["name"].endswith("-worker") or "worker-lease" in o["metadata"]["name"]]
    grants = [{"serviceAccount": "mail-worker", "pools": ["mail"]}, {"serviceAccount": "sms-worker", "pools": ["sms", "sms-bulk"]}]
    objects = render(set_json={"workers": {"grants": grants, "namespaces": ["a", "b"]}})
    role = only(objects, "ClusterRole", f"{NS}-{FULLNAME}-worker")
    assert permissions(role) == WORKER_PERMISSIONS
    for namespace in ("a", "b"):
        binding = only(objects, "RoleBinding", f"{FULLNAME}-worker", namespace)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{NS}-{FULLNAME}-worker"}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": n, "namespace": namespace}
                                       for n in ("mail-worker", "sms-worker")]
    assert not find(objects, "ClusterRoleBinding", f"{NS}-{FULLNAME}-worker")
    # With watchNamespaces (and no workers.namespaces): a Role in each watched namespace.
    objects = render(set_json={"watchNamespaces": ["a"], "workers": {"grants": grants[:1]}})
    assert not find(objects, "ClusterRole", f"{NS}-{FULLNAME}-worker")
    assert permissions(only(objects, "Role", f"{FULLNAME}-worker", "a")) == WORKER_PERMISSIONS
    assert only(objects, "RoleBinding", f"{FULLNAME}-worker", "a")["roleRef"]["kind"] == "Role"
    # Without RBAC the policy still narrows whatever Lease rights the workers are given.
    objects = render(set_json={"rbac": {"create": False}, "workers": {"grants": grants}})
    assert {o["kind"] for o in objects if "worker" in o["metadata"]["name"]} == {
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def serve_grants(objects: list[dict]) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """(namespace, ServiceAccount) -> the `serve` permissions bound to it by the chart's RoleBindings."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    granted: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for binding in (b for b in find(objects, "RoleBinding") if "-worker" in b["metadata"]["name"]):
        ns, ref = binding["metadata"]["namespace"], binding["roleRef"]
        role = roles[(ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"])]
        for subject in binding["subjects"]:
            granted.setdefault((ns, subject["name"]), set()).update(p for p in permissions(role) if p[2] == "serve")
    return granted


def test_each_worker_serves_the_pools_of_its_own_grant_and_none_without(render):
    """Issue 49, finding 7: grants per worker, closed by default."""
    grants = [{"serviceAccount": "thumbs-worker", "pools": ["thumbs"]}, {"serviceAccount": "idle-worker"},
              {"serviceAccount": "empty-worker", "pools": []}, {"serviceAccount": "any-worker", "pools": ["*"]}]
    for extra in ({"workers": {"grants": grants, "namespaces": ["a"]}},
                  {"workers": {"grants": grants}, "watchNamespaces": ["a"]}):
        objects = render(set_json=extra)
        served = serve_grants(objects)
        assert served[("a", "thumbs-worker")] == {("cronoq.io", "taskpools", "serve", "thumbs")}
        assert served[("a", "idle-worker")] == set() and served[("a", "empty-worker")] == set()
        assert served[("a", "any-worker")] == {("cronoq.io", "taskpools", "serve")}  # every pool, asked for
        # Never a serve rule with an empty resourceNames (RBAC reads it as every name).
        for role in find(objects, "Role") + find(objects, "ClusterRole"):
            assert all(rule.get("resourceNames", None) != [] for rule in role["rules"]), role["metadata"]["name"]
    # Cluster-wide with no worker namespaces: the ClusterRoles alone, bound by nobody.
    objects = render(set_json={"workers": {"grants": grants}})
    assert permissions(only(objects, "ClusterRole", f"{NS}-{FULLNAME}-worker-serve-thumbs-worker")) == {
        ("cronoq.io", "taskpools", "serve", "thumbs")}
    assert not find(objects, "ClusterRole", f"{NS}-{FULLNAME}-worker-serve-idle-worker")
    assert not [b for b in find(objects, "RoleBinding") if "worker" in b["metadata"]["name"]]
    # The worker policy still judges every granted ServiceAccount, with pools or not.
    policy = only(objects, "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-worker-lease")
    assert '["thumbs-worker","idle-worker","empty-worker","any-worker"]' in policy["spec"]["matchConditions"][0]["expression"]


def notes(helm_binary, workers: dict) -> str:
    """The release notes (NOTES.txt) an install with these worker values prints, without a cluster."""
    done = run_helm(helm_binary, "install", "cronoq", str(CHART), "--dry-run=client", f"--namespace={NS}",
                    f"--set-json=workers={json.dumps(workers)}")
    return done.stdout.split("NOTES:", 1)[1]


def test_values_of_before_grants_keep_working_and_say_what_changed(render, helm_binary):
    """Upgrading with workers.serviceAccounts and workers.pools: read as one grant each, with the
    same pools as before (every pool when workers.pools is empty), and the notes say so."""
    served = serve_grants(render(set_json={"workers": {"serviceAccounts": ["mail-worker"], "pools": ["mail", "sms"],
                                                       "namespaces": ["a"]}}))
    assert served == {("a", "mail-worker"): {("cronoq.io", "taskpools", "serve", p) for p in ("mail", "sms")}}
    served = serve_grants(render(set_json={"workers": {"serviceAccounts": ["mail-worker"], "namespaces": ["a"]}}))
    assert served == {("a", "mail-worker"): {("cronoq.io", "taskpools", "serve")}}
    said = notes(helm_binary, {"serviceAccounts": ["mail-worker"]})
    assert "workers.serviceAccounts and workers.pools are replaced by workers.grants" in said
    assert '- serviceAccount: mail-worker\n    pools: ["*"]   # every pool' in said, said
    assert "replaced by workers.grants" not in notes(helm_binary, {"grants": [{"serviceAccount": "m", "pools": ["mail"]}]})
    assert "ServiceAccount idle-worker is granted no pool" in notes(helm_binary, {"grants": [{"serviceAccount": "idle-worker"}]})


def test_the_grants_the_docs_show_render_as_they_say(render):
    """The `workers.grants` values of docs/operating/ (install.md, upgrades.md), rendered."""
    blocks = [m.group(1) for page in sorted((CHART.parents[1] / "docs" / "operating").glob("*.md"))
              for m in re.finditer(r"```yaml\n(workers:\n  grants:.*?)```", page.read_text(), re.S)]
    assert len(blocks) >= 2, blocks
    for block in blocks:
        values = yaml.safe_load(block)
        values["workers"]["namespaces"] = ["a"]
        served = serve_grants(render(set_json=values))
        for grant in values["workers"]["grants"]:
            assert served[("a", grant["serviceAccount"])] == {("cronoq.io", "taskpools", "serve", p) for p in grant["pools"]}


@pytest.mark.parametrize("workers, says", [
    ({"grants": [{"serviceAccount": "a", "pools": ["x"]}], "serviceAccounts": ["b"]},
     "workers.grants replaces workers.serviceAccounts and workers.pools"),
    ({"grants": [{"serviceAccount": "a", "pools": ["x"]}], "pools": ["y"]}, "workers.grants replaces"),
    ({"grants": [{"serviceAccount": "a", "pools": ["x"]}, {"serviceAccount": "a", "pools": ["y"]}]},
     "ServiceAccount a is granted twice"),
    ({"grants": [{"serviceAccount": "a", "pools": ["*", "x"]}]}, "and named pools too"),
    ({"grants": [{"pools": ["x"]}]}, "serviceAccount"),
], ids=["with-service-accounts", "with-pools", "twice", "star-and-names", "unnamed"])
def test_grants_that_cannot_mean_one_thing_are_refused(template, workers, says):
    done = template(set_json={"workers": workers})
    assert done.returncode != 0 and says in done.stderr, done.stderr


def test_worker_policy_judges_requests_by_the_worker_service_accounts(render):
    objects = render(set_json={"workers": {"serviceAccounts": ["mail-worker"], "namespaces": ["jobs"]}})
    policy = only(objects, "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-worker-lease")
    assert "objectSelector" not in policy["spec"]["matchConstraints"]
    requester, operator = (c["expression"] for c in policy["spec"]["matchConditions"])
    assert "split(':')[3] in [\"mail-worker\"]" in requester and "split(':')[2] in [\"jobs\"]" in requester
    assert operator == f"request.userInfo.username != 'system:serviceaccount:{NS}:{FULLNAME}'"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert {v["reason"] for v in policy["spec"]["validations"]} == {"Forbidden"}
    binding = only(objects, "ValidatingAdmissionPolicyBinding", f"{NS}-{FULLNAME}-worker-lease")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_a_worker_service_account_that_is_a_task_one_too_is_refused(template, render):
    for account, lease_role in (("cronoq-task", []), ("default", ["default"])):
        done = template(set_json={"workers": {"grants": [{"serviceAccount": account, "pools": ["mail"]}]},
                                  "taskPods": {"leaseRole": {"serviceAccounts": lease_role}}})
        assert done.returncode != 0 and f"workers.grants: {account} is a task ServiceAccount too" in done.stderr
    # Without the task lease policy there is nothing to contradict.
    assert render(set_json={"workers": {"grants": [{"serviceAccount": "default"}]},
                            "taskPods": {"leasePolicy": {"enabled": False}}})


# ---- the keys the operator reads (issue 49) ---------------------------------------------------

def test_the_guards_protect_every_key_of_the_protocol(render):
    """The lease guard and the key guard match objects by the keys of cronoq.pod_protocol's one
    list (generated into templates/_protected_keys.tpl), so a key added there is guarded at once."""
    from cronoq.pod_protocol import PROTECTED_ANNOTATIONS, PROTECTED_LABELS

    objects = render()
    lease = only(objects, "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-lease-guard")
    keys = only(objects, "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-key-guard")
    for policy in (lease, keys):
        (carries,) = [c["expression"] for c in policy["spec"]["matchConditions"] if c["name"] == "carries-cronoqs-keys"]
        assert json.dumps(list(PROTECTED_LABELS)) in carries and json.dumps(list(PROTECTED_ANNOTATIONS)) in carries
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert {v["reason"] for v in policy["spec"]["validations"]} == {"Forbidden"}
        (operator,) = [c["expression"] for c in policy["spec"]["matchConditions"] if c["name"] == "not-the-operator"]
        assert operator == f"request.userInfo.username != 'system:serviceaccount:{NS}:{FULLNAME}'"
    assert {(r["apiGroups"][0], r["resources"][0], tuple(r["operations"]))
            for r in keys["spec"]["matchConstraints"]["resourceRules"]} == {
        ("batch", "jobs", ("CREATE", "UPDATE")), ("", "pods", ("CREATE", "UPDATE"))}
    binding = only(objects, "ValidatingAdmissionPolicyBinding", f"{NS}-{FULLNAME}-key-guard")
    assert binding["spec"] == {"policyName": keys["metadata"]["name"], "validationActions": ["Deny"]}
    assert not find(render(sets={"workloadPolicy.enabled": "false"}), "ValidatingAdmissionPolicy", f"{NS}-{FULLNAME}-key-guard")
