{{/* Names, labels and the operator's RBAC rules, shared by the templates. */}}

{{- define "cronoq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or the release name alone when it already contains the chart name. */}}
{{- define "cronoq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects carry the release namespace in their name, so that two releases
of the same name in different namespaces do not collide. */}}
{{- define "cronoq.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "cronoq.fullname" .) -}}
{{- end -}}

{{- define "cronoq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cronoq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cronoq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cronoq.labels" -}}
helm.sh/chart: {{ include "cronoq.chart" . }}
{{ include "cronoq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cronoq
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "cronoq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cronoq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cronoq.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "cronoq.leaseNamespace" -}}
{{- default .Release.Namespace .Values.operator.leaderElection.leaseNamespace -}}
{{- end -}}

{{- define "cronoq.metricsServiceName" -}}
{{- printf "%s-metrics" (include "cronoq.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* PromQL label matchers selecting this release's series. */}}
{{- define "cronoq.promSelector" -}}
{{- if .Values.metrics.prometheusRule.selector -}}
{{- .Values.metrics.prometheusRule.selector -}}
{{- else -}}
{{- printf "job=%q,namespace=%q" (include "cronoq.metricsServiceName" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Selector of the per-pool series (cronoq_tasks_total and the like) in alert rules: their own
`namespace` label is the pool's (the ServiceMonitor honours it), so only the job picks them. */}}
{{- define "cronoq.promPoolSelector" -}}
{{- if .Values.metrics.prometheusRule.selector -}}
{{- .Values.metrics.prometheusRule.selector -}}
{{- else -}}
{{- printf "job=%q" (include "cronoq.metricsServiceName" .) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces the task-pod lease role is bound in (a JSON list). */}}
{{- define "cronoq.leaseRoleNamespaces" -}}
{{- $ns := .Values.taskPods.leaseRole.namespaces | default .Values.watchNamespaces | default list -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{/* ServiceAccounts of task pods (names, a JSON list): those listed, and the chart's own. */}}
{{- define "cronoq.taskServiceAccounts" -}}
{{- $accounts := .Values.taskPods.leaseRole.serviceAccounts | default list -}}
{{- if .Values.taskPods.serviceAccount.create -}}
{{- $accounts = append $accounts .Values.taskPods.serviceAccount.name -}}
{{- end -}}
{{- toJson (uniq $accounts) -}}
{{- end -}}

{{/* Namespaces the default TaskPool is created in (a JSON list). */}}
{{- define "cronoq.defaultPoolNamespaces" -}}
{{- $ns := .Values.defaultPool.namespaces | default .Values.watchNamespaces | default (list .Release.Namespace) -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{/*
What the operator does in the namespaces it watches, and nothing more: only the calls its code
makes (operator/cronoq/kube/). No secrets, no pods/exec or pods/log, no escalate or bind, no
Lease writes (attempt Leases are created and renewed by task pods, deleted with their Task).
Tasks are created, and their spec patched (cancel), only for TaskSchedules.
*/}}
{{- define "cronoq.namespacedRules" -}}
# Tasks and pools are read; finished tasks are deleted when their ttlAfterFinished passes.
# Each fire of a TaskSchedule creates a Task (history limits delete finished ones, as above);
# concurrencyPolicy Replace cancels the unfinished one with a patch of spec.cancel.
- apiGroups: ["cronoq.io"]
  resources: ["tasks"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["cronoq.io"]
  resources: ["taskpools", "taskschedules"]
  verbs: ["get", "list", "watch"]
# Status is written whole, with the read resourceVersion as precondition (PUT).
- apiGroups: ["cronoq.io"]
  resources: ["tasks/status", "taskpools/status", "taskschedules/status"]
  verbs: ["update"]
# Jobs are owned by their Task with blockOwnerDeletion, which clusters running the
# OwnerReferencesPermissionEnforcement admission plugin allow only with update on tasks/finalizers.
- apiGroups: ["cronoq.io"]
  resources: ["tasks/finalizers"]
  verbs: ["update"]
# One Job per attempt: created, read back when it exists already, deleted to abort the attempt,
# and patched (spec.ttlSecondsAfterFinished only) when the jobRetention in effect changes.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Kueue's objects are only read (pools with admission.kueue): why Kueue holds or stopped an attempt's Job
# (its Workload), and whether the pool's LocalQueue exists and is active (the pool's Ready condition).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["localqueues"]
  verbs: ["get"]
# Attempt pods are only observed (start time, termination state); never exec'd or logged.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# One core/v1 Event per attempt that ends.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Attempt Leases (renewed by task pods) are only watched.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["list", "watch"]
{{- if .Values.notifications.enabled }}
# Notifications: a receiver's signingKey (the HMAC key) is read from its Secret, by name, when a
# notification is sent; never listed or watched.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end -}}

{{/* Leader election: its one Lease, by name, in the lease namespace. RBAC cannot name the
object of a create, so create is on leases there; the Lease name is fixed by the chart. */}}
{{- define "cronoq.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Values.operator.leaderElection.leaseName | quote }}]
  verbs: ["get", "update"]
{{- end -}}

{{/* Task pods create their attempt's Lease at its first renewal, then renew it; never delete. */}}
{{- define "cronoq.taskLeaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update", "patch"]
{{- end -}}

{{/* Namespaces pull workers are bound in (a JSON list): workers.namespaces, else watchNamespaces. */}}
{{- define "cronoq.workerNamespaces" -}}
{{- $ns := .Values.workers.namespaces | default .Values.watchNamespaces | default list -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{/* Pull workers' grants, a JSON list of {"serviceAccount": name, "pools": [pool, ...]}: which
ServiceAccount serves which pools (the `serve` verb on those TaskPools, which the lease guard asks
the authorizer about). workers.grants, closed by default: a grant without pools serves none, and
["*"] is every pool of the worker namespaces. Values of before grants (workers.serviceAccounts,
workers.pools) are read as one grant per ServiceAccount with workers.pools, or ["*"] when it is
empty, as they meant then (NOTES.txt says so at each install and upgrade). */}}
{{- define "cronoq.workerGrants" -}}
{{- $grants := list -}}
{{- $legacy := or .Values.workers.serviceAccounts .Values.workers.pools -}}
{{- if and .Values.workers.grants $legacy -}}
{{- fail "workers.grants replaces workers.serviceAccounts and workers.pools: move each ServiceAccount of workers.serviceAccounts into workers.grants with the pools it serves (e.g. --set-json 'workers.grants=[{\"serviceAccount\":\"thumbs-worker\",\"pools\":[\"thumbs\"]}]') and set workers.serviceAccounts and workers.pools to []" -}}
{{- end -}}
{{- if .Values.workers.grants -}}
{{- $seen := list -}}
{{- range .Values.workers.grants -}}
{{- $account := required "workers.grants: each grant names its serviceAccount" .serviceAccount -}}
{{- if has $account $seen -}}
{{- fail (printf "workers.grants: ServiceAccount %s is granted twice: list all the pools it serves in one grant" $account) -}}
{{- end -}}
{{- $seen = append $seen $account -}}
{{- $pools := uniq (.pools | default list) -}}
{{- if and (has "*" $pools) (gt (len $pools) 1) -}}
{{- fail (printf "workers.grants: ServiceAccount %s is granted \"*\" (every pool) and named pools too: keep one or the other" $account) -}}
{{- end -}}
{{- $grants = append $grants (dict "serviceAccount" $account "pools" $pools) -}}
{{- end -}}
{{- else -}}
{{- range uniq (.Values.workers.serviceAccounts | default list) -}}
{{- $grants = append $grants (dict "serviceAccount" . "pools" (uniq ($.Values.workers.pools | default (list "*")))) -}}
{{- end -}}
{{- end -}}
{{- toJson $grants -}}
{{- end -}}

{{/* ServiceAccounts of pull workers (names, a JSON list): those of the grants, with pools or not. */}}
{{- define "cronoq.workerServiceAccounts" -}}
{{- $accounts := list -}}
{{- range include "cronoq.workerGrants" . | fromJsonArray -}}
{{- $accounts = append $accounts .serviceAccount -}}
{{- end -}}
{{- toJson $accounts -}}
{{- end -}}

{{/* A pull worker (`delivery: Workers`) reads its pool's Tasks and its TaskPool and writes its own
Lease and its attempts' Leases (reports included); the worker policy and the lease guard narrow the
Leases to its own. Which pools it may serve is its grant's (cronoq.workerServeRules). Never a Task,
a Job, a pod or a Secret. */}}
{{- define "cronoq.workerRules" -}}
- apiGroups: ["cronoq.io"]
  resources: ["tasks"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["cronoq.io"]
  resources: ["taskpools"]
  verbs: ["get"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update", "patch", "delete"]
{{- end -}}

{{/* The `serve` verb on a grant's pools (the grant is the context): on those TaskPools by name, or
on every TaskPool for ["*"]. Never used for a grant without pools: RBAC reads an empty
resourceNames as every name. */}}
{{- define "cronoq.workerServeRules" -}}
- apiGroups: ["cronoq.io"]
  resources: ["taskpools"]
  verbs: ["serve"]
  {{- if not (has "*" .pools) }}
  resourceNames: {{ toJson .pools }}
  {{- end }}
{{- end -}}

{{/* Admission-policy variables naming the requester's pod: `pod`, from a pod-bound token's
pod-name claim ('' without one), and `own`, the prefix its worker names must have (the pod name
cut to 56 characters, trailing dashes and dots trimmed: cronoq.worker.serve's worker_name). */}}
{{- define "cronoq.podNameVariables" -}}
- name: pod
  expression: >-
    has(request.userInfo.extra) && 'authentication.kubernetes.io/pod-name' in request.userInfo.extra &&
    size(request.userInfo.extra['authentication.kubernetes.io/pod-name']) == 1 ?
    string(request.userInfo.extra['authentication.kubernetes.io/pod-name'][0]) : ''
- name: own
  expression: >-
    (variables.pod.size() > 56 ? variables.pod.substring(0, 56) : variables.pod).find('^.*[a-z0-9]')
{{- end -}}
